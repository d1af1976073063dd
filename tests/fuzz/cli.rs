//! The command lines: regressions of the built-in bwrap's, run through the
//! real binary.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::client::BIN;

/// Runs the binary with `args` (stdin `input`), bounded by the harness's
/// guard; returns its output.
fn run_binary(args: &[OsString], input: &[u8], dir: &Path) -> Output {
    // An argv word cannot hold a NUL; generated junk may.
    let args: Vec<OsString> = args
        .iter()
        .map(|a| {
            OsString::from_vec(
                a.as_bytes()
                    .iter()
                    .map(|&b| if b == 0 { b'0' } else { b })
                    .collect(),
            )
        })
        .collect();
    let mut child = match Command::new(BIN)
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => panic!("spawn {BIN}: {err}"),
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    match child.wait_with_output() {
        Ok(output) => output,
        Err(err) => panic!("wait {BIN}: {err}"),
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

/// `--setenv ""` and `--unsetenv A=B` reached std's setters, which panic
/// on such names (status 101); bubblewrap says `setenv failed`, status 1.
/// Whether the built-in bwrap can create its namespaces here; tests that
/// need it skip out loud otherwise, unless `CODEXBOX_REQUIRE_SANDBOX=1`.
fn builtin_bwrap_works(dir: &Path) -> bool {
    let argv: Vec<OsString> = ["bwrap", "--ro-bind", "/", "/", "true"]
        .iter()
        .map(OsString::from)
        .collect();
    let output = run_binary(&argv, b"", dir);
    if output.status.success() {
        return true;
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if std::env::var_os("CODEXBOX_REQUIRE_SANDBOX").is_some_and(|v| v == "1") {
        panic!("the built-in bwrap is required but does not work: {stderr}");
    }
    eprintln!("SKIP: the built-in bwrap does not work here: {stderr}");
    false
}

#[test]
fn bwrap_refuses_a_variable_name_setenv_cannot_take() {
    let dir = scratch();
    if !builtin_bwrap_works(dir.path()) {
        return;
    }
    for args in [
        ["bwrap", "--setenv", "", "x", "true"],
        ["bwrap", "--setenv", "A=B", "x", "true"],
        ["bwrap", "--unsetenv", "", "--", "true"],
    ] {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        let output = run_binary(&argv, b"", dir.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("bwrap: ") && stderr.contains("setenv failed"),
            "{stderr}"
        );
    }
}

/// `--args 0` closed fd 0 while parsing; the launcher's next descriptor got
/// number 0, `--file 0` then closed it, and std aborted on the stale
/// descriptor (status 134). The number now stays taken by /dev/null.
#[test]
fn bwrap_args_fd_named_again_by_a_later_option_does_not_abort() {
    let dir = scratch();
    let argv: Vec<OsString> = ["bwrap", "--args", "0", "true"]
        .iter()
        .map(OsString::from)
        .collect();
    for words in [
        "--file\x000\x00/\x00",
        "--ro-bind\x00/\x00/\x00--tmpfs\x00/tmp\x00--file\x000\x00/tmp/f\x00",
    ] {
        let output = run_binary(&argv, words.as_bytes(), dir.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            matches!(output.status.code(), Some(0 | 1)),
            "{words:?}: {:?} {stderr}",
            output.status
        );
    }
}
