//! The `sandbox` field of `process/start` (SPEC §3.6, reference notes §12.4):
//! rewrites a launch so the command runs under `codex-linux-sandbox` with the
//! permission profile materialized against `workspaceRoots`, and marks it
//! sandboxed so the server computes `sandboxDenied` on exit. Any non-null
//! sandbox is enforced, also a `disabled` profile; the request's `arg0` is
//! dropped.
//!
//! [`SandboxGuard`] is what the server adds to every sandbox it
//! materializes (processes and fs-helpers): deny entries for its own
//! secrets (the token file, the Unix socket).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::fs_methods::exe_dirs;
use crate::arg0::LINUX_SANDBOX_ARG0;
use crate::process::LaunchSpec;
use crate::protocol::sandbox::{
    to_policy_profile, AccessMode, EntryPath, ExecPermissionProfile, FileSystemSandboxContext,
    ManagedFileSystem, SandboxContextError, SandboxEntry,
};
use crate::protocol::RpcError;
use crate::runtime_paths::ExecServerRuntimePaths;

/// What the server adds to every sandbox it materializes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxGuard {
    /// Paths no sandbox may reach (the token file, the Unix socket), each
    /// as given and canonical.
    pub denied: Vec<PathBuf>,
}

impl SandboxGuard {
    /// A guard denying `denied`.
    pub fn new(denied: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut guard = Self { denied: Vec::new() };
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

    /// Appends the denied paths to a materialized restricted profile as
    /// `deny` entries. Other profiles are left as they are.
    pub fn apply(&self, profile: &mut ExecPermissionProfile) {
        let ExecPermissionProfile::Managed {
            file_system: ManagedFileSystem::Restricted { entries, .. },
            ..
        } = profile
        else {
            return;
        };
        for path in &self.denied {
            entries.push(path_entry(path, AccessMode::Deny));
        }
    }
}

fn path_entry(path: &Path, access: AccessMode) -> SandboxEntry {
    SandboxEntry {
        path: EntryPath::Path {
            path: path.to_string_lossy().into_owned(),
        },
        access,
    }
}

fn context_error(err: SandboxContextError) -> RpcError {
    RpcError::invalid_params(match err {
        SandboxContextError::Cwd { uri, error } => {
            format!("sandbox cwd URI `{uri}` is not valid on this exec-server host: {error}")
        }
        SandboxContextError::WorkspaceRoot { uri, error } => format!(
            "sandbox workspace root URI `{uri}` is not valid on this exec-server host: {error}"
        ),
        SandboxContextError::PermissionPath(_) => err.to_string(),
        other => format!("failed to prepare process sandbox: {other}"),
    })
}

/// Prepares `spec` for the requested sandbox (`None` or `null` = unsandboxed).
/// Rewrites `spec.argv`/`spec.arg0` and sets `spec.sandboxed = true` when it
/// wraps the command.
pub fn prepare(
    sandbox: Option<&Value>,
    spec: &mut LaunchSpec,
    paths: &ExecServerRuntimePaths,
    guard: &SandboxGuard,
) -> Result<(), RpcError> {
    let Some(sandbox) = sandbox.filter(|value| !value.is_null()) else {
        return Ok(());
    };
    if spec.argv.is_empty() {
        // Left for the caller's `argv must not be empty`.
        return Ok(());
    }
    let context = FileSystemSandboxContext::deserialize_value(sandbox)
        .map_err(|err| RpcError::invalid_params(format!("invalid sandbox: {err}")))?;
    let resolved = context.resolve().map_err(context_error)?;
    let policy_cwd = resolved.cwd.clone().unwrap_or_else(|| spec.cwd.clone());
    let mut profile = resolved.process_profile(&exe_dirs(paths));
    guard.apply(&mut profile);
    let profile = to_policy_profile(&profile).map_err(context_error)?;
    let mut argv: Vec<OsString> = vec![
        paths.linux_sandbox_exe().as_os_str().to_owned(),
        "--sandbox-policy-cwd".into(),
        policy_cwd.into_os_string(),
        "--command-cwd".into(),
        spec.cwd.clone().into_os_string(),
        "--permission-profile".into(),
        profile.to_json().into(),
    ];
    if resolved.use_legacy_landlock {
        argv.push("--use-legacy-landlock".into());
    }
    argv.push("--".into());
    argv.append(&mut spec.argv);
    spec.argv = argv;
    spec.arg0 = Some(LINUX_SANDBOX_ARG0.into());
    spec.sandboxed = true;
    Ok(())
}
