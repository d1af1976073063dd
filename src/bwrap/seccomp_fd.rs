//! `--seccomp FD` / `--add-seccomp-fd FD`: raw classic-BPF programs read from
//! fds and installed, in order, as the last thing before `execve`.
//!
//! The programs are the caller's; this module only checks they are whole
//! `sock_filter` arrays and hands them to the kernel. no_new_privs is set
//! before (see `bwrap::caps`), so installing needs no privilege.

use std::io;
use std::os::fd::RawFd;

use crate::sys::{errno_text, fds};

/// A seccomp step that failed; `Display` is bubblewrap's wording.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("Can't read seccomp data: {}", errno_text(.0))]
    Read(#[source] io::Error),
    #[error("Invalid seccomp data, must be multiple of 8")]
    BadLength,
    #[error("Invalid seccomp data, must not be empty")]
    Empty,
    #[error("Program too large")]
    TooLarge,
    #[error("prctl(PR_SET_SECCOMP): {}", errno_text(.0))]
    Install(#[source] io::Error),
}

/// One BPF program as the kernel wants it.
pub struct Program(Vec<libc::sock_filter>);

/// Reads a program from `fd` (to EOF) and closes the fd.
pub fn read(fd: RawFd) -> Result<Program, SeccompError> {
    let data = fds::read_all(fd).map_err(SeccompError::Read);
    fds::close(fd);
    parse(&data?)
}

fn parse(data: &[u8]) -> Result<Program, SeccompError> {
    if data.is_empty() {
        return Err(SeccompError::Empty);
    }
    if data.len() % 8 != 0 {
        return Err(SeccompError::BadLength);
    }
    if data.len() / 8 > usize::from(u16::MAX) {
        return Err(SeccompError::TooLarge);
    }
    let filters = data
        .chunks_exact(8)
        .map(|raw| libc::sock_filter {
            code: u16::from_ne_bytes([raw[0], raw[1]]),
            jt: raw[2],
            jf: raw[3],
            k: u32::from_ne_bytes([raw[4], raw[5], raw[6], raw[7]]),
        })
        .collect();
    Ok(Program(filters))
}

/// Installs the program on this thread (and what it execs).
pub fn install(program: &Program) -> Result<(), SeccompError> {
    let prog = libc::sock_fprog {
        len: u16::try_from(program.0.len()).map_err(|_| SeccompError::TooLarge)?,
        filter: program.0.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `program.0`, which lives across the call; the
    // kernel copies the filter and keeps no pointer to it.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(SeccompError::Install(io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_must_be_whole_instructions() {
        assert!(matches!(parse(&[0; 7]), Err(SeccompError::BadLength)));
        assert!(matches!(parse(&[]), Err(SeccompError::Empty)));
        assert_eq!(parse(&[0; 16]).map(|p| p.0.len()).ok(), Some(2));
    }
}
