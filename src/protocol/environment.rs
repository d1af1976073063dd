//! `environment/info` and `environment/status` (docs/protocol.md).

use serde::Serialize;
use serde_json::{Map, Value};

/// `environment/info`.
pub const METHOD_INFO: &str = "environment/info";
/// `environment/status`.
pub const METHOD_STATUS: &str = "environment/status";

/// The user's default shell.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ShellInfo {
    /// `zsh`, `bash`, `sh`, … (the basename).
    pub name: String,
    /// Native absolute path.
    pub path: String,
}

/// `environment/info` result.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnvironmentInfo {
    pub shell: ShellInfo,
    /// The server's working directory as a `file:` URI, `null` if unknown.
    pub cwd: Option<String>,
    #[serde(default)]
    pub capabilities: Map<String, Value>,
}

/// `environment/status` result.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnvironmentStatus {
    pub status: &'static str,
}
