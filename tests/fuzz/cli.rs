//! The command lines: the built-in bwrap's (`bwrap::cli`), the
//! linux-sandbox helper's (`sandbox::cli`) and `codexbox sandbox`'s
//! (`sandbox::debug`). Parsing is called in-process on arbitrary words;
//! the real binary runs generated command lines whose only command is
//! `true`, with a bounded number of cases, and must end with 0, 1 (a
//! `prefix: …` or bwrap message) or 2 (usage), never a panic or a signal.
//!
//! Safety: a real run binds host paths writable only from a scratch
//! directory (and never `/dev`), so no setup step (`--chmod`, `--file`, a
//! profile's writable root) can reach anything else.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::process::Output;

use codexbox::bwrap::cli::{self as bwrap_cli, Parsed};
use codexbox::bwrap::log::Log;
use codexbox::cli::ParseExit;
use codexbox::sandbox::cli as helper_cli;
use codexbox::sandbox::debug;
use proptest::prelude::*;
use serde_json::Value;

use crate::common::fuzz;
use crate::gen;

fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|w| (*w).to_owned()).collect()
}

/// Every option of bubblewrap 0.11 but `--args` (which reads an fd of the
/// caller: the real-binary target covers it), and some that are not.
const BWRAP_OPTIONS: &[&str] = &[
    "--help",
    "--version",
    "--argv0",
    "--unshare-all",
    "--share-net",
    "--unshare-user",
    "--unshare-user-try",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-cgroup",
    "--unshare-cgroup-try",
    "--disable-userns",
    "--uid",
    "--gid",
    "--hostname",
    "--chdir",
    "--clearenv",
    "--setenv",
    "--unsetenv",
    "--sync-fd",
    "--bind",
    "--bind-try",
    "--dev-bind",
    "--dev-bind-try",
    "--ro-bind",
    "--ro-bind-try",
    "--bind-fd",
    "--ro-bind-fd",
    "--remount-ro",
    "--proc",
    "--dev",
    "--tmpfs",
    "--mqueue",
    "--dir",
    "--file",
    "--bind-data",
    "--ro-bind-data",
    "--symlink",
    "--seccomp",
    "--add-seccomp-fd",
    "--block-fd",
    "--info-fd",
    "--json-status-fd",
    "--new-session",
    "--die-with-parent",
    "--as-pid-1",
    "--cap-add",
    "--cap-drop",
    "--perms",
    "--size",
    "--chmod",
    "--userns",
    "--overlay",
    "--nope",
    "-",
    "--",
    "-x",
];

/// Values for those options: paths, numbers at the edges, octal modes,
/// capability names, junk.
const BWRAP_VALUES: &[&str] = &[
    "/",
    "/tmp",
    "/usr",
    "rel",
    "",
    "0",
    "1",
    "2",
    "-1",
    "4294967296",
    "2147483648",
    "07777",
    "010000",
    "0755",
    "abc",
    "ALL",
    "cap_sys_admin",
    "CAP_NET_RAW",
    "nope",
    "true",
];

/// A bwrap word: an option, a value, or arbitrary bytes.
fn bwrap_word() -> BoxedStrategy<OsString> {
    prop_oneof![
        4 => prop::sample::select(BWRAP_OPTIONS).prop_map(OsString::from),
        4 => prop::sample::select(BWRAP_VALUES).prop_map(OsString::from),
        1 => prop::collection::vec(any::<u8>(), 0..8).prop_map(OsString::from_vec),
        1 => gen::safe_string().prop_map(OsString::from),
    ]
    .boxed()
}

#[test]
fn bwrap_command_lines_parse_or_refuse_in_process() {
    let strategy = prop::collection::vec(bwrap_word(), 0..16);
    fuzz::run("cli_bwrap_parse", 1024, strategy, |args| {
        let has = |word: &str| args.iter().any(|a| a == word);
        match bwrap_cli::parse(&args, &mut Log::default()) {
            Ok(Parsed::Help) => prop_assert!(has("--help")),
            Ok(Parsed::Version) => prop_assert!(has("--version")),
            Ok(Parsed::Run(config)) => {
                prop_assert!(args.ends_with(&config.command), "{:?}", config.command);
            }
            Err(err) => prop_assert!(!err.to_string().is_empty()),
        }
        Ok(())
    });
}

/// One setup step of a real bwrap run: the words, writable binds only from
/// `scratch`.
fn bwrap_step(scratch: &str) -> BoxedStrategy<Vec<String>> {
    let rw = vec![format!("{scratch}/w"), format!("{scratch}/missing")];
    let dest = prop::sample::select(words(&[
        "/", "/tmp", "/x", "/x/y", "/usr/z", "/w", "rel", "/proc",
    ]));
    let ro = prop::sample::select(words(&[
        "/usr",
        "/lib",
        "/lib64",
        "/bin",
        "/etc",
        "/nonexistent",
    ]));
    let mode = prop::sample::select(words(&["0755", "0", "07777", "010000", "x"]));
    // fds read from (stdin holds the `--args` words or nothing) and fds
    // written to; never stderr, which bwrap (like bubblewrap) closes after
    // use, so that its messages reach the test.
    let fd = prop::sample::select(words(&["0", "9", "-1", "x"]));
    let out_fd = prop::sample::select(words(&["1", "9", "x"]));
    let cap = prop::sample::select(words(&["ALL", "CAP_SYS_ADMIN", "cap_chown", "nope"]));
    let flag = prop::sample::select(words(&[
        "--unshare-all",
        "--share-net",
        "--unshare-user",
        "--unshare-user-try",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--disable-userns",
        "--clearenv",
        "--new-session",
        "--die-with-parent",
        "--as-pid-1",
        "--nope",
        "--userns",
        "--",
    ]));
    prop_oneof![
        3 => (prop::sample::select(words(&["--ro-bind", "--ro-bind-try"])), ro, dest.clone())
            .prop_map(|(o, s, d)| vec![o, s, d]),
        2 => (prop::sample::select(words(&["--bind", "--bind-try", "--dev-bind-try"])), prop::sample::select(rw), dest.clone())
            .prop_map(|(o, s, d)| vec![o, s, d]),
        2 => (prop::sample::select(words(&["--tmpfs", "--proc", "--dev", "--dir", "--mqueue", "--remount-ro", "--chdir"])), dest.clone())
            .prop_map(|(o, d)| vec![o, d]),
        1 => (dest.clone(), dest.clone()).prop_map(|(t, d)| vec!["--symlink".into(), t, d]),
        1 => (mode.clone(), dest.clone()).prop_map(|(m, d)| vec!["--chmod".into(), m, d]),
        1 => (mode, dest.clone()).prop_map(|(m, d)| vec!["--perms".into(), m, "--dir".into(), d]),
        1 => (prop::sample::select(words(&["1", "0", "x"])), dest.clone())
            .prop_map(|(n, d)| vec!["--size".into(), n, "--tmpfs".into(), d]),
        1 => (prop::sample::select(words(&["--file", "--bind-data", "--ro-bind-data", "--bind-fd"])), fd.clone(), dest)
            .prop_map(|(o, f, d)| vec![o, f, d]),
        1 => (prop::sample::select(words(&["--seccomp", "--add-seccomp-fd", "--block-fd", "--sync-fd"])), fd)
            .prop_map(|(o, f)| vec![o, f]),
        1 => (prop::sample::select(words(&["--info-fd", "--json-status-fd"])), out_fd)
            .prop_map(|(o, f)| vec![o, f]),
        1 => (prop::sample::select(words(&["--cap-add", "--cap-drop"])), cap).prop_map(|(o, c)| vec![o, c]),
        1 => prop::sample::select(words(&["--uid", "--gid"])).prop_map(|o| vec![o, "0".into()]),
        1 => prop::sample::select(words(&["box", ""])).prop_map(|h| vec!["--hostname".into(), h]),
        1 => prop::sample::select(words(&["A", "", "A=B"])).prop_map(|v| vec!["--setenv".into(), v, "x".into()]),
        3 => flag.prop_map(|f| vec![f]),
        // An option left without its argument.
        1 => prop::sample::select(words(&["--bind", "--uid", "--chmod", "--perms"])).prop_map(|o| vec![o]),
    ]
    .boxed()
}

/// Exit 0 or 1, or 2 with a usage line starting with `prefix`; never a
/// panic (101) or a signal.
fn ends_cleanly(output: &Output, prefix: &str, argv: &[OsString]) -> Result<(), TestCaseError> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    match output.status.code() {
        Some(0 | 1) => Ok(()),
        Some(2) => {
            prop_assert!(
                stderr.starts_with(prefix),
                "{argv:?}: usage error without `{prefix}`: {stderr}"
            );
            Ok(())
        }
        other => Err(TestCaseError::fail(format!(
            "{argv:?} ended with {other:?} ({}): {stderr}",
            output.status
        ))),
    }
}

fn scratch() -> tempfile::TempDir {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => panic!("tempdir: {err}"),
    };
    if let Err(err) = std::fs::create_dir(dir.path().join("w")) {
        panic!("scratch: {err}");
    }
    dir
}

#[test]
fn the_real_bwrap_refuses_bad_command_lines_with_its_message_and_status_1() {
    let dir = scratch();
    let root = dir.path().to_string_lossy().into_owned();
    let strategy = (
        prop::collection::vec(bwrap_step(&root), 0..6),
        prop::option::of(prop::collection::vec(bwrap_step(&root), 0..3)),
        any::<bool>(),
    );
    // The host is never what a generated run changes: as root, `--proc
    // /proc --chmod 0 /proc` would otherwise change the host's procfs.
    let proc_mode = || {
        std::fs::metadata("/proc")
            .map(|m| m.permissions().mode())
            .ok()
    };
    let before = proc_mode();
    let chmod_proc = fuzz::run_binary(
        &["bwrap", "--proc", "/proc", "--chmod", "0", "/proc", "true"].map(OsString::from),
        b"",
        dir.path(),
    );
    assert_eq!(proc_mode(), before, "host /proc changed: {chmod_proc:?}");
    fuzz::run(
        "cli_bwrap_run",
        24,
        strategy,
        |(steps, via_args, dashes)| {
            let mut argv: Vec<OsString> = vec!["bwrap".into()];
            argv.extend(steps.concat().into_iter().map(OsString::from));
            // `--args 0`: more words, NUL-separated on stdin.
            let mut input = Vec::new();
            if let Some(more) = via_args {
                argv.extend(["--args".into(), "0".into()]);
                for word in more.concat() {
                    input.extend_from_slice(word.as_bytes());
                    input.push(0);
                }
            }
            if dashes {
                argv.push("--".into());
            }
            argv.push("true".into());
            let output = fuzz::run_binary(&argv, &input, dir.path());
            let stderr = String::from_utf8_lossy(&output.stderr);
            match output.status.code() {
                Some(0) => {}
                Some(1) => prop_assert!(
                    stderr.contains("bwrap: ") || stderr.starts_with("usage: "),
                    "{argv:?}: status 1 without a bwrap message: {stderr}"
                ),
                other => prop_assert!(false, "{argv:?} ended with {other:?}: {stderr}"),
            }
            Ok(())
        },
    );
    assert_eq!(
        proc_mode(),
        before,
        "a generated run changed the host's /proc"
    );
}

/// A profile as the command lines take it: a name, JSON (generated from
/// the schema, with paths from `paths`), a file holding JSON, or junk.
fn profile_text(paths: Vec<String>, file: String) -> BoxedStrategy<String> {
    let root = crate::common::schema::load("PermissionProfile.json");
    let pool = gen::Pool {
        paths,
        values: vec![("subpath", [".git", "a"].map(Value::from).to_vec())],
        ..gen::Pool::default()
    };
    prop_oneof![
        2 => prop::sample::select(words(&["read-only", ":workspace", "workspace-write", "danger-full-access", ":nope", "{", ""])),
        3 => gen::from_schema(&root, &root, "", &pool).prop_map(|v| v.to_string()),
        1 => Just(file),
        1 => gen::safe_string(),
    ]
    .boxed()
}

fn helper_word(paths: Vec<String>, file: String) -> BoxedStrategy<Vec<String>> {
    let path = prop::sample::select(paths.clone());
    let legacy = prop::sample::select(words(&[
        r#"{"type":"read-only"}"#,
        r#"{"type":"workspace-write","writable_roots":[]}"#,
        r#"{"type":"danger-full-access"}"#,
        r#"{"type":"nope"}"#,
        "[]",
    ]));
    let fs = prop::sample::select(words(&[
        r#"{"kind":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}"#,
        r#"{"kind":"unrestricted"}"#,
        "{}",
        "x",
    ]));
    prop_oneof![
        3 => (prop::sample::select(words(&["--sandbox-policy-cwd", "--command-cwd"])), path).prop_map(|(o, p)| vec![o, p]),
        3 => profile_text(paths, file).prop_map(|p| vec!["--permission-profile".into(), p]),
        1 => legacy.prop_map(|p| vec!["--sandbox-policy".into(), p]),
        1 => fs.prop_map(|p| vec!["--file-system-sandbox-policy".into(), p]),
        1 => prop::sample::select(words(&["restricted", "enabled", "\"enabled\"", "x"])).prop_map(|n| vec!["--network-sandbox-policy".into(), n]),
        1 => prop::sample::select(words(&["auto", "bwrap", "landlock", "x"])).prop_map(|b| vec!["--backend".into(), b]),
        1 => prop::sample::select(words(&["--restore-stderr-fd", "--started-fd"])).prop_map(|o| vec![o, "x".into()]),
        2 => prop::sample::select(words(&[
            "--use-legacy-landlock", "--allow-network-for-proxy", "--no-proc", "--explain",
            "--apply-seccomp-then-exec", "--nope", "-h", "--version", "--proxy-route-spec",
        ])).prop_map(|f| vec![f]),
    ]
    .boxed()
}

/// In-process paths for the helper's flags: anything, nothing acts.
fn any_paths() -> Vec<String> {
    words(&["/", "/tmp", "rel", "", "/nonexistent/fuzz", "file:///tmp"])
}

#[test]
fn linux_sandbox_command_lines_parse_or_refuse_with_status_2_or_1() {
    let strategy = (
        prop::collection::vec(helper_word(any_paths(), "/nonexistent".into()), 0..6),
        any::<bool>(),
    );
    fuzz::run("cli_helper_parse", 512, strategy, |(flags, command)| {
        let mut argv: Vec<OsString> = vec!["codex-linux-sandbox".into()];
        argv.extend(flags.concat().into_iter().map(OsString::from));
        if command {
            argv.extend(["--".into(), "true".into()]);
        }
        match codexbox::cli::parse::<helper_cli::Args>(&argv, helper_cli::PREFIX) {
            Err(ParseExit::Print(text)) => prop_assert!(!text.is_empty()),
            Err(ParseExit::Usage(line)) => {
                prop_assert!(line.starts_with("codex-linux-sandbox: "), "{line}");
                prop_assert!(!line.contains('\n'), "{line}");
            }
            Ok(args) => {
                if let Err(failure) = helper_cli::profile_from_args(&args) {
                    prop_assert!(matches!(failure.code, 1 | 2), "{failure:?}");
                    prop_assert!(!failure.message.is_empty());
                }
            }
        }
        Ok(())
    });
}

fn sandbox_word(paths: Vec<String>, file: String) -> BoxedStrategy<Vec<String>> {
    let path = prop::sample::select(paths.clone());
    prop_oneof![
        3 => (prop::sample::select(words(&["-P", "-p", "--profile", "--permission-profile", "--permissions-profile"])), profile_text(paths, file))
            .prop_map(|(o, p)| vec![o, p]),
        2 => (prop::sample::select(words(&["-C", "--cd", "--writable-root"])), path).prop_map(|(o, p)| vec![o, p]),
        1 => prop::sample::select(words(&["auto", "bwrap", "landlock", "x"])).prop_map(|b| vec!["--backend".into(), b]),
        2 => prop::sample::select(words(&[
            "--network", "--explain", "--no-proc", "--include-managed-config", "--full-auto",
            "linux", "landlock", "--nope", "--help", "-V", "--",
        ])).prop_map(|f| vec![f]),
    ]
    .boxed()
}

/// A scratch directory with a profile file; its paths in several forms.
fn sandbox_scratch() -> (tempfile::TempDir, Vec<String>, String) {
    let dir = scratch();
    let file = dir.path().join("profile.json");
    if let Err(err) = std::fs::write(
        &file,
        r#"{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}}"#,
    ) {
        panic!("profile: {err}");
    }
    let w = dir.path().join("w");
    let paths = vec![
        w.to_string_lossy().into_owned(),
        dir.path().to_string_lossy().into_owned(),
        "w".to_owned(),
        dir.path().join("missing").to_string_lossy().into_owned(),
    ];
    (dir, paths, file.to_string_lossy().into_owned())
}

#[test]
fn sandbox_command_lines_parse_and_plan_or_refuse_with_status_2_or_1() {
    let (dir, paths, file) = sandbox_scratch();
    let strategy = (
        prop::collection::vec(sandbox_word(paths, file), 0..5),
        any::<bool>(),
    );
    let here = dir.path().to_path_buf();
    fuzz::run("cli_sandbox_parse", 512, strategy, |(flags, command)| {
        let mut argv: Vec<OsString> = vec!["codexbox sandbox".into()];
        argv.extend(flags.concat().into_iter().map(OsString::from));
        if command {
            argv.extend(["--".into(), "true".into()]);
        }
        match debug::parse(&argv) {
            Err(ParseExit::Print(text)) => prop_assert!(!text.is_empty()),
            Err(ParseExit::Usage(line)) => {
                prop_assert!(line.starts_with("codexbox sandbox: "), "{line}");
            }
            Ok(args) => match debug::plan(args, &here) {
                Ok(plan) => prop_assert!(plan.cwd.is_absolute()),
                Err(refusal) => prop_assert!(matches!(refusal.code, 1 | 2), "{refusal:?}"),
            },
        }
        Ok(())
    });
}

/// The helper and `codexbox sandbox` for real, with `true` (or `--explain`)
/// as the command and every writable path inside the scratch directory.
#[test]
fn the_real_sandbox_modes_end_with_status_0_1_or_2() {
    let (dir, paths, file) = sandbox_scratch();
    let helper = (
        prop::collection::vec(helper_word(paths.clone(), file.clone()), 0..5),
        any::<bool>(),
    )
        .prop_map(|(flags, command)| (true, flags, command));
    let sandbox = (
        prop::collection::vec(sandbox_word(paths, file), 0..5),
        any::<bool>(),
    )
        .prop_map(|(flags, command)| (false, flags, command));
    fuzz::run(
        "cli_sandbox_run",
        24,
        prop_oneof![helper, sandbox],
        |(is_helper, flags, command)| {
            let (mode, prefix) = if is_helper {
                ("linux-sandbox", "codex-linux-sandbox: ")
            } else {
                ("sandbox", "codexbox sandbox: ")
            };
            let mut argv: Vec<OsString> = vec![mode.into()];
            argv.extend(flags.concat().into_iter().map(OsString::from));
            if command {
                argv.extend(["--".into(), "true".into()]);
            }
            let output = fuzz::run_binary(&argv, b"", dir.path());
            ends_cleanly(&output, prefix, &argv)
        },
    );
}

/// `--setenv ""` and `--unsetenv ""` once reached std's setters, which
/// panic on such names (status 101); bubblewrap says `setenv failed`,
/// status 1.
#[test]
fn bwrap_refuses_a_variable_name_setenv_cannot_take() {
    let dir = scratch();
    for args in [
        ["bwrap", "--setenv", "", "x", "true"],
        ["bwrap", "--setenv", "A=B", "x", "true"],
        ["bwrap", "--unsetenv", "", "--", "true"],
    ] {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        let output = fuzz::run_binary(&argv, b"", dir.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("bwrap: ") && stderr.contains("setenv failed"),
            "{stderr}"
        );
    }
}

/// A caller fd number that is closed by the time an option uses it (read
/// by `--args`, or never open) could be given to one of the launcher's own
/// descriptors; the option then read and closed that descriptor, and std
/// aborted on it (status 134). Now the launcher keeps its long-lived
/// descriptors above every number the options name, and a data option
/// that meets its own file under the caller's number reports EBADF, as
/// bubblewrap does.
#[test]
fn a_closed_caller_fd_is_never_the_launchers_own() {
    let dir = scratch();
    let cases: [(&[&str], &str); 5] = [
        (&["--bind-fd", "0", "/", "--args", "0", "true"], ""),
        (&["--bind-data", "0", "/", "--args", "0", "true"], ""),
        (&["--json-status-fd", "1", "--block-fd", "9", "true"], ""),
        (&["--args", "0", "true"], "--file\x000\x00/\x00"),
        (
            &["--args", "0", "true"],
            "--ro-bind\x00/\x00/\x00--tmpfs\x00/tmp\x00--file\x000\x00/tmp/f\x00",
        ),
    ];
    for (args, words) in cases {
        let argv: Vec<OsString> = std::iter::once("bwrap")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let output = fuzz::run_binary(&argv, words.as_bytes(), dir.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            matches!(output.status.code(), Some(0 | 1)),
            "{argv:?} {words:?}: {:?} {stderr}",
            output.status
        );
    }
}
