//! `--file`, `--bind-data` and `--ro-bind-data`: files filled from an fd,
//! each fd read to its end and closed (every data fd serves one operation,
//! as in bubblewrap).

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::fd::RawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::bind::{bind_mount, BindFlags};
use super::paths::{create_file, ensure_file};
use super::{Result, SetupError};
use crate::sys::fds;

/// `--file`: `creat(to, mode)` (an existing file is truncated and keeps its
/// mode) filled from `fd`.
pub fn write_file(fd: RawFd, to: &Path, shown: &OsStr, mode: u32) -> Result<()> {
    let file = create_file(to, mode).map_err(|err| SetupError::CreateFile {
        path: shown.to_owned(),
        source: err,
    })?;
    copy_from(fd, file, shown)
}

/// `--bind-data`/`--ro-bind-data`: the data goes to a file on the setup
/// tmpfs (unreachable once pivoted), which is bound on `to` and unlinked.
pub fn bind_data(
    fd: RawFd,
    to: &Path,
    shown: &OsStr,
    mode: u32,
    readonly: bool,
    index: usize,
) -> Result<()> {
    let staging = PathBuf::from(format!("/bindfile{index:06}"));
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&staging)
        .map_err(|err| SetupError::CreateTmpfile {
            path: shown.to_owned(),
            source: err,
        })?;
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|err| SetupError::SetMode {
            mode,
            path: shown.to_owned(),
            source: err,
        })?;
    copy_from(fd, file, shown)?;
    ensure_file(to, 0o444).map_err(|err| SetupError::MountPointFile {
        path: shown.to_owned(),
        source: err,
    })?;
    let flags = BindFlags {
        readonly,
        devices: false,
    };
    bind_mount(&staging, to, flags).map_err(|err| SetupError::Bind {
        from: staging.clone(),
        to: to.to_path_buf(),
        source: err,
    })?;
    // The bound file keeps no name on the tmpfs; the tmpfs itself is
    // detached at the end of setup, so a failure here leaves nothing
    // reachable and is ignored, as bubblewrap ignores it.
    let _ = fs::remove_file(&staging);
    Ok(())
}

/// Copies everything from `fd` into `file`, then closes `fd`.
fn copy_from(fd: RawFd, mut file: fs::File, shown: &OsStr) -> Result<()> {
    let write_err = |err| SetupError::WriteData {
        path: shown.to_owned(),
        source: err,
    };
    let data = fds::read_all(fd).map_err(write_err)?;
    file.write_all(&data).map_err(write_err)?;
    fds::close(fd);
    Ok(())
}
