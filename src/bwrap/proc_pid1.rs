//! The processes around the command: the reaper that runs as pid 1 of a new
//! pid namespace, and the outer bwrap process that reports and passes on the
//! command's exit status.
//!
//! The reaper writes the command's status to a pipe the moment the command
//! ends, so the outer process exits then (as bubblewrap does) even while
//! daemons the command left behind are still being reaped.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::log::Log;
use super::status;
use crate::sys::{errno_text, fds};

/// bubblewrap's exit status for a wait status: the exit code, 128 + the
/// signal that killed it, 255 otherwise.
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        255
    }
}

fn wait_any(pid: libc::pid_t) -> io::Result<(libc::pid_t, libc::c_int)> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer for the duration of the call.
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        if got >= 0 {
            return Ok((got, status));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// The reaper: waits for every child; reports the command's status as soon
/// as it ends, and exits with it once nothing is left to reap.
pub fn run_reaper(command: libc::pid_t, status_pipe: OwnedFd, log: Log) -> i32 {
    run_reaper_reporting(command, status_pipe, log, |_| {})
}

/// [`run_reaper`], also handing the command's exit status to `also` the
/// moment it is known.
pub fn run_reaper_reporting(
    command: libc::pid_t,
    status_pipe: OwnedFd,
    log: Log,
    mut also: impl FnMut(i32),
) -> i32 {
    let mut code = 1;
    let mut status_pipe = Some(status_pipe);
    loop {
        match wait_any(-1) {
            Ok((pid, status)) if pid == command => {
                code = exit_code(status);
                if let Some(pipe) = status_pipe.take() {
                    also(code);
                    // The outer process may be gone already: nothing to tell then.
                    let _ = fds::write_all(pipe.as_raw_fd(), &code.to_ne_bytes());
                }
            }
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::ECHILD) => break,
            Err(err) => {
                log.error(&format_args!("init wait(): {}", errno_text(&err)));
                return 1;
            }
        }
    }
    code
}

/// The outer process's ends of the pipes from the sandbox.
pub struct Monitored {
    /// The sandbox's first process.
    pub child: libc::pid_t,
    /// The command's exit status, from the reaper (EOF without one).
    pub status: OwnedFd,
    /// With `--json-status-fd`: one byte once the command is about to be
    /// exec'd, a second one if that exec failed.
    pub setup_finished: Option<OwnedFd>,
}

/// The outer process: waits for the command's status (from the reaper, or
/// the direct child's own exit), writes the JSON exit line when the command
/// did run (as bubblewrap does), returns the status.
pub fn monitor(pipes: Monitored, json_status_fd: Option<RawFd>, log: Log) -> i32 {
    let mut buf = [0u8; 4];
    let got = read_full(pipes.status.as_raw_fd(), &mut buf);
    let code = if got == buf.len() {
        i32::from_ne_bytes(buf)
    } else {
        match wait_any(pipes.child) {
            Ok((_, status)) => exit_code(status),
            Err(err) => {
                log.error(&format_args!("waitpid: {}", errno_text(&err)));
                1
            }
        }
    };
    if let (Some(fd), Some(finished)) = (json_status_fd, pipes.setup_finished) {
        let mut marks = [0u8; 2];
        if read_once(finished.as_raw_fd(), &mut marks) == 1 {
            // Like bubblewrap, a failed write of this last line is not an error.
            let _ = fds::write_all(fd, status::status_exit_json(code).as_bytes());
        }
        fds::close(fd);
    }
    code
}

/// One `read` (retried on EINTR); 0 on EOF or error.
fn read_once(fd: RawFd, buf: &mut [u8]) -> usize {
    loop {
        // SAFETY: reads at most `buf.len()` bytes into the live buffer.
        let rc = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if rc >= 0 {
            return usize::try_from(rc).unwrap_or(0);
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 0;
        }
    }
}

/// Reads until `buf` is full or EOF; returns how much was read.
fn read_full(fd: RawFd, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while let Some(rest) = buf.get_mut(got..).filter(|rest| !rest.is_empty()) {
        match read_once(fd, rest) {
            0 => break,
            n => got += n,
        }
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_become_128_plus_the_signal() {
        assert_eq!(exit_code(9), 137);
        assert_eq!(exit_code(7 << 8), 7);
        // Stopped: neither exited nor signalled.
        assert_eq!(exit_code(0x137f), 255);
    }
}
