//! Resolution of a policy against a cwd into concrete roots: which paths
//! are readable, writable (with the read-only metadata inside) and denied;
//! a grant reached through a symlink an earlier sandboxed command could
//! have planted grants nothing (found by `planted`). With `planted`, the
//! only part of the model that reads the filesystem (does `.git` exist,
//! where does a `gitdir:` file point, what does `$TMPDIR` say).

use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroUsize;
use std::path::{Component, Path, PathBuf};

use super::model::{
    depth, normalize, FileSystemAccessMode, FileSystemSandboxKind, PLATFORM_DEFAULT_READ_ROOTS,
    PROTECTED_METADATA_NAMES,
};
use super::planted::{DroppedGrant, Places, PlantedLink};

/// What resolution needs to know about the run.
#[derive(Debug, Clone, Default)]
pub struct ResolveContext {
    /// The policy cwd (`--sandbox-policy-cwd`).
    pub cwd: PathBuf,
    /// `$TMPDIR` (None: `:tmpdir` entries are ignored).
    pub tmpdir: Option<PathBuf>,
    /// Project roots; empty = the cwd.
    pub project_roots: Vec<PathBuf>,
    /// Where earlier sandboxed commands could have written, beyond the
    /// project roots (which always count) and the policy's own writable
    /// roots: a grant through a symlink inside one grants nothing.
    pub plantable: Vec<PathBuf>,
}

/// Default protected subpaths of a writable root: `.git` (and its `gitdir:`
/// target), `.agents` when a directory, `.codex` when a directory or when
/// the root is the cwd (so its first creation is blocked too).
pub fn default_read_only_subpaths(root: &Path, root_is_cwd: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let git = root.join(".git");
    if git.is_dir() {
        out.push(git);
    } else if git.is_file() {
        out.push(git.clone());
        if let Some(target) = gitdir_target(&git) {
            out.push(target);
        }
    }
    let agents = root.join(".agents");
    if agents.is_dir() {
        out.push(agents);
    }
    let codex = root.join(".codex");
    if root_is_cwd || codex.is_dir() {
        out.push(codex);
    }
    out
}

/// The directory a `.git` file points to (`gitdir: PATH`), when it exists.
pub fn gitdir_target(git_file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(git_file).ok()?;
    let rest = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    if rest.is_empty() {
        return None;
    }
    let base = git_file.parent()?;
    let target = normalize(&base.join(rest));
    target.exists().then_some(target)
}

/// A writable root with what stays read-only below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritableRoot {
    pub root: PathBuf,
    /// Paths under `root` that must not be writable (sorted).
    pub read_only_subpaths: Vec<PathBuf>,
    /// Of `.git`, `.agents`, `.codex`: those not explicitly writable here.
    pub protected_metadata_names: Vec<&'static str>,
}

/// What a run learns from the host about a resolved policy (see
/// [`ResolvedPolicy::host_view`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostView {
    /// [`ResolvedPolicy::readable_roots`].
    pub readable_roots: Vec<PathBuf>,
    /// [`ResolvedPolicy::writable_roots`].
    pub writable_roots: Vec<WritableRoot>,
    /// [`ResolvedPolicy::dropped_grants`].
    pub dropped_grants: Vec<DroppedGrant>,
}

/// The planted links on the way to paths, each path's way walked once.
struct PlantedLinks {
    places: Places,
    found: HashMap<PathBuf, Option<PlantedLink>>,
}

impl PlantedLinks {
    fn first(&mut self, path: &Path) -> Option<PlantedLink> {
        if let Some(found) = self.found.get(path) {
            return found.clone();
        }
        let found = self.places.first_planted_link(path);
        self.found.insert(path.to_path_buf(), found.clone());
        found
    }
}

/// A filesystem policy resolved against a cwd: concrete paths only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPolicy {
    pub kind: FileSystemSandboxKind,
    pub full_write: bool,
    pub full_read: bool,
    /// A readable `:minimal` entry (only meaningful without full read).
    pub include_platform_defaults: bool,
    pub glob_scan_max_depth: Option<NonZeroUsize>,
    pub cwd: PathBuf,
    /// Concrete (path, access) entries, sorted.
    pub entries: Vec<(PathBuf, FileSystemAccessMode)>,
    /// Absolute deny glob patterns, sorted.
    pub deny_globs: Vec<String>,
    /// Places beyond the writable roots where an earlier sandboxed command
    /// could have planted a symlink (never `/`), sorted.
    pub plantable: Vec<PathBuf>,
}

impl ResolvedPolicy {
    /// The most specific entry containing `path` (ties: strongest access).
    fn governing(&self, path: &Path) -> Option<(&Path, FileSystemAccessMode)> {
        self.entries
            .iter()
            .filter(|(root, _)| path.starts_with(root))
            .max_by_key(|(root, access)| (depth(root), *access))
            .map(|(root, access)| (root.as_path(), *access))
    }

    /// The effective access to `path` (lexical; symlinks are not followed).
    pub fn access(&self, path: &Path) -> FileSystemAccessMode {
        if self.kind != FileSystemSandboxKind::Restricted {
            return FileSystemAccessMode::Write;
        }
        let path = normalize(path);
        let Some((root, access)) = self.governing(&path) else {
            return FileSystemAccessMode::Deny;
        };
        if access == FileSystemAccessMode::Write && !self.full_write {
            if let Ok(rest) = path.strip_prefix(root) {
                if let Some(Component::Normal(first)) = rest.components().next() {
                    let meta = PROTECTED_METADATA_NAMES.iter().any(|n| first == *n);
                    if meta && !self.is_explicit_write(&root.join(first)) {
                        return FileSystemAccessMode::Read;
                    }
                }
            }
        }
        access
    }

    fn is_explicit_write(&self, path: &Path) -> bool {
        self.entries
            .iter()
            .any(|(p, a)| p == path && *a == FileSystemAccessMode::Write)
    }

    pub fn can_read(&self, path: &Path) -> bool {
        self.access(path).can_read()
    }

    pub fn can_write(&self, path: &Path) -> bool {
        self.access(path).can_write()
    }

    /// Readable roots (when not full-read), deduplicated, sorted; plus the
    /// platform defaults that exist when `:minimal` is readable.
    pub fn readable_roots(&self) -> Vec<PathBuf> {
        self.readable_roots_with(&mut self.planted_links())
    }

    fn readable_roots_with(&self, links: &mut PlantedLinks) -> Vec<PathBuf> {
        let mut out = BTreeSet::new();
        if self.full_read {
            out.insert(PathBuf::from("/"));
            return out.into_iter().collect();
        }
        for (path, access) in &self.entries {
            if self.grants_read(path, *access) && links.first(path).is_none() {
                out.insert(path.clone());
            }
        }
        if self.include_platform_defaults {
            for p in PLATFORM_DEFAULT_READ_ROOTS {
                if Path::new(p).exists() {
                    out.insert(PathBuf::from(p));
                }
            }
        }
        out.into_iter().collect()
    }

    fn grants_read(&self, path: &Path, access: FileSystemAccessMode) -> bool {
        access.can_read() && self.can_read(path)
    }

    /// Where a symlink on the way to a grant may have been planted: the
    /// context's places and the policy's own writable roots.
    fn planted_links(&self) -> PlantedLinks {
        PlantedLinks {
            places: Places::new(self.plantable.iter().chain(&self.lexical_writable_roots())),
            found: HashMap::new(),
        }
    }

    /// The readable roots, the writable roots and the dropped grants
    /// together, each path's way walked once.
    pub fn host_view(&self) -> HostView {
        let mut links = self.planted_links();
        HostView {
            readable_roots: self.readable_roots_with(&mut links),
            writable_roots: self.writable_roots_with(&mut links),
            dropped_grants: self.dropped_grants_with(&mut links),
        }
    }

    /// Directories a sandboxed command could have written, this run's or an
    /// earlier one's: the writable roots (dropped ones included) and the
    /// plantable places. Nothing that runs outside the sandbox (the
    /// launcher, ripgrep) is taken from one.
    pub fn untrusted_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = self.lexical_writable_roots();
        dirs.extend(self.plantable.iter().cloned());
        dirs
    }

    /// Every path a write entry grants, lexically (before the symlink rule).
    fn lexical_writable_roots(&self) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = self
            .entries
            .iter()
            .filter(|(p, a)| a.can_write() && self.can_write(p))
            .map(|(p, _)| p.clone())
            .collect();
        roots.sort();
        roots.dedup();
        roots
    }

    /// Adds a read entry for each of `paths` that exists and is writable
    /// (a read-only subpath of its writable root). Nothing for a policy
    /// without a filesystem sandbox.
    pub fn keep_read_only(&mut self, paths: &[PathBuf]) {
        if self.kind != FileSystemSandboxKind::Restricted || self.full_write {
            return;
        }
        for p in paths {
            let p = normalize(p);
            if p.symlink_metadata().is_ok() && self.can_write(&p) {
                self.entries.push((p, FileSystemAccessMode::Read));
            }
        }
        self.entries.sort();
        self.entries.dedup();
    }

    /// Grants left out because a symlink an earlier sandboxed command could
    /// have planted lies on their way ([`Places::first_planted_link`]), for
    /// the caller to be told: writable roots, and readable entries when
    /// reads are restricted (with full read they change nothing). Deny
    /// entries are never dropped: their masks follow the link.
    pub fn dropped_grants(&self) -> Vec<DroppedGrant> {
        self.dropped_grants_with(&mut self.planted_links())
    }

    fn dropped_grants_with(&self, links: &mut PlantedLinks) -> Vec<DroppedGrant> {
        let mut dropped = |path: &PathBuf| {
            links.first(path).map(|link| DroppedGrant {
                path: path.clone(),
                link,
            })
        };
        let mut out: Vec<DroppedGrant> = self
            .lexical_writable_roots()
            .iter()
            .filter_map(&mut dropped)
            .collect();
        if !self.full_read {
            for (path, access) in &self.entries {
                if self.grants_read(path, *access) && !out.iter().any(|d| &d.path == path) {
                    out.extend(dropped(path));
                }
            }
        }
        out
    }

    /// Writable roots with their read-only subpaths and protected names.
    /// A root reached through a symlink inside another writable root or a
    /// plantable place is left out: a sandboxed command could have planted
    /// that link (see [`Places::first_planted_link`]).
    pub fn writable_roots(&self) -> Vec<WritableRoot> {
        self.writable_roots_with(&mut self.planted_links())
    }

    fn writable_roots_with(&self, links: &mut PlantedLinks) -> Vec<WritableRoot> {
        self.lexical_writable_roots()
            .into_iter()
            .filter(|root| links.first(root).is_none())
            .map(|root| {
                let mut subs = BTreeSet::new();
                let mut names = Vec::new();
                if !self.full_write {
                    for name in PROTECTED_METADATA_NAMES {
                        if !self.is_explicit_write(&root.join(name)) {
                            names.push(name);
                        }
                    }
                    for sub in default_read_only_subpaths(&root, root == self.cwd) {
                        if !self.is_explicit_write(&sub) {
                            subs.insert(sub);
                        }
                    }
                }
                for (path, access) in &self.entries {
                    if path != &root && path.starts_with(&root) && !access.can_write() {
                        subs.insert(path.clone());
                    }
                }
                WritableRoot {
                    root,
                    read_only_subpaths: subs.into_iter().collect(),
                    protected_metadata_names: names,
                }
            })
            .collect()
    }

    /// Deny entries that are effectively unreadable (never `/` itself).
    pub fn unreadable_roots(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .entries
            .iter()
            .filter(|(p, a)| {
                *a == FileSystemAccessMode::Deny && p != Path::new("/") && !self.can_read(p)
            })
            .map(|(p, _)| p.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Absolute deny glob patterns, sorted and deduplicated.
    pub fn unreadable_globs(&self) -> &[String] {
        &self.deny_globs
    }
}
