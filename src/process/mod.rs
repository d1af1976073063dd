//! Managed processes: what the server's `process/*` methods act on.
//!
//! - starting one: `launch` (the [`LaunchSpec`]), `env_policy` (its
//!   environment), `spawn` (through the [`zygote`], else a fork),
//!   `supervisor` (the per-process subreaper) and `vfork` (its exec);
//! - running one: `managed` (the operations on a process), `fd` and
//!   [`pty`] (its descriptors and terminal), `output` (the pump that
//!   numbers events), `record` (what is known about it) and
//!   `retention` (the output kept for `process/read`);
//! - ending one: `kill` (signals, tree-wide termination), `subtree`
//!   (killing from inside the supervisor when nobody else will) and
//!   `reaper` (waiting until every tree is gone).

pub(crate) mod env_policy;
pub(crate) mod fd;
pub(crate) mod kill;
pub(crate) mod launch;
pub(crate) mod managed;
pub(crate) mod output;
pub mod pty;
pub(crate) mod reaper;
pub(crate) mod record;
pub(crate) mod retention;
pub(crate) mod spawn;
pub(crate) mod subtree;
pub(crate) mod supervisor;
pub(crate) mod vfork;
pub mod zygote;

pub use launch::LaunchSpec;
pub use managed::{ManagedProcess, ProcessOptions, WriteOutcome};
pub use record::EventRoute;
pub use spawn::{SpawnError, Spawned};
