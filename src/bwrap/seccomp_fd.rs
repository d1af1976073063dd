//! `--seccomp FD` / `--add-seccomp-fd FD`: raw classic-BPF programs read from
//! fds and installed, in order, as the last thing before `execve` (and in
//! the reaper, as bubblewrap does).
//!
//! The programs are the caller's; this module only checks they are whole
//! `sock_filter` arrays and hands them to the kernel. no_new_privs is set
//! first thing in bwrap, so installing needs no privilege.

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
    #[error(
        "Unable to set up system call filtering as requested: prctl(PR_SET_SECCOMP) reported \
         EINVAL. (Hint: this requires a kernel configured with CONFIG_SECCOMP and \
         CONFIG_SECCOMP_FILTER.)"
    )]
    Refused,
    #[error("prctl(PR_SET_SECCOMP): {}", errno_text(.0))]
    Install(#[source] io::Error),
}

/// One BPF program as the kernel wants it.
#[derive(Debug)]
pub struct Program(Vec<libc::sock_filter>);

/// Reads a program from `fd` (to EOF) and closes the fd.
pub fn read(fd: RawFd) -> Result<Program, SeccompError> {
    let data = fds::read_all(fd).map_err(SeccompError::Read)?;
    fds::close(fd);
    parse(&data)
}

fn parse(data: &[u8]) -> Result<Program, SeccompError> {
    if !data.len().is_multiple_of(8) {
        return Err(SeccompError::BadLength);
    }
    let filters = data
        .chunks_exact(8)
        .filter_map(|raw| <[u8; 8]>::try_from(raw).ok())
        .map(|[c0, c1, jt, jf, k0, k1, k2, k3]| libc::sock_filter {
            code: u16::from_ne_bytes([c0, c1]),
            jt,
            jf,
            k: u32::from_ne_bytes([k0, k1, k2, k3]),
        })
        .collect();
    Ok(Program(filters))
}

/// Installs the program on this thread (and what it execs). An empty or
/// oversized program is refused by the kernel with EINVAL, reported in
/// bubblewrap's words.
pub fn install(program: &Program) -> Result<(), SeccompError> {
    let len = u16::try_from(program.0.len()).map_err(|_| SeccompError::Refused)?;
    let prog = libc::sock_fprog {
        len,
        filter: program.0.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `program.0`, which lives across the call; the
    // kernel copies the filter and keeps no pointer to it.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::c_ulong::from(libc::SECCOMP_MODE_FILTER),
            &prog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINVAL) {
            return Err(SeccompError::Refused);
        }
        return Err(SeccompError::Install(err));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_must_be_whole_instructions() {
        assert!(matches!(parse(&[0; 7]), Err(SeccompError::BadLength)));
        assert_eq!(parse(&[]).map(|p| p.0.len()).ok(), Some(0));
        assert_eq!(parse(&[0; 16]).map(|p| p.0.len()).ok(), Some(2));
    }
}
