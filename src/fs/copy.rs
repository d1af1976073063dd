//! `fs/copy` (docs/filesystem.md), made so that it never writes through a
//! symlink it did not create.
//!
//! The source is looked at with `lstat` (a trailing `/` makes the kernel
//! follow a final symlink, as for any path): a symlink is recreated with the
//! same target, a regular file copied with its permission bits, a directory
//! copied recursively. The destination is an [`EntryPath`]: its parent is
//! resolved by the kernel (created when missing for a directory copy, as the
//! reference does), and every entry the copy creates or overwrites is
//! reached relative to the descriptor of the directory holding it, with
//! `O_NOFOLLOW`: a symlink found where the copy would write (the destination
//! itself, or planted anywhere inside a destination tree that is merged
//! into) is refused with ‑32600, never followed. Existing directories are
//! merged into and existing regular files overwritten in place (like `cp`).
//! The source tree is walked the same way, so the copy never leaves it.
//!
//! A directory cannot be copied into itself: the destination's deepest
//! existing directory and its physical ancestors (`..`) are compared with
//! the source by device and inode, and the walk skips the directory it is
//! writing into.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, OFlag, AT_FDCWD};
use nix::sys::stat::{fstat, mkdirat, Mode};
use nix::unistd::symlinkat;

use super::entry::{identity, lstat_at, open_child_dir, open_directory_path, EntryKind, EntryPath};
use super::error::{FsError, Result};
use crate::protocol::fs::{CopyParams, EmptyResponse};

/// The operation's name in messages about the destination.
const OP: &str = "fs/copy";

/// Physical ancestors looked at before giving up on reaching `/`.
const MAX_ANCESTORS: usize = 4096;

/// `fs/copy`: files, symlinks (recreated with the same target) and, with
/// `recursive`, directory trees (special files inside are skipped).
pub fn copy(params: &CopyParams) -> Result<EmptyResponse> {
    let source = params.source_path.path();
    let destination = EntryPath::parse(params.destination_path.path(), OP)?;
    match EntryKind::of(&nix::sys::stat::lstat(source).map_err(io::Error::from)?) {
        EntryKind::Directory => {
            if !params.recursive {
                return Err(FsError::InvalidRequest(
                    "fs/copy requires recursive: true when sourcePath is a directory".into(),
                ));
            }
            // `O_NOFOLLOW`: a source swapped for a symlink since the `lstat`
            // fails (a trailing `/` still follows, as it did for `lstat`).
            let source_dir = open_dir(AT_FDCWD, source)?;
            copy_tree(source_dir, &destination)?;
        }
        EntryKind::Symlink => {
            refuse_trailing_slash(&destination)?;
            let target = fs::read_link(source)?;
            let parent = destination.open_parent()?;
            symlinkat(target.as_path(), &parent, destination.name.as_os_str())?;
        }
        EntryKind::File => {
            refuse_trailing_slash(&destination)?;
            let Some(file) = open_source_file(AT_FDCWD, source)? else {
                return Err(special_source());
            };
            let parent = destination.open_parent()?;
            copy_file(
                &file,
                &parent,
                &destination.name,
                &destination.without_trailing_slash(),
            )?;
        }
        EntryKind::Special => return Err(special_source()),
    }
    Ok(EmptyResponse {})
}

fn special_source() -> FsError {
    FsError::InvalidRequest("fs/copy only supports regular files, directories, and symlinks".into())
}

/// A file or symlink cannot be copied to a path that names a directory.
fn refuse_trailing_slash(destination: &EntryPath) -> Result<()> {
    if destination.trailing_slash {
        return Err(FsError::TrailingSlash {
            op: OP,
            path: destination.path.clone(),
        });
    }
    Ok(())
}

fn symlink_in_the_way(path: &Path) -> FsError {
    FsError::SymlinkInTheWay {
        op: OP,
        path: path.to_path_buf(),
    }
}

/// [`open_child_dir`] with an I/O error.
fn open_dir<Fd: AsFd, P: ?Sized + nix::NixPath>(dir: Fd, name: &P) -> io::Result<Dir> {
    Ok(open_child_dir(dir, name)?)
}

/// Opens regular file `name` of `dir` for reading without following a
/// symlink or blocking on a FIFO; `None` when it is not a regular file.
fn open_source_file<Fd: AsFd, P: ?Sized + nix::NixPath>(
    dir: Fd,
    name: &P,
) -> io::Result<Option<File>> {
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    Ok(file.metadata()?.is_file().then_some(file))
}

/// Copies `source` to `name` in `dir` (created, or an existing regular file
/// overwritten in place) with the source's permission bits. `path` is the
/// destination's path for messages.
fn copy_file<Fd: AsFd>(source: &File, dir: Fd, name: &OsStr, path: &Path) -> Result<()> {
    let fd = match openat(
        dir,
        name,
        OFlag::O_WRONLY
            | OFlag::O_CREAT
            | OFlag::O_TRUNC
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    ) {
        Ok(fd) => fd,
        Err(Errno::ELOOP) => return Err(symlink_in_the_way(path)),
        Err(errno) => return Err(io::Error::from(errno).into()),
    };
    let mut destination = File::from(fd);
    if !destination.metadata()?.is_file() {
        return Err(super::ops::not_a_file(path));
    }
    let permissions = source.metadata()?.permissions();
    io::copy(&mut &*source, &mut destination)?;
    destination.set_permissions(fs::Permissions::from_mode(permissions.mode() & 0o7777))?;
    Ok(())
}

/// Whether directory `dir`, or one of its physical ancestors, is the
/// directory with `id`.
fn is_within(dir: OwnedFd, id: (u64, u64)) -> io::Result<bool> {
    let mut dir = dir;
    for _ in 0..MAX_ANCESTORS {
        let here = identity(&fstat(&dir)?);
        if here == id {
            return Ok(true);
        }
        let up = openat(
            &dir,
            "..",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        if identity(&fstat(&up)?) == here {
            return Ok(false);
        }
        dir = up;
    }
    Err(io::Error::from(Errno::ELOOP))
}

/// The deepest existing directory on the way to `path`.
fn deepest_existing_directory(path: &Path) -> io::Result<OwnedFd> {
    let mut cursor = path.to_path_buf();
    loop {
        match open_directory_path(&cursor) {
            Ok(fd) => return Ok(fd),
            Err(err) if !cursor.pop() => return Err(err),
            Err(_) => {}
        }
    }
}

fn refuse_copy_into_itself() -> FsError {
    FsError::InvalidRequest(
        "fs/copy cannot copy a directory to itself or one of its descendants".into(),
    )
}

/// One directory being copied: the source's remaining entries, both
/// directories open, and where the destination is (for messages).
struct Level {
    source: Dir,
    destination: Dir,
    path: PathBuf,
    entries: std::vec::IntoIter<OsString>,
}

fn copy_tree(mut source: Dir, destination: &EntryPath) -> Result<()> {
    let source_id = identity(&fstat(&source)?);
    if is_within(deepest_existing_directory(&destination.parent)?, source_id)? {
        return Err(refuse_copy_into_itself());
    }
    // Missing parents are created, as the reference's `create_dir_all` does.
    let parent = match destination.open_parent() {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            super::ops::create_directory_all(&destination.parent)?;
            destination.open_parent()?
        }
        other => other?,
    };
    let path = destination.without_trailing_slash();
    let name = destination.name.as_os_str();
    match lstat_at(&parent, name) {
        Ok(stat) if identity(&stat) == source_id => return Err(refuse_copy_into_itself()),
        Ok(stat) => match EntryKind::of(&stat) {
            EntryKind::Directory => {}
            EntryKind::Symlink if destination.trailing_slash => {
                return Err(FsError::ThroughSymlink {
                    op: OP,
                    path: destination.path.clone(),
                    link: path,
                })
            }
            EntryKind::Symlink => return Err(symlink_in_the_way(&path)),
            _ => return Err(io::Error::from(Errno::EEXIST).into()),
        },
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err.into()),
    }
    let destination_dir = directory_to_fill(&parent, name, &path)?;
    let destination_id = identity(&fstat(&destination_dir)?);
    let entries = sorted_entries(&mut source)?;
    let mut stack = vec![Level {
        source,
        destination: destination_dir,
        path,
        entries,
    }];
    while let Some(level) = stack.last_mut() {
        let Some(name) = level.entries.next() else {
            stack.pop();
            continue;
        };
        if let Some(child) = copy_entry(level, &name, destination_id)? {
            stack.push(child);
        }
    }
    Ok(())
}

/// Directory `name` of `parent` (shown as `path`), made when missing or
/// merged into when it exists; a symlink or anything else there is
/// refused, never followed.
fn directory_to_fill<Fd: AsFd + Copy>(parent: Fd, name: &OsStr, path: &Path) -> Result<Dir> {
    match mkdirat(parent, name, Mode::from_bits_truncate(0o777)) {
        Ok(()) => {}
        Err(Errno::EEXIST) => match EntryKind::of(&lstat_at(parent, name)?) {
            EntryKind::Directory => {}
            EntryKind::Symlink => return Err(symlink_in_the_way(path)),
            _ => return Err(io::Error::from(Errno::EEXIST).into()),
        },
        Err(errno) => return Err(io::Error::from(errno).into()),
    }
    match open_dir(parent, name) {
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => Err(symlink_in_the_way(path)),
        other => Ok(other?),
    }
}

/// The names in `dir` (not `.`/`..`), sorted.
fn sorted_entries(dir: &mut Dir) -> io::Result<std::vec::IntoIter<OsString>> {
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(OsStr::from_bytes(name).to_os_string());
        }
    }
    names.sort();
    Ok(names.into_iter())
}

/// Copies entry `name` of `level`; returns the level to descend into when
/// it is a directory.
fn copy_entry(level: &Level, name: &OsStr, destination_id: (u64, u64)) -> Result<Option<Level>> {
    let path = level.path.join(name);
    let stat = match lstat_at(&level.source, name) {
        Ok(stat) => stat,
        // Gone since the listing.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    match EntryKind::of(&stat) {
        EntryKind::Directory => {
            if identity(&stat) == destination_id {
                // The directory this copy is writing into.
                return Ok(None);
            }
            let mut source = open_dir(&level.source, name)?;
            let destination = directory_to_fill(&level.destination, name, &path)?;
            let entries = sorted_entries(&mut source)?;
            Ok(Some(Level {
                source,
                destination,
                path,
                entries,
            }))
        }
        EntryKind::Symlink => {
            let target = readlinkat(&level.source, name)?;
            symlinkat(target.as_os_str(), &level.destination, name)?;
            Ok(None)
        }
        EntryKind::File => {
            // Not a regular file any more: skipped like other special files.
            if let Some(file) = open_source_file(&level.source, name)? {
                copy_file(&file, &level.destination, name, &path)?;
            }
            Ok(None)
        }
        // FIFOs, sockets, devices: skipped in a recursive copy.
        EntryKind::Special => Ok(None),
    }
}
