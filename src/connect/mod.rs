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

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use crate::relay::harness::{self, HarnessConfig};
use crate::server::config::{transport_cap, MAX_MESSAGE_BYTES};
use crate::server::transport::http::AccessPolicy;
use crate::server::transport::websocket::accept_upgrade;

/// Largest local message read: the exec-server's own transport cap, so a
/// request larger than the relay stream carries is read and answered with
/// an error for its id (by the stream, [`harness::open`]) rather than
/// closing the connection.
const MAX_LOCAL_MESSAGE: usize = transport_cap(MAX_MESSAGE_BYTES);

/// Serves local connections on `listener` until `shutdown` completes;
/// only upgrades carrying `Authorization: Bearer TOKEN` when `token` is set.
pub async fn serve(
    listener: TcpListener,
    config: Arc<HarnessConfig>,
    token: Option<String>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let policy = Arc::new(AccessPolicy {
        token,
        ..AccessPolicy::default()
    });
    let accept = async {
        loop {
            let (stream, peer) = crate::accept::next_tcp(&listener).await;
            let (config, policy) = (config.clone(), policy.clone());
            tokio::spawn(serve_local(stream, peer, config, policy));
        }
    };
    tokio::select! {
        _ = accept => {}
        _ = shutdown => {}
    }
}

async fn serve_local<S>(
    stream: S,
    peer: SocketAddr,
    config: Arc<HarnessConfig>,
    policy: Arc<AccessPolicy>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Some(mut ws) = accept_upgrade(stream, &policy, MAX_LOCAL_MESSAGE, None).await else {
        return;
    };
    let relay = match harness::open(config).await {
        Ok(relay) => relay,
        Err(err) => {
            tracing::warn!(%peer, "cannot open a relay stream: {err}");
            let reason = err.to_string();
            let close = CloseFrame {
                code: CloseCode::Error,
                reason: reason.chars().take(120).collect::<String>().into(),
            };
            let _ = ws.close(Some(close)).await;
            return;
        }
    };
    tracing::info!(%peer, stream = %relay.stream_id, dialect = ?relay.dialect, "bridging a local connection");
    let harness::RelayStream {
        outbound,
        mut inbound,
        ..
    } = relay;
    let (mut sink, mut source) = ws.split();
    let upstream = async {
        while let Some(message) = source.next().await {
            let text = match message {
                Ok(Message::Text(text)) => text.into(),
                Ok(Message::Binary(bytes)) if std::str::from_utf8(&bytes).is_ok() => bytes,
                Ok(Message::Binary(_)) => continue,
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            if outbound.send(text).await.is_err() {
                break;
            }
        }
    };
    let downstream = async {
        while let Some(message) = inbound.recv().await {
            let Ok(text) = String::from_utf8(message) else {
                continue;
            };
            if sink.feed(Message::text(text)).await.is_err() {
                return;
            }
            while let Ok(message) = inbound.try_recv() {
                let Ok(text) = String::from_utf8(message) else {
                    continue;
                };
                if sink.feed(Message::text(text)).await.is_err() {
                    return;
                }
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
    tracing::info!(%peer, "local connection closed");
}
