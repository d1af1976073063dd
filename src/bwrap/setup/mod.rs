//! The private mount tree: bind sources resolved on the host, a tmpfs root,
//! the setup operations applied to it, then `pivot_root` into it with the
//! host tree detached.
//!
//! Sequence (the security argument, in bubblewrap's order):
//! 1. [`resolve_sources`]: every bind source's real path, looked up in the
//!    host tree (symlinks and relative paths as the caller sees them);
//! 2. [`pivot::prepare_root`]: make `/` a recursive slave (nothing we mount
//!    reaches the host), mount a tmpfs on `/tmp`, `pivot_root` into it with
//!    the old root at `/oldroot` and the future root at `/newroot`;
//! 3. [`apply_ops`]: each `SetupOp` in command-line order, sources under
//!    `/oldroot`, destinations under `/newroot`, missing parents created with
//!    bubblewrap's modes;
//! 4. [`pivot::finish_root`]: make `/oldroot` private, detach it, and pivot
//!    into `/newroot`, detaching the tmpfs: no path leads back to the host tree.
//!
//! The caller runs all of it with umask 0, so every mode is exact. The
//! operations' parts live beside this walk: [`paths`] (where a path is,
//! creating mount points), [`bind`] (bind mounts and their flags), `data`
//! (`--file`, `--bind-data`), `proc` (`--proc`) and `dev` (`--dev`).

pub mod bind;
mod data;
mod dev;
pub mod paths;
pub mod pivot;
mod proc;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::ops::{BindKind, SetupOp};
use crate::sys::{errno_text, fds};
use bind::{bind_mount, BindError, BindFlags};
use paths::{c_octal, ensure_dir, ensure_file, mkdir_with_parents, newroot_path, oldroot_path};

/// A setup step that failed; `Display` is bubblewrap's wording.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("Can't find source path {}: {}", .path.to_string_lossy(), errno_text(.source))]
    SourcePath {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't get type of source {}: {}", .path.to_string_lossy(), errno_text(.source))]
    SourceType {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't mkdir parents for {}: {}", .dest.to_string_lossy(), errno_text(.source))]
    MkdirParents {
        dest: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't mkdir {}: {}", .path.to_string_lossy(), errno_text(.source))]
    Mkdir {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't create file at {}: {}", .path.to_string_lossy(), errno_text(.source))]
    MountPointFile {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't bind mount {} on {}: {source}", .from.display(), .to.display())]
    Bind {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: BindError,
    },
    #[error("Can't remount readonly on {}: {source}", .dest.display())]
    RemountRo {
        dest: PathBuf,
        #[source]
        source: BindError,
    },
    #[error("Can't stat fd {fd}: {}", errno_text(.source))]
    StatFd {
        fd: RawFd,
        #[source]
        source: io::Error,
    },
    #[error("Can't stat mount at {}: {}", .path.display(), errno_text(.source))]
    StatMount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("Race condition binding dirfd")]
    BindFdRace,
    #[error("Can't mount {kind} on {}: {}", .dest.display(), mount_strerror(.source))]
    Mount {
        kind: &'static str,
        dest: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{what}: {}", errno_text(.source))]
    Step {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("Can't chmod {} {}: {}", c_octal(*.mode), .path.to_string_lossy(), errno_text(.source))]
    Chmod {
        mode: u32,
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't create file {}: {}", .path.to_string_lossy(), errno_text(.source))]
    CreateFile {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't write data to file {}: {}", .path.to_string_lossy(), errno_text(.source))]
    WriteData {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't create tmpfile for {}: {}", .path.to_string_lossy(), errno_text(.source))]
    CreateTmpfile {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't set mode {} on file to be used for {}: {}", c_octal(*.mode), .path.to_string_lossy(), errno_text(.source))]
    SetMode {
        mode: u32,
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't make symlink at {}: {}", .path.to_string_lossy(), errno_text(.source))]
    Symlink {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't make symlink at {}: destination exists and is not a symlink", .path.to_string_lossy())]
    SymlinkOverNonLink { path: OsString },
    #[error("Can't make symlink at {}: destination exists, and cannot read symlink target: {}", .path.to_string_lossy(), errno_text(.source))]
    SymlinkUnreadable {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't make symlink at {}: existing destination is {}", .path.to_string_lossy(), .existing.to_string_lossy())]
    SymlinkConflict { path: OsString, existing: OsString },
    #[error("Can't set hostname to {}: {}", .name.to_string_lossy(), errno_text(.source))]
    Hostname {
        name: OsString,
        #[source]
        source: io::Error,
    },
}

pub type Result<T, E = SetupError> = std::result::Result<T, E>;

/// bubblewrap's text for a failed mount: ENOSPC means a mount limit.
pub fn mount_strerror(err: &io::Error) -> String {
    if err.raw_os_error() == Some(libc::ENOSPC) {
        "Limit exceeded (ENOSPC). (Hint: Check that /proc/sys/fs/mount-max is sufficient, \
         typically 100000)"
            .to_owned()
    } else {
        errno_text(err)
    }
}

/// What the operations need besides themselves.
pub struct Context {
    /// A new pid namespace exists, so `--proc` can mount a fresh procfs.
    pub new_pid_namespace: bool,
    /// The terminal on stdout, bound to `/dev/console` by `--dev`.
    pub host_tty: Option<PathBuf>,
}

/// Step 1: the real path of every bind source, in the host tree (index =
/// operation). A missing `-try` source keeps its name, to be skipped later.
pub fn resolve_sources(ops: &[SetupOp]) -> Result<Vec<Option<OsString>>> {
    ops.iter()
        .map(|op| {
            let SetupOp::Bind {
                source,
                allow_missing,
                ..
            } = op
            else {
                return Ok(None);
            };
            match fs::canonicalize(source) {
                Ok(real) => Ok(Some(real.into_os_string())),
                Err(err) if *allow_missing && err.raw_os_error() == Some(libc::ENOENT) => {
                    Ok(Some(source.clone()))
                }
                Err(err) => Err(SetupError::SourcePath {
                    path: source.clone(),
                    source: err,
                }),
            }
        })
        .collect()
}

/// Step 3: every setup operation, in order, with the sources
/// [`resolve_sources`] found. Fds given to `--file`, `--bind-data`,
/// `--ro-bind-data` and `--bind-fd` are closed once used.
pub fn apply_ops(ops: &[SetupOp], sources: &[Option<OsString>], ctx: &Context) -> Result<()> {
    for (index, op) in ops.iter().enumerate() {
        let source = sources.get(index).cloned().flatten();
        apply_op(op, source, ctx, index)?;
    }
    Ok(())
}

fn apply_op(op: &SetupOp, source: Option<OsString>, ctx: &Context, index: usize) -> Result<()> {
    let mut source_is_dir = false;
    let mut source_path = PathBuf::new();
    if let (SetupOp::Bind { allow_missing, .. }, Some(source)) = (op, &source) {
        source_path = oldroot_path(source);
        match fs::metadata(&source_path) {
            Ok(meta) => source_is_dir = meta.is_dir(),
            Err(err) if *allow_missing && err.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(err) => {
                return Err(SetupError::SourceType {
                    path: source.clone(),
                    source: err,
                })
            }
        }
    }
    let dest = op.dest().map(|dest| (dest, newroot_path(dest)));
    if let Some((shown, to)) = &dest {
        if op.creates_parents() {
            mkdir_with_parents(to, paths::parent_mode(op.perms()), false).map_err(|err| {
                SetupError::MkdirParents {
                    dest: (*shown).clone(),
                    source: err,
                }
            })?;
        }
    }
    let (shown, to) = match (&dest, op) {
        (Some((shown, to)), _) => ((*shown).clone(), to.clone()),
        (None, SetupOp::SetHostname { name }) => {
            return nix::unistd::sethostname(name).map_err(|errno| SetupError::Hostname {
                name: name.clone(),
                source: errno.into(),
            })
        }
        (None, _) => return Ok(()),
    };
    match op {
        SetupOp::Bind { kind, fd, .. } => {
            make_mount_point(&to, &shown, source_is_dir)?;
            let flags = BindFlags {
                readonly: *kind == BindKind::ReadOnly,
                devices: *kind == BindKind::Devices,
            };
            bind_mount(&source_path, &to, flags).map_err(|err| SetupError::Bind {
                from: source_path.clone(),
                to: to.clone(),
                source: err,
            })?;
            if let Some(fd) = fd {
                check_bound_fd(*fd, &to)?;
            }
            Ok(())
        }
        SetupOp::RemountRo { .. } => {
            bind::remount_read_only(&to).map_err(|err| SetupError::RemountRo {
                dest: to.clone(),
                source: err,
            })
        }
        SetupOp::Proc { .. } => proc::mount_proc(&shown, &to, ctx),
        SetupOp::Dev { .. } => dev::mount_dev(&shown, &to, ctx),
        SetupOp::Tmpfs { perms, size, .. } => {
            make_dir(&to, &shown, 0o755)?;
            let mut options = format!("mode={}", c_octal(*perms));
            if let Some(size) = size {
                options.push_str(&format!(",size={size}"));
            }
            mount_fs(
                "tmpfs",
                &to,
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                &options,
            )
        }
        SetupOp::Mqueue { .. } => {
            make_dir(&to, &shown, 0o755)?;
            mount_fs("mqueue", &to, MsFlags::empty(), "")
        }
        SetupOp::Dir { perms, .. } => make_dir(&to, &shown, *perms),
        SetupOp::Symlink { target, .. } => make_symlink(target, &to, &shown),
        SetupOp::File { fd, perms, .. } => data::write_file(*fd, &to, &shown, *perms),
        SetupOp::BindData {
            fd,
            readonly,
            perms,
            ..
        } => data::bind_data(*fd, &to, &shown, *perms, *readonly, index),
        SetupOp::Chmod { mode, .. } => fs::set_permissions(&to, fs::Permissions::from_mode(*mode))
            .map_err(|err| SetupError::Chmod {
                mode: *mode,
                path: shown.clone(),
                source: err,
            }),
        SetupOp::SetHostname { .. } => Ok(()),
    }
}

/// `--bind-fd`: the fd belongs to the host's mount namespace and was bound
/// through the path it names; the mount must be the very file the fd refers
/// to, or the path was swapped in between.
fn check_bound_fd(fd: RawFd, to: &Path) -> Result<()> {
    let mut fd_stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole `struct stat` into the buffer it is given.
    if unsafe { libc::fstat(fd, fd_stat.as_mut_ptr()) } != 0 {
        return Err(SetupError::StatFd {
            fd,
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: fstat succeeded, so it filled the buffer.
    let fd_stat = unsafe { fd_stat.assume_init() };
    let bound = fs::symlink_metadata(to).map_err(|err| SetupError::StatMount {
        path: to.to_path_buf(),
        source: err,
    })?;
    if (fd_stat.st_dev, fd_stat.st_ino) != (bound.dev(), bound.ino()) {
        return Err(SetupError::BindFdRace);
    }
    fds::close(fd);
    Ok(())
}

/// A mount point for a bind: a directory for a directory source, an empty
/// file otherwise.
pub(super) fn make_mount_point(to: &Path, shown: &OsStr, is_dir: bool) -> Result<()> {
    if is_dir {
        make_dir(to, shown, 0o755)
    } else {
        ensure_file(to, 0o444).map_err(|err| SetupError::MountPointFile {
            path: shown.to_owned(),
            source: err,
        })
    }
}

pub(super) fn make_dir(to: &Path, shown: &OsStr, mode: u32) -> Result<()> {
    ensure_dir(to, mode).map_err(|err| SetupError::Mkdir {
        path: shown.to_owned(),
        source: err,
    })
}

/// `--symlink`: the same link already there is fine; anything else is not.
fn make_symlink(target: &OsStr, to: &Path, shown: &OsStr) -> Result<()> {
    let err = match std::os::unix::fs::symlink(target, to) {
        Ok(()) => return Ok(()),
        Err(err) => err,
    };
    if err.raw_os_error() != Some(libc::EEXIST) {
        return Err(SetupError::Symlink {
            path: shown.to_owned(),
            source: err,
        });
    }
    match fs::read_link(to) {
        Ok(existing) if existing.as_os_str() == target => Ok(()),
        Ok(existing) => Err(SetupError::SymlinkConflict {
            path: shown.to_owned(),
            existing: existing.into_os_string(),
        }),
        Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {
            Err(SetupError::SymlinkOverNonLink {
                path: shown.to_owned(),
            })
        }
        Err(err) => Err(SetupError::SymlinkUnreadable {
            path: shown.to_owned(),
            source: err,
        }),
    }
}

pub(super) fn mount_fs(kind: &'static str, to: &Path, flags: MsFlags, options: &str) -> Result<()> {
    let data = if options.is_empty() {
        None
    } else {
        Some(options)
    };
    nix::mount::mount(Some(kind), to, Some(kind), flags, data).map_err(|errno| SetupError::Mount {
        kind,
        dest: to.to_path_buf(),
        source: errno.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_like_bubblewraps() {
        let enoent = || io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            SetupError::SourcePath {
                path: "/x".into(),
                source: enoent()
            }
            .to_string(),
            "Can't find source path /x: No such file or directory"
        );
        for (mode, text) in [(0o700, "0700"), (0, "0")] {
            assert_eq!(
                SetupError::Chmod {
                    mode,
                    path: "/y".into(),
                    source: enoent()
                }
                .to_string(),
                format!("Can't chmod {text} /y: No such file or directory")
            );
        }
        assert_eq!(
            SetupError::Bind {
                from: "/oldroot/a".into(),
                to: "/newroot/b".into(),
                source: BindError::Mount(enoent()),
            }
            .to_string(),
            "Can't bind mount /oldroot/a on /newroot/b: Unable to mount source on \
             destination: No such file or directory"
        );
    }
}
