//! Lifecycle and privileges of the built-in bwrap, against the system
//! bubblewrap where they should match: `--die-with-parent` (the launcher's
//! parent, the launcher, the sandbox helper killed), sessions and
//! controlling terminals, capabilities and the user namespaces the command
//! runs in, for a root and an unprivileged caller. Intended differences are
//! asserted in the tests named `builtin_*`, with their reason.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::bwrap::{
    assert_same_as, builtin_link, callers, command_as, descendants, have_system_bwrap, kill_all,
    pass_fd, run_as, wait_until_gone, Caller, Impl, CODEXBOX, NOBODY, SYSTEM_BWRAP,
};

/// The safety net for processes expected to end (they normally end at once).
const ENDS_WITHIN: Duration = Duration::from_secs(20);

/// How long a sandbox expected to stay is watched before it counts as staying.
const STAYS_FOR: Duration = Duration::from_secs(1);

/// The launcher binary as `caller` starts it (argv[0] `bwrap` either way).
fn launcher_path(which: Impl) -> String {
    match which {
        Impl::System => SYSTEM_BWRAP.to_owned(),
        _ => builtin_link().to_str().expect("utf-8 link").to_owned(),
    }
}

/// `program args…` started by `caller`, stdout piped, stderr discarded.
fn spawn_as(caller: Caller, program: &str, args: &[&str]) -> Child {
    let mut cmd = match caller {
        Caller::Current => Command::new(program),
        Caller::Nobody => {
            let mut cmd = Command::new("/usr/bin/setpriv");
            let (reuid, regid) = (format!("--reuid={NOBODY}"), format!("--regid={NOBODY}"));
            cmd.args([reuid.as_str(), regid.as_str(), "--clear-groups", program]);
            cmd
        }
    };
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    crate::common::redteam::only_std_fds(&mut cmd);
    cmd.spawn().expect("spawn")
}

/// Reads the child's stdout up to its `ready` line.
fn wait_ready(child: &mut Child) {
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("ready line");
    assert_eq!(line, "ready\n", "the command did not start");
}

/// The command a sandbox runs to be watched: with a pid namespace it leaves
/// a second process behind, which the namespace must take down too.
fn sleeper(pid_namespace: bool) -> &'static str {
    if pid_namespace {
        "sleep 600 & echo ready; exec sleep 600"
    } else {
        "echo ready; exec sleep 600"
    }
}

/// Starts `which` (as `caller`) below a shell, waits until the command
/// runs, SIGKILLs the shell — the launcher's parent — and returns what of
/// the launcher and the sandbox is still running after `watch`.
fn survivors_of_killed_parent(
    which: Impl,
    caller: Caller,
    pid_namespace: bool,
    die_with_parent: bool,
    watch: Duration,
) -> Vec<i32> {
    let launcher = launcher_path(which);
    let mut args = vec![
        "-c",
        "\"$@\" & wait",
        "sh",
        &launcher,
        "--ro-bind",
        "/",
        "/",
    ];
    if pid_namespace {
        args.push("--unshare-pid");
    }
    if die_with_parent {
        args.push("--die-with-parent");
    }
    args.extend(["sh", "-c", sleeper(pid_namespace)]);
    let mut parent = spawn_as(caller, "/bin/sh", &args);
    wait_ready(&mut parent);
    let tree = descendants(i32::try_from(parent.id()).expect("pid"));
    assert!(tree.len() >= 2, "launcher and command expected: {tree:?}");
    parent.kill().expect("kill the launcher's parent");
    parent.wait().expect("reap it");
    let left = wait_until_gone(&tree, watch);
    kill_all(&left);
    left
}

#[test]
fn die_with_parent_follows_the_launchers_parent_like_bubblewrap() {
    if !have_system_bwrap("die_with_parent_follows_the_launchers_parent_like_bubblewrap") {
        return;
    }
    for caller in callers() {
        for which in [Impl::System, Impl::Builtin] {
            for pid_namespace in [true, false] {
                let left =
                    survivors_of_killed_parent(which, caller, pid_namespace, true, ENDS_WITHIN);
                assert!(
                    left.is_empty(),
                    "{caller:?} {which:?} pid namespace {pid_namespace}: {left:?} still running"
                );
            }
        }
    }
}

#[test]
fn without_die_with_parent_the_sandbox_outlives_the_launchers_parent() {
    if !have_system_bwrap("without_die_with_parent_the_sandbox_outlives_the_launchers_parent") {
        return;
    }
    for which in [Impl::System, Impl::Builtin] {
        let left = survivors_of_killed_parent(which, Caller::Current, true, false, STAYS_FOR);
        assert!(
            !left.is_empty(),
            "{which:?}: the sandbox went with its parent"
        );
    }
}

#[test]
fn die_with_parent_follows_the_launcher_like_bubblewrap() {
    if !have_system_bwrap("die_with_parent_follows_the_launcher_like_bubblewrap") {
        return;
    }
    for caller in callers() {
        for which in [Impl::System, Impl::Builtin] {
            let launcher = launcher_path(which);
            let args = [
                "--ro-bind",
                "/",
                "/",
                "--unshare-pid",
                "--die-with-parent",
                "sh",
                "-c",
                sleeper(true),
            ];
            let mut child = spawn_as(caller, &launcher, &args);
            wait_ready(&mut child);
            let tree = descendants(i32::try_from(child.id()).expect("pid"));
            child.kill().expect("kill the launcher");
            child.wait().expect("reap it");
            let left = wait_until_gone(&tree, ENDS_WITHIN);
            kill_all(&left);
            assert!(
                left.is_empty(),
                "{caller:?} {which:?}: {left:?} still running"
            );
        }
    }
}

#[test]
fn builtin_arms_die_with_parent_before_any_setup() {
    // Documented improvement (docs/sandbox.md): bubblewrap arms the death
    // signal only once the command is forked, so a launcher killed during
    // setup leaves the sandbox running; the built-in arms it first. The
    // launcher is killed as soon as it reports the sandbox's first process,
    // before that process has set anything up.
    for caller in callers() {
        for _ in 0..3 {
            let (read, write) = nix::unistd::pipe().expect("pipe");
            let args = [
                "--ro-bind",
                "/",
                "/",
                "--unshare-pid",
                "--die-with-parent",
                "--info-fd",
                "3",
                "sh",
                "-c",
                sleeper(true),
            ];
            let mut cmd = command_as(Impl::Builtin, caller, &args);
            pass_fd(&mut cmd, &write, 3);
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let mut launcher = cmd.spawn().expect("spawn launcher");
            drop((cmd, write));
            let mut info = String::new();
            fs::File::from(read)
                .read_to_string(&mut info)
                .expect("read info");
            let pid = info
                .split("\"child-pid\":")
                .nth(1)
                .and_then(|rest| rest.split([',', '\n', '}']).next())
                .and_then(|num| num.trim().parse::<i32>().ok())
                .unwrap_or_else(|| panic!("no child-pid in {info:?}"));
            launcher.kill().expect("kill launcher");
            launcher.wait().expect("reap launcher");
            let left = wait_until_gone(&[pid], ENDS_WITHIN);
            kill_all(&left);
            assert!(
                left.is_empty(),
                "{caller:?}: sandbox {pid} outlived its launcher"
            );
        }
    }
}

/// The sandbox helper's command line for the read-only profile.
fn helper_args(cwd: &str) -> Vec<String> {
    let profile = r#"{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"}"#;
    [
        "linux-sandbox",
        "--sandbox-policy-cwd",
        cwd,
        "--permission-profile",
        profile,
        "--",
        "sh",
        "-c",
        sleeper(true),
    ]
    .map(str::to_owned)
    .to_vec()
}

#[test]
fn killing_the_sandbox_helper_takes_the_whole_sandbox() {
    // The helper starts the launcher with --die-with-parent: SIGKILLing the
    // helper must leave no launcher, pid 1 or command behind, with either
    // launcher.
    let mut forced = vec!["builtin"];
    if Path::new(SYSTEM_BWRAP).exists() {
        forced.push("system");
    }
    for launcher in forced {
        let args = helper_args("/tmp");
        let mut helper = Command::new(CODEXBOX)
            .args(&args)
            .env("CODEXBOX_BWRAP", launcher)
            .current_dir("/tmp")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the sandbox helper");
        wait_ready(&mut helper);
        let tree = descendants(i32::try_from(helper.id()).expect("pid"));
        assert!(
            tree.len() >= 3,
            "{launcher}: launcher, pid 1, command: {tree:?}"
        );
        helper.kill().expect("kill the helper");
        helper.wait().expect("reap the helper");
        let left = wait_until_gone(&tree, ENDS_WITHIN);
        kill_all(&left);
        assert!(left.is_empty(), "{launcher}: {left:?} outlived the helper");
    }
}

/// Runs `launcher args…` in a fresh pseudo-terminal (through `script`) and
/// returns what it printed.
fn in_pty(caller: Caller, launcher: &str, args: &[&str]) -> String {
    let quote = |word: &str| format!("'{}'", word.replace('\'', "'\\''"));
    let mut line: Vec<String> = Vec::new();
    if caller == Caller::Nobody {
        line.extend(
            [
                "/usr/bin/setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]
            .map(str::to_owned),
        );
    }
    line.push(quote(launcher));
    line.extend(args.iter().map(|arg| quote(arg)));
    let output = Command::new("/usr/bin/script")
        .args(["-qec", &line.join(" "), "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    String::from_utf8_lossy(&output.stdout).replace('\r', "")
}

fn have_pty_tools(test: &str) -> bool {
    crate::common::host::host_has(
        &format!("script(1) and python3 ({test})"),
        crate::common::host::exists("/usr/bin/script")
            .and(crate::common::host::exists("/usr/bin/python3")),
    )
}

/// Opens a fresh pseudo-terminal's slave by name, as a session leader would
/// to make it its controlling terminal, and says whether it then has one.
const TAKE_TERMINAL: &str = "import os\n\
    master, slave = os.openpty()\n\
    os.close(os.open(os.ttyname(slave), os.O_RDWR))\n\
    try:\n    os.close(os.open('/dev/tty', os.O_RDWR)); print('controlling')\n\
    except OSError:\n    print('none')";

/// For every caller and each `(options, stdout)` case: `base`, the
/// options, then `command`, through both launchers, observing the same and
/// printing `stdout`.
fn same_output_for_each(base: &[&str], cases: &[(&[&str], &str)], command: &[&str]) {
    for (extra, expected) in cases {
        for caller in callers() {
            let argv = [base, extra, command].concat();
            let outcome = assert_same_as(caller, &argv);
            assert_eq!(
                outcome.stdout, *expected,
                "{caller:?} {extra:?}: {outcome:?}"
            );
        }
    }
}

#[test]
fn new_session_leaves_the_command_no_terminal_to_take_like_bubblewrap() {
    if !have_system_bwrap("new_session_leaves_the_command_no_terminal_to_take_like_bubblewrap")
        || !Path::new("/usr/bin/python3").exists()
    {
        return;
    }
    // With a reaper (pid namespace, or --sync-fd), bubblewrap's reaper leads
    // the new session: the command cannot acquire a controlling terminal.
    // Without one, the command itself leads it, and can.
    same_output_for_each(
        &["--ro-bind", "/", "/", "--dev", "/dev", "--new-session"],
        &[
            (&["--unshare-pid"], "none\n"),
            (&["--sync-fd", "2"], "none\n"),
            (&["--unshare-pid", "--as-pid-1"], "controlling\n"),
            (&[], "controlling\n"),
        ],
        &["/usr/bin/python3", "-c", TAKE_TERMINAL],
    );
}

#[test]
fn new_session_gives_bubblewraps_process_groups() {
    if !have_system_bwrap("new_session_gives_bubblewraps_process_groups") {
        return;
    }
    // Process group and session of the command, inside its pid namespace:
    // the reaper's (1), or its own as pid 1.
    same_output_for_each(
        &[
            "--ro-bind",
            "/",
            "/",
            "--new-session",
            "--unshare-pid",
            "--proc",
            "/proc",
        ],
        &[(&[], "1 1\n"), (&["--as-pid-1"], "1 1\n")],
        &[
            "sh",
            "-c",
            "read -r stat < /proc/self/stat; set -- ${stat##*) }; echo $3 $4",
        ],
    );
}

#[test]
fn builtin_new_session_blocks_terminal_injection() {
    if !have_pty_tools("builtin_new_session_blocks_terminal_injection") {
        return;
    }
    let program = "import fcntl, termios\n\
                   try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('injected')\n\
                   except OSError as e:\n    print('refused', e.errno)";
    let launcher = launcher_path(Impl::Builtin);
    let args = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--new-session",
        "/usr/bin/python3",
        "-c",
        program,
    ];
    let blocked = in_pty(Caller::Current, &launcher, &args);
    assert!(blocked.contains("refused 1"), "{blocked:?}");
    // Documented difference: bubblewrap run by root keeps host capabilities
    // (no user namespace), with which TIOCSTI still works after setsid().
    let legacy = fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").unwrap_or_default();
    if legacy.trim() != "0" {
        let same_session: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| *a != "--new-session")
            .collect();
        let injected = in_pty(Caller::Current, &launcher, &same_session);
        assert!(injected.contains("injected"), "{injected:?}");
    }
}

#[test]
fn an_unprivileged_caller_passes_no_capability_like_bubblewrap() {
    if !have_system_bwrap("an_unprivileged_caller_passes_no_capability_like_bubblewrap") {
        return;
    }
    for caller in callers().into_iter().filter(|c| *c == Caller::Nobody) {
        for extra in [&[][..], &["--dev", "/dev"], &["--unshare-pid"]] {
            let mut args = vec![
                "--ro-bind",
                "/",
                "/",
                "--unshare-user",
                "--uid",
                "0",
                "--gid",
                "0",
            ];
            args.extend(extra);
            args.extend([
                "sh",
                "-c",
                "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status",
            ]);
            let outcome = assert_same_as(caller, &args);
            assert_eq!(
                outcome.stdout.matches("\t0000000000000000\n").count(),
                5,
                "{extra:?}: {outcome:?}"
            );
        }
    }
}

#[test]
fn id_maps_are_bubblewraps_for_every_caller() {
    if !have_system_bwrap("id_maps_are_bubblewraps_for_every_caller") {
        return;
    }
    let script = "cat /proc/self/uid_map /proc/self/gid_map | tr -s ' '; id -u; id -g";
    for extra in [
        &[][..],
        &["--dev", "/dev"],
        &["--uid", "0", "--gid", "0"],
        &["--uid", "5", "--gid", "6", "--dev", "/dev"],
        &["--disable-userns"],
        &["--disable-userns", "--uid", "7", "--dev", "/dev"],
    ] {
        for caller in callers() {
            let mut args = vec!["--ro-bind", "/", "/", "--unshare-user"];
            args.extend(extra);
            args.extend(["sh", "-c", script]);
            let outcome = assert_same_as(caller, &args);
            assert_eq!(outcome.code, 0, "{caller:?} {extra:?}: {outcome:?}");
        }
    }
    // The brief's case: uid 65534 with --dev reads "65534 0 1".
    if callers().contains(&Caller::Nobody) {
        let outcome = run_as(
            Impl::Builtin,
            Caller::Nobody,
            &[
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "cat",
                "/proc/self/uid_map",
            ],
        );
        assert_eq!(
            outcome.stdout.split_whitespace().collect::<Vec<_>>(),
            ["65534", "0", "1"],
            "{outcome:?}"
        );
    }
}

#[test]
fn a_capable_command_cannot_remount_its_binds_like_bubblewrap() {
    if !have_system_bwrap("a_capable_command_cannot_remount_its_binds_like_bubblewrap") {
        return;
    }
    // An unprivileged caller with --dev: bubblewrap sets up as uid 0 and
    // runs the command (uid 65534, every capability added) in a nested user
    // namespace, which cannot touch the mounts.
    for caller in callers().into_iter().filter(|c| *c == Caller::Nobody) {
        let args = [
            "--ro-bind", "/", "/", "--ro-bind", "/usr", "/usr", "--dev", "/dev", "--cap-add",
            "ALL", "sh", "-c",
            "grep -c 'CapEff:.000001' /proc/self/status; mount -o remount,bind,rw /usr 2>/dev/null && echo remounted || echo refused",
        ];
        let outcome = assert_same_as(caller, &args);
        assert_eq!(outcome.stdout, "1\nrefused\n", "{caller:?}: {outcome:?}");
    }
}

#[test]
fn builtin_command_never_holds_capabilities_over_its_mounts() {
    // Documented difference: without --dev or --disable-userns, bubblewrap
    // runs the command in the user namespace that owns its mounts, where a
    // command with capabilities (root's, or --cap-add) can remount its
    // read-only binds writable. The built-in always nests the command's
    // namespace, so it cannot, whoever the caller.
    for caller in callers() {
        let args = [
            "--ro-bind", "/", "/", "--ro-bind", "/usr", "/usr", "--unshare-user", "--uid", "0",
            "--gid", "0", "--cap-add", "ALL", "sh", "-c",
            "grep -c 'CapEff:.000001' /proc/self/status; mount -o remount,bind,rw /usr 2>/dev/null && echo remounted || echo refused",
        ];
        let outcome = run_as(Impl::Builtin, caller, &args);
        assert_eq!(outcome.stdout, "1\nrefused\n", "{caller:?}: {outcome:?}");
    }
}

#[test]
fn builtin_reaper_has_bubblewraps_capabilities_and_stays_undumpable() {
    // pid 1 keeps no capability (as bubblewrap's); it is not dumpable (a
    // documented difference) so the command cannot take its fds.
    for caller in callers() {
        let args = [
            "--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "sh", "-c",
            "grep -E '^Cap(Prm|Eff)' /proc/1/status | tr '\\t' ' '; ls /proc/1/fd 2>/dev/null | wc -l",
        ];
        let outcome = run_as(Impl::Builtin, caller, &args);
        assert_eq!(
            outcome.stdout, "CapPrm: 0000000000000000\nCapEff: 0000000000000000\n0\n",
            "{caller:?}: {outcome:?}"
        );
    }
}

#[test]
fn builtin_makes_submounts_the_caller_cannot_reach_read_only() {
    // bubblewrap remounts each submount of a read-only bind on its own and
    // skips those whose mount point the caller cannot reach (EACCES), so
    // they stay writable; the built-in's recursive remount covers them. A
    // private mount namespace holds a bind mount under a 0700 directory.
    if !callers().contains(&Caller::Nobody) || !have_system_bwrap("submounts") {
        return;
    }
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let hidden = scratch.path().join("hidden");
    let point = hidden.join("point");
    fs::create_dir_all(&point).expect("mkdir");
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&hidden, fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let point = point.to_str().expect("utf-8 path");
    let state_of = |which: Impl| {
        let script = format!(
            "mount --bind {point} {point} && exec /usr/bin/setpriv --reuid={NOBODY} \
             --regid={NOBODY} --clear-groups {launcher} --ro-bind / / sh -c \
             \"awk '\\$5 == \\\"{point}\\\" {{ split(\\$6, o, \\\",\\\"); print o[1] }}' \
             /proc/self/mountinfo\"",
            launcher = launcher_path(which),
        );
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .output()
            .expect("run unshare");
        assert!(out.status.success(), "{which:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        state_of(Impl::System),
        "rw",
        "bubblewrap's behaviour changed"
    );
    assert_eq!(state_of(Impl::Builtin), "ro");
}
