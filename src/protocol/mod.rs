//! Wire types of the Codex JSON-RPC dialect: envelope, methods, params and
//! results, and path URIs.

pub mod envelope;
pub mod environment;
pub mod fs;
pub mod http;
pub mod network;
pub mod path;
pub mod process;
pub mod sandbox;
pub mod schema;

pub use envelope::{RequestId, RpcError};
pub use path::{PathDialect, PathError, WirePath};

/// `initialize`.
pub const METHOD_INITIALIZE: &str = "initialize";
/// The client's handshake acknowledgement notification.
pub const NOTIFY_INITIALIZED: &str = "initialized";

/// Params of a method that takes none (`environment/*`): absent, `null`, or
/// an object whose members are ignored. Decode it as `Option<NoParams>`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub struct NoParams {}

/// `initialize` params.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub client_name: String,
    #[serde(default)]
    pub resume_session_id: Option<String>,
    /// Opt-in extensions (`networkDenials`).
    #[serde(default)]
    pub capabilities: network::ClientCapabilities,
}

/// `initialize` result.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub session_id: String,
}
