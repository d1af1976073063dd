//! One JSON-RPC connection, whatever its transport: its bounded outbound
//! queue, its handshake state and gate, and the answers it sends (the `-1`
//! error for malformed input among them). Inbound messages are decoded and
//! routed by [`super::router`].

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;

use super::config::ServerConfig;
use super::fs_methods::FsContext;
use super::session::{ConnectionId, Holder, Registry, Session};
use crate::link::liveness::Liveness;
use crate::metrics::exec::ExecMetrics;
use crate::process::managed::SandboxedRoots;
use crate::protocol::envelope::{self, encode_error, encode_response};
use crate::protocol::{RequestId, RpcError, NOTIFY_INITIALIZED};
use crate::runtime_paths::ExecServerRuntimePaths;
use crate::sync::lock;

/// Requests of one connection that may wait at the same time.
pub const MAX_DEFERRED_REQUESTS: usize = 1024;

#[derive(Debug, Default)]
struct HandshakeState {
    /// The session bound by a successful `initialize`, with its attach epoch.
    session: Option<(Arc<Session>, u64)>,
    /// `initialized` received.
    initialized: bool,
}

/// Server-wide things every connection shares.
#[derive(Debug, Clone)]
pub struct Shared {
    pub registry: Arc<Registry>,
    pub config: Arc<ServerConfig>,
    pub paths: Arc<ExecServerRuntimePaths>,
    /// Added to every sandbox the server materializes.
    pub guard: Arc<super::process_sandbox::SandboxGuard>,
    /// What `GET /metrics` reports.
    pub metrics: Arc<ExecMetrics>,
    /// Reused sandboxes: the server-wide part.
    pub reuse: Arc<super::sandbox_reuse::Reuse>,
    /// The server's warm fs-helpers.
    pub fs_helpers: Arc<super::fs_helper_pool::HelperPool>,
    /// Tasks the server runs for its processes (a process's network proxy
    /// and its reporter), which outlive the connection that started the
    /// process: stopped and waited for when the server stops.
    pub process_tasks: Arc<crate::shutdown::SharedShutdown>,
    /// The server's live sandboxed processes, whose subtrees may not
    /// connect back ([`super::peer_guard`]).
    pub sandboxed_roots: SandboxedRoots,
}

/// One connection.
#[derive(Debug)]
pub struct Connection {
    pub id: ConnectionId,
    pub shared: Shared,
    /// The bounded outbound queue (responses and notifications).
    pub out: mpsc::Sender<String>,
    /// Filesystem state of this connection.
    pub fs: Arc<FsContext>,
    /// Caps requests answered later (long polls): the reader waits for a
    /// permit instead of spawning without bound.
    pub deferred: Arc<tokio::sync::Semaphore>,
    /// Request ids of this connection's streamed `http/request` bodies.
    pub http_streams: ActiveStreams,
    /// What its transport hears from the peer; decides whether it is gone.
    pub liveness: Arc<Liveness>,
    /// `failed to parse … message from exec-server …` for this transport.
    parse_error_prefix: String,
    handshake: Mutex<HandshakeState>,
    /// The client asked for `process/networkDenied` in `initialize`.
    wants_denials: AtomicBool,
}

impl Connection {
    /// A connection whose outbound messages go to `out` and whose transport
    /// reports to `liveness`. `parse_error_prefix` starts the message of the
    /// `-1` error for malformed input.
    pub fn new(
        shared: Shared,
        out: mpsc::Sender<String>,
        liveness: Arc<Liveness>,
        parse_error_prefix: String,
    ) -> Arc<Self> {
        Arc::new(Self {
            liveness,
            id: shared.registry.connection_id(),
            fs: Arc::new(FsContext::new(
                shared.paths.clone(),
                shared.guard.clone(),
                shared.fs_helpers.clone(),
            )),
            deferred: Arc::new(tokio::sync::Semaphore::new(MAX_DEFERRED_REQUESTS)),
            http_streams: Default::default(),
            shared,
            out,
            parse_error_prefix,
            handshake: Mutex::new(HandshakeState::default()),
            wants_denials: AtomicBool::new(false),
        })
    }

    /// What the `-1` error for malformed input starts with on this transport.
    pub fn parse_error_prefix(&self) -> &str {
        &self.parse_error_prefix
    }

    /// Answers a message that cannot be processed with the `-1` error.
    pub async fn malformed(&self, message: String) {
        let error = RpcError::invalid_request(message);
        self.send(encode_error(&RequestId::MALFORMED, &error)).await;
    }

    /// Handles an inbound notification (only `initialized` is expected).
    pub async fn notification(&self, method: &str) {
        if method == NOTIFY_INITIALIZED {
            let accepted = {
                let mut handshake = lock(&self.handshake);
                handshake.initialized |= handshake.session.is_some();
                handshake.session.is_some()
            };
            if accepted {
                return;
            }
            self.malformed("received `initialized` notification before `initialize`".into())
                .await;
            return;
        }
        self.malformed(format!(
            "unexpected notification `{method}`; only `initialized` may be sent"
        ))
        .await;
    }

    /// Queues a message, waiting for room. A closed connection drops it.
    pub async fn send(&self, text: String) {
        let _ = self.out.send(text).await;
    }

    /// Sends the answer to request `id`.
    pub async fn reply(&self, id: &RequestId, result: Result<Value, RpcError>) {
        let text = match result {
            Ok(value) => encode_response(id, &value),
            Err(error) => encode_error(id, &error),
        };
        self.send(text).await;
    }

    /// Sends a successful answer whose result is already JSON text.
    pub async fn reply_raw(&self, id: &RequestId, result: String) {
        self.send(envelope::encode_response_raw(id, &result)).await;
    }

    /// Records whether the client asked for `process/networkDenied` (its
    /// `initialize` capabilities), before it becomes a session holder.
    pub fn set_wants_denials(&self, wanted: bool) {
        self.wants_denials.store(wanted, Ordering::Relaxed);
    }

    /// This connection as a session holder.
    pub fn holder(&self) -> Holder {
        Holder {
            id: self.id,
            liveness: self.liveness.clone(),
            wants_denials: self.wants_denials.load(Ordering::Relaxed),
        }
    }

    /// Whether `initialize` succeeded on this connection.
    pub fn is_initialized(&self) -> bool {
        lock(&self.handshake).session.is_some()
    }

    /// Binds the connection to a session after a successful `initialize`.
    pub fn bind(&self, session: Arc<Session>, epoch: u64) {
        lock(&self.handshake).session = Some((session, epoch));
    }

    /// The reference's handshake gate (docs/protocol.md) for a method of
    /// `family`. Returns the session and the epoch it was bound at.
    pub fn gate(&self, family: &str) -> Result<(Arc<Session>, u64), RpcError> {
        let handshake = lock(&self.handshake);
        let Some((session, epoch)) = &handshake.session else {
            return Err(RpcError::invalid_request(format!(
                "client must call initialize before using {family} methods"
            )));
        };
        if session.epoch() != *epoch {
            return Err(resumed_elsewhere());
        }
        if !handshake.initialized {
            return Err(RpcError::invalid_request(format!(
                "client must send initialized before using {family} methods"
            )));
        }
        Ok((session.clone(), *epoch))
    }

    /// The transport ended: detach the session (it stays resumable).
    pub fn close(&self) {
        self.liveness.transport_closed();
        let session = lock(&self.handshake).session.take();
        if let Some((session, _)) = session {
            self.shared.registry.detach(&session, self.id);
        }
    }
}

/// The request ids of a connection's active `http/request` body streams.
#[derive(Debug, Default)]
pub struct ActiveStreams(Mutex<HashSet<String>>);

impl ActiveStreams {
    /// Marks `request_id` active; false if it already is.
    pub fn reserve(&self, request_id: &str) -> bool {
        lock(&self.0).insert(request_id.to_owned())
    }

    /// Marks `request_id` ended.
    pub fn release(&self, request_id: &str) {
        lock(&self.0).remove(request_id);
    }
}

/// The error of a request whose session was resumed by another connection.
pub fn resumed_elsewhere() -> RpcError {
    RpcError::invalid_request("session has been resumed by another connection")
}
