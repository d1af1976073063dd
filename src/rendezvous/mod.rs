//! `codexbox rendezvous`: a self-hostable registry and rendezvous for remote
//! mode (docs/remote.md). One HTTP port serves the registry API
//! (`registry`), `GET /readyz`, `GET /metrics` (Prometheus text, behind
//! a `metrics` token when there is a token file), and the relay WebSocket at `/relay`
//! (`socket`, routing in `hub`); URLs and harness key authorizations are
//! signed (`signing`); callers are authorized by the token file
//! ([`auth`]), or else by an executor and a harness token generated at
//! start and published for the user's own codexbox peers
//! ([`crate::listener_token`]); connection slots are shared out by
//! `admission`, and every request must arrive whole within the request
//! deadline. All state is in memory: a restart forgets registrations and
//! streams, and both executors (401 on their next upgrade → register again)
//! and harnesses (409 `environment_offline` until then → retry) recover.
//! It routes ciphertext by `stream_id` and never sees plaintext.

pub(crate) mod admission;
pub mod auth;
pub(crate) mod cli;
pub(crate) mod hub;
pub(crate) mod rate;
pub(crate) mod registry;
pub(crate) mod signing;
pub(crate) mod socket;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ::http::header::{AUTHORIZATION, CONTENT_LENGTH, RETRY_AFTER};
use ::http::{Method, Request, Response, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::{Role as WsRole, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use crate::listener_token::{self, Holder, Published};
use crate::metrics::rendezvous::{HandshakeFailure, RendezvousMetrics};
use crate::net::http_server::{serve_one, Body, Upgraded};
use crate::relay::registry_api::RegistryCall;
use crate::server::transport::http;
use crate::shutdown::{Shutdown, Watcher};
use admission::{Admission, Slot};
use hub::{HarnessId, Hub, HubLimits};
use registry::{unix_now, Answer, RegistryState};
use signing::Role;
use socket::SocketRole;

/// Largest registry request body.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// Registrations admitted per second unless told otherwise.
pub const DEFAULT_REGISTRATIONS_PER_SEC: u32 = 1000;
/// How long an answer may take to send once the request deadline passed.
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
    /// (see `admission`).
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
    /// Stopping closes every connection (a relay socket with 1001) and
    /// returns once every task of the rendezvous has ended
    /// ([`crate::shutdown`]).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Rendezvous {
            listener,
            state,
            config,
            published,
        } = self;
        let config = Arc::new(config);
        let tasks = Shutdown::new();
        tokio::spawn(reload_on_sighup(
            state.clone(),
            config.tokens_file.clone(),
            tasks.watcher(),
        ));
        tokio::spawn(sweep_periodically(state.hub.clone(), tasks.watcher()));
        let admission = Admission::new(config.max_connections, config.max_pending_connections);
        let accept = async {
            loop {
                let (stream, peer) = crate::accept::next_tcp(&listener).await;
                let slot = admission.admit().await;
                let (state, config, watcher) = (state.clone(), config.clone(), tasks.watcher());
                tokio::spawn(serve_connection(stream, peer, slot, state, config, watcher));
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = shutdown => {}
        }
        drop(listener);
        tasks.stop().await;
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
async fn sweep_periodically(hub: Arc<Hub>, mut watcher: Watcher) {
    let mut tick = tokio::time::interval(hub.limits().sweep_interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = watcher.stopped() => return,
        }
        let resets = hub.sweep(std::time::Instant::now());
        socket::spawn_delivery(resets, &watcher);
    }
}

async fn reload_on_sighup(state: Arc<RegistryState>, path: Option<PathBuf>, mut watcher: Watcher) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        return;
    };
    loop {
        let hung_up = tokio::select! {
            hung_up = hangup.recv() => hung_up,
            () = watcher.stopped() => return,
        };
        if hung_up.is_none() {
            return;
        }
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

/// The HTTP answer carrying `answer`.
fn respond(answer: Answer) -> Response<Body> {
    let code = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = http::json(code, answer.body);
    if let Some(secs) = answer.retry_after_secs {
        response.headers_mut().insert(RETRY_AFTER, secs.into());
    }
    response
}

/// Where an accepted relay upgrade leads.
struct RelayGrant {
    environment_id: String,
    role: SocketRole,
}

/// An answer that closes the connection.
fn finish(answer: Answer) -> (Response<Body>, Option<RelayGrant>) {
    (respond(answer), None)
}

/// Serves one connection: its request within the request deadline and as
/// a pending connection (a newer one may displace it), then, for an
/// accepted upgrade, the relay socket on an established slot.
async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    mut slot: Slot,
    state: Arc<RegistryState>,
    config: Arc<RendezvousConfig>,
    mut watcher: Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let deadline = Instant::now() + config.request_timeout;
    let request = serve_one(stream, config.request_timeout, |request| {
        serve_request(request, peer, &state, deadline)
    });
    // The head is bounded by hyper and the body by `deadline`; this only
    // bounds the answer's writing.
    let outcome = tokio::select! {
        _ = slot.displaced() => {
            tracing::debug!(%peer, "closed a pending connection to make room for a newer one");
            return;
        }
        () = watcher.stopped() => return,
        outcome = tokio::time::timeout(config.request_timeout + LATE_ANSWER_GRACE, request) => outcome,
    };
    match outcome {
        Err(_) => tracing::info!(%peer, "closed a connection whose request did not arrive in time"),
        Ok(None) => {}
        Ok(Some((upgraded, grant))) => {
            if slot.establish() {
                relay(upgraded, grant, state, &config, watcher).await;
            }
        }
    }
}

/// Answers one request. A registry call is authorized from its head
/// before its body is read, and its body must arrive by `deadline`.
async fn serve_request(
    request: Request<Incoming>,
    peer: SocketAddr,
    state: &RegistryState,
    deadline: Instant,
) -> (Response<Body>, Option<RelayGrant>) {
    // Browsers never need this service: refuse anything a page could send
    // (unless its origin is allowed).
    if !http::origin_allowed(request.headers(), &state.allowed_origins) {
        return finish(Answer::error(
            403,
            "Forbidden",
            "forbidden",
            "cross-origin requests are refused",
        ));
    }
    let path = request.uri().path();
    if path == "/readyz" {
        let body = format!(
            "{{\"status\":\"ready\",\"streams\":{},\"environments\":{}}}",
            state.hub.stream_count(),
            state.hub.environment_count()
        );
        return (http::json(StatusCode::OK, body), None);
    }
    if path == crate::metrics::PATH {
        return (metrics(&request, state), None);
    }
    if path == "/relay" || path.ends_with("/relay") {
        return upgrade(&request, state);
    }
    (registry_call(request, peer, state, deadline).await, None)
}

/// Answers a registry call.
async fn registry_call(
    request: Request<Incoming>,
    peer: SocketAddr,
    state: &RegistryState,
    deadline: Instant,
) -> Response<Body> {
    let Some((environment_id, call)) = RegistryCall::parse_path(request.uri().path()) else {
        return respond(Answer::error(
            404,
            "Not Found",
            "not_found",
            "no such endpoint",
        ));
    };
    let answer = if request.method() != Method::POST {
        Answer::error(405, "Method Not Allowed", "method_not_allowed", "use POST")
    } else {
        let authorization = http::header(request.headers(), AUTHORIZATION);
        match state.admit(&environment_id, call, authorization) {
            Ok(admitted) => match read_body(request, deadline).await {
                Ok(body) => state.answer(&admitted, &body),
                Err(refusal) => refusal,
            },
            Err(refusal) => refusal,
        }
    };
    tracing::info!(%peer, environment = %environment_id, call = call.name(), status = answer.status, "registry call");
    state
        .hub
        .metrics()
        .registry_call(call.name(), answer.status);
    respond(answer)
}

/// `GET /metrics`: the exposition, for a `metrics` token when there is a
/// token file (see [`RegistryState::admit_metrics`]).
fn metrics<B>(request: &Request<B>, state: &RegistryState) -> Response<Body> {
    if request.method() != Method::GET {
        return respond(Answer::error(
            405,
            "Method Not Allowed",
            "method_not_allowed",
            "use GET",
        ));
    }
    if let Err(refusal) = state.admit_metrics(http::header(request.headers(), AUTHORIZATION)) {
        return respond(refusal);
    }
    crate::metrics::http_response(state.hub.metrics().render(state.hub.census()))
}

/// A registry call's body: a `Content-Length` of at most
/// [`MAX_BODY_BYTES`], arrived by `deadline`.
async fn read_body(request: Request<Incoming>, deadline: Instant) -> Result<Bytes, Answer> {
    let length = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    let Some(length) = length else {
        return Err(Answer::error(
            411,
            "Length Required",
            "invalid_request",
            "the body needs a Content-Length",
        ));
    };
    let too_large = || {
        Answer::error(
            413,
            "Payload Too Large",
            "invalid_request",
            &format!("the body must be at most {MAX_BODY_BYTES} bytes"),
        )
    };
    if length > MAX_BODY_BYTES as u64 {
        return Err(too_large());
    }
    let body = Limited::new(request.into_body(), MAX_BODY_BYTES).collect();
    match tokio::time::timeout_at(deadline, body).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(_)) => Err(Answer::error(
            400,
            "Bad Request",
            "invalid_request",
            "the body did not arrive whole",
        )),
        Err(_) => {
            tracing::info!("closed a connection whose request did not arrive in time");
            Err(Answer::error(
                408,
                "Request Timeout",
                "request_timeout",
                "the request did not arrive in time",
            ))
        }
    }
}

/// Checks a relay URL and accepts the upgrade (101).
fn upgrade<B>(request: &Request<B>, state: &RegistryState) -> (Response<Body>, Option<RelayGrant>) {
    let query = request.uri().query().unwrap_or_default();
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
            return finish(Answer::error(
                status.0,
                status.1,
                "invalid_url",
                &err.to_string(),
            ));
        }
    };
    let current = state.hub.registration(&grant.environment_id);
    if current.map(|r| r.id) != Some(grant.registration_id.clone()) {
        state
            .hub
            .metrics()
            .handshake_failed(HandshakeFailure::StaleRegistration);
        return finish(Answer::error(
            401,
            "Unauthorized",
            "stale_registration",
            "the URL belongs to a previous registration",
        ));
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
            return finish(Answer::error(
                429,
                "Too Many Requests",
                "too_many_sockets",
                "this token holds as many relay sockets as it may",
            ));
        }
    }
    let Some(accept) = http::websocket_accept(request) else {
        state
            .hub
            .metrics()
            .handshake_failed(HandshakeFailure::NotWebSocket);
        return finish(Answer::error(
            426,
            "Upgrade Required",
            "upgrade_required",
            "expected a WebSocket upgrade",
        ));
    };
    let grant = RelayGrant {
        environment_id: grant.environment_id,
        role,
    };
    (http::switching_protocols(&accept), Some(grant))
}

/// Serves an upgraded relay socket.
async fn relay(
    upgraded: Upgraded,
    grant: RelayGrant,
    state: Arc<RegistryState>,
    config: &RendezvousConfig,
    watcher: Watcher,
) {
    // Executor sockets carry every stream; harness sockets one or a few.
    let buffer = match grant.role {
        SocketRole::Executor => 128 * 1024,
        SocketRole::Harness(_) => 16 * 1024,
    };
    let ws_config = WebSocketConfig::default()
        .max_message_size(Some(config.max_frame_bytes))
        .max_frame_size(Some(config.max_frame_bytes))
        .read_buffer_size(buffer)
        .write_buffer_size(buffer);
    let ws = WebSocketStream::from_raw_socket(upgraded, WsRole::Server, Some(ws_config)).await;
    socket::serve(
        ws,
        state.hub.clone(),
        grant.environment_id,
        grant.role,
        config.link,
        watcher,
    )
    .await;
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
