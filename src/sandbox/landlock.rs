//! The Landlock + seccomp + no_new_privs backend (docs/sandbox.md), used when user
//! namespaces are unavailable (containers, Ubuntu's AppArmor restriction) or
//! asked for with `--use-legacy-landlock` / `--backend landlock`.
//!
//! Input: the policy resolved against the cwd ([`ResolvedPolicy`], owned by
//! `policy`). [`plan`] turns it into Landlock path rules and the
//! list of rules Landlock cannot express; [`apply`] confines the calling
//! process right before exec. It never runs a command unsandboxed: when the
//! kernel does not enforce the ruleset it fails.
//!
//! Landlock only grants (a rule on a directory covers everything beneath
//! it), so a carve-out is written as grants on its siblings:
//! - read-only subpaths of a writable root (`.git`, `.codex`, `.agents`,
//!   explicit read entries): write is granted on every other entry of each
//!   directory between the root and the subpath, never on the root itself,
//!   so nothing can be created next to the protected name either;
//! - deny paths under a readable root: read is granted on every sibling of
//!   each component of the path, and the directories on the way get only
//!   `ReadDir` (so they stay listable: the *names* inside a denied
//!   directory remain visible, its contents do not);
//! - the expansion is bounded ([`MAX_RULES`], [`MAX_DIR_ENTRIES`]); beyond
//!   that the carve-out cannot be enforced and is named in the warning.
//!   Symlinks are never granted through (writes through them land on their
//!   target and follow the target's rules), and a carve-out that is, or
//!   passes through, a symlink (`.codex -> decoy`) carves out the target too.
//!
//! Deny globs are expanded once at start (`sandbox::glob`, as for
//! bubblewrap) and the matches denied like paths; files created later are
//! not covered. Named in the one warning line: globs that would scan from
//! `/`, carve-outs beyond the bounds, and, on older kernels, truncation
//! (ABI < 3) and signal scoping (ABI < 6).

use std::fs;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

use crate::policy::{FileSystemSandboxKind, NetworkSandboxPolicy, ResolvedPolicy};
use crate::sandbox::glob::{self, GlobError, Scanner};
use crate::sandbox::probe;
use crate::sandbox::seccomp::{HostShared, SeccompError, SeccompMode, SeccompProgram};
use crate::sys::confine::{self, ConfineError};

/// The newest ABI this crate version knows; older kernels are handled
/// best-effort by the crate.
const TARGET_ABI: ABI = ABI::V9;
/// At most this many path rules in one ruleset.
pub const MAX_RULES: usize = 4096;
/// A directory with more entries than this is not expanded into siblings.
pub const MAX_DIR_ENTRIES: usize = 2048;

/// Device nodes a command needs to write even when nothing else is writable.
const WRITABLE_DEVICES: [&str; 8] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Setting up the Landlock backend failed; the command must not run.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("Landlock is unavailable: {0}; refusing to run unsandboxed")]
    Unavailable(String),
    #[error("the kernel did not enforce the Landlock ruleset; refusing to run unsandboxed")]
    NotEnforced,
    #[error("cannot build the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error(transparent)]
    Glob(#[from] GlobError),
    #[error(transparent)]
    Confine(#[from] ConfineError),
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
}

/// What the backend will grant, and what it cannot enforce.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// False for full read+write policies: no Landlock ruleset is needed.
    pub restrict_fs: bool,
    /// Paths granted read (Execute, ReadFile, ReadDir) beneath them.
    pub read: Vec<PathBuf>,
    /// Directories granted only ReadDir (on the way to a carve-out).
    pub list_only: Vec<PathBuf>,
    /// Paths granted write beneath them (read comes from `read`).
    pub write: Vec<PathBuf>,
    /// Rules of the policy Landlock cannot enforce here, for the warning.
    pub unenforced: Vec<String>,
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The kernel's Landlock ABI (0: no ruleset was needed).
    pub abi: u32,
    /// `fully_enforced`, `partially_enforced` or `not_needed`.
    pub status: &'static str,
    /// Number of path rules in the ruleset.
    pub rules: usize,
    /// Rules not enforced (already printed as one warning line).
    pub unenforced: Vec<String>,
    pub seccomp: SeccompMode,
}

impl Report {
    /// The warning line, when something is not enforced.
    pub fn warning(&self, prefix: &str) -> Option<String> {
        warning_line(prefix, &self.unenforced)
    }
}

/// `PREFIX: warning: the Landlock backend cannot enforce: A; B`.
pub fn warning_line(prefix: &str, unenforced: &[String]) -> Option<String> {
    if unenforced.is_empty() {
        return None;
    }
    Some(format!(
        "{prefix}: warning: the Landlock backend cannot enforce: {}",
        unenforced.join("; ")
    ))
}

/// The seccomp mode for a network policy.
pub fn seccomp_mode(network: NetworkSandboxPolicy) -> SeccompMode {
    if network.is_enabled() {
        SeccompMode::NetworkEnabled
    } else {
        SeccompMode::Restricted
    }
}

/// Collects grants while expanding carve-outs, within [`MAX_RULES`].
struct Grants {
    out: Vec<(PathBuf, Grant)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grant {
    List,
    Read,
    Write,
}

/// Expansion gave up (too many entries, unreadable directory).
struct TooBig;

impl Grants {
    fn push(&mut self, path: PathBuf, grant: Grant) -> Result<(), TooBig> {
        if self.out.len() >= MAX_RULES {
            return Err(TooBig);
        }
        self.out.push((path, grant));
        Ok(())
    }

    /// Grants `grant` on `dir` except on the `excluded` paths beneath it.
    fn grant_except(&mut self, dir: &Path, excluded: &[&Path], grant: Grant) -> Result<(), TooBig> {
        let relevant: Vec<&Path> = excluded
            .iter()
            .copied()
            .filter(|p| p.starts_with(dir))
            .collect();
        if relevant.contains(&dir) {
            return Ok(());
        }
        if relevant.is_empty() {
            return self.push(dir.to_path_buf(), grant);
        }
        // `dir` is an ancestor of a carve-out: it must stay listable, and
        // its entries are granted one by one.
        self.push(dir.to_path_buf(), Grant::List)?;
        let entries = fs::read_dir(dir).map_err(|_| TooBig)?;
        let mut count = 0usize;
        for entry in entries {
            count += 1;
            if count > MAX_DIR_ENTRIES {
                return Err(TooBig);
            }
            let entry = entry.map_err(|_| TooBig)?;
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            if file_type.is_symlink() {
                continue;
            }
            let child = dir.join(entry.file_name());
            self.grant_except(&child, &relevant, grant)?;
        }
        Ok(())
    }
}

/// Computes the Landlock rules for `resolved`. Reads directories (for
/// carve-outs) but changes nothing.
pub fn plan(resolved: &ResolvedPolicy, kernel_abi: u32) -> Result<Plan, LandlockError> {
    let mut plan = Plan::default();
    if resolved.kind != FileSystemSandboxKind::Restricted
        || (resolved.full_read && resolved.full_write)
    {
        return Ok(plan);
    }
    plan.restrict_fs = true;
    // Each deny path with the rule it comes from (for the warning).
    let mut denies: Vec<(PathBuf, String)> = resolved
        .unreadable_roots()
        .into_iter()
        .map(|p| {
            let label = format!("deny {}", p.display());
            (p, label)
        })
        .collect();
    // Deny globs become the paths matching at start, as with bubblewrap.
    let globs = resolved.unreadable_globs();
    if !globs.is_empty() {
        let scanner = Scanner::detect(&resolved.cwd, &resolved.untrusted_dirs());
        let depth = resolved.glob_scan_max_depth.map(|d| d.get());
        for pattern in globs {
            let expansion = glob::expand(std::slice::from_ref(pattern), depth, &scanner)?;
            for skipped in expansion.skipped {
                plan.unenforced
                    .push(format!("deny glob {skipped} (would scan from /)"));
            }
            for path in expansion.paths {
                denies.push((path, format!("deny glob {pattern}")));
            }
        }
    }
    // A carve-out reached through a symlink (`.codex -> decoy`) protects
    // the link's target too: Landlock checks the resolved path.
    let targets: Vec<(PathBuf, String)> = denies
        .iter()
        .filter_map(|(p, label)| symlink_target(p).map(|t| (t, label.clone())))
        .collect();
    denies.extend(targets);
    let deny_refs: Vec<&Path> = denies.iter().map(|(p, _)| p.as_path()).collect();
    let writable = resolved.writable_roots();
    let mut protected: Vec<PathBuf> = Vec::new();
    for root in &writable {
        for sub in &root.read_only_subpaths {
            protected.push(sub.clone());
            protected.extend(symlink_target(sub));
        }
    }

    let mut grants = Grants { out: Vec::new() };
    let mut read_roots: Vec<PathBuf> = resolved.readable_roots();
    for root in &writable {
        read_roots.push(root.root.clone());
    }
    read_roots.sort();
    read_roots.dedup();
    for root in &read_roots {
        let mark = grants.out.len();
        if grants.grant_except(root, &deny_refs, Grant::Read).is_err() {
            grants.out.truncate(mark);
            let _ = grants.push(root.clone(), Grant::Read);
            for (_, label) in denies.iter().filter(|(d, _)| d.starts_with(root)) {
                let item = format!("{label} (too many entries beside it)");
                if !plan.unenforced.contains(&item) {
                    plan.unenforced.push(item);
                }
            }
        }
    }
    for root in &writable {
        let mut excluded: Vec<&Path> = protected
            .iter()
            .map(PathBuf::as_path)
            .filter(|p| p.starts_with(&root.root))
            .collect();
        excluded.extend(
            deny_refs
                .iter()
                .copied()
                .filter(|d| d.starts_with(&root.root)),
        );
        let mark = grants.out.len();
        if grants
            .grant_except(&root.root, &excluded, Grant::Write)
            .is_err()
        {
            grants.out.truncate(mark);
            plan.unenforced.push(format!(
                "write {} (kept read-only: too many entries to protect its read-only subpaths)",
                root.root.display()
            ));
        }
    }
    for device in WRITABLE_DEVICES {
        if Path::new(device).exists() {
            let _ = grants.push(PathBuf::from(device), Grant::Read);
            let _ = grants.push(PathBuf::from(device), Grant::Write);
        }
    }

    if kernel_abi < 3 {
        plan.unenforced
            .push("truncation of read-only files (Landlock ABI < 3)".to_owned());
    }
    if kernel_abi < 6 {
        plan.unenforced
            .push("signals to processes outside the sandbox (Landlock ABI < 6)".to_owned());
    }

    let mut dedup = std::collections::BTreeSet::new();
    for (path, grant) in grants.out {
        if dedup.insert((path.clone(), grant as u8)) {
            match grant {
                Grant::List => plan.list_only.push(path),
                Grant::Read => plan.read.push(path),
                Grant::Write => plan.write.push(path),
            }
        }
    }
    Ok(plan)
}

/// Where `path` really is, when a symlink anywhere on it makes that differ.
fn symlink_target(path: &Path) -> Option<PathBuf> {
    let real = path.canonicalize().ok()?;
    (real != path).then_some(real)
}

/// Adds one rule; a path that vanished since planning is skipped (it grants
/// nothing), file rules get only file rights.
fn beneath(path: &Path, access: BitFlags<AccessFs>) -> Option<PathBeneath<PathFd>> {
    let is_dir = fs::metadata(path).ok()?.is_dir();
    let access = if is_dir {
        access
    } else {
        access & AccessFs::from_file(TARGET_ABI)
    };
    let fd = PathFd::new(path).ok()?;
    Some(PathBeneath::new(fd, access))
}

/// Confines the calling process for `resolved` and `network`, right before
/// exec: fresh session keyring, every capability dropped, no_new_privs,
/// seccomp for `network`, then the Landlock ruleset. Prints one warning line
/// (prefixed `prefix`) naming every rule it cannot enforce. Fails closed
/// when Landlock is unavailable or not enforced and the policy restricts
/// the filesystem.
pub fn apply(
    resolved: &ResolvedPolicy,
    network: NetworkSandboxPolicy,
    prefix: &str,
) -> Result<Report, LandlockError> {
    // Only the ABI is needed here: no user-namespace probe (and no fork).
    let abi = probe::landlock_abi();
    let kernel_abi = abi.as_ref().map_or(0, |v| *v);
    let plan = plan(resolved, kernel_abi)?;
    let mode = seccomp_mode(network);
    // No namespaces here: give the command its own IPC namespace when the
    // caller may (root), otherwise keep it off the host's SysV IPC and
    // message queues with seccomp. Landlock has no right for file metadata:
    // set-id bits and extended attributes are denied with seccomp too.
    let shared = HostShared {
        ipc: !confine::unshare_ipc(),
        metadata: true,
    };
    let program = SeccompProgram::build_with(mode, shared)?;

    let ruleset = if plan.restrict_fs {
        if let Err(err) = &abi {
            return Err(LandlockError::Unavailable(probe::describe_landlock_error(
                err,
            )));
        }
        Some(build_ruleset(&plan, mode)?)
    } else {
        None
    };

    confine::confine_process()?;
    program.install()?;

    let mut report = Report {
        abi: kernel_abi,
        status: "not_needed",
        rules: plan.read.len() + plan.write.len() + plan.list_only.len(),
        unenforced: plan.unenforced.clone(),
        seccomp: mode,
    };
    if let Some((ruleset, _)) = ruleset {
        let status = ruleset.restrict_self()?;
        report.status = match status.ruleset {
            RulesetStatus::FullyEnforced => "fully_enforced",
            RulesetStatus::PartiallyEnforced => "partially_enforced",
            RulesetStatus::NotEnforced => return Err(LandlockError::NotEnforced),
        };
    }
    if let Some(line) = report.warning(prefix) {
        eprintln!("{line}");
    }
    Ok(report)
}

type Created = (landlock::RulesetCreated, usize);

fn build_ruleset(plan: &Plan, mode: SeccompMode) -> Result<Created, LandlockError> {
    let read = AccessFs::from_read(TARGET_ABI);
    let write = AccessFs::from_write(TARGET_ABI);
    let all = AccessFs::from_all(TARGET_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?;
    if mode == SeccompMode::Restricted {
        // Belt and braces: seccomp already refuses TCP sockets.
        ruleset = ruleset.handle_access(AccessNet::from_all(TARGET_ABI))?;
        ruleset = ruleset.scope(Scope::from_all(TARGET_ABI))?;
    } else {
        ruleset = ruleset.scope(Scope::Signal)?;
    }
    let mut created = ruleset.create()?;
    let mut count = 0;
    let rules = plan
        .read
        .iter()
        .map(|p| (p, read))
        .chain(
            plan.list_only
                .iter()
                .map(|p| (p, BitFlags::from(AccessFs::ReadDir))),
        )
        .chain(plan.write.iter().map(|p| (p, write)));
    for (path, access) in rules {
        if let Some(rule) = beneath(path, access) {
            created = created.add_rule(rule)?;
            count += 1;
        }
    }
    Ok((created, count))
}
