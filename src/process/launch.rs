//! What one managed process is started with: the [`LaunchSpec`] built from
//! `process/start` (and possibly rewritten by the sandbox layer). Plain data,
//! shared by the spawn paths and the zygote's job encoding.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::protocol::process::PtySize;

/// Everything needed to start one managed process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// The program (`argv[0]`, looked up on the child's `PATH`) and its arguments.
    pub argv: Vec<OsString>,
    /// The process-visible `argv[0]`, when it differs from the program.
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
    /// Set by the sandbox layer when the helper is to reuse a prepared
    /// sandbox (or prepare one): only the spawn zygote carries it; any
    /// other way of starting the helper drops it, and the helper then
    /// builds a one-shot sandbox.
    pub helper: Option<HelperJob>,
    /// Set by the sandbox layer when a standby takes the launch
    /// (`StandbyLaunch`); without it, or when handing over fails, the
    /// launch goes the other ways.
    pub standby: Option<StandbyLaunch>,
}

/// A standby to hand the launch to ([`Handoff`]): taken by the first
/// spawn that tries it.
#[derive(Debug, Clone)]
pub struct StandbyLaunch {
    taken: Arc<Mutex<Option<Handoff>>>,
}

impl StandbyLaunch {
    pub fn new(handoff: Handoff) -> StandbyLaunch {
        StandbyLaunch {
            taken: Arc::new(Mutex::new(Some(handoff))),
        }
    }

    /// The handoff, once.
    pub fn take(&self) -> Option<Handoff> {
        crate::sync::lock(&self.taken).take()
    }
}

impl PartialEq for StandbyLaunch {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.taken, &other.taken)
    }
}

impl Eq for StandbyLaunch {}

/// What the sandbox helper gets beside its command line when it reuses or
/// prepares a sandbox: an encoded request (`sandbox::warm::request`) and
/// the descriptors it names.
#[derive(Debug, Clone)]
pub struct HelperJob {
    pub kind: HelperKind,
    pub data: Vec<u8>,
    pub fds: Vec<Arc<OwnedFd>>,
}

/// Which of the helper's reuse roles a job asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelperKind {
    /// Run the command in a prepared sandbox (or a one-shot one).
    Launch,
    /// Prepare a sandbox and keep it until told to let go.
    Prepare,
    /// Make the next command's pid 1 in a prepared sandbox and wait for
    /// the command.
    Standby,
}

impl HelperKind {
    /// Its number in a job message.
    pub fn code(self) -> u8 {
        match self {
            HelperKind::Launch => 1,
            HelperKind::Prepare => 2,
            HelperKind::Standby => 3,
        }
    }

    /// The kind a job message names, if any.
    pub fn from_code(code: u8) -> Option<HelperKind> {
        match code {
            1 => Some(HelperKind::Launch),
            2 => Some(HelperKind::Prepare),
            3 => Some(HelperKind::Standby),
            _ => None,
        }
    }
}

/// A supervised process started ahead of its command, which waits on a
/// control socket for the command's stdio and the rest of what it runs
/// (a sandbox helper's standby: `crate::sandbox::warm::standby`).
#[derive(Debug)]
pub struct Standby {
    pub supervisor_pid: libc::pid_t,
    pub command_pid: libc::pid_t,
    /// The status pipe, its two first records read.
    pub status: tokio::io::unix::AsyncFd<OwnedFd>,
    /// The server's end of the control socket.
    pub control: OwnedFd,
}

/// What lets a standby's command run, worked out once its message is sent
/// (it may take a while: a decision): the word to send, or `None` to call
/// the command off.
pub type GoAhead = Box<dyn FnOnce() -> Option<Vec<u8>> + Send>;

/// A launch handed to a standby: the message that starts its command, and
/// what lets the command run.
pub struct Handoff {
    pub standby: Standby,
    pub message: Vec<u8>,
    pub go_ahead: GoAhead,
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("standby", &self.standby)
            .finish_non_exhaustive()
    }
}

impl PartialEq for HelperJob {
    fn eq(&self, other: &Self) -> bool {
        let numbers =
            |job: &HelperJob| -> Vec<i32> { job.fds.iter().map(|fd| fd.as_raw_fd()).collect() };
        self.kind == other.kind && self.data == other.data && numbers(self) == numbers(other)
    }
}

impl Eq for HelperJob {}
