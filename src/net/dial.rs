//! Outbound TCP for the proxy: dials only addresses that passed the policy
//! (`net::resolve::Targets`), refusing a non-public address again at the
//! socket level unless it was permitted, with a connect deadline.

use std::io;
use std::time::Duration;

use tokio::net::TcpStream;

use super::address::is_non_public;
use super::resolve::Targets;

/// How long one destination may take to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to the first address of `targets` that accepts, in order.
pub async fn dial(targets: &Targets) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
    for addr in &targets.addrs {
        if !targets.local_ok && is_non_public(addr.ip()) {
            last = io::Error::new(
                io::ErrorKind::PermissionDenied,
                "network target rejected by policy",
            );
            continue;
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(err)) => last = err,
            Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    Err(last)
}

/// Connects to `host:port` through the system resolver (upstream proxies
/// and `http/request`, which no destination policy governs).
pub async fn dial_unchecked(host: &str, port: u16) -> io::Result<TcpStream> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port))).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(err)) => Err(err),
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn private_addresses_are_refused_without_permission() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let refused = dial(&Targets {
            addrs: vec![addr],
            local_ok: false,
        })
        .await
        .unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        assert!(dial(&Targets {
            addrs: vec![addr],
            local_ok: true
        })
        .await
        .is_ok());
    }
}
