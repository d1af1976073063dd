//! One JSON-RPC connection, whatever its transport: decodes each inbound
//! message, routes requests in arrival order, answers malformed input with the
//! `-1` error (a message refused only for its size gets its own id when a
//! scan of it finds one), and owns the connection's bounded outbound queue and its
//! handshake state. A request that waits (a long poll) answers later from its
//! own task, so it never blocks the requests behind it.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;

use super::config::ServerConfig;
use super::fs_methods::FsContext;
use super::router;
use super::session::{ConnectionId, Registry, Session};
use crate::protocol::envelope::{self, encode_error, encode_response, Incoming};
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
    /// `failed to parse … message from exec-server …` for this transport.
    parse_error_prefix: String,
    handshake: Mutex<HandshakeState>,
}

impl Connection {
    /// A connection whose outbound messages go to `out`. `parse_error_prefix`
    /// starts the message of the `-1` error for malformed input.
    pub fn new(shared: Shared, out: mpsc::Sender<String>, parse_error_prefix: String) -> Arc<Self> {
        Arc::new(Self {
            id: shared.registry.connection_id(),
            fs: Arc::new(FsContext::new(shared.paths.clone(), shared.guard.clone())),
            deferred: Arc::new(tokio::sync::Semaphore::new(MAX_DEFERRED_REQUESTS)),
            shared,
            out,
            parse_error_prefix,
            handshake: Mutex::new(HandshakeState::default()),
        })
    }

    /// Handles one inbound message. Returns when its effect has been applied
    /// (requests that wait are answered later from their own task).
    pub async fn handle_message(self: &Arc<Self>, bytes: &[u8]) {
        match envelope::decode(bytes, self.shared.config.max_message_bytes) {
            Ok(Incoming::Request { id, method, params }) => {
                router::dispatch(self, id, method, params).await
            }
            Ok(Incoming::Notification { method, .. }) => self.notification(&method).await,
            Ok(Incoming::Response) => {}
            // Too large to decode, but its sender waits on its id.
            Err(err @ envelope::EnvelopeError::TooLarge { .. }) => {
                let id = envelope::scan_request_id(bytes).unwrap_or(RequestId::MALFORMED);
                let error =
                    RpcError::invalid_request(format!("{}: {err}", self.parse_error_prefix));
                self.send(encode_error(&id, &error)).await;
            }
            Err(err) => {
                self.malformed(format!("{}: {err}", self.parse_error_prefix))
                    .await
            }
        }
    }

    /// Answers a message that cannot be processed with the `-1` error.
    pub async fn malformed(&self, message: String) {
        let error = RpcError::invalid_request(message);
        self.send(encode_error(&RequestId::MALFORMED, &error)).await;
    }

    async fn notification(&self, method: &str) {
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

    /// Whether `initialize` succeeded on this connection.
    pub fn is_initialized(&self) -> bool {
        lock(&self.handshake).session.is_some()
    }

    /// Binds the connection to a session after a successful `initialize`.
    pub fn bind(&self, session: Arc<Session>, epoch: u64) {
        lock(&self.handshake).session = Some((session, epoch));
    }

    /// The handshake gate of the reference (its notes §3.4, checks 3–5) for a
    /// method of `family`. Returns the session and the epoch it was bound at.
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
        let session = lock(&self.handshake).session.take();
        if let Some((session, _)) = session {
            self.shared.registry.detach(&session, self.id);
        }
    }
}

/// The error of a request whose session was resumed by another connection.
pub fn resumed_elsewhere() -> RpcError {
    RpcError::invalid_request("session has been resumed by another connection")
}
