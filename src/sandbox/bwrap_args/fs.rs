//! The filesystem half of the argv: the base layer, writable roots by
//! depth with their read-only subpaths and deny masks re-applied after
//! each bind, symlinked roots bound at their real location, and the mount
//! points bwrap will create on the host.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use super::*;

impl Builder<'_> {
    fn inside_writable(&self, p: &Path) -> bool {
        self.writable_paths.iter().any(|w| p.starts_with(w))
    }

    /// The first symlink among the prefixes of `p` that lie inside a writable path.
    fn symlink_inside_writable(&self, p: &Path) -> Option<PathBuf> {
        // A prefix of `p` lies inside a writable path exactly when it is at
        // least as deep as the shallowest writable path `p` lies inside.
        let from = self
            .writable_paths
            .iter()
            .filter(|w| p.starts_with(w))
            .map(|w| depth(w))
            .min()?;
        shortest_first(p)
            .filter(|q| depth(q) >= from)
            .find(|q| self.file_type(q).is_some_and(|t| t.is_symlink()))
            .map(Path::to_path_buf)
    }

    fn first_missing(&self, p: &Path) -> Option<PathBuf> {
        shortest_first(p)
            .find(|q| self.file_type(q).is_none())
            .map(Path::to_path_buf)
    }

    /// Rewrites `p` below a symlinked writable root to its real location.
    fn remap(&self, p: &Path) -> PathBuf {
        for (root, real) in &self.remaps {
            if let Ok(rest) = p.strip_prefix(root) {
                return real.join(rest);
            }
        }
        p.to_path_buf()
    }

    pub(super) fn fs_args(&mut self) -> Result<(), BwrapArgsError> {
        let policy = self.inputs.policy;
        let writable = &self.inputs.host.writable_roots;
        self.remaps = writable
            .iter()
            .map(|w| (w.root.clone(), canonical_or_self(&w.root)))
            .collect();
        for (w, (_, real)) in writable.iter().zip(&self.remaps) {
            if exists(&w.root) {
                let real = real.clone();
                self.writable_paths.push(w.root.clone());
                if real != w.root {
                    self.writable_paths.push(real.clone());
                }
                self.writable_mounts.push(real);
            }
        }

        // Base layer.
        let mut readable: BTreeSet<PathBuf> =
            self.inputs.host.readable_roots.iter().cloned().collect();
        let full_read = readable.contains(Path::new("/"));
        if full_read {
            self.out.path2("--ro-bind", Path::new("/"));
            self.out.texts(&["--dev", "/dev"]);
        } else {
            for p in &self.inputs.extra_read {
                readable.insert(p.clone());
            }
            self.out.texts(&["--tmpfs", "/", "--dev", "/dev"]);
            for r in &readable {
                if r.starts_with("/dev") || !exists(r) {
                    continue;
                }
                let inside = self.inside_writable(r) && self.symlink_inside_writable(r).is_some();
                let src = if inside {
                    canonical_or_self(r)
                } else {
                    r.clone()
                };
                self.out.path2("--ro-bind", &src);
            }
        }

        // Everything to hide, remapped below symlinked writable roots. Sets
        // for membership only: whatever is taken from them is sorted by
        // depth before it is masked.
        let mut unreadable: HashSet<PathBuf> = HashSet::new();
        for p in policy
            .unreadable_roots()
            .iter()
            .chain(self.inputs.glob_matches.iter())
            .chain(self.inputs.extra_deny.iter())
        {
            if p != Path::new("/") {
                unreadable.insert(self.remap(p));
            }
        }
        // Each path's depth is counted once, and no path copied per comparison.
        let by_depth = |set: &mut Vec<PathBuf>| {
            let mut keyed: Vec<(usize, PathBuf)> = set.drain(..).map(|p| (depth(&p), p)).collect();
            keyed.sort_unstable();
            set.extend(keyed.into_iter().map(|(_, p)| p));
        };
        let mut done: HashSet<PathBuf> = HashSet::new();

        // 1. Denied ancestors of writable paths, not inside any writable path.
        let mut first: Vec<PathBuf> = unreadable
            .iter()
            .filter(|u| {
                self.writable_mounts
                    .iter()
                    .any(|m| m.starts_with(u) && m != *u)
                    && !self.inside_writable(u)
            })
            .cloned()
            .collect();
        by_depth(&mut first);
        for u in first {
            self.mask(&u, 0)?;
            done.insert(u);
        }

        // 2. Writable roots by depth, each followed by its carve-outs.
        let mut roots: Vec<_> = writable
            .iter()
            .zip(&self.remaps)
            .filter(|(w, _)| exists(&w.root))
            .map(|(w, (_, real))| (real.clone(), w))
            .collect();
        roots.sort_by_key(|(m, _)| (depth(m), m.clone()));
        for (mount, root) in roots {
            self.out.path2("--bind", &mount);
            if Path::new("/dev").starts_with(&mount) {
                // A writable `/` brings the host's /dev back with it: put the
                // minimal /dev on top again (deeper binds like /dev/shm follow).
                self.out.texts(&["--dev", "/dev"]);
            }
            let mut ro: Vec<PathBuf> = Vec::new();
            let mut push = |p: PathBuf| {
                if p.starts_with(&mount)
                    && p != mount
                    && !unreadable.contains(&p)
                    && !ro.contains(&p)
                {
                    ro.push(p);
                }
            };
            // Carve-outs below a deeper writable root are applied after that
            // root's own bind (which would cover them).
            let deeper: Vec<PathBuf> = self
                .writable_mounts
                .iter()
                .filter(|m| m.starts_with(&mount) && **m != mount)
                .cloned()
                .collect();
            for p in &root.read_only_subpaths {
                let p = self.remap(p);
                if !deeper.iter().any(|m| p.starts_with(m)) {
                    push(p);
                }
            }
            // A child without `.git` inside a parent repository gets an empty
            // read-only `.git` too: git's discovery skips a directory that is
            // not a valid git dir, so parent-repo discovery keeps working.
            if mount.is_dir() {
                for name in &root.protected_metadata_names {
                    push(mount.join(name));
                }
            }
            ro.sort_by_key(|p| depth(p));
            for p in ro {
                self.read_only(&p, 0)?;
            }
            let mut nested: Vec<PathBuf> = unreadable
                .iter()
                .filter(|u| u.starts_with(&mount) && !done.contains(*u))
                .cloned()
                .collect();
            by_depth(&mut nested);
            for u in nested {
                self.mask(&u, 0)?;
                done.insert(u);
            }
        }

        // 2b. Read-only subpaths outside their own root (a `gitdir:` target
        // in another writable root): after every bind, so none covers them,
        // with the deny masks below them applied again on top.
        let mut outer: Vec<PathBuf> = Vec::new();
        for (w, (_, mount)) in writable.iter().zip(&self.remaps) {
            for p in &w.read_only_subpaths {
                let p = self.remap(p);
                if !p.starts_with(mount) && !outer.contains(&p) {
                    outer.push(p);
                }
            }
        }
        outer.sort_by_key(|p| (depth(p), p.clone()));
        for p in &outer {
            self.read_only(p, 0)?;
        }
        let mut again: Vec<PathBuf> = done
            .iter()
            .filter(|u| outer.iter().any(|p| u.starts_with(p)))
            .cloned()
            .collect();
        by_depth(&mut again);
        for u in again {
            self.mask(&u, 0)?;
        }

        // 3. Remaining denied paths.
        let mut rest: Vec<PathBuf> = unreadable
            .into_iter()
            .filter(|u| !done.contains(u))
            .collect();
        by_depth(&mut rest);
        for u in rest {
            self.mask(&u, 0)?;
        }
        Ok(())
    }

    /// Follows a symlink one level (relative targets against its directory).
    fn link_target(p: &Path) -> Option<PathBuf> {
        let target = std::fs::read_link(p).ok()?;
        let base = p.parent()?;
        Some(normalize(&base.join(target)))
    }

    /// Keeps `p` (under a writable root) read-only.
    fn read_only(&mut self, p: &Path, hops: usize) -> Result<(), BwrapArgsError> {
        if hops > 8 {
            return Err(BwrapArgsError::SymlinkLoop(p.to_path_buf()));
        }
        if let Some(link) = self.symlink_inside_writable(p) {
            // A read entry behind a symlink: protect where it points (the
            // link itself cannot carry a mount; protected metadata behind
            // one was refused by `sandbox::read_only_links`).
            let Some(target) = Self::link_target(&link) else {
                return Ok(());
            };
            let rest = p.strip_prefix(&link).unwrap_or(Path::new(""));
            let real = if rest.as_os_str().is_empty() {
                target
            } else {
                target.join(rest)
            };
            return self.read_only(&real, hops + 1);
        }
        if let Some(missing) = self.first_missing(p) {
            if !self.inside_writable(&missing) {
                return Ok(());
            }
            let is_meta = missing
                .file_name()
                .is_some_and(|n| PROTECTED_METADATA_NAMES.iter().any(|m| n == *m));
            if is_meta {
                self.out.texts(&["--perms", "555", "--tmpfs"]);
                self.out.text(&missing);
                self.out.text("--remount-ro");
                self.out.text(&missing);
            } else {
                self.out.texts(&["--perms", "444", "--ro-bind-data"]);
                self.out.args.push(BwrapArg::EmptyFileFd);
                self.out.text(&missing);
            }
            self.out.synthetic_targets.push(SyntheticTarget {
                path: missing,
                is_dir: is_meta,
            });
            return Ok(());
        }
        if self.inside_writable(p) {
            self.out.path2("--ro-bind", p);
        }
        Ok(())
    }

    /// Hides `u` (a deny entry or glob match).
    fn mask(&mut self, u: &Path, hops: usize) -> Result<(), BwrapArgsError> {
        if hops > 8 {
            return Err(BwrapArgsError::SymlinkLoop(u.to_path_buf()));
        }
        if let Some(link) = self.symlink_inside_writable(u) {
            if let Some(target) = Self::link_target(&link) {
                let rest = u.strip_prefix(&link).unwrap_or(Path::new(""));
                let real = if rest.as_os_str().is_empty() {
                    target
                } else {
                    target.join(rest)
                };
                return self.mask(&real, hops + 1);
            }
            return Ok(());
        }
        let meta = match self.file_type(u) {
            Some(file_type) => file_type,
            None => {
                if let Some(missing) = self.first_missing(u) {
                    if self.inside_writable(&missing) {
                        self.out.texts(&["--perms", "000", "--ro-bind-data"]);
                        self.out.args.push(BwrapArg::EmptyFileFd);
                        self.out.text(&missing);
                        self.out.synthetic_targets.push(SyntheticTarget {
                            path: missing,
                            is_dir: false,
                        });
                    }
                }
                return Ok(());
            }
        };
        if meta.is_symlink() {
            // A symlink outside writable paths: hide what it points to.
            if let Ok(real) = u.canonicalize() {
                return self.mask(&real, hops + 1);
            }
            return Ok(());
        }
        if !meta.is_dir() {
            self.out.texts(&["--perms", "000", "--ro-bind-data"]);
            self.out.args.push(BwrapArg::EmptyFileFd);
            self.out.text(u);
            return Ok(());
        }
        let reopened: Vec<PathBuf> = self
            .writable_mounts
            .iter()
            .filter(|m| m.starts_with(u) && *m != u)
            .cloned()
            .collect();
        self.out.texts(&[
            "--perms",
            if reopened.is_empty() { "000" } else { "111" },
            "--tmpfs",
        ]);
        self.out.text(u);
        let mut dirs = BTreeSet::new();
        let mut files = BTreeSet::new();
        for m in &reopened {
            let is_dir = std::fs::metadata(m).map(|md| md.is_dir()).unwrap_or(true);
            let target_dir = if is_dir {
                m.as_path()
            } else {
                m.parent().unwrap_or(u)
            };
            for q in prefixes(target_dir) {
                if q.starts_with(u) && q != u {
                    dirs.insert(q);
                }
            }
            if !is_dir {
                files.insert(m.clone());
            }
        }
        let mut dirs: Vec<PathBuf> = dirs.into_iter().collect();
        dirs.sort_by_key(|p| (depth(p), p.clone()));
        for d in dirs {
            self.out.texts(&["--perms", "111", "--dir"]);
            self.out.text(&d);
        }
        for f in files {
            // The mount point for a re-opened file must exist before the
            // tmpfs turns read-only.
            self.out.texts(&["--perms", "000", "--file"]);
            self.out.args.push(BwrapArg::EmptyFileFd);
            self.out.text(&f);
        }
        self.out.text("--remount-ro");
        self.out.text(u);
        Ok(())
    }
}
