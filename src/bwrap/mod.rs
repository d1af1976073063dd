//! The built-in bubblewrap: a Rust implementation of the bwrap command line.
use std::ffi::OsString;

/// Entry point of the `bwrap` mode.
pub fn main(_argv: Vec<OsString>) -> i32 {
    eprintln!("bwrap: not built yet");
    1
}
