//! The command's own mounts in a reused sandbox, made by its pid 1 in the
//! copy of the prepared tree it was cloned into: a fresh `/proc` (with the
//! host's kernel knobs, which the prepared tree has bound read-only, bound
//! over it again, and its pid 1 hidden, as in a one-shot sandbox), a fresh
//! tmpfs on `/dev/shm` and devpts on `/dev/pts`, and the command's terminal
//! on `/dev/console` when it runs on one.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::error::LaunchError;
use crate::bwrap::setup::bind::{self, BindFlags};

/// What pid 1 mounted that the command still needs.
pub struct FreshMounts {
    /// `sys/user` of the fresh `/proc`, opened before the kernel knobs
    /// turned read-only, so the command can close user namespaces for
    /// itself.
    pub user_sysctls: OwnedFd,
    /// Pid 1's own directory of the fresh `/proc` (`/proc/1`, opened before
    /// it was hidden): where pid 1 maps its ids when it enters a user
    /// namespace itself (`super::standby`).
    pub own_proc: OwnedFd,
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// The knobs below `/proc` a one-shot sandbox binds read-only from the
/// host (see `sandbox::bwrap_args`); the prepared tree has them bound.
const PROC_KNOBS: [&str; 4] = ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

fn c_path(path: &str) -> Result<CString, LaunchError> {
    CString::new(path).map_err(|_| LaunchError::Io {
        what: "name a path",
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

/// A detached copy of the one mount at `path` (the host's knob bound in
/// the prepared tree), or `None` when nothing is there.
fn clone_mount(path: &str) -> Result<Option<OwnedFd>, LaunchError> {
    let c = c_path(path)?;
    // SAFETY: the path is NUL-terminated and lives for the call; the
    // returned fd is owned below.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    if fd < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENOENT) {
            return Ok(None);
        }
        return Err(LaunchError::Mount {
            what: "a copy of the host's kernel knobs",
            dest: PathBuf::from(path),
            source: err,
        });
    }
    let fd = RawFd::try_from(fd).map_err(|_| LaunchError::Io {
        what: "keep a mount",
        source: io::Error::from_raw_os_error(libc::EBADF),
    })?;
    // SAFETY: open_tree just returned this fd; nothing else owns it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Attaches the detached mount `tree` at `path`.
fn attach(tree: &OwnedFd, path: &str) -> Result<(), LaunchError> {
    let c = c_path(path)?;
    // SAFETY: both paths are NUL-terminated and live for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(LaunchError::Mount {
            what: "the host's kernel knobs",
            dest: PathBuf::from(path),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

fn mount(
    what: &'static str,
    fstype: &str,
    dest: &str,
    flags: MsFlags,
    data: &str,
) -> Result<(), LaunchError> {
    nix::mount::mount(Some(fstype), dest, Some(fstype), flags, Some(data)).map_err(|errno| {
        LaunchError::Mount {
            what,
            dest: PathBuf::from(dest),
            source: errno.into(),
        }
    })
}

fn open_dir(path: &str) -> Result<OwnedFd, LaunchError> {
    std::fs::File::open(path)
        .map(OwnedFd::from)
        .map_err(|source| LaunchError::Mount {
            what: "(opening) procfs",
            dest: PathBuf::from(path),
            source,
        })
}

/// The command's own mounts (see the module docs), in pid 1.
pub fn fresh_mounts(console: bool) -> Result<FreshMounts, LaunchError> {
    let mut knobs = Vec::new();
    for knob in PROC_KNOBS {
        if let Some(tree) = clone_mount(knob)? {
            knobs.push((knob, tree));
        }
    }
    let proc_flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV;
    mount("procfs", "proc", "/proc", proc_flags, "")?;
    let user_sysctls = open_dir("/proc/sys/user")?;
    for (knob, tree) in &knobs {
        attach(tree, knob)?;
    }
    // Named through /proc/self, which is /proc/1 here: before hiding it.
    if console {
        bind_console()?;
    }
    let own_proc = open_dir("/proc/1")?;
    let hidden = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount("an empty /proc/1", "tmpfs", "/proc/1", hidden, "mode=555")?;
    let dev_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount("a fresh tmpfs", "tmpfs", "/dev/shm", dev_flags, "mode=0755")?;
    mount(
        "a fresh devpts",
        "devpts",
        "/dev/pts",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=620",
    )?;
    Ok(FreshMounts {
        user_sysctls,
        own_proc,
    })
}

/// The terminal on standard output, found under the caller's devpts the
/// prepared tree has on `/dev/pts`, bound on `/dev/console` (before the
/// command's own devpts covers the caller's).
fn bind_console() -> Result<(), LaunchError> {
    let link = std::fs::read_link("/proc/self/fd/1").map_err(|source| LaunchError::Io {
        what: "name the terminal",
        source,
    })?;
    let meta = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::rdev(&m))
    };
    let ours = std::fs::metadata("/proc/self/fd/1")
        .ok()
        .map(|m| std::os::unix::fs::MetadataExt::rdev(&m));
    if !link.starts_with("/dev/pts/") || ours.is_none() || meta(&link) != ours {
        // Not a terminal of the caller's devpts: nothing to bind, as a
        // launcher finds no terminal to bind.
        return Ok(());
    }
    let flags = BindFlags {
        readonly: false,
        devices: true,
    };
    bind::bind_mount(&link, Path::new("/dev/console"), flags).map_err(|err| LaunchError::Mount {
        what: "the terminal",
        dest: PathBuf::from("/dev/console"),
        source: io::Error::other(err.to_string()),
    })
}
