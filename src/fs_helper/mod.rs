//! The `fs-helper` mode: performs filesystem operations for the server over stdin/stdout.
use std::ffi::OsString;

/// Entry point of the `fs-helper` mode.
pub fn main(_argv: Vec<OsString>) -> i32 {
    eprintln!("codex-fs-helper: not built yet");
    1
}
