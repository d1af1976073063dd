//! WebSocket transport over TCP or a Unix socket: the accept loop, the HTTP
//! gate ([`super::http`]), and per connection a reader (this task) and a
//! writer task that alone owns the sink, drains the bounded outbound queue in
//! batches and pings the peer. Both report to the connection's
//! [`Liveness`]: the writer closes a peer that missed its deadline or writes
//! a takeover probe's ping, the reader closes the connection when the
//! server decided to (`1001`, saying why).

use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::http::{self, AccessPolicy, Decision};
use crate::metrics::exec::ExecMetrics;
use crate::server::config::OUTBOUND_QUEUE;
use crate::server::connection::{Connection, Shared};
use crate::server::liveness::{Keepalive, Liveness};
use crate::server::router;
use crate::server::wire_trace::{self, Direction};

/// Messages written per flush at most.
const WRITE_BATCH: usize = 64;

/// The access policy of the configured server.
pub fn access_policy(shared: &Shared) -> AccessPolicy {
    AccessPolicy {
        token: shared.config.auth_token.clone(),
        allowed_origins: shared.config.allowed_origins.clone(),
    }
}

/// Serves one accepted stream: HTTP gate, then the WebSocket connection.
pub async fn serve_stream<S>(stream: S, peer: String, shared: Shared, policy: Arc<AccessPolicy>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let cap = shared.config.transport_cap();
    if let Some(ws) = accept_upgrade(stream, &policy, cap, Some(&shared.metrics)).await {
        run(ws, peer, shared).await;
    }
}

/// Reads a request head, bounded in size and time; a malformed one is
/// answered with 400. `None` when the connection ended here.
pub async fn read_request_head<S>(stream: &mut S) -> Option<(http::RequestHead, Vec<u8>)>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tokio::time::timeout(http::HEAD_TIMEOUT, http::read_head(stream)).await {
        Ok(Ok(read)) => Some(read),
        Ok(Err(http::HeadError::Malformed)) | Ok(Err(http::HeadError::TooLarge)) => {
            let _ = stream
                .write_all(http::response(400, "Bad Request").as_bytes())
                .await;
            None
        }
        _ => None,
    }
}

/// Answers a request that is not upgraded and closes the connection: the
/// decided status, or the exposition of `metrics` (404 without metrics, and
/// for an upgrade).
pub async fn answer<S>(stream: &mut S, decision: Decision, metrics: Option<&ExecMetrics>)
where
    S: AsyncWrite + Unpin,
{
    let text = match (decision, metrics) {
        (Decision::Respond { status, reason }, _) => http::response(status, reason),
        (Decision::Metrics, Some(metrics)) => crate::metrics::http_response(&metrics.render()),
        (Decision::Metrics | Decision::Upgrade { .. }, _) => http::response(404, "Not Found"),
    };
    let _ = stream.write_all(text.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The HTTP gate of every WebSocket listener: reads the request head
/// (bounded in size and time), answers anything but an allowed upgrade
/// (`GET /metrics` from `metrics`), and upgrades the rest to a WebSocket
/// whose messages and frames are capped at `cap` bytes. `None` when the
/// connection ended here.
pub async fn accept_upgrade<S>(
    mut stream: S,
    policy: &AccessPolicy,
    cap: usize,
    metrics: Option<&ExecMetrics>,
) -> Option<WebSocketStream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (head, leftover) = read_request_head(&mut stream).await?;
    match http::decide(&head, policy) {
        Decision::Upgrade { accept } => {
            stream
                .write_all(http::switching_protocols(&accept).as_bytes())
                .await
                .ok()?;
            let config = WebSocketConfig::default()
                .max_message_size(Some(cap))
                .max_frame_size(Some(cap));
            let ws =
                WebSocketStream::from_partially_read(stream, leftover, Role::Server, Some(config))
                    .await;
            Some(ws)
        }
        decision => {
            answer(&mut stream, decision, metrics).await;
            None
        }
    }
}

async fn run<S>(ws: WebSocketStream<S>, peer: String, shared: Shared)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut inbound) = ws.split();
    let (out_tx, out_rx) = mpsc::channel::<String>(OUTBOUND_QUEUE);
    let (stop_tx, stop_rx) = oneshot::channel::<Option<CloseFrame>>();
    let prefix =
        format!("failed to parse websocket JSON-RPC message from exec-server websocket {peer}");
    let keepalive = shared.config.keepalive;
    let liveness = Liveness::new(true);
    let conn = Connection::new(shared, out_tx, liveness.clone(), prefix);
    let writer = tokio::spawn(write_loop(
        sink,
        out_rx,
        stop_rx,
        conn.id,
        liveness.clone(),
        keepalive,
    ));
    tracing::debug!(connection = conn.id, %peer, "websocket connection opened");
    let mut close = None;
    loop {
        let message = tokio::select! {
            message = inbound.next() => message,
            reason = liveness.killed() => {
                tracing::info!(connection = conn.id, %peer, "closing the connection: {reason}");
                close = Some(CloseFrame {
                    code: CloseCode::Away,
                    reason: close_reason(reason).into(),
                });
                break;
            }
        };
        let Some(message) = message else { break };
        liveness.heard();
        let _busy = liveness.busy();
        match message {
            Ok(Message::Text(text)) => router::handle_message(&conn, text.as_bytes()).await,
            Ok(Message::Binary(bytes)) => router::handle_message(&conn, &bytes).await,
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            Err(WsError::Capacity(err)) => {
                close = Some(CloseFrame {
                    code: CloseCode::Size,
                    reason: err.to_string().into(),
                });
                break;
            }
            Err(_) => break,
        }
    }
    tracing::debug!(connection = conn.id, "websocket connection closed");
    conn.close();
    let _ = stop_tx.send(close);
    let _ = writer.await;
}

/// `reason` cut to what a close frame carries (123 bytes).
fn close_reason(mut reason: String) -> String {
    const MAX: usize = 123;
    if reason.len() > MAX {
        let mut end = MAX;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// Writes the queue and the pings until `stop`; a failed write marks the
/// transport ended.
async fn write_loop<K>(
    sink: K,
    queue: mpsc::Receiver<String>,
    stop: oneshot::Receiver<Option<CloseFrame>>,
    connection: u64,
    liveness: std::sync::Arc<Liveness>,
    keepalive: Keepalive,
) where
    K: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    write_frames(sink, queue, stop, connection, &liveness, keepalive).await;
    liveness.transport_closed();
}

async fn write_frames<K>(
    mut sink: K,
    mut queue: mpsc::Receiver<String>,
    mut stop: oneshot::Receiver<Option<CloseFrame>>,
    connection: u64,
    liveness: &Liveness,
    keepalive: Keepalive,
) where
    K: futures_util::Sink<Message, Error = WsError> + Unpin,
{
    let every = keepalive.ping_interval;
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            frame = &mut stop => {
                if let Ok(Some(frame)) = frame {
                    let _ = sink.send(Message::Close(Some(frame))).await;
                }
                let _ = sink.close().await;
                return;
            }
            message = queue.recv() => {
                let Some(text) = message else { return };
                wire_trace::trace(connection, Direction::Out, text.as_bytes());
                if sink.feed(Message::Text(text.into())).await.is_err() {
                    return;
                }
                for _ in 1..WRITE_BATCH {
                    match queue.try_recv() {
                        Ok(text) => {
                            wire_trace::trace(connection, Direction::Out, text.as_bytes());
                            if sink.feed(Message::Text(text.into())).await.is_err() {
                                return;
                            }
                        }
                        Err(_) => break,
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
            _ = ping.tick() => {
                if liveness.deadline_passed(keepalive.peer_timeout) {
                    liveness.kill(format!(
                        "no answer to a ping within {} s",
                        keepalive.peer_timeout.as_secs_f64()
                    ));
                    continue;
                }
                if sink.send(Message::Ping(Default::default())).await.is_err() {
                    return;
                }
                liveness.ping_sent();
            }
            _ = liveness.probe_requested() => {
                if sink.send(Message::Ping(Default::default())).await.is_err() {
                    return;
                }
                liveness.ping_sent();
            }
        }
    }
}
