//! The `fs/*` methods of the exec-server (SPEC §4), dispatched by the router
//! after the handshake gate. Per-connection state (open read handles) lives in
//! [`FsConnectionState`] and is dropped when the connection ends.

use std::sync::Arc;

use serde_json::Value;

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

/// Filesystem state owned by one connection (e.g. `fs/open` handles).
#[derive(Debug, Default)]
pub struct FsConnectionState {}

/// What a filesystem method can reach: the runtime paths and the state of the
/// connection it arrived on.
#[derive(Debug)]
pub struct FsContext {
    pub paths: Arc<ExecServerRuntimePaths>,
    pub state: tokio::sync::Mutex<FsConnectionState>,
}

impl FsContext {
    /// A fresh context for a new connection.
    pub fn new(paths: Arc<ExecServerRuntimePaths>) -> Self {
        Self {
            paths,
            state: tokio::sync::Mutex::new(FsConnectionState::default()),
        }
    }
}

/// Runs one `fs/*` request.
pub async fn dispatch(ctx: &FsContext, method: &str, params: Value) -> Result<Value, RpcError> {
    let _ = (ctx, params);
    Err(RpcError::unknown_method(method))
}
