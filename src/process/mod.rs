//! Managed processes: spawning (pipes or PTY), output capture, retention,
//! signals and tree-wide termination.

pub mod env_policy;
pub mod kill;
pub mod managed;
pub mod output;
pub mod pty;
pub mod reaper;
pub mod retention;
pub mod spawn;
pub mod subtree;
pub mod supervisor;
pub mod vfork;
pub mod zygote;

pub use managed::{EventRoute, ManagedProcess, ProcessOptions, WriteOutcome};
pub use spawn::{LaunchSpec, SpawnError, Spawned};
