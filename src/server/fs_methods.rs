//! The `fs/*` methods of the exec-server (SPEC §4), dispatched by the router
//! after the handshake gate. Per-connection state (open read handles) lives in
//! [`FsConnectionState`] and is dropped when the connection ends.
//!
//! Each one-shot request either runs here, on a blocking thread, through
//! [`crate::fs::ops::run`], or — when its `sandbox` asks for a restricted
//! profile without full-disk write (SPEC §4.2) — in a warm sandboxed
//! fs-helper from [`super::fs_helper_pool`]. Streaming reads always run here
//! and refuse a sandbox that needs a helper.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::fs_helper_pool::{HelperKey, HelperPool};
use super::process_sandbox::SandboxGuard;
use crate::fs::{ops, FileStreams, FsError};
use crate::protocol::fs::{method, CloseParams, OpenParams, ReadBlockParams};
use crate::protocol::sandbox::{FileSystemSandboxContext, ResolvedSandbox};
use crate::protocol::RpcError;
use crate::runtime_paths::ExecServerRuntimePaths;

/// Every `fs/*` method the router hands to [`dispatch`].
pub const METHODS: &[&str] = &[
    "fs/readFile",
    "fs/writeFile",
    "fs/createDirectory",
    "fs/getMetadata",
    "fs/canonicalize",
    "fs/readDirectory",
    "fs/walk",
    "fs/remove",
    "fs/copy",
    "fs/open",
    "fs/readBlock",
    "fs/close",
];

/// Whether `method` is a filesystem method (the router gates these as the
/// `filesystem` family).
pub fn is_fs_method(method: &str) -> bool {
    METHODS.contains(&method)
}

/// Filesystem state owned by one connection: its `fs/open` handles.
#[derive(Debug, Default)]
pub struct FsConnectionState {
    pub streams: FileStreams,
}

impl Drop for FsConnectionState {
    fn drop(&mut self) {
        self.streams.close_all();
    }
}

/// What a filesystem method can reach: the runtime paths and the state of the
/// connection it arrived on.
#[derive(Debug)]
pub struct FsContext {
    pub paths: Arc<ExecServerRuntimePaths>,
    /// Added to every helper's sandbox.
    pub guard: Arc<SandboxGuard>,
    pub state: tokio::sync::Mutex<FsConnectionState>,
}

impl FsContext {
    /// A fresh context for a new connection.
    pub fn new(paths: Arc<ExecServerRuntimePaths>, guard: Arc<SandboxGuard>) -> Self {
        Self {
            paths,
            guard,
            state: tokio::sync::Mutex::new(FsConnectionState::default()),
        }
    }

    async fn streams(&self) -> FileStreams {
        self.state.lock().await.streams.clone()
    }
}

fn rpc(err: FsError) -> RpcError {
    RpcError::new(err.code(), err.to_string())
}

/// The `sandbox` field alone; other fields (e.g. a large `dataBase64`) are
/// skipped without copying.
#[derive(Deserialize)]
struct SandboxField {
    #[serde(default)]
    sandbox: Option<FileSystemSandboxContext>,
}

/// Where a request runs.
enum Placement {
    Direct,
    Helper(HelperKey),
}

/// The directories of the executables a helper or sandboxed process needs.
pub fn exe_dirs(paths: &ExecServerRuntimePaths) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for exe in [paths.codex_self_exe.as_path(), paths.linux_sandbox_exe()] {
        if let Some(dir) = exe.parent() {
            if !dirs.iter().any(|d: &PathBuf| d == dir) {
                dirs.push(dir.to_path_buf());
            }
        }
    }
    dirs
}

/// Decides direct vs helper (SPEC §4.2, reference notes §12.1) and builds
/// the helper's sandbox.
fn placement(
    sandbox: Option<&FileSystemSandboxContext>,
    paths: &ExecServerRuntimePaths,
    guard: &SandboxGuard,
) -> Result<Placement, RpcError> {
    let Some(sandbox) = sandbox else {
        return Ok(Placement::Direct);
    };
    let resolved: ResolvedSandbox = sandbox
        .resolve()
        .map_err(|err| RpcError::invalid_request(err.to_string()))?;
    if !resolved.requires_helper() {
        return Ok(Placement::Direct);
    }
    let cwd = resolved
        .helper_cwd()
        .map_err(|err| RpcError::invalid_request(err.to_string()))?;
    let mut profile = resolved.helper_profile(&exe_dirs(paths));
    guard.apply(&mut profile);
    let profile_json = profile.to_json();
    Ok(Placement::Helper(HelperKey {
        profile_json,
        cwd,
        use_legacy_landlock: resolved.use_legacy_landlock,
    }))
}

fn decode<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    ops::decode_params(params).map_err(rpc)
}

async fn blocking<T, F>(work: F) -> Result<T, RpcError>
where
    F: FnOnce() -> Result<T, FsError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| RpcError::internal(format!("filesystem task failed: {err}")))?
        .map_err(rpc)
}

fn to_value<T: serde::Serialize>(value: T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|err| RpcError::internal(err.to_string()))
}

/// Runs one `fs/*` request.
pub async fn dispatch(ctx: &FsContext, method: &str, params: Value) -> Result<Value, RpcError> {
    match method {
        method::READ_BLOCK => {
            let params: ReadBlockParams = decode(params)?;
            let streams = ctx.streams().await;
            to_value(blocking(move || streams.read_block(&params)).await?)
        }
        method::CLOSE => {
            let params: CloseParams = decode(params)?;
            to_value(ctx.streams().await.close(&params))
        }
        method::OPEN => {
            let params: OpenParams = decode(params)?;
            let sandboxed = matches!(
                placement(params.sandbox.as_ref(), &ctx.paths, &ctx.guard)?,
                Placement::Helper(_)
            );
            let streams = ctx.streams().await;
            to_value(blocking(move || streams.open(&params, sandboxed)).await?)
        }
        _ if method::HELPER_OPERATIONS.contains(&method) => run_one_shot(ctx, method, params).await,
        _ => Err(RpcError::unknown_method(method)),
    }
}

async fn run_one_shot(ctx: &FsContext, method: &str, params: Value) -> Result<Value, RpcError> {
    let params = ops::check_paths(params).map_err(rpc)?;
    let sandbox = SandboxField::deserialize(&params)
        .map_err(|err| RpcError::invalid_params(err.to_string()))?
        .sandbox;
    match placement(sandbox.as_ref(), &ctx.paths, &ctx.guard)? {
        Placement::Direct => {
            let method = method.to_owned();
            blocking(move || ops::run(&method, params)).await
        }
        Placement::Helper(key) => {
            // The helper runs where the sandbox already put it; nulled first
            // so the context is not decoded again below.
            let mut params = params;
            if let Some(object) = params.as_object_mut() {
                object.insert("sandbox".into(), Value::Null);
            }
            ops::validate(method, &params).map_err(rpc)?;
            HelperPool::global()
                .call(&ctx.paths, &key, method, params)
                .await
        }
    }
}
