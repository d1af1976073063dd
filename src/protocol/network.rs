//! The network fields of `process/start` (docs/network.md):
//! `networkProxy` (a proxy the server starts for the process),
//! `managedNetwork`, and the `process/networkDenied` notification sent to
//! clients that asked for it in `initialize` (`capabilities.networkDenials`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Notification: a sandboxed process's request was refused by its proxy.
pub const NOTIFY_NETWORK_DENIED: &str = "process/networkDenied";

/// `allow`, `deny` or `none` (never matched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum DomainPermission {
    Allow,
    Deny,
    None,
}

/// `allow` or `deny` for a unix socket path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum UnixSocketPermission {
    Allow,
    Deny,
}

/// `full` or `limited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    Limited,
    Full,
}

/// The proxy settings that cross the wire (`networkProxy.proxy`). Every
/// non-optional key is required, as in the reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NetworkProxySettings {
    pub enabled: bool,
    pub enable_socks5: bool,
    pub enable_socks5_udp: bool,
    pub allow_upstream_proxy: bool,
    pub dangerously_allow_all_unix_sockets: bool,
    pub mode: NetworkMode,
    #[serde(default)]
    pub domains: Option<BTreeMap<String, DomainPermission>>,
    #[serde(default)]
    pub unix_sockets: Option<BTreeMap<String, UnixSocketPermission>>,
    pub allow_local_binding: bool,
}

/// Who the process runs for; feeds audit records only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AuditMetadata {
    #[serde(default)]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub app_version: Option<String>,
    #[serde(default)]
    pub user_account_id: Option<String>,
    #[serde(default)]
    pub auth_mode: Option<String>,
    #[serde(default)]
    pub originator: Option<String>,
    #[serde(default)]
    pub user_email: Option<String>,
    #[serde(default)]
    pub terminal_type: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub slug: Option<String>,
}

/// `networkProxy` of `process/start`: start a loopback proxy for this
/// process, living until its `process/closed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RemoteNetworkProxyLaunchConfig {
    /// Must be `enabled`: a launch of a disabled proxy is refused.
    #[cfg_attr(feature = "schema", schemars(extend("allOf" = [{"properties": {"enabled": {"const": true}}}])))]
    pub proxy: NetworkProxySettings,
    #[serde(default)]
    pub audit_metadata: AuditMetadata,
    #[serde(default)]
    pub environment_id: Option<String>,
    #[serde(default)]
    pub execution_id: Option<String>,
}

/// `managedNetwork`: the loopback ports of a running proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ManagedNetworkSandboxContext {
    #[serde(default)]
    pub loopback_ports: Vec<u16>,
    #[serde(default)]
    pub allow_local_binding: bool,
}

/// `process/networkDenied` notification params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NetworkDeniedNotification {
    pub process_id: String,
    pub host: String,
    pub port: u16,
    /// `http`, `https_connect`, `socks5_tcp`, `socks5_udp` or `dns`.
    pub protocol: String,
    /// `not_allowed`, `not_allowed_local`, `denied`, `method_not_allowed`,
    /// `mitm_required` or `dns_failed`.
    pub reason: String,
}

/// A denial as `process/read` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NetworkDenial {
    pub host: String,
    pub port: u16,
    pub protocol: String,
    pub reason: String,
}

/// `initialize` capabilities a client may announce.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    /// Send `process/networkDenied` notifications to this client.
    #[serde(default)]
    pub network_denials: bool,
}

impl ClientCapabilities {
    /// Whether no extension is asked for (then the member is left out).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_config_requires_the_reference_keys_and_fills_defaults() {
        let config: RemoteNetworkProxyLaunchConfig = serde_json::from_value(serde_json::json!({
            "proxy": {"enabled": true, "enableSocks5": true, "enableSocks5Udp": true,
                "allowUpstreamProxy": true, "dangerouslyAllowAllUnixSockets": false,
                "mode": "full", "domains": {"*.openai.com": "allow", "evil.example": "deny"},
                "unixSockets": null, "allowLocalBinding": false},
            "auditMetadata": {"conversationId": "conversation-1"},
            "environmentId": "remote", "executionId": "execution-1"
        }))
        .unwrap();
        assert_eq!(
            config.audit_metadata.conversation_id.as_deref(),
            Some("conversation-1")
        );
        let err = serde_json::from_value::<NetworkProxySettings>(serde_json::json!({
            "enabled": true, "enableSocks5": true, "enableSocks5Udp": true,
            "allowUpstreamProxy": true, "dangerouslyAllowAllUnixSockets": false,
            "allowLocalBinding": false}))
        .unwrap_err();
        assert!(err.to_string().contains("missing field `mode`"), "{err}");
        let err = serde_json::from_value::<NetworkMode>(serde_json::json!("x")).unwrap_err();
        assert!(err
            .to_string()
            .contains("unknown variant `x`, expected `limited` or `full`"));
        let ctx = ManagedNetworkSandboxContext {
            loopback_ports: vec![43123, 48081],
            allow_local_binding: false,
        };
        assert_eq!(
            serde_json::to_string(&ctx).unwrap(),
            r#"{"loopbackPorts":[43123,48081],"allowLocalBinding":false}"#
        );
    }
}
