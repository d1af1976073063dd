//! The runtime filesystem policy (`--file-system-sandbox-policy JSON`): the
//! flat entry list a profile turns into, with the reference's constructors
//! (read-only, workspace-write) and the full-disk predicates.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::model::{
    is_glob, join_pattern, normalize, FileSystemAccessMode, FileSystemPath, FileSystemSandboxEntry,
    FileSystemSandboxKind, FileSystemSpecialPath, PROTECTED_METADATA_NAMES,
};
use super::planted::usable_place;
use super::resolve::{default_read_only_subpaths, ResolveContext, ResolvedPolicy};

/// The runtime filesystem policy (`--file-system-sandbox-policy JSON`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileSystemSandboxPolicy {
    pub kind: FileSystemSandboxKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob_scan_max_depth: Option<NonZeroUsize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<FileSystemSandboxEntry>,
}

impl FileSystemSandboxPolicy {
    pub fn unrestricted() -> Self {
        Self {
            kind: FileSystemSandboxKind::Unrestricted,
            ..Self::default()
        }
    }

    pub fn read_only() -> Self {
        Self {
            kind: FileSystemSandboxKind::Restricted,
            glob_scan_max_depth: None,
            entries: vec![FileSystemSandboxEntry::special(
                FileSystemSpecialPath::Root,
                FileSystemAccessMode::Read,
            )],
        }
    }

    /// The reference's workspace-write policy.
    pub fn workspace_write(
        writable_roots: &[PathBuf],
        exclude_tmpdir_env_var: bool,
        exclude_slash_tmp: bool,
    ) -> Self {
        use FileSystemAccessMode::{Read, Write};
        let mut policy = Self::read_only();
        policy.push_unique(FileSystemSandboxEntry::special(
            FileSystemSpecialPath::ProjectRoots { subpath: None },
            Write,
        ));
        if !exclude_slash_tmp {
            policy.push_unique(FileSystemSandboxEntry::special(
                FileSystemSpecialPath::SlashTmp,
                Write,
            ));
        }
        if !exclude_tmpdir_env_var {
            policy.push_unique(FileSystemSandboxEntry::special(
                FileSystemSpecialPath::Tmpdir,
                Write,
            ));
        }
        for root in writable_roots {
            policy.push_unique(FileSystemSandboxEntry::path(root.clone(), Write));
        }
        for name in PROTECTED_METADATA_NAMES {
            policy.push_unique(FileSystemSandboxEntry::new(
                FileSystemPath::project_subpath(name),
                Read,
            ));
        }
        for root in writable_roots {
            for sub in default_read_only_subpaths(&normalize(root), false) {
                policy.push_unique(FileSystemSandboxEntry::path(sub, Read));
            }
        }
        policy
    }

    /// Adds `entry` unless an entry with the same target exists.
    pub(crate) fn push_unique(&mut self, entry: FileSystemSandboxEntry) {
        if !self.entries.iter().any(|e| e.path == entry.path) {
            self.entries.push(entry);
        }
    }

    /// True when some entry resolves relative to the cwd.
    pub fn depends_on_cwd(&self) -> bool {
        self.kind == FileSystemSandboxKind::Restricted
            && self.entries.iter().any(|e| match &e.path {
                FileSystemPath::Special {
                    value: FileSystemSpecialPath::ProjectRoots { .. },
                } => true,
                FileSystemPath::GlobPattern { pattern } => !pattern.starts_with('/'),
                _ => false,
            })
    }

    /// Full-disk write without narrowing (see module docs).
    pub fn has_full_disk_write_access(&self) -> bool {
        use FileSystemAccessMode::Write;
        match self.kind {
            FileSystemSandboxKind::Unrestricted | FileSystemSandboxKind::ExternalSandbox => {
                return true
            }
            FileSystemSandboxKind::Restricted => {}
        }
        let root_write = self.entries.iter().any(|e| {
            e.access == Write
                && matches!(
                    e.path,
                    FileSystemPath::Special {
                        value: FileSystemSpecialPath::Root
                    }
                )
        });
        if !root_write {
            return false;
        }
        self.entries.iter().all(|e| match &e.path {
            _ if e.access == Write => true,
            FileSystemPath::Path { path } => self.entries.iter().any(|o| {
                o.access == Write
                    && matches!(&o.path, FileSystemPath::Path { path: p } if p == path)
            }),
            FileSystemPath::GlobPattern { .. } => false,
            FileSystemPath::Special { value } => match value {
                FileSystemSpecialPath::Root => e.access == FileSystemAccessMode::Read,
                FileSystemSpecialPath::Minimal | FileSystemSpecialPath::Unknown { .. } => true,
                _ => false,
            },
        })
    }

    /// Full-disk read: readable `/` and no deny entry at all.
    pub fn has_full_disk_read_access(&self) -> bool {
        match self.kind {
            FileSystemSandboxKind::Unrestricted | FileSystemSandboxKind::ExternalSandbox => true,
            FileSystemSandboxKind::Restricted => {
                self.entries.iter().any(|e| {
                    e.access.can_read()
                        && matches!(
                            e.path,
                            FileSystemPath::Special {
                                value: FileSystemSpecialPath::Root
                            }
                        )
                }) && !self
                    .entries
                    .iter()
                    .any(|e| e.access == FileSystemAccessMode::Deny)
            }
        }
    }

    /// Resolves against `cwd` with the helper's `$TMPDIR`, as one run of the
    /// helper does: `/tmp`, `$TMPDIR` and `plantable` (what the caller knows
    /// earlier sandboxed commands could write) count as places where a
    /// symlink may have been planted, beside the cwd (the project root).
    pub fn resolve(&self, cwd: &Path, plantable: &[PathBuf]) -> ResolvedPolicy {
        self.resolve_with_tmpdir(cwd, plantable, std::env::var_os("TMPDIR").as_deref())
    }

    /// [`Self::resolve`] with `tmpdir` as the helper's `$TMPDIR` (the
    /// exec-server decides for a helper whose environment is not its own).
    pub fn resolve_with_tmpdir(
        &self,
        cwd: &Path,
        plantable: &[PathBuf],
        tmpdir: Option<&std::ffi::OsStr>,
    ) -> ResolvedPolicy {
        let tmpdir = tmpdir.filter(|v| !v.is_empty()).map(PathBuf::from);
        let mut places = vec![PathBuf::from("/tmp")];
        places.extend(tmpdir.iter().map(|t| cwd.join(t)));
        places.extend_from_slice(plantable);
        self.resolve_with(&ResolveContext {
            cwd: cwd.to_path_buf(),
            tmpdir,
            project_roots: Vec::new(),
            plantable: places,
        })
    }

    /// Resolves against an explicit context (tests, callers with several roots).
    pub fn resolve_with(&self, ctx: &ResolveContext) -> ResolvedPolicy {
        let cwd = normalize(&ctx.cwd);
        let roots: Vec<PathBuf> = if ctx.project_roots.is_empty() {
            vec![cwd.clone()]
        } else {
            ctx.project_roots.iter().map(|r| normalize(r)).collect()
        };
        let mut entries = Vec::new();
        let mut deny_globs = BTreeSet::new();
        let mut minimal = false;
        for entry in &self.entries {
            match &entry.path {
                FileSystemPath::Path { path } => entries.push((normalize(path), entry.access)),
                FileSystemPath::GlobPattern { pattern } => {
                    if entry.access != FileSystemAccessMode::Deny {
                        continue; // globs cannot grant access
                    }
                    if pattern.starts_with('/') {
                        deny_globs.insert(pattern.clone());
                    } else {
                        for root in &roots {
                            deny_globs.insert(join_pattern(root, pattern));
                        }
                    }
                }
                FileSystemPath::Special { value } => match value {
                    FileSystemSpecialPath::Root => entries.push((PathBuf::from("/"), entry.access)),
                    FileSystemSpecialPath::Minimal => minimal |= entry.access.can_read(),
                    FileSystemSpecialPath::ProjectRoots { subpath } => {
                        for root in &roots {
                            let p = match subpath {
                                Some(sub) => normalize(&root.join(sub)),
                                None => root.clone(),
                            };
                            entries.push((p, entry.access));
                        }
                    }
                    FileSystemSpecialPath::Tmpdir => {
                        if let Some(t) = &ctx.tmpdir {
                            entries.push((normalize(&cwd.join(t)), entry.access));
                        }
                    }
                    FileSystemSpecialPath::SlashTmp => {
                        if Path::new("/tmp").is_dir() {
                            entries.push((PathBuf::from("/tmp"), entry.access));
                        }
                    }
                    FileSystemSpecialPath::Unknown { .. } => {}
                },
            }
        }
        // A path element that is itself a pure "glob" string (no wildcard)
        // would never match anything: treat it as an exact deny path instead.
        let deny_globs = deny_globs
            .into_iter()
            .filter_map(|g| {
                if is_glob(&g) {
                    Some(g)
                } else {
                    entries.push((normalize(Path::new(&g)), FileSystemAccessMode::Deny));
                    None
                }
            })
            .collect();
        entries.sort();
        entries.dedup();
        let mut plantable: Vec<PathBuf> = roots
            .iter()
            .chain(&ctx.plantable)
            .filter_map(|p| usable_place(p))
            .collect();
        plantable.sort();
        plantable.dedup();
        ResolvedPolicy {
            kind: self.kind,
            full_write: self.has_full_disk_write_access(),
            full_read: self.has_full_disk_read_access(),
            include_platform_defaults: minimal,
            glob_scan_max_depth: self.glob_scan_max_depth,
            cwd,
            entries,
            deny_globs,
            plantable,
        }
    }
}
