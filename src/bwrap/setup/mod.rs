//! The private mount tree: a tmpfs root, the setup operations applied to it,
//! then `pivot_root` into it with the host tree detached.
//!
//! Sequence (the security argument, in bubblewrap's order):
//! 1. [`pivot::prepare_root`]: make `/` a recursive slave (nothing we mount
//!    reaches the host), mount a tmpfs on `/tmp`, `pivot_root` into it with
//!    the old root at `/oldroot` and the future root at `/newroot`;
//! 2. [`apply_ops`]: each `SetupOp` in command-line order, sources under
//!    `/oldroot`, destinations under `/newroot`;
//! 3. [`pivot::finish_root`]: make `/oldroot` private, detach it, and pivot
//!    into `/newroot`, detaching the tmpfs: no path leads back to the host tree.
//!
//! The operations' parts live beside this walk: [`paths`] (where a source or
//! destination is, creating mount points), [`bind`] (bind mounts and their
//! flags), [`data`] (`--file`, `--bind-data`), [`proc`] (`--proc`) and
//! [`dev`] (`--dev`).

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

use super::ops::SetupOp;
use crate::sys::{errno_text, fds};
use bind::bind_mount;
use paths::{ensure_dir, ensure_file, newroot_path, oldroot_path};

/// A mount step that failed; `Display` is bubblewrap's wording.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("Can't find source path {}: {}", .path.to_string_lossy(), errno_text(.source))]
    Source {
        path: OsString,
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
    CreateFile {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't bind mount {} on {}: {}", .from.to_string_lossy(), .to.to_string_lossy(), errno_text(.source))]
    Bind {
        from: OsString,
        to: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't mount {kind} on {}: {}", .dest.display(), errno_text(.source))]
    Mount {
        kind: &'static str,
        dest: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("Can't make symlink at {}: {}", .path.to_string_lossy(), errno_text(.source))]
    Symlink {
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't chmod 0{mode:o} {}: {}", .path.to_string_lossy(), errno_text(.source))]
    Chmod {
        mode: u32,
        path: OsString,
        #[source]
        source: io::Error,
    },
    #[error("Can't remount readonly on {}: {}", .dest.display(), errno_text(.source))]
    RemountRo {
        dest: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("Can't remount readonly on {}: realpath(destination): {}", .dest.display(), errno_text(.source))]
    RemountRoMissing {
        dest: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("Can't create file {}: {}", .path.to_string_lossy(), errno_text(.source))]
    CreateDataFile {
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
    #[error("Race while binding fd {fd} on {}: the mount is not what the fd refers to", .path.to_string_lossy())]
    BindFdRace { fd: RawFd, path: OsString },
}

pub type Result<T, E = SetupError> = std::result::Result<T, E>;

/// What the operations need besides themselves.
pub struct Context {
    /// A new pid namespace exists, so `--proc` can mount a fresh procfs.
    pub new_pid_namespace: bool,
    /// The terminal on stdout, bound to `/dev/console` by `--dev`.
    pub host_tty: Option<PathBuf>,
}

/// Step 2: every setup operation, in order. Fds given to `--file`,
/// `--bind-data`, `--ro-bind-data` and `--bind-fd` are closed once used.
pub fn apply_ops(ops: &[SetupOp], ctx: &Context) -> Result<()> {
    for (index, op) in ops.iter().enumerate() {
        apply_op(op, ctx, index)?;
    }
    Ok(())
}

fn apply_op(op: &SetupOp, ctx: &Context, index: usize) -> Result<()> {
    match op {
        SetupOp::Bind {
            source,
            dest,
            readonly,
            devices,
            allow_missing,
        } => {
            let from = oldroot_path(source);
            let meta = match fs::metadata(&from) {
                Ok(meta) => meta,
                Err(err) if *allow_missing && err.kind() == io::ErrorKind::NotFound => {
                    return Ok(())
                }
                Err(source_err) => {
                    return Err(SetupError::Source {
                        path: source.clone(),
                        source: source_err,
                    })
                }
            };
            let to = newroot_path(dest);
            make_target(&to, dest, meta.is_dir())?;
            bind_mount(&from, &to, *readonly, *devices).map_err(|err| SetupError::Bind {
                from: source.clone(),
                to: dest.clone(),
                source: err,
            })
        }
        SetupOp::BindFd { fd, dest, readonly } => {
            // The fd belongs to the host's mount namespace: bind the path it
            // names, then check the mount is the very file the fd refers to.
            let display = OsString::from(format!("/proc/self/fd/{fd}"));
            let link = PathBuf::from(format!("/oldroot/proc/self/fd/{fd}"));
            let source_err = |err| SetupError::Source {
                path: display.clone(),
                source: err,
            };
            let meta = fs::metadata(&link).map_err(source_err)?;
            let target = fs::read_link(&link).map_err(source_err)?;
            let from = oldroot_path(target.as_os_str());
            let to = newroot_path(dest);
            make_target(&to, dest, meta.is_dir())?;
            bind_mount(&from, &to, *readonly, false).map_err(|err| SetupError::Bind {
                from: display.clone(),
                to: dest.clone(),
                source: err,
            })?;
            let bound = fs::metadata(&to).map_err(|err| SetupError::Source {
                path: dest.clone(),
                source: err,
            })?;
            fds::close(*fd);
            if (bound.dev(), bound.ino()) != (meta.dev(), meta.ino()) {
                return Err(SetupError::BindFdRace {
                    fd: *fd,
                    path: dest.clone(),
                });
            }
            Ok(())
        }
        SetupOp::RemountRo { dest } => {
            let to = newroot_path(dest);
            let real = fs::canonicalize(&to).map_err(|err| SetupError::RemountRoMissing {
                dest: to.clone(),
                source: err,
            })?;
            bind::remount_read_only(&real).map_err(|err| SetupError::RemountRo {
                dest: to,
                source: err,
            })
        }
        SetupOp::Proc { dest } => proc::mount_proc(dest, ctx),
        SetupOp::Dev { dest } => dev::mount_dev(dest, ctx),
        SetupOp::Tmpfs { dest, perms, size } => {
            let to = newroot_path(dest);
            ensure_dir(&to, 0o755).map_err(|err| SetupError::Mkdir {
                path: dest.clone(),
                source: err,
            })?;
            let mut options = format!("mode=0{:o}", perms.unwrap_or(0o755));
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
        SetupOp::Mqueue { dest } => {
            let to = newroot_path(dest);
            ensure_dir(&to, 0o755).map_err(|err| SetupError::Mkdir {
                path: dest.clone(),
                source: err,
            })?;
            mount_fs("mqueue", &to, MsFlags::empty(), "")
        }
        SetupOp::Dir { dest, perms } => {
            let to = newroot_path(dest);
            ensure_dir(&to, perms.unwrap_or(0o755)).map_err(|err| SetupError::Mkdir {
                path: dest.clone(),
                source: err,
            })
        }
        SetupOp::Symlink { target, dest } => {
            let to = newroot_path(dest);
            if let Some(parent) = to.parent() {
                ensure_dir(parent, 0o755).map_err(|err| SetupError::Mkdir {
                    path: parent.as_os_str().to_owned(),
                    source: err,
                })?;
            }
            match std::os::unix::fs::symlink(target, &to) {
                Ok(()) => Ok(()),
                // The same link twice is fine; anything else in the way is not.
                Err(err)
                    if err.kind() == io::ErrorKind::AlreadyExists
                        && fs::read_link(&to).ok().as_deref() == Some(Path::new(target)) =>
                {
                    Ok(())
                }
                Err(err) => Err(SetupError::Symlink {
                    path: dest.clone(),
                    source: err,
                }),
            }
        }
        SetupOp::File { fd, dest, perms } => {
            let to = newroot_path(dest);
            data::write_new_file(&to, dest, *fd, perms.unwrap_or(0o666))
        }
        SetupOp::BindData {
            fd,
            dest,
            readonly,
            perms,
        } => {
            // The data lives on the setup tmpfs, unreachable once pivoted.
            let staging = PathBuf::from(format!("/bind-data-{index}"));
            data::write_new_file(&staging, dest, *fd, perms.unwrap_or(0o600))?;
            let to = newroot_path(dest);
            make_target(&to, dest, false)?;
            bind_mount(&staging, &to, *readonly, false).map_err(|err| SetupError::Bind {
                from: staging.as_os_str().to_owned(),
                to: dest.clone(),
                source: err,
            })?;
            // Like bubblewrap: the bound file keeps no name on the tmpfs.
            let _ = fs::remove_file(&staging);
            Ok(())
        }
        SetupOp::Chmod { dest, mode } => {
            let to = newroot_path(dest);
            fs::set_permissions(&to, fs::Permissions::from_mode(*mode)).map_err(|err| {
                SetupError::Chmod {
                    mode: *mode,
                    path: dest.clone(),
                    source: err,
                }
            })
        }
    }
}

pub(super) fn make_target(to: &Path, dest: &OsStr, is_dir: bool) -> Result<()> {
    if is_dir {
        ensure_dir(to, 0o755).map_err(|err| SetupError::Mkdir {
            path: dest.to_owned(),
            source: err,
        })
    } else {
        ensure_file(to, 0o444).map_err(|err| SetupError::CreateFile {
            path: dest.to_owned(),
            source: err,
        })
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
            SetupError::Source {
                path: "/x".into(),
                source: enoent()
            }
            .to_string(),
            "Can't find source path /x: No such file or directory"
        );
        assert_eq!(
            SetupError::Chmod {
                mode: 0o700,
                path: "/y".into(),
                source: enoent()
            }
            .to_string(),
            "Can't chmod 0700 /y: No such file or directory"
        );
    }
}
