//! A sandbox built ahead of its commands, for the exec-server's reused
//! sandboxes (`crate::sandbox::warm`): the namespaces and mount tree a
//! bubblewrap command line describes, built by the same setup as a launch
//! ([`super::setup`], in the same order), but with no command. What stays
//! is held by descriptors of its user, mount and (when unshared) network
//! namespaces ([`PreparedNamespaces`]); no process lives inside it. Each
//! command then gets its own namespaces on top (`sandbox::warm::launch`).
//!
//! Differences to a launch, so that one command can leave nothing for the
//! next and nothing the host mounts later shows up:
//! - only user, mount, pid (whose fresh `/proc` lets the kernel allow the
//!   commands' own procfs mounts later) and network namespaces are made;
//!   ipc, uts and cgroup are each command's own;
//! - `/dev` is made read-only once set up: its `shm` and `pts` get a
//!   fresh tmpfs and devpts per command;
//! - with [`PrepareOptions::console`], the caller's devpts is bound on
//!   `/dev/pts` and an empty `/dev/console` made, so a command on a
//!   terminal gets that terminal bound there, as a launch binds it (the
//!   caller's devpts is covered by the command's own before it runs);
//! - every mount is made private: no host mount propagates in later.
//!
//! Runs in a single-threaded process (a fork of the spawn zygote), like
//! the launcher itself.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::mount::MsFlags;

use super::child::{arm_death_signal, map_ids};
use super::cli::{self, CallerIds, Parsed};
use super::log::Log;
use super::namespaces;
use super::setup::{self, bind, paths, pivot};
use super::{open_proc, pipe, BwrapError, Caller};
use crate::sys::fds;

/// The namespaces of a prepared sandbox.
#[derive(Debug)]
pub struct PreparedNamespaces {
    /// The user namespace owning the mounts (the command's is nested in it).
    pub user: OwnedFd,
    /// The mount namespace holding the tree.
    pub mnt: OwnedFd,
    /// The empty network namespace, when the command line unshares it.
    pub net: Option<OwnedFd>,
}

/// What a prepared sandbox has beside what its command line says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Make room for the commands' terminal as `/dev/console`.
    pub console: bool,
}

/// Why preparing failed; `Display` is the text after `bwrap: `.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Bwrap(#[from] BwrapError),
    #[error("the command line asks for nothing to run")]
    NotARun,
    #[error("the sandbox's first process ended before its tree was built")]
    SetupFailed,
    #[error("cannot open namespace {name} of the prepared sandbox: {source}")]
    Namespace {
        name: &'static str,
        #[source]
        source: io::Error,
    },
}

/// Builds the sandbox `args` describes (a bwrap command line; its command
/// is not run) and returns its namespaces. Errors of the setup itself are
/// printed on stderr as a launch prints them.
pub fn prepare(
    args: &[OsString],
    options: PrepareOptions,
) -> Result<PreparedNamespaces, PrepareError> {
    let mut log = Log::default();
    let caller = Caller::current()?;
    let mut config = match cli::parse(args, &mut log).map_err(BwrapError::from)? {
        Parsed::Run(config) => config,
        Parsed::Help | Parsed::Version => return Err(PrepareError::NotARun),
    };
    let ids = CallerIds {
        uid: caller.uid,
        gid: caller.gid,
    };
    cli::validate(&mut config, ids, super::user_namespaces_enabled).map_err(BwrapError::from)?;
    let floor = config.highest_named_fd();
    let proc_fd = open_proc(floor)?;
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID;
    if config.unshare.net {
        flags |= libc::CLONE_NEWNET;
    }
    let (built_read, built_write) = pipe(floor)?;
    let (alive_read, alive_write) = pipe(floor)?;
    match namespaces::clone_into(flags).map_err(BwrapError::from)? {
        namespaces::Forked::Parent(pid) => {
            drop((built_write, alive_read));
            let namespaces = collect(pid, &built_read, config.unshare.net);
            // The first process waits for this end to close, then exits;
            // the namespaces live on in the descriptors.
            drop(alive_write);
            let mut status = 0;
            // SAFETY: status is a valid out-pointer for the call.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            namespaces
        }
        namespaces::Forked::Child => {
            drop((built_read, alive_write));
            let err = match build(&config, &caller, proc_fd, options, &built_write, alive_read) {
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

/// The parent's side: waits for the tree (one byte; EOF means the setup
/// failed and said why), then opens the namespaces of the first process
/// through the host's `/proc`.
fn collect(
    pid: libc::pid_t,
    built: &OwnedFd,
    net: bool,
) -> Result<PreparedNamespaces, PrepareError> {
    let mut byte = [0u8; 1];
    let got = loop {
        // SAFETY: reads at most one byte into a live one-byte buffer.
        let rc = unsafe { libc::read(built.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break rc;
        }
    };
    if got != 1 {
        return Err(PrepareError::SetupFailed);
    }
    let open = |name: &'static str| -> Result<OwnedFd, PrepareError> {
        std::fs::File::open(format!("/proc/{pid}/ns/{name}"))
            .map(OwnedFd::from)
            .map_err(|source| PrepareError::Namespace { name, source })
    };
    Ok(PreparedNamespaces {
        user: open("user")?,
        mnt: open("mnt")?,
        net: if net { Some(open("net")?) } else { None },
    })
}

/// The first process: the launch's setup up to the pivot, the additions of
/// a prepared sandbox, then one byte on `built` and a wait for the parent
/// to let go. Never returns on success.
fn build(
    config: &cli::Config,
    caller: &Caller,
    proc_fd: OwnedFd,
    options: PrepareOptions,
    built: &OwnedFd,
    alive: OwnedFd,
) -> Result<std::convert::Infallible, BwrapError> {
    arm_death_signal(&alive)?;
    map_ids(config, caller, &proc_fd)?;
    // SAFETY: umask only swaps the process's file mode mask.
    unsafe { libc::umask(0) };
    let sources = setup::resolve_sources(&config.ops)?;
    pivot::prepare_root()?;
    let ctx = setup::Context {
        new_pid_namespace: true,
        host_tty: None,
    };
    setup::apply_ops(&config.ops, &sources, &ctx)?;
    if options.console {
        make_console_room()?;
    }
    pivot::finish_root()?;
    seal()?;
    fds::write_all(built.as_raw_fd(), &[1]).map_err(BwrapError::InfoWrite)?;
    // Until the parent has opened the namespaces and closed its end.
    let _ = fds::read_all(alive.as_raw_fd());
    // SAFETY: ends the first process; the namespaces stay with their holders.
    unsafe { libc::_exit(0) }
}

/// The caller's devpts on `/dev/pts` (where its terminals are found by
/// name) and an empty `/dev/console` to bind one on.
fn make_console_room() -> Result<(), BwrapError> {
    let pts = paths::newroot_path("/dev/pts".as_ref());
    let host = Path::new("/oldroot/dev/pts");
    let flags = bind::BindFlags {
        readonly: false,
        devices: true,
    };
    bind::bind_mount(host, &pts, flags).map_err(|source| setup::SetupError::Bind {
        from: host.to_path_buf(),
        to: pts.clone(),
        source,
    })?;
    let console = paths::newroot_path("/dev/console".as_ref());
    paths::ensure_file(&console, 0o444).map_err(|source| setup::SetupError::MountPointFile {
        path: console.into_os_string(),
        source,
    })?;
    Ok(())
}

/// `/dev` read-only and every mount private.
fn seal() -> Result<(), BwrapError> {
    bind::remount_read_only(Path::new("/dev")).map_err(|source| setup::SetupError::RemountRo {
        dest: "/dev".into(),
        source,
    })?;
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|errno| setup::SetupError::Mount {
        kind: "private propagation",
        dest: "/".into(),
        source: errno.into(),
    })?;
    Ok(())
}
