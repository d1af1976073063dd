//! The incremental deny-glob index against the cold scan, through real
//! files: after any change made before a refresh (by this process or
//! another), `refresh()` equals a fresh `glob::expand` with the built-in
//! walker, including after queue overflows, watch limits, moved roots and
//! mounts. No test sleeps: a change that has returned is already queued.

use std::path::{Path, PathBuf};
use std::process::Command;

use codexbox::sandbox::deny_index::{DenyIndex, IndexLimits, RescanReason};
use codexbox::sandbox::glob::{self, GlobError, GlobExpansion, Scanner, MAX_GLOB_MATCHES};
use proptest::prelude::*;

use crate::common::host::not_applicable;
use crate::common::sandbox::Ws;

fn env_glob(ws: &Path) -> Vec<String> {
    vec![format!("{}/**/*.env", ws.display())]
}

fn cold(patterns: &[String], max_depth: Option<usize>) -> GlobExpansion {
    glob::expand(patterns, max_depth, &Scanner::BuiltIn).expect("cold scan")
}

/// Refreshes and checks the answer against a cold scan; returns it.
fn assert_exact(
    index: &mut DenyIndex,
    patterns: &[String],
    max_depth: Option<usize>,
) -> GlobExpansion {
    let warm = index.refresh().expect("refresh").clone();
    assert_eq!(
        warm,
        cold(patterns, max_depth),
        "index and cold scan differ"
    );
    warm
}

/// Runs `script` in `sh` (another process) and waits for it.
fn sh(cwd: &Path, script: &str) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .status()
        .expect("run sh");
    assert!(status.success(), "`{script}` failed: {status}");
}

#[test]
fn a_file_made_by_another_process_is_in_the_next_refresh() {
    let ws = Ws::new();
    ws.write("src/main.rs", "");
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    assert!(index.refresh().expect("refresh").paths.is_empty());
    sh(&ws.ws, "echo secret > src/.env");
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.contains(&ws.ws.join("src/.env")));
    assert_eq!(index.stats().full_rescans, 0, "found by replaying events");
}

#[test]
fn a_tree_made_at_once_is_scanned_below_the_new_directory() {
    let ws = Ws::new();
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    sh(&ws.ws, "mkdir -p a/b/c && touch a/b/c/x.env a/y.env");
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.contains(&ws.ws.join("a/b/c/x.env")));
    assert!(warm.paths.contains(&ws.ws.join("a/y.env")));
    // The new directories are watched: a later file below them is seen.
    sh(&ws.ws, "touch a/b/c/later.env");
    assert!(assert_exact(&mut index, &patterns, None)
        .paths
        .contains(&ws.ws.join("a/b/c/later.env")));
}

#[test]
fn files_and_trees_moved_in_from_outside_are_found() {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.outside.join("tree/deep")).unwrap();
    std::fs::write(ws.outside.join("tree/deep/k.env"), "").unwrap();
    std::fs::write(ws.outside.join("single.env"), "").unwrap();
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    std::fs::rename(ws.outside.join("tree"), ws.ws.join("tree")).unwrap();
    std::fs::rename(ws.outside.join("single.env"), ws.ws.join("single.env")).unwrap();
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.contains(&ws.ws.join("tree/deep/k.env")));
    assert!(warm.paths.contains(&ws.ws.join("single.env")));
}

#[test]
fn renamed_away_moved_out_and_deleted_matches_are_dropped() {
    let ws = Ws::new();
    ws.write("a/one.env", "");
    ws.write("b/deep/two.env", "");
    ws.write("three.env", "");
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    assert_eq!(index.refresh().expect("refresh").paths.len(), 3);
    std::fs::rename(ws.ws.join("a/one.env"), ws.ws.join("a/one.txt")).unwrap();
    std::fs::rename(ws.ws.join("b"), ws.outside.join("b")).unwrap();
    std::fs::remove_file(ws.ws.join("three.env")).unwrap();
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.is_empty(), "{warm:?}");
    // What moved out is no longer watched: changes there are not ours.
    std::fs::write(ws.outside.join("b/deep/new.env"), "").unwrap();
    assert!(assert_exact(&mut index, &patterns, None).paths.is_empty());
}

#[test]
fn a_directory_replaced_by_another_under_its_name_is_read_again() {
    let ws = Ws::new();
    ws.write("a/old.env", "");
    ws.write("other/sub/new.env", "");
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    // Both are watched; then they swap places by name without deletion.
    std::fs::rename(ws.ws.join("a"), ws.ws.join("a-old")).unwrap();
    std::fs::rename(ws.ws.join("other"), ws.ws.join("a")).unwrap();
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.contains(&ws.ws.join("a/sub/new.env")));
    assert!(warm.paths.contains(&ws.ws.join("a-old/old.env")));
    // And removed and made again under the same name.
    std::fs::remove_dir_all(ws.ws.join("a")).unwrap();
    ws.write("a/third.env", "");
    assert!(assert_exact(&mut index, &patterns, None)
        .paths
        .contains(&ws.ws.join("a/third.env")));
}

#[test]
fn a_directory_replaced_by_a_symlink_is_dropped_without_a_rescan() {
    let ws = Ws::new();
    ws.write("c/a/x.env", "");
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    std::fs::remove_dir_all(ws.ws.join("c")).unwrap();
    // A loop: looking up `c/a` now fails with ELOOP, not ENOENT.
    std::os::unix::fs::symlink(ws.ws.join("c"), ws.ws.join("c")).unwrap();
    assert!(assert_exact(&mut index, &patterns, None).paths.is_empty());
    assert_eq!(index.stats().full_rescans, 0);
}

#[test]
fn a_matching_directory_is_one_match_and_hides_its_inside() {
    let ws = Ws::new();
    ws.write("home/.ssh/id_rsa", "k");
    let patterns = vec![format!("{}/**/.ssh", ws.ws.display())];
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    let watches = index.stats().watches;
    sh(
        &ws.ws,
        "mkdir -p other/.ssh/sub && touch other/.ssh/sub/key",
    );
    let warm = assert_exact(&mut index, &patterns, None);
    assert_eq!(
        warm.paths,
        [ws.ws.join("home/.ssh"), ws.ws.join("other/.ssh")].into()
    );
    // Only `other` was added to the watches: nothing inside a match is read.
    assert_eq!(index.stats().watches, watches + 1);
    std::fs::rename(ws.ws.join("other/.ssh"), ws.ws.join("other/ssh-old")).unwrap();
    std::fs::remove_dir_all(ws.ws.join("home/.ssh")).unwrap();
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.is_empty(), "{warm:?}");
}

#[test]
fn a_matching_symlink_and_its_target_are_masked_and_follow_retargeting() {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.outside.join("t1")).unwrap();
    std::fs::create_dir_all(ws.outside.join("t2")).unwrap();
    std::fs::write(ws.outside.join("t1/secret"), "1").unwrap();
    std::fs::write(ws.outside.join("t2/secret"), "2").unwrap();
    std::os::unix::fs::symlink("t1", ws.outside.join("current")).unwrap();
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    std::os::unix::fs::symlink(ws.outside.join("current/secret"), ws.ws.join("link.env")).unwrap();
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.contains(&ws.ws.join("link.env")));
    assert!(warm.paths.contains(&ws.outside.join("t1/secret")));
    // Re-pointed outside the watched tree: no event, still exact.
    std::fs::remove_file(ws.outside.join("current")).unwrap();
    std::os::unix::fs::symlink("t2", ws.outside.join("current")).unwrap();
    let generation = index.generation();
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.contains(&ws.outside.join("t2/secret")));
    assert_eq!(index.generation(), generation + 1);
    // A dangling link is masked itself, with no target.
    std::fs::remove_file(ws.outside.join("t2/secret")).unwrap();
    let warm = assert_exact(&mut index, &patterns, None);
    assert_eq!(warm.paths, [ws.ws.join("link.env")].into());
}

#[test]
fn paths_put_in_the_answer_twice_stay_until_both_go() {
    let ws = Ws::new();
    ws.write("real.env", "");
    std::fs::write(ws.outside.join("shared"), "").unwrap();
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    // A link to another match, and two links to one target.
    std::os::unix::fs::symlink(ws.ws.join("real.env"), ws.ws.join("to-real.env")).unwrap();
    std::os::unix::fs::symlink(ws.outside.join("shared"), ws.ws.join("one.env")).unwrap();
    std::os::unix::fs::symlink(ws.outside.join("shared"), ws.ws.join("two.env")).unwrap();
    assert_exact(&mut index, &patterns, None);
    std::fs::remove_file(ws.ws.join("to-real.env")).unwrap();
    std::fs::remove_file(ws.ws.join("one.env")).unwrap();
    let warm = assert_exact(&mut index, &patterns, None);
    assert!(warm.paths.contains(&ws.ws.join("real.env")));
    assert!(warm.paths.contains(&ws.outside.join("shared")));
}

#[test]
fn a_forced_replay_fallback_rescans_and_stays_exact() {
    let ws = Ws::new();
    ws.write("a/keep.txt", "");
    let patterns = env_glob(&ws.ws);
    let limits = IndexLimits {
        max_events_per_refresh: 2,
        ..IndexLimits::default()
    };
    let mut index = DenyIndex::build_with(&patterns, None, limits).expect("build");
    sh(
        &ws.ws,
        "touch a/1.env a/2.txt a/3.env && mkdir b && touch b/4.env",
    );
    let warm = assert_exact(&mut index, &patterns, None);
    assert_eq!(warm.paths.len(), 3);
    assert_eq!(index.stats().full_rescans, 1);
    assert_eq!(index.rescan_reason(), None, "still watching");
    // Watches work again after the rescan.
    std::fs::write(ws.ws.join("b/5.env"), "").unwrap();
    assert_eq!(assert_exact(&mut index, &patterns, None).paths.len(), 4);
    assert_eq!(index.stats().full_rescans, 1);
}

#[test]
fn a_real_queue_overflow_rescans_and_stays_exact() {
    let queue: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(usize::MAX);
    if queue > 100_000 {
        not_applicable(&format!(
            "max_queued_events is {queue}: overflowing it takes too many files"
        ));
        return;
    }
    let ws = Ws::new();
    let dir = ws.ws.join("many");
    std::fs::create_dir(&dir).unwrap();
    let patterns = env_glob(&ws.ws);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    for n in 0..=queue {
        std::fs::File::create(dir.join(format!("f{n}"))).unwrap();
    }
    std::fs::write(dir.join("last.env"), "").unwrap();
    let warm = assert_exact(&mut index, &patterns, None);
    assert_eq!(warm.paths, [dir.join("last.env")].into());
    assert_eq!(index.stats().full_rescans, 1, "the overflow was seen");
}

#[test]
fn the_watch_limit_switches_to_exact_rescans() {
    let ws = Ws::new();
    ws.write("a/x.env", "");
    let patterns = env_glob(&ws.ws);
    let limits = IndexLimits {
        max_watches: 3,
        ..IndexLimits::default()
    };
    let mut index = DenyIndex::build_with(&patterns, None, limits).expect("build");
    assert_eq!(index.rescan_reason(), None, "two directories fit");
    assert_eq!(index.stats().watches, 2);
    sh(&ws.ws, "mkdir -p b/c/d && touch b/c/d/y.env");
    let warm = assert_exact(&mut index, &patterns, None);
    assert_eq!(warm.paths.len(), 2);
    assert_eq!(
        index.rescan_reason(),
        Some(&RescanReason::WatchLimit { limit: 3 })
    );
    assert_eq!(index.stats().watches, 0, "every watch was given back");
    std::fs::remove_file(ws.ws.join("a/x.env")).unwrap();
    std::fs::write(ws.ws.join("b/c/z.env"), "").unwrap();
    assert_eq!(assert_exact(&mut index, &patterns, None).paths.len(), 2);
    // Built over the limit: rescan mode from the start, same answer.
    let mut over = DenyIndex::build_with(&patterns, None, limits).expect("build");
    assert!(over.rescan_reason().is_some());
    assert_exact(&mut over, &patterns, None);
}

#[test]
fn a_moved_deleted_or_replaced_root_is_rescanned() {
    let ws = Ws::new();
    let root = ws.ws.join("proj");
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(root.join("d/old.env"), "").unwrap();
    let patterns = env_glob(&root);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    // The root moves away and another tree takes its place.
    std::fs::rename(&root, ws.ws.join("proj-old")).unwrap();
    std::fs::create_dir_all(ws.outside.join("new/e")).unwrap();
    std::fs::write(ws.outside.join("new/e/new.env"), "").unwrap();
    std::fs::rename(ws.outside.join("new"), &root).unwrap();
    assert_eq!(
        assert_exact(&mut index, &patterns, None).paths,
        [root.join("e/new.env")].into()
    );
    // Deleted: nothing; made again: found.
    std::fs::remove_dir_all(&root).unwrap();
    assert!(assert_exact(&mut index, &patterns, None).paths.is_empty());
    sh(&ws.ws, "mkdir -p proj/f && touch proj/f/again.env");
    assert_eq!(
        assert_exact(&mut index, &patterns, None).paths,
        [root.join("f/again.env")].into()
    );
    // An ancestor of the root is renamed and replaced.
    std::fs::rename(&ws.ws, ws.root.join("ws-old")).unwrap();
    std::fs::create_dir_all(root.join("g")).unwrap();
    std::fs::write(root.join("g/third.env"), "").unwrap();
    assert_eq!(
        assert_exact(&mut index, &patterns, None).paths,
        [root.join("g/third.env")].into()
    );
}

#[test]
fn a_symlinked_root_follows_its_target_and_adds_canonical_paths() {
    let ws = Ws::new();
    ws.write("one/a.env", "");
    ws.write("two/b.env", "");
    let link = ws.root.join("current");
    std::os::unix::fs::symlink(ws.ws.join("one"), &link).unwrap();
    let patterns = env_glob(&link);
    let mut index = DenyIndex::build(&patterns, None).expect("build");
    assert_eq!(
        index.refresh().expect("refresh").paths,
        [link.join("a.env"), ws.ws.join("one/a.env")].into()
    );
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(ws.ws.join("two"), &link).unwrap();
    assert_eq!(
        assert_exact(&mut index, &patterns, None).paths,
        [link.join("b.env"), ws.ws.join("two/b.env")].into()
    );
}

#[test]
fn too_many_matches_fail_as_the_cold_scan_and_recover() {
    let ws = Ws::new();
    let patterns = env_glob(&ws.ws);
    let many = ws.ws.join("many");
    std::fs::create_dir(&many).unwrap();
    for n in 0..MAX_GLOB_MATCHES {
        std::fs::File::create(many.join(format!("{n}.env"))).unwrap();
    }
    let mut index = DenyIndex::build(&patterns, None).expect("at the limit");
    assert_eq!(
        index.refresh().expect("refresh").paths.len(),
        MAX_GLOB_MATCHES
    );
    std::fs::File::create(many.join("one-more.env")).unwrap();
    let err = index.refresh().expect_err("over the limit");
    assert!(
        matches!(err, GlobError::TooManyMatches { ref root } if root == &ws.ws),
        "{err}"
    );
    assert!(matches!(
        DenyIndex::build(&patterns, None),
        Err(GlobError::TooManyMatches { .. })
    ));
    // Failed refreshes keep failing until the workspace is back under it.
    assert!(index.refresh().is_err());
    std::fs::remove_file(many.join("0.env")).unwrap();
    assert_eq!(
        assert_exact(&mut index, &patterns, None).paths.len(),
        MAX_GLOB_MATCHES
    );
}

#[test]
fn an_unreadable_directory_fails_as_the_cold_scan() {
    let ws = Ws::new();
    ws.write("locked/x.env", "");
    let workspace = ws.ws.clone();
    as_an_ordinary_user(&ws.root, move || {
        let patterns = env_glob(&workspace);
        let mut index = DenyIndex::build(&patterns, None).expect("build");
        let locked = workspace.join("locked");
        let mode = |m| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(m)).unwrap();
        };
        mode(0o000);
        let warm = index.refresh().map(|_| ()).map_err(|e| e.to_string());
        let cold = glob::expand(&patterns, None, &Scanner::BuiltIn)
            .map(|_| ())
            .map_err(|e| e.to_string());
        mode(0o755);
        assert!(cold.is_err(), "the cold scan reads an unreadable directory");
        assert_eq!(warm, cold);
        assert_exact(&mut index, &patterns, None);
    });
}

/// Runs `body` with the caller's credentials, or, for root (who reads
/// everything), in a thread whose own credentials are those of `nobody`
/// (credentials are per thread in the kernel; the raw system calls change
/// only the calling thread's), after giving it the tree under `owned`.
fn as_an_ordinary_user(owned: &Path, body: impl FnOnce() + Send + 'static) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        body();
        return;
    }
    const NOBODY: u32 = 65534;
    let mut pending = vec![owned.to_path_buf()];
    while let Some(path) = pending.pop() {
        std::os::unix::fs::lchown(&path, Some(NOBODY), Some(NOBODY)).expect("chown");
        if path.is_dir() && !path.is_symlink() {
            for entry in std::fs::read_dir(&path).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
        }
    }
    std::thread::spawn(move || {
        let id = libc::c_long::from(NOBODY);
        // SAFETY: setresgid and setresuid take three ids and no pointers;
        // called raw, they change this thread's credentials only.
        let changed = unsafe {
            libc::syscall(libc::SYS_setresgid, id, id, id) == 0
                && libc::syscall(libc::SYS_setresuid, id, id, id) == 0
        };
        assert!(
            changed,
            "cannot become nobody: {}",
            std::io::Error::last_os_error()
        );
        body();
    })
    .join()
    .expect("the test thread panicked");
}

/// Runs `body` in a thread with a mount namespace of its own (root only),
/// so mounts made there touch nothing else.
fn in_private_mount_namespace(body: impl FnOnce() + Send + 'static) -> bool {
    use nix::mount::{mount, MsFlags};
    use nix::sched::{unshare, CloneFlags};
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        not_applicable("mounting needs root");
        return false;
    }
    std::thread::spawn(move || {
        unshare(CloneFlags::CLONE_NEWNS).expect("unshare the mount namespace");
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .expect("make mounts private");
        body();
    })
    .join()
    .expect("the test thread panicked");
    true
}

#[test]
fn a_mount_under_the_root_is_scanned_and_its_removal_noticed() {
    in_private_mount_namespace(|| {
        use nix::mount::{mount, umount, MsFlags};
        let ws = Ws::new();
        ws.write("cache/keep.txt", "");
        let patterns = env_glob(&ws.ws);
        let mut index = DenyIndex::build(&patterns, None).expect("build");
        let cache = ws.ws.join("cache");
        mount(
            Some("tmpfs"),
            &cache,
            Some("tmpfs"),
            MsFlags::empty(),
            None::<&str>,
        )
        .expect("mount tmpfs");
        std::fs::write(cache.join("in-mount.env"), "").unwrap();
        assert_eq!(
            assert_exact(&mut index, &patterns, None).paths,
            [cache.join("in-mount.env")].into()
        );
        // Files in the mount are watched too.
        std::fs::write(cache.join("second.env"), "").unwrap();
        assert_eq!(assert_exact(&mut index, &patterns, None).paths.len(), 2);
        umount(&cache).expect("unmount");
        assert!(assert_exact(&mut index, &patterns, None).paths.is_empty());
        assert_eq!(index.rescan_reason(), None);
    });
}

#[test]
fn a_filesystem_inotify_cannot_follow_switches_to_rescans() {
    in_private_mount_namespace(|| {
        use nix::mount::{mount, MsFlags};
        let ws = Ws::new();
        ws.write("a/x.env", "");
        std::fs::create_dir(ws.ws.join("queues")).unwrap();
        let patterns = env_glob(&ws.ws);
        let mut index = DenyIndex::build(&patterns, None).expect("build");
        // mqueue stands for any filesystem not known to report its changes.
        mount(
            Some("mqueue"),
            &ws.ws.join("queues"),
            Some("mqueue"),
            MsFlags::empty(),
            None::<&str>,
        )
        .expect("mount mqueue");
        std::fs::write(ws.ws.join("a/y.env"), "").unwrap();
        assert_eq!(assert_exact(&mut index, &patterns, None).paths.len(), 2);
        assert!(
            matches!(
                index.rescan_reason(),
                Some(RescanReason::Filesystem { fstype, .. }) if fstype == "mqueue"
            ),
            "{:?}",
            index.rescan_reason()
        );
        std::fs::write(ws.ws.join("a/z.env"), "").unwrap();
        assert_eq!(assert_exact(&mut index, &patterns, None).paths.len(), 3);
        nix::mount::umount(&ws.ws.join("queues")).expect("unmount");
    });
}

/// One filesystem change in the property test. Paths are relative to the
/// test's directory, which holds the workspace `ws` and `outside`.
#[derive(Debug, Clone)]
enum Op {
    Write(String),
    Mkdir(String),
    Symlink {
        link: String,
        target: String,
    },
    Rename {
        from: String,
        to: String,
    },
    /// `renameat2(RENAME_EXCHANGE)`: two names swap what they point to.
    Exchange {
        a: String,
        b: String,
    },
    Remove(String),
    /// Refresh and compare in the middle of the sequence.
    Check,
}

fn rel_path() -> impl Strategy<Value = String> {
    let top = prop_oneof![4 => Just("ws"), 1 => Just("outside")];
    let name = prop::sample::select(vec!["a", "b", ".ssh", "x.env", "k.key", "c"]);
    (top, prop::collection::vec(name, 1..4))
        .prop_map(|(top, names)| format!("{top}/{}", names.join("/")))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => rel_path().prop_map(Op::Write),
        3 => rel_path().prop_map(Op::Mkdir),
        1 => (rel_path(), rel_path()).prop_map(|(link, target)| Op::Symlink { link, target }),
        3 => (rel_path(), rel_path()).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => (rel_path(), rel_path()).prop_map(|(a, b)| Op::Exchange { a, b }),
        2 => rel_path().prop_map(Op::Remove),
        1 => Just(Op::Check),
    ]
}

/// Applies `op` under `base`; failures (a missing parent, a rename into a
/// full directory) are part of the game and ignored.
fn apply(base: &Path, op: &Op) {
    let at = |rel: &str| base.join(rel);
    let _ = match op {
        Op::Write(p) => std::fs::write(at(p), "x"),
        Op::Mkdir(p) => std::fs::create_dir_all(at(p)),
        Op::Symlink { link, target } => std::os::unix::fs::symlink(at(target), at(link)),
        Op::Rename { from, to } => std::fs::rename(at(from), at(to)),
        Op::Exchange { a, b } => nix::fcntl::renameat2(
            nix::fcntl::AT_FDCWD,
            &at(a),
            nix::fcntl::AT_FDCWD,
            &at(b),
            nix::fcntl::RenameFlags::RENAME_EXCHANGE,
        )
        .map_err(std::io::Error::from),
        Op::Remove(p) => std::fs::remove_file(at(p)).or_else(|_| std::fs::remove_dir_all(at(p))),
        Op::Check => Ok(()),
    };
}

fn property_patterns(ws: &Path) -> Vec<String> {
    vec![
        format!("{}/**/*.env", ws.display()),
        format!("{}/**/.ssh", ws.display()),
        // A second search root inside the first.
        format!("{}/a/*.key", ws.display()),
        format!("{}/b/[ab]/**", ws.display()),
    ]
}

/// Refreshes, checks the answer against a cold scan and the generation
/// against the answer before: a different answer has a new generation, and
/// a second refresh with nothing changed keeps both.
fn check(
    index: &mut DenyIndex,
    patterns: &[String],
    max_depth: Option<usize>,
    last: &mut (GlobExpansion, u64),
) -> Result<(), TestCaseError> {
    let warm = index.refresh().expect("refresh").clone();
    prop_assert_eq!(&warm, &cold(patterns, max_depth));
    let generation = index.generation();
    if warm != last.0 {
        prop_assert!(
            generation > last.1,
            "the answer changed, the generation did not"
        );
    }
    prop_assert_eq!(index.refresh().expect("refresh"), &warm);
    prop_assert_eq!(
        index.generation(),
        generation,
        "nothing changed, the generation did"
    );
    *last = (warm, generation);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn refresh_equals_a_cold_scan_after_any_changes(
        before in prop::collection::vec(op(), 0..12),
        after in prop::collection::vec(op(), 1..24),
        max_depth in prop::sample::select(vec![None, Some(2), Some(3)]),
    ) {
        let ws = Ws::new();
        let base: PathBuf = ws.root.clone();
        for op in &before {
            apply(&base, op);
        }
        let patterns = property_patterns(&ws.ws);
        let mut index = DenyIndex::build(&patterns, max_depth).expect("build");
        let mut last = (index.refresh().expect("refresh").clone(), index.generation());
        prop_assert_eq!(&last.0, &cold(&patterns, max_depth));
        for op in &after {
            apply(&base, op);
            if matches!(op, Op::Check) {
                check(&mut index, &patterns, max_depth, &mut last)?;
            }
        }
        check(&mut index, &patterns, max_depth, &mut last)?;
        prop_assert_eq!(index.stats().full_rescans, 0);
    }
}
