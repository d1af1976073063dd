//! Accepting connections for every listening mode (exec-server, rendezvous,
//! connect, proxy): a failed accept (out of descriptors, a connection reset
//! before it was taken) is logged and retried after a pause; it never ends
//! the listener or spins.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// The pause after a failed accept, so a full descriptor table does not
/// turn the accept loop into a busy loop.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The next TCP connection (with Nagle off: every mode sends small
/// request/response messages) and its peer address.
pub async fn next_tcp(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return (stream, peer);
            }
            Err(err) => retry_later(err).await,
        }
    }
}

/// The next Unix-socket connection.
pub async fn next_unix(listener: &UnixListener) -> UnixStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return stream,
            Err(err) => retry_later(err).await,
        }
    }
}

async fn retry_later(err: std::io::Error) {
    tracing::warn!("accept failed: {err}");
    tokio::time::sleep(RETRY_PAUSE).await;
}
