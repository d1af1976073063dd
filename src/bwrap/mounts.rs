//! The private mount tree: a tmpfs root, the setup operations applied to it,
//! then `pivot_root` into it with the host tree detached.
//!
//! Sequence (the security argument, in bubblewrap's order):
//! 1. [`prepare_root`]: make `/` a recursive slave (nothing we mount reaches
//!    the host), mount a tmpfs on `/tmp`, `pivot_root` into it with the old
//!    root at `/oldroot` and the future root at `/newroot`;
//! 2. [`apply_ops`]: each `SetupOp` in command-line order, sources under
//!    `/oldroot`, destinations under `/newroot`;
//! 3. [`finish_root`]: make `/oldroot` private, detach it, and pivot into
//!    `/newroot`, detaching the tmpfs: no path leads back to the host tree.
//!
//! `--dev` lives in `bwrap::dev`.

use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

use super::ops::SetupOp;
use crate::sys::{errno_text, fds};

/// A mount step that failed; `Display` is bubblewrap's wording.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
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
    #[error("{step}: {}", errno_text(.source))]
    Root {
        step: &'static str,
        #[source]
        source: io::Error,
    },
}

pub type Result<T, E = MountError> = std::result::Result<T, E>;

/// What the operations need besides themselves.
pub struct Context {
    /// A new pid namespace exists, so `--proc` can mount a fresh procfs.
    pub new_pid_namespace: bool,
    /// The terminal on stdout, bound to `/dev/console` by `--dev`.
    pub host_tty: Option<PathBuf>,
}

const BASE: &str = "/tmp";

fn root_step(step: &'static str) -> impl FnOnce(nix::errno::Errno) -> MountError {
    move |errno| MountError::Root {
        step,
        source: errno.into(),
    }
}

/// Step 1: slave `/`, tmpfs on `/tmp`, pivot into it.
pub fn prepare_root() -> Result<()> {
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(root_step("Failed to make / slave"))?;
    nix::mount::mount(
        Some("tmpfs"),
        BASE,
        Some("tmpfs"),
        MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
        None::<&str>,
    )
    .map_err(root_step("Failed to mount tmpfs"))?;
    nix::unistd::chdir(BASE).map_err(root_step("chdir base_path"))?;
    mkdir_one(Path::new("newroot"), 0o755).map_err(|source| MountError::Root {
        step: "Creating newroot failed",
        source,
    })?;
    nix::mount::mount(
        Some("newroot"),
        "newroot",
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(root_step("setting up newroot bind"))?;
    mkdir_one(Path::new("oldroot"), 0o755).map_err(|source| MountError::Root {
        step: "Creating oldroot failed",
        source,
    })?;
    nix::unistd::pivot_root(BASE, "oldroot").map_err(root_step("pivot_root"))?;
    nix::unistd::chdir("/").map_err(root_step("chdir / (base path)"))?;
    Ok(())
}

/// Step 3: detach the host tree and make `/newroot` the root.
pub fn finish_root() -> Result<()> {
    nix::mount::mount(
        Some("oldroot"),
        "/oldroot",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(root_step("Failed to make old root rprivate"))?;
    nix::mount::umount2("/oldroot", MntFlags::MNT_DETACH).map_err(root_step("unmount old root"))?;
    nix::unistd::chdir("/newroot").map_err(root_step("chdir /newroot"))?;
    nix::unistd::pivot_root(".", ".").map_err(root_step("pivot_root(/newroot)"))?;
    nix::mount::umount2(".", MntFlags::MNT_DETACH).map_err(root_step("unmount old root"))?;
    nix::unistd::chdir("/").map_err(root_step("chdir /"))?;
    Ok(())
}

/// `/newroot` + a destination as given (relative ones count from `/`).
pub fn newroot_path(dest: &OsStr) -> PathBuf {
    under("/newroot", dest)
}

/// `/oldroot` + an absolute source. A relative source is looked up from the
/// setup tmpfs's root, where (as in bubblewrap) it never exists.
fn oldroot_path(source: &OsStr) -> PathBuf {
    if source.as_bytes().starts_with(b"/") {
        under("/oldroot", source)
    } else {
        PathBuf::from(source)
    }
}

fn under(prefix: &str, path: &OsStr) -> PathBuf {
    let bytes = path.as_bytes();
    let start = bytes.iter().position(|b| *b != b'/').unwrap_or(bytes.len());
    let mut joined = PathBuf::from(prefix);
    if start < bytes.len() {
        joined.push(OsStr::from_bytes(&bytes[start..]));
    }
    joined
}

fn mkdir_one(path: &Path, mode: u32) -> io::Result<()> {
    match fs::DirBuilder::new().mode(mode).create(path) {
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        other => other,
    }
}

/// `mkdir -p`: parents 0755, the last one `mode` (an existing one is kept).
pub fn ensure_dir(path: &Path, mode: u32) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() && !parent.is_dir() {
            ensure_dir(parent, 0o755)?;
        }
    }
    mkdir_one(path, mode)
}

/// An (empty) file to mount on: created if missing, parents as directories.
pub fn ensure_file(path: &Path, mode: u32) -> io::Result<()> {
    if let Ok(meta) = fs::metadata(path) {
        if !meta.is_dir() {
            return Ok(());
        }
    }
    if let Some(parent) = path.parent() {
        ensure_dir(parent, 0o755)?;
    }
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Adds flags to the mount at `path` (and, if `recursive`, every mount below
/// it) without clearing any: locked flags stay, nothing becomes writable.
fn set_mount_flags(path: &Path, attr_set: u64, recursive: bool) -> io::Result<()> {
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: cpath is NUL-terminated, attr is a live, correctly sized
    // mount_attr (its size is passed), both outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            cpath.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ENOSYS) {
        return Err(err);
    }
    remount_each(path, attr_set, recursive)
}

/// Fallback for kernels before 5.12: remount every mount at or below `path`
/// (from mountinfo), keeping the flags it already has.
fn remount_each(path: &Path, attr_set: u64, recursive: bool) -> io::Result<()> {
    let mut targets = vec![path.to_path_buf()];
    if recursive {
        let info = fs::read_to_string("/oldroot/proc/self/mountinfo")
            .or_else(|_| fs::read_to_string("/proc/self/mountinfo"))?;
        for line in info.lines() {
            let Some(point) = line.split(' ').nth(4) else {
                continue;
            };
            let point = PathBuf::from(unescape_mountinfo(point));
            if point != path && point.starts_with(path) {
                targets.push(point);
            }
        }
    }
    for (index, target) in targets.iter().enumerate() {
        let stat = nix::sys::statvfs::statvfs(target.as_path());
        let Ok(stat) = stat else { continue };
        let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT;
        let have = stat.flags();
        use nix::sys::statvfs::FsFlags;
        for (fs_flag, ms_flag) in [
            (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
            (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
            (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
            (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
            (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
            (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
            (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
        ] {
            if have.contains(fs_flag) {
                flags |= ms_flag;
            }
        }
        if attr_set & MOUNT_ATTR_RDONLY != 0 {
            flags |= MsFlags::MS_RDONLY;
        }
        if attr_set & MOUNT_ATTR_NOSUID != 0 {
            flags |= MsFlags::MS_NOSUID;
        }
        if attr_set & MOUNT_ATTR_NODEV != 0 {
            flags |= MsFlags::MS_NODEV;
        }
        match nix::mount::mount(
            None::<&str>,
            target.as_path(),
            None::<&str>,
            flags,
            None::<&str>,
        ) {
            Ok(()) => {}
            // Submounts we cannot see into are skipped, as bubblewrap does.
            Err(nix::errno::Errno::EACCES) if index > 0 => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            if let Ok(value) = u8::from_str_radix(&field[i + 1..i + 4], 8) {
                out.push(value);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Binds `from` on `to` recursively, then nosuid (+ nodev unless `devices`,
/// + read-only if `readonly`) on it and every mount below it.
pub fn bind_mount(from: &Path, to: &Path, readonly: bool, devices: bool) -> io::Result<()> {
    nix::mount::mount(
        Some(from),
        to,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )?;
    let mut attrs = MOUNT_ATTR_NOSUID;
    if !devices {
        attrs |= MOUNT_ATTR_NODEV;
    }
    if readonly {
        attrs |= MOUNT_ATTR_RDONLY;
    }
    set_mount_flags(to, attrs, true)
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
                    return Err(MountError::Source {
                        path: source.clone(),
                        source: source_err,
                    })
                }
            };
            let to = newroot_path(dest);
            make_target(&to, dest, meta.is_dir())?;
            bind_mount(&from, &to, *readonly, *devices).map_err(|err| MountError::Bind {
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
            let source_err = |err| MountError::Source {
                path: display.clone(),
                source: err,
            };
            let meta = fs::metadata(&link).map_err(source_err)?;
            let target = fs::read_link(&link).map_err(source_err)?;
            let from = oldroot_path(target.as_os_str());
            let to = newroot_path(dest);
            make_target(&to, dest, meta.is_dir())?;
            bind_mount(&from, &to, *readonly, false).map_err(|err| MountError::Bind {
                from: display.clone(),
                to: dest.clone(),
                source: err,
            })?;
            let bound = fs::metadata(&to).map_err(|err| MountError::Source {
                path: dest.clone(),
                source: err,
            })?;
            fds::close(*fd);
            if (bound.dev(), bound.ino()) != (meta.dev(), meta.ino()) {
                return Err(MountError::BindFdRace {
                    fd: *fd,
                    path: dest.clone(),
                });
            }
            Ok(())
        }
        SetupOp::RemountRo { dest } => {
            let to = newroot_path(dest);
            let real = fs::canonicalize(&to).map_err(|err| MountError::RemountRoMissing {
                dest: to.clone(),
                source: err,
            })?;
            set_mount_flags(&real, MOUNT_ATTR_RDONLY, false).map_err(|err| MountError::RemountRo {
                dest: to,
                source: err,
            })
        }
        SetupOp::Proc { dest } => mount_proc(dest, ctx),
        SetupOp::Dev { dest } => super::dev::mount_dev(dest, ctx),
        SetupOp::Tmpfs { dest, perms, size } => {
            let to = newroot_path(dest);
            ensure_dir(&to, 0o755).map_err(|err| MountError::Mkdir {
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
            ensure_dir(&to, 0o755).map_err(|err| MountError::Mkdir {
                path: dest.clone(),
                source: err,
            })?;
            mount_fs("mqueue", &to, MsFlags::empty(), "")
        }
        SetupOp::Dir { dest, perms } => {
            let to = newroot_path(dest);
            ensure_dir(&to, perms.unwrap_or(0o755)).map_err(|err| MountError::Mkdir {
                path: dest.clone(),
                source: err,
            })
        }
        SetupOp::Symlink { target, dest } => {
            let to = newroot_path(dest);
            if let Some(parent) = to.parent() {
                ensure_dir(parent, 0o755).map_err(|err| MountError::Mkdir {
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
                Err(err) => Err(MountError::Symlink {
                    path: dest.clone(),
                    source: err,
                }),
            }
        }
        SetupOp::File { fd, dest, perms } => {
            let to = newroot_path(dest);
            write_new_file(&to, dest, *fd, perms.unwrap_or(0o666))
        }
        SetupOp::BindData {
            fd,
            dest,
            readonly,
            perms,
        } => {
            // The data lives on the setup tmpfs, unreachable once pivoted.
            let staging = PathBuf::from(format!("/bind-data-{index}"));
            write_new_file(&staging, dest, *fd, perms.unwrap_or(0o600))?;
            let to = newroot_path(dest);
            make_target(&to, dest, false)?;
            bind_mount(&staging, &to, *readonly, false).map_err(|err| MountError::Bind {
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
                MountError::Chmod {
                    mode: *mode,
                    path: dest.clone(),
                    source: err,
                }
            })
        }
    }
}

fn make_target(to: &Path, dest: &OsStr, is_dir: bool) -> Result<()> {
    if is_dir {
        ensure_dir(to, 0o755).map_err(|err| MountError::Mkdir {
            path: dest.to_owned(),
            source: err,
        })
    } else {
        ensure_file(to, 0o444).map_err(|err| MountError::CreateFile {
            path: dest.to_owned(),
            source: err,
        })
    }
}

/// Creates `to` with `mode` and copies everything from `fd` into it, then
/// closes `fd` (each data fd serves exactly one operation, as in bubblewrap).
fn write_new_file(to: &Path, shown: &OsStr, fd: RawFd, mode: u32) -> Result<()> {
    let result = copy_into_new_file(to, shown, fd, mode);
    fds::close(fd);
    result
}

fn copy_into_new_file(to: &Path, shown: &OsStr, fd: RawFd, mode: u32) -> Result<()> {
    if let Some(parent) = to.parent() {
        ensure_dir(parent, 0o755).map_err(|err| MountError::Mkdir {
            path: parent.as_os_str().to_owned(),
            source: err,
        })?;
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(to)
        .map_err(|err| MountError::CreateDataFile {
            path: shown.to_owned(),
            source: err,
        })?;
    let write_err = |err| MountError::WriteData {
        path: shown.to_owned(),
        source: err,
    };
    let data = fds::read_all(fd).map_err(write_err)?;
    file.write_all(&data).map_err(write_err)?;
    // The umask must not narrow what --perms asked for.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|err| MountError::CreateFile {
            path: shown.to_owned(),
            source: err,
        })
}

fn mount_fs(kind: &'static str, to: &Path, flags: MsFlags, options: &str) -> Result<()> {
    let data = if options.is_empty() {
        None
    } else {
        Some(options)
    };
    nix::mount::mount(Some(kind), to, Some(kind), flags, data).map_err(|errno| MountError::Mount {
        kind,
        dest: to.to_path_buf(),
        source: errno.into(),
    })
}

/// The `/proc` entries that reach kernel-global state, covered read-only by
/// `--proc` (bubblewrap's list).
const PROC_COVERED: [&str; 4] = ["sys", "sysrq-trigger", "irq", "bus"];

/// `--proc`: a fresh procfs in a new pid namespace, the host's bound
/// otherwise (as bubblewrap does); then the entries of [`PROC_COVERED`]
/// bound read-only over themselves, so writes fail with EROFS while reads
/// keep working.
///
/// Unlike bubblewrap, an entry is covered whenever it exists: bubblewrap
/// skips those that `access(W_OK)` reports unwritable, and `/proc/sys` is a
/// mode 0555 directory whose permission check ignores capabilities, so it
/// is always skipped, while its files only check the global euid. A root
/// caller (sandbox uid 0 mapped to host uid 0) could then write any sysctl,
/// `kernel.core_pattern` included.
fn mount_proc(dest: &OsStr, ctx: &Context) -> Result<()> {
    let to = newroot_path(dest);
    ensure_dir(&to, 0o755).map_err(|err| MountError::Mkdir {
        path: dest.to_owned(),
        source: err,
    })?;
    if ctx.new_pid_namespace {
        mount_fs(
            "proc",
            &to,
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV,
            "",
        )?;
    } else {
        bind_mount(Path::new("/oldroot/proc"), &to, false, false).map_err(|err| {
            MountError::Mount {
                kind: "proc",
                dest: to.clone(),
                source: err,
            }
        })?;
    }
    for corner in PROC_COVERED {
        let path = to.join(corner);
        match fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => {
                return Err(MountError::Mount {
                    kind: "proc",
                    dest: path,
                    source: err,
                })
            }
        }
        bind_mount(&path, &path, true, false).map_err(|err| MountError::Bind {
            from: path.as_os_str().to_owned(),
            to: path.as_os_str().to_owned(),
            source: err,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_are_taken_from_the_new_root() {
        assert_eq!(
            newroot_path(OsStr::new("/usr/bin")),
            Path::new("/newroot/usr/bin")
        );
        assert_eq!(
            newroot_path(OsStr::new("relative")),
            Path::new("/newroot/relative")
        );
        assert_eq!(newroot_path(OsStr::new("/")), Path::new("/newroot"));
        assert_eq!(oldroot_path(OsStr::new("//etc")), Path::new("/oldroot/etc"));
    }

    #[test]
    fn errors_read_like_bubblewraps() {
        let enoent = || io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            MountError::Source {
                path: "/x".into(),
                source: enoent()
            }
            .to_string(),
            "Can't find source path /x: No such file or directory"
        );
        assert_eq!(
            MountError::Chmod {
                mode: 0o700,
                path: "/y".into(),
                source: enoent()
            }
            .to_string(),
            "Can't chmod 0700 /y: No such file or directory"
        );
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
    }
}
