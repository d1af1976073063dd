//! Managed processes: spawning (pipes or PTY), output capture, retention,
//! signals and tree-wide termination.

pub mod env_policy;
pub mod fd;
pub mod kill;
pub mod launch;
pub mod managed;
pub mod output;
pub mod pty;
pub mod reaper;
pub mod record;
pub mod retention;
pub mod spawn;
pub mod subtree;
pub mod supervisor;
pub mod vfork;
pub mod zygote;

pub use launch::LaunchSpec;
pub use managed::{ManagedProcess, ProcessOptions, WriteOutcome};
pub use record::EventRoute;
pub use spawn::{SpawnError, Spawned};
