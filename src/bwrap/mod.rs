//! The built-in bubblewrap: a Rust implementation of the bwrap command line,
//! with no C, no setuid, and unprivileged user namespaces only.
//!
//! Two phases, as in bubblewrap: [`cli`] parses argv into a [`cli::Config`]
//! holding a list of [`ops::SetupOp`] with every cross-option check done;
//! then [`run`] creates the namespaces and walks the list. The order of
//! [`sandbox_child`] is the security argument:
//! 1. `--die-with-parent` is armed first, before anything else the child does;
//! 2. the child maps its own uid/gid (setgroups denied) in its new user
//!    namespace — also for a root caller, so nothing reaches the host;
//! 3. the mount tree is built on a tmpfs and pivoted into, the host tree
//!    detached ([`setup`]);
//! 4. hostname, no_new_privs, then a nested user namespace holding the
//!    requested uid/gid (and, for `--disable-userns`, the last one allowed,
//!    verified);
//! 5. a reaper stays as pid 1 ([`proc_pid1`]) unless `--as-pid-1`;
//! 6. in the command's process: new session, environment, cwd, capabilities
//!    ([`caps`]), no fd of bwrap's own left open ([`fds`]),
//!    seccomp ([`seccomp_fd`]) as the very last step, then execvp.
//!
//! The mode runs before any runtime is started, so the process is
//! single-threaded and fork/clone followed by ordinary Rust code is sound.

pub mod caps;
pub mod cli;
pub mod namespaces;
pub mod ops;
pub mod proc_pid1;
pub mod seccomp_fd;
pub mod setup;
pub mod status;

use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use cli::{CliError, Config, Parsed};
use namespaces::Forked;
use ops::EnvOp;

use crate::sys::{confine, errno_text, fds};

/// What bubblewrap prints for `--version`; the suffix says which one it is.
pub const VERSION_LINE: &str = concat!(
    "bubblewrap 0.11.0 (codexbox ",
    env!("CARGO_PKG_VERSION"),
    " built-in)"
);

/// A launch step that failed after parsing; `Display` is the text after `bwrap: `.
#[derive(Debug, thiserror::Error)]
pub enum BwrapError {
    #[error(transparent)]
    Namespace(#[from] namespaces::NamespaceError),
    #[error(transparent)]
    Setup(#[from] setup::SetupError),
    #[error(transparent)]
    Pivot(#[from] setup::pivot::PivotError),
    #[error(transparent)]
    Seccomp(#[from] seccomp_fd::SeccompError),
    #[error("Can't open /proc: {}", errno_text(.0))]
    OpenProc(#[source] io::Error),
    #[error("pipe: {}", errno_text(.0))]
    Pipe(#[source] io::Error),
    #[error("prctl(PR_SET_PDEATHSIG): {}", errno_text(.0))]
    DeathSignal(#[source] io::Error),
    #[error("prctl(PR_SET_DUMPABLE): {}", errno_text(.0))]
    Dumpable(#[source] io::Error),
    #[error("Can't fork: {}", errno_text(.0))]
    Fork(#[source] io::Error),
    #[error("setsid: {}", errno_text(.0))]
    Setsid(#[source] io::Error),
    #[error("Can't chdir to {}: {}", .path.to_string_lossy(), errno_text(.source))]
    Chdir {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Write to {what}: {}", errno_text(.source))]
    StatusWrite {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Confine(#[from] confine::ConfineError),
    #[error("execvp {}: {}", .command.to_string_lossy(), errno_text(.source))]
    Exec {
        command: OsString,
        #[source]
        source: io::Error,
    },
}

/// Entry point of the `bwrap` mode. argv[0] is the display name.
pub fn main(argv: Vec<OsString>) -> i32 {
    let prog = argv
        .first()
        .map(|arg0| arg0.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bwrap".to_owned());
    let args = argv.get(1..).unwrap_or_default();
    let caller_is_root = nix::unistd::getuid().is_root();
    match cli::parse(args, caller_is_root) {
        Ok(Parsed::Help) => {
            print!("{}", cli::usage(&prog));
            0
        }
        Ok(Parsed::Version) => {
            println!("{VERSION_LINE}");
            0
        }
        Ok(Parsed::Run(config)) => run(*config),
        Err(CliError::NoCommand) => {
            eprint!("{}", cli::usage(&prog));
            1
        }
        Err(err) => {
            eprintln!("bwrap: {err}");
            1
        }
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), BwrapError> {
    let mut ends = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the live two-element array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(BwrapError::Pipe(io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created by pipe2 and are owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) })
}

/// Creates the sandbox and runs the command; returns bwrap's exit status.
fn run(config: Config) -> i32 {
    match launch(config) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("bwrap: {err}");
            1
        }
    }
}

/// Ids of the caller, decided once before the clone.
struct Caller {
    uid: u32,
    gid: u32,
    /// The caller's cwd, tried again inside the sandbox.
    cwd: Option<OsString>,
    /// A root caller's effective capabilities, which bubblewrap passes on.
    root_caps: Option<caps::CapSet>,
    /// The kernel's highest capability, read while /proc is the host's.
    last_cap: u32,
}

fn launch(config: Config) -> Result<i32, BwrapError> {
    // An ignored SIGCHLD would make every wait fail: take it back to default.
    // SAFETY: resetting a disposition to SIG_DFL installs no handler.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    let proc_fd = open_proc()?;
    let uid = nix::unistd::getuid();
    let caller = Caller {
        uid: uid.as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        cwd: std::env::current_dir().ok().map(PathBuf::into_os_string),
        root_caps: if uid.is_root() {
            caps::effective_caps().ok()
        } else {
            None
        },
        last_cap: confine::last_cap(),
    };
    let host_tty = if nix::unistd::isatty(std::io::stdout()).unwrap_or(false) {
        nix::unistd::ttyname(std::io::stdout()).ok()
    } else {
        None
    };
    let (status_read, status_write) = pipe()?;
    let (alive_read, alive_write) = pipe()?;
    let flags = namespaces::clone_flags(&config.unshare);
    match namespaces::clone_into(flags)? {
        Forked::Parent(pid) => {
            drop(status_write);
            drop(alive_read);
            if let Err(err) = report_child(pid, &config, flags) {
                // SAFETY: kill takes a pid and a signal number, no pointers.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let mut status = 0;
                // SAFETY: status is a valid out-pointer for the call.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                return Err(err);
            }
            let code = proc_pid1::monitor(pid, status_read, config.json_status_fd);
            drop(alive_write);
            Ok(code)
        }
        Forked::Child => {
            drop(status_read);
            let err = match sandbox_child(
                &config,
                &caller,
                proc_fd,
                status_write,
                (alive_read, alive_write),
                host_tty,
            ) {
                Ok(never) => match never {},
                Err(err) => err,
            };
            eprintln!("bwrap: {err}");
            // SAFETY: _exit ends this forked child without running the
            // parent's atexit handlers or flushing its copied buffers.
            unsafe { libc::_exit(1) }
        }
    }
}

fn open_proc() -> Result<OwnedFd, BwrapError> {
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
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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
        written.map_err(|source| BwrapError::StatusWrite {
            what: "info_fd",
            source,
        })?;
    }
    if let Some(fd) = config.json_status_fd {
        fds::write_all(fd, status::status_child_json(pid, &namespaces).as_bytes()).map_err(
            |source| BwrapError::StatusWrite {
                what: "json_status_fd",
                source,
            },
        )?;
    }
    Ok(())
}

fn prctl_death_signal() -> Result<(), BwrapError> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number, no pointers.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 {
        return Err(BwrapError::DeathSignal(io::Error::last_os_error()));
    }
    Ok(())
}

/// True once every write end of the pipe is closed (the parent is gone).
fn has_hung_up(read_end: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd {
        fd: read_end.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd, zero timeout.
    let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
    rc > 0 && pfd.revents & (libc::POLLHUP | libc::POLLIN) != 0
}

/// The first process inside the namespaces. Never returns on success.
fn sandbox_child(
    config: &Config,
    caller: &Caller,
    proc_fd: OwnedFd,
    status_write: OwnedFd,
    alive: (OwnedFd, OwnedFd),
    host_tty: Option<PathBuf>,
) -> Result<Infallible, BwrapError> {
    let (alive_read, alive_write) = alive;
    drop(alive_write);
    if config.die_with_parent {
        prctl_death_signal()?;
        // The parent may have died before the signal was armed.
        if has_hung_up(&alive_read) {
            // SAFETY: _exit ends the child at once, as SIGKILL would have.
            unsafe { libc::_exit(1) };
        }
    }
    drop(alive_read);
    // The status documents are the outer process's business.
    for fd in [config.info_fd, config.json_status_fd]
        .into_iter()
        .flatten()
    {
        fds::close(fd);
    }

    let uid = config.uid.unwrap_or(caller.uid);
    let gid = config.gid.unwrap_or(caller.gid);
    // As bubblewrap does: a root caller sets up as uid/gid 0 of the sandbox's
    // user namespace (ownership checks on the host's files then behave as
    // for root) and a nested user namespace maps the requested ids onto 0
    // after every mount; any other caller is mapped directly. The nested
    // namespace is also the last one allowed under --disable-userns.
    let as_root = caller.uid == 0 && (uid != 0 || gid != 0);
    let nested = as_root || config.disable_userns;
    let (setup_uid, setup_gid) = if as_root { (0, 0) } else { (uid, gid) };
    namespaces::write_id_maps(&proc_fd, setup_uid, caller.uid, setup_gid, caller.gid)?;
    if config.unshare.net {
        namespaces::loopback_up()?;
    }
    // Seccomp programs are read while their fds are surely still open.
    let programs = config
        .seccomp_fds
        .iter()
        .map(|fd| seccomp_fd::read(*fd))
        .collect::<Result<Vec<_>, _>>()?;

    setup::pivot::prepare_root()?;
    let ctx = setup::Context {
        new_pid_namespace: config.unshare.pid,
        host_tty,
    };
    setup::apply_ops(&config.ops, &ctx)?;
    if config.disable_userns {
        namespaces::limit_user_namespaces(&proc_fd)?;
    }
    setup::pivot::finish_root()?;
    if let Some(name) = &config.hostname {
        namespaces::set_hostname(name)?;
    }
    confine::set_no_new_privs()?;
    if nested {
        namespaces::enter_nested_user_namespace(
            &proc_fd,
            (uid, setup_uid),
            (gid, setup_gid),
            config.disable_userns,
        )?;
    }
    drop(proc_fd);
    if let Some(fd) = config.block_fd {
        status::block_on(fd);
    }

    let needs_reaper = !config.as_pid_1 && (config.unshare.pid || config.sync_fd.is_some());
    if needs_reaper {
        // The reaper holds the caller's stdio (the sandbox helper parses its
        // stderr): the command must not reach those fds through /proc/1/fd
        // or pidfd_getfd. Not dumpable, that takes CAP_SYS_PTRACE over the
        // host's user namespace. Set before the fork so that no window is
        // left; the command's exec makes it dumpable again.
        // SAFETY: PR_SET_DUMPABLE takes integers only.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) } != 0 {
            return Err(BwrapError::Dumpable(io::Error::last_os_error()));
        }
        // SAFETY: single-threaded process: the child may run any code.
        match unsafe { nix::unistd::fork() } {
            Err(errno) => return Err(BwrapError::Fork(errno.into())),
            Ok(nix::unistd::ForkResult::Parent { child }) => {
                // The reaper needs no capability and no fd but its pipe and the sync fd.
                let _ = confine::drop_capabilities_through(caller.last_cap);
                let mut keep = vec![status_write.as_raw_fd()];
                keep.extend(config.sync_fd);
                let _ = fds::close_all_but(&keep);
                let code = proc_pid1::run_reaper(child.as_raw(), status_write);
                // SAFETY: ends the reaper; nothing of the parent's state to flush.
                unsafe { libc::_exit(code) }
            }
            Ok(nix::unistd::ForkResult::Child) => {
                drop(status_write);
                if config.die_with_parent {
                    prctl_death_signal()?;
                }
            }
        }
    }
    exec_command(config, uid, caller, programs)
}

/// The command's own process: session, environment, cwd, capabilities, fds,
/// seccomp, execvp.
fn exec_command(
    config: &Config,
    uid: u32,
    caller: &Caller,
    programs: Vec<seccomp_fd::Program>,
) -> Result<Infallible, BwrapError> {
    // The Rust runtime ignores SIGPIPE in this process; the command gets the
    // default disposition, as from any C launcher.
    // SAFETY: resetting a disposition to SIG_DFL installs no handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if config.new_session {
        nix::unistd::setsid().map_err(|errno| BwrapError::Setsid(errno.into()))?;
    }
    apply_env(&config.env);
    change_dir(config, caller.cwd.clone())?;
    let keep = caps::requested_caps(caller.root_caps, uid, caller.last_cap, &config.cap_edits);
    // As bubblewrap: an edited set is also made ambient, for any uid.
    caps::apply(keep, !config.cap_edits.is_empty(), caller.last_cap)?;
    // Like bubblewrap, the fds the caller left inheritable reach the command
    // (callers pass fds to the sandboxed program that way); every fd bwrap
    // opened itself is close-on-exec, and those given to options are closed
    // once used. The --sync-fd stays with the reaper only.
    if let Some(fd) = config.sync_fd {
        fds::close(fd);
    }

    let command = config.command.first().cloned().unwrap_or_default();
    let to_c = |arg: &OsString| CString::new(arg.as_bytes()).ok();
    let mut argv: Vec<CString> = Vec::with_capacity(config.command.len());
    for (index, arg) in config.command.iter().enumerate() {
        let arg = match (&config.argv0, index) {
            (Some(argv0), 0) => argv0,
            _ => arg,
        };
        argv.push(to_c(arg).unwrap_or_default());
    }
    let file = to_c(&command).unwrap_or_default();
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|arg| arg.as_ptr()).collect();
    ptrs.push(std::ptr::null());

    for program in &programs {
        seccomp_fd::install(program)?;
    }
    // SAFETY: file and every argv element are NUL-terminated strings that
    // outlive the call; the pointer array is NULL-terminated.
    unsafe { libc::execvp(file.as_ptr(), ptrs.as_ptr()) };
    Err(BwrapError::Exec {
        command,
        source: io::Error::last_os_error(),
    })
}

/// `--setenv`/`--unsetenv`/`--clearenv`, in order, on this process's
/// environment (single-threaded here), so execvp searches the new PATH.
fn apply_env(ops: &[EnvOp]) {
    for op in ops {
        match op {
            EnvOp::Set(key, value) => std::env::set_var(key, value),
            EnvOp::Unset(key) => std::env::remove_var(key),
            EnvOp::Clear => {
                for (key, _) in std::env::vars_os() {
                    std::env::remove_var(key);
                }
            }
        }
    }
}

/// bubblewrap's cwd rule: `--chdir`, else the caller's cwd if it exists in
/// the sandbox, else `$HOME`, else `/`; `PWD` says where.
fn change_dir(config: &Config, old_cwd: Option<OsString>) -> Result<(), BwrapError> {
    let new_cwd: OsString = if let Some(dir) = &config.chdir {
        std::env::set_current_dir(dir).map_err(|err| BwrapError::Chdir {
            path: dir.clone(),
            source: err,
        })?;
        dir.clone()
    } else {
        match old_cwd.clone() {
            Some(dir) if std::env::set_current_dir(&dir).is_ok() => dir,
            _ => match std::env::var_os("HOME") {
                Some(home) if std::env::set_current_dir(&home).is_ok() => home,
                _ => {
                    let _ = std::env::set_current_dir("/");
                    OsString::from("/")
                }
            },
        }
    };
    std::env::set_var("PWD", new_cwd);
    Ok(())
}
