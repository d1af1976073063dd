//! Launching a managed process under its supervisor: through the zygote,
//! or by forking the server when the zygote cannot be reached.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};

use nix::fcntl::OFlag;
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;

use super::fd::{read_record, register};
use super::launch::{Handoff, LaunchSpec, StandbyLaunch};
use super::pty;
use super::supervisor::{self, ReaperExec, SupervisorConfig};
use super::zygote::Zygote;

/// A started process: the supervisor (to reap), the command's pid (its
/// process group), and the server's ends of its descriptors.
#[derive(Debug)]
pub struct Spawned {
    /// The supervisor when the server forked it (reaping it is the caller's
    /// job); `None` when the zygote did (the zygote reaps it).
    pub supervisor: Option<tokio::process::Child>,
    /// The supervisor's pid (root of the subtree to kill).
    pub supervisor_pid: Pid,
    /// The command's pid, also its process group and session id.
    pub command_pid: Pid,
    /// Read end of the status pipe, non-blocking and registered with the
    /// reactor; yields the wait status.
    pub status: AsyncFd<OwnedFd>,
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
    let status = register(status)?;
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
        supervisor: Some(child),
        command_pid,
        status,
        stdout,
        stderr,
        stdin,
        pty_master: pty,
    })
}

static ZYGOTE: OnceLock<Zygote> = OnceLock::new();

/// Stops the spawn zygote, if one runs (server shutdown).
pub fn shutdown_zygote(timeout: std::time::Duration) {
    if let Some(zygote) = ZYGOTE.get() {
        zygote.shutdown(timeout);
    }
}

/// Whether `CODEXBOX_SPAWN=direct` turned the zygote off.
fn zygote_disabled() -> bool {
    static DISABLED: OnceLock<bool> = OnceLock::new();
    *DISABLED.get_or_init(|| std::env::var_os("CODEXBOX_SPAWN").is_some_and(|v| v == "direct"))
}

/// Starts `spec` through the spawn zygote when `reaper_exe` (the codexbox
/// binary) is known, falling back to forking the server ([`spawn`]) when the
/// zygote cannot be reached.
pub async fn spawn_async(
    spec: &LaunchSpec,
    reaper_exe: Option<&Path>,
) -> Result<Spawned, SpawnError> {
    if spec.argv.is_empty() {
        return Err(SpawnError::EmptyArgv);
    }
    if let Some(handoff) = spec.standby.as_ref().and_then(StandbyLaunch::take) {
        match hand_over(handoff, spec) {
            Ok(spawned) => return Ok(spawned),
            // The launch goes on as if there had been no standby.
            Err(err) => tracing::debug!("standby unavailable: {err}"),
        }
    }
    if let Some(exe) = reaper_exe.filter(|_| !zygote_disabled()) {
        let zygote = ZYGOTE.get_or_init(|| Zygote::new(exe));
        match spawn_with_zygote(zygote, spec).await {
            Err(ZygoteError::Unavailable(err)) => {
                tracing::debug!("spawn zygote unavailable, forking directly: {err}");
            }
            Err(ZygoteError::Spawn(err)) => return Err(err),
            Ok(spawned) => return Ok(spawned),
        }
    }
    spawn(spec, reaper_exe)
}

/// Starts `spec`, which carries a sandbox helper's request, through the
/// spawn zygote only: the request travels nowhere else, and the helper
/// without it would run its command on a one-shot sandbox.
pub async fn spawn_helper_job(spec: &LaunchSpec, exe: &Path) -> Result<Spawned, SpawnError> {
    if spec.argv.is_empty() {
        return Err(SpawnError::EmptyArgv);
    }
    if zygote_disabled() {
        return Err(SpawnError::Io(io::Error::other("the spawn zygote is off")));
    }
    let zygote = ZYGOTE.get_or_init(|| Zygote::new(exe));
    match spawn_with_zygote(zygote, spec).await {
        Ok(spawned) => Ok(spawned),
        Err(ZygoteError::Unavailable(err)) => Err(SpawnError::Io(err)),
        Err(ZygoteError::Spawn(err)) => Err(err),
    }
}

enum ZygoteError {
    /// The job never reached the zygote: try the direct path.
    Unavailable(io::Error),
    /// The zygote ran the job and it failed.
    Spawn(SpawnError),
}

/// `/dev/null`, opened once: the stdin of every command without `tty` or
/// `pipeStdin` (the file has no state a command could change for another).
fn dev_null() -> io::Result<RawFd> {
    static DEV_NULL: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(fd) = DEV_NULL.get() {
        return Ok(fd.as_raw_fd());
    }
    let opened: OwnedFd = std::fs::File::open("/dev/null")?.into();
    Ok(DEV_NULL.get_or_init(|| opened).as_raw_fd())
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// The command's stdio for a launch of `spec`: the descriptors to send
/// (stdin, stdout, stderr), the copies that close once they are sent, and
/// the server's ends.
struct ChildStdio {
    sent: [RawFd; 3],
    handed: Vec<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    pty_master: Option<OwnedFd>,
}

impl ChildStdio {
    fn open(spec: &LaunchSpec) -> io::Result<ChildStdio> {
        let mut stdio = ChildStdio {
            sent: [-1; 3],
            handed: Vec::with_capacity(3),
            stdout: None,
            stderr: None,
            stdin: None,
            pty_master: None,
        };
        stdio.sent = match spec.tty {
            Some(size) => {
                let pair = pty::open(size)?;
                stdio.pty_master = Some(pair.master);
                // One descriptor sent three times arrives as three.
                let slave = pair.slave.as_raw_fd();
                stdio.handed.push(pair.slave);
                [slave, slave, slave]
            }
            None => {
                let (out_r, out_w) = cloexec_pipe()?;
                let (err_r, err_w) = cloexec_pipe()?;
                stdio.stdout = Some(out_r);
                stdio.stderr = Some(err_r);
                let input = if spec.pipe_stdin {
                    let (in_r, in_w) = cloexec_pipe()?;
                    stdio.stdin = Some(in_w);
                    let input = in_r.as_raw_fd();
                    stdio.handed.push(in_r);
                    input
                } else {
                    dev_null()?
                };
                let sent = [input, out_w.as_raw_fd(), err_w.as_raw_fd()];
                stdio.handed.extend([out_w, err_w]);
                sent
            }
        };
        Ok(stdio)
    }

    /// The started process (the command's copies were sent and closed).
    fn into_spawned(
        self,
        supervisor_pid: libc::pid_t,
        command_pid: libc::pid_t,
        status: AsyncFd<OwnedFd>,
    ) -> io::Result<Spawned> {
        let nonblocking = |fd: Option<OwnedFd>| -> io::Result<Option<OwnedFd>> {
            if let Some(fd) = &fd {
                pty::set_nonblocking(fd)?;
            }
            Ok(fd)
        };
        Ok(Spawned {
            supervisor: None,
            supervisor_pid: Pid::from_raw(supervisor_pid),
            command_pid: Pid::from_raw(command_pid),
            status,
            stdout: nonblocking(self.stdout)?,
            stderr: nonblocking(self.stderr)?,
            stdin: nonblocking(self.stdin)?,
            pty_master: self.pty_master,
        })
    }
}

async fn spawn_with_zygote(zygote: &Zygote, spec: &LaunchSpec) -> Result<Spawned, ZygoteError> {
    let unavailable = ZygoteError::Unavailable;
    let (status_read, status_write) = cloexec_pipe().map_err(unavailable)?;
    let mut stdio = ChildStdio::open(spec).map_err(unavailable)?;
    let [child_in, child_out, child_err] = stdio.sent;
    zygote
        .send(
            spec,
            [child_in, child_out, child_err, status_write.as_raw_fd()],
        )
        .map_err(unavailable)?;
    stdio.handed.clear();
    drop(status_write);
    pty::set_nonblocking(&status_read).map_err(|e| ZygoteError::Spawn(e.into()))?;
    let status = register(status_read).map_err(|e| ZygoteError::Spawn(e.into()))?;
    // No supervisor pid: the job died with an exiting zygote before any fork.
    let supervisor_pid = read_record(&status)
        .await
        .ok_or_else(|| ZygoteError::Unavailable(io::Error::from_raw_os_error(libc::ECONNRESET)))?;
    let command = read_record(&status)
        .await
        .ok_or(ZygoteError::Spawn(SpawnError::NoPid))?;
    if command < 0 {
        return Err(ZygoteError::Spawn(SpawnError::Io(
            io::Error::from_raw_os_error(-command),
        )));
    }
    stdio
        .into_spawned(supervisor_pid, command, status)
        .map_err(|e| ZygoteError::Spawn(e.into()))
}

/// Starts the command of `handoff`: stdio made for `spec` as a launch
/// through the zygote makes it, sent with the message on the standby's
/// control socket, then the go-ahead, worked out meanwhile on this thread
/// (the command prepares itself in the standby). On an error the command
/// never ran (a standby that is gone, a message too large, or the launch
/// called off); the standby and the stdio made for it are dropped.
fn hand_over(handoff: Handoff, spec: &LaunchSpec) -> io::Result<Spawned> {
    let Handoff {
        standby,
        message,
        go_ahead,
    } = handoff;
    let control = standby.control.as_raw_fd();
    let mut stdio = ChildStdio::open(spec)?;
    crate::sys::scm::send_with_fds(control, &message, &stdio.sent)?;
    stdio.handed.clear();
    // A go-ahead that panicked calls the launch off like one that said no.
    let worked_out = blocking_in_place(|| std::panic::catch_unwind(AssertUnwindSafe(go_ahead)));
    let said = worked_out
        .ok()
        .flatten()
        .ok_or_else(|| io::Error::other("the launch was called off"))?;
    // The go-ahead is the last step that may fail: a launch that falls
    // back to another way must not have run here too.
    let spawned =
        stdio.into_spawned(standby.supervisor_pid, standby.command_pid, standby.status)?;
    crate::sys::scm::send_with_fds(control, &said, &[])?;
    Ok(spawned)
}

/// Runs `work`, which blocks for a while, on this thread: on a
/// multi-threaded runtime its other tasks move to another worker first.
fn blocking_in_place<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let multi =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if multi {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
}
