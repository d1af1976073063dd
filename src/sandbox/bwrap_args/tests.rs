//! Exact argv for each policy shape and each improvement.

use super::*;
use crate::policy::{
    FileSystemAccessMode::{Deny, Read, Write},
    FileSystemSandboxEntry, FileSystemSandboxPolicy, PermissionProfile, ResolveContext,
};

/// A resolved policy with what it grants on this host.
struct Resolved {
    policy: ResolvedPolicy,
    host: HostView,
}

fn inputs<'a>(resolved: &'a Resolved, cwd: &Path) -> BwrapInputs<'a> {
    BwrapInputs {
        policy: &resolved.policy,
        host: &resolved.host,
        command_cwd: cwd.to_path_buf(),
        network_enabled: false,
        mount_proc: true,
        caps: LauncherCaps::ALL,
        glob_matches: BTreeSet::new(),
        extra_deny: Vec::new(),
        extra_read: Vec::new(),
        managed_proxy: None,
        inner: InnerCommand {
            exe: PathBuf::from("/opt/codexbox"),
            flags: vec!["--apply-seccomp-then-exec".into()],
            command: vec!["/bin/true".into()],
        },
    }
}

fn render(cmd: &BwrapCommand) -> String {
    cmd.render_example()
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn resolve(fs: &FileSystemSandboxPolicy, cwd: &Path) -> Resolved {
    let policy = fs.resolve_with(&ResolveContext {
        cwd: cwd.to_path_buf(),
        tmpdir: None,
        project_roots: Vec::new(),
        plantable: Vec::new(),
    });
    let host = policy.host_view();
    Resolved { policy, host }
}

const NS: &str = "--unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup-try";
const PROC_RO: &str = "--ro-bind /proc/sys /proc/sys \
    --ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger \
    --ro-bind-try /proc/irq /proc/irq --ro-bind-try /proc/bus /proc/bus \
    --perms 555 --tmpfs /proc/1 --remount-ro /proc/1";

#[test]
fn read_only_argv_with_argv0() {
    let policy = resolve(&FileSystemSandboxPolicy::read_only(), Path::new("/"));
    let cmd = build(&inputs(&policy, Path::new("/"))).unwrap();
    assert_eq!(
        render(&cmd),
        format!(
            "--new-session --die-with-parent --ro-bind / / --dev /dev {NS} --unshare-net \
             --disable-userns --cap-drop ALL --proc /proc {PROC_RO} --chdir / --argv0 codex-linux-sandbox \
             -- /opt/codexbox --apply-seccomp-then-exec -- /bin/true"
        )
    );
    assert!(cmd.synthetic_targets.is_empty());
}

#[test]
fn launcher_without_argv0_uses_the_marker_form_and_only_first_separator() {
    let policy = resolve(&FileSystemSandboxPolicy::read_only(), Path::new("/"));
    let mut i = inputs(&policy, Path::new("/"));
    i.caps = LauncherCaps {
        argv0: false,
        perms: true,
        cap_drop: true,
        disable_userns: false,
    };
    i.network_enabled = true;
    i.mount_proc = false;
    i.inner.command = vec!["/opt/codexbox".into(), "--".into(), "x".into()];
    let cmd = build(&i).unwrap();
    assert_eq!(
        render(&cmd),
        format!(
            "--new-session --die-with-parent --ro-bind / / --dev /dev {NS} --cap-drop ALL \
             --perms 555 --tmpfs /proc --remount-ro /proc --chdir / -- /opt/codexbox --codex-run-as-linux-sandbox --apply-seccomp-then-exec -- \
             /opt/codexbox -- x"
        )
    );
}

fn fixture() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    (dir, root)
}

#[test]
fn workspace_masks_metadata_and_records_synthetic_targets() {
    let (_dir, root) = fixture();
    let repo = root.join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let (fs, _) = PermissionProfile::workspace_write().to_runtime();
    let mut fs = fs;
    // Keep the test independent of the host's /tmp and $TMPDIR.
    fs.entries.retain(|e| {
        !matches!(
            e.path,
            crate::policy::FileSystemPath::Special {
                value: crate::policy::FileSystemSpecialPath::SlashTmp
                    | crate::policy::FileSystemSpecialPath::Tmpdir
            }
        )
    });
    let policy = resolve(&fs, &repo);
    let cmd = build(&inputs(&policy, &repo)).unwrap();
    let r = repo.display();
    assert_eq!(
        render(&cmd),
        format!(
            "--new-session --die-with-parent --ro-bind / / --dev /dev --bind {r} {r} \
             --perms 555 --tmpfs {r}/.agents --remount-ro {r}/.agents \
             --perms 555 --tmpfs {r}/.codex --remount-ro {r}/.codex \
             --ro-bind {r}/.git {r}/.git \
             {NS} --unshare-net --disable-userns --cap-drop ALL --proc /proc {PROC_RO} --chdir {r} \
             --argv0 codex-linux-sandbox -- /opt/codexbox --apply-seccomp-then-exec -- /bin/true"
        )
    );
    assert_eq!(
        cmd.synthetic_targets,
        vec![
            SyntheticTarget {
                path: repo.join(".agents"),
                is_dir: true
            },
            SyntheticTarget {
                path: repo.join(".codex"),
                is_dir: true
            }
        ]
    );
    assert!(
        !repo.join(".codex").exists(),
        "nothing created at build time"
    );
}

fn split(entries: Vec<FileSystemSandboxEntry>) -> FileSystemSandboxPolicy {
    FileSystemSandboxPolicy {
        entries,
        ..Default::default()
    }
}

#[test]
fn split_policy_reenables_writable_subpaths_after_unreadable_parent() {
    let (_dir, root) = fixture();
    std::fs::create_dir_all(root.join("a/b/c")).unwrap();
    std::fs::write(root.join("a/f.txt"), "x").unwrap();
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Root, Read),
        FileSystemSandboxEntry::path(root.join("a"), Deny),
        FileSystemSandboxEntry::path(root.join("a/b/c"), Write),
        FileSystemSandboxEntry::path(root.join("a/f.txt"), Write),
    ]);
    let policy = resolve(&fs, &root);
    let cmd = build(&inputs(&policy, &root)).unwrap();
    let r = root.display();
    let text = render(&cmd);
    let fs_part = text
        .split(" --unshare-user")
        .next()
        .unwrap()
        .trim_start_matches("--new-session --die-with-parent ");
    // Two fds: the re-opened file's mount point and nothing else.
    assert_eq!(
        fs_part,
        format!(
            "--ro-bind / / --dev /dev --perms 111 --tmpfs {r}/a --perms 111 --dir {r}/a/b \
             --perms 111 --dir {r}/a/b/c --perms 000 --file 3 {r}/a/f.txt --remount-ro {r}/a \
             --bind {r}/a/f.txt {r}/a/f.txt \
             --bind {r}/a/b/c {r}/a/b/c \
             --perms 555 --tmpfs {r}/a/b/c/.git --remount-ro {r}/a/b/c/.git \
             --perms 555 --tmpfs {r}/a/b/c/.agents --remount-ro {r}/a/b/c/.agents \
             --perms 555 --tmpfs {r}/a/b/c/.codex --remount-ro {r}/a/b/c/.codex"
        )
    );
}

#[test]
fn deny_under_write_is_reapplied_after_the_bind_and_files_use_their_own_fd() {
    let (_dir, root) = fixture();
    std::fs::create_dir_all(root.join("w/secret")).unwrap();
    std::fs::write(root.join("w/key.pem"), "k").unwrap();
    std::fs::write(root.join("w/other.pem"), "k").unwrap();
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Root, Read),
        FileSystemSandboxEntry::path(root.join("w"), Write),
        FileSystemSandboxEntry::path(root.join("w/.git"), Write),
        FileSystemSandboxEntry::path(root.join("w/.agents"), Write),
        FileSystemSandboxEntry::path(root.join("w/.codex"), Write),
        FileSystemSandboxEntry::path(root.join("w/secret"), Deny),
    ]);
    let policy = resolve(&fs, Path::new("/elsewhere"));
    let mut i = inputs(&policy, &root);
    i.glob_matches = [root.join("w/key.pem"), root.join("w/other.pem")].into();
    let cmd = build(&i).unwrap();
    let text = render(&cmd);
    let r = root.display();
    assert!(
        text.contains(&format!(
            "--bind {r}/w {r}/w --perms 000 --ro-bind-data 3 {r}/w/key.pem \
             --perms 000 --ro-bind-data 4 {r}/w/other.pem \
             --perms 000 --tmpfs {r}/w/secret --remount-ro {r}/w/secret"
        )),
        "{text}"
    );
    assert_eq!(cmd.fd_count(), 2);
}

#[test]
fn restricted_read_uses_tmpfs_root_and_makes_the_helper_readable() {
    let (_dir, root) = fixture();
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Minimal, Read),
        FileSystemSandboxEntry::path(root.clone(), Read),
    ]);
    let policy = resolve(&fs, &root);
    let mut i = inputs(&policy, &root);
    i.extra_read = vec![PathBuf::from("/usr/bin/env")];
    let text = render(&build(&i).unwrap());
    assert!(text.starts_with("--new-session --die-with-parent --tmpfs / --dev /dev"));
    assert!(text.contains(&format!("--ro-bind {0} {0}", root.display())));
    assert!(text.contains("--ro-bind /usr /usr"));
    assert!(text.contains("--ro-bind /usr/bin/env /usr/bin/env"));
}

/// A read entry behind a symlink in a writable root keeps the target
/// read-only (protected metadata behind one is refused earlier, by
/// `sandbox::read_only_links`).
#[test]
fn a_read_only_entry_behind_a_symlink_is_masked_at_its_target() {
    let (_dir, root) = fixture();
    let w = root.join("w");
    std::fs::create_dir_all(w.join("decoy")).unwrap();
    std::os::unix::fs::symlink("decoy", w.join("docs")).unwrap();
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Root, Read),
        FileSystemSandboxEntry::path(w.clone(), Write),
        FileSystemSandboxEntry::path(w.join("docs"), Read),
    ]);
    let policy = resolve(&fs, &w);
    let text = render(&build(&inputs(&policy, &w)).unwrap());
    let d = w.join("decoy");
    assert!(
        text.contains(&format!("--ro-bind {0} {0}", d.display())),
        "{text}"
    );
}

#[test]
fn symlinked_writable_root_binds_real_target() {
    let (_dir, root) = fixture();
    std::fs::create_dir_all(root.join("real/.git")).unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Root, Read),
        FileSystemSandboxEntry::path(root.join("link"), Write),
    ]);
    let policy = resolve(&fs, Path::new("/elsewhere"));
    let text = render(&build(&inputs(&policy, &root)).unwrap());
    let real = root.join("real");
    assert!(
        text.contains(&format!(
            "--bind {0} {0} --ro-bind {0}/.git {0}/.git",
            real.display()
        )),
        "{text}"
    );
}

#[test]
fn missing_writable_roots_are_skipped() {
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Root, Read),
        FileSystemSandboxEntry::path("/does/not/exist", Write),
    ]);
    let policy = resolve(&fs, Path::new("/"));
    let text = render(&build(&inputs(&policy, Path::new("/"))).unwrap());
    assert!(!text.contains("--bind /does"), "{text}");
}

#[test]
fn helper_state_directory_is_hidden() {
    let (_dir, root) = fixture();
    let state = root.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let policy = resolve(&FileSystemSandboxPolicy::read_only(), Path::new("/"));
    let mut i = inputs(&policy, Path::new("/"));
    i.extra_deny = vec![state.clone()];
    let text = render(&build(&i).unwrap());
    assert!(
        text.contains(&format!(
            "--perms 000 --tmpfs {0} --remount-ro {0} --unshare-user",
            state.display()
        )),
        "{text}"
    );
}

#[test]
fn restricted_policy_chdirs_to_canonical_command_cwd() {
    let (_dir, root) = fixture();
    std::fs::create_dir_all(root.join("real")).unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
    let policy = resolve(&FileSystemSandboxPolicy::read_only(), &root);
    let text = render(&build(&inputs(&policy, &root.join("alias"))).unwrap());
    assert!(
        text.contains(&format!("--chdir {} --argv0", root.join("real").display())),
        "{text}"
    );
}

#[test]
fn root_read_directory_carve_outs_are_masked_read_only() {
    let (_dir, root) = fixture();
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Root, Read),
        FileSystemSandboxEntry::path(root.join("secrets"), Deny),
    ]);
    let policy = resolve(&fs, &root);
    let text = render(&build(&inputs(&policy, &root)).unwrap());
    assert!(
        text.starts_with(&format!(
            "--new-session --die-with-parent --ro-bind / / --dev /dev \
             --perms 000 --tmpfs {0} --remount-ro {0} --unshare-user",
            root.join("secrets").display()
        )),
        "{text}"
    );
}

#[test]
fn writable_root_slash_keeps_the_minimal_dev() {
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Root, Write),
        FileSystemSandboxEntry::path("/dev/shm", Write),
        FileSystemSandboxEntry::path("/etc", Read),
    ]);
    let policy = resolve(&fs, Path::new("/"));
    let text = render(&build(&inputs(&policy, Path::new("/"))).unwrap());
    assert!(
        text.starts_with(
            "--new-session --die-with-parent --ro-bind / / --dev /dev --bind / / --dev /dev "
        ),
        "{text}"
    );
    let etc = text.find("--ro-bind /etc /etc").unwrap();
    let shm = text.find("--bind /dev/shm /dev/shm").unwrap();
    assert!(etc < shm, "{text}");
}

#[test]
fn managed_proxy_binds_only_the_stubs_resolv_conf_last_and_drops_every_capability() {
    let policy = resolve(&FileSystemSandboxPolicy::read_only(), Path::new("/"));
    let mut i = inputs(&policy, Path::new("/"));
    // With a DNS stub the launcher starts in the helper's network
    // namespace: no --unshare-net, and still no capability for anyone.
    i.managed_proxy = Some(ProxyMounts {
        resolv_conf: Some((
            PathBuf::from("/run/codexbox/resolv.conf"),
            PathBuf::from("/etc/resolv.conf"),
        )),
    });
    assert_eq!(
        render(&build(&i).unwrap()),
        format!(
            "--new-session --die-with-parent --ro-bind / / --dev /dev \
             --ro-bind /run/codexbox/resolv.conf /etc/resolv.conf {NS} \
             --disable-userns --cap-drop ALL --proc /proc {PROC_RO} \
             --chdir / --argv0 codex-linux-sandbox -- /opt/codexbox --apply-seccomp-then-exec -- /bin/true"
        )
    );
    // Without one, bubblewrap makes the namespace.
    i.managed_proxy = Some(ProxyMounts { resolv_conf: None });
    assert_eq!(
        render(&build(&i).unwrap()),
        format!(
            "--new-session --die-with-parent --ro-bind / / --dev /dev \
             {NS} --unshare-net \
             --disable-userns --cap-drop ALL --proc /proc {PROC_RO} \
             --chdir / --argv0 codex-linux-sandbox -- /opt/codexbox --apply-seccomp-then-exec -- /bin/true"
        )
    );
}

#[test]
fn prefixes_come_shortest_first_without_the_root() {
    for path in ["/a/b/c.env", "/a", "/", "/a/b/", "a/b"] {
        let path = Path::new(path);
        let walked: Vec<PathBuf> = shortest_first(path).map(Path::to_path_buf).collect();
        assert_eq!(walked, prefixes(path), "{}", path.display());
    }
}

/// A type the caller vouches for is taken as it is (the disk is not asked)
/// and not returned as looked at; everything else is looked at once.
#[test]
fn vouched_types_are_taken_and_the_rest_looked_at() {
    let (_tmp, root) = fixture();
    std::fs::create_dir_all(root.join("ws/sub")).unwrap();
    std::fs::write(root.join("ws/sub/a.env"), "").unwrap();
    let fs = split(vec![
        FileSystemSandboxEntry::special(crate::policy::FileSystemSpecialPath::Root, Read),
        FileSystemSandboxEntry::path(root.join("ws"), Write),
    ]);
    let ws = root.join("ws");
    let policy = resolve(&fs, &ws);
    let mut i = inputs(&policy, &ws);
    let masked = ws.join("sub/a.env");
    i.glob_matches = [masked.clone()].into_iter().collect();
    let (plain, looked_at) = build_with_known(&i, None).unwrap();
    assert!(looked_at.contains_key(&masked), "{looked_at:?}");
    assert!(looked_at.contains_key(&ws.join("sub")), "{looked_at:?}");
    // Told the directory on the way is a link: the mask follows it no more.
    let link = std::fs::symlink_metadata("/proc/self").unwrap().file_type();
    let told: FileTypes = [(ws.join("sub"), Some(link))].into_iter().collect();
    let (vouched, looked_again) = build_with_known(&i, Some(&told)).unwrap();
    assert!(!looked_again.contains_key(&ws.join("sub")));
    assert_ne!(render(&plain), render(&vouched));
    assert!(!render(&vouched).contains("a.env"), "{}", render(&vouched));
    assert!(render(&plain).contains("a.env"), "{}", render(&plain));
}
