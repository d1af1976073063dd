//! What a fresh sandbox would be for one helper command line, decided
//! exactly as the bubblewrap backend decides it (`sandbox::orchestrate`): the
//! policy resolved against the host as it is now, the deny globs
//! expanded, the bwrap argv built. [`Plan::digest`] condenses the part that
//! describes the sandbox (namespaces and mount tree, not the command or
//! its working directory) together with the identity of every host path
//! it names, so two plans with the same digest build the same sandbox.
//!
//! A plan also says whether a sandbox of this shape may be reused at all
//! ([`NotReusable`]): reuse covers the bubblewrap backend without managed
//! routing, with a fresh `/proc`, whose only writable mounts of its own
//! are `/dev`'s `shm` and `pts` (each command gets fresh ones).

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::request::DenyMatches;
use crate::runtime_paths::PrivateDirEnv;
use crate::sandbox::bwrap_args::{
    self, BwrapArg, BwrapCommand, BwrapInputs, FileTypes, InnerCommand, LauncherCaps,
};
use crate::sandbox::cli::{Args, Backend, Failure};
use crate::sandbox::orchestrate::{self, Prepared};
use crate::sandbox::{launcher, read_only_links, state};

/// Why a command line runs on a one-shot sandbox only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReusable {
    #[error("not a plain run of the bubblewrap backend")]
    NotAPlainRun,
    #[error("managed proxy routing")]
    ManagedRouting,
    #[error("the filesystem is not sandboxed (full-disk write)")]
    NoFilesystemSandbox,
    #[error("no fresh /proc")]
    NoProc,
    #[error("CODEXBOX_BWRAP chooses a launcher")]
    LauncherChosen,
    #[error("the sandbox has a writable mount of its own at {}", .0.display())]
    PrivateWritable(PathBuf),
}

/// The helper's environment as far as its decision reads it: `$TMPDIR`
/// (a place where links may be planted, and writable where the profile
/// says so), `$XDG_RUNTIME_DIR` and `$HOME` (the private state directory
/// the sandbox hides) and [`launcher::FORCE_ENV`] (a chosen launcher).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct DecisionEnv {
    pub tmpdir: Option<OsString>,
    pub private_dir: PrivateDirEnv,
    pub launcher: Option<OsString>,
}

impl DecisionEnv {
    /// The variables it holds.
    const NAMES: [&'static str; 4] = ["TMPDIR", "XDG_RUNTIME_DIR", "HOME", launcher::FORCE_ENV];

    /// This process's.
    pub fn of_process() -> DecisionEnv {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// That of a process started with `env` (the last of repeated names
    /// counts, as when they are set in order).
    pub fn of_pairs(env: &[(OsString, OsString)]) -> DecisionEnv {
        Self::from_lookup(|name| {
            env.iter()
                .rev()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        })
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> DecisionEnv {
        let [tmpdir, xdg_runtime_dir, home, launcher] = Self::NAMES.map(lookup);
        DecisionEnv {
            tmpdir,
            private_dir: PrivateDirEnv {
                xdg_runtime_dir,
                home,
            },
            launcher,
        }
    }
}

/// What a decision found of host paths: the type of each entry (not
/// followed; `None`: absent) and the identity ([`identity`]) of each path
/// the digest names. Given back to a later decision, it stands for what
/// the kernel would say, so only a caller that can vouch nothing changed
/// in between gives it (the exec-server, for names in directories its
/// deny-glob index watches, while the index saw nothing happen).
#[derive(Debug, Clone, Default)]
pub struct KnownHost {
    pub file_types: FileTypes,
    pub identities: HashMap<PathBuf, Vec<u8>>,
}

/// The decision for one command line.
#[derive(Debug)]
pub struct Plan {
    /// The helper's arguments, resolved.
    pub prepared: Prepared,
    /// The bwrap argv a one-shot run would use with the built-in launcher.
    pub built: BwrapCommand,
    /// What a one-shot run prints before the command starts (grants dropped
    /// for planted symlinks, deny globs too broad to expand).
    pub warnings: Vec<String>,
    /// The helper's private state directory.
    pub state_dir: PathBuf,
    /// Condenses the sandbox part of `built` and the host paths it names.
    pub digest: [u8; 32],
    /// What the decision found of the host paths it looked at (those it
    /// was told of are not repeated).
    pub looked_at: KnownHost,
}

/// Decides the sandbox for `args`, as a one-shot run of the bubblewrap
/// backend would, with `expansion` as the deny-glob matches when they are
/// those of the patterns and depth `args` resolve to (else, or `None`:
/// scan now, as a one-shot run does). `console` is whether the command's
/// standard output is a terminal (bound as `/dev/console`). `Ok(Err(_))`:
/// decided, but not a sandbox that may be reused; `Err`: the one-shot run
/// fails the same way.
pub fn decide(
    args: &Args,
    env: &DecisionEnv,
    expansion: Option<&DenyMatches>,
    console: bool,
) -> Result<Result<Plan, NotReusable>, Failure> {
    decide_knowing(args, env, expansion, console, None)
}

/// [`decide`], taking what `known` says of host paths as what the kernel
/// would say now (see [`KnownHost`]).
pub fn decide_knowing(
    args: &Args,
    env: &DecisionEnv,
    expansion: Option<&DenyMatches>,
    console: bool,
    known: Option<&KnownHost>,
) -> Result<Result<Plan, NotReusable>, Failure> {
    if let Err(why) = plain_run(args, env) {
        return Ok(Err(why));
    }
    let prepared = orchestrate::prepare_with_tmpdir(args, env.tmpdir.as_deref())?;
    if prepared.resolved.full_write {
        return Ok(Err(NotReusable::NoFilesystemSandbox));
    }
    let state_dir = state::state_dir_in(&env.private_dir).map_err(|e| Failure {
        code: 1,
        message: e.to_string(),
    })?;
    // As a one-shot run: no sandbox around symlinked metadata.
    read_only_links::check(&prepared.host.writable_roots).map_err(|err| Failure {
        code: 1,
        message: format!("error building bubblewrap command: {err}"),
    })?;
    let untrusted = prepared.resolved.untrusted_dirs();
    let depth = prepared.resolved.glob_scan_max_depth.map(|d| d.get());
    let scanned;
    let expansion = match expansion {
        Some(kept)
            if kept.patterns == prepared.resolved.unreadable_globs() && kept.max_depth == depth =>
        {
            &kept.expansion
        }
        _ => {
            scanned = orchestrate::expand_globs(&prepared, &untrusted)?;
            &scanned
        }
    };
    let exe = crate::runtime_paths::self_exe().map_err(|e| Failure {
        code: 1,
        message: format!("cannot locate this executable: {e}"),
    })?;
    let inputs = BwrapInputs {
        policy: &prepared.resolved,
        host: &prepared.host,
        command_cwd: prepared.command_cwd.clone(),
        network_enabled: prepared.network.is_enabled(),
        mount_proc: true,
        caps: LauncherCaps::ALL,
        glob_matches: expansion.paths.clone(),
        extra_deny: orchestrate::extra_deny(&prepared.resolved, &state_dir),
        extra_read: vec![exe.to_path_buf()],
        managed_proxy: None,
        inner: InnerCommand {
            exe: exe.to_path_buf(),
            flags: Vec::new(),
            command: args.command.clone(),
        },
    };
    let (built, file_types) = bwrap_args::build_with_known(&inputs, known.map(|k| &k.file_types))
        .map_err(|e| Failure {
        code: 1,
        message: format!("error building bubblewrap command: {e}"),
    })?;
    if let Some(path) = private_writable_mount(built.sandbox_args()) {
        return Ok(Err(NotReusable::PrivateWritable(path)));
    }
    let mut warnings = orchestrate::dropped_grant_warnings(&prepared.host.dropped_grants);
    warnings.extend(orchestrate::skipped_globs_warning(expansion));
    let (digest, identities) = digest(&built, console, known.map(|k| &k.identities));
    Ok(Ok(Plan {
        prepared,
        built,
        warnings,
        state_dir,
        digest,
        looked_at: KnownHost {
            file_types,
            identities,
        },
    }))
}

/// The command lines the server builds for a sandboxed start, and nothing
/// else: no explain, no inner stage, no Landlock, no managed routing, a
/// fresh `/proc`, the launcher left to the helper (or the built-in one).
fn plain_run(args: &Args, env: &DecisionEnv) -> Result<(), NotReusable> {
    if args.explain
        || args.apply_seccomp_then_exec
        || args.proxy_route_spec.is_some()
        || args.use_legacy_landlock
        || args.backend == Backend::Landlock
        || args.command.is_empty()
    {
        return Err(NotReusable::NotAPlainRun);
    }
    if args.allow_network_for_proxy {
        return Err(NotReusable::ManagedRouting);
    }
    if args.no_proc {
        return Err(NotReusable::NoProc);
    }
    match &env.launcher {
        Some(choice) if !choice.is_empty() && choice != "builtin" => {
            Err(NotReusable::LauncherChosen)
        }
        _ => Ok(()),
    }
}

/// A mount of the sandbox's own that a command could write and the next
/// one would then see: a tmpfs never made read-only (the `/`
/// of restricted reads), a mqueue, writable bind data. `/dev`'s own tmpfs
/// is made read-only when prepared, with fresh `shm` and `pts` per command.
fn private_writable_mount(args: &[BwrapArg]) -> Option<PathBuf> {
    let texts: Vec<Option<&OsStr>> = args
        .iter()
        .map(|arg| match arg {
            BwrapArg::Text(text) => Some(text.as_os_str()),
            BwrapArg::EmptyFileFd => None,
        })
        .collect();
    let mut read_only: BTreeSet<&OsStr> = BTreeSet::new();
    let mut writable: Vec<&OsStr> = Vec::new();
    for (index, option) in texts.iter().enumerate() {
        let value = texts.get(index + 1).copied().flatten();
        match (option.map(OsStr::as_bytes), value) {
            (Some(b"--remount-ro"), Some(dest)) => {
                read_only.insert(dest);
            }
            (Some(b"--tmpfs" | b"--mqueue"), Some(dest)) => writable.push(dest),
            (Some(b"--bind-data"), _) => {
                let dest = texts.get(index + 2).copied().flatten().unwrap_or_default();
                writable.push(dest);
            }
            _ => {}
        }
    }
    writable
        .into_iter()
        .find(|dest| !read_only.contains(dest))
        .map(PathBuf::from)
}

/// The sandbox part of `built`, its host mount points, the console choice,
/// and the identity of every host path the sandbox part names (taken from
/// `known` where it has one); with the identities it looked up.
fn digest(
    built: &BwrapCommand,
    console: bool,
    known: Option<&HashMap<PathBuf, Vec<u8>>>,
) -> ([u8; 32], HashMap<PathBuf, Vec<u8>>) {
    let mut hasher = Sha256::new();
    hasher.update([u8::from(console)]);
    let mut paths: Vec<&Path> = Vec::new();
    for arg in built.sandbox_args() {
        match arg {
            BwrapArg::Text(text) => {
                hasher.update(b"T");
                hasher.update((text.len() as u64).to_le_bytes());
                hasher.update(text.as_bytes());
                let path = Path::new(text);
                if path.is_absolute() && !path.starts_with("/proc") {
                    paths.push(path);
                }
            }
            BwrapArg::EmptyFileFd => hasher.update(b"F"),
        }
    }
    // Each once, in the order of their bytes (cheaper to compare than
    // components, and as fixed).
    paths.sort_unstable_by(|a, b| a.as_os_str().as_bytes().cmp(b.as_os_str().as_bytes()));
    paths.dedup_by(|a, b| a.as_os_str() == b.as_os_str());
    for target in &built.synthetic_targets {
        hasher.update(b"S");
        hasher.update([u8::from(target.is_dir)]);
        hasher.update(target.path.as_os_str().as_bytes());
        hasher.update([0]);
    }
    let mut identities = HashMap::new();
    for path in paths {
        match known.and_then(|known| known.get(path)) {
            Some(known) => hasher.update(known),
            None => {
                let found = identity(path);
                hasher.update(&found);
                identities.insert(path.to_path_buf(), found);
            }
        }
    }
    (hasher.finalize().into(), identities)
}

/// Which incarnation of a file `path` names on the host now, the entry
/// itself (not followed) and what it leads to (followed): its filesystem
/// handle (inode number and generation, so an inode number the filesystem
/// hands out again to a new file does not pass for the old one) and mount,
/// or device, inode, birth time and type where the filesystem has no
/// handles; or absent.
pub fn identity(path: &Path) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 * (HANDLE_BYTES + 16));
    for follow in [false, true] {
        incarnation(path, follow, &mut out);
    }
    out
}

/// `MAX_HANDLE_SZ`.
const HANDLE_BYTES: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct FileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; HANDLE_BYTES],
}

/// Appends what names the file at `path` (see [`identity`]).
fn incarnation(path: &Path, follow: bool, out: &mut Vec<u8>) {
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        out.push(0);
        return;
    };
    let mut handle = FileHandle {
        handle_bytes: HANDLE_BYTES as u32,
        handle_type: 0,
        f_handle: [0; HANDLE_BYTES],
    };
    let mut mount_id: libc::c_int = 0;
    let flags = if follow { libc::AT_SYMLINK_FOLLOW } else { 0 };
    // SAFETY: the path is NUL-terminated, `handle` has the room its
    // `handle_bytes` announces, `mount_id` is a valid out-pointer; all
    // outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            std::ptr::from_mut(&mut handle),
            std::ptr::from_mut(&mut mount_id),
            flags,
        )
    };
    if rc == 0 {
        let len = usize::try_from(handle.handle_bytes)
            .unwrap_or(HANDLE_BYTES)
            .min(HANDLE_BYTES);
        out.push(1);
        out.extend_from_slice(&handle.handle_type.to_le_bytes());
        out.extend_from_slice(&mount_id.to_le_bytes());
        out.extend_from_slice(handle.f_handle.get(..len).unwrap_or_default());
        return;
    }
    let meta = if follow {
        path.metadata()
    } else {
        path.symlink_metadata()
    };
    match meta {
        Ok(meta) => {
            out.push(2);
            out.extend_from_slice(&meta.dev().to_le_bytes());
            out.extend_from_slice(&meta.ino().to_le_bytes());
            out.extend_from_slice(&(meta.mode() & libc::S_IFMT).to_le_bytes());
            let born = meta
                .created()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            out.extend_from_slice(&born.to_le_bytes());
        }
        Err(_) => out.push(0),
    }
}

/// A digest of the identities of `paths`, to tell whether any of them
/// changed between two moments.
pub fn fingerprint<'a>(paths: impl IntoIterator<Item = &'a Path>) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for path in paths {
        hasher.update(path.as_os_str().as_bytes());
        hasher.update([0]);
        hasher.update(identity(path));
    }
    hasher.finalize().into()
}

/// The host paths the sandbox part of `built` names, without the mount
/// points it creates itself (those appear when the sandbox is built).
pub fn named_host_paths(built: &BwrapCommand) -> Vec<PathBuf> {
    let created: BTreeSet<&Path> = built
        .synthetic_targets
        .iter()
        .map(|t| t.path.as_path())
        .collect();
    let mut out: BTreeSet<PathBuf> = BTreeSet::new();
    for arg in built.sandbox_args() {
        if let BwrapArg::Text(text) = arg {
            let path = Path::new(text);
            if path.is_absolute() && !path.starts_with("/proc") && !created.contains(path) {
                out.insert(path.to_path_buf());
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn args(words: &[&str]) -> Vec<BwrapArg> {
        words
            .iter()
            .map(|w| BwrapArg::Text(OsString::from(w)))
            .collect()
    }

    #[test]
    fn a_tmpfs_never_made_read_only_is_a_private_writable_mount() {
        let ok = args(&[
            "--ro-bind",
            "/",
            "/",
            "--perms",
            "555",
            "--tmpfs",
            "/w/.codex",
            "--remount-ro",
            "/w/.codex",
        ]);
        assert_eq!(private_writable_mount(&ok), None);
        let root = args(&["--tmpfs", "/", "--dev", "/dev", "--ro-bind", "/usr", "/usr"]);
        assert_eq!(private_writable_mount(&root), Some(PathBuf::from("/")));
        let mqueue = args(&["--mqueue", "/dev/mqueue"]);
        assert_eq!(
            private_writable_mount(&mqueue),
            Some(PathBuf::from("/dev/mqueue"))
        );
    }

    #[test]
    fn identities_tell_a_replaced_path_from_the_same_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::create_dir(&p).unwrap();
        let before = identity(&p);
        assert_eq!(before, identity(&p));
        std::fs::remove_dir(&p).unwrap();
        assert_ne!(before, identity(&p), "gone");
        std::fs::write(&p, "").unwrap();
        let file = identity(&p);
        std::fs::remove_file(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
        assert_ne!(file, identity(&p), "replaced by a directory");
    }
}
