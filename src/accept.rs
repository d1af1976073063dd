//! Accepting connections for every listening mode (exec-server, rendezvous,
//! connect, proxy): a failed accept (out of descriptors, a connection reset
//! before it was taken) is logged and retried after a pause; it never ends
//! the listener or spins. [`ConnectionLimit`] bounds how many connections a
//! listener serves at once: the exec-server and `connect` refuse one more
//! with `503` ([`refuse_busy`]), the proxy waits for a slot (the
//! rendezvous's admission, which lets a newcomer displace a connection
//! still sending its request, is its own).

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Default connections an exec-server or `connect` serves at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// The answer to a connection beyond the limit.
const BUSY_RESPONSE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// At most so many connections served at once.
#[derive(Debug, Clone)]
pub struct ConnectionLimit {
    slots: Arc<Semaphore>,
    #[cfg(test)]
    max: usize,
}

/// One connection's slot; given back when dropped.
#[derive(Debug)]
pub struct ConnectionSlot(#[allow(dead_code)] OwnedSemaphorePermit);

impl ConnectionLimit {
    /// `max` slots (at least one).
    pub fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            slots: Arc::new(Semaphore::new(max)),
            #[cfg(test)]
            max,
        }
    }

    /// A slot if one is free now.
    pub fn try_admit(&self) -> Option<ConnectionSlot> {
        self.slots
            .clone()
            .try_acquire_owned()
            .ok()
            .map(ConnectionSlot)
    }

    /// A slot, waiting until one is free.
    pub async fn admit(&self) -> ConnectionSlot {
        loop {
            // The semaphore is never closed; the loop only satisfies the type.
            if let Ok(permit) = self.slots.clone().acquire_owned().await {
                return ConnectionSlot(permit);
            }
        }
    }

    /// Slots held now.
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        self.max - self.slots.available_permits().min(self.max)
    }
}

/// Answers `503 Service Unavailable` to a connection beyond the limit and
/// drops it. The answer is written without waiting (a fresh socket's buffer
/// takes it), so refusing costs the accept loop nothing.
pub fn refuse_busy(stream: impl TryWrite, peer: &str) {
    tracing::warn!(%peer, "refused a connection: --max-connections reached");
    let _ = stream.try_write_all(BUSY_RESPONSE);
}

/// A stream that can be written without waiting.
pub trait TryWrite {
    /// Writes what fits now; the rest is dropped.
    fn try_write_all(&self, bytes: &[u8]) -> std::io::Result<usize>;
}

impl TryWrite for TcpStream {
    fn try_write_all(&self, bytes: &[u8]) -> std::io::Result<usize> {
        self.try_write(bytes)
    }
}

impl TryWrite for UnixStream {
    fn try_write_all(&self, bytes: &[u8]) -> std::io::Result<usize> {
        self.try_write(bytes)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_limit_admits_again_once_a_slot_is_given_back() {
        let limit = ConnectionLimit::new(2);
        let first = limit.try_admit();
        let second = limit.try_admit();
        assert!(first.is_some() && second.is_some());
        assert!(limit.try_admit().is_none());
        assert_eq!(limit.in_use(), 2);
        drop(first);
        assert!(limit.try_admit().is_some());
        assert_eq!(limit.in_use(), 1);
    }
}
