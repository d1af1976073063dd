//! The spawn zygote: a small single-threaded helper (this binary re-executed
//! with [`ZYGOTE_ARG1`]) started once per server. Forking the multi-threaded
//! server for every command is slow (page tables, then copy-on-write faults in
//! the server); forking the tiny zygote is not. The zygote keeps a supervisor
//! forked ahead of time (its own session, a child subreaper) waiting for the
//! next job; that supervisor forks and execs the command, reports its own pid and the command's pid (or the exec
//! error) on the status pipe, then the command's wait status, and reaps adopted
//! descendants until none is left (see `supervisor.rs` for the record format).
//!
//! The zygote exits after [`IDLE_EXIT`] without work, so an idle server has no
//! helper process; the next launch starts a new one.
//!
//! Jobs travel over a `SOCK_SEQPACKET` socket: one message with the encoded
//! launch and four descriptors (stdin, stdout, stderr, status pipe) as
//! `SCM_RIGHTS`, then those of a sandbox helper's reuse request
//! (`crate::process::launch::HelperJob`). Any failure to reach the zygote
//! makes the caller fall back to forking the server directly.

mod helper;
mod job;
mod run;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use super::launch::LaunchSpec;
pub use helper::{Helpers, ReuseHelper, SandboxHelper};
pub use run::main;

/// `argv[1]` that turns the binary into the spawn zygote (stdin is its socket).
pub const ZYGOTE_ARG1: &str = "--codexbox-zygote";
/// What `ps` shows for the zygote and its waiting supervisors.
const ZYGOTE_TITLE: [&str; 2] = ["codexbox-zygote", ZYGOTE_ARG1];
/// Bytes of argv room the zygote is started with (a blank argument it
/// clears at once), so that a sandbox helper run in a fork of it can show
/// its own command line in `ps` (see [`set_process_title`]).
const TITLE_ROOM: usize = 4096;
/// Descriptors sent with each job.
const JOB_FDS: usize = 4;
/// Largest job message (argv + env); larger launches use the direct path.
const MAX_JOB_BYTES: usize = 192 * 1024;

/// The server's handle on its zygote. The zygote exits when it has been idle
/// (no job, no live supervisor) for [`IDLE_EXIT`], so an idle server has no
/// helper process; the next job starts a fresh one.
#[derive(Debug)]
pub struct Zygote {
    exe: PathBuf,
    live: Mutex<Option<Live>>,
}

#[derive(Debug)]
struct Live {
    socket: OwnedFd,
    /// Reaps the zygote when it exits.
    waiter: std::thread::JoinHandle<()>,
}

/// Supervisors kept forked and waiting for a job.
const WARM_SUPERVISORS: usize = 2;

/// How long replacing a taken supervisor waits while another is still warm:
/// the fork then runs after the launch has been answered, not beside it on
/// a busy CPU.
const REPLENISH_DELAY: std::time::Duration = std::time::Duration::from_micros(150);
/// The kernel's default timer slack (50 us), restored for supervisors.
const DEFAULT_TIMER_SLACK_NS: libc::c_ulong = 50_000;
/// The zygote's poll period while nothing is due (under one second).
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// How long an idle zygote waits for work before exiting.
pub const IDLE_EXIT: std::time::Duration = std::time::Duration::from_millis(500);

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into the array.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Live {
    /// Starts a zygote from the codexbox binary at `exe`. The zygote dies
    /// with the calling thread, so call it from a long-lived one.
    fn start(exe: &Path) -> io::Result<Live> {
        let (ours, theirs) = seqpacket_pair()?;
        let server_pid = std::process::id() as libc::pid_t;
        let mut cmd = Command::new(exe);
        cmd.arg0(ZYGOTE_TITLE[0])
            .args([ZYGOTE_ARG1, &" ".repeat(TITLE_ROOM)])
            .env_clear()
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null());
        // SAFETY: prctl, getppid and setsid only; async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                crate::sys::confine::set_parent_death_signal(libc::SIGKILL)?;
                if libc::getppid() != server_pid {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                // Out of the server's terminal session: a Ctrl-C meant for the
                // server must not kill the zygote (and its supervisors) before
                // the server has killed every tree.
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let waiter = std::thread::Builder::new()
            .name("zygote-waiter".into())
            .spawn(move || {
                let _ = child.wait();
            })?;
        Ok(Live {
            socket: ours,
            waiter,
        })
    }
}

impl Zygote {
    /// A handle that starts the zygote from `exe` on first use.
    pub fn new(exe: &Path) -> Zygote {
        Zygote {
            exe: exe.to_owned(),
            live: Mutex::new(None),
        }
    }

    /// Sends one job. `fds` = stdin, stdout, stderr, status pipe (write end).
    /// Restarts a zygote that exited (idle) once.
    pub fn send(&self, spec: &LaunchSpec, fds: [RawFd; JOB_FDS]) -> io::Result<()> {
        let job = job::encode(spec);
        if job.len() > MAX_JOB_BYTES {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        let mut all: Vec<RawFd> = fds.to_vec();
        if let Some(helper) = &spec.helper {
            all.extend(helper.fds.iter().map(|fd| fd.as_raw_fd()));
        }
        let mut live = crate::sync::lock(&self.live);
        for attempt in 0..2 {
            let socket = match live.as_ref() {
                Some(current) => current.socket.as_raw_fd(),
                None => {
                    let started = Live::start(&self.exe)?;
                    let fd = started.socket.as_raw_fd();
                    *live = Some(started);
                    fd
                }
            };
            match crate::sys::scm::send_with_fds(socket, &job, &all) {
                Ok(()) => return Ok(()),
                Err(err) if attempt == 0 && is_gone(&err) => *live = None,
                Err(err) => return Err(err),
            }
        }
        Err(io::Error::from_raw_os_error(libc::EPIPE))
    }

    /// Stops the zygote (it waits for its supervisors first) and reaps it,
    /// waiting at most `timeout`.
    pub fn shutdown(&self, timeout: std::time::Duration) {
        let live = crate::sync::lock(&self.live).take();
        if let Some(Live { socket, waiter }) = live {
            drop(socket);
            let deadline = std::time::Instant::now() + timeout;
            while !waiter.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            if waiter.is_finished() {
                let _ = waiter.join();
            }
        }
    }
}

/// The zygote exited: its end of the socket is closed.
fn is_gone(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED)
    )
}
