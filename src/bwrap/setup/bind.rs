//! Bind mounts and their flags: recursive binds made nosuid (and nodev,
//! read-only as asked) on every submount, and `--remount-ro`.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

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

/// `--remount-ro`: adds read-only to the one mount at `path`.
pub fn remount_read_only(path: &Path) -> io::Result<()> {
    set_mount_flags(path, MOUNT_ATTR_RDONLY, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
    }
}
