//! Test helpers for the confinement primitives: run a closure in a forked
//! child (so the test process itself is never confined) and read its result
//! from the exit status.
#![allow(dead_code)] // each test file uses a subset

use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};

/// Exit code a child uses when a syscall succeeded where it should not, or
/// failed with an unexpected errno: `200 + errno`-style codes stay below.
pub const OK: i32 = 0;

/// The errno of the last failed call.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
}

/// Forks; in the child runs `body` (raw syscalls only: the parent is
/// multi-threaded) and `_exit`s with its return value. Returns the child's
/// exit code, or `1000 + signal` when it was killed.
pub fn in_child<F>(mut body: F) -> i32
where
    F: FnMut() -> i32 + Send + Sync + 'static,
{
    let mut cmd = Command::new("/bin/true");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // SAFETY: the closure runs in the forked child and leaves through _exit;
    // test bodies only make raw syscalls on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let code = body();
            libc::_exit(code)
        });
    }
    let status = cmd.status().expect("fork a child");
    match status.code() {
        Some(code) => code,
        None => 1000 + status.signal().unwrap_or(0),
    }
}

/// Runs `program args` after `setup` ran in the child between fork and exec;
/// returns its output. `setup` must only make raw syscalls.
pub fn exec_after<F>(program: &str, args: &[&str], setup: F) -> Output
where
    F: FnMut() -> std::io::Result<()> + Send + Sync + 'static,
{
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    // SAFETY: `setup` only makes raw, async-signal-safe syscalls.
    unsafe {
        cmd.pre_exec(setup);
    }
    cmd.output().expect("spawn")
}

/// `Name:\tvalue` of a /proc/PID/status text.
pub fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        line.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}
