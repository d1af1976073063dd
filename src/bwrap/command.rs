//! The command's own process, last steps: working directory, signals, the
//! fds only bwrap needed, seccomp, and `execvp` — in bubblewrap's order,
//! seccomp the very last thing before the exec.

use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use super::cli::{CliError, Config};
use super::{seccomp_fd, BwrapError};
use crate::sys::fds;

/// What the exec needs besides the command line.
pub struct Command<'a> {
    pub config: &'a Config,
    /// `--seccomp`/`--add-seccomp-fd` programs, in order.
    pub programs: &'a [&'a seccomp_fd::Program],
    /// `--json-status-fd`: one byte before the exec, another if it fails.
    pub setup_finished: Option<OwnedFd>,
}

/// bubblewrap's cwd rule: `--chdir`, else the caller's cwd if it exists in
/// the sandbox, else `$HOME`, else `/`; `PWD` says where.
pub fn change_dir(chdir: Option<&OsString>, old_cwd: Option<OsString>) -> Result<(), BwrapError> {
    let new_cwd: OsString = if let Some(dir) = chdir {
        nix::unistd::chdir(dir.as_os_str()).map_err(|errno| BwrapError::Chdir {
            path: dir.clone(),
            source: errno.into(),
        })?;
        dir.clone()
    } else if let Some(dir) = old_cwd.filter(|dir| nix::unistd::chdir(dir.as_os_str()).is_ok()) {
        dir
    } else {
        match std::env::var_os("HOME") {
            Some(home) if nix::unistd::chdir(home.as_os_str()).is_ok() => home,
            // The pivot left the working directory at the new root.
            _ => OsString::from("/"),
        }
    };
    let (Ok(key), Ok(value)) = (CString::new("PWD"), CString::new(new_cwd.as_bytes())) else {
        return Err(CliError::Setenv.into());
    };
    // SAFETY: both strings are NUL-terminated; the process is single-threaded.
    if unsafe { libc::setenv(key.as_ptr(), value.as_ptr(), 1) } != 0 {
        return Err(CliError::Setenv.into());
    }
    Ok(())
}

/// Marks progress on the `--json-status-fd` pipe; the launcher may be gone,
/// in which case nobody needs the mark (bubblewrap ignores this too).
fn mark(setup_finished: &Option<OwnedFd>) {
    if let Some(fd) = setup_finished {
        let _ = fds::write_all(fd.as_raw_fd(), &[0]);
    }
}

/// The last steps and the exec. Returns only the exec's failure.
pub fn exec(command: Command<'_>) -> Result<Infallible, BwrapError> {
    let config = command.config;
    // --sync-fd belongs to the reaper; with --as-pid-1 there is none, and
    // bubblewrap leaves it to the command.
    if let (Some(fd), false) = (config.sync_fd, config.as_pid_1) {
        fds::close(fd);
    }
    // The Rust runtime ignores SIGPIPE in this process; the command gets the
    // default disposition, as from a C launcher started normally.
    // SAFETY: resetting a disposition to SIG_DFL installs no handler.
    unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    }
    .map_err(|errno| BwrapError::ResetSignal {
        signal: "SIGPIPE",
        source: errno.into(),
    })?;
    // bubblewrap blocks SIGCHLD while setting up and unblocks it here.
    let mut sigchld = nix::sys::signal::SigSet::empty();
    sigchld.add(nix::sys::signal::SIGCHLD);
    sigchld
        .thread_unblock()
        .map_err(|errno| BwrapError::SignalMask(errno.into()))?;

    let program = config.command.first().cloned().unwrap_or_default();
    // Words from argv or --args data hold no NUL; refuse rather than cut one.
    let to_c = |arg: &OsString| {
        CString::new(arg.as_bytes()).map_err(|_| BwrapError::Exec {
            command: program.clone(),
            source: io::Error::from_raw_os_error(libc::EINVAL),
        })
    };
    let mut argv: Vec<CString> = Vec::with_capacity(config.command.len());
    for (index, arg) in config.command.iter().enumerate() {
        let arg = match (&config.argv0, index) {
            (Some(argv0), 0) => argv0,
            _ => arg,
        };
        argv.push(to_c(arg)?);
    }
    let file = to_c(&program)?;
    let mut pointers: Vec<*const libc::c_char> = argv.iter().map(|arg| arg.as_ptr()).collect();
    pointers.push(std::ptr::null());

    for program in command.programs {
        seccomp_fd::install(program)?;
    }
    mark(&command.setup_finished);
    // SAFETY: file and every argv element are NUL-terminated strings that
    // outlive the call; the pointer array is NULL-terminated.
    unsafe { libc::execvp(file.as_ptr(), pointers.as_ptr()) };
    let source = io::Error::last_os_error();
    mark(&command.setup_finished);
    Err(BwrapError::Exec {
        command: program,
        source,
    })
}
