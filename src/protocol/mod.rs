//! Wire types of the Codex JSON-RPC dialect: envelope, methods, params and
//! results, and path URIs. With the `schema` feature the types also
//! derive `JsonSchema` and `schema` renders the shipped JSON Schemas.

pub mod capability;
pub mod envelope;
pub mod environment;
pub mod fs;
pub mod http;
pub mod method;
pub mod network;
pub mod process;
pub mod sandbox;
#[cfg(feature = "schema")]
pub mod schema;
pub mod session;

pub use envelope::{RequestFamily, RequestId, RpcError};

/// Standard padded base64, the encoding of every byte field on the wire
/// (output chunks, file blocks), SIMD-accelerated where the CPU allows.
pub fn base64() -> &'static base64::engine::Simd {
    static ENGINE: std::sync::OnceLock<base64::engine::Simd> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| base64::engine::Simd::standard(base64::engine::general_purpose::PAD))
}
pub use crate::wire_path::{PathDialect, PathError, WirePath};

/// `initialize`.
pub const METHOD_INITIALIZE: &str = "initialize";
/// The client's handshake acknowledgement notification.
pub const NOTIFY_INITIALIZED: &str = "initialized";

/// Params of a method that takes none (`environment/*`): absent, `null`, or
/// an object whose members are ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoParams {}

impl<'de> serde::Deserialize<'de> for NoParams {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ignored;
        impl<'de> serde::de::Visitor<'de> for Ignored {
            type Value = NoParams;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("no params (absent, null or an object)")
            }
            fn visit_unit<E>(self) -> Result<NoParams, E> {
                Ok(NoParams {})
            }
            fn visit_none<E>(self) -> Result<NoParams, E> {
                Ok(NoParams {})
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<NoParams, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(NoParams {})
            }
        }
        deserializer.deserialize_any(Ignored)
    }
}

/// `initialize` params.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub client_name: String,
    #[serde(default)]
    pub resume_session_id: Option<String>,
    /// Opt-in extensions (`networkDenials`).
    #[serde(
        default,
        skip_serializing_if = "network::ClientCapabilities::is_default"
    )]
    #[cfg_attr(feature = "schema", schemars(extend("default" = {"networkDenials": false})))]
    pub capabilities: network::ClientCapabilities,
    /// How long the session should survive without a connection, in
    /// seconds (an extension: bounded by the server's maximum; absent, the
    /// session keeps the grace period it has, the server's by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(extend("default" = null)))]
    pub session_grace_secs: Option<u64>,
}

/// `initialize` result.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub session_id: String,
    /// The grace period now in force for the session, in seconds: present
    /// only when the request asked for one (so a reference client sees the
    /// reference's result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_grace_secs: Option<u64>,
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    #[test]
    fn initialize_params_leave_out_the_extensions_not_asked_for() {
        let mut params = super::InitializeParams {
            client_name: "c".into(),
            resume_session_id: None,
            capabilities: Default::default(),
            session_grace_secs: None,
        };
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            serde_json::json!({"clientName": "c", "resumeSessionId": null})
        );
        params.session_grace_secs = Some(30);
        params.capabilities.network_denials = true;
        assert_eq!(
            serde_json::to_value(&params).unwrap(),
            serde_json::json!({"clientName": "c", "resumeSessionId": null,
                "sessionGraceSecs": 30, "capabilities": {"networkDenials": true}})
        );
    }

    #[test]
    fn the_wire_engine_decodes_and_refuses_like_the_standard_one() {
        let standard = &base64::engine::general_purpose::STANDARD;
        let data: Vec<u8> = (0..=255u8).cycle().take(4099).collect();
        for len in [0, 1, 2, 3, 64, 1000, 4099] {
            let text = standard.encode(&data[..len]);
            assert_eq!(super::base64().encode(&data[..len]), text, "{len}");
            assert_eq!(super::base64().decode(&text).unwrap(), &data[..len]);
        }
        let long = standard.encode(&data);
        for bad in [
            "A".to_owned(),
            "AB=".to_owned(),
            "AB==A===".to_owned(),
            "QQ=x".to_owned(),
            "QR==".to_owned(),
            format!("{}!{}", &long[..2000], &long[2001..]),
            format!("{long}="),
        ] {
            assert_eq!(
                super::base64().decode(&bad).map_err(|e| e.to_string()),
                standard.decode(&bad).map_err(|e| e.to_string()),
                "{bad:.40}"
            );
        }
    }
}
