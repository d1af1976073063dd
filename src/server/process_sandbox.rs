//! The `sandbox` field of `process/start` (docs/protocol.md):
//! rewrites a launch so the command runs under `codex-linux-sandbox` with the
//! permission profile materialized against `workspaceRoots`, and marks it
//! sandboxed so the server computes `sandboxDenied` on exit. Any non-null
//! sandbox is enforced, also a `disabled` profile; the request's `arg0` is
//! passed to the helper (`--command-arg0`), which gives it to the command.
//!
//! [`SandboxGuard`] is what the server adds to every sandbox it
//! materializes (processes and fs-helpers): deny entries for its own
//! secrets (the token file, the Unix socket), `tmpdir` resolved from the
//! server's environment, never from the request's `env`, and the places
//! where earlier sandboxed commands could have planted a symlink (the
//! request's workspace roots, the server's `$TMPDIR`, the writable roots of
//! every sandbox it applied: `super::applied_roots`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::applied_roots::AppliedRoots;
use super::sandbox_reuse::SandboxRequest;
use crate::mode::LINUX_SANDBOX_ARG0;
use crate::policy::{
    usable_place, FileSystemAccessMode, FileSystemPath, FileSystemSandboxEntry,
    FileSystemSpecialPath, ManagedFileSystemPermissions, PermissionProfile,
};
use crate::process::LaunchSpec;
use crate::protocol::sandbox::{FileSystemSandboxContext, ResolvedSandbox, SandboxContextError};
use crate::protocol::{RequestFamily, RpcError};
use crate::runtime_paths::ExecServerRuntimePaths;
use crate::sandbox::cli::{
    helper_args, plantable_args, ALLOW_NETWORK_FOR_PROXY_FLAG, COMMAND_ARG0_FLAG,
};

/// What the server adds to every sandbox it materializes.
#[derive(Debug, Default)]
pub struct SandboxGuard {
    /// Paths no sandbox may reach (the token file, the Unix socket), each
    /// as given and canonical.
    pub denied: Vec<PathBuf>,
    /// The server's `$TMPDIR` when it is absolute and not `/`: what a
    /// `tmpdir` entry means. `None`: `tmpdir` entries grant nothing.
    pub tmpdir: Option<PathBuf>,
    /// The writable roots of the sandboxes applied so far.
    pub applied: AppliedRoots,
}

impl SandboxGuard {
    /// A guard denying `denied`, with `tmpdir` from the server's environment.
    pub fn new(denied: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut guard = Self {
            denied: Vec::new(),
            tmpdir: std::env::var_os("TMPDIR").and_then(|t| usable_tmpdir(Path::new(&t))),
            applied: AppliedRoots::default(),
        };
        for path in denied {
            guard.deny(path);
        }
        guard
    }

    /// Adds `path` (and its canonical form) to the denied paths.
    pub fn deny(&mut self, path: PathBuf) {
        let canonical = std::fs::canonicalize(&path).ok();
        for path in std::iter::once(path).chain(canonical) {
            if path.is_absolute() && !self.denied.contains(&path) {
                self.denied.push(path);
            }
        }
    }

    /// Rewrites a materialized restricted profile: `tmpdir` entries become
    /// the server's `$TMPDIR` (or are dropped), and the denied paths are
    /// appended as `deny` entries. Other profiles are left as they are.
    pub fn apply(&self, profile: &mut PermissionProfile) {
        let PermissionProfile::Managed {
            file_system: ManagedFileSystemPermissions::Restricted { entries, .. },
            ..
        } = profile
        else {
            return;
        };
        let mut out = Vec::with_capacity(entries.len() + self.denied.len());
        for entry in entries.drain(..) {
            match (&entry.path, &self.tmpdir) {
                (
                    FileSystemPath::Special {
                        value: FileSystemSpecialPath::Tmpdir,
                    },
                    Some(tmpdir),
                ) => out.push(FileSystemSandboxEntry::path(tmpdir.clone(), entry.access)),
                (
                    FileSystemPath::Special {
                        value: FileSystemSpecialPath::Tmpdir,
                    },
                    None,
                ) => {}
                _ => out.push(entry),
            }
        }
        for path in &self.denied {
            out.push(FileSystemSandboxEntry::path(
                path.clone(),
                FileSystemAccessMode::Deny,
            ));
        }
        *entries = out;
    }

    /// The places where a symlink on the way to a grant of `profile` (as
    /// [`SandboxGuard::apply`] left it) may have been planted: the
    /// request's `workspace_roots`, the server's `$TMPDIR` and the writable
    /// roots of every sandbox applied so far, this one's included (which it
    /// remembers). Sorted, for a stable helper key.
    pub fn plantable(
        &self,
        profile: &PermissionProfile,
        workspace_roots: &[PathBuf],
    ) -> Vec<PathBuf> {
        let mut places = self.applied.remember(profile);
        places.extend(workspace_roots.iter().filter_map(|p| usable_place(p)));
        places.extend(self.tmpdir.iter().cloned());
        places.sort();
        places.dedup();
        places
    }
}

/// `$TMPDIR` as a `tmpdir` entry may use it: absolute, normalized, not `/`
/// (what may count as a place an earlier command could write, too).
fn usable_tmpdir(tmpdir: &Path) -> Option<PathBuf> {
    usable_place(tmpdir)
}

/// Decodes and resolves the `sandbox` of a `process/start` (not `null`),
/// with the process family's errors.
pub fn resolve(sandbox: &Value) -> Result<ResolvedSandbox, RpcError> {
    let to_rpc = |err: SandboxContextError| err.to_rpc(RequestFamily::Process);
    FileSystemSandboxContext::decode(sandbox)
        .map_err(to_rpc)?
        .ok_or_else(|| to_rpc(SandboxContextError::MissingPermissions))?
        .resolve()
        .map_err(to_rpc)
}

/// Prepares `spec` for the requested sandbox (`None` or `null` = unsandboxed).
/// Rewrites `spec.argv`/`spec.arg0` (the request's `arg0` goes to the
/// helper's `--command-arg0`) and sets `spec.sandboxed = true` when it
/// wraps the command; returns what was decided, for sandbox reuse.
pub fn prepare(
    sandbox: Option<&Value>,
    spec: &mut LaunchSpec,
    paths: &ExecServerRuntimePaths,
    guard: &SandboxGuard,
    enforce_managed_network: bool,
) -> Result<Option<SandboxRequest>, RpcError> {
    let Some(sandbox) = sandbox.filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    if spec.argv.is_empty() {
        // Left for the caller's `argv must not be empty`.
        return Ok(None);
    }
    let resolved = resolve(sandbox)?;
    let policy_cwd = resolved.cwd.clone().unwrap_or_else(|| spec.cwd.clone());
    let mut profile = resolved.process_profile(&paths.exe_dirs());
    guard.apply(&mut profile);
    let plantable = guard.plantable(&profile, &resolved.workspace_roots);
    let mut argv: Vec<OsString> = vec![paths.linux_sandbox_exe().as_os_str().to_owned()];
    let profile_json = profile.to_json();
    // The proxy flag suppresses the Landlock backend (it cannot route).
    argv.extend(helper_args(
        &policy_cwd,
        &spec.cwd,
        &profile_json,
        resolved.use_legacy_landlock && !enforce_managed_network,
    ));
    argv.extend(plantable_args(&plantable));
    if enforce_managed_network {
        argv.push(ALLOW_NETWORK_FOR_PROXY_FLAG.into());
    }
    // The request's argv[0] passes through the helper to the command.
    if let Some(arg0) = spec.arg0.take() {
        argv.push(COMMAND_ARG0_FLAG.into());
        argv.push(arg0);
    }
    argv.push("--".into());
    argv.append(&mut spec.argv);
    spec.argv = argv;
    spec.arg0 = Some(LINUX_SANDBOX_ARG0.into());
    spec.sandboxed = true;
    Ok(Some(SandboxRequest {
        one_shot_only: resolved.use_legacy_landlock || enforce_managed_network,
        profile,
        profile_json,
        policy_cwd,
        plantable,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_denies_its_paths_and_pins_tmpdir() {
        let guard = SandboxGuard {
            denied: vec![PathBuf::from("/run/token")],
            tmpdir: usable_tmpdir(Path::new("/var/tmp/x/../y")),
            applied: AppliedRoots::default(),
        };
        let special = |value| FileSystemSandboxEntry::special(value, FileSystemAccessMode::Write);
        let mut profile = PermissionProfile::Managed {
            file_system: ManagedFileSystemPermissions::Restricted {
                entries: vec![
                    special(FileSystemSpecialPath::Root),
                    special(FileSystemSpecialPath::Tmpdir),
                ],
                glob_scan_max_depth: None,
            },
            network: Default::default(),
        };
        guard.apply(&mut profile);
        let PermissionProfile::Managed {
            file_system: ManagedFileSystemPermissions::Restricted { entries, .. },
            ..
        } = profile
        else {
            panic!("still managed");
        };
        assert_eq!(
            entries,
            vec![
                special(FileSystemSpecialPath::Root),
                FileSystemSandboxEntry::path("/var/tmp/y", FileSystemAccessMode::Write),
                FileSystemSandboxEntry::path("/run/token", FileSystemAccessMode::Deny),
            ]
        );
        assert_eq!(usable_tmpdir(Path::new("/")), None);
        assert_eq!(usable_tmpdir(Path::new("/tmp/..")), None);
        assert_eq!(usable_tmpdir(Path::new("tmp")), None);
    }
}
