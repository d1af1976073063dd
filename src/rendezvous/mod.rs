//! `codexbox rendezvous`: a self-hostable registry and rendezvous for remote
//! mode (docs/remote.md). One HTTP port serves the registry API
//! ([`registry`]), `GET /readyz`, `GET /metrics` (Prometheus text, behind
//! a `metrics` token when there is a token file), and the relay WebSocket at `/relay`
//! ([`socket`], routing in [`hub`]); URLs and harness key authorizations are
//! signed ([`signing`]); callers are authorized by the token file
//! ([`auth`]), or else by an executor and a harness token generated at
//! start and published for the user's own codexbox peers
//! ([`crate::listener_token`]); connection slots are shared out by
//! [`admission`], and every request must arrive whole within the request
//! deadline. All state is in memory: a restart forgets registrations and
//! streams, and both executors (401 on their next upgrade → register again)
//! and harnesses (409 `environment_offline` until then → retry) recover.
//! It routes ciphertext by `stream_id` and never sees plaintext.

pub mod admission;
pub mod auth;
pub mod cli;
pub mod hub;
pub mod rate;
pub mod registry;
pub mod signing;
pub mod socket;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::{Role as WsRole, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use crate::listener_token::{self, Holder, Published};
use crate::metrics::rendezvous::{HandshakeFailure, RendezvousMetrics};
use crate::relay::registry_api::RegistryCall;
use crate::server::transport::http::{self, RequestHead};
use admission::{Admission, Slot};
use hub::{HarnessId, Hub, HubLimits};
use registry::{unix_now, Answer, RegistryState};
use signing::Role;
use socket::SocketRole;

/// Largest registry request body.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// Registrations admitted per second unless told otherwise.
pub const DEFAULT_REGISTRATIONS_PER_SEC: u32 = 1000;
/// How long the 408 answer to a request past its deadline may take to send.
const LATE_ANSWER_GRACE: Duration = Duration::from_secs(1);

/// Settings of the rendezvous.
#[derive(Debug, Clone)]
pub struct RendezvousConfig {
    pub listen: SocketAddr,
    /// `http(s)://host[:port][/prefix]` advertised in registry answers.
    pub public_url: Option<String>,
    pub tokens_file: Option<PathBuf>,
    /// Without a token file: serve everyone instead of publishing tokens.
    pub insecure_no_auth: bool,
    /// `Origin` header values that are not refused.
    pub allowed_origins: Vec<String>,
    pub url_ttl: Duration,
    /// TCP connections served at once (HTTP and WebSocket).
    pub max_connections: usize,
    /// Of those, connections whose request is not yet read and authorized
    /// (see [`admission`]).
    pub max_pending_connections: usize,
    /// Time a client has to send its whole request, head and body.
    pub request_timeout: Duration,
    /// Largest relay WebSocket message.
    pub max_frame_bytes: usize,
    /// Pings, the peer deadline and the write timeout of every relay socket.
    pub link: crate::link::Timing,
    pub limits: HubLimits,
    /// The signing key every replica shares (`None`: made at start).
    pub signing_key_file: Option<PathBuf>,
    /// Registrations admitted per second (0: no limit).
    pub max_registrations_per_sec: u32,
}

impl RendezvousConfig {
    /// Defaults for `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            public_url: None,
            tokens_file: None,
            insecure_no_auth: false,
            allowed_origins: Vec::new(),
            url_ttl: Duration::from_secs(300),
            max_connections: 4096,
            max_pending_connections: 1024,
            request_timeout: Duration::from_secs(10),
            max_frame_bytes: crate::relay::MAX_WEBSOCKET_MESSAGE_BYTES,
            link: crate::link::Timing::default(),
            limits: HubLimits {
                streams_per_environment: 1024,
                streams_per_harness_socket: 16,
                streams_per_token: 256,
                resume_hold: Duration::from_secs(30),
                claim_ttl: Duration::from_secs(30),
                environment_ttl: Duration::from_secs(300),
            },
            signing_key_file: None,
            max_registrations_per_sec: DEFAULT_REGISTRATIONS_PER_SEC,
        }
    }
}

/// Why the rendezvous cannot run.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tokens(#[from] auth::TokenFileError),
    #[error("cannot create the signing key: {0}")]
    Random(String),
    #[error(transparent)]
    SigningKey(#[from] signing::KeyFileError),
    #[error("--public-url must start with http:// or https://: `{0}`")]
    PublicUrl(String),
    #[error("cannot publish the executor and harness tokens: {0}; pass --tokens FILE, or --insecure-no-auth to serve without tokens")]
    Publish(#[from] crate::listener_token::ListenerTokenError),
}

/// A bound rendezvous, not serving yet.
pub struct Rendezvous {
    listener: TcpListener,
    state: Arc<RegistryState>,
    config: RendezvousConfig,
    /// The generated tokens' files: they go when the rendezvous does.
    published: Vec<Published>,
}

/// `http(s)://…` → `ws(s)://…`, trailing slashes removed.
fn ws_base(public_url: &str) -> Option<String> {
    let trimmed = public_url.trim().trim_end_matches('/');
    if let Some(rest) = trimmed.strip_prefix("http://") {
        Some(format!("ws://{rest}"))
    } else {
        trimmed
            .strip_prefix("https://")
            .map(|rest| format!("wss://{rest}"))
    }
}

impl Rendezvous {
    /// Binds and loads the token file; without one (and without
    /// `insecure_no_auth`), generates the executor and harness tokens and
    /// publishes them for this address.
    pub async fn bind(config: RendezvousConfig) -> Result<Self, RendezvousError> {
        let file_tokens = match &config.tokens_file {
            Some(path) => Some(auth::TokenTable::load(path)?),
            None => None,
        };
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| RendezvousError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local = listener
            .local_addr()
            .map_err(|source| RendezvousError::Bind {
                addr: config.listen,
                source,
            })?;
        let ws_base = match &config.public_url {
            Some(url) => ws_base(url).ok_or_else(|| RendezvousError::PublicUrl(url.clone()))?,
            None => format!("ws://{local}"),
        };
        let signer = match &config.signing_key_file {
            Some(path) => signing::Signer::from_key_file(path)?,
            None => {
                signing::Signer::generate().map_err(|e| RendezvousError::Random(e.to_string()))?
            }
        };
        let track_callers = file_tokens.is_some();
        let (tokens, published) = match file_tokens {
            Some(table) => (Some(table), Vec::new()),
            None if config.insecure_no_auth => (None, Vec::new()),
            None => {
                let (table, published) = publish_tokens(local)?;
                (Some(table), published)
            }
        };
        let state = Arc::new(RegistryState {
            hub: Hub::new(config.limits, RendezvousMetrics::new()),
            signer,
            tokens: RwLock::new(tokens),
            track_callers,
            allowed_origins: config.allowed_origins.clone(),
            ws_base,
            url_ttl: config.url_ttl,
            registrations: rate::RateLimit::new(config.max_registrations_per_sec),
        });
        Ok(Self {
            listener,
            state,
            config,
            published,
        })
    }

    /// `http://IP:PORT` with the real port.
    pub fn url(&self) -> String {
        match self.listener.local_addr() {
            Ok(addr) => format!("http://{addr}"),
            Err(_) => format!("http://{}", self.config.listen),
        }
    }

    /// Serves until `shutdown` completes. SIGHUP reloads the token file.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Rendezvous {
            listener,
            state,
            config,
            published,
        } = self;
        let config = Arc::new(config);
        let reload = tokio::spawn(reload_on_sighup(state.clone(), config.tokens_file.clone()));
        let sweeper = tokio::spawn(sweep_periodically(state.hub.clone()));
        let admission = Admission::new(config.max_connections, config.max_pending_connections);
        let accept = async {
            loop {
                let (stream, peer) = crate::accept::next_tcp(&listener).await;
                let slot = admission.admit().await;
                let (state, config) = (state.clone(), config.clone());
                tokio::spawn(serve_connection(stream, peer, slot, state, config));
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = shutdown => {}
        }
        reload.abort();
        sweeper.abort();
        drop(published);
    }
}

/// An executor token and a harness token for the rendezvous at `addr`,
/// published where the user's codexbox executors and harnesses find them
/// (a registry URL naming this address literally), and the table that
/// admits them.
fn publish_tokens(addr: SocketAddr) -> Result<(auth::TokenTable, Vec<Published>), RendezvousError> {
    let mut entries = Vec::new();
    let mut published = Vec::new();
    for (holder, grant) in [
        (Holder::Executor, auth::Grant::Executor),
        (Holder::Harness, auth::Grant::Harness),
    ] {
        let token = listener_token::generate()?;
        let file = listener_token::publish_for(addr, holder, &token)?;
        tracing::info!(path = %file.path().display(), ?grant, "token published for this user's codexbox peers");
        published.push(file);
        entries.push((token, grant));
    }
    Ok((auth::TokenTable::from_entries(entries), published))
}

/// Expires unused claims, idle harness sockets and environments without
/// an executor ([`Hub::sweep`]).
async fn sweep_periodically(hub: Arc<Hub>) {
    let mut tick = tokio::time::interval(hub.limits().sweep_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let resets = hub.sweep(std::time::Instant::now());
        if !resets.is_empty() {
            tokio::spawn(socket::deliver(resets));
        }
    }
}

async fn reload_on_sighup(state: Arc<RegistryState>, path: Option<PathBuf>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        return;
    };
    while hangup.recv().await.is_some() {
        let Some(path) = &path else {
            continue;
        };
        match auth::TokenTable::load(path) {
            Ok(table) => {
                tracing::info!(tokens = ?table, "token file reloaded");
                *state.tokens.write().unwrap_or_else(|e| e.into_inner()) = Some(table);
            }
            Err(err) => tracing::error!("token file not reloaded, keeping the old one: {err}"),
        }
    }
}

async fn respond<S: AsyncWrite + Unpin>(stream: &mut S, answer: &Answer) {
    let mut response = http::json_response(answer.status, answer.reason, &answer.body);
    if let (Some(secs), Some(end_of_status)) = (answer.retry_after_secs, response.find("\r\n")) {
        response.insert_str(end_of_status + 2, &format!("Retry-After: {secs}\r\n"));
    }
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Answers with `answer`; the connection then closes.
async fn finish<S: AsyncWrite + Unpin>(stream: &mut S, answer: Answer) -> Outcome {
    respond(stream, &answer).await;
    Outcome::Done
}

/// Where the request phase of a connection led.
enum Outcome {
    /// Answered (or given up on): the connection closes.
    Done,
    /// The upgrade was accepted (101 sent): serve the relay socket.
    Relay {
        leftover: Vec<u8>,
        environment_id: String,
        role: SocketRole,
    },
}

/// Serves one connection: its request under the request deadline and as a
/// pending connection (a newer one may displace it), then, for an accepted
/// upgrade, the relay socket on an established slot.
async fn serve_connection<S>(
    mut stream: S,
    peer: SocketAddr,
    mut slot: Slot,
    state: Arc<RegistryState>,
    config: Arc<RendezvousConfig>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let request = serve_request(&mut stream, peer, &state);
    let outcome = tokio::select! {
        _ = slot.displaced() => {
            tracing::debug!(%peer, "closed a pending connection to make room for a newer one");
            return;
        }
        outcome = tokio::time::timeout(config.request_timeout, request) => outcome,
    };
    match outcome {
        Err(_) => {
            tracing::info!(%peer, "closed a connection whose request did not arrive in time");
            let late = Answer::error(
                408,
                "Request Timeout",
                "request_timeout",
                "the request did not arrive in time",
            );
            let _ = tokio::time::timeout(LATE_ANSWER_GRACE, respond(&mut stream, &late)).await;
        }
        Ok(Outcome::Done) => {}
        Ok(Outcome::Relay {
            leftover,
            environment_id,
            role,
        }) => {
            if slot.establish() {
                relay(stream, leftover, environment_id, role, state, &config).await;
            }
        }
    }
}

/// Reads and answers one request. A registry call is authorized from its
/// head before its body is read.
async fn serve_request<S>(stream: &mut S, peer: SocketAddr, state: &RegistryState) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (head, leftover) = match http::read_head(stream).await {
        Ok(read) => read,
        Err(http::HeadError::Malformed | http::HeadError::TooLarge) => {
            let malformed =
                Answer::error(400, "Bad Request", "invalid_request", "malformed request");
            return finish(stream, malformed).await;
        }
        Err(http::HeadError::Closed | http::HeadError::Io(_)) => return Outcome::Done,
    };
    // Browsers never need this service: refuse anything a page could send
    // (unless its origin is allowed).
    let origin = head.header("origin");
    if origin.is_some_and(|origin| !state.allowed_origins.iter().any(|o| o == origin)) {
        let cross_origin = Answer::error(
            403,
            "Forbidden",
            "forbidden",
            "cross-origin requests are refused",
        );
        return finish(stream, cross_origin).await;
    }
    let (path, query) = head
        .path
        .split_once('?')
        .unwrap_or((head.path.as_str(), ""));
    if path == "/readyz" {
        let body = format!(
            "{{\"status\":\"ready\",\"streams\":{},\"environments\":{}}}",
            state.hub.stream_count(),
            state.hub.environment_count()
        );
        let ready = Answer {
            status: 200,
            reason: "OK",
            body,
            retry_after_secs: None,
        };
        return finish(stream, ready).await;
    }
    if path == crate::metrics::PATH {
        return metrics(stream, &head, state).await;
    }
    if path == "/relay" || path.ends_with("/relay") {
        return upgrade(stream, &head, leftover, query, state).await;
    }
    registry_call(stream, &head, leftover, path, peer, state).await;
    Outcome::Done
}

/// Answers a registry call, unless the peer goes away mid-body.
async fn registry_call<S>(
    stream: &mut S,
    head: &RequestHead,
    leftover: Vec<u8>,
    path: &str,
    peer: SocketAddr,
    state: &RegistryState,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Some((environment_id, call)) = RegistryCall::parse_path(path) else {
        let unknown = Answer::error(404, "Not Found", "not_found", "no such endpoint");
        return respond(stream, &unknown).await;
    };
    let answer = if head.method != "POST" {
        Answer::error(405, "Method Not Allowed", "method_not_allowed", "use POST")
    } else {
        match state.admit(&environment_id, call, head.header("authorization")) {
            Ok(admitted) => match http::read_body(stream, head, leftover, MAX_BODY_BYTES).await {
                Ok(body) => state.answer(&admitted, &body),
                Err(err) => match body_refusal(&err) {
                    Some(refusal) => refusal,
                    None => return,
                },
            },
            Err(refusal) => refusal,
        }
    };
    tracing::info!(%peer, environment = %environment_id, call = call.name(), status = answer.status, "registry call");
    state
        .hub
        .metrics()
        .registry_call(call.name(), answer.status);
    respond(stream, &answer).await;
}

/// `GET /metrics`: the exposition, for a `metrics` token when there is a
/// token file (see [`RegistryState::admit_metrics`]).
async fn metrics<S>(stream: &mut S, head: &RequestHead, state: &RegistryState) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if head.method != "GET" {
        let refusal = Answer::error(405, "Method Not Allowed", "method_not_allowed", "use GET");
        return finish(stream, refusal).await;
    }
    if let Err(refusal) = state.admit_metrics(head.header("authorization")) {
        return finish(stream, refusal).await;
    }
    let exposition = state.hub.metrics().render(state.hub.census());
    let _ = stream
        .write_all(crate::metrics::http_response(&exposition).as_bytes())
        .await;
    let _ = stream.shutdown().await;
    Outcome::Done
}

/// The answer to a body that could not be read; `None` when the peer left.
fn body_refusal(err: &http::BodyError) -> Option<Answer> {
    match err {
        http::BodyError::LengthRequired => Some(Answer::error(
            411,
            "Length Required",
            "invalid_request",
            "the body needs a Content-Length",
        )),
        http::BodyError::TooLarge { max } => Some(Answer::error(
            413,
            "Payload Too Large",
            "invalid_request",
            &format!("the body must be at most {max} bytes"),
        )),
        http::BodyError::Closed | http::BodyError::Io(_) => None,
    }
}

/// Checks a relay URL and accepts the upgrade (101).
async fn upgrade<S>(
    stream: &mut S,
    head: &RequestHead,
    leftover: Vec<u8>,
    query: &str,
    state: &RegistryState,
) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let grant = match state.signer.verify_url(query, unix_now()) {
        Ok(grant) => grant,
        Err(err) => {
            tracing::info!("relay upgrade refused: {err}");
            let (status, failure) = match err {
                signing::SignatureError::Missing => {
                    ((400, "Bad Request"), HandshakeFailure::UrlMissing)
                }
                signing::SignatureError::Forged => {
                    ((401, "Unauthorized"), HandshakeFailure::UrlForged)
                }
                signing::SignatureError::Expired => {
                    ((401, "Unauthorized"), HandshakeFailure::UrlExpired)
                }
            };
            state.hub.metrics().handshake_failed(failure);
            let refusal = Answer::error(status.0, status.1, "invalid_url", &err.to_string());
            return finish(stream, refusal).await;
        }
    };
    let current = state.hub.registration(&grant.environment_id);
    if current.map(|r| r.id) != Some(grant.registration_id.clone()) {
        state
            .hub
            .metrics()
            .handshake_failed(HandshakeFailure::StaleRegistration);
        let stale = Answer::error(
            401,
            "Unauthorized",
            "stale_registration",
            "the URL belongs to a previous registration",
        );
        return finish(stream, stale).await;
    }
    let role = match grant.role {
        Role::Environment => SocketRole::Executor,
        Role::Harness => SocketRole::Harness(HarnessId {
            key: grant.harness_key.unwrap_or_default(),
            caller: grant.caller,
        }),
    };
    if let SocketRole::Harness(who) = &role {
        if !state
            .hub
            .harness_may_connect(&grant.environment_id, who.caller.as_deref())
        {
            state
                .hub
                .metrics()
                .handshake_failed(HandshakeFailure::TooManySockets);
            let crowded = Answer::error(
                429,
                "Too Many Requests",
                "too_many_sockets",
                "this token holds as many relay sockets as it may",
            );
            return finish(stream, crowded).await;
        }
    }
    let Some(accept) = http::websocket_accept(head) else {
        state
            .hub
            .metrics()
            .handshake_failed(HandshakeFailure::NotWebSocket);
        let not_upgrade = Answer::error(
            426,
            "Upgrade Required",
            "upgrade_required",
            "expected a WebSocket upgrade",
        );
        return finish(stream, not_upgrade).await;
    };
    if stream
        .write_all(http::switching_protocols(&accept).as_bytes())
        .await
        .is_err()
    {
        return Outcome::Done;
    }
    Outcome::Relay {
        leftover,
        environment_id: grant.environment_id,
        role,
    }
}

/// Serves an upgraded relay socket.
async fn relay<S>(
    stream: S,
    leftover: Vec<u8>,
    environment_id: String,
    role: SocketRole,
    state: Arc<RegistryState>,
    config: &RendezvousConfig,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // Executor sockets carry every stream; harness sockets one or a few.
    let buffer = match role {
        SocketRole::Executor => 128 * 1024,
        SocketRole::Harness(_) => 16 * 1024,
    };
    let ws_config = WebSocketConfig::default()
        .max_message_size(Some(config.max_frame_bytes))
        .max_frame_size(Some(config.max_frame_bytes))
        .read_buffer_size(buffer)
        .write_buffer_size(buffer);
    let ws =
        WebSocketStream::from_partially_read(stream, leftover, WsRole::Server, Some(ws_config))
            .await;
    socket::serve(ws, state.hub.clone(), environment_id, role, config.link).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls_become_websocket_bases() {
        assert_eq!(ws_base("http://h:1/"), Some("ws://h:1".into()));
        assert_eq!(ws_base("https://h/prefix"), Some("wss://h/prefix".into()));
        assert_eq!(ws_base("ftp://h"), None);
    }
}
