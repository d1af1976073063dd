//! The filesystem methods through the real exec-server over a real
//! WebSocket, unsandboxed, in both path dialects (docs/protocol.md,
//! docs/filesystem.md; the reference's file_system* cases that apply on Linux).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::fs::{b64, canonical, unb64, workdir, Client, Dialect, Server, DIALECTS};
use serde_json::{json, Value};

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
}

#[tokio::test]
async fn metadata_reports_files_directories_and_symlink_targets() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::write(root.join("f"), b"12345").unwrap();
    std::fs::create_dir(root.join("d")).unwrap();
    std::os::unix::fs::symlink(root.join("f"), root.join("lf")).unwrap();
    std::os::unix::fs::symlink(root.join("d"), root.join("ld")).unwrap();
    std::os::unix::fs::symlink(root.join("nowhere"), root.join("dangling")).unwrap();
    for d in DIALECTS {
        let meta = client
            .ok("fs/getMetadata", json!({"path": d.path(&root.join("f"))}))
            .await;
        assert_eq!(meta["isFile"], true);
        assert_eq!(meta["isDirectory"], false);
        assert_eq!(meta["isSymlink"], false);
        assert_eq!(meta["size"], 5);
        assert!(meta["modifiedAtMs"].as_i64().unwrap() > 0);
        assert!(meta["createdAtMs"].as_i64().is_some());
        let meta = client
            .ok(
                "fs/getMetadata",
                json!({"path": d.path(&root.join("d")), "sandbox": null}),
            )
            .await;
        assert_eq!(
            (meta["isDirectory"].clone(), meta["isFile"].clone()),
            (json!(true), json!(false))
        );
        let meta = client
            .ok("fs/getMetadata", json!({"path": d.path(&root.join("lf"))}))
            .await;
        assert_eq!(meta["isSymlink"], true);
        assert_eq!(meta["isFile"], true);
        assert_eq!(meta["size"], 5);
        let meta = client
            .ok("fs/getMetadata", json!({"path": d.path(&root.join("ld"))}))
            .await;
        assert_eq!(
            (meta["isSymlink"].clone(), meta["isDirectory"].clone()),
            (json!(true), json!(true))
        );
        let err = client
            .err(
                "fs/getMetadata",
                json!({"path": d.path(&root.join("dangling"))}),
            )
            .await;
        assert_eq!(err.code, -32004);
        assert_eq!(err.message, "No such file or directory (os error 2)");
    }
}

#[tokio::test]
async fn write_read_and_create_directory_round_trip() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    for d in DIALECTS {
        let sub = root.join(format!("{d:?}"));
        let nested = sub.join("a/b/c");
        client
            .ok("fs/createDirectory", json!({"path": d.path(&nested)}))
            .await;
        assert!(nested.is_dir());
        // Recursive (the default) succeeds when it exists.
        client
            .ok(
                "fs/createDirectory",
                json!({"path": d.path(&nested), "recursive": null}),
            )
            .await;
        let err = client
            .err(
                "fs/createDirectory",
                json!({"path": d.path(&nested), "recursive": false}),
            )
            .await;
        assert_eq!(
            (err.code, err.message.as_str()),
            (-32603, "File exists (os error 17)")
        );
        let err = client
            .err(
                "fs/createDirectory",
                json!({"path": d.path(&sub.join("x/y")), "recursive": false}),
            )
            .await;
        assert_eq!(err.code, -32004);

        let file = nested.join("data.bin");
        let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        assert_eq!(
            client
                .ok(
                    "fs/writeFile",
                    json!({"path": d.path(&file), "dataBase64": b64(&data)})
                )
                .await,
            json!({})
        );
        assert_eq!(std::fs::read(&file).unwrap(), data);
        let read = client
            .ok("fs/readFile", json!({"path": d.path(&file)}))
            .await;
        assert_eq!(unb64(&read["dataBase64"]), data);
        // Truncates.
        client
            .ok(
                "fs/writeFile",
                json!({"path": d.path(&file), "dataBase64": b64(b"short")}),
            )
            .await;
        assert_eq!(std::fs::read(&file).unwrap(), b"short");
        // No parent creation.
        let orphan = sub.join("missing/parent/file");
        let err = client
            .err(
                "fs/writeFile",
                json!({"path": d.path(&orphan), "dataBase64": b64(b"x")}),
            )
            .await;
        assert_eq!(
            (err.code, err.message.as_str()),
            (-32004, "No such file or directory (os error 2)")
        );
        assert!(!sub.join("missing").exists());
        let err = client
            .err(
                "fs/writeFile",
                json!({"path": d.path(&file), "dataBase64": "***"}),
            )
            .await;
        assert_eq!(err.code, -32600);
        assert!(
            err.message
                .starts_with("fs/writeFile requires valid base64 dataBase64: "),
            "{}",
            err.message
        );
    }
}

#[tokio::test]
async fn write_follows_symlinks_and_hard_links() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::write(root.join("target"), b"old").unwrap();
    std::os::unix::fs::symlink(root.join("target"), root.join("link")).unwrap();
    std::fs::hard_link(root.join("target"), root.join("hard")).unwrap();
    let inode = std::fs::metadata(root.join("target")).unwrap().ino();
    client
        .ok(
            "fs/writeFile",
            json!({"path": root.join("link"), "dataBase64": b64(b"via link")}),
        )
        .await;
    assert_eq!(std::fs::read(root.join("target")).unwrap(), b"via link");
    client
        .ok(
            "fs/writeFile",
            json!({"path": root.join("hard"), "dataBase64": b64(b"via hard")}),
        )
        .await;
    assert_eq!(std::fs::read(root.join("target")).unwrap(), b"via hard");
    assert_eq!(std::fs::metadata(root.join("hard")).unwrap().ino(), inode);
    assert!(std::fs::symlink_metadata(root.join("link"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[tokio::test]
async fn reads_refuse_directories_and_fifos_without_blocking() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let fifo = root.join("pipe");
    mkfifo(&fifo);
    for d in DIALECTS {
        for path in [&fifo, &root] {
            let err = client
                .err("fs/readFile", json!({"path": d.path(path)}))
                .await;
            assert_eq!(err.code, -32600);
            assert_eq!(
                err.message,
                format!("path `{}` is not a file", path.display())
            );
            let err = client
                .err("fs/open", json!({"handleId": "h", "path": d.path(path)}))
                .await;
            assert_eq!(
                err.message,
                format!("path `{}` is not a file", path.display())
            );
        }
    }
}

#[tokio::test]
async fn canonicalize_resolves_symlinks_and_answers_in_the_request_dialect() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::create_dir(root.join("real dir")).unwrap();
    std::os::unix::fs::symlink(root.join("real dir"), root.join("alias")).unwrap();
    for d in DIALECTS {
        let answer = client
            .ok(
                "fs/canonicalize",
                json!({"path": d.path(&root.join("alias/./"))}),
            )
            .await;
        assert_eq!(answer, json!({"path": d.path(&root.join("real dir"))}));
    }
}

#[tokio::test]
async fn bad_paths_are_invalid_requests_naming_the_path() {
    let server = Server::start();
    let client = server.connect().await;
    let err = client
        .err("fs/readFile", json!({"path": "file://server/share/f"}))
        .await;
    assert_eq!(err.code, -32600);
    assert_eq!(err.message, "'file://server/share/f' is invalid on 'linux'");
    let err = client
        .err("fs/getMetadata", json!({"path": "relative/x"}))
        .await;
    assert_eq!(err.code, -32600);
    assert!(err.message.contains("relative/x"), "{}", err.message);
    let err = client
        .err(
            "fs/copy",
            json!({"sourcePath": "/tmp", "destinationPath": "http://h/x", "recursive": true}),
        )
        .await;
    assert_eq!(err.code, -32600);
    assert!(err.message.contains("http://h/x"), "{}", err.message);
    let err = client.err("fs/readFile", json!({})).await;
    assert_eq!(err.code, -32602);
}

/// A path this host cannot use, in every position a request can carry one,
/// is -32600 in the fs methods and -32602 in `process/start` (the
/// reference's codes), whatever sandbox profile it sits in.
#[tokio::test]
async fn a_foreign_path_is_32600_in_fs_methods_and_32602_in_process_start() {
    const FOREIGN: &str = "file://server/share";
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::write(root.join("f"), b"x").unwrap();
    let file = root.join("f");
    let read_root =
        json!({"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"});
    let managed = |entries: Value| {
        json!({"type": "managed", "network": "restricted",
               "file_system": {"type": "restricted", "entries": entries}})
    };
    let foreign_entry = json!({"path": {"type": "path", "path": FOREIGN}, "access": "read"});
    let legacy_root = json!({"type": "workspace-write", "writable_roots": [FOREIGN]});
    // (position, sandbox context); `None`: the request's own path.
    let positions: Vec<(&str, Option<Value>)> = vec![
        ("the path itself", None),
        (
            "a permission entry",
            Some(json!({"permissions": managed(json!([read_root, foreign_entry]))})),
        ),
        (
            "the only permission entry",
            Some(json!({"permissions": managed(json!([foreign_entry]))})),
        ),
        (
            "a legacy writable root",
            Some(json!({"sandboxPolicy": legacy_root, "sandboxPolicyCwd": root})),
        ),
        (
            "the sandbox cwd",
            Some(json!({"permissions": managed(json!([read_root])), "cwd": FOREIGN})),
        ),
        (
            "a workspace root",
            Some(json!({"permissions": {"type": "disabled"}, "workspaceRoots": [FOREIGN]})),
        ),
    ];
    for (position, sandbox) in &positions {
        let path = match sandbox {
            None => json!(FOREIGN),
            Some(_) => json!(file),
        };
        let sandbox = sandbox.clone().unwrap_or(Value::Null);
        let requests = [
            ("fs/readFile", json!({"path": path, "sandbox": sandbox})),
            ("fs/getMetadata", json!({"path": path, "sandbox": sandbox})),
            (
                "fs/open",
                json!({"handleId": "h", "path": path, "sandbox": sandbox}),
            ),
            (
                "fs/writeFile",
                json!({"path": path, "dataBase64": "", "sandbox": sandbox}),
            ),
        ];
        for (method, params) in requests {
            let err = client.err(method, params).await;
            assert_eq!(err.code, -32600, "{method}, {position}: {}", err.message);
            assert!(
                err.message.contains(FOREIGN),
                "{method}, {position}: {}",
                err.message
            );
        }
        let cwd = match sandbox {
            Value::Null => json!(FOREIGN),
            _ => json!(root),
        };
        let err = client
            .err(
                "process/start",
                json!({"processId": position, "argv": ["true"], "cwd": cwd, "env": {},
                       "tty": false, "sandbox": sandbox}),
            )
            .await;
        assert_eq!(
            err.code, -32602,
            "process/start, {position}: {}",
            err.message
        );
        assert!(
            err.message.contains(FOREIGN),
            "process/start, {position}: {}",
            err.message
        );
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"x", "nothing was written");
}

#[tokio::test]
async fn read_directory_lists_sorted_entries_and_skips_dangling_links() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    for name in ["zeta", "alpha", "Mid", "beta"] {
        std::fs::write(root.join(name), b"").unwrap();
    }
    std::fs::create_dir(root.join("dir")).unwrap();
    std::os::unix::fs::symlink(root.join("dir"), root.join("link-to-dir")).unwrap();
    std::os::unix::fs::symlink(root.join("gone"), root.join("dangling")).unwrap();
    for d in DIALECTS {
        let answer = client
            .ok("fs/readDirectory", json!({"path": d.path(&root)}))
            .await;
        let entries = answer["entries"].as_array().unwrap();
        let names: Vec<&str> = entries
            .iter()
            .map(|e| e["fileName"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["Mid", "alpha", "beta", "dir", "link-to-dir", "zeta"]
        );
        assert_eq!(
            entries[3],
            json!({"fileName": "dir", "isDirectory": true, "isFile": false})
        );
        assert_eq!(entries[4]["isDirectory"], true);
        assert_eq!(entries[0]["isFile"], true);
    }
    let err = client
        .err("fs/readDirectory", json!({"path": root.join("alpha")}))
        .await;
    assert_eq!(err.code, -32603);
    assert_eq!(err.message, "Not a directory (os error 20)");
}

fn walk_paths(answer: &Value) -> Vec<(String, String)> {
    answer["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_owned(),
                e["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn walk_is_bounded_breadth_first_and_sorted() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::create_dir_all(root.join("b/deep/deeper")).unwrap();
    std::fs::create_dir_all(root.join("a")).unwrap();
    std::fs::write(root.join("a/x"), b"").unwrap();
    std::fs::write(root.join("c"), b"").unwrap();
    std::fs::write(root.join("b/deep/deeper/y"), b"").unwrap();
    mkfifo(&root.join("fifo"));
    let options = |depth: usize, dirs: usize, entries: usize| json!({"maxDepth": depth, "maxDirectories": dirs, "maxEntries": entries, "followDirectorySymlinks": false});
    let walk = |path: String, depth, dirs, entries| {
        client.ok(
            "fs/walk",
            json!({"path": path, "options": options(depth, dirs, entries)}),
        )
    };
    for d in DIALECTS {
        let answer = walk(d.path(&root), 64, 100, 100).await;
        let p = |rel: &str| d.path(&root.join(rel));
        assert_eq!(
            walk_paths(&answer),
            vec![
                (p("a"), "directory".into()),
                (p("b"), "directory".into()),
                (p("c"), "file".into()),
                (p("a/x"), "file".into()),
                (p("b/deep"), "directory".into()),
                (p("b/deep/deeper"), "directory".into()),
                (p("b/deep/deeper/y"), "file".into()),
            ]
        );
        assert_eq!(answer["errors"], json!([]));
        assert_eq!(answer["truncated"], false);

        let answer = walk(d.path(&root), 0, 100, 100).await;
        assert_eq!(walk_paths(&answer).len(), 3);
        let answer = walk(d.path(&root), 64, 100, 2).await;
        assert_eq!(walk_paths(&answer).len(), 2);
        assert_eq!(answer["truncated"], true);
        let answer = walk(d.path(&root), 64, 1, 100).await;
        assert_eq!(walk_paths(&answer).len(), 3);
        assert_eq!(answer["truncated"], true);
        // A file root is an empty outcome.
        let answer = walk(d.path(&root.join("c")), 3, 3, 3).await;
        assert_eq!(
            answer,
            json!({"entries": [], "errors": [], "truncated": false})
        );
    }
    let err = client
        .err(
            "fs/walk",
            json!({"path": root, "options": options(1, 0, 1)}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "filesystem walk limits must be greater than zero")
    );
    let err = client
        .err(
            "fs/walk",
            json!({"path": root, "options": options(65, 1, 1)}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            -32600,
            "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"
        )
    );
}

#[tokio::test]
async fn walk_handles_directory_symlinks_cycles_and_hidden_directories() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::create_dir_all(root.join(".hidden/inner")).unwrap();
    std::fs::create_dir_all(root.join("real")).unwrap();
    std::fs::write(root.join("real/f"), b"").unwrap();
    std::os::unix::fs::symlink(&root, root.join("real/loop")).unwrap();
    std::os::unix::fs::symlink(root.join(".hidden"), root.join("visible")).unwrap();
    std::os::unix::fs::symlink(root.join("real/f"), root.join("file-link")).unwrap();
    let walk = |follow: bool, prune: bool| {
        json!({"path": root, "options": {"maxDepth": 10, "maxDirectories": 100, "maxEntries": 100,
            "followDirectorySymlinks": follow, "pruneHiddenDirectories": prune}})
    };
    let names = |answer: &Value| -> Vec<String> {
        walk_paths(answer)
            .into_iter()
            .map(|(p, _)| {
                p.strip_prefix(&format!("{}/", root.display()))
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    let plain = client.ok("fs/walk", walk(false, false)).await;
    assert_eq!(
        names(&plain),
        [".hidden", "real", ".hidden/inner", "real/f"]
    );
    let followed = client.ok("fs/walk", walk(true, false)).await;
    let followed = names(&followed);
    assert!(followed.contains(&"visible".to_owned()), "{followed:?}");
    assert!(followed.contains(&"real/loop".to_owned()), "{followed:?}");
    assert!(
        !followed.iter().any(|p| p.starts_with("real/loop/")),
        "cycle followed: {followed:?}"
    );
    assert!(!followed.contains(&"file-link".to_owned()));
    let pruned = client.ok("fs/walk", walk(true, true)).await;
    let pruned = names(&pruned);
    assert!(pruned.contains(&".hidden".to_owned()));
    assert!(!pruned.contains(&".hidden/inner".to_owned()), "{pruned:?}");
    assert!(pruned.contains(&"visible/inner".to_owned()), "{pruned:?}");
}

#[tokio::test]
async fn remove_defaults_to_recursive_and_force_and_removes_links_not_targets() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    for d in DIALECTS {
        let sub = root.join(format!("{d:?}"));
        std::fs::create_dir_all(sub.join("tree/a/b")).unwrap();
        std::fs::write(sub.join("tree/a/b/f"), b"x").unwrap();
        client
            .ok("fs/remove", json!({"path": d.path(&sub.join("tree"))}))
            .await;
        assert!(!sub.join("tree").exists());
        client
            .ok("fs/remove", json!({"path": d.path(&sub.join("tree"))}))
            .await;
        let err = client
            .err(
                "fs/remove",
                json!({"path": d.path(&sub.join("tree")), "force": false}),
            )
            .await;
        assert_eq!(err.code, -32004);
        std::fs::create_dir_all(sub.join("full/x")).unwrap();
        let err = client
            .err(
                "fs/remove",
                json!({"path": d.path(&sub.join("full")), "recursive": false}),
            )
            .await;
        assert_eq!(
            (err.code, err.message.as_str()),
            (-32603, "Directory not empty (os error 39)")
        );
        std::fs::create_dir_all(sub.join("kept")).unwrap();
        std::fs::write(sub.join("kept/file"), b"keep").unwrap();
        std::os::unix::fs::symlink(sub.join("kept"), sub.join("link")).unwrap();
        client
            .ok("fs/remove", json!({"path": d.path(&sub.join("link"))}))
            .await;
        assert!(std::fs::symlink_metadata(sub.join("link")).is_err());
        assert_eq!(std::fs::read(sub.join("kept/file")).unwrap(), b"keep");
    }
}

#[tokio::test]
async fn copy_handles_files_trees_symlinks_and_special_files() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::create_dir_all(root.join("src/sub")).unwrap();
    std::fs::write(root.join("src/a"), b"A").unwrap();
    std::fs::write(root.join("src/sub/b"), b"B").unwrap();
    std::os::unix::fs::symlink("a", root.join("src/rel-link")).unwrap();
    mkfifo(&root.join("src/fifo"));
    for d in DIALECTS {
        let out = root.join(format!("out-{d:?}"));
        std::fs::create_dir(&out).unwrap();
        let copy = |from: &Path, to: &Path, recursive: bool| json!({"sourcePath": d.path(from), "destinationPath": d.path(to), "recursive": recursive});
        client
            .ok("fs/copy", copy(&root.join("src/a"), &out.join("a"), false))
            .await;
        assert_eq!(std::fs::read(out.join("a")).unwrap(), b"A");
        client
            .ok("fs/copy", copy(&root.join("src"), &out.join("tree"), true))
            .await;
        assert_eq!(std::fs::read(out.join("tree/sub/b")).unwrap(), b"B");
        assert_eq!(
            std::fs::read_link(out.join("tree/rel-link")).unwrap(),
            Path::new("a")
        );
        assert!(
            std::fs::symlink_metadata(out.join("tree/fifo")).is_err(),
            "fifo copied"
        );
        client
            .ok(
                "fs/copy",
                copy(&root.join("src/rel-link"), &out.join("link"), false),
            )
            .await;
        assert_eq!(
            std::fs::read_link(out.join("link")).unwrap(),
            Path::new("a")
        );
        let err = client
            .err("fs/copy", copy(&root.join("src"), &out.join("x"), false))
            .await;
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                -32600,
                "fs/copy requires recursive: true when sourcePath is a directory"
            )
        );
        for into in [root.join("src"), root.join("src/sub/inner")] {
            let err = client
                .err("fs/copy", copy(&root.join("src"), &into, true))
                .await;
            assert_eq!(
                (err.code, err.message.as_str()),
                (
                    -32600,
                    "fs/copy cannot copy a directory to itself or one of its descendants"
                )
            );
        }
        assert!(!root.join("src/sub/inner").exists());
        let err = client
            .err(
                "fs/copy",
                copy(&root.join("src/fifo"), &out.join("fifo"), false),
            )
            .await;
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                -32600,
                "fs/copy only supports regular files, directories, and symlinks"
            )
        );
    }
}

async fn read_stream(client: &Client, path: &Path, id: &str) -> (Vec<u8>, usize) {
    client
        .ok("fs/open", json!({"handleId": id, "path": path}))
        .await;
    let mut data = Vec::new();
    let mut blocks = 0;
    loop {
        let block = client
            .ok(
                "fs/readBlock",
                json!({"handleId": id, "offset": data.len(), "len": 1048576}),
            )
            .await;
        let chunk = unb64(&block["chunk"]);
        assert!(chunk.len() <= 1048576);
        blocks += 1;
        data.extend_from_slice(&chunk);
        if block["eof"] == true {
            break;
        }
    }
    client.ok("fs/close", json!({"handleId": id})).await;
    (data, blocks)
}

#[tokio::test]
async fn streams_read_bounded_blocks_and_stop_after_an_exact_boundary() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let data: Vec<u8> = (0..2 * 1048576u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("two-mib"), &data).unwrap();
    let (read, blocks) = read_stream(&client, &root.join("two-mib"), "s1").await;
    assert_eq!(read, data);
    assert_eq!(blocks, 3, "two full blocks then an empty eof block");
    // Completed streams release capacity: 129 sequential streams.
    std::fs::write(root.join("small"), b"abc").unwrap();
    for i in 0..129 {
        let (read, _) = read_stream(&client, &root.join("small"), &format!("h{i}")).await;
        assert_eq!(read, b"abc");
    }
}

#[tokio::test]
async fn read_block_is_positional_and_reports_eof() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::write(root.join("f"), b"0123456789").unwrap();
    let uri = Dialect::Uri.path(&root.join("f"));
    assert_eq!(
        client
            .ok("fs/open", json!({"handleId": "h", "path": uri}))
            .await,
        json!({"handleId": "h"})
    );
    let block = |offset: u64, len: u64| json!({"handleId": "h", "offset": offset, "len": len});
    let b = client.ok("fs/readBlock", block(6, 2)).await;
    assert_eq!(
        (unb64(&b["chunk"]), b["eof"].clone()),
        (b"67".to_vec(), json!(false))
    );
    let b = client.ok("fs/readBlock", block(0, 3)).await;
    assert_eq!(
        (unb64(&b["chunk"]), b["eof"].clone()),
        (b"012".to_vec(), json!(false))
    );
    let b = client.ok("fs/readBlock", block(8, 5)).await;
    assert_eq!(
        (unb64(&b["chunk"]), b["eof"].clone()),
        (b"89".to_vec(), json!(true))
    );
    let b = client.ok("fs/readBlock", block(100, 1)).await;
    assert_eq!(
        (unb64(&b["chunk"]), b["eof"].clone()),
        (Vec::new(), json!(true))
    );
    for len in [0u64, 1048577] {
        let err = client.err("fs/readBlock", block(0, len)).await;
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                -32600,
                "file read block length must be between 1 and 1048576"
            )
        );
    }
    let err = client
        .err("fs/open", json!({"handleId": "h", "path": uri}))
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "file read handle `h` already exists")
    );
    client.ok("fs/close", json!({"handleId": "h"})).await;
    client
        .ok("fs/close", json!({"handleId": "never-opened"}))
        .await;
    let err = client.err("fs/readBlock", block(0, 1)).await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32004, "unknown file read handle `h`")
    );
}

#[tokio::test]
async fn open_handles_pin_the_file_and_are_bounded_per_connection() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::write(root.join("f"), b"original").unwrap();
    client
        .ok(
            "fs/open",
            json!({"handleId": "pin", "path": root.join("f")}),
        )
        .await;
    std::fs::write(root.join("new"), b"replacement").unwrap();
    std::fs::rename(root.join("new"), root.join("f")).unwrap();
    let b = client
        .ok(
            "fs/readBlock",
            json!({"handleId": "pin", "offset": 0, "len": 100}),
        )
        .await;
    assert_eq!(unb64(&b["chunk"]), b"original");
    for i in 1..128 {
        client
            .ok(
                "fs/open",
                json!({"handleId": format!("{i}"), "path": root.join("f")}),
            )
            .await;
    }
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "one-too-many", "path": root.join("f")}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "at most 128 file reads may be open per connection")
    );
    // Another connection has its own capacity.
    let other = server.connect().await;
    other
        .ok(
            "fs/open",
            json!({"handleId": "pin", "path": root.join("f")}),
        )
        .await;
    client.ok("fs/close", json!({"handleId": "7"})).await;
    client
        .ok(
            "fs/open",
            json!({"handleId": "one-too-many", "path": root.join("f")}),
        )
        .await;
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "x".repeat(33), "path": root.join("f")}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "file read handle ID must not exceed 32 bytes")
    );
}

#[tokio::test]
async fn streaming_with_a_platform_sandbox_reads_only_what_it_may() {
    if !crate::common::fs::sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let (dir, hidden_dir) = (workdir(), workdir());
    let (root, hidden) = (canonical(&dir), canonical(&hidden_dir));
    std::fs::write(root.join("f"), b"x").unwrap();
    std::fs::write(hidden.join("secret"), b"secret").unwrap();
    let sandbox = crate::common::fs::sandbox(
        crate::common::fs::restricted(&[(&root, "read")], &[]),
        &root,
    );
    client
        .ok(
            "fs/open",
            json!({"handleId": "s", "path": root.join("f"), "sandbox": sandbox}),
        )
        .await;
    let block = client
        .ok(
            "fs/readBlock",
            json!({"handleId": "s", "offset": 0, "len": 10}),
        )
        .await;
    assert_eq!(unb64(&block["chunk"]), b"x");
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "t", "path": hidden.join("secret"), "sandbox": sandbox}),
        )
        .await;
    assert!(
        err.code == -32004 || err.message.contains("Permission denied"),
        "{err:?}"
    );
    // A sandbox that runs directly is fine.
    let open = json!({"handleId": "d", "path": root.join("f"), "sandbox": {"permissions": {"type": "disabled"}}});
    client.ok("fs/open", open).await;
}

#[tokio::test]
async fn read_file_refuses_files_over_512_mib() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    // Sparse: costs no disk space.
    let big = std::fs::File::create(root.join("big")).unwrap();
    big.set_len(512 * 1024 * 1024 + 1).unwrap();
    let err = client
        .err("fs/readFile", json!({"path": root.join("big")}))
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            -32600,
            "file is too large to read: limit is 536870912 bytes"
        )
    );
}
