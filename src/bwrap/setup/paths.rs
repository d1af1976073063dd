//! Where an operation's paths are during setup (sources under `/oldroot`,
//! destinations under `/newroot`) and how mount points are created there.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// `/newroot` + a destination as given (relative ones count from `/`).
pub fn newroot_path(dest: &OsStr) -> PathBuf {
    under("/newroot", dest)
}

/// `/oldroot` + an absolute source. A relative source is looked up from the
/// setup tmpfs's root, where (as in bubblewrap) it never exists.
pub fn oldroot_path(source: &OsStr) -> PathBuf {
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

pub fn mkdir_one(path: &Path, mode: u32) -> io::Result<()> {
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
}
