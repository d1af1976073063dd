//! Runs the launcher once for a built bwrap argv (the outer stage's fork,
//! wait and cleanup).
//!
//! Why fork and wait instead of exec'ing bubblewrap: the helper must remove
//! the mount points bwrap creates on the host once the run ends (also when
//! the command is killed), and must see bwrap's own error output to detect
//! a `/proc` mount failure from the real run. bwrap's stderr is therefore a
//! pipe read by the helper, while the command's stderr stays the caller's:
//! the original stderr travels to the inner stage as an extra fd that it
//! `dup2`s back before exec (`--restore-stderr-fd`). Only bubblewrap's and
//! the inner stage's own messages pass through the pipe; they are relayed
//! as they come (a `/proc` mount failure is held back for the retry). Both
//! launchers pass inherited fds on, as bubblewrap does; one that did not
//! would leave the command's stderr on the pipe (still relayed, not a
//! terminal) and managed routing without its listeners (the inner stage
//! then fails before the command runs).
//!
//! Trust: the pipe is written by bubblewrap before the command runs, but
//! bubblewrap's pid 1 keeps it open beside the command. The inner stage
//! therefore writes one byte to a dedicated "started" pipe right before it
//! execs the command (the fd is close-on-exec, so the command never holds
//! it). From that byte on, what comes through the stderr pipe is relayed
//! but never kept or held back, and [`RunOutcome::started`] tells the
//! caller that no rerun may happen: the command already ran once, and text
//! it wrote could only be a forgery.
//!
//! Signals: SIGHUP, SIGINT, SIGQUIT and SIGTERM are blocked in the helper
//! and forwarded to bwrap (which dies; `--die-with-parent` then kills the
//! sandbox); SIGCHLD is waited for with `sigwait`, so no handler runs.
//! The child gets default dispositions and an empty mask (bwrap started
//! with SIGCHLD ignored would hang).

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::sandbox::launcher::LauncherChoice;
use crate::sandbox::routed_netns::{self, NetnsFds};

/// Most bytes of launcher stderr kept.
pub const MAX_CAPTURED_STDERR: usize = 64 * 1024;

/// Errors running the launcher.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot open /dev/null for a mask: {0}")]
    DevNull(#[source] std::io::Error),
    #[error("cannot create a pipe: {0}")]
    Pipe(#[source] nix::Error),
    #[error("cannot duplicate stderr: {0}")]
    DupStderr(#[source] std::io::Error),
    #[error("cannot start bubblewrap {launcher}: {source}")]
    Spawn {
        launcher: String,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for bubblewrap failed: {0}")]
    Wait(#[source] nix::Error),
}

/// The fds a run hands to bwrap.
pub struct RunFds {
    /// One `/dev/null` fd per empty-file mask.
    pub masks: Vec<OwnedFd>,
    /// The caller's stderr, restored by the inner stage.
    pub stderr: OwnedFd,
    /// Read end of the "started" pipe (kept here, close-on-exec).
    pub started_read: OwnedFd,
    /// Write end of the "started" pipe, passed to the inner stage.
    pub started_write: OwnedFd,
    /// Managed routing: the inner stage's end of the socket its listeners
    /// leave the sandbox through (`sandbox::route_bridges`).
    pub routing_handoff: Option<OwnedFd>,
}

impl RunFds {
    /// Opens `masks` fds and duplicates stderr (all close-on-exec here;
    /// made inheritable in the child only).
    pub fn open(masks: usize) -> Result<RunFds, RunError> {
        let stderr = std::io::stderr().as_raw_fd().to_owned();
        // SAFETY: F_DUPFD_CLOEXEC duplicates a valid fd; no memory involved.
        let dup = unsafe { libc::fcntl(stderr, libc::F_DUPFD_CLOEXEC, 3) };
        if dup < 0 {
            return Err(RunError::DupStderr(std::io::Error::last_os_error()));
        }
        // SAFETY: `dup` is a fresh fd we own.
        let stderr = unsafe { OwnedFd::from_raw_fd(dup) };
        let (started_read, started_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(RunError::Pipe)?;
        RunFds {
            masks: Vec::new(),
            stderr,
            started_read,
            started_write,
            routing_handoff: None,
        }
        .with_masks(masks)
    }

    /// The same stderr with `masks` fresh mask fds.
    pub fn with_masks(self, masks: usize) -> Result<RunFds, RunError> {
        let mut v = Vec::with_capacity(masks);
        for _ in 0..masks {
            let f = File::open("/dev/null").map_err(RunError::DevNull)?;
            v.push(OwnedFd::from(f));
        }
        Ok(RunFds { masks: v, ..self })
    }

    pub fn mask_numbers(&self) -> Vec<i32> {
        self.masks.iter().map(|f| f.as_raw_fd()).collect()
    }
}

/// The outcome of one bwrap run.
#[derive(Debug)]
pub struct RunOutcome {
    /// Exit code (128+signal when bwrap died of a signal).
    pub code: i32,
    /// What came through bwrap's stderr (truncated), already relayed.
    pub stderr: Vec<u8>,
    /// A `/proc` mount failure message not relayed yet.
    pub held: Vec<u8>,
    /// The inner stage reached the command's exec: `stderr` and `held`
    /// then only hold what came before, and the run must not be retried.
    pub started: bool,
}

/// The signals a wrapper passes on to the process it waits for (SIGHUP,
/// SIGINT, SIGQUIT, SIGTERM), and SIGCHLD, which tells it to look.
pub(crate) fn forwarded() -> SigSet {
    let mut s = SigSet::empty();
    for sig in [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGCHLD,
    ] {
        s.add(sig);
    }
    s
}

/// Marks every fd ≥ 3 close-on-exec (so nothing of the caller leaks into
/// the sandbox except what a run passes on purpose).
pub fn cloexec_inherited_fds() {
    crate::sys::fds::cloexec_from_3();
}

/// Runs `launcher` with `argv` (after `bwrap`), passing `fds`, inside
/// `netns` when given (a launcher that cannot join it never starts).
pub fn run(
    launcher: &LauncherChoice,
    argv: &[OsString],
    fds: &RunFds,
    netns: Option<NetnsFds>,
) -> Result<RunOutcome, RunError> {
    let (read_end, write_end) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(RunError::Pipe)?;
    let mut inherit: Vec<RawFd> = fds.mask_numbers();
    inherit.push(fds.stderr.as_raw_fd());
    inherit.push(fds.started_write.as_raw_fd());
    inherit.extend(fds.routing_handoff.as_ref().map(AsRawFd::as_raw_fd));

    let set = forwarded();
    let old = set
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
        .map_err(RunError::Wait)?;

    let mut cmd = launcher.command();
    cmd.args(argv);
    cmd.stderr(Stdio::from(write_end));
    // SAFETY: the closure only calls async-signal-safe functions (fcntl,
    // signal, setns) on values prepared before the fork; it allocates
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(netns) = netns {
                routed_netns::enter(netns)?;
            }
            for fd in &inherit {
                let flags = libc::fcntl(*fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(*fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for sig in [
                libc::SIGCHLD,
                libc::SIGHUP,
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGTERM,
                libc::SIGPIPE,
            ] {
                libc::signal(sig, libc::SIG_DFL);
            }
            // The forwarded signals are blocked in the helper; the launcher
            // must start with an empty mask.
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            if libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    drop(cmd); // closes our copy of the pipe's write end
    let child = match spawned {
        Ok(c) => c,
        Err(source) => {
            let _ = old.thread_set_mask();
            return Err(RunError::Spawn {
                launcher: launcher.path.display().to_string(),
                source,
            });
        }
    };
    let pid = Pid::from_raw(child.id() as i32);

    // One loop, no thread: poll bwrap's stderr pipe and a signalfd. When
    // bwrap has exited, its messages (and the inner stage's) are already in
    // the pipe: drain it without waiting for EOF, which only comes once the
    // sandbox's pid 1 is torn down (tens of ms for a network namespace).
    let result = wait_and_capture(pid, read_end, &fds.started_read, &set);
    let _ = old.thread_set_mask();
    result
}

/// What the stderr pipe brought so far.
#[derive(Default)]
struct Capture {
    kept: Vec<u8>,
    held: Vec<u8>,
    /// The started byte arrived: nothing more is kept or held.
    started: bool,
}

/// Checks the "started" pipe without blocking.
fn check_started(fd: &OwnedFd, capture: &mut Capture) {
    if capture.started {
        return;
    }
    let mut byte = [0u8; 1];
    if matches!(nix::unistd::read(fd, &mut byte), Ok(n) if n > 0) {
        capture.started = true;
    }
}

/// Reads one chunk and relays it to stderr at once. Before the command
/// started, keeps a copy for diagnosis and holds back a `/proc` mount
/// failure until the caller knows whether it retries.
fn read_some(fd: &OwnedFd, capture: &mut Capture) -> bool {
    use std::io::Write;
    let mut buf = [0u8; 4096];
    match nix::unistd::read(fd, &mut buf) {
        Ok(0) => false,
        Ok(n) => {
            let chunk = &buf[..n];
            if capture.started {
                let _ = std::io::stderr().write_all(chunk);
                return true;
            }
            let Capture { kept, held, .. } = capture;
            let room = MAX_CAPTURED_STDERR.saturating_sub(kept.len());
            kept.extend_from_slice(&chunk[..n.min(room)]);
            if is_proc_mount_failure(&String::from_utf8_lossy(chunk)) {
                let room = MAX_CAPTURED_STDERR.saturating_sub(held.len());
                held.extend_from_slice(&chunk[..n.min(room)]);
            } else {
                let _ = std::io::stderr().write_all(chunk);
            }
            true
        }
        Err(nix::Error::EINTR) => true,
        Err(_) => false,
    }
}

fn wait_and_capture(
    pid: Pid,
    pipe: OwnedFd,
    started: &OwnedFd,
    set: &SigSet,
) -> Result<RunOutcome, RunError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use std::os::fd::AsFd;

    let _ = nix::fcntl::fcntl(
        &pipe,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let _ = nix::fcntl::fcntl(
        started,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let sfd = SignalFd::with_flags(set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(RunError::Wait)?;
    let mut capture = Capture::default();
    let mut pipe_open = true;
    loop {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, c)) => {
                return Ok(finish(c, &pipe, started, pipe_open, capture))
            }
            Ok(WaitStatus::Signaled(_, s, _)) => {
                return Ok(finish(128 + s as i32, &pipe, started, pipe_open, capture))
            }
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(RunError::Wait(e)),
        }
        let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN)];
        if pipe_open {
            fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLIN));
            if !capture.started {
                fds.push(PollFd::new(started.as_fd(), PollFlags::POLLIN));
            }
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(RunError::Wait(e)),
        }
        let pipe_ready = fds
            .get(1)
            .and_then(|f| f.revents())
            .is_some_and(|r| !r.is_empty());
        // The started byte precedes anything the command writes: look at
        // it first.
        check_started(started, &mut capture);
        if pipe_ready {
            pipe_open = read_some(&pipe, &mut capture);
        }
        while let Ok(Some(info)) = sfd.read_signal() {
            let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else {
                continue;
            };
            if sig != Signal::SIGCHLD {
                let _ = nix::sys::signal::kill(pid, sig);
            }
        }
    }
}

/// Drains what is already in the pipe (non-blocking) and builds the outcome.
fn finish(
    code: i32,
    pipe: &OwnedFd,
    started: &OwnedFd,
    mut open: bool,
    mut capture: Capture,
) -> RunOutcome {
    check_started(started, &mut capture);
    while open {
        open = read_some(pipe, &mut capture);
    }
    RunOutcome {
        code,
        stderr: capture.kept,
        held: capture.held,
        started: capture.started,
    }
}

/// Does bwrap's stderr show a failed `/proc` mount (old and 0.12 wording)?
pub fn is_proc_mount_failure(stderr: &str) -> bool {
    stderr.lines().any(|l| {
        l.contains("Can't mount proc")
            && (l.contains("/newroot/proc") || l.contains("on /proc"))
            && (l.contains("Invalid argument")
                || l.contains("Operation not permitted")
                || l.contains("Permission denied"))
    })
}

/// Does bwrap's stderr show that user namespaces are unusable here?
pub fn is_userns_failure(stderr: &str) -> bool {
    [
        "No permissions to create a new namespace",
        "setting up uid map: Permission denied",
        "loopback: Failed RTM_NEWADDR",
        "loopback: Failed RTM_NEWLINK",
        "Creating new namespace failed",
        "unshare failed",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_proc_mount_failures_in_both_wordings() {
        assert!(is_proc_mount_failure(
            "bwrap: Can't mount proc on /newroot/proc: Invalid argument"
        ));
        assert!(is_proc_mount_failure(
            "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"
        ));
        assert!(is_proc_mount_failure(
            "bwrap: Can't mount proc on /proc: Permission denied"
        ));
        assert!(!is_proc_mount_failure(
            "bwrap: Can't bind mount /x on /newroot/x: Invalid argument"
        ));
        assert!(!is_proc_mount_failure("bwrap: Unknown option --argv0"));
    }

    #[test]
    fn nothing_after_the_started_byte_is_kept_or_held() {
        let (err_r, err_w) = nix::unistd::pipe().unwrap();
        let (st_r, st_w) = nix::unistd::pipe().unwrap();
        nix::fcntl::fcntl(
            &st_r,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )
        .unwrap();
        let mut capture = Capture::default();
        nix::unistd::write(&err_w, b"bwrap: early\n").unwrap();
        check_started(&st_r, &mut capture);
        assert!(read_some(&err_r, &mut capture));
        assert!(!capture.started);
        nix::unistd::write(&st_w, b"1").unwrap();
        nix::unistd::write(
            &err_w,
            b"bwrap: Can't mount proc on /newroot/proc: Invalid argument\n",
        )
        .unwrap();
        check_started(&st_r, &mut capture);
        assert!(read_some(&err_r, &mut capture));
        assert!(capture.started);
        assert_eq!(capture.kept, b"bwrap: early\n");
        assert!(capture.held.is_empty());
    }

    #[test]
    fn detects_user_namespace_failures() {
        assert!(is_userns_failure(
            "bwrap: setting up uid map: Permission denied"
        ));
        assert!(is_userns_failure("bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces."));
        assert!(!is_userns_failure(
            "bwrap: execvp x: No such file or directory"
        ));
    }
}
