//! The `debug` front end of the sandbox.
use std::ffi::OsString;

/// Entry point of this mode.
pub fn main(_argv: Vec<OsString>) -> i32 {
    eprintln!("codexbox: not built yet");
    1
}
