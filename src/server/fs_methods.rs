//! The `fs/*` methods of the exec-server (docs/filesystem.md), dispatched by the router
//! after the handshake gate. Per-connection state (open file handles) lives
//! in [`FsConnectionState`] and is dropped when the connection ends.
//!
//! Each request either runs here, on a blocking thread, through
//! [`crate::fs`], or — when its `sandbox` asks for a restricted profile
//! without full-disk write — in a sandboxed fs-helper from
//! `super::fs_helper_pool`. One-shot requests take any warm helper of
//! their sandbox. A handle opened with such a sandbox (`fs/open`, read or
//! write) lives in a helper of that sandbox leased by the connection, and
//! its `fs/readBlock`, `fs/writeBlock` and `fs/close` go there; the limits
//! on handles are counted here, across both places.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::fs_helper_pool::{HelperKey, HelperPool, LeasedHelper};
use super::process_sandbox::SandboxGuard;
use crate::fs::{ops, stream, FileStreams, FsError};
use crate::protocol::fs::{method, EmptyResponse, OpenResponse};
use crate::protocol::method::{FsClose, FsOpen, FsReadBlock, FsWriteBlock, Method};
use crate::protocol::sandbox::{FileSystemSandboxContext, ResolvedSandbox, SandboxContextError};
use crate::protocol::{RequestFamily, RpcError};
use crate::runtime_paths::ExecServerRuntimePaths;

/// Every `fs/*` method the router hands to [`dispatch`].
pub const METHODS: &[&str] = &[
    method::READ_FILE,
    method::WRITE_FILE,
    method::CREATE_DIRECTORY,
    method::GET_METADATA,
    method::CANONICALIZE,
    method::READ_DIRECTORY,
    method::WALK,
    method::REMOVE,
    method::COPY,
    method::OPEN,
    method::READ_BLOCK,
    method::WRITE_BLOCK,
    method::CLOSE,
    method::SET_PERMISSIONS,
    method::CREATE_SYMLINK,
];

/// Sandboxes one connection may have file handles open in at once (each
/// holds a helper process).
pub const MAX_SANDBOXES_WITH_HANDLES: usize = 4;

/// Whether `method` is a filesystem method (the router gates these as the
/// `filesystem` family).
pub fn is_fs_method(method: &str) -> bool {
    METHODS.contains(&method)
}

/// Where an open handle lives.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Home {
    /// In this process's [`FsConnectionState::streams`].
    Direct,
    /// In the connection's leased helper for this sandbox.
    Helper(HelperKey),
}

/// An open handle as the connection knows it.
#[derive(Debug, Clone)]
struct OpenHandle {
    home: Home,
    write: bool,
}

/// Filesystem state owned by one connection: its open file handles.
#[derive(Debug)]
pub struct FsConnectionState {
    /// The server's helpers, which the leased ones come from and go back to.
    pool: Arc<HelperPool>,
    /// Handles the server opened itself.
    streams: FileStreams,
    /// Every open handle, wherever it lives: the per-connection limits
    /// count these.
    handles: HashMap<String, OpenHandle>,
    /// One leased helper per sandbox with handles open in it.
    helpers: HashMap<HelperKey, LeasedHelper>,
}

impl Drop for FsConnectionState {
    /// Closes the direct handles; dropping the leased helpers ends them,
    /// which closes theirs.
    fn drop(&mut self) {
        self.streams.close_all();
    }
}

impl FsConnectionState {
    /// The open handle `id`, which must be open for `write`.
    fn handle(&self, id: &str, write: bool) -> Result<OpenHandle, RpcError> {
        let handle = self
            .handles
            .get(id)
            .cloned()
            .ok_or_else(|| rpc(stream::unknown_handle(id, write)))?;
        if handle.write != write {
            return Err(rpc(stream::wrong_access(id, write)));
        }
        Ok(handle)
    }

    /// The connection's helper for `key`, leased now if it has none.
    fn helper(
        &mut self,
        paths: &ExecServerRuntimePaths,
        key: &HelperKey,
    ) -> Result<&mut LeasedHelper, RpcError> {
        if !self.helpers.contains_key(key) {
            if self.helpers.len() >= MAX_SANDBOXES_WITH_HANDLES {
                return Err(RpcError::invalid_request(format!(
                    "at most {MAX_SANDBOXES_WITH_HANDLES} sandboxes may have file handles open per connection"
                )));
            }
            let leased = self.pool.lease(paths, key)?;
            self.helpers.insert(key.clone(), leased);
        }
        self.helpers
            .get_mut(key)
            .ok_or_else(|| RpcError::internal("fs sandbox helper is gone"))
    }

    /// After an exchange with the helper for `key`: a helper that failed is
    /// dropped with every handle in it; one with no handles left goes back
    /// to the pool.
    fn settle(&mut self, key: &HelperKey) {
        let alive = self.helpers.get(key).is_some_and(LeasedHelper::is_alive);
        let home = Home::Helper(key.clone());
        if !alive {
            self.handles.retain(|_, handle| handle.home != home);
        }
        if !self.handles.values().any(|handle| handle.home == home) {
            if let Some(leased) = self.helpers.remove(key) {
                self.pool.give_back(key, leased);
            }
        }
    }

    /// Runs a block request on direct handle `id` on a blocking thread,
    /// forgetting the handle when the request closed it (an I/O error).
    async fn direct_block<T, F>(&mut self, id: &str, work: F) -> Result<Value, RpcError>
    where
        F: FnOnce(FileStreams) -> Result<T, FsError> + Send + 'static,
        T: serde::Serialize + Send + 'static,
    {
        let streams = self.streams.clone();
        let result = blocking(move || work(streams)).await;
        if !self.streams.contains(id) {
            self.handles.remove(id);
        }
        to_value(result?)
    }

    /// Forgets handle `id` (closed where it lived).
    fn forget(&mut self, id: &str) {
        if let Some(OpenHandle {
            home: Home::Helper(key),
            ..
        }) = self.handles.remove(id)
        {
            self.settle(&key);
        }
    }

    /// Runs a block request on handle `id` in its helper. Past the checks
    /// the server made first, an error means the helper closed the handle;
    /// it is told to close it too (in case) and the handle is forgotten.
    async fn helper_block(
        &mut self,
        key: &HelperKey,
        id: &str,
        operation: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let leased = self
            .helpers
            .get_mut(key)
            .ok_or_else(|| RpcError::internal("fs sandbox helper is gone"))?;
        let result = leased.call(operation, params).await;
        if result.is_err() && leased.is_alive() {
            let _ = leased
                .call(method::CLOSE, serde_json::json!({ "handleId": id }))
                .await;
            self.forget(id);
        }
        self.settle(key);
        result
    }
}

/// What a filesystem method can reach: the runtime paths and the state of the
/// connection it arrived on.
#[derive(Debug)]
pub struct FsContext {
    pub paths: Arc<ExecServerRuntimePaths>,
    /// Added to every helper's sandbox.
    pub guard: Arc<SandboxGuard>,
    /// The server's helpers, for one-shot requests.
    pub pool: Arc<HelperPool>,
    pub state: tokio::sync::Mutex<FsConnectionState>,
}

impl FsContext {
    /// A fresh context for a new connection of the server that owns `pool`.
    pub fn new(
        paths: Arc<ExecServerRuntimePaths>,
        guard: Arc<SandboxGuard>,
        pool: Arc<HelperPool>,
    ) -> Self {
        let state = FsConnectionState {
            pool: pool.clone(),
            streams: FileStreams::default(),
            handles: HashMap::new(),
            helpers: HashMap::new(),
        };
        Self {
            paths,
            guard,
            pool,
            state: tokio::sync::Mutex::new(state),
        }
    }
}

fn rpc(err: FsError) -> RpcError {
    RpcError::new(err.code(), err.to_string())
}

/// The resolved `sandbox` of fs `params`. It is decoded before the rest
/// of them so that a path it holds which this host cannot use is answered
/// with the fs family's code; other members (e.g. a large `dataBase64`)
/// are not copied.
pub fn resolve_sandbox(params: &Value) -> Result<Option<ResolvedSandbox>, RpcError> {
    let to_rpc = |err: SandboxContextError| err.to_rpc(RequestFamily::Filesystem);
    let Some(sandbox) = params.get("sandbox") else {
        return Ok(None);
    };
    match FileSystemSandboxContext::decode(sandbox).map_err(to_rpc)? {
        Some(context) => context.resolve().map(Some).map_err(to_rpc),
        None => Ok(None),
    }
}

/// Where a request runs.
enum Placement {
    Direct,
    Helper(HelperKey),
}

/// Decides direct vs helper (docs/filesystem.md) and builds
/// the helper's sandbox.
fn placement(
    sandbox: Option<ResolvedSandbox>,
    paths: &ExecServerRuntimePaths,
    guard: &SandboxGuard,
) -> Result<Placement, RpcError> {
    let Some(resolved) = sandbox.filter(ResolvedSandbox::requires_helper) else {
        return Ok(Placement::Direct);
    };
    let cwd = resolved
        .helper_cwd()
        .map_err(|err| err.to_rpc(RequestFamily::Filesystem))?;
    let mut profile = resolved.helper_profile(&paths.exe_dirs());
    guard.apply(&mut profile);
    let plantable = guard.plantable(&profile, &resolved.workspace_roots);
    let profile_json = profile.to_json();
    Ok(Placement::Helper(HelperKey {
        profile_json,
        cwd,
        use_legacy_landlock: resolved.use_legacy_landlock,
        plantable,
    }))
}

/// The params of fs method `M`, decoded as the method table says.
fn decode<M: Method>(params: Value) -> Result<M::Params, RpcError> {
    ops::decode::<M>(params).map_err(rpc)
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

/// `params` for a helper: it runs where the sandbox already put it, so the
/// context is nulled (and not decoded there again).
fn without_sandbox(mut params: Value) -> Value {
    if let Some(object) = params.as_object_mut() {
        object.insert("sandbox".into(), Value::Null);
    }
    params
}

/// Runs one `fs/*` request.
pub async fn dispatch(ctx: &FsContext, method: &str, params: Value) -> Result<Value, RpcError> {
    match method {
        method::OPEN => open(ctx, params).await,
        method::READ_BLOCK => read_block(ctx, params).await,
        method::WRITE_BLOCK => write_block(ctx, params).await,
        method::CLOSE => close(ctx, params).await,
        _ if method::HELPER_OPERATIONS.contains(&method) => run_one_shot(ctx, method, params).await,
        _ => Err(RpcError::unknown_method(method)),
    }
}

async fn open(ctx: &FsContext, params: Value) -> Result<Value, RpcError> {
    let params = ops::check_paths(params).map_err(rpc)?;
    let sandbox = resolve_sandbox(&params)?;
    let open = <FsOpen as Method>::Params::deserialize(&params)
        .map_err(|err| RpcError::invalid_params(err.to_string()))?;
    let mode = open.mode();
    stream::check_handle_id(&open.handle_id, mode).map_err(rpc)?;
    let placement = placement(sandbox, &ctx.paths, &ctx.guard)?;
    let mut state = ctx.state.lock().await;
    let id = open.handle_id.clone();
    stream::check_room(
        &id,
        mode,
        state.handles.contains_key(&id),
        state.handles.len(),
    )
    .map_err(rpc)?;
    let home = match placement {
        Placement::Direct => {
            let streams = state.streams.clone();
            blocking(move || streams.open(&open)).await?;
            Home::Direct
        }
        Placement::Helper(key) => {
            let result = state
                .helper(&ctx.paths, &key)?
                .call(method::OPEN, without_sandbox(params))
                .await;
            if let Err(err) = result {
                state.settle(&key);
                return Err(err);
            }
            Home::Helper(key)
        }
    };
    state.handles.insert(
        id.clone(),
        OpenHandle {
            home,
            write: mode.is_write(),
        },
    );
    to_value(OpenResponse { handle_id: id })
}

async fn read_block(ctx: &FsContext, params: Value) -> Result<Value, RpcError> {
    let read = decode::<FsReadBlock>(params.clone())?;
    stream::check_read_len(read.len).map_err(rpc)?;
    let mut state = ctx.state.lock().await;
    match state.handle(&read.handle_id, false)?.home {
        Home::Direct => {
            let id = read.handle_id.clone();
            state
                .direct_block(&id, move |streams| streams.read_block(&read))
                .await
        }
        Home::Helper(key) => {
            state
                .helper_block(&key, &read.handle_id, method::READ_BLOCK, params)
                .await
        }
    }
}

async fn write_block(ctx: &FsContext, params: Value) -> Result<Value, RpcError> {
    let write = decode::<FsWriteBlock>(params)?;
    let mut state = ctx.state.lock().await;
    match state.handle(&write.handle_id, true)?.home {
        Home::Direct => {
            let id = write.handle_id.clone();
            state
                .direct_block(&id, move |streams| streams.write_block(&write))
                .await
        }
        Home::Helper(key) => {
            // Checked here so that an error from the helper always means
            // the handle is closed.
            drop(stream::validate_write(&write).map_err(rpc)?);
            let id = write.handle_id.clone();
            let params = to_value(write)?;
            state
                .helper_block(&key, &id, method::WRITE_BLOCK, params)
                .await
        }
    }
}

async fn close(ctx: &FsContext, params: Value) -> Result<Value, RpcError> {
    let close = decode::<FsClose>(params)?;
    let mut state = ctx.state.lock().await;
    let Some(handle) = state.handles.get(&close.handle_id).cloned() else {
        return to_value(EmptyResponse {});
    };
    let id = close.handle_id.clone();
    let result = match &handle.home {
        Home::Direct => {
            let streams = state.streams.clone();
            blocking(move || streams.close(&close)).await.map(drop)
        }
        Home::Helper(key) => match state.helpers.get_mut(key) {
            Some(leased) => leased.call(method::CLOSE, to_value(close)?).await.map(drop),
            None => Ok(()),
        },
    };
    state.forget(&id);
    result.and_then(|()| to_value(EmptyResponse {}))
}

async fn run_one_shot(ctx: &FsContext, method: &str, params: Value) -> Result<Value, RpcError> {
    let params = ops::check_paths(params).map_err(rpc)?;
    let sandbox = resolve_sandbox(&params)?;
    match placement(sandbox, &ctx.paths, &ctx.guard)? {
        Placement::Direct => {
            let method = method.to_owned();
            blocking(move || ops::run(&method, params)).await
        }
        Placement::Helper(key) => {
            let params = without_sandbox(params);
            ops::validate(method, &params).map_err(rpc)?;
            ctx.pool.call(&ctx.paths, &key, method, params).await
        }
    }
}
