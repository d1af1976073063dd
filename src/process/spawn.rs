//! Launching a managed process: the [`LaunchSpec`] built from `process/start`
//! (and possibly rewritten by the sandbox layer), and the spawn itself.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use nix::fcntl::OFlag;
use nix::unistd::Pid;

use super::pty;
use super::supervisor::{self, ReaperExec, SupervisorConfig};
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

/// A started process: the supervisor (to reap), the command's pid (its
/// process group), and the server's ends of its descriptors.
#[derive(Debug)]
pub struct Spawned {
    /// The supervisor; reaping it is the caller's job.
    pub supervisor: tokio::process::Child,
    /// The supervisor's pid (root of the subtree to kill).
    pub supervisor_pid: Pid,
    /// The command's pid, also its process group and session id.
    pub command_pid: Pid,
    /// Read end of the status pipe, non-blocking; yields the wait status.
    pub status: OwnedFd,
    /// stdout and stderr pipes (non-tty), non-blocking.
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    /// Writable stdin pipe (non-tty with `pipe_stdin`), non-blocking.
    pub stdin: Option<OwnedFd>,
    /// PTY master (tty), non-blocking: output, input and resize.
    pub pty_master: Option<OwnedFd>,
}

/// Why a spawn failed.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("argv must not be empty")]
    EmptyArgv,
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("supervisor did not report the command's pid")]
    NoPid,
}

/// Starts `spec` under a supervisor (see [`super::supervisor`]). Must run on a
/// long-lived thread: the supervisor's parent-death signal fires when the
/// spawning thread exits.
///
/// `reaper_exe` is the codexbox binary the supervisor re-executes as its
/// reaper; `None` keeps the supervisor reaping in the forked copy.
pub fn spawn(spec: &LaunchSpec, reaper_exe: Option<&Path>) -> Result<Spawned, SpawnError> {
    let (program, args) = spec.argv.split_first().ok_or(SpawnError::EmptyArgv)?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .kill_on_drop(false);
    if let Some(arg0) = &spec.arg0 {
        cmd.arg0(arg0);
    }
    let pty = match spec.tty {
        Some(size) => {
            let pair = pty::open(size)?;
            cmd.stdin(Stdio::from(pair.slave.try_clone()?))
                .stdout(Stdio::from(pair.slave.try_clone()?))
                .stderr(Stdio::from(pair.slave));
            Some(pair.master)
        }
        None => {
            cmd.stdin(if spec.pipe_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            None
        }
    };
    let (status_read, status_write) =
        nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let reaper = reaper_exe.and_then(ReaperExec::new).map(Arc::new);
    let config_reaper = reaper.clone();
    let status_fd = status_write.as_raw_fd();
    let server_pid = std::process::id() as libc::pid_t;
    let controlling_tty = pty.is_some();
    // SAFETY: the hook only makes async-signal-safe calls (see supervisor.rs).
    unsafe {
        cmd.pre_exec(move || {
            supervisor::enter(SupervisorConfig {
                reaper: config_reaper.as_deref(),
                status_fd,
                server_pid,
                controlling_tty,
            })
        });
    }
    let spawned = cmd.spawn();
    drop(cmd);
    drop(status_write);
    drop(reaper);
    let mut child = spawned?;
    let supervisor_pid = child.id().map(|p| Pid::from_raw(p as i32));
    let mut status = std::fs::File::from(status_read);
    let mut record = [0u8; supervisor::RECORD_LEN];
    status
        .read_exact(&mut record)
        .map_err(|_| SpawnError::NoPid)?;
    let command_pid = Pid::from_raw(i32::from_ne_bytes(record));
    let status = OwnedFd::from(status);
    pty::set_nonblocking(&status)?;
    let into_fd = |fd: io::Result<OwnedFd>| -> io::Result<OwnedFd> {
        let fd = fd?;
        pty::set_nonblocking(&fd)?;
        Ok(fd)
    };
    let stdout = child
        .stdout
        .take()
        .map(|s| into_fd(s.into_owned_fd()))
        .transpose()?;
    let stderr = child
        .stderr
        .take()
        .map(|s| into_fd(s.into_owned_fd()))
        .transpose()?;
    let stdin = child
        .stdin
        .take()
        .map(|s| into_fd(s.into_owned_fd()))
        .transpose()?;
    Ok(Spawned {
        supervisor_pid: supervisor_pid.ok_or(SpawnError::NoPid)?,
        supervisor: child,
        command_pid,
        status,
        stdout,
        stderr,
        stdin,
        pty_master: pty,
    })
}
