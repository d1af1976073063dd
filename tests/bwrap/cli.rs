//! Bad input to the built-in bwrap is answered like bubblewrap answers it:
//! same message on stderr, same exit status (differential against the system
//! bubblewrap 0.8, as root and as uid 65534), bubblewrap 0.11's messages
//! where 0.8 has none or others, no panic on any input, plus the built-in's
//! own `--version`/`--help`.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStringExt;

use crate::common::bwrap::{
    assert_same, assert_same_as, callers, command_as, finish, have_system_bwrap, pass_fd, run,
    run_as, Caller, Impl,
};

/// Command lines bubblewrap 0.8 and 0.11 refuse the same way.
const REFUSED: &[&[&str]] = &[
    &["--foo", "true"],
    &["-x"],
    &["-"],
    &["--bind", "/tmp"],
    &["--bind"],
    &["--ro-bind", "/"],
    &["--ro-bind-fd", "1"],
    &["--bind-fd", "x", "/x", "true"],
    &["--setenv", "A"],
    &["--setenv", "", "value", "true"],
    &["--setenv", "a=b", "value", "true"],
    &["--unsetenv", "", "true"],
    &["--unsetenv", "a=b", "true"],
    &["--unsetenv"],
    &["--chdir"],
    &["--remount-ro"],
    &["--proc"],
    &["--tmpfs"],
    &["--file", "1"],
    &["--symlink", "a"],
    &["--uid"],
    &["--uid", "abc", "true"],
    &["--uid", "-1", "true"],
    &["--uid", "99999999999999999999", "true"],
    &["--uid", " ", "true"],
    &["--gid", "x", "true"],
    &["--perms"],
    &["--perms", "999", "--dir", "/x", "true"],
    &["--perms", "-1", "--dir", "/x", "true"],
    &["--perms", "0700", "--ro-bind", "/", "/", "true"],
    &["--perms", "0700", "--perms", "0700", "--dir", "/x", "true"],
    &["--size", "abc", "--tmpfs", "/x", "true"],
    &["--size", " 5", "--tmpfs", "/x", "true"],
    &["--size", "+5", "--tmpfs", "/x", "true"],
    &["--size", "0", "--tmpfs", "/x", "true"],
    &["--size", "99999999999999999999", "--tmpfs", "/x", "true"],
    &["--size", "100", "--ro-bind", "/", "/", "true"],
    &["--size", "1", "--size", "2", "--tmpfs", "/x", "true"],
    &["--chmod", "999", "/tmp", "true"],
    &["--chmod", "0700"],
    &["--cap-drop", "FOO", "--ro-bind", "/", "/", "true"],
    &["--cap-drop", "sys_admin", "true"],
    &["--cap-add", "cap_chownx", "true"],
    &["--cap-add", "64", "true"],
    &["--cap-add", " cap_chown", "true"],
    &["--seccomp", "5", "--add-seccomp-fd", "6", "true"],
    &["--add-seccomp-fd", "99", "true"],
    &["--hostname", "foo", "true"],
    &["--as-pid-1", "true"],
    &["--uid", "5", "--ro-bind", "/", "/", "true"],
    &["--gid", "5", "--ro-bind", "/", "/", "true"],
    &["--ro-bind", "/", "/", "--disable-userns", "true"],
    &["--sync-fd", "x", "true"],
    &["--info-fd", "", "true"],
    &["--json-status-fd", "1x", "true"],
];

#[test]
fn malformed_command_lines_are_refused_like_bubblewrap() {
    if !have_system_bwrap("malformed_command_lines_are_refused_like_bubblewrap") {
        return;
    }
    for caller in callers() {
        for args in REFUSED {
            // A caller that is not root gets a user namespace without asking.
            let user_implied = caller == Caller::Nobody
                && matches!(args.first(), Some(&"--uid" | &"--gid"))
                && args.len() > 3;
            let outcome = assert_same_as(caller, args);
            if !user_implied {
                assert_eq!(
                    outcome.code, 1,
                    "{caller:?} {args:?} should exit 1: {outcome:?}"
                );
                assert!(outcome.stderr.starts_with("bwrap: "), "{outcome:?}");
            }
        }
    }
}

#[test]
fn disable_userns_needs_unshare_user_even_when_implied() {
    if !have_system_bwrap("disable_userns_needs_unshare_user_even_when_implied") {
        return;
    }
    for caller in callers() {
        let outcome = assert_same_as(caller, &["--ro-bind", "/", "/", "--disable-userns", "true"]);
        assert_eq!(
            outcome.stderr, "bwrap: --disable-userns requires --unshare-user\n",
            "{caller:?}"
        );
    }
}

#[test]
fn numbers_are_read_the_way_c_reads_them() {
    if !have_system_bwrap("numbers_are_read_the_way_c_reads_them") {
        return;
    }
    // strtol/strtoul accept leading space and a sign, saturate out of range
    // and an int keeps the low 32 bits; --size takes C prefixes.
    for (args, stdout) in [
        (&["--unshare-user", "--uid", "+5", "id", "-u"][..], "5\n"),
        (&["--unshare-user", "--uid", " 7", "id", "-u"], "7\n"),
        (
            &["--unshare-user", "--uid", "4294967297", "id", "-u"],
            "1\n",
        ),
        (
            &[
                "--unshare-user",
                "--gid",
                "-99999999999999999999",
                "id",
                "-g",
            ],
            "0\n",
        ),
        (
            &[
                "--perms", " 0750", "--tmpfs", "/tmp/t", "stat", "-c", "%a", "/tmp/t",
            ],
            "750\n",
        ),
        (
            &[
                "--perms", "-0", "--dir", "/tmp/d", "stat", "-c", "%a", "/tmp/d",
            ],
            "0\n",
        ),
        (
            &["--chmod", "+644", "/tmp", "stat", "-c", "%a", "/tmp"],
            "644\n",
        ),
    ] {
        for caller in callers() {
            let mut argv = vec!["--ro-bind", "/", "/", "--tmpfs", "/tmp"];
            argv.extend(args);
            let outcome = assert_same_as(caller, &argv);
            assert_eq!(outcome.stdout, stdout, "{caller:?} {args:?}: {outcome:?}");
        }
    }
    // --size takes C's prefixes: hex and octal.
    for size in ["0x10000", "0200000"] {
        for caller in callers() {
            let argv = [
                "--ro-bind",
                "/",
                "/",
                "--tmpfs",
                "/tmp",
                "--size",
                size,
                "--tmpfs",
                "/tmp/t",
                "sh",
                "-c",
                "df -k /tmp/t | tail -1 | awk '{print $2}'",
            ];
            let outcome = assert_same_as(caller, &argv);
            assert_eq!(outcome.stdout, "64\n", "{caller:?} {size}: {outcome:?}");
        }
    }
}

#[test]
fn repeated_options_warn_that_only_the_last_counts_like_bubblewrap() {
    if !have_system_bwrap("repeated_options_warn_that_only_the_last_counts_like_bubblewrap") {
        return;
    }
    for (args, stdout) in [
        (
            &["--unshare-user", "--uid", "1", "--uid", "2", "id", "-u"][..],
            "2\n",
        ),
        (
            &["--unshare-user", "--gid", "1", "--gid", "3", "id", "-g"],
            "3\n",
        ),
        (&["--chdir", "/", "--chdir", "/etc", "pwd"], "/etc\n"),
        (
            &[
                "--unshare-uts",
                "--hostname",
                "a",
                "--hostname",
                "b",
                "cat",
                "/proc/sys/kernel/hostname",
            ],
            "b\n",
        ),
        (&["--sync-fd", "0", "--sync-fd", "0", "true"], ""),
        (&["--block-fd", "0", "--block-fd", "0", "true"], ""),
        (&["--info-fd", "5", "--info-fd", "5", "true"], ""),
        (
            &["--json-status-fd", "5", "--json-status-fd", "5", "true"],
            "",
        ),
        (&["--seccomp", "5", "--seccomp", "6", "true"], ""),
    ] {
        for caller in callers() {
            let mut argv = vec!["--ro-bind", "/", "/"];
            argv.extend(args);
            // fds 5 and 6 are /dev/null: bubblewrap's setup child blocks
            // forever on an --info-fd it cannot write.
            let launch = |which| {
                let null = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/null")
                    .expect("open /dev/null");
                let null = std::os::fd::OwnedFd::from(null);
                let mut cmd = command_as(which, caller, &argv);
                pass_fd(&mut cmd, &null, 5);
                pass_fd(&mut cmd, &null, 6);
                finish(cmd)
            };
            let (system, builtin) = (launch(Impl::System), launch(Impl::Builtin));
            crate::common::bwrap::assert_outcomes_equal_as(caller, &argv, &system, &builtin);
            assert_eq!(builtin.stdout, stdout, "{caller:?} {args:?}: {builtin:?}");
            assert!(
                builtin.stderr.starts_with("bwrap: Only the last --"),
                "{caller:?} {args:?}: {builtin:?}"
            );
        }
    }
}

#[test]
fn args_data_takes_no_args_option_and_no_more_than_9000_arguments() {
    if !have_system_bwrap("args_data_takes_no_args_option_and_no_more_than_9000_arguments") {
        return;
    }
    let many = vec!["--unshare-pid"; 9001];
    let outcome = assert_same(&many);
    assert_eq!(
        outcome.stderr,
        "bwrap: Exceeded maximum number of arguments 9000\n"
    );
    let mut data = b"--ro-bind\0/\0/\0".to_vec();
    for _ in 0..9000 {
        data.extend(b"--unshare-pid\0");
    }
    for (data, message) in [
        (
            &b"--args\x005\0"[..],
            "bwrap: --args not supported in arguments file\n",
        ),
        (
            &data[..],
            "bwrap: Exceeded maximum number of arguments 9000\n",
        ),
    ] {
        for caller in callers() {
            let argv = ["--args", "5", "true"];
            let launch = |which| {
                let (read, write) = nix::unistd::pipe().expect("pipe");
                let writer = std::thread::spawn({
                    let data = data.to_vec();
                    move || {
                        let _ = fs::File::from(write).write_all(&data);
                    }
                });
                let mut cmd = command_as(which, caller, &argv);
                pass_fd(&mut cmd, &read, 5);
                drop(read);
                let outcome = finish(cmd);
                writer.join().expect("writer");
                outcome
            };
            let (system, builtin) = (launch(Impl::System), launch(Impl::Builtin));
            crate::common::bwrap::assert_outcomes_equal_as(caller, &argv, &system, &builtin);
            assert_eq!(builtin.stderr, message, "{caller:?}");
        }
    }
}

/// Messages bubblewrap 0.9 to 0.11 added or changed, which 0.8 lacks.
#[test]
fn newer_bubblewrap_messages_are_the_builtins() {
    for caller in callers() {
        for (args, stderr) in [
            (&["--argv0"][..], "bwrap: --argv0 takes one argument\n"),
            (
                &["--argv0", "a", "--argv0", "b", "true"],
                "bwrap: --argv0 used multiple times\n",
            ),
            (
                &[
                    "--tmpfs",
                    "/",
                    "--symlink",
                    "a",
                    "/x",
                    "--symlink",
                    "b",
                    "/x",
                    "true",
                ],
                "bwrap: Can't make symlink at /x: existing destination is a\n",
            ),
            (
                &[
                    "--tmpfs",
                    "/",
                    "--dir",
                    "/x",
                    "--symlink",
                    "a",
                    "/x",
                    "true",
                ],
                "bwrap: Can't make symlink at /x: destination exists and is not a symlink\n",
            ),
            (
                &[
                    "--tmpfs",
                    "/",
                    "--symlink",
                    "a",
                    "/x",
                    "--symlink",
                    "a",
                    "/x",
                    "/x",
                ],
                "bwrap: execvp /x: No such file or directory\n",
            ),
            (
                &["--level-prefix", "--foo"],
                "<3>bwrap: Unknown option --foo\n",
            ),
            (
                &[
                    "--level-prefix",
                    "--ro-bind",
                    "/",
                    "/",
                    "--chdir",
                    "/",
                    "--chdir",
                    "/",
                    "true",
                ],
                "<4>bwrap: Only the last --chdir option will take effect\n",
            ),
            (
                &[
                    "--ro-bind",
                    "/",
                    "/",
                    "--tmpfs",
                    "/tmp",
                    "--ro-bind",
                    "/etc/passwd",
                    "/tmp/a/b",
                    "true",
                ],
                "",
            ),
            (
                &[
                    "--ro-bind",
                    "/",
                    "/",
                    "--bind",
                    "/tmp",
                    "/nonexistent-dir/x",
                    "true",
                ],
                "bwrap: Can't mkdir parents for /nonexistent-dir/x: Read-only file system\n",
            ),
            (
                &[
                    "--ro-bind",
                    "/",
                    "/",
                    "--tmpfs",
                    "/tmp",
                    "--chmod",
                    "0",
                    "/tmp/none",
                    "true",
                ],
                "bwrap: Can't chmod 0 /tmp/none: No such file or directory\n",
            ),
        ] {
            let outcome = run_as(Impl::Builtin, caller, args);
            assert_eq!(outcome.stderr, stderr, "{caller:?} {args:?}: {outcome:?}");
        }
    }
}

#[test]
fn no_input_makes_the_builtin_panic() {
    // Odd names, non-UTF-8 bytes, empty strings and environments a shell
    // cannot build: each gets an answer (a bwrap: message or a run), never
    // a Rust panic (exit 101).
    let bytes = |raw: &[u8]| OsString::from_vec(raw.to_vec());
    let cases: Vec<Vec<OsString>> = vec![
        vec!["--setenv".into(), "".into(), "v".into(), "true".into()],
        vec!["--unsetenv".into(), "a=b".into(), "true".into()],
        vec![
            "--setenv".into(),
            bytes(b"\xff"),
            bytes(b"\xfe"),
            "true".into(),
        ],
        vec!["--bind".into(), bytes(b"/\xff"), "/x".into(), "true".into()],
        vec![
            "--ro-bind".into(),
            "/".into(),
            "/".into(),
            "--dir".into(),
            bytes(b"/tmp/\xff/\xfe"),
            "true".into(),
        ],
        vec![
            "--ro-bind".into(),
            "/".into(),
            "/".into(),
            "--chdir".into(),
            bytes(b"/\xff"),
            "true".into(),
        ],
        vec![
            "--ro-bind".into(),
            "/".into(),
            "/".into(),
            "--unshare-uts".into(),
            "--hostname".into(),
            bytes(&[b'h'; 300]),
            "true".into(),
        ],
        vec![
            "--ro-bind".into(),
            "/".into(),
            "/".into(),
            "--tmpfs".into(),
            "../../..".into(),
            "true".into(),
        ],
        vec![
            "--ro-bind".into(),
            "/".into(),
            "/".into(),
            "--symlink".into(),
            "".into(),
            "".into(),
            "true".into(),
        ],
        vec!["--cap-add".into(), bytes(b"\xff"), "true".into()],
        vec!["--uid".into(), bytes(b"1\xff"), "true".into()],
        vec!["--".into()],
        vec![bytes(b"\xff")],
    ];
    for caller in callers() {
        for args in &cases {
            let outcome = run_as(Impl::Builtin, caller, args);
            assert_ne!(outcome.code, 101, "{caller:?} {args:?}: {outcome:?}");
            assert!(
                !outcome.stderr.contains("panicked"),
                "{caller:?} {args:?}: {outcome:?}"
            );
        }
        // Environment entries no shell would make: an empty name, a name
        // with '=' in it; --clearenv and --unsetenv must cope.
        for clear in [&["--clearenv"][..], &["--unsetenv", "X"]] {
            let mut argv = vec!["--ro-bind", "/", "/"];
            argv.extend(clear);
            argv.extend(["sh", "-c", "echo ran"]);
            let mut cmd = command_as(Impl::Builtin, caller, &argv);
            cmd.env("", "empty-name").env("a=b", "c");
            let outcome = finish(cmd);
            assert_eq!(outcome.stdout, "ran\n", "{caller:?} {clear:?}: {outcome:?}");
        }
    }
}

#[test]
fn missing_sources_fail_and_try_forms_skip() {
    if !have_system_bwrap("missing_sources_fail_and_try_forms_skip") {
        return;
    }
    let missing = assert_same(&[
        "--ro-bind",
        "/",
        "/",
        "--bind",
        "/nonexistent-src",
        "/x",
        "true",
    ]);
    assert_eq!(missing.code, 1);
    assert_eq!(
        missing.stderr,
        "bwrap: Can't find source path /nonexistent-src: No such file or directory\n"
    );
    for option in ["--bind-try", "--ro-bind-try", "--dev-bind-try"] {
        let skipped = assert_same(&[
            "--ro-bind",
            "/",
            "/",
            option,
            "/nonexistent-src",
            "/nonexistent-dest",
            "sh",
            "-c",
            "test -e /nonexistent-dest && echo present || echo absent",
        ]);
        assert_eq!(skipped.stdout, "absent\n");
        assert_eq!(skipped.code, 0);
    }
}

#[test]
fn relative_paths_count_from_the_root_like_bubblewrap() {
    if !have_system_bwrap("relative_paths_count_from_the_root_like_bubblewrap") {
        return;
    }
    let source = assert_same(&["--bind", "relative", "/x", "true"]);
    assert_eq!(source.code, 1);
    let dest = assert_same(&["--ro-bind", "/", "/", "--bind", "/tmp", "relative", "true"]);
    assert_eq!(
        dest.stderr,
        "bwrap: Can't mkdir relative: Read-only file system\n"
    );
    let ok = assert_same(&[
        "--ro-bind",
        "usr",
        "/usr",
        "--ro-bind",
        "etc",
        "etc",
        "true",
    ]);
    assert_eq!(ok.code, 1, "no /bin/true reachable: {ok:?}");
}

#[test]
fn failures_inside_the_sandbox_are_reported_like_bubblewrap() {
    if !have_system_bwrap("failures_inside_the_sandbox_are_reported_like_bubblewrap") {
        return;
    }
    for args in [
        &["--ro-bind", "/", "/", "/nonexistent-command"][..],
        &["--ro-bind", "/", "/", "nonexistentcmd"],
        &["--ro-bind", "/", "/", "--chdir", "/nonexistent", "true"],
        &[
            "--ro-bind",
            "/",
            "/",
            "--remount-ro",
            "/nonexistent",
            "true",
        ],
        &[
            "--ro-bind",
            "/",
            "/",
            "--chmod",
            "0700",
            "/nonexistent",
            "true",
        ],
        &["--ro-bind", "/", "/", "--file", "99", "/tmp/x", "true"],
        &[
            "--ro-bind",
            "/",
            "/",
            "--ro-bind-data",
            "99",
            "/tmp/x",
            "true",
        ],
        &[
            "--ro-bind",
            "/",
            "/",
            "--bind",
            "/etc/passwd",
            "/tmp/new-file",
            "true",
        ],
        &["--ro-bind", "/", "/", "--bind-fd", "99", "/x", "true"],
        &["--ro-bind", "/", "/", "--seccomp", "99", "true"],
        &["--ro-bind", "/", "/", "--args", "99", "true"],
    ] {
        let outcome = assert_same(args);
        assert_eq!(outcome.code, 1, "{args:?}: {outcome:?}");
    }
}

#[test]
fn no_command_prints_usage_and_exits_1() {
    let outcome = run::<&str>(Impl::Builtin, &[]);
    assert_eq!(outcome.code, 1);
    assert!(outcome
        .stderr
        .starts_with("usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]"));
}

#[test]
fn version_and_help_name_the_options_the_launcher_probes() {
    let version = run(Impl::Builtin, &["--version"]);
    assert_eq!(version.code, 0);
    assert!(
        version.stdout.starts_with("bubblewrap 0.11.0"),
        "{version:?}"
    );
    let help = run(Impl::Subcommand, &["--help"]);
    assert_eq!(help.code, 0);
    for option in [
        "--argv0",
        "--perms",
        "--die-with-parent",
        "--disable-userns",
    ] {
        assert!(help.stdout.contains(option), "--help lacks {option}");
    }
    assert!(help.stdout.starts_with("usage: codexbox bwrap "));
}

#[test]
fn options_the_builtin_lacks_are_refused_by_name() {
    let outcome = run(Impl::Builtin, &["--userns", "3", "true"]);
    assert_eq!(outcome.code, 1);
    assert_eq!(
        outcome.stderr,
        "bwrap: --userns is not supported by the built-in bwrap\n"
    );
}

#[test]
fn unwritable_info_fd_fails_the_launch_and_leaves_nothing_behind() {
    // bubblewrap prints the same line but its setup child stays blocked
    // forever; the built-in kills and reaps it.
    let outcome = run(
        Impl::Builtin,
        &[
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--info-fd",
            "99",
            "sleep",
            "600",
        ],
    );
    assert_eq!(outcome.code, 1);
    assert_eq!(
        outcome.stderr,
        "bwrap: Write to info_fd: Bad file descriptor\n"
    );
}
