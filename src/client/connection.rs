//! One live WebSocket connection to an exec-server: dialing (TCP or Unix
//! socket, optional bearer token: without one, a loopback `ws://` address
//! gets the token a codexbox listener published for it), a [`Link`] whose
//! writer batches the queued calls and pings the server, and a reader task
//! that routes responses to their waiting callers by id and notifications
//! to a bounded channel. While a full notification channel holds the reader
//! back, the link's pings still tell the server this client is there.
//!
//! Reconnecting and the session handshake live in [`super`]; this module
//! knows nothing about sessions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;

use super::{ClientError, Notification, RpcError};
use crate::link::{self, Link};
use crate::relay::harness::{HarnessConfig, RelayStream};
use crate::sync::lock;
use crate::web_url::WebUrl;

/// Messages queued for the writer task before senders wait.
const OUTBOUND_QUEUE: usize = 1024;
/// Largest frame the client accepts (the server caps its own messages lower).
const MAX_INBOUND_MESSAGE_BYTES: usize = 256 << 20;

type Reply = Result<Value, ClientError>;

/// Where a connection goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `ws://HOST:PORT[/path]` over TCP.
    Tcp { url: String, authority: String },
    /// `unix:///path/to.sock`: WebSocket over a Unix stream socket.
    Unix { path: String },
    /// A virtual stream through a registry and rendezvous (one per connection).
    Relay(RelayEndpoint),
}

/// The harness configuration of a relayed endpoint.
#[derive(Debug, Clone)]
pub(crate) struct RelayEndpoint(pub(crate) Arc<HarnessConfig>);

impl PartialEq for RelayEndpoint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for RelayEndpoint {}

impl Endpoint {
    pub(crate) fn parse(url: &str) -> Result<Self, ClientError> {
        let invalid = |reason: &str| ClientError::InvalidUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        if url.starts_with("ws://") {
            let parsed = WebUrl::parse(url).map_err(|err| invalid(err.reason))?;
            Ok(Self::Tcp {
                url: url.to_owned(),
                authority: parsed.authority(),
            })
        } else if let Some(path) = url.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(invalid("the socket path must be absolute"));
            }
            Ok(Self::Unix {
                path: path.to_owned(),
            })
        } else {
            Err(invalid("expected ws://HOST:PORT or unix:///PATH"))
        }
    }
}

/// The token a codexbox listener of ours published for the loopback
/// address `url` dials ([`crate::listener_token`]), if any.
async fn published_token(url: &str) -> Option<String> {
    let addr = crate::listener_token::loopback_address(url)?;
    tokio::task::spawn_blocking(move || crate::listener_token::find(addr))
        .await
        .ok()
        .flatten()
}

/// Routing state shared by the caller side and the reader task.
struct Shared {
    pending: Mutex<HashMap<i64, oneshot::Sender<Reply>>>,
    closed: AtomicBool,
    /// Set once the reader has seen the end of the transport.
    ended: watch::Sender<bool>,
    /// Set once the transport has let go of everything underneath (the
    /// WebSocket closed; a relay stream's reset sent and its socket closed).
    released: watch::Sender<bool>,
    /// Whether the caller took the notification receiver. Until then a full
    /// channel drops notifications instead of stalling responses.
    receiver_taken: AtomicBool,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            pending: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            ended: watch::channel(false).0,
            released: watch::channel(false).0,
            receiver_taken: AtomicBool::new(false),
        })
    }

    /// The transport ended.
    fn end(&self) {
        self.close();
        self.ended.send_replace(true);
    }

    /// Fails every waiting call; later calls fail at once.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let drained: Vec<_> = lock(&self.pending).drain().collect();
        for (_, tx) in drained {
            let _ = tx.send(Err(ClientError::Closed));
        }
    }
}

/// The caller side of a connection; cheap to share behind an `Arc`.
pub(crate) struct Connection {
    out_tx: mpsc::Sender<Message>,
    shared: Arc<Shared>,
    next_id: AtomicI64,
}

/// A server message as it arrives; absent and `null` members are `None`.
#[derive(Deserialize)]
struct Incoming {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<Value>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

/// The `error` member of a response.
#[derive(Deserialize)]
struct ErrorBody {
    code: i64,
    #[serde(default)]
    message: String,
}

impl Connection {
    /// Dials `endpoint`, performs the WebSocket upgrade and starts the reader
    /// and writer tasks. Notifications go to `notify_tx`.
    pub(crate) async fn open(
        endpoint: &Endpoint,
        auth_token: Option<&str>,
        notify_tx: mpsc::Sender<Notification>,
    ) -> Result<Self, ClientError> {
        match endpoint {
            Endpoint::Tcp { url, authority } => {
                let stream =
                    TcpStream::connect(authority)
                        .await
                        .map_err(|source| ClientError::Connect {
                            url: url.clone(),
                            source,
                        })?;
                // Small request/response frames must not wait for Nagle.
                let _ = stream.set_nodelay(true);
                let published = match auth_token {
                    Some(_) => None,
                    None => published_token(url).await,
                };
                let token = auth_token.or(published.as_deref());
                Self::upgrade(stream, url, url, token, notify_tx).await
            }
            Endpoint::Relay(relay) => {
                let stream = crate::relay::harness::open(relay.0.clone())
                    .await
                    .map_err(|source| ClientError::Relay(Box::new(source)))?;
                Ok(Self::over_relay(stream, notify_tx))
            }
            Endpoint::Unix { path } => {
                let stream =
                    UnixStream::connect(path)
                        .await
                        .map_err(|source| ClientError::Connect {
                            url: format!("unix://{path}"),
                            source,
                        })?;
                let display = format!("unix://{path}");
                Self::upgrade(stream, "ws://localhost/", &display, auth_token, notify_tx).await
            }
        }
    }

    async fn upgrade<S>(
        stream: S,
        request_url: &str,
        display_url: &str,
        auth_token: Option<&str>,
        notify_tx: mpsc::Sender<Notification>,
    ) -> Result<Self, ClientError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let handshake = |source| ClientError::Handshake {
            url: display_url.to_owned(),
            source: Box::new(source),
        };
        let mut request = request_url.into_client_request().map_err(handshake)?;
        if let Some(token) = auth_token {
            let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                ClientError::InvalidUrl {
                    url: display_url.to_owned(),
                    reason: "the auth token is not a valid header value".to_owned(),
                }
            })?;
            request.headers_mut().insert("authorization", value);
        }
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_INBOUND_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_INBOUND_MESSAGE_BYTES));
        let (ws, _response) =
            tokio_tungstenite::client_async_with_config(request, stream, Some(config))
                .await
                .map_err(handshake)?;
        let shared = Shared::new();
        let (out_tx, out_rx) = mpsc::channel::<Message>(OUTBOUND_QUEUE);
        let (mut reader, writer) = Link::new(ws, link::Timing::default()).start(out_rx, Some);
        let reader_shared = Arc::clone(&shared);
        tokio::spawn(async move {
            loop {
                let bytes = match reader.next().await {
                    Ok(link::Incoming::Text(text)) => text.into(),
                    Ok(link::Incoming::Binary(bytes)) => bytes,
                    Ok(link::Incoming::Control) => continue,
                    Err(end) => {
                        tracing::debug!("connection to the exec-server ended: {end}");
                        break;
                    }
                };
                dispatch(&reader_shared, &notify_tx, &bytes).await;
            }
            reader_shared.end();
            writer.close(None);
            writer.finished().await;
            reader_shared.released.send_replace(true);
        });

        Ok(Self {
            out_tx,
            shared,
            next_id: AtomicI64::new(1),
        })
    }

    /// A connection over a relay stream (whole JSON messages both ways).
    fn over_relay(stream: RelayStream, notify_tx: mpsc::Sender<Notification>) -> Self {
        let shared = Shared::new();
        let (out_tx, mut out_rx) = mpsc::channel::<Message>(OUTBOUND_QUEUE);
        let RelayStream {
            outbound,
            mut inbound,
            released,
            ..
        } = stream;
        tokio::spawn(async move {
            while let Some(message) = out_rx.recv().await {
                let text = match message {
                    Message::Text(text) => text,
                    // Dropping `outbound` closes the stream.
                    Message::Close(_) => break,
                    _ => continue,
                };
                if outbound.send(text.into()).await.is_err() {
                    break;
                }
            }
        });
        let reader_shared = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Some(bytes) = inbound.recv().await {
                dispatch(&reader_shared, &notify_tx, &bytes).await;
            }
            reader_shared.end();
        });
        let released_shared = Arc::clone(&shared);
        tokio::spawn(async move {
            // Resolves when the stream's socket task has finished.
            let _ = released.await;
            released_shared.released.send_replace(true);
        });
        Self {
            out_tx,
            shared,
            next_id: AtomicI64::new(1),
        }
    }

    /// Records that the caller now drains notifications.
    pub(crate) fn mark_receiver_taken(&self) {
        self.shared.receiver_taken.store(true, Ordering::Release);
    }

    /// Whether the transport has ended.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Sends a request and waits for the response with the same id. Many
    /// calls may be in flight at once.
    pub(crate) async fn call(
        &self,
        method: &str,
        params: &Value,
        timeout: Option<std::time::Duration>,
    ) -> Reply {
        if self.is_closed() {
            return Err(ClientError::Closed);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let text = encode_request(id, method, params)?;
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id, tx);
        // The reader may have closed between the check and the insert.
        if self.is_closed() {
            self.shared.close();
        }
        if self.out_tx.send(Message::text(text)).await.is_err() {
            self.shared.close();
        }
        let Some(limit) = timeout else {
            return rx.await.unwrap_or(Err(ClientError::Closed));
        };
        match tokio::time::timeout(limit, rx).await {
            Ok(reply) => reply.unwrap_or(Err(ClientError::Closed)),
            Err(_) => {
                // Forget the call: a late response is then ignored.
                lock(&self.shared.pending).remove(&id);
                Err(ClientError::Timeout {
                    method: method.to_owned(),
                    after: limit,
                })
            }
        }
    }

    /// Sends a notification (no response expected).
    pub(crate) async fn notify(&self, method: &str, params: &Value) -> Result<(), ClientError> {
        let text = serde_json::to_string(&NotificationOut { method, params })
            .map_err(ClientError::Encode)?;
        self.send_text(text).await
    }

    /// Sends one text frame as is.
    pub(crate) async fn send_text(&self, text: String) -> Result<(), ClientError> {
        self.out_tx
            .send(Message::text(text))
            .await
            .map_err(|_| ClientError::Closed)
    }

    /// Closes the WebSocket (the writer sends a close frame once the queue
    /// drains).
    pub(crate) fn shutdown(self) {
        drop(self.out_tx);
    }

    /// Closes the WebSocket and waits (at most `limit`) until the server has
    /// closed its side, so the server has detached the session.
    pub(crate) async fn shutdown_and_wait(self, limit: std::time::Duration) {
        let mut ended = self.shared.ended.subscribe();
        drop(self.out_tx);
        let _ = tokio::time::timeout(limit, ended.wait_for(|ended| *ended)).await;
    }

    /// Closes the connection cleanly — a WebSocket close handshake, or a
    /// relay stream's reset, sent before its socket is closed — and waits
    /// (at most `limit`) until that is done, so the server and a
    /// rendezvous let go of it at once instead of waiting for a timeout.
    pub(crate) async fn close_and_wait(&self, limit: std::time::Duration) {
        let mut released = self.shared.released.subscribe();
        let _ = self.out_tx.send(Message::Close(None)).await;
        let _ = tokio::time::timeout(limit, released.wait_for(|done| *done)).await;
    }
}

#[derive(serde::Serialize)]
struct RequestOut<'a> {
    id: i64,
    method: &'a str,
    params: &'a Value,
}

#[derive(serde::Serialize)]
struct NotificationOut<'a> {
    method: &'a str,
    params: &'a Value,
}

fn encode_request(id: i64, method: &str, params: &Value) -> Result<String, ClientError> {
    serde_json::to_string(&RequestOut { id, method, params }).map_err(ClientError::Encode)
}

/// Parses one server message and routes it.
async fn dispatch(shared: &Shared, notify_tx: &mpsc::Sender<Notification>, bytes: &[u8]) {
    match serde_json::from_slice::<Incoming>(bytes) {
        Ok(incoming) => route(shared, notify_tx, incoming).await,
        Err(err) => tracing::warn!("ignoring unparsable server message: {err}"),
    }
}

async fn route(shared: &Shared, notify_tx: &mpsc::Sender<Notification>, incoming: Incoming) {
    match (incoming.method, incoming.id) {
        (Some(method), None) => {
            let notification = Notification {
                method,
                params: incoming.params.unwrap_or(Value::Null),
            };
            if shared.receiver_taken.load(Ordering::Acquire) {
                // A full channel holds the reader back, and with it the
                // socket: the server then stops reading process output.
                let _ = notify_tx.send(notification).await;
            } else {
                // Nobody listens: never let unread notifications block
                // responses.
                let _ = notify_tx.try_send(notification);
            }
        }
        (None, Some(id)) => {
            let Some(id) = id.as_i64() else {
                tracing::warn!("ignoring response with foreign id {id}");
                return;
            };
            let waiter = lock(&shared.pending).remove(&id);
            let reply = match incoming.error {
                Some(error) => Err(ClientError::Rpc(RpcError::new(error.code, error.message))),
                None => Ok(incoming.result.unwrap_or(Value::Null)),
            };
            match waiter {
                Some(tx) => {
                    let _ = tx.send(reply);
                }
                None => tracing::warn!("ignoring unmatched response {id}: {reply:?}"),
            }
        }
        _ => tracing::warn!("ignoring server message that is neither response nor notification"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_parses_tcp_and_unix_urls() {
        assert_eq!(
            Endpoint::parse("ws://127.0.0.1:9/").ok(),
            Some(Endpoint::Tcp {
                url: "ws://127.0.0.1:9/".into(),
                authority: "127.0.0.1:9".into()
            })
        );
        assert_eq!(
            Endpoint::parse("unix:///run/x.sock").ok(),
            Some(Endpoint::Unix {
                path: "/run/x.sock".into()
            })
        );
        assert!(Endpoint::parse("http://x").is_err());
        assert!(Endpoint::parse("unix://rel.sock").is_err());
    }

    #[test]
    fn requests_are_encoded_compactly_with_integer_ids() {
        let text = encode_request(3, "process/read", &serde_json::json!({"processId": "p"}))
            .unwrap_or_default();
        assert_eq!(
            text,
            r#"{"id":3,"method":"process/read","params":{"processId":"p"}}"#
        );
    }
}
