//! The processes around the command: the reaper that runs as pid 1 of a new
//! pid namespace, and the outer bwrap process that reports and passes on the
//! command's exit status.
//!
//! The reaper writes the command's status to a pipe the moment the command
//! ends, so the outer process exits then (as bubblewrap does) even while
//! daemons the command left behind are still being reaped.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::status;
use crate::sys::{errno_text, fds};

/// bubblewrap's exit status for a wait status: the exit code, or 128 + the
/// signal that killed it.
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
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
pub fn run_reaper(command: libc::pid_t, status_pipe: OwnedFd) -> i32 {
    let mut code = 1;
    let mut status_pipe = Some(status_pipe);
    loop {
        match wait_any(-1) {
            Ok((pid, status)) if pid == command => {
                code = exit_code(status);
                if let Some(pipe) = status_pipe.take() {
                    let _ = fds::write_all(pipe.as_raw_fd(), &code.to_ne_bytes());
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    code
}

/// The outer process: waits for the command's status (from the reaper, or
/// the direct child's own exit), writes the JSON status line, returns it.
pub fn monitor(child: libc::pid_t, status_pipe: OwnedFd, json_status_fd: Option<RawFd>) -> i32 {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reads into the unfilled tail of a live 4-byte buffer.
        let rc = unsafe {
            libc::read(
                status_pipe.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
            )
        };
        if rc > 0 {
            got += usize::try_from(rc).unwrap_or(0);
        } else if rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    let code = if got == buf.len() {
        i32::from_ne_bytes(buf)
    } else {
        match wait_any(child) {
            Ok((_, status)) => exit_code(status),
            Err(err) => {
                eprintln!("bwrap: waitpid: {}", errno_text(&err));
                1
            }
        }
    };
    if let Some(fd) = json_status_fd {
        let _ = fds::write_all(fd, status::status_exit_json(code).as_bytes());
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_become_128_plus_the_signal() {
        assert_eq!(exit_code(9), 137);
        assert_eq!(exit_code(7 << 8), 7);
    }
}
