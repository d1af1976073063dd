//! WebSocket transport over TCP or a Unix socket: the HTTP gate
//! ([`super::http`], served by hyper), then one `crate::link` per connection
//! whose writer drains the connection's bounded outbound queue. The reader
//! (this task) routes each message and reports what it hears to the
//! connection's `Liveness` (`crate::link::liveness`); it writes a takeover probe's ping through the
//! link, and closes the connection when the link ends (the peer's deadline,
//! a stalled write, a message over the cap: `1009`) or the server decided
//! to (`1001`, saying why).

use std::sync::Arc;

use ::http::{Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::WebSocketStream;

use super::http::{self, AccessPolicy, Decision};
use crate::link::liveness::Liveness;
use crate::link::{self, Incoming, Link};
use crate::metrics::exec::ExecMetrics;
use crate::net::http_server::{serve_one, Body, Upgraded};
use crate::server::config::OUTBOUND_QUEUE;
use crate::server::connection::{Connection, Shared};
use crate::server::router;
use crate::server::wire_trace::{self, Direction};
use crate::shutdown::Watcher;

/// The access policy of the configured server.
pub fn access_policy(shared: &Shared) -> AccessPolicy {
    AccessPolicy {
        token: shared.config.auth_token.clone(),
        allowed_origins: shared.config.allowed_origins.clone(),
    }
}

/// Serves one accepted stream: HTTP gate, then the WebSocket connection,
/// until it ends or the server stops (`watcher`).
pub async fn serve_stream<S>(
    stream: S,
    peer: String,
    shared: Shared,
    policy: Arc<AccessPolicy>,
    mut watcher: Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let cap = shared.config.transport_cap();
    let upgraded = tokio::select! {
        ws = accept_upgrade(stream, &policy, cap, Some(&shared.metrics)) => ws,
        _ = watcher.stopped() => None,
    };
    if let Some(ws) = upgraded {
        run(ws, peer, shared, watcher).await;
    }
}

/// A WebSocket accepted by [`accept_upgrade`].
pub type AcceptedSocket = WebSocketStream<Upgraded>;

/// The answer to a request that is not upgraded: the decided status, or
/// the exposition of `metrics` (404 without metrics, and for an upgrade).
pub fn answer(decision: Decision, metrics: Option<&ExecMetrics>) -> Response<Body> {
    match (decision, metrics) {
        (Decision::Respond(code), _) => http::refusal(code),
        (Decision::Metrics, Some(metrics)) => crate::metrics::http_response(metrics.render()),
        (Decision::Metrics | Decision::Upgrade { .. }, _) => http::refusal(StatusCode::NOT_FOUND),
    }
}

/// The HTTP gate of every WebSocket listener: reads the request (its head
/// bounded in size and time), answers anything but an allowed upgrade
/// (`GET /metrics` from `metrics`), and upgrades the rest to a WebSocket
/// whose messages and frames are capped at `cap` bytes. `None` when the
/// connection ended here.
pub async fn accept_upgrade<S>(
    stream: S,
    policy: &AccessPolicy,
    cap: usize,
    metrics: Option<&ExecMetrics>,
) -> Option<AcceptedSocket>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (upgraded, ()) = serve_one(stream, http::HEAD_TIMEOUT, |request| async move {
        match http::decide(&request, policy) {
            Decision::Upgrade { accept } => (http::switching_protocols(&accept), Some(())),
            decision => (answer(decision, metrics), None),
        }
    })
    .await?;
    let config = WebSocketConfig::default()
        .max_message_size(Some(cap))
        .max_frame_size(Some(cap));
    Some(WebSocketStream::from_raw_socket(upgraded, Role::Server, Some(config)).await)
}

async fn run<S>(ws: WebSocketStream<S>, peer: String, shared: Shared, mut watcher: Watcher)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (out_tx, out_rx) = mpsc::channel::<String>(OUTBOUND_QUEUE);
    let prefix =
        format!("failed to parse websocket JSON-RPC message from exec-server websocket {peer}");
    let timing = shared.config.link;
    let liveness = Liveness::new(true);
    let conn = Connection::new(shared, out_tx, liveness.clone(), prefix);
    let id = conn.id;
    let (mut reader, writer) = Link::new(ws, timing).start(out_rx, move |text: String| {
        wire_trace::trace(id, Direction::Out, text.as_bytes());
        Some(Message::Text(text.into()))
    });
    tracing::debug!(connection = conn.id, %peer, "websocket connection opened");
    let close = loop {
        let incoming = tokio::select! {
            incoming = reader.next() => incoming,
            reason = liveness.killed() => {
                tracing::info!(connection = conn.id, %peer, "closing the connection: {reason}");
                break Some(link::close_frame(CloseCode::Away, &reason));
            }
            _ = liveness.probe_requested() => {
                writer.ping_now();
                continue;
            }
            _ = watcher.stopped() => {
                break Some(link::close_frame(CloseCode::Away, "the server is shutting down"));
            }
        };
        let message = match incoming {
            Ok(Incoming::Text(text)) => Bytes::from(text),
            Ok(Incoming::Binary(bytes)) => bytes,
            Ok(Incoming::Control) => {
                liveness.heard();
                continue;
            }
            Err(end) => {
                tracing::debug!(connection = conn.id, %peer, "websocket link ended: {end}");
                break end.close_frame();
            }
        };
        liveness.heard();
        let _busy = liveness.busy();
        router::handle_message(&conn, &message).await;
    };
    tracing::debug!(connection = conn.id, "websocket connection closed");
    conn.close();
    writer.close(close);
    writer.finished().await;
    liveness.transport_closed();
}
