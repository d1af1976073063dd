//! `codexbox cp` against a real server on 127.0.0.1: a 200 MiB file both
//! ways in bounded memory, a tree with modes, a read-only directory, the
//! sticky bit and symlinks (relative, absolute, dangling, to a directory)
//! both ways, never writing through a symlink already at the destination,
//! a permission error in the middle (the server runs as an unprivileged
//! user) reported per file or stopping the copy with `--strict`, and the
//! progress line only on a terminal.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::client::{Server, BIN};
use crate::common::shell::{run, Run};

fn cp(url: &str, extra: &[&str], from: &str, to: &str) -> Run {
    let mut args = vec!["cp", "--url", url];
    args.extend_from_slice(extra);
    args.extend([from, to]);
    run(&args, None)
}

fn remote(path: &Path) -> String {
    format!("remote:{}", path.display())
}

fn local(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("lstat")
        .permissions()
        .mode()
        & 0o7777
}

/// A private directory every user can enter (for a server running as
/// nobody), canonical.
fn open_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("cp-test")
        .tempdir_in("/tmp")
        .expect("tempdir");
    set_mode(dir.path(), 0o755);
    let root = dir.path().canonicalize().expect("canonical");
    (dir, root)
}

/// Whether two files hold the same bytes (compared a block at a time).
fn same_contents(a: &Path, b: &Path) -> bool {
    let (Ok(mut a), Ok(mut b)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = read_full(&mut a, &mut x);
        let m = read_full(&mut b, &mut y);
        if n != m || x[..n] != y[..m] {
            return false;
        }
        if n == 0 {
            return true;
        }
    }
}

fn read_full(file: &mut std::fs::File, buffer: &mut [u8]) -> usize {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => filled += n,
        }
    }
    filled
}

#[test]
fn a_200_mib_file_goes_both_ways_in_bounded_memory() {
    let (_dir, root) = open_dir();
    let big = root.join("big.bin");
    {
        let mut random = std::fs::File::open("/dev/urandom").expect("urandom");
        let mut file = std::fs::File::create(&big).expect("create");
        std::io::copy(&mut (&mut random).take(200 << 20), &mut file).expect("fill");
        file.flush().expect("flush");
    }
    set_mode(&big, 0o640);
    std::fs::create_dir(root.join("remote-side")).expect("mkdir");
    let server = Server::start(&[]);
    let up = cp(
        &server.url,
        &[],
        local(&big),
        &remote(&root.join("remote-side")),
    );
    assert_eq!(up.code, 0, "{up:?}");
    let uploaded = root.join("remote-side/big.bin");
    assert!(same_contents(&big, &uploaded), "the upload differs");
    assert_eq!(mode_of(&uploaded), 0o640);
    let down = cp(
        &server.url,
        &[],
        &remote(&uploaded),
        local(&root.join("back.bin")),
    );
    assert_eq!(down.code, 0, "{down:?}");
    assert!(
        same_contents(&big, &root.join("back.bin")),
        "the download differs"
    );
    assert_eq!(mode_of(&root.join("back.bin")), 0o640);
    // Memory is bounded by the blocks in flight, not by the file.
    for (what, run) in [("upload", &up), ("download", &down)] {
        eprintln!("{what} of 200 MiB: peak {} KiB", run.max_rss_kib);
        assert!(
            run.max_rss_kib > 0,
            "{what}: the memory of the copy was never sampled"
        );
        assert!(
            run.max_rss_kib < 100 * 1024,
            "{what} peaked at {} KiB for a 200 MiB file",
            run.max_rss_kib
        );
    }
    // Piped stderr: no progress line.
    assert!(
        !up.stderr.contains("ETA") && !up.stderr.contains('\r'),
        "{up:?}"
    );
}

/// Kind, mode and what each entry under `root` holds.
fn describe(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let relative = path
                .strip_prefix(root)
                .expect("under root")
                .display()
                .to_string();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let what = if meta.file_type().is_symlink() {
                format!(
                    "link -> {}",
                    std::fs::read_link(&path).expect("readlink").display()
                )
            } else if meta.is_dir() {
                pending.push(path.clone());
                format!("dir {:o}", mode_of(&path))
            } else {
                format!(
                    "file {:o} {:?}",
                    mode_of(&path),
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default())
                )
            };
            out.insert(relative, what);
        }
    }
    out
}

/// The tree the mode and symlink tests copy; returns what a copy must
/// look like (set-id bits are never copied).
fn build_tree(src: &Path) -> BTreeMap<String, String> {
    std::fs::create_dir_all(src.join("deep/a/b")).expect("mkdir");
    std::fs::create_dir_all(src.join("links")).expect("mkdir");
    std::fs::create_dir_all(src.join("empty")).expect("mkdir");
    std::fs::create_dir_all(src.join("sticky")).expect("mkdir");
    std::fs::create_dir_all(src.join("ro")).expect("mkdir");
    for (name, mode) in [
        ("plain", 0o644),
        ("tool", 0o755),
        ("private", 0o600),
        ("setuid", 0o4755),
        ("ro/inner", 0o444),
        ("sticky/x", 0o664),
        ("deep/a/b/leaf", 0o640),
    ] {
        std::fs::write(src.join(name), format!("contents of {name}\n")).expect("write");
        set_mode(&src.join(name), mode);
    }
    for (name, target) in [
        ("links/relative", "../plain"),
        ("links/absolute", "/etc/hostname"),
        ("links/dangling", "nowhere/at/all"),
        ("links/to-dir", "../ro"),
    ] {
        std::os::unix::fs::symlink(target, src.join(name)).expect("symlink");
    }
    set_mode(&src.join("empty"), 0o700);
    set_mode(&src.join("sticky"), 0o1777);
    set_mode(&src.join("ro"), 0o555);
    let mut expected = describe(src);
    let setuid = expected.get_mut("setuid").expect("setuid entry");
    *setuid = setuid.replace("file 4755", "file 755");
    expected
}

#[test]
fn a_tree_keeps_its_modes_and_symlinks_both_ways() {
    let (_dir, root) = open_dir();
    let src = root.join("src");
    let expected = build_tree(&src);
    let server = Server::start(&[]);
    // Into an existing directory: it lands as DST/src.
    std::fs::create_dir(root.join("up")).expect("mkdir");
    let up = cp(
        &server.url,
        &[],
        local(&src),
        &format!("{}/", remote(&root.join("up"))),
    );
    assert_eq!(up.code, 0, "{up:?}");
    assert_eq!(describe(&root.join("up/src")), expected);
    // Back down to a new name.
    let down = cp(
        &server.url,
        &[],
        &remote(&root.join("up/src")),
        local(&root.join("down")),
    );
    assert_eq!(down.code, 0, "{down:?}");
    assert_eq!(describe(&root.join("down")), expected);
    // SRC/. copies what is in it.
    let contents = cp(
        &server.url,
        &[],
        &format!("{}/.", local(&src)),
        &remote(&root.join("flat")),
    );
    assert_eq!(contents.code, 0, "{contents:?}");
    assert_eq!(describe(&root.join("flat")), expected);
    // A symlink already at the destination is replaced, never written
    // through, on either side.
    let victim = root.join("victim");
    std::fs::write(&victim, b"untouched").expect("victim");
    for (direction, dst) in [
        ("up", root.join("again-up")),
        ("down", root.join("again-down")),
    ] {
        std::fs::create_dir_all(dst.join("src")).expect("mkdir");
        std::os::unix::fs::symlink(&victim, dst.join("src/plain")).expect("plant");
        let copied = if direction == "up" {
            cp(&server.url, &[], local(&src), &remote(&dst))
        } else {
            cp(&server.url, &[], &remote(&src), local(&dst))
        };
        assert_eq!(copied.code, 0, "{direction}: {copied:?}");
        assert_eq!(describe(&dst.join("src")), expected, "{direction}");
        assert_eq!(
            std::fs::read(&victim).ok().as_deref(),
            Some(&b"untouched"[..])
        );
    }
}

#[test]
fn usage_and_missing_sources_are_clear_errors() {
    let (_dir, root) = open_dir();
    let server = Server::start(&[]);
    let both_local = cp(&server.url, &[], "/etc/hostname", local(&root.join("x")));
    assert_eq!(both_local.code, 2, "{both_local:?}");
    assert!(
        both_local.stderr.contains("exactly one of SRC and DST"),
        "{both_local:?}"
    );
    let missing = cp(
        &server.url,
        &[],
        &remote(&root.join("absent")),
        local(&root.join("x")),
    );
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stderr.contains("absent") && missing.stderr.contains("No such file"),
        "{missing:?}"
    );
    let root_itself = cp(&server.url, &[], "remote:/", local(&root.join("x")));
    assert_eq!(root_itself.code, 2, "{root_itself:?}");
    let no_server = cp("ws://127.0.0.1:1", &[], "/etc/hostname", "remote:/tmp/x");
    assert_eq!(no_server.code, 255, "{no_server:?}");
}

/// Starts the server as nobody (uid and gid 65534, no supplementary
/// groups), or `None` (a loud skip) without setpriv.
fn server_as_nobody() -> Option<Server> {
    if !crate::common::host::host_has("setpriv", crate::common::host::runs("setpriv", &["--help"]))
    {
        return None;
    }
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args([BIN, "exec-server", "--listen", "ws://127.0.0.1:0"])
        .env_remove("CODEXBOX_AUTH_TOKEN")
        .current_dir("/");
    Some(Server::start_command(command, "exec-server as nobody"))
}

fn chown_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(65534), Some(65534)).expect("chown");
}

/// Local src with a.txt, m/{m1,m2}.txt and z.txt; on the server side, a
/// destination nobody owns where `src/m` already exists and is root's.
fn upload_setup(root: &Path, name: &str) -> (PathBuf, PathBuf) {
    let src = root.join(format!("{name}-src")).join("src");
    std::fs::create_dir_all(src.join("m")).expect("mkdir");
    for file in ["a.txt", "m/m1.txt", "m/m2.txt", "z.txt"] {
        std::fs::write(src.join(file), file).expect("write");
    }
    let dst = root.join(format!("{name}-dst"));
    std::fs::create_dir_all(dst.join("src/m")).expect("mkdir");
    chown_nobody(&dst);
    chown_nobody(&dst.join("src"));
    set_mode(&dst.join("src/m"), 0o755);
    (src, dst)
}

#[test]
fn a_permission_error_in_the_middle_is_reported_and_the_rest_copied() {
    let Some(server) = server_as_nobody() else {
        return;
    };
    let (_dir, root) = open_dir();
    // Upload: the files under root's m/ fail, each named; the rest lands.
    let (src, dst) = upload_setup(&root, "up");
    let up = cp(&server.url, &[], local(&src), &remote(&dst));
    assert_eq!(up.code, 1, "{up:?}");
    for failed in ["src/m/m1.txt", "src/m/m2.txt"] {
        let line = format!("{}: ", dst.join(failed).display());
        assert!(up.stderr.contains(&line), "no report for {failed}: {up:?}");
    }
    assert!(up.stderr.contains("Permission denied"), "{up:?}");
    assert_eq!(
        std::fs::read_to_string(dst.join("src/a.txt"))
            .ok()
            .as_deref(),
        Some("a.txt")
    );
    assert_eq!(
        std::fs::read_to_string(dst.join("src/z.txt"))
            .ok()
            .as_deref(),
        Some("z.txt")
    );
    assert!(!dst.join("src/m/m1.txt").exists());
    // --strict: the first failure ends the copy.
    let (src, dst) = upload_setup(&root, "strict");
    let strict = cp(&server.url, &["--strict"], local(&src), &remote(&dst));
    assert_eq!(strict.code, 1, "{strict:?}");
    assert_eq!(strict.stderr.lines().count(), 1, "{strict:?}");
    assert!(dst.join("src/a.txt").exists());
    assert!(!dst.join("src/z.txt").exists(), "--strict went on");
    // Download: a file nobody may read is reported; the rest comes.
    let tree = root.join("down-src/tree");
    std::fs::create_dir_all(&tree).expect("mkdir");
    for file in ["a.txt", "secret.txt", "z.txt"] {
        std::fs::write(tree.join(file), file).expect("write");
    }
    set_mode(&tree.join("secret.txt"), 0o600);
    let back = root.join("down-dst");
    let down = cp(&server.url, &[], &remote(&tree), local(&back));
    assert_eq!(down.code, 1, "{down:?}");
    assert!(
        down.stderr
            .contains(&format!("{}: ", tree.join("secret.txt").display()))
            && down.stderr.contains("Permission denied"),
        "{down:?}"
    );
    assert_eq!(
        std::fs::read_to_string(back.join("a.txt")).ok().as_deref(),
        Some("a.txt")
    );
    assert_eq!(
        std::fs::read_to_string(back.join("z.txt")).ok().as_deref(),
        Some("z.txt")
    );
}

#[test]
fn the_progress_line_shows_only_on_a_terminal() {
    let (_dir, root) = open_dir();
    std::fs::write(root.join("f"), vec![7u8; 3 << 20]).expect("write");
    let server = Server::start(&[]);
    let command = crate::common::shell::command(&[
        "cp",
        "--url",
        &server.url,
        local(&root.join("f")),
        &remote(&root.join("g")),
    ]);
    let (code, seen) = crate::common::shell::stderr_on_terminal(command, 80, "cp on a terminal");
    assert_eq!(code, 0);
    let shown = String::from_utf8_lossy(&seen);
    assert!(shown.contains("ETA") && shown.contains('\r'), "{shown:?}");
    assert!(shown.contains("copied 1 file(s), 3.0 MiB"), "{shown:?}");
    assert!(same_contents(&root.join("f"), &root.join("g")));
}
