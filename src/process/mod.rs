//! Managed processes: what the server's `process/*` methods act on.
//!
//! - starting one: [`launch`] (the [`LaunchSpec`]), [`env_policy`] (its
//!   environment), [`spawn`] (through the [`zygote`], else a fork),
//!   [`supervisor`] (the per-process subreaper) and [`vfork`] (its exec);
//! - running one: [`managed`] (the operations on a process), [`fd`] and
//!   [`pty`] (its descriptors and terminal), [`output`] (the pump that
//!   numbers events), [`record`] (what is known about it) and
//!   [`retention`] (the output kept for `process/read`);
//! - ending one: [`kill`] (signals, tree-wide termination), [`subtree`]
//!   (killing from inside the supervisor when nobody else will) and
//!   [`reaper`] (waiting until every tree is gone).

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
