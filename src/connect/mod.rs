//! `codexbox connect`: a local bridge to a remote executor, like
//! `kubectl port-forward`. It listens on a local WebSocket (behind the
//! exec-server's HTTP gate: `/readyz`, browser origins refused, and the
//! bearer token the command line published, see [`crate::listener_token`]),
//! prints its `ws://IP:PORT` line, and carries each local connection over
//! its own virtual stream ([`crate::relay::harness`]), so any client of the
//! local protocol holding the token can use a relayed executor with the
//! caller's registry credentials. With the reliable dialect a lost
//! rendezvous connection is repaired underneath; the local client sees
//! nothing.

pub mod cli;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Bytes, Message};

use crate::accept::ConnectionLimit;
use crate::link::{self, Incoming, Link, Timing};
use crate::relay::harness::{self, HarnessConfig};
use crate::server::config::{transport_cap, MAX_MESSAGE_BYTES};
use crate::server::transport::http::AccessPolicy;
use crate::server::transport::websocket::accept_upgrade;
use crate::shutdown::{Shutdown, Watcher};

/// Largest local message read: the exec-server's own transport cap, so a
/// request larger than the relay stream carries is read and answered with
/// an error for its id (by the stream, [`harness::open`]) rather than
/// closing the connection.
const MAX_LOCAL_MESSAGE: usize = transport_cap(MAX_MESSAGE_BYTES);

/// How the local listener serves.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Only upgrades carrying `Authorization: Bearer TOKEN` when set.
    pub token: Option<String>,
    /// Pings, the peer deadline and the write timeout of local connections.
    pub link: Timing,
    /// Local connections served at once; one more is answered `503`.
    pub max_connections: usize,
}

/// Serves local connections on `listener` until `shutdown` completes, then
/// closes every local connection (and its relay stream) and waits for
/// them to end.
pub async fn serve(
    listener: TcpListener,
    config: Arc<HarnessConfig>,
    local: LocalConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let policy = Arc::new(AccessPolicy {
        token: local.token.clone(),
        ..AccessPolicy::default()
    });
    let limit = ConnectionLimit::new(local.max_connections);
    let tasks = Shutdown::new();
    let accept = async {
        loop {
            let (stream, peer) = crate::accept::next_tcp(&listener).await;
            let Some(slot) = limit.try_admit() else {
                crate::accept::refuse_busy(stream, &peer.to_string());
                continue;
            };
            let (config, policy, watcher) = (config.clone(), policy.clone(), tasks.watcher());
            let timing = local.link;
            tokio::spawn(async move {
                let _slot = slot;
                serve_local(stream, peer, config, policy, timing, watcher).await;
            });
        }
    };
    tokio::select! {
        _ = accept => {}
        _ = shutdown => {}
    }
    drop(listener);
    tasks.stop().await;
}

async fn serve_local<S>(
    stream: S,
    peer: SocketAddr,
    config: Arc<HarnessConfig>,
    policy: Arc<AccessPolicy>,
    timing: Timing,
    mut watcher: Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let upgraded = tokio::select! {
        ws = accept_upgrade(stream, &policy, MAX_LOCAL_MESSAGE, None) => ws,
        _ = watcher.stopped() => None,
    };
    let Some(mut ws) = upgraded else {
        return;
    };
    let opened = tokio::select! {
        opened = harness::open(config) => opened,
        _ = watcher.stopped() => return,
    };
    let relay = match opened {
        Ok(relay) => relay,
        Err(err) => {
            tracing::warn!(%peer, "cannot open a relay stream: {err}");
            let close = link::close_frame(CloseCode::Error, &err.to_string());
            let _ = tokio::time::timeout(timing.close_timeout, ws.close(Some(close))).await;
            return;
        }
    };
    tracing::info!(%peer, stream = %relay.stream_id, dialect = ?relay.dialect, "bridging a local connection");
    let harness::RelayStream {
        outbound,
        inbound,
        released,
        ..
    } = relay;
    // The executor's messages go out as they come; the stream ending ends
    // the queue, and the link closes the local connection.
    let (mut reader, writer) = Link::new(ws, timing).start(inbound, |message: Vec<u8>| {
        String::from_utf8(message).ok().map(Message::text)
    });
    let close = loop {
        let incoming = tokio::select! {
            incoming = reader.next() => incoming,
            _ = watcher.stopped() => {
                break Some(link::close_frame(CloseCode::Away, "codexbox connect is shutting down"));
            }
        };
        let text = match incoming {
            Ok(Incoming::Text(text)) => Bytes::from(text),
            Ok(Incoming::Binary(bytes)) if std::str::from_utf8(&bytes).is_ok() => bytes,
            Ok(_) => continue,
            Err(end) => {
                tracing::debug!(%peer, "local link ended: {end}");
                break end.close_frame();
            }
        };
        if outbound.send(text).await.is_err() {
            break None;
        }
    };
    // Dropping `outbound` closes the relay stream.
    drop(outbound);
    writer.close(close);
    writer.finished().await;
    let _ = tokio::time::timeout(harness::HANDSHAKE_TIMEOUT, released).await;
    tracing::info!(%peer, "local connection closed");
}
