//! How every fs method resolves awkward paths — a trailing `/`, a trailing
//! `/.`, `..` components, a symlink as the last component — directly and
//! through a sandboxed fs-helper, each case pinned by comparing the disk
//! before and after (README "Paths"). The rule under test: paths resolve as
//! the kernel resolves them (`..` is physical), a trailing `/` names what a
//! final symlink points to, and the methods that delete or create entries
//! (`fs/remove`, the destination of `fs/copy`) never act through a symlink.

use std::path::{Path, PathBuf};

use crate::common::fs::{
    b64, canonical, restricted, sandbox, sandbox_available, snapshot, unb64, workdir, Client,
    Server,
};
use serde_json::{json, Value};

type Snapshot = Vec<(String, Vec<u8>)>;
/// Checks a successful answer; gets the case's root.
type AnswerCheck = Box<dyn Fn(&Value, &Path)>;
/// Turns the snapshot before into the one expected after.
type DiskChange = Box<dyn Fn(&mut Snapshot, &Path)>;

/// Builds the tree every case starts from, under `p`:
///
/// ```text
/// work/dir/f          "f"
/// work/file           "file"
/// work/link     ->    p/target
/// work/flink    ->    p/work/file
/// work/dangling ->    p/work/nowhere
/// target/t1           "t1"
/// target/sub/t2       "t2"
/// ```
fn fixture(p: &Path) {
    std::fs::create_dir_all(p.join("work/dir")).unwrap();
    std::fs::create_dir_all(p.join("target/sub")).unwrap();
    std::fs::write(p.join("work/dir/f"), b"f").unwrap();
    std::fs::write(p.join("work/file"), b"file").unwrap();
    std::fs::write(p.join("target/t1"), b"t1").unwrap();
    std::fs::write(p.join("target/sub/t2"), b"t2").unwrap();
    std::os::unix::fs::symlink(p.join("target"), p.join("work/link")).unwrap();
    std::os::unix::fs::symlink(p.join("work/file"), p.join("work/flink")).unwrap();
    std::os::unix::fs::symlink(p.join("work/nowhere"), p.join("work/dangling")).unwrap();
}

/// `p` joined with `rel`, keeping `rel`'s trailing `/` or `/.` (which
/// `Path::join` would keep too, but spelled out for the reader).
fn at(p: &Path, rel: &str) -> String {
    format!("{}/{rel}", p.display())
}

enum Outcome {
    Ok(AnswerCheck),
    Err { code: i64, texts: Vec<String> },
}

struct Case {
    name: &'static str,
    method: &'static str,
    params: Box<dyn Fn(&Path) -> Value>,
    setup: Box<dyn Fn(&Path)>,
    outcome: Outcome,
    change: DiskChange,
}

fn case(
    name: &'static str,
    method: &'static str,
    params: impl Fn(&Path) -> Value + 'static,
) -> Case {
    Case {
        name,
        method,
        params: Box::new(params),
        setup: Box::new(|_| {}),
        outcome: Outcome::Ok(Box::new(|_, _| {})),
        change: Box::new(|_, _| {}),
    }
}

impl Case {
    /// Fails with `code`, the message containing each of `texts` (`{p}`
    /// stands for the case's root).
    fn fails(mut self, code: i64, texts: &[&str]) -> Self {
        self.outcome = Outcome::Err {
            code,
            texts: texts.iter().map(|t| (*t).to_owned()).collect(),
        };
        self
    }
    fn answers(mut self, check: impl Fn(&Value, &Path) + 'static) -> Self {
        self.outcome = Outcome::Ok(Box::new(check));
        self
    }
    fn changes(mut self, change: impl Fn(&mut Snapshot, &Path) + 'static) -> Self {
        self.change = Box::new(change);
        self
    }
    fn setup(mut self, setup: impl Fn(&Path) + 'static) -> Self {
        self.setup = Box::new(setup);
        self
    }
}

/// Drops every snapshot entry named `rel` or below it.
fn gone(snap: &mut Snapshot, rel: &str) {
    let dir = format!("{}/", rel.trim_end_matches('/'));
    snap.retain(|(name, _)| {
        name != rel && !name.starts_with(&dir) && !name.starts_with(&format!("{rel} -> "))
    });
}

fn put(snap: &mut Snapshot, rel: &str, content: &[u8]) {
    snap.retain(|(name, _)| name != rel);
    snap.push((rel.to_owned(), content.to_vec()));
}

fn put_dir(snap: &mut Snapshot, rel: &str) {
    put(snap, &format!("{rel}/"), b"");
}

fn remove(rel: &'static str) -> Case {
    case("remove", "fs/remove", move |p| json!({"path": at(p, rel)}))
}

fn copy(from: &'static str, to: &'static str) -> Case {
    case(
        "copy",
        "fs/copy",
        move |p| json!({"sourcePath": at(p, from), "destinationPath": at(p, to), "recursive": true}),
    )
}

fn write(rel: &'static str) -> Case {
    case(
        "writeFile",
        "fs/writeFile",
        move |p| json!({"path": at(p, rel), "dataBase64": b64(b"new")}),
    )
}

fn one_path(method: &'static str, rel: &'static str) -> Case {
    case(method, method, move |p| json!({"path": at(p, rel)}))
}

fn names(answer: &Value) -> Vec<String> {
    answer["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["fileName"].as_str().unwrap().to_owned())
        .collect()
}

/// Every case, named `<method> <path>`.
fn cases() -> Vec<Case> {
    const REFUSES: i64 = -32600;
    const FAILS: i64 = -32603;
    vec![
        // fs/remove: the entry itself, never what a symlink points to.
        remove("work/link/").fails(
            REFUSES,
            &[
                "fs/remove refuses `{p}/work/link/`",
                "symlink `{p}/work/link` points to",
            ],
        ),
        remove("work/link/.").fails(
            REFUSES,
            &["`{p}/work/link/.`", "last component is `.` or `..`"],
        ),
        remove("work/link/..").fails(REFUSES, &["`{p}/work/link/..`", "last component"]),
        remove("work/dir/.").fails(REFUSES, &["`{p}/work/dir/.`"]),
        remove("work/dir/..").fails(REFUSES, &["`{p}/work/dir/..`"]),
        remove("work/flink/").fails(REFUSES, &["`{p}/work/flink/`", "symlink"]),
        remove("work/dangling/").fails(REFUSES, &["`{p}/work/dangling/`"]),
        remove("work/file/").fails(FAILS, &["Not a directory (os error 20)"]),
        remove("work/link").changes(|s, _| gone(s, "work/link")),
        remove("work/flink").changes(|s, _| gone(s, "work/flink")),
        remove("work/dir/").changes(|s, _| gone(s, "work/dir")),
        remove("work/missing/"),
        // `..` is physical: link/.. is the parent of the link's target.
        remove("work/link/../target/t1").changes(|s, _| gone(s, "target/t1")),
        // A symlink before the last component is followed, as by the kernel.
        remove("work/link/sub").changes(|s, _| gone(s, "target/sub")),
        // fs/copy: nothing is written through a symlink at the destination.
        copy("work/dir", "work/link").fails(REFUSES, &["fs/copy refuses to write `{p}/work/link`"]),
        copy("work/dir", "work/link/")
            .fails(REFUSES, &["`{p}/work/link/`", "symlink `{p}/work/link`"]),
        copy("work/dir/f", "work/flink").fails(REFUSES, &["`{p}/work/flink`", "is a symlink"]),
        copy("work/dir/f", "work/dangling").fails(REFUSES, &["`{p}/work/dangling`"]),
        copy("work/dir/f", "work/new/").fails(REFUSES, &["`{p}/work/new/`", "ending in `/`"]),
        copy("work/dir", "work/new/.").fails(REFUSES, &["`{p}/work/new/.`"]),
        copy("work/dir", "work/new/").changes(|s, _| {
            put_dir(s, "work/new");
            put(s, "work/new/f", b"f");
        }),
        copy("work/dir", "work/out")
            .setup(|p| {
                std::fs::create_dir(p.join("work/out")).unwrap();
                std::os::unix::fs::symlink(p.join("target/t1"), p.join("work/out/f")).unwrap();
            })
            .fails(REFUSES, &["`{p}/work/out/f`", "is a symlink"]),
        copy("work/tree", "work/out")
            .setup(|p| {
                std::fs::create_dir_all(p.join("work/tree/sub")).unwrap();
                std::fs::write(p.join("work/tree/sub/x"), b"x").unwrap();
                std::fs::create_dir(p.join("work/out")).unwrap();
                std::os::unix::fs::symlink(p.join("target"), p.join("work/out/sub")).unwrap();
            })
            .fails(REFUSES, &["`{p}/work/out/sub`"]),
        // A trailing `/` on the source names the link's target.
        copy("work/link/", "work/copied").changes(|s, _| {
            put_dir(s, "work/copied");
            put(s, "work/copied/t1", b"t1");
            put_dir(s, "work/copied/sub");
            put(s, "work/copied/sub/t2", b"t2");
        }),
        copy("work/link", "work/copied").changes(|s, p| {
            put(
                s,
                &format!("work/copied -> {}", p.join("target").display()),
                b"",
            )
        }),
        copy("work/link/../target/t1", "work/t1copy").changes(|s, _| put(s, "work/t1copy", b"t1")),
        copy("work/file", "work/link/../target/fcopy")
            .changes(|s, _| put(s, "target/fcopy", b"file")),
        copy("work/dir", "work/link/../work/dir/inner")
            .fails(REFUSES, &["cannot copy a directory to itself"]),
        copy("work/dir", "work/dir/").fails(REFUSES, &["cannot copy a directory to itself"]),
        // fs/createDirectory: `mkdir -p`, the kernel resolving each step.
        one_path("fs/createDirectory", "work/link/"),
        case(
            "createDirectory",
            "fs/createDirectory",
            |p| json!({"path": at(p, "work/link/"), "recursive": false}),
        )
        .fails(FAILS, &["File exists (os error 17)"]),
        one_path("fs/createDirectory", "work/new/.").changes(|s, _| put_dir(s, "work/new")),
        one_path("fs/createDirectory", "work/link/made").changes(|s, _| put_dir(s, "target/made")),
        one_path("fs/createDirectory", "work/dangling").fails(FAILS, &["File exists"]),
        one_path("fs/createDirectory", "work/file/").fails(FAILS, &["File exists"]),
        one_path("fs/createDirectory", "work/a/../b").changes(|s, _| {
            put_dir(s, "work/a");
            put_dir(s, "work/b");
        }),
        // fs/writeFile: follows a final symlink (reference semantics).
        write("work/flink").changes(|s, _| put(s, "work/file", b"new")),
        write("work/dangling").changes(|s, _| put(s, "work/nowhere", b"new")),
        // O_CREAT with a trailing `/`: the kernel says EISDIR even for a file.
        write("work/file/").fails(FAILS, &["Is a directory"]),
        write("work/new/").fails(FAILS, &["Is a directory"]),
        write("work/dir/.").fails(FAILS, &["Is a directory"]),
        write("work/link").fails(FAILS, &["Is a directory"]),
        write("work/link/../target/w").changes(|s, _| put(s, "target/w", b"new")),
        // Reads: the kernel's resolution, nothing changes.
        one_path("fs/readFile", "work/flink")
            .answers(|v, _| assert_eq!(unb64(&v["dataBase64"]), b"file")),
        one_path("fs/readFile", "work/flink/").fails(FAILS, &["Not a directory"]),
        one_path("fs/readFile", "work/link/").fails(REFUSES, &["is not a file"]),
        one_path("fs/readFile", "work/dir/.").fails(REFUSES, &["is not a file"]),
        one_path("fs/readFile", "work/link/../target/t1")
            .answers(|v, _| assert_eq!(unb64(&v["dataBase64"]), b"t1")),
        one_path("fs/getMetadata", "work/link/").answers(|v, _| {
            assert_eq!(
                (&v["isSymlink"], &v["isDirectory"]),
                (&json!(false), &json!(true))
            )
        }),
        one_path("fs/getMetadata", "work/link").answers(|v, _| {
            assert_eq!(
                (&v["isSymlink"], &v["isDirectory"]),
                (&json!(true), &json!(true))
            )
        }),
        one_path("fs/getMetadata", "work/link/..").answers(|v, _| {
            assert_eq!(
                (&v["isSymlink"], &v["isDirectory"]),
                (&json!(false), &json!(true))
            )
        }),
        one_path("fs/getMetadata", "work/flink/").fails(FAILS, &["Not a directory"]),
        one_path("fs/getMetadata", "work/dangling/").fails(-32004, &["No such file"]),
        one_path("fs/readDirectory", "work/link/")
            .answers(|v, _| assert_eq!(names(v), ["sub", "t1"])),
        one_path("fs/readDirectory", "work/link/.")
            .answers(|v, _| assert_eq!(names(v), ["sub", "t1"])),
        one_path("fs/readDirectory", "work/link/..")
            .answers(|v, _| assert_eq!(names(v), ["target", "work"])),
        case("walk", "fs/walk", |p| {
            json!({"path": at(p, "work/link/"), "options": {"maxDepth": 2, "maxDirectories": 10,
                "maxEntries": 10, "followDirectorySymlinks": false}})
        })
        .answers(|v, p| {
            let paths: Vec<&str> = v["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["path"].as_str().unwrap())
                .collect();
            let base = p.join("work/link");
            let expected: Vec<String> = ["sub", "t1", "sub/t2"]
                .iter()
                .map(|rel| base.join(rel).display().to_string())
                .collect();
            assert_eq!(paths, expected);
        }),
        case("walk", "fs/walk", |p| {
            json!({"path": at(p, "work/link"), "options": {"maxDepth": 2, "maxDirectories": 10,
                "maxEntries": 10, "followDirectorySymlinks": false}})
        })
        .answers(|v, _| assert_eq!(v["entries"], json!([]))),
        one_path("fs/canonicalize", "work/link/..")
            .answers(|v, p| assert_eq!(v["path"], json!(p.display().to_string()))),
        one_path("fs/canonicalize", "work/link/")
            .answers(|v, p| assert_eq!(v["path"], json!(p.join("target").display().to_string()))),
        one_path("fs/canonicalize", "work/dir/.")
            .answers(|v, p| assert_eq!(v["path"], json!(p.join("work/dir").display().to_string()))),
        one_path("fs/canonicalize", "work/flink/").fails(FAILS, &["Not a directory"]),
    ]
}

/// Runs every case in a fresh tree under `base`, adding `ctx` as the
/// `sandbox` of each request.
async fn run_cases(client: &Client, base: &Path, ctx: Option<Value>) {
    let mut failures = Vec::new();
    for (i, case) in cases().into_iter().enumerate() {
        let p: PathBuf = base.join(format!("case{i}"));
        std::fs::create_dir(&p).unwrap();
        fixture(&p);
        (case.setup)(&p);
        let before = snapshot(&p);
        let mut params = (case.params)(&p);
        if let Some(ctx) = &ctx {
            params["sandbox"] = ctx.clone();
        }
        let label = format!("{} {params}", case.name);
        let answer = client.call(case.method, params.clone()).await;
        match (&case.outcome, answer) {
            (Outcome::Ok(check), Ok(value)) => check(&value, &p),
            (Outcome::Err { code, texts }, Err(err)) => {
                let texts: Vec<String> = texts
                    .iter()
                    .map(|t| t.replace("{p}", &p.display().to_string()))
                    .collect();
                if err.code != *code || !texts.iter().all(|t| err.message.contains(t.as_str())) {
                    failures.push(format!("{label}: expected {code} {texts:?}, got {err:?}"));
                }
            }
            (Outcome::Ok(_), Err(err)) => failures.push(format!("{label}: failed: {err:?}")),
            (Outcome::Err { .. }, Ok(value)) => {
                failures.push(format!("{label}: unexpectedly succeeded: {value}"))
            }
        }
        let mut expected = before;
        (case.change)(&mut expected, &p);
        expected.sort();
        let after = snapshot(&p);
        if after != expected {
            failures.push(format!(
                "{label}: disk changed wrongly\n  expected {expected:?}\n  found    {after:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn every_method_resolves_trailing_slashes_dots_and_symlinks_as_documented() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    run_cases(&client, &canonical(&dir), None).await;
}

#[tokio::test]
async fn a_sandboxed_helper_resolves_the_same_paths_the_same_way() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    // Everything writable, so only the path rules can keep data safe.
    let ctx = sandbox(restricted(&[(&root, "write")], &[]), &root);
    let base = root.join("cases");
    std::fs::create_dir(&base).unwrap();
    run_cases(&client, &base, Some(ctx)).await;
}

/// A component of the tree being removed is swapped, over and over, with a
/// symlink to a directory outside it; the outside directory never loses a
/// file.
#[tokio::test]
async fn a_tree_whose_directories_turn_into_symlinks_mid_remove_keeps_the_outside_intact() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let outside = root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    for i in 0..20 {
        std::fs::write(outside.join(format!("keep{i}")), b"keep").unwrap();
    }
    let before = snapshot(&outside);
    for round in 0..30 {
        let tree = root.join(format!("tree{round}"));
        for d in 0..20 {
            std::fs::create_dir_all(tree.join(format!("d{d}/inner"))).unwrap();
            std::fs::write(tree.join(format!("d{d}/inner/x")), b"x").unwrap();
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (tree, outside, stop) = (tree.clone(), outside.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut d = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let victim = tree.join(format!("d{}", d % 20));
                    let parked = tree.join(format!("parked{d}"));
                    if std::fs::rename(&victim, &parked).is_ok() {
                        let _ = std::os::unix::fs::symlink(&outside, &victim);
                    }
                    d += 1;
                }
            })
        };
        let _ = client.call("fs/remove", json!({"path": tree})).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        swapper.join().unwrap();
        assert_eq!(snapshot(&outside), before, "round {round}");
    }
}
