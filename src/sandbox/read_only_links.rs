//! The refusal of protected workspace metadata (`.git`, `.agents`,
//! `.codex` directly under a writable root) that is a symlink, or lies
//! behind one, inside a writable root: `.codex -> decoy`. A mount can
//! keep the link's target read-only but never the link, which the command
//! could swap for a directory of its own, and whatever reads that name
//! next (git, Codex) would read the command's files. Neither backend can
//! enforce it, so the sandbox is not built, as the reference refuses it.
//! Other read-only entries behind such a link keep their targets read-only
//! (`sandbox::bwrap_args`, `sandbox::landlock`): the grant rule already
//! makes them grant nothing. Pure apart from `lstat`; both backends ask
//! here before they build anything.

use std::path::{Path, PathBuf};

use crate::policy::{normalize, WritableRoot};

/// Protected metadata that is, or lies behind, a symlink inside a
/// writable root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot enforce sandbox read-only path {} because it crosses writable symlink {}",
    .path.display(),
    .link.display()
)]
pub struct ReadOnlyThroughLink {
    pub path: PathBuf,
    pub link: PathBuf,
}

/// Checks the protected metadata names of the writable roots `roots` (a
/// policy's [`crate::policy::ResolvedPolicy::writable_roots`]).
pub fn check(roots: &[WritableRoot]) -> Result<(), ReadOnlyThroughLink> {
    let writable: Vec<&Path> = roots.iter().map(|w| w.root.as_path()).collect();
    for path in protected_metadata_paths(roots) {
        if let Some(link) = writable_symlink_on(&path, &writable) {
            return Err(ReadOnlyThroughLink { path, link });
        }
    }
    Ok(())
}

/// The protected metadata paths (`.git`, `.agents`, `.codex` where they are
/// protected) of the writable roots `roots`, whether they exist or not.
pub fn protected_metadata_paths(roots: &[WritableRoot]) -> Vec<PathBuf> {
    roots
        .iter()
        .flat_map(|w| {
            w.protected_metadata_names
                .iter()
                .map(|name| w.root.join(name))
        })
        .collect()
}

/// The first symlink among the prefixes of `path` (itself included) that
/// lies strictly inside one of `writable`.
fn writable_symlink_on(path: &Path, writable: &[&Path]) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for component in normalize(path).components() {
        prefix.push(component);
        let inside = writable
            .iter()
            .any(|root| prefix.starts_with(root) && prefix != *root);
        if inside && prefix.symlink_metadata().is_ok_and(|m| m.is_symlink()) {
            return Some(prefix);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::FileSystemSandboxPolicy;

    #[test]
    fn a_symlinked_metadata_name_in_a_writable_root_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let policy = FileSystemSandboxPolicy::workspace_write(&[], true, true);
        assert_eq!(check(&policy.resolve(&root, &[]).writable_roots()), Ok(()));
        std::fs::create_dir(root.join("decoy")).unwrap();
        std::os::unix::fs::symlink("decoy", root.join(".codex")).unwrap();
        assert_eq!(
            check(&policy.resolve(&root, &[]).writable_roots()),
            Err(ReadOnlyThroughLink {
                path: root.join(".codex"),
                link: root.join(".codex"),
            })
        );
    }

    #[test]
    fn a_read_entry_behind_a_link_and_a_linked_root_are_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let real = base.join("real");
        std::fs::create_dir_all(real.join(".git")).unwrap();
        std::fs::create_dir(base.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(&real, base.join("alias")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere"), real.join("docs")).unwrap();
        let policy = FileSystemSandboxPolicy::workspace_write(&[], true, true);
        // The workspace reached through a link: its `.git` is a real
        // directory, bound where it really is.
        assert_eq!(
            check(&policy.resolve(&base.join("alias"), &[]).writable_roots()),
            Ok(())
        );
        let mut with_docs = policy.clone();
        with_docs
            .entries
            .push(crate::policy::FileSystemSandboxEntry::path(
                real.join("docs"),
                crate::policy::FileSystemAccessMode::Read,
            ));
        assert_eq!(
            check(&with_docs.resolve(&real, &[]).writable_roots()),
            Ok(())
        );
    }
}
