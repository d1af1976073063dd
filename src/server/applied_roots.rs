//! What this exec-server remembers of the sandboxes it applied: the
//! writable roots of every sandboxed process and fs helper it started,
//! places where a symlink may since have been planted. Every later sandbox
//! is told them (with its own workspace roots and the server's `$TMPDIR`),
//! so a grant reached through such a link grants nothing there
//! (`policy::Places`).
//!
//! Bounded: roots inside a remembered root add nothing (a link inside them
//! is inside the outer one too), and of the rest the
//! [`MAX_REMEMBERED_ROOTS`] most recently applied are kept. `/` is never
//! remembered (see `policy::usable_place`). Nothing persists
//! beyond the server process.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::policy::{
    usable_place, FileSystemPath, FileSystemSpecialPath, ManagedFileSystemPermissions,
    PermissionProfile,
};

/// Distinct outermost roots kept; the least recently applied goes first.
pub const MAX_REMEMBERED_ROOTS: usize = 256;

/// The writable roots of the sandboxes this server applied.
#[derive(Debug, Default)]
pub struct AppliedRoots {
    /// Outermost roots, least recently applied first.
    roots: Mutex<Vec<PathBuf>>,
}

impl AppliedRoots {
    /// Remembers the writable roots of `profile` (a materialized profile,
    /// `tmpdir` already pinned), and returns every remembered root.
    pub fn remember(&self, profile: &PermissionProfile) -> Vec<PathBuf> {
        let mut roots = self
            .roots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for root in writable_paths(profile) {
            add(&mut roots, root);
        }
        roots.clone()
    }
}

/// Adds `root`, most recent last, keeping only outermost roots.
fn add(roots: &mut Vec<PathBuf>, root: PathBuf) {
    if let Some(i) = roots.iter().position(|r| root.starts_with(r)) {
        let outer = roots.remove(i);
        roots.push(outer);
        return;
    }
    roots.retain(|r| !r.starts_with(&root));
    roots.push(root);
    if roots.len() > MAX_REMEMBERED_ROOTS {
        roots.remove(0);
    }
}

/// The paths a profile's write entries name (`/` and relative paths left out).
fn writable_paths(profile: &PermissionProfile) -> Vec<PathBuf> {
    let PermissionProfile::Managed {
        file_system: ManagedFileSystemPermissions::Restricted { entries, .. },
        ..
    } = profile
    else {
        return Vec::new();
    };
    entries
        .iter()
        .filter(|e| e.access.can_write())
        .filter_map(|e| match &e.path {
            FileSystemPath::Path { path } => usable_place(path),
            FileSystemPath::Special {
                value: FileSystemSpecialPath::SlashTmp,
            } => usable_place(Path::new("/tmp")),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{FileSystemAccessMode, FileSystemSandboxEntry};

    fn profile(entries: Vec<FileSystemSandboxEntry>) -> PermissionProfile {
        PermissionProfile::Managed {
            file_system: ManagedFileSystemPermissions::Restricted {
                entries,
                glob_scan_max_depth: None,
            },
            network: Default::default(),
        }
    }

    #[test]
    fn remembers_outermost_write_roots_only() {
        use FileSystemAccessMode::{Read, Write};
        let applied = AppliedRoots::default();
        let first = applied.remember(&profile(vec![
            FileSystemSandboxEntry::special(FileSystemSpecialPath::Root, Write),
            FileSystemSandboxEntry::path("/ws/out", Write),
            FileSystemSandboxEntry::path("/docs", Read),
            FileSystemSandboxEntry::special(FileSystemSpecialPath::SlashTmp, Write),
        ]));
        assert_eq!(first, [PathBuf::from("/ws/out"), PathBuf::from("/tmp")]);
        let second = applied.remember(&profile(vec![
            FileSystemSandboxEntry::path("/ws", Write),
            FileSystemSandboxEntry::path("/tmp/x", Write),
        ]));
        assert_eq!(second, [PathBuf::from("/ws"), PathBuf::from("/tmp")]);
        assert_eq!(applied.remember(&PermissionProfile::Disabled), second);
    }

    #[test]
    fn keeps_the_most_recent_roots() {
        let applied = AppliedRoots::default();
        for i in 0..=MAX_REMEMBERED_ROOTS {
            applied.remember(&profile(vec![FileSystemSandboxEntry::path(
                format!("/r/{i}"),
                FileSystemAccessMode::Write,
            )]));
        }
        let roots = applied.remember(&PermissionProfile::Disabled);
        assert_eq!(roots.len(), MAX_REMEMBERED_ROOTS);
        assert_eq!(roots.first(), Some(&PathBuf::from("/r/1")));
        assert_eq!(
            roots.last(),
            Some(&PathBuf::from(format!("/r/{MAX_REMEMBERED_ROOTS}")))
        );
    }
}
