//! Command line of the `exec-server` mode.
use std::ffi::OsString;

/// Entry point of the `exec-server` mode.
pub fn main(_argv: Vec<OsString>) -> i32 {
    eprintln!("codex-exec-server: not built yet");
    1
}
