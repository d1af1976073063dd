//! The built-in bubblewrap: a Rust implementation of the bwrap command line,
//! with no C, no setuid, and unprivileged user namespaces only.
//!
//! Two phases, as in bubblewrap: [`cli`] parses argv into a [`cli::Config`]
//! holding a list of `ops::SetupOp` with every cross-option check done;
//! then `launch` creates the namespaces and `child` walks the list. The
//! order is the security argument:
//! 1. no_new_privs first; with `--die-with-parent`, the launcher arms its
//!    own death signal before the sandbox exists (bubblewrap waits until
//!    after the clone), and so does the sandbox's first process, first thing;
//! 2. the child maps its own uid/gid (setgroups denied) in its new user
//!    namespace — also for a root caller, so nothing reaches the host;
//! 3. bind sources are resolved on the host, the mount tree is built on a
//!    tmpfs and pivoted into, the host tree detached (`setup`);
//! 4. the command's own user namespace is nested in the first one (for
//!    `--disable-userns`, the last one allowed, verified), so it never holds
//!    a capability over the namespace that owns its mounts; its capability
//!    sets are cut to bubblewrap's (`caps`);
//! 5. a reaper stays as pid 1 (`proc_pid1`) unless `--as-pid-1`, holding
//!    the new session if `--new-session`;
//! 6. in the command's process (`command`): seccomp (`seccomp_fd`) as
//!    the very last step, then execvp.
//!
//! The mode runs before any runtime is started, so the process is
//! single-threaded and fork/clone followed by ordinary Rust code is sound.

pub(crate) mod caps;
mod child;
pub mod cli;
mod command;
pub mod log;
pub(crate) mod namespaces;
pub(crate) mod numbers;
pub(crate) mod ops;
pub(crate) mod prepared;
pub(crate) mod proc_pid1;
pub(crate) mod seccomp_fd;
pub(crate) mod setup;
pub(crate) mod status;

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use cli::{CliError, Config, Parsed};
use log::Log;
use namespaces::Forked;
use ops::EnvOp;

use crate::sys::{confine, errno_text, fds};

/// What bubblewrap prints for `--version`; the suffix says which one it is.
pub const VERSION_LINE: &str = concat!(
    "bubblewrap 0.11.0 (built into codexbox ",
    env!("CARGO_PKG_VERSION"),
    env!("CODEXBOX_BUILD_SUFFIX"),
    ")"
);

/// A launch step that failed after parsing; `Display` is the text after `bwrap: `.
#[derive(Debug, thiserror::Error)]
pub enum BwrapError {
    #[error(transparent)]
    Cli(#[from] CliError),
    #[error(transparent)]
    Namespace(#[from] namespaces::NamespaceError),
    #[error(transparent)]
    Setup(#[from] setup::SetupError),
    #[error(transparent)]
    Pivot(#[from] setup::pivot::PivotError),
    #[error(transparent)]
    Seccomp(#[from] seccomp_fd::SeccompError),
    #[error("{}", confine_message(.0))]
    Confine(#[from] confine::ConfineError),
    #[error("Unexpected capabilities but not setuid, old file caps config?")]
    UnexpectedCaps,
    #[error("capget (for uid == 0) failed: {}", errno_text(.0))]
    RootCaps(#[source] io::Error),
    #[error("sigaction({signal}): {}", errno_text(.source))]
    ResetSignal {
        signal: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("clearenv failed: {}", errno_text(.0))]
    Clearenv(#[source] io::Error),
    #[error("Can't open /proc: {}", errno_text(.0))]
    OpenProc(#[source] io::Error),
    #[error("pipe2(): {}", errno_text(.0))]
    Pipe(#[source] io::Error),
    #[error("prctl: {}", errno_text(.0))]
    DeathSignal(#[source] io::Error),
    #[error("poll: {}", errno_text(.0))]
    Poll(#[source] io::Error),
    #[error("read from the launcher: {}", errno_text(.0))]
    LauncherRead(#[source] io::Error),
    #[error("can't set dumpable: {}", errno_text(.0))]
    Dumpable(#[source] io::Error),
    #[error("Can't fork for pid 1: {}", errno_text(.0))]
    Fork(#[source] io::Error),
    #[error("setsid: {}", errno_text(.0))]
    Setsid(#[source] io::Error),
    #[error("sigprocmask: {}", errno_text(.0))]
    SignalMask(#[source] io::Error),
    #[error("Can't chdir to {}: {}", .path.to_string_lossy(), errno_text(.source))]
    Chdir {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Write to info_fd: {}", errno_text(.0))]
    InfoWrite(#[source] io::Error),
    #[error("execvp {}: {}", .command.to_string_lossy(), errno_text(.source))]
    Exec {
        command: OsString,
        #[source]
        source: io::Error,
    },
}

/// bubblewrap's words for a failed capability or no_new_privs call.
fn confine_message(err: &confine::ConfineError) -> String {
    use confine::ConfineError as E;
    match err {
        E::NoNewPrivs(source) => {
            format!("prctl(PR_SET_NO_NEW_PRIVS) failed: {}", errno_text(source))
        }
        E::Capset(source) => format!("capset failed: {}", errno_text(source)),
        E::Capget(source) => format!("capget failed: {}", errno_text(source)),
        E::BoundingDrop { cap, source } => {
            format!(
                "Dropping capability {cap} from bounds: {}",
                errno_text(source)
            )
        }
        E::AmbientRaise { cap, source } => {
            format!("Adding ambient capability {cap}: {}", errno_text(source))
        }
        other => other.to_string(),
    }
}

/// Entry point of the `bwrap` mode. `argv[0]` is the display name.
pub fn main(argv: Vec<OsString>) -> i32 {
    // Read first: `--die-with-parent` compares against it once armed.
    let parent = nix::unistd::getppid();
    let prog = argv
        .first()
        .map(|arg0| arg0.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bwrap".to_owned());
    let args = argv.get(1..).unwrap_or_default();
    // As bubblewrap: a lone --version works before anything else is checked.
    if args.len() == 1 && args.first().is_some_and(|arg| arg == "--version") {
        log::print(io::stdout(), &format!("{VERSION_LINE}\n"));
        return 0;
    }
    let mut log = Log::default();
    match start(&prog, args, &mut log, parent) {
        Ok(code) => code,
        Err(BwrapError::Cli(CliError::NoCommand)) => {
            log::print(io::stderr(), &cli::usage(&prog));
            1
        }
        Err(err) => {
            log.error(&err);
            1
        }
    }
}

/// The caller, as decided once before the clone.
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// A root caller's effective capabilities, which bubblewrap passes on.
    pub root_caps: Option<caps::CapSet>,
    /// The kernel's highest capability, read while /proc is the host's.
    pub last_cap: u32,
}

impl Caller {
    /// bubblewrap's checks on its caller (not setuid): a root caller's
    /// effective set is passed on; any other caller must hold no capability.
    pub(crate) fn current() -> Result<Caller, BwrapError> {
        let uid = nix::unistd::getuid().as_raw();
        let root_caps = if uid == 0 {
            Some(caps::effective_caps().map_err(|err| match err {
                confine::ConfineError::Capget(source) => BwrapError::RootCaps(source),
                other => BwrapError::Confine(other),
            })?)
        } else {
            if confine::permitted_capabilities()? != 0 {
                return Err(BwrapError::UnexpectedCaps);
            }
            None
        };
        Ok(Caller {
            uid,
            gid: nix::unistd::getgid().as_raw(),
            root_caps,
            last_cap: confine::last_cap(),
        })
    }
}

/// Everything from the caller checks to the command's exit status.
fn start(
    prog: &str,
    args: &[OsString],
    log: &mut Log,
    parent: nix::unistd::Pid,
) -> Result<i32, BwrapError> {
    // An ignored SIGCHLD would make every wait fail: take it back to default.
    // SAFETY: resetting a disposition to SIG_DFL installs no handler.
    unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::SIGCHLD,
            nix::sys::signal::SigHandler::SigDfl,
        )
    }
    .map_err(|errno| BwrapError::ResetSignal {
        signal: "SIGCHLD",
        source: errno.into(),
    })?;
    let caller = Caller::current()?;
    confine::set_no_new_privs()?;
    let host_tty = if nix::unistd::isatty(io::stdout()).unwrap_or(false) {
        nix::unistd::ttyname(io::stdout()).ok()
    } else {
        None
    };
    if args.is_empty() {
        return Err(CliError::NoCommand.into());
    }
    let mut config = match cli::parse(args, log)? {
        Parsed::Help => {
            log::print(io::stdout(), &cli::usage(prog));
            return Ok(0);
        }
        Parsed::Version => {
            log::print(io::stdout(), &format!("{VERSION_LINE}\n"));
            return Ok(0);
        }
        Parsed::Run(config) => config,
    };
    let ids = cli::CallerIds {
        uid: caller.uid,
        gid: caller.gid,
    };
    cli::validate(&mut config, ids, user_namespaces_enabled)?;
    apply_env(&config.env)?;
    launch(*config, caller, host_tty, *log, parent)
}

/// bubblewrap's test for `--unshare-user-try`: user namespaces exist and are
/// not switched off (RHEL 7's module parameter, `max_user_namespaces` 0).
pub(crate) fn user_namespaces_enabled() -> bool {
    if std::fs::metadata("/proc/self/ns/user").is_err() {
        return false;
    }
    let disabled_by_module = std::fs::read("/sys/module/user_namespace/parameters/enable")
        .is_ok_and(|value| value.first() == Some(&b'N'));
    let disabled_by_sysctl =
        std::fs::read("/proc/sys/user/max_user_namespaces").is_ok_and(|value| value == b"0\n");
    !(disabled_by_module || disabled_by_sysctl)
}

/// `--setenv`/`--unsetenv`/`--clearenv`, in order, on the launcher's own
/// environment (single-threaded here), which the sandbox inherits, as
/// bubblewrap does. The names were checked while parsing.
fn apply_env(ops: &[EnvOp]) -> Result<(), BwrapError> {
    let c_string = |value: &OsString| CString::new(value.as_bytes()).ok();
    for op in ops {
        match op {
            EnvOp::Set(key, value) => {
                let (Some(key), Some(value)) = (c_string(key), c_string(value)) else {
                    return Err(CliError::Setenv.into());
                };
                // SAFETY: both strings are NUL-terminated; no other thread
                // exists that could read the environment meanwhile.
                if unsafe { libc::setenv(key.as_ptr(), value.as_ptr(), 1) } != 0 {
                    return Err(CliError::Setenv.into());
                }
            }
            EnvOp::Unset(key) => {
                let key = c_string(key).ok_or(CliError::Unsetenv)?;
                // SAFETY: as for setenv.
                if unsafe { libc::unsetenv(key.as_ptr()) } != 0 {
                    return Err(CliError::Unsetenv.into());
                }
            }
            EnvOp::Clear => {
                // SAFETY: clearenv takes no arguments; single-threaded.
                if unsafe { libc::clearenv() } != 0 {
                    return Err(BwrapError::Clearenv(io::Error::last_os_error()));
                }
            }
        }
    }
    Ok(())
}

/// A close-on-exec pipe whose ends are numbered above `floor`.
pub(crate) fn pipe(floor: Option<libc::c_int>) -> Result<(OwnedFd, OwnedFd), BwrapError> {
    let mut ends = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the live two-element array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(BwrapError::Pipe(io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created by pipe2 and are owned by no one else.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let raise = |fd| fds::above(fd, floor).map_err(BwrapError::Pipe);
    Ok((raise(read)?, raise(write)?))
}

/// Arms SIGKILL for when the parent of this process goes away, then checks
/// that it has not gone already (its pid then differs from `parent`).
pub(crate) fn die_with_parent(parent: libc::pid_t) -> Result<(), BwrapError> {
    // SAFETY: getppid has no preconditions.
    kill_with_parent(|| Ok(unsafe { libc::getppid() } != parent))
}

/// Arms SIGKILL for when the parent of this process goes away; if
/// `parent_gone` says it went before that, the signal it would have sent is
/// taken now.
pub(crate) fn kill_with_parent(
    parent_gone: impl FnOnce() -> Result<bool, BwrapError>,
) -> Result<(), BwrapError> {
    crate::sys::confine::set_parent_death_signal(libc::SIGKILL).map_err(BwrapError::DeathSignal)?;
    if parent_gone()? {
        // SAFETY: raise delivers a signal to this process only.
        unsafe { libc::raise(libc::SIGKILL) };
        // SAFETY: not reached; _exit ends the process without cleanup.
        unsafe { libc::_exit(1) };
    }
    Ok(())
}

/// `/proc` as an `O_PATH` descriptor numbered above `floor`.
pub(crate) fn open_proc(floor: Option<libc::c_int>) -> Result<OwnedFd, BwrapError> {
    // SAFETY: the path is a NUL-terminated literal.
    let fd = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(BwrapError::OpenProc(io::Error::last_os_error()));
    }
    // SAFETY: open just returned this fd; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    fds::above(fd, floor).map_err(BwrapError::OpenProc)
}

/// Creates the sandbox and runs the command; returns bwrap's exit status.
fn launch(
    config: Config,
    caller: Caller,
    host_tty: Option<PathBuf>,
    log: Log,
    parent: nix::unistd::Pid,
) -> Result<i32, BwrapError> {
    // Armed before the sandbox exists, so that no window is left in which
    // the caller dies and the sandbox stays.
    if config.die_with_parent {
        die_with_parent(parent.as_raw())?;
    }
    // The launcher's own descriptors live through the setup, whose options
    // read and close the fds the caller named: none may share a number.
    let floor = config.highest_named_fd();
    let proc_fd = open_proc(floor)?;
    let flags = namespaces::clone_flags(&config.unshare)?;
    let (status_read, status_write) = pipe(floor)?;
    let (alive_read, alive_write) = pipe(floor)?;
    let setup_finished = match config.json_status_fd {
        Some(_) => Some(pipe(floor)?),
        None => None,
    };
    match namespaces::clone_into(flags)? {
        Forked::Parent(pid) => {
            drop(status_write);
            drop(alive_read);
            let setup_finished = setup_finished.map(|(read, _write)| read);
            // The launcher needs no capability after the report (bubblewrap
            // drops them too); emptying the sets needs no privilege.
            let ready = report_child(pid, &config, flags)
                .and_then(|()| Ok(confine::clear_capability_sets()?));
            if let Err(err) = ready {
                // The sandbox must not outlive a failed launch; it may be
                // gone already (ESRCH), which is as good.
                // SAFETY: kill takes a pid and a signal number, no pointers.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                // Reaped so that it is gone when bwrap reports the failure;
                // if it cannot be (ECHILD), it is not there to leave behind.
                let mut status = 0;
                // SAFETY: status is a valid out-pointer for the call.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                return Err(err);
            }
            // The namespaces are reported: the sandbox may go on (as
            // bubblewrap's child waits for its parent). If it is gone
            // already, the monitor below finds out.
            let _ = fds::write_all(alive_write.as_raw_fd(), &[1]);
            let pipes = proc_pid1::Monitored {
                child: pid,
                status: status_read,
                setup_finished,
            };
            let code = proc_pid1::monitor(pipes, config.json_status_fd, log);
            drop(alive_write);
            Ok(code)
        }
        Forked::Child => {
            drop(status_read);
            drop(alive_write);
            let inherited = child::Inherited {
                proc_fd,
                status_write,
                alive_read,
                setup_finished: setup_finished.map(|(_read, write)| write),
            };
            let err = match child::run(&config, &caller, inherited, host_tty, log) {
                Ok(never) => match never {},
                Err(err) => err,
            };
            log.error(&err);
            // SAFETY: _exit ends this forked child without running the
            // parent's atexit handlers or flushing its copied buffers.
            unsafe { libc::_exit(1) }
        }
    }
}

/// `--info-fd` and the first `--json-status-fd` line, from the outer process.
/// A document that cannot be written fails the launch, as in bubblewrap; the
/// sandbox is killed then rather than left behind.
fn report_child(pid: libc::pid_t, config: &Config, flags: libc::c_int) -> Result<(), BwrapError> {
    if config.info_fd.is_none() && config.json_status_fd.is_none() {
        return Ok(());
    }
    let namespaces = status::namespace_ids(
        pid,
        &[
            ("cgroup", flags & libc::CLONE_NEWCGROUP != 0),
            ("ipc", flags & libc::CLONE_NEWIPC != 0),
            ("mnt", true),
            ("net", flags & libc::CLONE_NEWNET != 0),
            ("pid", flags & libc::CLONE_NEWPID != 0),
            ("uts", flags & libc::CLONE_NEWUTS != 0),
        ],
    );
    if let Some(fd) = config.info_fd {
        let written = fds::write_all(fd, status::info_json(pid, &namespaces).as_bytes());
        fds::close(fd);
        written.map_err(BwrapError::InfoWrite)?;
    }
    if let Some(fd) = config.json_status_fd {
        fds::write_all(fd, status::status_child_json(pid, &namespaces).as_bytes())
            .map_err(BwrapError::InfoWrite)?;
    }
    Ok(())
}

/// True once every write end of the pipe is closed (its holder is gone),
/// whether or not data is waiting in it.
pub(crate) fn has_hung_up(read_end: &OwnedFd) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: read_end.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one live pollfd, zero timeout.
        let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
        if rc >= 0 {
            return Ok(rc > 0 && pfd.revents & libc::POLLHUP != 0);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_failures_read_like_bubblewraps() {
        let eperm = || io::Error::from_raw_os_error(libc::EPERM);
        for (err, text) in [
            (
                confine::ConfineError::Capset(eperm()),
                "capset failed: Operation not permitted",
            ),
            (
                confine::ConfineError::BoundingDrop {
                    cap: 21,
                    source: eperm(),
                },
                "Dropping capability 21 from bounds: Operation not permitted",
            ),
            (
                confine::ConfineError::NoNewPrivs(eperm()),
                "prctl(PR_SET_NO_NEW_PRIVS) failed: Operation not permitted",
            ),
        ] {
            assert_eq!(BwrapError::from(err).to_string(), text);
        }
    }
}
