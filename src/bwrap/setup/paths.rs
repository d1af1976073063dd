//! Where an operation's paths are during setup (sources under `/oldroot`,
//! destinations under `/newroot`) and how mount points and their parents are
//! created there, with bubblewrap's modes.
//!
//! The setup runs with umask 0 (as bubblewrap's does), so every mode here is
//! the mode the file gets. Paths are handled as bytes, the way bubblewrap's C
//! string handling sees them, not normalised by [`Path`].

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// `/newroot/` + a destination without its leading slashes (relative ones
/// count from `/`), as bubblewrap's `get_newroot_path`.
pub fn newroot_path(dest: &OsStr) -> PathBuf {
    under(b"/newroot/", dest)
}

/// `/oldroot/` + a (resolved, absolute) source, as `get_oldroot_path`.
pub fn oldroot_path(source: &OsStr) -> PathBuf {
    under(b"/oldroot/", source)
}

fn under(prefix: &[u8], path: &OsStr) -> PathBuf {
    let bytes = path.as_bytes();
    let start = bytes.iter().position(|b| *b != b'/').unwrap_or(bytes.len());
    let mut joined = prefix.to_vec();
    joined.extend_from_slice(bytes.get(start..).unwrap_or_default());
    PathBuf::from(OsString::from_vec(joined))
}

/// The mode of the parents created for an operation whose own mode is
/// `perms` (0 for options without `--perms`): 0755 without the group's
/// bits when the group gets nothing, without the others' when they get
/// nothing, as bubblewrap does.
pub fn parent_mode(perms: u32) -> u32 {
    let mut mode = 0o755;
    if perms & 0o070 == 0 {
        mode &= !0o050;
    }
    if perms & 0o007 == 0 {
        mode &= !0o005;
    }
    mode
}

/// Makes sure `path` is a directory (following symlinks): created with
/// `mode` if missing, ENOTDIR if something else is there.
pub fn ensure_dir(path: &Path, mode: u32) -> io::Result<()> {
    if let Ok(meta) = fs::metadata(path) {
        if meta.is_dir() {
            return Ok(());
        }
        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
    }
    match fs::DirBuilder::new().mode(mode).create(path) {
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Every directory on the way to `path` (and `path` itself with
/// `create_last`), each with [`ensure_dir`] and `mode`. Walks the bytes as
/// bubblewrap's `mkdir_with_parents` does: repeated slashes are one
/// separator, and a trailing slash makes the last name a parent too.
pub fn mkdir_with_parents(path: &Path, mode: u32, create_last: bool) -> io::Result<()> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut index = bytes.iter().position(|b| *b != b'/').unwrap_or(bytes.len());
    loop {
        let end = bytes
            .get(index..)
            .and_then(|rest| rest.iter().position(|b| *b == b'/'))
            .map(|offset| index + offset);
        if end.is_none() && !create_last {
            return Ok(());
        }
        let prefix = bytes.get(..end.unwrap_or(bytes.len())).unwrap_or(bytes);
        ensure_dir(Path::new(OsStr::from_bytes(prefix)), mode)?;
        let Some(end) = end else {
            return Ok(());
        };
        index = end;
        while bytes.get(index) == Some(&b'/') {
            index += 1;
        }
    }
}

/// Creates (or truncates) a regular file with `mode`, as `creat` does.
pub fn create_file(path: &Path, mode: u32) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
}

/// A mount point for a non-directory: anything but a directory that is
/// already there will do; otherwise a new empty file with `mode` (through a
/// dangling symlink, its target). A directory in the way is an error.
pub fn ensure_file(path: &Path, mode: u32) -> io::Result<()> {
    if fs::metadata(path).is_ok_and(|meta| !meta.is_dir()) {
        return Ok(());
    }
    match create_file(path, mode) {
        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => Err(err),
        _ => Ok(()),
    }
}

/// A mode as C's `%#o` prints it: `0` for zero, a leading 0 otherwise.
pub fn c_octal(mode: u32) -> String {
    if mode == 0 {
        "0".to_owned()
    } else {
        format!("0{mode:o}")
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
        assert_eq!(
            newroot_path(OsStr::new("/")).as_os_str(),
            OsStr::new("/newroot/")
        );
        assert_eq!(oldroot_path(OsStr::new("//etc")), Path::new("/oldroot/etc"));
    }

    #[test]
    fn parents_lose_what_the_operation_withholds() {
        assert_eq!(parent_mode(0o755), 0o755);
        assert_eq!(parent_mode(0o700), 0o700);
        assert_eq!(parent_mode(0o640), 0o750);
        assert_eq!(parent_mode(0o604), 0o705);
        // Operations without --perms count as 0: parents are 0700.
        assert_eq!(parent_mode(0), 0o700);
    }

    #[test]
    fn modes_print_like_c() {
        assert_eq!(c_octal(0), "0");
        assert_eq!(c_octal(0o700), "0700");
        assert_eq!(c_octal(0o1777), "01777");
    }

    #[test]
    fn parents_are_created_one_name_at_a_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().as_os_str().as_bytes().to_vec();
        let with = |tail: &str| {
            let mut path = base.clone();
            path.extend_from_slice(tail.as_bytes());
            PathBuf::from(OsString::from_vec(path))
        };
        mkdir_with_parents(&with("/a//b/c"), 0o700, false).expect("parents");
        assert!(with("/a/b").is_dir());
        assert!(!with("/a/b/c").exists());
        // A trailing slash makes the last name a parent.
        mkdir_with_parents(&with("/x/"), 0o700, false).expect("trailing slash");
        assert!(with("/x").is_dir());
        mkdir_with_parents(&with("/y/z"), 0o700, true).expect("create last");
        assert!(with("/y/z").is_dir());
        fs::write(with("/file"), "").expect("file");
        let err = mkdir_with_parents(&with("/file/sub"), 0o700, true).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR));
    }
}
