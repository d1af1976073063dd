//! The registry's HTTP API (`POST /cloud/environment/{id}/register`,
//! `…/connect`, `…/validate`) with the reference's JSON bodies and error
//! shapes: who may call is decided by the token table, what is answered by
//! the hub's state, and every URL and authorization handed out is signed
//! and short-lived.

use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::auth::{Grant, Refusal, TokenTable, EVERY_ENVIRONMENT};
use super::hub::Hub;
use super::rate::RateLimit;
use super::signing::{Role, Signer, UrlGrant};
use crate::relay::registry_api::{
    ConnectRequest, ConnectResponse, ErrorBody, RegisterRequest, RegisterResponse, RegistryCall,
    ValidateRequest, ValidateResponse, ENVIRONMENT_OFFLINE, SECURITY_PROFILE,
};
use crate::server::transport::http::bearer_token;

/// Longest environment id accepted, in bytes.
pub const MAX_ENVIRONMENT_ID_BYTES: usize = 256;

/// What the registry needs.
#[derive(Debug)]
pub struct RegistryState {
    pub hub: Arc<Hub>,
    pub signer: Signer,
    /// `None`: no tokens at all (`--insecure-no-auth`), everyone may call.
    pub tokens: RwLock<Option<TokenTable>>,
    /// Whether tokens name callers (a token file: per-token limits apply);
    /// the generated tokens are every local peer's alike.
    pub track_callers: bool,
    /// `Origin` header values that are not refused.
    pub allowed_origins: Vec<String>,
    /// `ws://…` or `wss://…` base of the URLs handed out.
    pub ws_base: String,
    /// Lifetime of URLs and authorizations.
    pub url_ttl: Duration,
    /// Registrations admitted per second (`--max-registrations-per-sec`).
    pub registrations: RateLimit,
}

/// An HTTP answer: status, reason and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub reason: &'static str,
    pub body: String,
    /// Seconds for a `Retry-After` header (a 429).
    pub retry_after_secs: Option<u64>,
}

impl Answer {
    fn ok<T: Serialize>(value: &T) -> Self {
        Self {
            status: 200,
            reason: "OK",
            body: serde_json::to_string(value).unwrap_or_else(|_| "{}".into()),
            retry_after_secs: None,
        }
    }

    /// An error with the reference's `{"error":{"code","message"}}` body.
    pub fn error(status: u16, reason: &'static str, code: &str, message: &str) -> Self {
        Self {
            status,
            reason,
            body: serde_json::to_string(&ErrorBody::new(code, message))
                .unwrap_or_else(|_| "{}".into()),
            retry_after_secs: None,
        }
    }

    /// 429 `rate_limited`, to be tried again after `wait` (whole seconds,
    /// at least one).
    fn rate_limited(wait: Duration) -> Self {
        let secs = wait
            .as_secs()
            .saturating_add(u64::from(wait.subsec_nanos() > 0))
            .max(1);
        Self {
            retry_after_secs: Some(secs),
            ..Self::error(
                429,
                "Too Many Requests",
                RATE_LIMITED,
                "too many registrations at once; try again after Retry-After seconds",
            )
        }
    }
}

/// The 429 error code of a registration refused by the admission rate.
pub const RATE_LIMITED: &str = "rate_limited";

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, Answer> {
    serde_json::from_slice(body).map_err(|err| {
        Answer::error(
            400,
            "Bad Request",
            "invalid_request",
            &format!("invalid request body: {err}"),
        )
    })
}

fn invalid_key(err: crate::relay::noise::NoiseError) -> Answer {
    Answer::error(400, "Bad Request", "invalid_public_key", &err.to_string())
}

/// The base64url fingerprint a harness key is known by in URLs and authorizations.
fn fingerprint(key: &crate::relay::noise::DecodedPublicKey) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.fingerprint())
}

/// A registry call whose caller was authorized from the request head: only
/// such a call gets its body read and answered.
#[derive(Debug)]
pub struct AdmittedCall {
    environment_id: String,
    call: RegistryCall,
    /// The caller's [`Signer::caller_id`] (with a token file only).
    caller: Option<String>,
}

impl RegistryState {
    /// Decides from the head alone whether a call may go on to send its
    /// body: the environment id's length, then the caller's token.
    pub fn admit(
        &self,
        environment_id: &str,
        call: RegistryCall,
        authorization: Option<&str>,
    ) -> Result<AdmittedCall, Answer> {
        if environment_id.len() > MAX_ENVIRONMENT_ID_BYTES {
            return Err(Answer::error(
                400,
                "Bad Request",
                "invalid_request",
                &format!("the environment id is longer than {MAX_ENVIRONMENT_ID_BYTES} bytes"),
            ));
        }
        let grant = match call {
            RegistryCall::Register | RegistryCall::Validate => Grant::Executor,
            RegistryCall::Connect => Grant::Harness,
        };
        self.check_token(authorization, environment_id, grant)?;
        let tokens = self.tokens.read().unwrap_or_else(|e| e.into_inner());
        let caller = tokens.as_ref().and_then(|_| {
            authorization
                .and_then(bearer_token)
                .filter(|_| self.track_callers)
                .map(|token| self.signer.caller_id(token))
        });
        drop(tokens);
        if call == RegistryCall::Register {
            self.registrations.take().map_err(Answer::rate_limited)?;
        }
        Ok(AdmittedCall {
            environment_id: environment_id.to_owned(),
            call,
            caller,
        })
    }

    /// Whether `GET /metrics` may be answered: with a token file, only for
    /// a token of a `* metrics` line; with the tokens generated at start,
    /// for either of them (the user's own codexbox peers); with no tokens
    /// at all (`--insecure-no-auth`), for everyone, as every call is.
    pub fn admit_metrics(&self, authorization: Option<&str>) -> Result<(), Answer> {
        if self.track_callers {
            return self.check_token(authorization, EVERY_ENVIRONMENT, Grant::Metrics);
        }
        self.check_token(authorization, EVERY_ENVIRONMENT, Grant::Executor)
            .or_else(|_| self.check_token(authorization, EVERY_ENVIRONMENT, Grant::Harness))
    }

    /// The token file's verdict on `authorization` acting as `grant` on
    /// `environment_id` (everyone may without a token file).
    fn check_token(
        &self,
        authorization: Option<&str>,
        environment_id: &str,
        grant: Grant,
    ) -> Result<(), Answer> {
        let tokens = self.tokens.read().unwrap_or_else(|e| e.into_inner());
        let Some(table) = tokens.as_ref() else {
            return Ok(());
        };
        table
            .check(authorization, environment_id, grant)
            .map_err(|refusal| match refusal {
                Refusal::Unauthenticated => Answer::error(
                    401,
                    "Unauthorized",
                    "unauthorized",
                    "missing or unknown bearer token",
                ),
                Refusal::Forbidden => Answer::error(
                    403,
                    "Forbidden",
                    "forbidden",
                    "this token may not do that for this environment",
                ),
            })
    }

    /// Answers an admitted call with its body.
    pub fn answer(&self, admitted: &AdmittedCall, body: &[u8]) -> Answer {
        let environment_id = admitted.environment_id.as_str();
        let outcome = match admitted.call {
            RegistryCall::Register => self.register(environment_id, body),
            RegistryCall::Connect => self.connect(environment_id, admitted.caller.as_deref(), body),
            RegistryCall::Validate => self.validate(environment_id, body),
        };
        outcome.unwrap_or_else(|answer| answer)
    }

    fn expiry(&self) -> u64 {
        unix_now().saturating_add(self.url_ttl.as_secs())
    }

    fn register(&self, environment_id: &str, body: &[u8]) -> Result<Answer, Answer> {
        let request: RegisterRequest = parse(body)?;
        if request.security_profile != SECURITY_PROFILE {
            return Err(Answer::error(
                400,
                "Bad Request",
                "unsupported_security_profile",
                &format!(
                    "unsupported security profile `{}`",
                    request.security_profile
                ),
            ));
        }
        request.executor_public_key.decode().map_err(invalid_key)?;
        let registration_id =
            self.hub
                .register(environment_id, request.executor_public_key, || {
                    format!("reg-{}", uuid::Uuid::new_v4())
                });
        tracing::info!(environment = %environment_id, registration = %registration_id, "executor registered");
        let grant = UrlGrant {
            role: Role::Environment,
            environment_id: environment_id.to_owned(),
            registration_id: registration_id.clone(),
            harness_key: None,
            caller: None,
        };
        let url = self.signer.url(&self.ws_base, &grant, self.expiry());
        Ok(Answer::ok(&RegisterResponse {
            environment_id: environment_id.to_owned(),
            url,
            security_profile: SECURITY_PROFILE.into(),
            executor_registration_id: registration_id,
        }))
    }

    fn connect(
        &self,
        environment_id: &str,
        caller: Option<&str>,
        body: &[u8],
    ) -> Result<Answer, Answer> {
        let request: ConnectRequest = parse(body)?;
        let harness_key = request.harness_public_key.decode().map_err(invalid_key)?;
        // An unknown environment is "offline" too: after a restart the
        // registry knows nothing until the executor registers again, and
        // harnesses should keep retrying meanwhile. An executor socket that
        // is momentarily away while streams wait for it is not offline.
        let registration = self
            .hub
            .registration(environment_id)
            .filter(|_| self.hub.admits_harnesses(environment_id))
            .ok_or_else(|| {
                Answer::error(
                    409,
                    "Conflict",
                    ENVIRONMENT_OFFLINE,
                    "the environment's executor is not connected",
                )
            })?;
        let fingerprint = fingerprint(&harness_key);
        let expires_at = self.expiry();
        let grant = UrlGrant {
            role: Role::Harness,
            environment_id: environment_id.to_owned(),
            registration_id: registration.id.clone(),
            harness_key: Some(fingerprint.clone()),
            caller: caller.map(str::to_owned),
        };
        let url = self.signer.url(&self.ws_base, &grant, expires_at);
        let authorization =
            self.signer
                .authorization(environment_id, &registration.id, &fingerprint, expires_at);
        Ok(Answer::ok(&ConnectResponse {
            environment_id: environment_id.to_owned(),
            url,
            security_profile: SECURITY_PROFILE.into(),
            executor_registration_id: registration.id,
            executor_public_key: registration.executor_key,
            harness_key_authorization: authorization,
        }))
    }

    fn validate(&self, environment_id: &str, body: &[u8]) -> Result<Answer, Answer> {
        let request: ValidateRequest = parse(body)?;
        let current = self.hub.registration(environment_id);
        let valid = current.is_some_and(|r| r.id == request.executor_registration_id)
            && request.harness_public_key.decode().ok().is_some_and(|key| {
                let fingerprint = fingerprint(&key);
                self.signer
                    .verify_authorization(
                        &request.harness_key_authorization,
                        environment_id,
                        &request.executor_registration_id,
                        &fingerprint,
                        unix_now(),
                    )
                    .is_ok()
            });
        tracing::info!(environment = %environment_id, valid, "harness key validated");
        Ok(Answer::ok(&ValidateResponse { valid }))
    }
}
