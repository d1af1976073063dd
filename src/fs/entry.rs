//! Naming one directory entry by path, the way the entry-changing operations
//! (`fs/remove`, the destination of `fs/copy`) reach it: the path is split
//! into its parent directory and its last component; the parent is resolved
//! by the kernel (symlinks followed, `..` physical) and opened once; the last
//! component is then only ever used relative to that descriptor, with the
//! `*at` calls and without following a symlink. Nothing here acts on the
//! entry; [`super::remove`] and [`super::copy`] do.
//!
//! Paths whose last component cannot be acted on are refused here: `/`, a
//! last component `.` or `..`. A trailing `/` is remembered: it makes the
//! path name a directory, so on a symlink it names the link's target and
//! the callers refuse it rather than act on what the link points to.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::fcntl::{openat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstatat, FileStat, Mode, SFlag};

use super::error::{FsError, Result};

/// The kind of a directory entry, from `lstat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Directory,
    File,
    Symlink,
    /// FIFO, socket, device.
    Special,
}

impl EntryKind {
    /// The kind encoded in `st_mode`.
    pub fn of(stat: &FileStat) -> Self {
        match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => EntryKind::Directory,
            SFlag::S_IFREG => EntryKind::File,
            SFlag::S_IFLNK => EntryKind::Symlink,
            _ => EntryKind::Special,
        }
    }
}

/// An absolute path split into the directory that holds the entry and the
/// entry's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryPath {
    /// The path as requested, for messages.
    pub path: PathBuf,
    /// Everything before the last component (`/` at the top).
    pub parent: PathBuf,
    /// The last component: never empty, `.` or `..`, never contains `/`.
    pub name: OsString,
    /// Whether the path ended in one or more `/`.
    pub trailing_slash: bool,
}

impl EntryPath {
    /// Splits `path` for method `op` (named in messages, e.g. `fs/remove`).
    pub fn parse(path: &Path, op: &'static str) -> Result<Self> {
        let bytes = path.as_os_str().as_bytes();
        let end = bytes
            .iter()
            .rposition(|&b| b != b'/')
            .map_or(0, |last| last + 1);
        if end == 0 {
            return Err(FsError::RootDirectory {
                op,
                path: path.to_path_buf(),
            });
        }
        let trimmed = bytes.get(..end).unwrap_or_default();
        let (parent, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(slash) => (
                trimmed.get(..slash).unwrap_or_default(),
                trimmed.get(slash + 1..).unwrap_or_default(),
            ),
            // Not absolute: resolved against the current directory, as the
            // kernel would (wire paths are always absolute).
            None => (&b"."[..], trimmed),
        };
        if name == b"." || name == b".." {
            return Err(FsError::DotComponent {
                op,
                path: path.to_path_buf(),
            });
        }
        let parent = if parent.is_empty() { &b"/"[..] } else { parent };
        Ok(Self {
            path: path.to_path_buf(),
            parent: PathBuf::from(OsStr::from_bytes(parent)),
            name: OsStr::from_bytes(name).to_os_string(),
            trailing_slash: end < bytes.len(),
        })
    }

    /// The path of the entry without the trailing `/` (the link itself when
    /// the entry is a symlink).
    pub fn without_trailing_slash(&self) -> PathBuf {
        self.parent.join(&self.name)
    }

    /// Opens the parent directory (`O_PATH`: enough for the `*at` calls,
    /// and needs no read permission on it, like `rm`).
    pub fn open_parent(&self) -> io::Result<OwnedFd> {
        open_directory_path(&self.parent)
    }
}

/// Opens a directory by path for use as the base of `*at` calls.
pub fn open_directory_path(path: &Path) -> io::Result<OwnedFd> {
    Ok(openat(
        AT_FDCWD,
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens directory `name` of `dir` for reading its entries, never following
/// a symlink (`ELOOP` or `ENOTDIR` when `name` is not a directory).
pub fn open_child_dir<Fd: AsFd, P: ?Sized + nix::NixPath>(dir: Fd, name: &P) -> nix::Result<Dir> {
    Dir::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// `lstat` of `name` in `dir`.
pub fn lstat_at<Fd: AsFd, P: ?Sized + nix::NixPath>(dir: Fd, name: &P) -> io::Result<FileStat> {
    Ok(fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)?)
}

/// The device and inode of an open file: its identity.
pub fn identity(stat: &FileStat) -> (u64, u64) {
    (stat.st_dev, stat.st_ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EntryPath> {
        EntryPath::parse(Path::new(text), "fs/remove")
    }

    #[test]
    fn a_path_splits_into_parent_and_last_component() {
        let entry = parse("/x/y/link").unwrap();
        assert_eq!(entry.parent, Path::new("/x/y"));
        assert_eq!(entry.name, "link");
        assert!(!entry.trailing_slash);
        let entry = parse("/top").unwrap();
        assert_eq!(entry.parent, Path::new("/"));
        assert_eq!(entry.name, "top");
    }

    #[test]
    fn trailing_slashes_are_remembered_and_dropped_from_the_name() {
        let entry = parse("/x/link//").unwrap();
        assert_eq!(
            (entry.parent.as_path(), entry.name.as_os_str()),
            (Path::new("/x"), OsStr::new("link"))
        );
        assert!(entry.trailing_slash);
        assert_eq!(entry.without_trailing_slash(), Path::new("/x/link"));
    }

    #[test]
    fn parents_keep_dot_dot_for_the_kernel_to_resolve() {
        let entry = parse("/x/link/../victim").unwrap();
        assert_eq!(entry.parent, Path::new("/x/link/.."));
        assert_eq!(entry.name, "victim");
    }

    #[test]
    fn root_and_dot_components_are_refused_naming_the_path() {
        for root in ["/", "//", "///"] {
            assert!(matches!(parse(root), Err(FsError::RootDirectory { .. })));
        }
        for dot in ["/x/link/.", "/x/link/./", "/x/..", "/x/../", "/.", "/.."] {
            let err = parse(dot).unwrap_err();
            assert!(matches!(err, FsError::DotComponent { .. }), "{dot}");
            assert_eq!(
                err.to_string(),
                format!("fs/remove refuses `{dot}`: its last component is `.` or `..`")
            );
            assert_eq!(err.code(), -32600);
        }
        // `..` or `.` inside a name is just a name.
        assert_eq!(parse("/x/..a").unwrap().name, "..a");
        assert_eq!(parse("/x/.a.").unwrap().name, ".a.");
    }
}
