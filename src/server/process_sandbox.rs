//! The `sandbox` field of `process/start` (SPEC §3.6): rewrites a launch so the
//! command runs under `codex-linux-sandbox`, and marks it sandboxed so the
//! server computes `sandboxDenied` on exit.

use serde_json::Value;

use crate::process::LaunchSpec;
use crate::protocol::RpcError;
use crate::runtime_paths::ExecServerRuntimePaths;

/// Prepares `spec` for the requested sandbox (`None` or `null` = unsandboxed).
/// May rewrite `spec.argv`/`spec.arg0` and must set `spec.sandboxed = true`
/// when it wraps the command.
pub fn prepare(
    sandbox: Option<&Value>,
    spec: &mut LaunchSpec,
    paths: &ExecServerRuntimePaths,
) -> Result<(), RpcError> {
    let _ = (sandbox, spec, paths);
    Ok(())
}
