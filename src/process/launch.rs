//! What one managed process is started with: the [`LaunchSpec`] built from
//! `process/start` (and possibly rewritten by the sandbox layer). Plain data,
//! shared by the spawn paths and the zygote's job encoding.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::protocol::process::PtySize;

/// Everything needed to start one managed process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// The program (`argv[0]`, looked up on the child's `PATH`) and its arguments.
    pub argv: Vec<OsString>,
    /// The process-visible argv[0], when it differs from the program.
    pub arg0: Option<OsString>,
    /// Working directory (absolute).
    pub cwd: PathBuf,
    /// The child's whole environment.
    pub env: Vec<(OsString, OsString)>,
    /// Run on a PTY of this size instead of pipes.
    pub tty: Option<PtySize>,
    /// Keep a writable stdin pipe (non-tty only).
    pub pipe_stdin: bool,
    /// Set by the sandbox layer: compute `sandboxDenied` on exit.
    pub sandboxed: bool,
}
