//! Bind mounts and their flags: recursive binds made nosuid (and nodev,
//! read-only as asked) on every submount, and `--remount-ro`.
//!
//! Flags are only ever added, never cleared: a flag the kernel locked stays,
//! nothing becomes writable. [`BindError`] says which step failed in
//! bubblewrap's words (its `bind_mount_result`).

use std::ffi::{CString, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::mount_strerror;
use crate::sys::errno_text;

/// The step of a bind mount that failed; `Display` is what bubblewrap
/// prints after `Can't bind mount A on B: `.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("Unable to mount source on destination: {}", mount_strerror(.0))]
    Mount(#[source] io::Error),
    #[error("realpath(destination): {}", errno_text(.0))]
    RealpathDest(#[source] io::Error),
    #[error("Unable to remount destination \"{}\" with correct flags: {}", .path.display(), mount_strerror(.source))]
    RemountDest {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("Unable to apply mount flags: remount \"{}\": {}", .path.display(), mount_strerror(.source))]
    RemountSubmount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What a bind may keep of its source's abilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BindFlags {
    pub readonly: bool,
    /// Device nodes stay usable (no nodev).
    pub devices: bool,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// `struct mount_attr`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Binds `from` on `to` recursively, then nosuid (+ nodev unless `devices`,
/// + read-only if `readonly`) on it and every mount below it.
pub fn bind_mount(from: &Path, to: &Path, flags: BindFlags) -> Result<(), BindError> {
    nix::mount::mount(
        Some(from),
        to,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|errno| BindError::Mount(errno.into()))?;
    let mut attrs = MOUNT_ATTR_NOSUID;
    if !flags.devices {
        attrs |= MOUNT_ATTR_NODEV;
    }
    if flags.readonly {
        attrs |= MOUNT_ATTR_RDONLY;
    }
    set_mount_flags(to, attrs, true)
}

/// `--remount-ro`: adds read-only to the one mount at `path` (after
/// resolving it, as the kernel would).
pub fn remount_read_only(path: &Path) -> Result<(), BindError> {
    let real = fs::canonicalize(path).map_err(BindError::RealpathDest)?;
    set_mount_flags(&real, MOUNT_ATTR_RDONLY, false)
}

/// Adds flags to the mount at `path` (and, if `recursive`, every mount below
/// it) without clearing any.
fn set_mount_flags(path: &Path, attr_set: u64, recursive: bool) -> Result<(), BindError> {
    let remount_dest = |source| BindError::RemountDest {
        path: path.to_path_buf(),
        source,
    };
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| remount_dest(io::Error::from_raw_os_error(libc::EINVAL)))?;
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
        return Err(remount_dest(err));
    }
    remount_each(path, attr_set, recursive)
}

/// Fallback for kernels before 5.12, bubblewrap's way: remount every mount
/// at or below `path` (from mountinfo), keeping the flags it already has.
fn remount_each(path: &Path, attr_set: u64, recursive: bool) -> Result<(), BindError> {
    remount_keeping_flags(path, attr_set).map_err(|source| BindError::RemountDest {
        path: path.to_path_buf(),
        source,
    })?;
    if !recursive {
        return Ok(());
    }
    let info = fs::read("/oldroot/proc/self/mountinfo")
        .or_else(|_| fs::read("/proc/self/mountinfo"))
        .map_err(|source| BindError::RemountDest {
            path: path.to_path_buf(),
            source,
        })?;
    for point in submounts(&info, path) {
        match remount_keeping_flags(&point, attr_set) {
            // Submounts we cannot see into are skipped, as bubblewrap does.
            Err(err) if err.raw_os_error() == Some(libc::EACCES) => {}
            Err(source) => {
                return Err(BindError::RemountSubmount {
                    path: point,
                    source,
                })
            }
            Ok(()) => {}
        }
    }
    Ok(())
}

/// The mount points listed in `mountinfo` strictly below `path`.
fn submounts(mountinfo: &[u8], path: &Path) -> Vec<PathBuf> {
    mountinfo
        .split(|byte| *byte == b'\n')
        .filter_map(|line| line.split(|byte| *byte == b' ').nth(4))
        .map(|field| PathBuf::from(OsString::from_vec(unescape_mountinfo(field))))
        .filter(|point| point != path && point.starts_with(path))
        .collect()
}

fn remount_keeping_flags(target: &Path, attr_set: u64) -> io::Result<()> {
    use nix::sys::statvfs::FsFlags;
    let have = nix::sys::statvfs::statvfs(target)?.flags();
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT;
    for (fs_flag, ms_flag) in [
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        // No relatime entry: nix knows ST_RELATIME only with glibc (with musl
        // it drops the bit), and none is needed: a remount with no atime flag
        // keeps the mount's, and one with only MS_NODIRATIME gets relatime,
        // the kernel's default without MS_NOATIME or MS_STRICTATIME.
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
    ] {
        if have.contains(fs_flag) {
            flags |= ms_flag;
        }
    }
    for (attr, ms_flag) in [
        (MOUNT_ATTR_RDONLY, MsFlags::MS_RDONLY),
        (MOUNT_ATTR_NOSUID, MsFlags::MS_NOSUID),
        (MOUNT_ATTR_NODEV, MsFlags::MS_NODEV),
    ] {
        if attr_set & attr != 0 {
            flags |= ms_flag;
        }
    }
    nix::mount::mount(None::<&str>, target, None::<&str>, flags, None::<&str>)?;
    Ok(())
}

/// Decodes mountinfo's `\ooo` escapes (space, tab, newline, backslash).
fn unescape_mountinfo(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut rest = field;
    while let Some((first, tail)) = rest.split_first() {
        if *first == b'\\' {
            if let Some(value) = tail
                .get(..3)
                .and_then(|digits| std::str::from_utf8(digits).ok())
                .and_then(|digits| u8::from_str_radix(digits, 8).ok())
            {
                out.push(value);
                rest = tail.get(3..).unwrap_or_default();
                continue;
            }
        }
        out.push(*first);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(b"/a\\040b"), b"/a b");
        assert_eq!(unescape_mountinfo(b"/a\\x"), b"/a\\x");
        assert_eq!(unescape_mountinfo(b"/\xff\\134"), b"/\xff\\");
    }

    #[test]
    fn submounts_are_those_strictly_below() {
        let info = b"1 0 8:1 / / rw - ext4 x rw\n\
                     2 1 8:2 / /newroot/a rw - ext4 x rw\n\
                     3 2 8:3 / /newroot/a/b\\040c rw - ext4 x rw\n\
                     4 1 8:4 / /newroot/ab rw - ext4 x rw\n";
        assert_eq!(
            submounts(info, Path::new("/newroot/a")),
            vec![PathBuf::from("/newroot/a/b c")]
        );
    }

    #[test]
    fn failures_read_like_bubblewraps() {
        let err = BindError::Mount(io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(
            err.to_string(),
            "Unable to mount source on destination: No such file or directory"
        );
        let err = BindError::Mount(io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(err.to_string().contains("Limit exceeded (ENOSPC)"));
    }
}
