//! Bad input to the built-in bwrap is answered like bubblewrap answers it:
//! same message on stderr, same exit status (differential against the system
//! bubblewrap), plus the built-in's own `--version`/`--help`.

mod common;

use common::bwrap::{assert_same, have_system_bwrap, run, Impl};

/// Command lines bubblewrap 0.8 and 0.11 refuse the same way.
const REFUSED: &[&[&str]] = &[
    &["--foo", "true"],
    &["-x"],
    &["--bind", "/tmp"],
    &["--bind"],
    &["--ro-bind", "/"],
    &["--setenv", "A"],
    &["--uid"],
    &["--uid", "abc", "true"],
    &["--gid", "x", "true"],
    &["--perms"],
    &["--perms", "999", "--dir", "/x", "true"],
    &["--perms", "0700", "--ro-bind", "/", "/", "true"],
    &["--size", "abc", "--tmpfs", "/x", "true"],
    &["--size", "100", "--ro-bind", "/", "/", "true"],
    &["--chmod", "999", "/tmp", "true"],
    &["--cap-drop", "FOO", "--ro-bind", "/", "/", "true"],
    &["--seccomp", "5", "--add-seccomp-fd", "6", "true"],
    &["--hostname", "foo", "true"],
    &["--as-pid-1", "true"],
    &["--uid", "5", "--ro-bind", "/", "/", "true"],
    &["--ro-bind", "/", "/", "--disable-userns", "true"],
    &["--sync-fd", "x", "true"],
];

#[test]
fn malformed_command_lines_are_refused_like_bubblewrap() {
    if !have_system_bwrap("malformed_command_lines_are_refused_like_bubblewrap") {
        return;
    }
    for args in REFUSED {
        let outcome = assert_same(args);
        assert_eq!(outcome.code, 1, "{args:?} should exit 1: {outcome:?}");
        assert!(outcome.stderr.starts_with("bwrap: "), "{outcome:?}");
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
        &["--ro-bind", "/", "/", "--symlink", "/a", "/tmp", "true"],
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
    // forever (SPEC §5.3 pitfalls); the built-in kills and reaps it.
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
