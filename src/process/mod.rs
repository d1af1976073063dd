//! Managed processes: spawning (pipes or PTY), output capture, retention,
//! signals and tree-wide termination.

pub mod spawn;

pub use spawn::LaunchSpec;
