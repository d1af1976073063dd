//! `fs/remove` (docs/filesystem.md), made so that it cannot be redirected.
//!
//! The named entry is reached through a descriptor of its parent directory
//! ([`EntryPath`]) and is never followed when it is a symlink: a symlink is
//! unlinked, its target stays. A path ending in `/` names what a final
//! symlink points to, so on a symlink it is refused instead of emptying the
//! link's target. A directory tree is removed from the top down through
//! descriptors: every directory is opened with `O_NOFOLLOW` relative to the
//! one above it and every entry is removed with `unlinkat` relative to its
//! own directory, so swapping a component for a symlink mid-walk makes the
//! walk fail or unlink the link, never enter it. The walk stays on the file
//! system of the named directory: a file system mounted inside the tree is
//! not entered (removing its mount point then fails with `EBUSY`).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::sys::stat::fstat;
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::entry::{lstat_at, open_child_dir, EntryKind, EntryPath};
use super::error::{FsError, Result};
use crate::protocol::fs::{EmptyResponse, RemoveParams};

/// The operation's name in messages.
const OP: &str = "fs/remove";

/// Entries read from a directory before acting on them.
const BATCH_ENTRIES: usize = 256;

/// `fs/remove`: `recursive` and `force` default to true; `force` ignores a
/// missing entry (or a missing parent).
pub fn remove(params: &RemoveParams) -> Result<EmptyResponse> {
    let force = params.force.unwrap_or(true);
    let recursive = params.recursive.unwrap_or(true);
    match remove_path(&EntryPath::parse(params.path.path(), OP)?, recursive) {
        Err(FsError::Io(err)) if force && err.kind() == io::ErrorKind::NotFound => {
            Ok(EmptyResponse {})
        }
        other => other.map(|()| EmptyResponse {}),
    }
}

fn remove_path(entry: &EntryPath, recursive: bool) -> Result<()> {
    let parent = entry.open_parent()?;
    let name = entry.name.as_os_str();
    let kind = EntryKind::of(&lstat_at(&parent, name)?);
    match kind {
        EntryKind::Symlink if entry.trailing_slash => Err(FsError::ThroughSymlink {
            op: OP,
            path: entry.path.clone(),
            link: entry.without_trailing_slash(),
        }),
        EntryKind::Directory if recursive => Ok(remove_tree(parent.as_fd(), name)?),
        EntryKind::Directory => Ok(unlinkat(&parent, name, UnlinkatFlags::RemoveDir)?),
        // `file/` names nothing: the kernel's answer.
        _ if entry.trailing_slash => Err(io::Error::from(Errno::ENOTDIR).into()),
        _ => Ok(unlinkat(&parent, name, UnlinkatFlags::NoRemoveDir)?),
    }
}

/// A directory being emptied: its stream and its name in the one above.
struct Level {
    dir: Dir,
    name: CString,
}

/// Removes directory `name` of `parent` and everything below it.
fn remove_tree(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let name = CString::new(name.as_bytes()).map_err(|_| io::Error::from(Errno::EINVAL))?;
    let root = open_child_dir(parent, name.as_c_str())?;
    let device = fstat(&root)?.st_dev;
    let mut stack = vec![Level { dir: root, name }];
    while let Some(top) = stack.last_mut() {
        let batch = read_batch(&mut top.dir)?;
        if batch.is_empty() {
            let Some(done) = stack.pop() else { break };
            drop(done.dir);
            let above = stack.last().map_or(parent, |level| level.dir.as_fd());
            unlinkat(above, done.name.as_c_str(), UnlinkatFlags::RemoveDir)?;
            continue;
        }
        let mut descend = None;
        for (entry, hint) in batch {
            if let Some(child) = clear_entry(&top.dir, &entry, hint == Some(Type::Directory))? {
                if fstat(&child)?.st_dev == device {
                    descend = Some(Level {
                        dir: child,
                        name: entry,
                    });
                    break;
                }
                // Another file system: not entered; its mount point cannot
                // be removed and says so.
                unlinkat(&top.dir, entry.as_c_str(), UnlinkatFlags::RemoveDir)?;
            }
        }
        // What the batch left (after a descent) is read again next round:
        // every entry handled is gone, so each round makes progress.
        stack.extend(descend);
    }
    Ok(())
}

/// Up to [`BATCH_ENTRIES`] names of `dir` (not `.`/`..`), with their types
/// when the file system reports them. The stream is rewound afterwards.
fn read_batch(dir: &mut Dir) -> io::Result<Vec<(CString, Option<Type>)>> {
    let mut batch = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        batch.push((name.to_owned(), entry.file_type()));
        if batch.len() >= BATCH_ENTRIES {
            break;
        }
    }
    Ok(batch)
}

/// Removes a non-directory entry of `dir`, or opens a directory entry so
/// the caller can empty it first. An entry that changes kind meanwhile is
/// handled as what it has become; one that vanished is done.
fn clear_entry(dir: &Dir, name: &CString, looks_like_dir: bool) -> io::Result<Option<Dir>> {
    let is_dir = match looks_like_dir {
        true => true,
        false => match lstat_at(dir, name.as_c_str()) {
            Ok(stat) => EntryKind::of(&stat) == EntryKind::Directory,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        },
    };
    if is_dir {
        match open_child_dir(dir, name.as_c_str()) {
            Ok(child) => return Ok(Some(child)),
            // No longer a directory (e.g. swapped for a symlink): unlink it.
            Err(Errno::ELOOP | Errno::ENOTDIR) => {}
            Err(Errno::ENOENT) => return Ok(None),
            Err(errno) => return Err(errno.into()),
        }
    }
    match unlinkat(dir, name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(None),
        // Became a directory since it was looked at.
        Err(Errno::EISDIR) if !is_dir => clear_entry(dir, name, true),
        Err(errno) => Err(errno.into()),
    }
}
