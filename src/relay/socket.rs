//! Dialling a relay WebSocket: how either end of remote mode (the executor
//! under the server, the harness of the client) opens its socket to the
//! rendezvous, with the relay's message size limit and the process's proxy
//! settings.

use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::WebSocketStream;

use super::MAX_WEBSOCKET_MESSAGE_BYTES;
use crate::net::connector::{connect, BoxedIo, ConnectError, Through};
use crate::net::upstream::Upstream;
use crate::web_url::{UrlError, WebUrl};

/// Why connecting to the rendezvous failed.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("the rendezvous refused the upgrade with HTTP {0}")]
    Rejected(u16),
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: ConnectError,
    },
    #[error("WebSocket handshake with {url} failed: {source}")]
    Handshake {
        url: String,
        #[source]
        source: Box<WsError>,
    },
}

/// A relay WebSocket, over TLS for `wss://`.
pub type RelaySocket = WebSocketStream<BoxedIo>;

/// Opens a relay WebSocket (`ws://` or `wss://`) with TCP_NODELAY and the
/// relay's message size limit, through a CONNECT tunnel when the
/// process's proxy settings name a proxy for it.
pub async fn dial(url: &str) -> Result<RelaySocket, DialError> {
    let target = WebUrl::parse(url)?;
    let stream = connect(&target, &Upstream::from_process_env(), Through::Tunnel)
        .await
        .map_err(|source| DialError::Connect {
            url: target.to_string(),
            source,
        })?
        .io;
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_WEBSOCKET_MESSAGE_BYTES))
        .max_frame_size(Some(MAX_WEBSOCKET_MESSAGE_BYTES));
    match tokio_tungstenite::client_async_with_config(url, stream, Some(config)).await {
        Ok((ws, _)) => Ok(ws),
        Err(WsError::Http(response)) => Err(DialError::Rejected(response.status().as_u16())),
        Err(source) => Err(DialError::Handshake {
            url: target.to_string(),
            source: Box::new(source),
        }),
    }
}
