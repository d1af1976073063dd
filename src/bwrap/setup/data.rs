//! `--file`, `--bind-data` and `--ro-bind-data`: files filled from an fd.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::fd::RawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::paths::ensure_dir;
use super::{Result, SetupError};
use crate::sys::fds;

/// Creates `to` with `mode` and copies everything from `fd` into it, then
/// closes `fd` (each data fd serves exactly one operation, as in bubblewrap).
pub fn write_new_file(to: &Path, shown: &OsStr, fd: RawFd, mode: u32) -> Result<()> {
    let result = copy_into_new_file(to, shown, fd, mode);
    fds::close(fd);
    result
}

fn copy_into_new_file(to: &Path, shown: &OsStr, fd: RawFd, mode: u32) -> Result<()> {
    if let Some(parent) = to.parent() {
        ensure_dir(parent, 0o755).map_err(|err| SetupError::Mkdir {
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
        .map_err(|err| SetupError::CreateDataFile {
            path: shown.to_owned(),
            source: err,
        })?;
    let write_err = |err| SetupError::WriteData {
        path: shown.to_owned(),
        source: err,
    };
    let data = fds::read_all(fd).map_err(write_err)?;
    file.write_all(&data).map_err(write_err)?;
    // The umask must not narrow what --perms asked for.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|err| SetupError::CreateFile {
            path: shown.to_owned(),
            source: err,
        })
}
