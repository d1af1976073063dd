//! Wire types of `capabilityRoots/discoverV1`, the reference's one-request
//! discovery of the capability bundle below caller-selected roots: plugin
//! manifests (`.codex-plugin`, `.claude-plugin`, `.cursor-plugin`), the
//! MCP and apps configuration files they declare, and skills (`SKILL.md`
//! with its `agents/openai.yaml`). The discovery itself is
//! [`crate::fs::discovery`]. Optional members are written as `null` when
//! absent, as the reference writes them.

use serde::{Deserialize, Serialize};

use crate::wire_path::WirePath;

/// `capabilityRoots/discoverV1`.
pub const METHOD_DISCOVER: &str = "capabilityRoots/discoverV1";
/// Roots one request may name.
pub const MAX_ROOTS_PER_REQUEST: usize = 128;
/// Plugin manifests recognised below a plugin root, in priority order.
pub const PLUGIN_MANIFEST_PATHS: [&str; 3] = [
    ".codex-plugin/plugin.json",
    ".claude-plugin/plugin.json",
    ".cursor-plugin/plugin.json",
];

/// `capabilityRoots/discoverV1` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiscoverParams {
    /// At most 128.
    pub roots: Vec<RootRequest>,
}

/// One caller-selected root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RootRequest {
    /// Opaque; returned unchanged.
    pub id: String,
    /// An absolute native path or `file:` URI. One this host cannot use
    /// fails only its own root (its `error`), not the request.
    pub path: String,
}

/// `capabilityRoots/discoverV1` result: one discovery per root, in
/// request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResponse {
    pub roots: Vec<RootDiscovery>,
}

/// A recognised UTF-8 file and its contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TextFile {
    pub path: WirePath,
    pub contents: String,
}

/// The plugin a root declares itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PluginFiles {
    pub manifest: TextFile,
    /// The MCP configuration file: the one `mcpServers` names, else
    /// `.mcp.json`; `null` when `mcpServers` is inline or the file is absent.
    pub mcp_config: Option<TextFile>,
    /// The file `apps` names.
    pub apps_config: Option<TextFile>,
}

/// A skill's instructions and its optional metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SkillFiles {
    pub instructions: TextFile,
    pub metadata: Option<TextFile>,
}

/// What one root holds. Failures are per root: a broken root does not
/// spoil its siblings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RootDiscovery {
    pub id: String,
    /// The root as the request gave it.
    pub path: String,
    pub plugin: Option<PluginFiles>,
    /// Sorted by the `file:` URI of their instructions.
    pub skills: Vec<SkillFiles>,
    /// Plugin manifests that namespace the skills: the root's own (or its
    /// nearest ancestor's), then those found below, one per plugin root.
    pub namespace_manifests: Vec<TextFile>,
    pub warnings: Vec<String>,
    pub error: Option<String>,
}
