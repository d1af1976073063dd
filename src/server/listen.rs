//! The `--listen` URL: `ws://IP:PORT` (default `ws://127.0.0.1:0`), `stdio`
//! or `stdio://`, or `unix:///path/to.sock`.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// The default listen URL: loopback, ephemeral port.
pub const DEFAULT_LISTEN_URL: &str = "ws://127.0.0.1:0";

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenUrl {
    /// WebSocket over TCP.
    WebSocket(SocketAddr),
    /// Newline-delimited JSON on stdin/stdout, one connection.
    Stdio,
    /// WebSocket over a Unix socket.
    Unix(PathBuf),
}

/// Why a `--listen` value was refused (messages as the reference words
/// them, with the Unix socket it lacks).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenUrlParseError {
    #[error("unsupported --listen URL `{0}`; expected `ws://IP:PORT`, `unix:///PATH` or `stdio`")]
    UnsupportedListenUrl(String),
    #[error("invalid websocket --listen URL `{0}`; expected `ws://IP:PORT`")]
    InvalidWebSocketListenUrl(String),
    #[error("invalid unix socket --listen URL `{0}`; expected `unix:///absolute/path`")]
    InvalidUnixListenUrl(String),
}

impl FromStr for ListenUrl {
    type Err = ListenUrlParseError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        if url == "stdio" || url == "stdio://" {
            return Ok(ListenUrl::Stdio);
        }
        if let Some(addr) = url.strip_prefix("ws://") {
            return addr
                .parse::<SocketAddr>()
                .map(ListenUrl::WebSocket)
                .map_err(|_| ListenUrlParseError::InvalidWebSocketListenUrl(url.to_owned()));
        }
        if let Some(path) = url.strip_prefix("unix://") {
            if path.starts_with('/') && path.len() > 1 {
                return Ok(ListenUrl::Unix(PathBuf::from(path)));
            }
            return Err(ListenUrlParseError::InvalidUnixListenUrl(url.to_owned()));
        }
        Err(ListenUrlParseError::UnsupportedListenUrl(url.to_owned()))
    }
}

impl fmt::Display for ListenUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenUrl::WebSocket(addr) => write!(f, "ws://{addr}"),
            ListenUrl::Stdio => f.write_str("stdio"),
            ListenUrl::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

impl Default for ListenUrl {
    fn default() -> Self {
        ListenUrl::WebSocket(SocketAddr::from(([127, 0, 0, 1], 0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_urls_parse_like_the_reference() {
        assert_eq!(DEFAULT_LISTEN_URL.parse(), Ok(ListenUrl::default()));
        assert_eq!("stdio".parse(), Ok(ListenUrl::Stdio));
        assert_eq!("stdio://".parse(), Ok(ListenUrl::Stdio));
        assert_eq!(
            "ws://127.0.0.1:1234".parse(),
            Ok(ListenUrl::WebSocket(SocketAddr::from((
                [127, 0, 0, 1],
                1234
            ))))
        );
        assert_eq!(
            "unix:///tmp/x.sock".parse(),
            Ok(ListenUrl::Unix(PathBuf::from("/tmp/x.sock")))
        );
        assert_eq!(
            "ws://localhost:1234"
                .parse::<ListenUrl>()
                .unwrap_err()
                .to_string(),
            "invalid websocket --listen URL `ws://localhost:1234`; expected `ws://IP:PORT`"
        );
        assert_eq!(
            "ws://127.0.0.1:1234/"
                .parse::<ListenUrl>()
                .unwrap_err()
                .to_string(),
            "invalid websocket --listen URL `ws://127.0.0.1:1234/`; expected `ws://IP:PORT`"
        );
        assert_eq!(
            "http://127.0.0.1:1234"
                .parse::<ListenUrl>()
                .unwrap_err()
                .to_string(),
            "unsupported --listen URL `http://127.0.0.1:1234`; expected `ws://IP:PORT`, `unix:///PATH` or `stdio`"
        );
    }
}
