//! Bubblewrap argv construction (reference notes §4, SPEC §5.3).
//!
//! Turns a [`ResolvedPolicy`] plus the run's facts (command cwd, network,
//! launcher capabilities, expanded deny globs, the inner-stage command) into
//! the exact arguments for a bwrap-compatible launcher, and the list of
//! mount points bwrap will create on the host (cleaned up afterwards by
//! `sandbox::cleanup`). It reads the filesystem only to learn what exists,
//! what is a directory and where symlinks point; it runs nothing. Choosing
//! the launcher lives in `sandbox::launcher`, running it in `sandbox::run`.
//!
//! Ordering (specificity): base layer (`--ro-bind / /` or `--tmpfs /` plus
//! readable roots, then `--dev /dev`), masks of denied ancestors of writable
//! paths, then each writable root by depth with its read-only subpaths and
//! nested deny masks re-applied right after its `--bind`, then the remaining
//! deny masks. Each empty-file mask reads its own fd (bwrap closes it after
//! copying), so fds are placeholders filled in by [`BwrapCommand::render`].

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::sandbox::policy::{normalize, ResolvedPolicy, PROTECTED_METADATA_NAMES};

/// Kernel controls below a fresh `/proc` bound read-only when present
/// (besides `/proc/sys`, which must exist).
const PROC_READ_ONLY_EXTRAS: [&str; 3] = ["/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

/// argv[0] the inner stage is started with when the launcher has `--argv0`.
pub const INNER_ARGV0: &str = "codex-linux-sandbox";

/// Errors building the argv.
#[derive(Debug, thiserror::Error)]
pub enum BwrapArgsError {
    #[error("cannot enforce sandbox path {}: symlinks nest too deeply", .0.display())]
    SymlinkLoop(PathBuf),
    #[error("path {} is not valid for bubblewrap (contains a NUL byte)", .0.display())]
    Nul(PathBuf),
}

/// What the launcher supports (probed once, see `sandbox::launcher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LauncherCaps {
    pub argv0: bool,
    pub perms: bool,
    pub cap_drop: bool,
    pub disable_userns: bool,
}

impl LauncherCaps {
    /// Everything (bubblewrap ≥ 0.9, the built-in mode).
    pub const ALL: LauncherCaps = LauncherCaps {
        argv0: true,
        perms: true,
        cap_drop: true,
        disable_userns: true,
    };
}

/// One argv element: text, or the number of a fresh fd reading an empty file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BwrapArg {
    Text(OsString),
    EmptyFileFd,
}

/// A mount point bwrap creates on the host inside a writable bind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SyntheticTarget {
    pub path: PathBuf,
    pub is_dir: bool,
}

/// The inner stage re-exec: `<exe> [subcommand] <flags…> -- <command…>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InnerCommand {
    /// This executable (its real path; readable inside the sandbox).
    pub exe: PathBuf,
    /// Inner-stage flags, without the final `--` and command.
    pub flags: Vec<OsString>,
    pub command: Vec<OsString>,
}

/// Everything the builder needs.
#[derive(Debug, Clone)]
pub struct BwrapInputs<'a> {
    pub policy: &'a ResolvedPolicy,
    pub command_cwd: PathBuf,
    pub network_enabled: bool,
    pub mount_proc: bool,
    pub caps: LauncherCaps,
    /// Expanded deny-glob matches.
    pub glob_matches: BTreeSet<PathBuf>,
    /// Extra paths to hide (the helper's own state directory).
    pub extra_deny: Vec<PathBuf>,
    /// Extra paths that must be readable (the helper executable).
    pub extra_read: Vec<PathBuf>,
    pub inner: InnerCommand,
}

/// The built argv (after `bwrap`) and the host mount points it creates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BwrapCommand {
    pub args: Vec<BwrapArg>,
    pub synthetic_targets: Vec<SyntheticTarget>,
}

impl BwrapCommand {
    /// How many empty-file fds [`Self::render`] needs.
    pub fn fd_count(&self) -> usize {
        self.args
            .iter()
            .filter(|a| matches!(a, BwrapArg::EmptyFileFd))
            .count()
    }

    /// The argv with `fds` (one per placeholder, in order) filled in.
    pub fn render(&self, fds: &[i32]) -> Vec<OsString> {
        let mut fds = fds.iter();
        self.args
            .iter()
            .map(|a| match a {
                BwrapArg::Text(t) => t.clone(),
                BwrapArg::EmptyFileFd => {
                    OsString::from(fds.next().map_or(-1, |fd| *fd).to_string())
                }
            })
            .collect()
    }

    /// The argv with placeholder fds numbered from 3 (for `--explain`, tests).
    pub fn render_example(&self) -> Vec<OsString> {
        let fds: Vec<i32> = (0..self.fd_count()).map(|i| 3 + i as i32).collect();
        self.render(&fds)
    }

    fn text(&mut self, s: impl AsRef<OsStr>) {
        self.args.push(BwrapArg::Text(s.as_ref().to_owned()));
    }

    fn texts(&mut self, items: &[&str]) {
        for s in items {
            self.text(s);
        }
    }

    fn path2(&mut self, opt: &str, p: &Path) {
        self.text(opt);
        self.text(p);
        self.text(p);
    }
}

/// Fixed filesystem facts the builder asks for. Real disk by default.
fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

fn is_symlink(p: &Path) -> bool {
    p.symlink_metadata()
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false)
}

/// Canonical form if `p` exists, `p` otherwise.
fn canonical_or_self(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// Prefixes of `p` from the shortest (`/a`) to `p` itself.
fn prefixes(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut cur = PathBuf::new();
    for c in p.components() {
        cur.push(c.as_os_str());
        if !matches!(c, Component::RootDir) {
            out.push(cur.clone());
        }
    }
    out
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

struct Builder<'a> {
    inputs: &'a BwrapInputs<'a>,
    out: BwrapCommand,
    /// Mount targets of writable roots (canonical).
    writable_mounts: Vec<PathBuf>,
    /// Writable roots in both spellings (logical and canonical).
    writable_paths: Vec<PathBuf>,
    /// Every writable root (in policy order) with its canonical form.
    remaps: Vec<(PathBuf, PathBuf)>,
}

/// Builds the bwrap argv for a restricted policy.
pub fn build(inputs: &BwrapInputs<'_>) -> Result<BwrapCommand, BwrapArgsError> {
    let mut b = Builder {
        inputs,
        out: BwrapCommand::default(),
        writable_mounts: Vec::new(),
        writable_paths: Vec::new(),
        remaps: Vec::new(),
    };
    b.out.texts(&["--new-session", "--die-with-parent"]);
    if inputs.policy.full_write && inputs.glob_matches.is_empty() {
        b.out.path2("--bind", Path::new("/"));
        b.out.texts(&["--dev", "/dev"]);
    } else {
        b.fs_args()?;
    }
    b.namespace_args();
    b.inner_args();
    let mut out = b.out;
    out.synthetic_targets.sort();
    out.synthetic_targets.dedup();
    Ok(out)
}

impl Builder<'_> {
    fn inside_writable(&self, p: &Path) -> bool {
        self.writable_paths.iter().any(|w| p.starts_with(w))
    }

    /// The first symlink among the prefixes of `p` that lie inside a writable path.
    fn symlink_inside_writable(&self, p: &Path) -> Option<PathBuf> {
        prefixes(p)
            .into_iter()
            .find(|q| self.inside_writable(q) && is_symlink(q))
    }

    fn first_missing(p: &Path) -> Option<PathBuf> {
        prefixes(p).into_iter().find(|q| !exists(q))
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

    fn fs_args(&mut self) -> Result<(), BwrapArgsError> {
        let policy = self.inputs.policy;
        let writable = policy.writable_roots();
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
        let mut readable: BTreeSet<PathBuf> = policy.readable_roots().into_iter().collect();
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

        // Everything to hide, remapped below symlinked writable roots.
        let mut unreadable: BTreeSet<PathBuf> = BTreeSet::new();
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
        let by_depth = |set: &mut Vec<PathBuf>| set.sort_by_key(|p| (depth(p), p.clone()));
        let mut done: BTreeSet<PathBuf> = BTreeSet::new();

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
            // A symlinked `.codex`/`.git`/…: protect where it points (the
            // link itself cannot carry a mount).
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
        if let Some(missing) = Self::first_missing(p) {
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
        let meta = match u.symlink_metadata() {
            Ok(m) => m,
            Err(_) => {
                if let Some(missing) = Self::first_missing(u) {
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
        if meta.file_type().is_symlink() {
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

    fn namespace_args(&mut self) {
        let i = self.inputs;
        self.out.texts(&[
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]);
        if !i.network_enabled {
            self.out.text("--unshare-net");
        }
        if i.caps.disable_userns {
            self.out.text("--disable-userns");
        }
        if i.caps.cap_drop {
            self.out.texts(&["--cap-drop", "ALL"]);
        }
        if i.mount_proc {
            self.out.texts(&["--proc", "/proc"]);
            // bubblewrap covers the kernel's global knobs only for a setuid
            // launcher; a root caller could otherwise write /proc/sys (e.g.
            // kernel.core_pattern). Bind them read-only over the fresh /proc.
            self.out.path2("--ro-bind", Path::new("/proc/sys"));
            for p in PROC_READ_ONLY_EXTRAS {
                self.out.path2("--ro-bind-try", Path::new(p));
            }
            // The launcher's pid 1 has the same uid, no capabilities and is
            // dumpable: through /proc/1 the command could reach its fds (the
            // helper's stderr pipe among them). Hide it (pidfd_getfd is
            // denied by seccomp).
            self.out.texts(&[
                "--perms",
                "555",
                "--tmpfs",
                "/proc/1",
                "--remount-ro",
                "/proc/1",
            ]);
        } else {
            // Without a fresh procfs the host's /proc (bound with `/`) would
            // show every host process: hide it instead.
            self.out.texts(&[
                "--perms",
                "555",
                "--tmpfs",
                "/proc",
                "--remount-ro",
                "/proc",
            ]);
        }
        let cwd = canonical_or_self(&i.command_cwd);
        self.out.text("--chdir");
        self.out.text(&cwd);
    }

    fn inner_args(&mut self) {
        let inner = &self.inputs.inner;
        if self.inputs.caps.argv0 {
            self.out.texts(&["--argv0", INNER_ARGV0, "--"]);
            self.out.text(&inner.exe);
        } else {
            // No --argv0 (bubblewrap < 0.9): the subcommand form dispatches
            // whatever the executable's basename is.
            self.out.text("--");
            self.out.text(&inner.exe);
            self.out.text("linux-sandbox");
        }
        for f in &inner.flags {
            self.out.text(f);
        }
        self.out.text("--");
        for c in &inner.command {
            self.out.text(c);
        }
    }
}

/// Device and inode of a path, for cleanup bookkeeping.
pub fn dev_ino(p: &Path) -> Option<(u64, u64)> {
    p.symlink_metadata().ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::policy::{
        FileSystemAccessMode::{Deny, Read, Write},
        FileSystemSandboxEntry, FileSystemSandboxPolicy, PermissionProfile, ResolveContext,
    };

    fn inputs<'a>(policy: &'a ResolvedPolicy, cwd: &Path) -> BwrapInputs<'a> {
        BwrapInputs {
            policy,
            command_cwd: cwd.to_path_buf(),
            network_enabled: false,
            mount_proc: true,
            caps: LauncherCaps::ALL,
            glob_matches: BTreeSet::new(),
            extra_deny: Vec::new(),
            extra_read: Vec::new(),
            inner: InnerCommand {
                exe: PathBuf::from("/opt/codexbox"),
                flags: vec!["--apply-seccomp-then-exec".into()],
                command: vec!["/bin/true".into()],
            },
        }
    }

    fn render(cmd: &BwrapCommand) -> String {
        cmd.render_example()
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn resolve(fs: &FileSystemSandboxPolicy, cwd: &Path) -> ResolvedPolicy {
        fs.resolve_with(&ResolveContext {
            cwd: cwd.to_path_buf(),
            tmpdir: None,
            project_roots: Vec::new(),
        })
    }

    const NS: &str =
        "--unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup-try";
    const PROC_RO: &str = "--ro-bind /proc/sys /proc/sys \
        --ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger \
        --ro-bind-try /proc/irq /proc/irq --ro-bind-try /proc/bus /proc/bus \
        --perms 555 --tmpfs /proc/1 --remount-ro /proc/1";

    #[test]
    fn read_only_argv_with_argv0() {
        let policy = resolve(&FileSystemSandboxPolicy::read_only(), Path::new("/"));
        let cmd = build(&inputs(&policy, Path::new("/"))).unwrap();
        assert_eq!(
            render(&cmd),
            format!(
                "--new-session --die-with-parent --ro-bind / / --dev /dev {NS} --unshare-net \
                 --disable-userns --cap-drop ALL --proc /proc {PROC_RO} --chdir / --argv0 codex-linux-sandbox \
                 -- /opt/codexbox --apply-seccomp-then-exec -- /bin/true"
            )
        );
        assert!(cmd.synthetic_targets.is_empty());
    }

    #[test]
    fn launcher_without_argv0_uses_subcommand_form_and_only_first_separator() {
        let policy = resolve(&FileSystemSandboxPolicy::read_only(), Path::new("/"));
        let mut i = inputs(&policy, Path::new("/"));
        i.caps = LauncherCaps {
            argv0: false,
            perms: true,
            cap_drop: true,
            disable_userns: false,
        };
        i.network_enabled = true;
        i.mount_proc = false;
        i.inner.command = vec!["/opt/codexbox".into(), "--".into(), "x".into()];
        let cmd = build(&i).unwrap();
        assert_eq!(
            render(&cmd),
            format!(
                "--new-session --die-with-parent --ro-bind / / --dev /dev {NS} --cap-drop ALL \
                 --perms 555 --tmpfs /proc --remount-ro /proc --chdir / -- /opt/codexbox linux-sandbox --apply-seccomp-then-exec -- \
                 /opt/codexbox -- x"
            )
        );
    }

    fn fixture() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn workspace_masks_metadata_and_records_synthetic_targets() {
        let (_dir, root) = fixture();
        let repo = root.join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        let (fs, _) = PermissionProfile::workspace_write().to_runtime();
        let mut fs = fs;
        // Keep the test independent of the host's /tmp and $TMPDIR.
        fs.entries.retain(|e| {
            !matches!(
                e.path,
                crate::sandbox::policy::FileSystemPath::Special {
                    value: crate::sandbox::policy::FileSystemSpecialPath::SlashTmp
                        | crate::sandbox::policy::FileSystemSpecialPath::Tmpdir
                }
            )
        });
        let policy = resolve(&fs, &repo);
        let cmd = build(&inputs(&policy, &repo)).unwrap();
        let r = repo.display();
        assert_eq!(
            render(&cmd),
            format!(
                "--new-session --die-with-parent --ro-bind / / --dev /dev --bind {r} {r} \
                 --perms 555 --tmpfs {r}/.agents --remount-ro {r}/.agents \
                 --perms 555 --tmpfs {r}/.codex --remount-ro {r}/.codex \
                 --ro-bind {r}/.git {r}/.git \
                 {NS} --unshare-net --disable-userns --cap-drop ALL --proc /proc {PROC_RO} --chdir {r} \
                 --argv0 codex-linux-sandbox -- /opt/codexbox --apply-seccomp-then-exec -- /bin/true"
            )
        );
        assert_eq!(
            cmd.synthetic_targets,
            vec![
                SyntheticTarget {
                    path: repo.join(".agents"),
                    is_dir: true
                },
                SyntheticTarget {
                    path: repo.join(".codex"),
                    is_dir: true
                }
            ]
        );
        assert!(
            !repo.join(".codex").exists(),
            "nothing created at build time"
        );
    }

    fn split(entries: Vec<FileSystemSandboxEntry>) -> FileSystemSandboxPolicy {
        FileSystemSandboxPolicy {
            entries,
            ..Default::default()
        }
    }

    #[test]
    fn split_policy_reenables_writable_subpaths_after_unreadable_parent() {
        let (_dir, root) = fixture();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("a/f.txt"), "x").unwrap();
        let fs = split(vec![
            FileSystemSandboxEntry::special(
                crate::sandbox::policy::FileSystemSpecialPath::Root,
                Read,
            ),
            FileSystemSandboxEntry::path(root.join("a"), Deny),
            FileSystemSandboxEntry::path(root.join("a/b/c"), Write),
            FileSystemSandboxEntry::path(root.join("a/f.txt"), Write),
        ]);
        let policy = resolve(&fs, &root);
        let cmd = build(&inputs(&policy, &root)).unwrap();
        let r = root.display();
        let text = render(&cmd);
        let fs_part = text
            .split(" --unshare-user")
            .next()
            .unwrap()
            .trim_start_matches("--new-session --die-with-parent ");
        // Two fds: the re-opened file's mount point and nothing else.
        assert_eq!(
            fs_part,
            format!(
                "--ro-bind / / --dev /dev --perms 111 --tmpfs {r}/a --perms 111 --dir {r}/a/b \
                 --perms 111 --dir {r}/a/b/c --perms 000 --file 3 {r}/a/f.txt --remount-ro {r}/a \
                 --bind {r}/a/f.txt {r}/a/f.txt \
                 --bind {r}/a/b/c {r}/a/b/c \
                 --perms 555 --tmpfs {r}/a/b/c/.git --remount-ro {r}/a/b/c/.git \
                 --perms 555 --tmpfs {r}/a/b/c/.agents --remount-ro {r}/a/b/c/.agents \
                 --perms 555 --tmpfs {r}/a/b/c/.codex --remount-ro {r}/a/b/c/.codex"
            )
        );
    }

    #[test]
    fn deny_under_write_is_reapplied_after_the_bind_and_files_use_their_own_fd() {
        let (_dir, root) = fixture();
        std::fs::create_dir_all(root.join("w/secret")).unwrap();
        std::fs::write(root.join("w/key.pem"), "k").unwrap();
        std::fs::write(root.join("w/other.pem"), "k").unwrap();
        let fs = split(vec![
            FileSystemSandboxEntry::special(
                crate::sandbox::policy::FileSystemSpecialPath::Root,
                Read,
            ),
            FileSystemSandboxEntry::path(root.join("w"), Write),
            FileSystemSandboxEntry::path(root.join("w/.git"), Write),
            FileSystemSandboxEntry::path(root.join("w/.agents"), Write),
            FileSystemSandboxEntry::path(root.join("w/.codex"), Write),
            FileSystemSandboxEntry::path(root.join("w/secret"), Deny),
        ]);
        let policy = resolve(&fs, Path::new("/elsewhere"));
        let mut i = inputs(&policy, &root);
        i.glob_matches = [root.join("w/key.pem"), root.join("w/other.pem")].into();
        let cmd = build(&i).unwrap();
        let text = render(&cmd);
        let r = root.display();
        assert!(
            text.contains(&format!(
                "--bind {r}/w {r}/w --perms 000 --ro-bind-data 3 {r}/w/key.pem \
                 --perms 000 --ro-bind-data 4 {r}/w/other.pem \
                 --perms 000 --tmpfs {r}/w/secret --remount-ro {r}/w/secret"
            )),
            "{text}"
        );
        assert_eq!(cmd.fd_count(), 2);
    }

    #[test]
    fn restricted_read_uses_tmpfs_root_and_makes_the_helper_readable() {
        let (_dir, root) = fixture();
        let fs = split(vec![
            FileSystemSandboxEntry::special(
                crate::sandbox::policy::FileSystemSpecialPath::Minimal,
                Read,
            ),
            FileSystemSandboxEntry::path(root.clone(), Read),
        ]);
        let policy = resolve(&fs, &root);
        let mut i = inputs(&policy, &root);
        i.extra_read = vec![PathBuf::from("/usr/bin/env")];
        let text = render(&build(&i).unwrap());
        assert!(text.starts_with("--new-session --die-with-parent --tmpfs / --dev /dev"));
        assert!(text.contains(&format!("--ro-bind {0} {0}", root.display())));
        assert!(text.contains("--ro-bind /usr /usr"));
        assert!(text.contains("--ro-bind /usr/bin/env /usr/bin/env"));
    }

    #[test]
    fn symlinked_metadata_is_masked_at_its_target_not_refused() {
        let (_dir, root) = fixture();
        let w = root.join("w");
        std::fs::create_dir_all(w.join("decoy")).unwrap();
        std::os::unix::fs::symlink("decoy", w.join(".codex")).unwrap();
        let fs = split(vec![
            FileSystemSandboxEntry::special(
                crate::sandbox::policy::FileSystemSpecialPath::Root,
                Read,
            ),
            FileSystemSandboxEntry::path(w.clone(), Write),
        ]);
        let policy = resolve(&fs, &w);
        let text = render(&build(&inputs(&policy, &w)).unwrap());
        let d = w.join("decoy");
        assert!(
            text.contains(&format!("--ro-bind {0} {0}", d.display())),
            "{text}"
        );
    }

    #[test]
    fn symlinked_writable_root_binds_real_target() {
        let (_dir, root) = fixture();
        std::fs::create_dir_all(root.join("real/.git")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let fs = split(vec![
            FileSystemSandboxEntry::special(
                crate::sandbox::policy::FileSystemSpecialPath::Root,
                Read,
            ),
            FileSystemSandboxEntry::path(root.join("link"), Write),
        ]);
        let policy = resolve(&fs, Path::new("/elsewhere"));
        let text = render(&build(&inputs(&policy, &root)).unwrap());
        let real = root.join("real");
        assert!(
            text.contains(&format!(
                "--bind {0} {0} --ro-bind {0}/.git {0}/.git",
                real.display()
            )),
            "{text}"
        );
    }

    #[test]
    fn missing_writable_roots_are_skipped() {
        let fs = split(vec![
            FileSystemSandboxEntry::special(
                crate::sandbox::policy::FileSystemSpecialPath::Root,
                Read,
            ),
            FileSystemSandboxEntry::path("/does/not/exist", Write),
        ]);
        let policy = resolve(&fs, Path::new("/"));
        let text = render(&build(&inputs(&policy, Path::new("/"))).unwrap());
        assert!(!text.contains("--bind /does"), "{text}");
    }

    #[test]
    fn helper_state_directory_is_hidden() {
        let (_dir, root) = fixture();
        let state = root.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let policy = resolve(&FileSystemSandboxPolicy::read_only(), Path::new("/"));
        let mut i = inputs(&policy, Path::new("/"));
        i.extra_deny = vec![state.clone()];
        let text = render(&build(&i).unwrap());
        assert!(
            text.contains(&format!(
                "--perms 000 --tmpfs {0} --remount-ro {0} --unshare-user",
                state.display()
            )),
            "{text}"
        );
    }

    #[test]
    fn restricted_policy_chdirs_to_canonical_command_cwd() {
        let (_dir, root) = fixture();
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
        let policy = resolve(&FileSystemSandboxPolicy::read_only(), &root);
        let text = render(&build(&inputs(&policy, &root.join("alias"))).unwrap());
        assert!(
            text.contains(&format!("--chdir {} --argv0", root.join("real").display())),
            "{text}"
        );
    }

    #[test]
    fn root_read_directory_carve_outs_are_masked_read_only() {
        let (_dir, root) = fixture();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        let fs = split(vec![
            FileSystemSandboxEntry::special(
                crate::sandbox::policy::FileSystemSpecialPath::Root,
                Read,
            ),
            FileSystemSandboxEntry::path(root.join("secrets"), Deny),
        ]);
        let policy = resolve(&fs, &root);
        let text = render(&build(&inputs(&policy, &root)).unwrap());
        assert!(
            text.starts_with(&format!(
                "--new-session --die-with-parent --ro-bind / / --dev /dev \
                 --perms 000 --tmpfs {0} --remount-ro {0} --unshare-user",
                root.join("secrets").display()
            )),
            "{text}"
        );
    }

    #[test]
    fn writable_root_slash_keeps_the_minimal_dev() {
        let fs = split(vec![
            FileSystemSandboxEntry::special(
                crate::sandbox::policy::FileSystemSpecialPath::Root,
                Write,
            ),
            FileSystemSandboxEntry::path("/dev/shm", Write),
            FileSystemSandboxEntry::path("/etc", Read),
        ]);
        let policy = resolve(&fs, Path::new("/"));
        let text = render(&build(&inputs(&policy, Path::new("/"))).unwrap());
        assert!(
            text.starts_with(
                "--new-session --die-with-parent --ro-bind / / --dev /dev --bind / / --dev /dev "
            ),
            "{text}"
        );
        let etc = text.find("--ro-bind /etc /etc").unwrap();
        let shm = text.find("--bind /dev/shm /dev/shm").unwrap();
        assert!(etc < shm, "{text}");
    }
}
