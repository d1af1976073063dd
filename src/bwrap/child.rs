//! The sandbox's first process: from the clone to the command's exec (or to
//! the reaper), in bubblewrap's order.
//!
//! It arms `--die-with-parent` first, maps its ids in the new user namespace
//! (the setup namespace), builds the mount tree with umask 0, moves into the
//! nested user namespace the command runs in, cuts its capabilities, and
//! then either execs the command itself or forks it below a reaper that
//! stays as pid 1. The command's own last steps are [`super::command`]'s.

use std::convert::Infallible;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use super::cli::{Config, Seccomp};
use super::command::{self, Command};
use super::log::Log;
use super::namespaces::{self, IdMap};
use super::setup::{self, pivot};
use super::{caps, proc_pid1, seccomp_fd, status, BwrapError, Caller};
use crate::sys::{confine, fds};

/// What the first process gets from the launcher.
pub struct Inherited {
    /// The host `/proc`, opened before the clone.
    pub proc_fd: OwnedFd,
    /// Where the reaper reports the command's status.
    pub status_write: OwnedFd,
    /// One byte once the launcher has reported the namespaces; hangs up
    /// when the launcher is gone.
    pub alive_read: OwnedFd,
    /// `--json-status-fd`: marks that the command is about to run.
    pub setup_finished: Option<OwnedFd>,
}

/// The ids of the setup namespace, bubblewrap's choice: uid/gid 0 when
/// `--dev` needs devpts (root must be mapped for it), the requested ids when
/// the nested namespace exists anyway for `--disable-userns`, the caller's
/// own otherwise. The command's view of its maps is then bubblewrap's in
/// every case: `inside outside 1` with `outside` this setup id.
fn setup_ids(config: &Config, caller: &Caller, sandbox: (u32, u32)) -> (u32, u32) {
    if config.needs_devpts() {
        (0, 0)
    } else if config.disable_userns {
        sandbox
    } else {
        (caller.uid, caller.gid)
    }
}

/// A user and a group id.
type Ids = (u32, u32);

/// Maps the ids of the sandbox's user namespace as bubblewrap does (the
/// setup's ids of [`setup_ids`] over the caller's) and brings loopback up
/// in a network namespace of its own; returns the ids the sandbox asked
/// for and the setup's.
pub(super) fn map_ids(
    config: &Config,
    caller: &Caller,
    proc_fd: &OwnedFd,
) -> Result<(Ids, Ids), BwrapError> {
    let sandbox = (
        config.uid.unwrap_or(caller.uid),
        config.gid.unwrap_or(caller.gid),
    );
    let setup = setup_ids(config, caller, sandbox);
    namespaces::write_id_maps(
        proc_fd,
        IdMap {
            inside: setup.0,
            outside: caller.uid,
        },
        IdMap {
            inside: setup.1,
            outside: caller.gid,
        },
        true,
    )?;
    if config.unshare.net {
        namespaces::loopback_up()?;
    }
    Ok((sandbox, setup))
}

/// Runs the first process to the command's exec. Never returns on success.
pub fn run(
    config: &Config,
    caller: &Caller,
    inherited: Inherited,
    host_tty: Option<PathBuf>,
    log: Log,
) -> Result<Infallible, BwrapError> {
    let Inherited {
        proc_fd,
        status_write,
        alive_read,
        setup_finished,
    } = inherited;
    if config.die_with_parent {
        arm_death_signal(&alive_read)?;
    }
    // Wait until the launcher has reported the namespaces (--info-fd,
    // --json-status-fd), as bubblewrap's child does. EOF means it is gone,
    // which --die-with-parent has dealt with if asked; otherwise the sandbox
    // goes on, as bubblewrap's does.
    let mut go = [0u8; 1];
    loop {
        // SAFETY: reads at most one byte into a live one-byte buffer.
        let rc = unsafe { libc::read(alive_read.as_raw_fd(), go.as_mut_ptr().cast(), 1) };
        if rc >= 0 {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(BwrapError::LauncherRead(err));
        }
    }
    drop(alive_read);
    // The status documents are the launcher's business.
    for fd in [config.info_fd, config.json_status_fd]
        .into_iter()
        .flatten()
    {
        fds::close(fd);
    }

    let (sandbox, setup) = map_ids(config, caller, &proc_fd)?;

    // Every mode the setup creates is exact, as in bubblewrap.
    // SAFETY: umask only swaps the process's file mode mask.
    let old_umask = unsafe { libc::umask(0) };
    let sources = setup::resolve_sources(&config.ops)?;
    let old_cwd = pivot::prepare_root()?;
    let ctx = setup::Context {
        new_pid_namespace: config.unshare.pid,
        host_tty,
    };
    setup::apply_ops(&config.ops, &sources, &ctx)?;
    pivot::finish_root()?;

    namespaces::enter_nested_user_namespace(
        &proc_fd,
        IdMap {
            inside: sandbox.0,
            outside: setup.0,
        },
        IdMap {
            inside: sandbox.1,
            outside: setup.1,
        },
        config.disable_userns,
    )?;
    caps::apply(
        caps::plan(caller.root_caps, &config.cap_edits),
        caller.last_cap,
    )?;
    if let Some(fd) = config.block_fd {
        status::block_on(fd);
    }
    let single;
    let programs: Vec<&seccomp_fd::Program> = match &config.seccomp {
        Seccomp::None => Vec::new(),
        Seccomp::Fd(fd) => {
            single = seccomp_fd::read(*fd)?;
            vec![&single]
        }
        Seccomp::Programs(added) => added.iter().collect(),
    };
    // SAFETY: umask only swaps the process's file mode mask.
    unsafe { libc::umask(old_umask) };
    command::change_dir(config.chdir.as_ref(), old_cwd)?;
    if config.new_session {
        nix::unistd::setsid().map_err(|errno| BwrapError::Setsid(errno.into()))?;
    }

    let needs_reaper = !config.as_pid_1 && (config.unshare.pid || config.sync_fd.is_some());
    if needs_reaper {
        // The reaper holds the caller's stdio (the sandbox helper parses its
        // stderr): the command must not reach those fds through /proc/1/fd
        // or pidfd_getfd. Not dumpable, that takes CAP_SYS_PTRACE over the
        // host's user namespace. Set before the fork so that no window is
        // left; the command's exec makes it dumpable again.
        let off: libc::c_ulong = 0;
        // SAFETY: PR_SET_DUMPABLE takes integers only.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, off, off, off, off) } != 0 {
            return Err(BwrapError::Dumpable(std::io::Error::last_os_error()));
        }
        // SAFETY: getpid has no preconditions.
        let reaper = unsafe { libc::getpid() };
        // SAFETY: single-threaded process: the child may run any code.
        match unsafe { nix::unistd::fork() } {
            Err(errno) => return Err(BwrapError::Fork(errno.into())),
            Ok(nix::unistd::ForkResult::Parent { child }) => {
                let code = reap(
                    config,
                    child.as_raw(),
                    status_write,
                    proc_fd,
                    &programs,
                    log,
                );
                // SAFETY: ends the reaper; nothing of the parent's state to flush.
                unsafe { libc::_exit(code) }
            }
            Ok(nix::unistd::ForkResult::Child) => {
                drop(status_write);
                if config.die_with_parent {
                    super::die_with_parent(reaper)?;
                }
            }
        }
    } else {
        drop(status_write);
    }
    drop(proc_fd);
    command::exec(Command {
        config,
        programs: &programs,
        setup_finished,
    })
}

/// `--die-with-parent` in the first process: SIGKILL once the launcher is
/// gone. Its parent's pid means nothing inside a new pid namespace (it reads
/// 0), so a launcher that died before the signal was armed is seen on the
/// pipe it held.
pub(super) fn arm_death_signal(alive_read: &OwnedFd) -> Result<(), BwrapError> {
    super::kill_with_parent(|| super::has_hung_up(alive_read).map_err(BwrapError::Poll))
}

/// The reaper's side of the fork: no capabilities, no fd but its pipe and
/// the sync fd, no signal handler, the seccomp programs (as bubblewrap's
/// pid 1 has them), then reaping until the namespace is empty. Returns its
/// exit status.
fn reap(
    config: &Config,
    command: libc::pid_t,
    status_write: OwnedFd,
    proc_fd: OwnedFd,
    programs: &[&seccomp_fd::Program],
    log: Log,
) -> i32 {
    drop(proc_fd);
    if let Err(err) = confine::clear_capability_sets() {
        log.error(&err);
        return 1;
    }
    let mut keep = vec![status_write.as_raw_fd()];
    keep.extend(config.sync_fd);
    if let Err(err) = fds::close_all_but(&keep) {
        log.error(&format_args!("close fds: {}", crate::sys::errno_text(&err)));
        return 1;
    }
    // No handler (the Rust runtime's SIGSEGV and SIGBUS ones included): a
    // signal the command sends to its namespace's pid 1 is then dropped by
    // the kernel, whatever it carries. SIGPIPE stays ignored, so a launcher
    // gone before the status is written cannot kill the reaper.
    crate::sys::signals::reset_dispositions(true);
    for program in programs {
        if let Err(err) = seccomp_fd::install(program) {
            log.error(&err);
            return 1;
        }
    }
    proc_pid1::run_reaper(command, status_write, log)
}
