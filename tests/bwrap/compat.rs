//! Differential suite: the same argv through the system bubblewrap and through
//! `codexbox` as `bwrap`, comparing what the command inside observes (ids,
//! pid, hostname, environment, cwd, /dev, capabilities, fds, the normalised
//! mount table, which paths are readable and writable, exit status, parent
//! death). Every case runs as the test's own user (root in CI) and as an
//! unprivileged caller (uid 65534, through setpriv). Differences that are
//! intended are asserted as such, with the reason, in the tests named
//! `builtin_*`; lifecycle and privileges are in tests/bwrap_lifecycle.rs.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use crate::common::bwrap::{
    assert_outcomes_equal_as, assert_same_as, callers, command_as, finish, give_to,
    have_system_bwrap, pass_fd, run, tempdir_for, with_probe, Caller, Impl,
};

/// Paths whose readable/writable state every probe reports.
const PATHS: &[&str] = &[
    "/",
    "/etc",
    "/tmp",
    "/usr",
    "/dev",
    "/dev/shm",
    "/dev/null",
    "/proc",
    "/proc/sys",
    "/sys",
    "/sys/fs/cgroup",
    "/root",
];

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe().expect("pipe")
}

/// For every caller: launches `argv` through the system bubblewrap and the
/// built-in one with `launch` (which prepares fds and such), asserts both
/// observe the same, then runs `check` on the built-in outcome.
fn compare<S: AsRef<std::ffi::OsStr>>(
    argv: &[S],
    launch: impl Fn(Impl, Caller) -> crate::common::bwrap::Outcome,
    check: impl Fn(Caller, &crate::common::bwrap::Outcome),
) {
    for caller in callers() {
        let system = launch(Impl::System, caller);
        let builtin = launch(Impl::Builtin, caller);
        assert_outcomes_equal_as(caller, argv, &system, &builtin);
        check(caller, &builtin);
    }
}

/// [`compare`] for an argv that needs nothing prepared.
fn compare_plain<S: AsRef<std::ffi::OsStr>>(
    argv: &[S],
    check: impl Fn(Caller, &crate::common::bwrap::Outcome),
) {
    for caller in callers() {
        let builtin = assert_same_as(caller, argv);
        check(caller, &builtin);
    }
}

/// The argv the linux-sandbox mode emits for the read-only profile with
/// restricted network (as the reference builds it, bwrap without --argv0).
const READ_ONLY_PROFILE: &[&str] = &[
    "--new-session",
    "--die-with-parent",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--proc",
    "/proc",
];

#[test]
fn read_only_profile_observes_the_same() {
    if !have_system_bwrap("read_only_profile_observes_the_same") {
        return;
    }
    compare_plain(&with_probe(READ_ONLY_PROFILE, PATHS), |caller, outcome| {
        assert_eq!(outcome.code, 0, "{caller:?}: {outcome:?}");
        for line in [
            "access: /tmp r-\n",
            "access: /sys/fs/cgroup r-\n",
            "pid: 2\n",
            // The reaper holds the new session: the command leads nothing.
            "session: pgrp one sid one\n",
        ] {
            assert!(
                outcome.stdout.contains(line),
                "{caller:?}: {}",
                outcome.stdout
            );
        }
    });
}

#[test]
fn read_only_profile_with_cap_drop_all_has_no_capabilities() {
    if !have_system_bwrap("read_only_profile_with_cap_drop_all_has_no_capabilities") {
        return;
    }
    let mut args = READ_ONLY_PROFILE.to_vec();
    args.extend(["--cap-drop", "ALL"]);
    compare_plain(&with_probe(&args, PATHS), |caller, outcome| {
        for line in [
            "CapEff: 0000000000000000\n",
            "CapBnd: 0000000000000000\n",
            "NoNewPrivs: 1\n",
        ] {
            assert!(
                outcome.stdout.contains(line),
                "{caller:?}: {}",
                outcome.stdout
            );
        }
    });
}

#[test]
fn cap_add_and_cap_drop_observe_the_same() {
    if !have_system_bwrap("cap_add_and_cap_drop_observe_the_same") {
        return;
    }
    // A root caller passes its set on, less the dropped ones (bounding set
    // cut too), inheritable and ambient as well; nobody else passes any.
    let mut args = READ_ONLY_PROFILE.to_vec();
    args.extend(["--cap-drop", "CAP_SYS_ADMIN", "--cap-drop", "cap_net_raw"]);
    compare_plain(&with_probe(&args, PATHS), |caller, outcome| {
        let none = outcome.stdout.contains("CapEff: 0000000000000000\n");
        assert_eq!(
            none,
            caller == Caller::Nobody,
            "{caller:?}: {}",
            outcome.stdout
        );
    });
    // Another uid: the set (a root caller's own plus what is added, by name
    // or by number as libcap reads it) is raised as ambient, for any caller.
    for added in ["CAP_NET_RAW", "13", "0xd", "cap_net_raw,ignored"] {
        let mut args = READ_ONLY_PROFILE.to_vec();
        args.extend(["--uid", "1000", "--cap-add", added]);
        compare_plain(&with_probe(&args, PATHS), |caller, outcome| {
            assert!(
                outcome.stdout.contains("ids: 1000 "),
                "{caller:?}: {}",
                outcome.stdout
            );
            let ambient = outcome
                .stdout
                .lines()
                .find_map(|line| line.strip_prefix("CapAmb: "))
                .and_then(|mask| u64::from_str_radix(mask, 16).ok());
            match caller {
                Caller::Current => assert!(
                    ambient.is_some_and(|mask| mask & (1 << 13) != 0 && mask != 1 << 13),
                    "{caller:?} {added}: {}",
                    outcome.stdout
                ),
                Caller::Nobody => assert_eq!(ambient, Some(1 << 13), "{added}: {outcome:?}"),
            }
        });
    }
}

#[test]
fn workspace_profile_observes_the_same() {
    if !have_system_bwrap("workspace_profile_observes_the_same") {
        return;
    }
    for caller in callers() {
        let dir = tempdir_for(caller);
        let ws = dir.path().to_str().expect("utf-8 temp path").to_owned();
        fs::create_dir(dir.path().join(".git")).expect("mkdir .git");
        fs::write(dir.path().join("secret.env"), "TOKEN=1\n").expect("write secret");
        fs::create_dir(dir.path().join("denied")).expect("mkdir denied");
        for name in [".git", "secret.env", "denied"] {
            give_to(caller, &dir.path().join(name));
        }
        let git = format!("{ws}/.git");
        let agents = format!("{ws}/.agents");
        let codex = format!("{ws}/.codex");
        let secret = format!("{ws}/secret.env");
        let denied = format!("{ws}/denied");
        // As the reference builds it: writable root, read-only metadata, masks.
        let args: Vec<&str> = vec![
            "--new-session",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--bind",
            &ws,
            &ws,
            "--ro-bind",
            &git,
            &git,
            "--perms",
            "555",
            "--tmpfs",
            &agents,
            "--remount-ro",
            &agents,
            "--perms",
            "555",
            "--tmpfs",
            &codex,
            "--remount-ro",
            &codex,
            "--perms",
            "000",
            "--ro-bind-data",
            "5",
            &secret,
            "--perms",
            "000",
            "--tmpfs",
            &denied,
            "--remount-ro",
            &denied,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-net",
            "--proc",
            "/proc",
            "--chdir",
            &ws,
        ];
        let paths = [
            ws.as_str(),
            &git,
            &agents,
            &codex,
            &secret,
            &denied,
            "/tmp",
            "/",
        ];
        let argv = with_probe(&args, &paths);
        let launch = |which: Impl| {
            let null = OwnedFd::from(fs::File::open("/dev/null").expect("open /dev/null"));
            let mut cmd = command_as(which, caller, &argv);
            pass_fd(&mut cmd, &null, 5);
            finish(cmd)
        };
        let system = launch(Impl::System);
        let builtin = launch(Impl::Builtin);
        assert_outcomes_equal_as(caller, &argv, &system, &builtin);
        for line in [
            format!("access: {ws} rw\n"),
            format!("access: {git} r-\n"),
            format!("cwd: {ws}\n"),
        ] {
            assert!(
                builtin.stdout.contains(&line),
                "{caller:?}: {}",
                builtin.stdout
            );
        }
        // The masks bubblewrap had to create on the host are there for both runs.
        assert!(dir.path().join(".agents").is_dir());
    }
}

#[test]
fn every_namespace_with_ids_and_hostname_observes_the_same() {
    if !have_system_bwrap("every_namespace_with_ids_and_hostname_observes_the_same") {
        return;
    }
    let args = [
        "--ro-bind",
        "/",
        "/",
        "--unshare-all",
        "--uid",
        "1234",
        "--gid",
        "4321",
        "--hostname",
        "sandbox-host",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ];
    compare_plain(&with_probe(&args, PATHS), |caller, outcome| {
        for line in [
            "ids: 1234 4321 [4321]\n",
            "hostname: sandbox-host\n",
            "access: /tmp rw\n",
            // --dev: the setup namespace maps uid 0, the command's is nested.
            "uid_map: 1234 0 1\n",
            "gid_map: 4321 0 1\n",
        ] {
            assert!(
                outcome.stdout.contains(line),
                "{caller:?}: {}",
                outcome.stdout
            );
        }
    });
    let net = [
        "--ro-bind",
        "/",
        "/",
        "--unshare-net",
        "cat",
        "/proc/net/dev",
    ];
    compare_plain(&net, |caller, outcome| {
        assert!(outcome.stdout.contains("lo:"), "{caller:?}: {outcome:?}");
    });
}

/// A root of its own: a tmpfs with the host's /usr and the usual links.
const TMPFS_ROOT: &[&str] = &[
    "--tmpfs",
    "/",
    "--ro-bind",
    "/usr",
    "/usr",
    "--symlink",
    "usr/bin",
    "/bin",
    "--symlink",
    "usr/lib",
    "/lib",
    "--symlink",
    "usr/lib64",
    "/lib64",
];

#[test]
fn tmpfs_root_with_binds_and_links_observes_the_same() {
    if !have_system_bwrap("tmpfs_root_with_binds_and_links_observes_the_same") {
        return;
    }
    let mut args = TMPFS_ROOT.to_vec();
    args.extend([
        "--ro-bind",
        "/etc",
        "/etc",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--dir",
        "/work",
        "--chdir",
        "/work",
        "--unshare-pid",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--mqueue",
        "/dev/mqueue",
        "--unshare-ipc",
    ]);
    compare_plain(&with_probe(&args, PATHS), |caller, outcome| {
        assert_eq!(outcome.code, 0, "{caller:?}: {outcome:?}");
        // The host tree is gone: no /oldroot, /newroot or host directories.
        assert!(
            outcome
                .stdout
                .contains("root: bin dev etc lib lib64 proc sbin usr work \n"),
            "{caller:?}: {}",
            outcome.stdout
        );
    });
}

/// The tree of directories bwrap has to create, with and without `--perms`
/// (after [`TMPFS_ROOT`]), listed with their modes.
const IMPLICIT_DIRS: &[&str] = &[
    "--symlink",
    "x",
    "/a/b/c",
    "--dir",
    "/d/e",
    "--perms",
    "0700",
    "--dir",
    "/p/q",
    "--perms",
    "0640",
    "--file",
    "0",
    "/f/g/h",
    "--perms",
    "0604",
    "--tmpfs",
    "/o/t",
    "--ro-bind",
    "/usr/bin",
    "/u/v/w",
    "--perms",
    "01777",
    "--tmpfs",
    "/t/u",
    "--perms",
    "0777",
    "--dir",
    "/w/x",
    "--dir",
    "/s/",
    "--unshare-pid",
    "--proc",
    "/m/proc",
    "--dev",
    "/n/dev",
    "/usr/bin/stat",
    "-c",
    "%n %a",
    "/a",
    "/a/b",
    "/d",
    "/d/e",
    "/p",
    "/p/q",
    "/f",
    "/f/g",
    "/f/g/h",
    "/o",
    "/u",
    "/u/v",
    "/t",
    "/t/u",
    "/w",
    "/w/x",
    "/s",
    "/m",
    "/n",
];

#[test]
fn implicit_directories_get_bubblewraps_modes() {
    if !have_system_bwrap("implicit_directories_get_bubblewraps_modes") {
        return;
    }
    // Parents get 0755 less what the operation's mode withholds from group
    // and others, 0700 for options without --perms; the setup runs with
    // umask 0, so the caller's umask changes nothing.
    let argv = [TMPFS_ROOT, IMPLICIT_DIRS].concat();
    for umask in [0o022, 0o077] {
        compare(
            &argv,
            |which, caller| {
                let mut cmd = command_as(which, caller, &argv);
                // SAFETY: umask is async-signal-safe and touches no memory.
                unsafe {
                    cmd.pre_exec(move || {
                        libc::umask(umask);
                        Ok(())
                    });
                }
                finish(cmd)
            },
            |caller, outcome| {
                assert_eq!(outcome.code, 0, "{caller:?}: {outcome:?}");
                for line in ["/a 700\n", "/d 755\n", "/p 700\n", "/f 750\n", "/o 705\n"] {
                    assert!(
                        outcome.stdout.contains(line),
                        "{caller:?}: {}",
                        outcome.stdout
                    );
                }
                assert!(outcome.stdout.contains("/w/x 777\n"), "{outcome:?}");
            },
        );
    }
}

#[test]
fn bind_variants_and_remount_observe_the_same() {
    if !have_system_bwrap("bind_variants_and_remount_observe_the_same") {
        return;
    }
    let args = [
        "--bind",
        "/",
        "/",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        "/etc",
        "/tmp/etc",
        "--dev-bind",
        "/dev",
        "/tmp/dev",
        "--bind-try",
        "/nonexistent",
        "/tmp/none",
        "--ro-bind-try",
        "/usr",
        "/tmp/usr",
        "--dir",
        "/tmp/d",
        "--remount-ro",
        "/tmp",
        "--proc",
        "/proc",
        "--unshare-pid",
    ];
    compare_plain(
        &with_probe(&args, &["/tmp", "/tmp/etc", "/tmp/usr", "/tmp/dev"]),
        |caller, outcome| {
            assert!(
                outcome.stdout.contains("access: /tmp r-\n"),
                "{caller:?}: {}",
                outcome.stdout
            );
        },
    );
}

#[test]
fn sources_resolve_on_the_host_like_bubblewrap() {
    if !have_system_bwrap("sources_resolve_on_the_host_like_bubblewrap") {
        return;
    }
    for caller in callers() {
        // A relative source counts from the caller's cwd; a symlinked one
        // is followed in the host tree, absolute target included.
        let dir = tempdir_for(caller);
        let real = dir.path().join("real");
        fs::create_dir(&real).expect("mkdir real");
        fs::write(real.join("inside"), "x").expect("file");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).expect("absolute symlink");
        for path in [&real, &real.join("inside"), &link] {
            give_to(caller, path);
        }
        let link = link.to_str().expect("utf-8").to_owned();
        for source in ["real", link.as_str()] {
            let argv = [
                "--ro-bind",
                "/",
                "/",
                "--tmpfs",
                "/mnt",
                "--ro-bind",
                source,
                "/mnt/d",
                "ls",
                "/mnt/d",
            ];
            let launch = |which: Impl| {
                let mut cmd = command_as(which, caller, &argv);
                cmd.current_dir(dir.path());
                finish(cmd)
            };
            let (system, builtin) = (launch(Impl::System), launch(Impl::Builtin));
            assert_outcomes_equal_as(caller, &argv, &system, &builtin);
            assert_eq!(
                builtin.stdout, "inside\n",
                "{caller:?} {source}: {builtin:?}"
            );
        }
    }
}

#[test]
fn file_data_perms_and_chmod_observe_the_same() {
    if !have_system_bwrap("file_data_perms_and_chmod_observe_the_same") {
        return;
    }
    let argv: Vec<&str> = vec![
        "--ro-bind",
        "/",
        "/",
        "--tmpfs",
        "/tmp",
        "--perms",
        "0640",
        "--file",
        "5",
        "/tmp/f",
        "--bind-data",
        "6",
        "/tmp/b",
        "--perms",
        "0444",
        "--ro-bind-data",
        "7",
        "/tmp/r",
        "--perms",
        "0700",
        "--dir",
        "/tmp/d",
        "--size",
        "65536",
        "--perms",
        "0750",
        "--tmpfs",
        "/tmp/t",
        "--symlink",
        "../f",
        "/tmp/d/link",
        "--chmod",
        "0711",
        "/tmp/t",
        "--perms",
        "0600",
        "--file",
        "8",
        "/tmp/f",
        "--chmod",
        "0",
        "/tmp/b",
        "sh",
        "-c",
        "cd /tmp && stat -c '%n %a %h %s %F' f b r d t d/link && cat f r && \
         ls /proc/self/fd | tr '\\n' ' ' && grep -c ' /tmp/t ' /proc/self/mountinfo",
    ];
    compare(
        &argv,
        |which, caller| {
            let mut cmd = command_as(which, caller, &argv);
            let mut keep = Vec::new();
            for (fd, text) in [
                (5, "file\n"),
                (6, "bind\n"),
                (7, "robind\n"),
                (8, "again\n"),
            ] {
                let (read, write) = pipe();
                fs::File::from(write)
                    .write_all(text.as_bytes())
                    .expect("fill pipe");
                pass_fd(&mut cmd, &read, fd);
                keep.push(read);
            }
            finish(cmd)
        },
        |caller, outcome| {
            // A second --file on the same path truncates it and keeps its mode.
            assert!(
                outcome.stdout.contains("f 640 1 6 regular file\n"),
                "{caller:?}: {outcome:?}"
            );
            // The --bind-data file keeps no name where it was written.
            assert!(
                outcome.stdout.contains("b 0 0 5 regular file\n"),
                "{outcome:?}"
            );
            assert!(outcome.stdout.contains("again\nrobind\n"), "{outcome:?}");
        },
    );
}

#[test]
fn environment_and_cwd_options_observe_the_same() {
    if !have_system_bwrap("environment_and_cwd_options_observe_the_same") {
        return;
    }
    let env_args = [
        "--ro-bind",
        "/",
        "/",
        "--setenv",
        "FIRST",
        "1",
        "--clearenv",
        "--setenv",
        "A",
        "b",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--setenv",
        "GONE",
        "x",
        "--unsetenv",
        "GONE",
        "--setenv",
        "HOME",
        "/etc",
        "sh",
        "-c",
        "env | sort",
    ];
    let cwd = std::env::current_dir().expect("cwd");
    compare_plain(&env_args, |caller, outcome| {
        assert_eq!(
            outcome.stdout,
            format!(
                "A=b\nHOME=/etc\nPATH=/usr/bin:/bin\nPWD={}\n",
                cwd.display()
            ),
            "{caller:?}"
        );
    });
    let chdir = [
        "--ro-bind",
        "/",
        "/",
        "--chdir",
        "/etc",
        "sh",
        "-c",
        "pwd; echo $PWD",
    ];
    compare_plain(&chdir, |_, _| {});
    // The caller's cwd when it exists inside, by its logical name ($PWD)
    // when that names it; else $HOME; else /.
    for (cwd, pwd, home, expected) in [
        ("/usr/share", "/usr/../usr/share", "/", "/usr/../usr/share"),
        ("/usr/bin", "/bin", "/", "/bin"),
        ("/usr/share", "/elsewhere", "/", "/usr/share"),
        ("/etc", "/etc", "/usr", "/usr"),
        ("/etc", "/etc", "/nonexistent", "/"),
    ] {
        let mut argv = TMPFS_ROOT.to_vec();
        argv.extend([
            "--setenv",
            "HOME",
            home,
            "/usr/bin/sh",
            "-c",
            "echo $PWD; pwd -P",
        ]);
        compare(
            &argv,
            |which, caller| {
                let mut cmd = command_as(which, caller, &argv);
                cmd.current_dir(cwd).env("PWD", pwd);
                finish(cmd)
            },
            |caller, outcome| {
                assert!(
                    outcome.stdout.starts_with(&format!("{expected}\n")),
                    "{caller:?} {cwd} {pwd} {home}: {outcome:?}"
                );
            },
        );
    }
}

#[test]
fn exit_status_passes_through_like_bubblewrap() {
    if !have_system_bwrap("exit_status_passes_through_like_bubblewrap") {
        return;
    }
    let cases: &[(&[&str], i32)] = &[
        (&["--ro-bind", "/", "/", "sh", "-c", "exit 7"], 7),
        (&["--ro-bind", "/", "/", "sh", "-c", "kill -TERM $$"], 143),
        (
            &[
                "--ro-bind",
                "/",
                "/",
                "--unshare-pid",
                "sh",
                "-c",
                "kill -KILL $$",
            ],
            137,
        ),
        (
            &[
                "--ro-bind",
                "/",
                "/",
                "--unshare-pid",
                "--as-pid-1",
                "sh",
                "-c",
                "echo $$; exit 3",
            ],
            3,
        ),
        (
            &[
                "--ro-bind",
                "/",
                "/",
                "--unshare-pid",
                "sh",
                "-c",
                "sleep 30 & exit 4",
            ],
            4,
        ),
    ];
    for (args, code) in cases {
        compare_plain(args, |caller, outcome| {
            assert_eq!(outcome.code, *code, "{caller:?} {args:?}: {outcome:?}");
        });
    }
}

#[test]
fn info_and_json_status_documents_have_bubblewraps_shape() {
    if !have_system_bwrap("info_and_json_status_documents_have_bubblewraps_shape") {
        return;
    }
    // The exit line comes only when the command did run.
    for (command, last) in [
        ("exit 5", "{ \"exit-code\": 5 }"),
        ("exec /nonexistent", "{ \"exit-code\": 127 }"),
    ] {
        for caller in callers() {
            let shape = |which: Impl, command: &[&str]| {
                let (info_r, info_w) = pipe();
                let (json_r, json_w) = pipe();
                let mut args = vec![
                    "--ro-bind",
                    "/",
                    "/",
                    "--unshare-all",
                    "--info-fd",
                    "5",
                    "--json-status-fd",
                    "6",
                ];
                args.extend(command);
                let mut cmd = command_as(which, caller, &args);
                pass_fd(&mut cmd, &info_w, 5);
                pass_fd(&mut cmd, &json_w, 6);
                let outcome = finish(cmd);
                drop((info_w, json_w));
                let mut info = String::new();
                let mut json = String::new();
                fs::File::from(info_r)
                    .read_to_string(&mut info)
                    .expect("info");
                fs::File::from(json_r)
                    .read_to_string(&mut json)
                    .expect("json");
                let squash = |text: &str| {
                    let mut text: String = text
                        .chars()
                        .map(|c| if c.is_ascii_digit() { '9' } else { c })
                        .collect();
                    while text.contains("99") {
                        text = text.replace("99", "9");
                    }
                    text
                };
                let last = json.lines().last().map(|line| match line {
                    "{ \"exit-code\": 5 }" | "{ \"exit-code\": 127 }" => line.to_owned(),
                    other => squash(other),
                });
                (outcome.code, squash(&info), json.lines().count(), last)
            };
            let shell = ["sh", "-c", command];
            let system = shape(Impl::System, &shell);
            let builtin = shape(Impl::Builtin, &shell);
            assert_eq!(system, builtin, "{caller:?} {command}");
            assert_eq!(builtin.3.as_deref(), Some(last), "{caller:?} {command}");
            // A command that cannot be exec'd gets no exit line at all.
            let missing = ["/nonexistent-command"];
            let system = shape(Impl::System, &missing);
            let builtin = shape(Impl::Builtin, &missing);
            assert_eq!(system, builtin, "{caller:?} exec failure");
            assert_eq!((builtin.0, builtin.2), (1, 1), "{caller:?}: {builtin:?}");
        }
    }
}

#[test]
fn block_fd_and_sync_fd_behave_like_bubblewrap() {
    if !have_system_bwrap("block_fd_and_sync_fd_behave_like_bubblewrap") {
        return;
    }
    for caller in callers() {
        for which in [Impl::System, Impl::Builtin] {
            let dir = tempdir_for(caller);
            let marker = dir.path().join("marker");
            let marker_str = marker.to_str().expect("utf-8").to_owned();
            let (block_r, block_w) = pipe();
            let (sync_r, sync_w) = pipe();
            let args = [
                "--ro-bind",
                "/",
                "/",
                "--block-fd",
                "5",
                "--sync-fd",
                "6",
                "sh",
                "-c",
                &format!("cat {marker_str}; ls /proc/self/fd | tr '\\n' ' '"),
            ];
            let mut cmd = command_as(which, caller, &args);
            pass_fd(&mut cmd, &block_r, 5);
            pass_fd(&mut cmd, &sync_w, 6);
            cmd.stdout(Stdio::piped());
            let child = cmd.spawn().expect("spawn");
            drop((cmd, block_r, sync_w));
            // The command only runs once unblocked, so it sees the marker.
            fs::write(&marker, "seen\n").expect("marker");
            fs::File::from(block_w).write_all(b"x").expect("unblock");
            let output = child.wait_with_output().expect("wait");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                stdout.starts_with("seen\n"),
                "{caller:?} {which:?}: {stdout}"
            );
            assert!(
                stdout.ends_with("0 1 2 3 "),
                "{caller:?} {which:?} leaks fds: {stdout}"
            );
            // Nothing holds the sync fd once the sandbox is gone.
            let mut rest = Vec::new();
            fs::File::from(sync_r)
                .read_to_end(&mut rest)
                .expect("sync fd EOF");
        }
    }
}

#[test]
fn as_pid_1_leaves_the_sync_fd_to_the_command_like_bubblewrap() {
    if !have_system_bwrap("as_pid_1_leaves_the_sync_fd_to_the_command_like_bubblewrap") {
        return;
    }
    let argv = [
        "--ro-bind",
        "/",
        "/",
        "--unshare-pid",
        "--as-pid-1",
        "--sync-fd",
        "5",
        "ls",
        "/proc/self/fd",
    ];
    compare(
        &argv,
        |which, caller| {
            let (read, write) = pipe();
            let mut cmd = command_as(which, caller, &argv);
            pass_fd(&mut cmd, &write, 5);
            let outcome = finish(cmd);
            drop((read, write));
            outcome
        },
        |caller, outcome| {
            assert_eq!(outcome.stdout, "0\n1\n2\n3\n5\n", "{caller:?}: {outcome:?}");
        },
    );
}

#[test]
fn seccomp_programs_apply_like_bubblewrap() {
    if !have_system_bwrap("seccomp_programs_apply_like_bubblewrap") {
        return;
    }
    // ld [nr]; jeq mkdir / mkdirat -> ERRNO(EPERM); else ALLOW.
    #[cfg(target_arch = "x86_64")]
    let (mkdir, mkdirat) = (83u32, 258u32);
    #[cfg(target_arch = "aarch64")]
    let (mkdir, mkdirat) = (34u32, 34u32);
    let insns: [(u16, u8, u8, u32); 5] = [
        (0x20, 0, 0, 0),
        (0x15, 2, 0, mkdir),
        (0x15, 1, 0, mkdirat),
        (0x06, 0, 0, 0x7fff_0000),
        (0x06, 0, 0, 0x0005_0001),
    ];
    let mut program = Vec::new();
    for (code, jt, jf, k) in insns {
        program.extend(code.to_ne_bytes());
        program.extend([jt, jf]);
        program.extend(k.to_ne_bytes());
    }
    let script =
        "mkdir /tmp/x 2>/dev/null && echo made || echo denied; grep Seccomp: /proc/self/status";
    for option in ["--seccomp", "--add-seccomp-fd"] {
        let argv = [
            "--ro-bind",
            "/",
            "/",
            "--tmpfs",
            "/tmp",
            option,
            "5",
            "sh",
            "-c",
            script,
        ];
        compare(
            &argv,
            |which, caller| {
                let (read, write) = pipe();
                fs::File::from(write).write_all(&program).expect("program");
                let mut cmd = command_as(which, caller, &argv);
                pass_fd(&mut cmd, &read, 5);
                finish(cmd)
            },
            |caller, outcome| {
                assert!(
                    outcome.stdout.starts_with("denied\n"),
                    "{caller:?}: {outcome:?}"
                );
            },
        );
    }
    // A program that is no whole number of instructions, or empty.
    for data in [&program[..7], &[][..]] {
        let argv = ["--ro-bind", "/", "/", "--seccomp", "5", "true"];
        compare(
            &argv,
            |which, caller| {
                let (read, write) = pipe();
                fs::File::from(write).write_all(data).expect("program");
                let mut cmd = command_as(which, caller, &argv);
                pass_fd(&mut cmd, &read, 5);
                finish(cmd)
            },
            |caller, outcome| assert_eq!(outcome.code, 1, "{caller:?}: {outcome:?}"),
        );
    }
}

#[test]
fn bind_fd_observes_the_same() {
    if !have_system_bwrap("bind_fd_observes_the_same") {
        return;
    }
    for caller in callers() {
        let dir = tempdir_for(caller);
        fs::write(dir.path().join("inside"), "x").expect("file");
        let argv = [
            "--ro-bind",
            "/",
            "/",
            "--tmpfs",
            "/mnt",
            "--ro-bind-fd",
            "5",
            "/mnt/d",
            "sh",
            "-c",
            "ls /mnt/d; test -w /mnt/d && echo w || echo ro",
        ];
        let launch = |which: Impl| {
            let fd = OwnedFd::from(fs::File::open(dir.path()).expect("open dir"));
            let mut cmd = command_as(which, caller, &argv);
            pass_fd(&mut cmd, &fd, 5);
            finish(cmd)
        };
        let (system, builtin) = (launch(Impl::System), launch(Impl::Builtin));
        assert_outcomes_equal_as(caller, &argv, &system, &builtin);
        assert_eq!(builtin.stdout, "inside\nro\n", "{caller:?}");
    }
}

#[test]
fn disable_userns_and_new_session_observe_the_same() {
    if !have_system_bwrap("disable_userns_and_new_session_observe_the_same") {
        return;
    }
    let argv = [
        "--ro-bind",
        "/",
        "/",
        "--unshare-user",
        "--disable-userns",
        "--new-session",
        "--uid",
        "5",
        "sh",
        "-c",
        "unshare -U true 2>/dev/null && echo nested || echo refused; \
         test \"$(ps -o sid= -p $$ | tr -d ' ')\" = $$ && echo leader; \
         cat /proc/self/uid_map | tr -s ' '",
    ];
    compare_plain(&argv, |caller, outcome| {
        // No reaper: the command itself leads the new session.
        assert!(
            outcome.stdout.starts_with("refused\nleader\n 5 5 1\n"),
            "{caller:?}: {outcome:?}"
        );
    });
}

#[test]
fn inherited_fds_pass_through_and_bwraps_own_do_not() {
    if !have_system_bwrap("inherited_fds_pass_through_and_bwraps_own_do_not") {
        return;
    }
    // An fd the caller left inheritable reaches the command (callers, the
    // linux-sandbox mode among them, pass fds that way); fds given to bwrap
    // options and fds bwrap opened itself do not.
    let argv = [
        "--ro-bind",
        "/",
        "/",
        "--unshare-all",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--sync-fd",
        "5",
        "--info-fd",
        "6",
        "--json-status-fd",
        "7",
        "--file",
        "8",
        "/tmp/f",
        "ls",
        "/proc/self/fd",
    ];
    compare(
        &argv,
        |which, caller| {
            let null = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null");
            let null = OwnedFd::from(null.expect("open /dev/null"));
            let mut cmd = command_as(which, caller, &argv);
            for fd in [5, 6, 7, 8, 9] {
                pass_fd(&mut cmd, &null, fd);
            }
            finish(cmd)
        },
        |caller, outcome| {
            assert_eq!(outcome.stdout, "0\n1\n2\n3\n9\n", "{caller:?}: {outcome:?}");
        },
    );
}

#[test]
fn builtin_root_caller_stays_in_a_user_namespace() {
    // Documented difference: bubblewrap run by root without --unshare-user
    // keeps the host's user namespace; the built-in always creates one, so
    // the command's capabilities never reach the host.
    let outcome = run(
        Impl::Builtin,
        &["--ro-bind", "/", "/", "cat", "/proc/self/uid_map"],
    );
    assert_eq!(outcome.code, 0, "{outcome:?}");
    assert_eq!(
        outcome.stdout.split_whitespace().nth(2),
        Some("1"),
        "{outcome:?}"
    );
    let mount = run(
        Impl::Builtin,
        &[
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--proc",
            "/proc",
            "sh",
            "-c",
            "mount -o remount,rw / 2>/dev/null && echo rw || echo refused",
        ],
    );
    assert_eq!(mount.stdout, "refused\n", "{mount:?}");
}

#[test]
fn builtin_proc_sys_is_read_only() {
    // Documented difference: bubblewrap's `--proc` covers /proc/sys only when
    // access(W_OK) says it is writable, which the r-x directory never is, so
    // a root caller keeps writable sysctls (kernel.core_pattern runs a helper
    // as host root on the next crash). The built-in covers it regardless.
    // The probe only opens the files for writing; nothing is written.
    let mut args = READ_ONLY_PROFILE.to_vec();
    args.extend([
        "sh",
        "-c",
        "for f in /proc/sys/kernel/core_pattern /proc/sys/vm/drop_caches /proc/sysrq-trigger; do \
           [ -e $f ] || continue; \
           if ( : >> $f ) 2>/dev/null; then echo \"writable $f\"; else echo \"held $f\"; fi; \
         done; \
         cat /proc/sys/kernel/ostype; grep -c ' /proc/sys ro,' /proc/self/mountinfo",
    ]);
    let outcome = run(Impl::Builtin, &args);
    assert_eq!(outcome.code, 0, "{outcome:?}");
    assert!(!outcome.stdout.contains("writable"), "{outcome:?}");
    assert!(
        outcome
            .stdout
            .contains("held /proc/sys/kernel/core_pattern\n"),
        "{outcome:?}"
    );
    assert!(outcome.stdout.ends_with("Linux\n1\n"), "{outcome:?}");
}

#[test]
fn builtin_sets_argv0_and_runs_as_a_subcommand() {
    let argv0 = run(
        Impl::Builtin,
        &[
            "--ro-bind",
            "/",
            "/",
            "--argv0",
            "renamed",
            "sh",
            "-c",
            "echo $0",
        ],
    );
    assert_eq!(argv0.stdout, "renamed\n", "{argv0:?}");
    let sub = run(
        Impl::Subcommand,
        &[
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "sh",
            "-c",
            "echo $$",
        ],
    );
    assert_eq!(sub.stdout, "2\n", "{sub:?}");
}

#[test]
fn args_fd_and_share_net_observe_the_same() {
    if !have_system_bwrap("args_fd_and_share_net_observe_the_same") {
        return;
    }
    let script = "hostname; echo $0 $1; ls /sys/class/net | tr '\\n' ' '";
    // Options from the fd come first; a command inside the data is dropped
    // (bubblewrap only takes options from it).
    for (data, argv, expected) in [
        (
            &b"--ro-bind\0/\0/\0--unshare-all\0--share-net\0--unshare-uts\0--hostname\0h\0"[..],
            &["--args", "5", "sh", "-c", script][..],
            "h\nsh\n",
        ),
        (
            b"--ro-bind\0/\0/\0echo\0from-data\0",
            &["--args", "5", "echo", "from-argv"],
            "from-argv\n",
        ),
    ] {
        compare(
            argv,
            |which, caller| {
                let (read, write) = pipe();
                fs::File::from(write).write_all(data).expect("args");
                let mut cmd = command_as(which, caller, argv);
                pass_fd(&mut cmd, &read, 5);
                finish(cmd)
            },
            |caller, outcome| {
                assert!(
                    outcome.stdout.starts_with(expected),
                    "{caller:?}: {outcome:?}"
                );
            },
        );
    }
    // Nothing but options in the data and on the command line: no command,
    // the usage (which names each launcher differently) and exit 1.
    for caller in callers() {
        let outcomes = [Impl::System, Impl::Builtin].map(|which| {
            let (read, write) = pipe();
            fs::File::from(write)
                .write_all(b"--ro-bind\0/\0/\0echo\0from-data")
                .expect("args");
            let mut cmd = command_as(which, caller, &["--args", "5"]);
            pass_fd(&mut cmd, &read, 5);
            finish(cmd)
        });
        for outcome in outcomes {
            assert_eq!(outcome.code, 1, "{caller:?}: {outcome:?}");
            assert!(
                outcome.stderr.starts_with("usage: "),
                "{caller:?}: {outcome:?}"
            );
        }
    }
}

/// The bwrap options `codexbox sandbox --explain` prints for a profile (up to
/// the inner command), without `--argv0`, which bubblewrap 0.8 lacks.
fn sandbox_profile_argv(profile: &str, cwd: &Path, network: bool) -> Vec<String> {
    let mut cmd = std::process::Command::new(crate::common::bwrap::CODEXBOX);
    cmd.args(["sandbox", "--explain", "--profile", profile, "-C"])
        .arg(cwd);
    if network {
        cmd.arg("--network");
    }
    let output = cmd
        .args(["--", "true"])
        .output()
        .expect("run sandbox --explain");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("argv: "))
        .unwrap_or_else(|| panic!("no argv line in {text:?}"));
    let mut args = Vec::new();
    let mut tokens = line.split_whitespace().skip(1);
    while let Some(token) = tokens.next() {
        match token {
            "--" => break,
            "--argv0" => {
                tokens.next();
            }
            other => args.push(other.to_owned()),
        }
    }
    args
}

#[test]
fn linux_sandbox_profile_argv_observes_the_same() {
    if !have_system_bwrap("linux_sandbox_profile_argv_observes_the_same") {
        return;
    }
    for caller in callers() {
        let dir = tempdir_for(caller);
        fs::create_dir(dir.path().join(".git")).expect("mkdir .git");
        give_to(caller, &dir.path().join(".git"));
        let ws = dir.path().to_str().expect("utf-8").to_owned();
        for (profile, network) in [
            ("read-only", false),
            ("workspace", false),
            ("workspace", true),
        ] {
            let args = sandbox_profile_argv(profile, dir.path(), network);
            assert!(args.contains(&"--cap-drop".to_owned()), "{args:?}");
            // Data fds the argv names (empty-file masks) are /dev/null for both.
            let fds: Vec<i32> = args
                .windows(2)
                .filter(|pair| {
                    matches!(
                        pair[0].as_str(),
                        "--ro-bind-data" | "--bind-data" | "--file"
                    )
                })
                .filter_map(|pair| pair[1].parse().ok())
                .collect();
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let git = format!("{ws}/.git");
            let argv = with_probe(&refs, &[ws.as_str(), &git, "/tmp", "/"]);
            let launch = |which: Impl| {
                let null = OwnedFd::from(fs::File::open("/dev/null").expect("open"));
                let mut cmd = command_as(which, caller, &argv);
                for fd in &fds {
                    pass_fd(&mut cmd, &null, *fd);
                }
                finish(cmd)
            };
            let system = launch(Impl::System);
            let builtin = launch(Impl::Builtin);
            assert_outcomes_equal_as(caller, &argv, &system, &builtin);
            assert_eq!(builtin.code, 0, "{caller:?} {profile}: {builtin:?}");
            assert!(builtin.stdout.contains("CapEff: 0000000000000000\n"));
            let expected = if profile == "workspace" { "rw" } else { "r-" };
            assert!(
                builtin
                    .stdout
                    .contains(&format!("access: {ws} {expected}\n")),
                "{caller:?} {profile}: {}",
                builtin.stdout
            );
            assert!(builtin.stdout.contains(&format!("access: {git} r-\n")));
        }
    }
}
