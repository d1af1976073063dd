//! The inner stage (`--apply-seccomp-then-exec`), run by bubblewrap inside
//! the new namespaces: restore the command's stderr, confine the process
//! (fresh session keyring, every capability dropped, no_new_privs), install
//! the seccomp filter, exec the command. Also the final exec shared by every
//! path of the helper.
//!
//! Refusal outside the sandbox. The stage runs only when
//! the process sits where bubblewrap puts it: pid 2 of a fresh pid namespace
//! whose pid 1 is its parent (a pid number a process of the initial
//! namespace never has: pid 2 is `kthreadd` there), and, when `/proc` shows
//! it, in a user namespace other than the initial one (whose uid map is the
//! identity over the whole range, as in containers without user
//! namespaces). A caller passing the flag to the outer helper is therefore
//! refused; one who builds such namespaces himself could have run the
//! command unsandboxed anyway, so the check closes the bypass without
//! claiming more. No secret is needed, and none could be kept from a caller
//! of equal privilege.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::sandbox::seccomp::SeccompMode;

/// Errors of the inner stage (each is one stderr line, exit 1).
#[derive(Debug, thiserror::Error)]
pub enum InnerError {
    #[error("--apply-seccomp-then-exec is internal to the sandbox and refused here: {0}")]
    NotInSandbox(String),
    #[error("cannot restore stderr from fd {fd}: {source}")]
    Stderr {
        fd: i32,
        #[source]
        source: nix::Error,
    },
    #[error("error applying Linux sandbox restrictions: {0}")]
    Confine(#[from] crate::sys::confine::ConfineError),
    #[error("error applying Linux sandbox restrictions: {0}")]
    Seccomp(#[from] crate::sandbox::seccomp::SeccompError),
    #[error("cannot execute {program}: {source}")]
    Exec {
        program: String,
        #[source]
        source: nix::Error,
    },
    #[error("command contains a NUL byte")]
    Nul,
}

/// Checks that this process is where bubblewrap starts the inner stage.
pub fn check_inside_sandbox() -> Result<(), InnerError> {
    let pid = nix::unistd::getpid().as_raw();
    let ppid = nix::unistd::getppid().as_raw();
    if pid != 2 || ppid != 1 {
        return Err(InnerError::NotInSandbox(format!(
            "not the first child of a fresh pid namespace (pid {pid}, parent {ppid})"
        )));
    }
    if let Ok(map) = std::fs::read_to_string("/proc/self/uid_map") {
        let initial = map.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f == ["0", "0", "4294967295"]
        });
        if initial {
            return Err(InnerError::NotInSandbox(
                "running in the initial user namespace".to_owned(),
            ));
        }
    }
    Ok(())
}

/// Makes `fd` the process's stderr again and closes it. A launcher that
/// passes no inherited fd (EBADF) leaves stderr on the helper's pipe, which
/// the helper relays: the output still arrives, only not on a terminal.
pub fn restore_stderr(fd: i32) -> Result<(), InnerError> {
    // SAFETY: dup2/close on plain fd numbers; no memory is involved.
    let rc = unsafe { libc::dup2(fd, libc::STDERR_FILENO) };
    if rc < 0 {
        let err = nix::Error::last();
        if err == nix::Error::EBADF {
            return Ok(());
        }
        return Err(InnerError::Stderr { fd, source: err });
    }
    // SAFETY: as above; `fd` is not used afterwards.
    unsafe { libc::close(fd) };
    Ok(())
}

/// Tells the helper that the command is about to run: one byte on `fd`,
/// which is made close-on-exec first so the command never holds it. A
/// missing fd (a launcher that passes none) only loses the signal, which
/// makes the helper treat a failure as a setup failure — the command still
/// cannot forge one, because the helper's stderr pipe is out of its reach.
pub fn signal_started(fd: i32) {
    // SAFETY: fcntl and write on a plain fd number with a one-byte buffer
    // that lives for the call; a stale number fails with EBADF.
    unsafe {
        if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0 {
            let _ = libc::write(fd, b"1".as_ptr().cast(), 1);
        }
    }
}

/// Confines this process and installs seccomp for `mode`.
pub fn confine(mode: SeccompMode) -> Result<(), InnerError> {
    let program = crate::sandbox::seccomp::SeccompProgram::build(mode)?;
    crate::sys::confine::confine_process()?;
    program.install()?;
    Ok(())
}

/// Replaces this process with `command` (PATH lookup like execvp), whose
/// `argv[0]` is `arg0` when given (the program is still `command[0]`).
pub fn exec(command: &[OsString], arg0: Option<&OsStr>) -> InnerError {
    let Some(program) = command.first() else {
        return InnerError::Nul;
    };
    let to_c = |text: &OsStr| CString::new(text.as_bytes()).map_err(|_| InnerError::Nul);
    let file = match to_c(program) {
        Ok(file) => file,
        Err(err) => return err,
    };
    let shown = std::iter::once(arg0.unwrap_or(program))
        .chain(command.iter().skip(1).map(OsString::as_os_str));
    let args = match shown
        .map(to_c)
        .collect::<Result<Vec<CString>, InnerError>>()
    {
        Ok(args) => args,
        Err(err) => return err,
    };
    match nix::unistd::execvp(&file, &args) {
        Ok(never) => match never {},
        Err(source) => InnerError::Exec {
            program: program.to_string_lossy().into_owned(),
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_process_is_not_inside_a_sandbox() {
        let err = check_inside_sandbox().unwrap_err();
        assert!(err.to_string().contains("refused"), "{err}");
    }
}
