//! One rendezvous WebSocket (executor or harness) on a `crate::link`
//! (pings, the peer deadline, batched writes): a reader that decodes each
//! binary frame just enough to route it through the [`Hub`] and forwards
//! the original bytes. A slow
//! receiver holds its senders back up to [`FORWARD_TIMEOUT`], then it is
//! closed.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, Notify};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::WebSocketStream;

use super::hub::{Action, Delivery, HarnessId, Hub, Link};
use crate::link::{self, Incoming, Timing};
use crate::metrics::rendezvous::Direction;
use crate::relay::frame::FrameHeader;
use crate::shutdown::Watcher;

/// Messages queued per socket before senders wait.
const OUTBOX: usize = 256;
/// How long a frame may wait for room in its receiver's queue.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// Undecodable frames tolerated per socket.
const MAX_MALFORMED: u32 = 8;

/// The role of an accepted socket.
#[derive(Debug, Clone)]
pub enum SocketRole {
    Executor,
    /// A harness, as its URL names it.
    Harness(HarnessId),
}

/// Sends what the hub decided in a task of its own, which the rendezvous
/// waits for when it stops (each delivery is bounded by [`FORWARD_TIMEOUT`]).
pub fn spawn_delivery(deliveries: Vec<Delivery>, watcher: &Watcher) {
    if deliveries.is_empty() {
        return;
    }
    let watcher = watcher.watcher();
    tokio::spawn(async move {
        deliver(deliveries).await;
        drop(watcher);
    });
}

/// Sends what the hub decided, each with the forwarding deadline.
pub async fn deliver(deliveries: Vec<Delivery>) {
    for delivery in deliveries {
        forward(&delivery.to, delivery.bytes).await;
    }
}

async fn forward(to: &Link, bytes: Bytes) {
    match tokio::time::timeout(FORWARD_TIMEOUT, to.outbox.send(bytes)).await {
        Ok(_) => {}
        Err(_) => {
            tracing::warn!(socket = to.socket, "closing a socket that stopped reading");
            to.closer.notify_one();
        }
    }
}

/// Serves one upgraded socket until it ends or the rendezvous stops
/// (then it is closed with 1001).
pub async fn serve<S>(
    ws: WebSocketStream<S>,
    hub: Arc<Hub>,
    environment_id: String,
    role: SocketRole,
    timing: Timing,
    mut watcher: Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (outbox, queue) = mpsc::channel::<Bytes>(OUTBOX);
    let closer = Arc::new(Notify::new());
    let link = Link {
        socket: hub.socket_id(),
        outbox,
        closer: closer.clone(),
    };
    let (mut reader, writer) =
        link::Link::new(ws, timing).start(queue, |frame: Bytes| Some(Message::Binary(frame)));
    match &role {
        SocketRole::Executor => {
            let resets = hub.executor_connected(&environment_id, link.clone());
            spawn_delivery(resets, &watcher);
        }
        SocketRole::Harness(who) => {
            if !hub.harness_connected(&environment_id, link.clone(), who) {
                tracing::info!(environment = %environment_id, "closing a harness socket: its token holds as many as it may");
                writer.close(None);
                writer.finished().await;
                return;
            }
        }
    }
    tracing::info!(environment = %environment_id, socket = link.socket, role = role_name(&role), "relay socket connected");
    let mut malformed = 0u32;
    let mut close = None;
    loop {
        let incoming = tokio::select! {
            _ = closer.notified() => break,
            () = watcher.stopped() => {
                close = Some(link::close_frame(CloseCode::Away, "the rendezvous is shutting down"));
                break;
            }
            incoming = reader.next() => incoming,
        };
        let bytes = match incoming {
            Ok(Incoming::Binary(bytes)) => bytes,
            Ok(_) => continue,
            Err(end) => {
                tracing::info!(socket = link.socket, "relay socket ended: {end}");
                break;
            }
        };
        let frame = match FrameHeader::peek(&bytes) {
            Some(frame) => frame,
            None => {
                malformed += 1;
                tracing::debug!(socket = link.socket, "dropping an undecodable relay frame");
                if malformed >= MAX_MALFORMED {
                    tracing::warn!(socket = link.socket, "closing a socket that sends garbage");
                    break;
                }
                continue;
            }
        };
        let action = match &role {
            SocketRole::Executor => hub.on_executor_frame(&environment_id, link.socket, &frame),
            SocketRole::Harness(who) => hub.on_harness_frame(&environment_id, &link, who, &frame),
        };
        match action {
            Action::Forward(to) => {
                hub.metrics().relayed(direction_from(&role), bytes.len());
                forward(&to, bytes).await
            }
            Action::Reply(reset) => forward(&link, reset).await,
            Action::Drop => {}
        }
    }
    tracing::info!(environment = %environment_id, socket = link.socket, role = role_name(&role), "relay socket closed");
    match role {
        SocketRole::Executor => {
            let (resets, held) = hub.executor_gone(&environment_id, link.socket);
            deliver(resets).await;
            if let Some(epoch) = held {
                let (hub, env) = (hub.clone(), environment_id.clone());
                let mut watcher = watcher.watcher();
                tokio::spawn(async move {
                    tokio::select! {
                        () = tokio::time::sleep(hub.limits().resume_hold) => {}
                        () = watcher.stopped() => return,
                    }
                    deliver(hub.expire_executor_hold(&env, epoch)).await;
                });
            }
        }
        SocketRole::Harness(_) => {
            let (resets, holds) = hub.harness_gone(&environment_id, link.socket);
            deliver(resets).await;
            for hold in holds {
                let hub = hub.clone();
                let mut watcher = watcher.watcher();
                tokio::spawn(async move {
                    tokio::select! {
                        () = tokio::time::sleep(hub.limits().resume_hold) => {}
                        () = watcher.stopped() => return,
                    }
                    deliver(hub.expire_harness_hold(&hold)).await;
                });
            }
        }
    }
    drop(link);
    writer.close(close);
    writer.finished().await;
}

/// Which way a frame from a socket of `role` goes.
fn direction_from(role: &SocketRole) -> Direction {
    match role {
        SocketRole::Executor => Direction::ToHarness,
        SocketRole::Harness(_) => Direction::ToExecutor,
    }
}

fn role_name(role: &SocketRole) -> &'static str {
    match role {
        SocketRole::Executor => "environment",
        SocketRole::Harness(_) => "harness",
    }
}
