//! The registry client of executors and harnesses: base URL normalisation
//! and endpoint formation as the reference does them, `register`, `connect`
//! (10 s for the whole exchange) and `validate`, the checks on each answer,
//! and the reference's error texts, including which errors a recovering
//! harness may retry. A client without credentials of its own, calling a
//! registry on a literal loopback address, sends the token a codexbox
//! rendezvous there published for the call's role
//! ([`crate::listener_token`]).

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_tungstenite::tungstenite::http::StatusCode;

use super::noise::NoisePublicKey;
use super::registry_api::{
    ConnectRequest, ConnectResponse, ErrorBody, RegisterRequest, RegisterResponse, RegistryCall,
    ValidateRequest, ValidateResponse, ENVIRONMENT_OFFLINE, SECURITY_PROFILE,
};
use crate::listener_token::{self, Holder};
use crate::net::client::{post_json, PostError};
use crate::web_url::{UrlError, WebUrl};

/// Time allowed for a whole `connect` exchange.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time the executor allows a `validate` call.
pub const VALIDATE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest registry answer read.
const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// Longest error body quoted in a message.
const ERROR_PREVIEW_CHARS: usize = 4096;

/// What went wrong talking to the registry (texts as the reference's).
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("environment registry configuration error: environment registry base URL is required")]
    MissingBaseUrl,
    #[error("environment registry configuration error: {0}")]
    InvalidBaseUrl(#[source] UrlError),
    #[error("environment registry configuration error: environment id is required for remote exec-server registration")]
    MissingEnvironmentId,
    #[error("environment registry authentication error: environment registry authentication failed ({status}): {message}")]
    Authentication { status: String, message: String },
    #[error("environment registry authentication error: environment registry harness key validation authentication failed ({status})")]
    ValidationAuthentication { status: String },
    #[error("environment registry request failed ({status}{}): {message}", code.as_deref().map(|c| format!(", {c}")).unwrap_or_default())]
    Http {
        status: String,
        status_code: u16,
        code: Option<String>,
        message: String,
        /// The answer's `Retry-After` (a 429 or 503 says when to come back).
        retry_after: Option<Duration>,
    },
    #[error("environment registry harness key validation failed")]
    ValidationFailed { status_code: u16 },
    #[error("environment registry request failed: {0}")]
    Request(#[from] PostError),
    #[error("environment registry request failed: {0}")]
    Decode(#[source] serde_json::Error),
    #[error(
        "exec-server protocol error: environment registry returned a different environment id"
    )]
    DifferentEnvironment,
    #[error("exec-server protocol error: environment registry returned unsupported security profile `{0}`")]
    UnsupportedProfile(String),
    #[error("exec-server protocol error: environment registry returned incomplete Noise connection data")]
    IncompleteBundle,
    #[error("exec-server protocol error: environment registry rejected Noise relay harness key")]
    KeyRejected,
    #[error("exec-server protocol error: timed out validating Noise relay harness key")]
    ValidationTimeout,
}

impl RegistryError {
    /// Whether a recovering harness should try again: the network, 5xx,
    /// 408, 429 and `409 environment_offline`.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Request(err) => err.is_transient(),
            Self::Http {
                status_code, code, ..
            } => {
                *status_code >= 500
                    || *status_code == 408
                    || *status_code == 429
                    || (*status_code == 409 && code.as_deref() == Some(ENVIRONMENT_OFFLINE))
            }
            _ => false,
        }
    }

    /// Whether the registry said "too many at once" (429).
    pub fn is_rate_limited(&self) -> bool {
        matches!(
            self,
            Self::Http {
                status_code: 429,
                ..
            }
        )
    }

    /// How long the registry asked the caller to wait (`Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// Extra request headers (`Authorization`, `ChatGPT-Account-ID`, …);
/// never printed.
#[derive(Clone, Default)]
pub struct AuthHeaders(pub Vec<(String, String)>);

impl std::fmt::Debug for AuthHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthHeaders(<redacted>)")
    }
}

impl AuthHeaders {
    /// `Authorization: Bearer TOKEN`.
    pub fn bearer(token: &str) -> Self {
        Self(vec![("authorization".into(), format!("Bearer {token}"))])
    }

    /// Whether any header is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A registry for one environment.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    base: String,
    environment_id: String,
    auth: AuthHeaders,
}

/// `409 Conflict`-style status text.
pub fn status_text(status: u16) -> String {
    match StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

fn preview(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(ERROR_PREVIEW_CHARS).collect())
}

impl RegistryClient {
    /// Normalises the base (trimmed, trailing `/` removed) and the id.
    pub fn new(
        base_url: &str,
        environment_id: &str,
        auth: AuthHeaders,
    ) -> Result<Self, RegistryError> {
        let base = base_url.trim().trim_end_matches('/');
        if base.is_empty() {
            return Err(RegistryError::MissingBaseUrl);
        }
        // Refused now, not at the first request.
        WebUrl::parse(base).map_err(RegistryError::InvalidBaseUrl)?;
        let environment_id = environment_id.trim();
        if environment_id.is_empty() {
            return Err(RegistryError::MissingEnvironmentId);
        }
        Ok(Self {
            base: base.to_owned(),
            environment_id: environment_id.to_owned(),
            auth,
        })
    }

    /// The environment id.
    pub fn environment_id(&self) -> &str {
        &self.environment_id
    }

    /// The normalised base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `{base}/cloud/environment/{id}/{call}`, by concatenation.
    pub fn endpoint(&self, call: RegistryCall) -> String {
        format!("{}/{}", self.base, call.path(&self.environment_id))
    }

    async fn post<B: Serialize, R: DeserializeOwned>(
        &self,
        call: RegistryCall,
        body: &B,
        timeout: Option<Duration>,
    ) -> Result<R, RegistryError> {
        let body = serde_json::to_vec(body).map_err(RegistryError::Decode)?;
        let published = self.published_auth(call).await;
        let headers = published.as_ref().unwrap_or(&self.auth);
        let response = post_json(
            &self.endpoint(call),
            &headers.0,
            body.into(),
            MAX_RESPONSE_BYTES,
            timeout,
        )
        .await?;
        let status = response.status;
        if (200..300).contains(&status) {
            return serde_json::from_slice(&response.body).map_err(RegistryError::Decode);
        }
        if call == RegistryCall::Validate {
            // The body is not read: it may echo the authorization.
            return Err(if status == 401 || status == 403 {
                RegistryError::ValidationAuthentication {
                    status: status_text(status),
                }
            } else {
                RegistryError::ValidationFailed {
                    status_code: status,
                }
            });
        }
        let parsed: Option<ErrorBody> = serde_json::from_slice(&response.body).ok();
        let detail = parsed.as_ref().and_then(|b| b.error.clone());
        let message = detail.as_ref().and_then(|d| d.message.clone());
        if status == 401 || status == 403 {
            return Err(RegistryError::Authentication {
                status: status_text(status),
                message: message
                    .or_else(|| preview(&response.body))
                    .unwrap_or_else(|| "empty error body".into()),
            });
        }
        let fallback = if detail.is_some() {
            "empty error body"
        } else {
            "empty or malformed error body"
        };
        Err(RegistryError::Http {
            status: status_text(status),
            status_code: status,
            code: detail.and_then(|d| d.code),
            message: message
                .or_else(|| preview(&response.body))
                .unwrap_or_else(|| fallback.into()),
            retry_after: response.retry_after,
        })
    }

    /// Without headers of its own: the token a codexbox rendezvous on the
    /// registry's literal loopback address published for `call`'s role
    /// (executors register and validate, harnesses connect), read at each
    /// call so that the token of a restarted rendezvous is picked up.
    async fn published_auth(&self, call: RegistryCall) -> Option<AuthHeaders> {
        if !self.auth.is_empty() {
            return None;
        }
        let addr = listener_token::loopback_http_address(&self.base)?;
        let holder = match call {
            RegistryCall::Register | RegistryCall::Validate => Holder::Executor,
            RegistryCall::Connect => Holder::Harness,
        };
        let token = tokio::task::spawn_blocking(move || listener_token::find_for(addr, holder))
            .await
            .ok()
            .flatten()?;
        Some(AuthHeaders::bearer(&token))
    }

    fn check_identity(&self, environment_id: &str, profile: &str) -> Result<(), RegistryError> {
        if environment_id != self.environment_id {
            return Err(RegistryError::DifferentEnvironment);
        }
        if profile != SECURITY_PROFILE {
            return Err(RegistryError::UnsupportedProfile(profile.to_owned()));
        }
        Ok(())
    }

    /// `register`: the executor announces its key (no timeout, as the reference).
    pub async fn register(
        &self,
        executor_key: &NoisePublicKey,
    ) -> Result<RegisterResponse, RegistryError> {
        let request = RegisterRequest {
            security_profile: SECURITY_PROFILE.into(),
            executor_public_key: executor_key.clone(),
        };
        let response: RegisterResponse = self.post(RegistryCall::Register, &request, None).await?;
        self.check_identity(&response.environment_id, &response.security_profile)?;
        Ok(response)
    }

    /// `connect`: a harness asks for a single-use bundle.
    pub async fn connect(
        &self,
        harness_key: &NoisePublicKey,
    ) -> Result<ConnectResponse, RegistryError> {
        let request = ConnectRequest {
            harness_public_key: harness_key.clone(),
        };
        let response: ConnectResponse = self
            .post(RegistryCall::Connect, &request, Some(CONNECT_TIMEOUT))
            .await?;
        self.check_identity(&response.environment_id, &response.security_profile)?;
        if response.url.trim().is_empty()
            || response.executor_registration_id.trim().is_empty()
            || response.harness_key_authorization.trim().is_empty()
        {
            return Err(RegistryError::IncompleteBundle);
        }
        Ok(response)
    }

    /// `validate`: the executor asks whether a harness key and its
    /// authorization belong together.
    pub async fn validate(
        &self,
        registration_id: &str,
        harness_key: &NoisePublicKey,
        authorization: &str,
    ) -> Result<(), RegistryError> {
        let request = ValidateRequest {
            executor_registration_id: registration_id.to_owned(),
            harness_public_key: harness_key.clone(),
            harness_key_authorization: authorization.to_owned(),
        };
        let call = self.post::<_, ValidateResponse>(RegistryCall::Validate, &request, None);
        let response = tokio::time::timeout(VALIDATE_TIMEOUT, call)
            .await
            .map_err(|_| RegistryError::ValidationTimeout)??;
        if !response.valid {
            return Err(RegistryError::KeyRejected);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_that_is_not_http_is_refused_at_once() {
        for base in ["ftp://registry.test", "registry.test", "https://"] {
            let refused = RegistryClient::new(base, "env", AuthHeaders::default());
            assert!(
                matches!(refused, Err(RegistryError::InvalidBaseUrl(_))),
                "{base}: {refused:?}"
            );
        }
        assert!(RegistryClient::new("http://127.0.0.1:9/", "env", AuthHeaders::default()).is_ok());
    }

    #[test]
    fn base_urls_are_normalised_and_endpoints_concatenated() {
        let client =
            RegistryClient::new(" http://h/base// ", " env-1 ", AuthHeaders::default()).unwrap();
        assert_eq!(
            client.endpoint(RegistryCall::Register),
            "http://h/base/cloud/environment/env-1/register"
        );
        // A query in the base swallows the path, as with the reference.
        let client = RegistryClient::new("http://h/p?t=s", "e", AuthHeaders::default()).unwrap();
        assert_eq!(
            client.endpoint(RegistryCall::Connect),
            "http://h/p?t=s/cloud/environment/e/connect"
        );
        assert_eq!(
            RegistryClient::new(" / ", "e", AuthHeaders::default())
                .unwrap_err()
                .to_string(),
            "environment registry configuration error: environment registry base URL is required"
        );
        assert!(matches!(
            RegistryClient::new("http://h", "  ", AuthHeaders::default()),
            Err(RegistryError::MissingEnvironmentId)
        ));
    }

    #[test]
    fn errors_read_like_the_reference_and_know_what_is_retryable() {
        let offline = RegistryError::Http {
            status: status_text(409),
            status_code: 409,
            code: Some(ENVIRONMENT_OFFLINE.into()),
            message: "executor is not connected".into(),
            retry_after: None,
        };
        assert_eq!(
            offline.to_string(),
            "environment registry request failed (409 Conflict, environment_offline): executor is not connected"
        );
        assert!(offline.is_retryable());
        let conflict = RegistryError::Http {
            status: status_text(409),
            status_code: 409,
            code: Some("registration_conflict".into()),
            message: "m".into(),
            retry_after: None,
        };
        assert!(!conflict.is_retryable());
        let busy = RegistryError::Http {
            status: status_text(429),
            status_code: 429,
            code: None,
            message: "m".into(),
            retry_after: Some(Duration::from_secs(2)),
        };
        assert!(busy.is_retryable());
        assert_eq!(busy.retry_after(), Some(Duration::from_secs(2)));
        assert!(!RegistryError::Authentication {
            status: status_text(401),
            message: "m".into()
        }
        .is_retryable());
        assert_eq!(status_text(302), "302 Found");
    }

    #[test]
    fn auth_headers_never_print() {
        let text = format!("{:?}", AuthHeaders::bearer("s3cret"));
        assert!(!text.contains("s3cret"));
    }
}
