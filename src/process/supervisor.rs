//! The per-process supervisor. The server forks a child (std's `pre_exec`
//! runs in it); that child becomes a tiny supervisor that never execs: it dies
//! with the server, becomes a child subreaper, forks the real command (which
//! returns from `pre_exec` and execs), closes every descriptor but its status
//! pipe, reports the command's pid and then its wait status on that pipe, and
//! reaps adopted orphans until none is left. Every descendant of the command,
//! even one that called setsid or double-forked, therefore stays in the
//! supervisor's subtree, which `kill::kill_tree` can find and kill.
//!
//! Everything here runs between fork and exec in a multi-threaded program:
//! only async-signal-safe system calls, no allocation, no locks, no logging.

use std::io;
use std::os::fd::RawFd;

/// Bytes of one record on the status pipe (a native-endian `i32`).
pub const RECORD_LEN: usize = 4;

/// What the forked child needs to know, captured before the fork.
#[derive(Debug, Clone, Copy)]
pub struct SupervisorConfig {
    /// The write end of the status pipe.
    pub status_fd: RawFd,
    /// The server's pid, to detect a server that died before `PR_SET_PDEATHSIG`.
    pub server_pid: libc::pid_t,
    /// Make the command's stdin (a PTY slave) its controlling terminal.
    pub controlling_tty: bool,
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Runs in `pre_exec`. Returns `Ok` in the command process (which then
/// execs); never returns in the supervisor.
///
/// # Safety
/// Must only be called in a freshly forked child, as a `pre_exec` hook.
pub unsafe fn enter(config: SupervisorConfig) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != config.server_pid {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: setsid has no preconditions; a new session detaches the
    // supervisor from the server's terminal and process group.
    check(unsafe { libc::setsid() })?;
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })?;
    // SAFETY: fork in a single-threaded child; both sides only make
    // async-signal-safe calls afterwards.
    let pid = check(unsafe { libc::fork() })?;
    if pid == 0 {
        return prepare_command(config);
    }
    // SAFETY: called once, in the supervisor, with the command's pid.
    unsafe { supervise(pid, config.status_fd) }
}

/// The command's side: own session and process group (pgid = pid), the PTY
/// as controlling terminal, death with the supervisor, and no inherited
/// descriptor beyond stdio across exec.
fn prepare_command(config: SupervisorConfig) -> io::Result<()> {
    // SAFETY: no preconditions; the command becomes a session and group leader.
    check(unsafe { libc::setsid() })?;
    if config.controlling_tty {
        // SAFETY: TIOCSCTTY on fd 0 (the PTY slave) with an integer argument.
        check(unsafe { libc::ioctl(0, libc::TIOCSCTTY as _, 0) })?;
    }
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
    mark_cloexec_from(3);
    Ok(())
}

/// Marks every descriptor >= `first` close-on-exec (std's own exec-error pipe
/// must stay open until exec, so they are not closed here).
fn mark_cloexec_from(first: u32) {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only changes descriptor flags.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if ret == 0 {
        return;
    }
    for fd in first..fd_limit() {
        // SAFETY: F_SETFD on a possibly closed descriptor fails harmlessly.
        unsafe { libc::fcntl(fd as RawFd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// Closes every descriptor except `keep`.
fn close_all_but(keep: RawFd) {
    let keep = keep.max(0) as u32;
    for (lo, hi) in [(0, keep.checked_sub(1)), (keep + 1, Some(u32::MAX))] {
        let Some(hi) = hi else { continue };
        // SAFETY: closing descriptors this process owns; nothing else uses them.
        let ret = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) };
        if ret != 0 {
            for fd in lo..hi.min(fd_limit()) {
                // SAFETY: as above; EBADF on unused numbers is harmless.
                unsafe { libc::close(fd as RawFd) };
            }
        }
    }
}

fn fd_limit() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    limit.rlim_cur.min(65_536) as u32
}

fn write_record(fd: RawFd, value: i32) {
    let bytes = value.to_ne_bytes();
    loop {
        // SAFETY: writes 4 bytes from a live stack buffer; a pipe write of
        // less than PIPE_BUF bytes is atomic.
        let ret = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if ret >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// The supervisor's life: report, reap, exit.
///
/// # Safety
/// Only in the forked supervisor.
unsafe fn supervise(command: libc::pid_t, status_fd: RawFd) -> ! {
    // SAFETY: ignoring SIGPIPE so a vanished reader cannot kill the supervisor
    // before it reaped the subtree.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    write_record(status_fd, command);
    close_all_but(status_fd);
    let mut reported = false;
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes the status into a live stack variable.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == command && !reported {
            write_record(status_fd, status);
            // SAFETY: closing our own descriptor; EOF tells the server the
            // status is complete.
            unsafe { libc::close(status_fd) };
            reported = true;
        } else if pid < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    // SAFETY: _exit is async-signal-safe and skips atexit handlers.
    unsafe { libc::_exit(0) }
}

/// `(exit code, signal number)` from a raw wait status: 128+signal when killed.
pub fn decode_wait_status(status: i32) -> (i32, Option<i32>) {
    if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status), None)
    } else if libc::WIFSIGNALED(status) {
        let signo = libc::WTERMSIG(status);
        (128 + signo, Some(signo))
    } else {
        (-1, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_decode_to_exit_codes() {
        assert_eq!(decode_wait_status(7 << 8), (7, None));
        assert_eq!(decode_wait_status(9), (137, Some(9)));
        assert_eq!(decode_wait_status(2), (130, Some(2)));
    }
}
