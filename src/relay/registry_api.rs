//! The registry's HTTP API as JSON: request and response bodies of
//! `register`, `connect` and `validate`, the error body, and the endpoint
//! paths. Shared by the registry client (executor and harness) and the
//! rendezvous that serves it, so both sides agree by construction.

use serde::{Deserialize, Serialize};

use super::noise::NoisePublicKey;

/// The only security profile.
pub const SECURITY_PROFILE: &str = "noise_hybrid_ik_v1";
/// The 409 error code meaning "the executor is not connected right now".
pub const ENVIRONMENT_OFFLINE: &str = "environment_offline";

/// The registry call an endpoint path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistryCall {
    Register,
    Connect,
    Validate,
}

impl RegistryCall {
    /// The last path segment.
    pub fn name(self) -> &'static str {
        match self {
            Self::Register => "register",
            Self::Connect => "connect",
            Self::Validate => "validate",
        }
    }

    /// `cloud/environment/{id}/{call}`, without a leading slash; the id is
    /// spliced in raw, as the reference does.
    pub fn path(self, environment_id: &str) -> String {
        format!("cloud/environment/{environment_id}/{}", self.name())
    }

    /// Splits `/cloud/environment/{id}/{call}` (query removed) into its parts.
    pub fn parse_path(path: &str) -> Option<(String, RegistryCall)> {
        let rest = path.strip_prefix("/cloud/environment/")?;
        let (id, call) = rest.rsplit_once('/')?;
        let call = match call {
            "register" => Self::Register,
            "connect" => Self::Connect,
            "validate" => Self::Validate,
            _ => return None,
        };
        if id.is_empty() || id.contains('/') {
            return None;
        }
        Some((id.to_owned(), call))
    }
}

/// `POST …/register` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterRequest {
    pub security_profile: String,
    pub executor_public_key: NoisePublicKey,
}

/// `POST …/register` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterResponse {
    pub environment_id: String,
    pub url: String,
    pub security_profile: String,
    pub executor_registration_id: String,
}

/// `POST …/connect` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectRequest {
    pub harness_public_key: NoisePublicKey,
}

/// `POST …/connect` answer: a single-use bundle.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectResponse {
    pub environment_id: String,
    pub url: String,
    pub security_profile: String,
    pub executor_registration_id: String,
    pub executor_public_key: NoisePublicKey,
    pub harness_key_authorization: String,
}

impl std::fmt::Debug for ConnectResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectResponse")
            .field("environment_id", &self.environment_id)
            .field("url", &"<redacted>")
            .field("executor_registration_id", &self.executor_registration_id)
            .field("harness_key_authorization", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// `POST …/validate` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidateRequest {
    pub executor_registration_id: String,
    pub harness_public_key: NoisePublicKey,
    pub harness_key_authorization: String,
}

/// `POST …/validate` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidateResponse {
    pub valid: bool,
}

/// `{"error":{"code","message"}}`, both optional on input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub error: Option<ErrorDetail>,
}

/// The inner error object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ErrorBody {
    /// An error body with both members.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            error: Some(ErrorDetail {
                code: Some(code.to_owned()),
                message: Some(message.into()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_formed_and_parsed() {
        assert_eq!(
            RegistryCall::Connect.path("env-1"),
            "cloud/environment/env-1/connect"
        );
        assert_eq!(
            RegistryCall::parse_path("/cloud/environment/env-1/validate"),
            Some(("env-1".into(), RegistryCall::Validate))
        );
        assert_eq!(
            RegistryCall::parse_path("/cloud/environment//register"),
            None
        );
        assert_eq!(
            RegistryCall::parse_path("/cloud/environment/a/b/register"),
            None
        );
        assert_eq!(RegistryCall::parse_path("/cloud/environment/a/drop"), None);
    }

    #[test]
    fn bundle_debug_redacts_url_and_authorization() {
        let key = NoisePublicKey {
            suite: "s".into(),
            x25519_public_key: "x".into(),
            mlkem768_public_key: "m".into(),
        };
        let bundle = ConnectResponse {
            environment_id: "env".into(),
            url: "ws://secret-host/relay?sig=secret".into(),
            security_profile: SECURITY_PROFILE.into(),
            executor_registration_id: "reg".into(),
            executor_public_key: key,
            harness_key_authorization: "hka-secret".into(),
        };
        let text = format!("{bundle:?}");
        assert!(!text.contains("secret"), "{text}");
    }

    #[test]
    fn error_bodies_parse_with_missing_members() {
        let body: ErrorBody =
            serde_json::from_str(r#"{"error":{"code":"environment_offline"},"x":1}"#).unwrap();
        assert_eq!(
            body.error.unwrap().code.as_deref(),
            Some(ENVIRONMENT_OFFLINE)
        );
        assert_eq!(
            serde_json::to_string(&ErrorBody::new("c", "m")).unwrap(),
            r#"{"error":{"code":"c","message":"m"}}"#
        );
    }
}
