//! Bubblewrap argv construction (docs/sandbox.md).
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
use std::path::{Component, Path, PathBuf};

use crate::policy::{normalize, HostView, ResolvedPolicy, PROTECTED_METADATA_NAMES};

/// Kernel controls below a fresh `/proc` bound read-only when present
/// (besides `/proc/sys`, which must exist).
const PROC_READ_ONLY_EXTRAS: [&str; 3] = ["/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

/// `argv[0]` the inner stage is started with when the launcher has `--argv0`.
pub const INNER_ARGV0: &str = "codex-linux-sandbox";

/// What the bwrap argv must bind for the routes (the bridges themselves
/// need nothing visible inside: their listeners are served from outside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyMounts {
    /// `(file in the helper's state directory, where it goes)`: the
    /// sandbox's resolv.conf naming the stub, when the stub can run.
    pub resolv_conf: Option<(PathBuf, PathBuf)>,
}

impl ProxyMounts {
    /// Whether the launcher starts inside the namespace the helper made
    /// (`HostRouting::netns` in `sandbox::proxy_routing`), so without
    /// `--unshare-net`: the stub runs only there, so exactly when it has a
    /// resolv.conf.
    pub fn in_prepared_netns(&self) -> bool {
        self.resolv_conf.is_some()
    }
}

/// Errors building the argv.
#[derive(Debug, thiserror::Error)]
pub enum BwrapArgsError {
    #[error("cannot enforce sandbox path {}: symlinks nest too deeply", .0.display())]
    SymlinkLoop(PathBuf),
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
    /// `policy.host_view()`, as the caller looked it up (once per run: the
    /// lookup walks the host).
    pub host: &'a HostView,
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
    /// Managed proxy routing: the stub's resolv.conf bound read-only after
    /// every other mount, and whether the launcher starts in a network
    /// namespace the helper prepared (no `--unshare-net`).
    pub managed_proxy: Option<ProxyMounts>,
    pub inner: InnerCommand,
}

/// The built argv (after `bwrap`) and the host mount points it creates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BwrapCommand {
    pub args: Vec<BwrapArg>,
    pub synthetic_targets: Vec<SyntheticTarget>,
    /// Where the per-command part of `args` begins (`--chdir` and the
    /// inner command): what precedes it describes the sandbox alone.
    pub tail_start: usize,
}

impl BwrapCommand {
    /// The options that build the sandbox (namespaces and mount tree),
    /// without the working directory and the command.
    pub fn sandbox_args(&self) -> &[BwrapArg] {
        self.args.get(..self.tail_start).unwrap_or(&self.args)
    }

    /// The working directory the command starts in (`--chdir`).
    pub fn chdir(&self) -> Option<&OsStr> {
        match self.args.get(self.tail_start..)? {
            [BwrapArg::Text(flag), BwrapArg::Text(dir), ..] if flag == "--chdir" => Some(dir),
            _ => None,
        }
    }

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
    /// What `lstat` said of the paths the masks looked at, asked once per
    /// build: deny globs with many matches share most prefixes.
    file_types: std::cell::RefCell<FileTypes>,
    /// What the caller vouches `lstat` would still say.
    known: Option<&'a FileTypes>,
}

/// The type of the entry at each path, not followed (`None`: absent).
pub type FileTypes = std::collections::HashMap<PathBuf, Option<std::fs::FileType>>;

impl Builder<'_> {
    /// The type of the entry at `p`, not followed (`None`: absent), looked
    /// at once per build, and not at all when the caller vouches for it.
    fn file_type(&self, p: &Path) -> Option<std::fs::FileType> {
        // What the caller vouches for is not looked at, so not returned.
        if let Some(known) = self.known.and_then(|known| known.get(p)) {
            return *known;
        }
        if let Some(seen) = self.file_types.borrow().get(p) {
            return *seen;
        }
        let found = p.symlink_metadata().ok().map(|m| m.file_type());
        self.file_types.borrow_mut().insert(p.to_path_buf(), found);
        found
    }
}

/// The prefixes of `p` from the shortest (`/a`) to `p` itself, without `/`.
fn shortest_first(p: &Path) -> impl Iterator<Item = &Path> {
    let mut ancestors: Vec<&Path> = p.ancestors().filter(|a| a.parent().is_some()).collect();
    ancestors.reverse();
    ancestors.into_iter()
}

/// Builds the bwrap argv for a restricted policy.
pub fn build(inputs: &BwrapInputs<'_>) -> Result<BwrapCommand, BwrapArgsError> {
    build_with_known(inputs, None).map(|(built, _)| built)
}

/// [`build`], taking the types in `known` as what `lstat` would say of
/// those paths now (a caller that can vouch nothing changed since it saw
/// them); also returns the types of the other paths the masks looked at.
pub fn build_with_known(
    inputs: &BwrapInputs<'_>,
    known: Option<&FileTypes>,
) -> Result<(BwrapCommand, FileTypes), BwrapArgsError> {
    let mut b = Builder {
        inputs,
        out: BwrapCommand::default(),
        writable_mounts: Vec::new(),
        writable_paths: Vec::new(),
        remaps: Vec::new(),
        file_types: Default::default(),
        known,
    };
    b.out.texts(&["--new-session", "--die-with-parent"]);
    if inputs.policy.full_write && inputs.glob_matches.is_empty() {
        b.out.path2("--bind", Path::new("/"));
        b.out.texts(&["--dev", "/dev"]);
    } else {
        b.fs_args()?;
    }
    b.proxy_mount_args();
    b.namespace_args();
    b.inner_args();
    let mut out = b.out;
    out.synthetic_targets.sort();
    out.synthetic_targets.dedup();
    Ok((out, b.file_types.into_inner()))
}

mod fs;
mod namespaces;
#[cfg(test)]
mod tests;
