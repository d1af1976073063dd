//! One exchange on a hyper client connection, driven in the caller's own
//! task: the connection's future runs beside the exchange (sending the
//! request, reading the answer, taking over an upgraded socket) and is
//! dropped, closing the connection, once the exchange is done. Nothing is
//! left running in a task of its own for the upstream CONNECT and the DNS
//! stub's question to the proxy.

use std::future::Future;

/// Runs `exchange` while driving `connection` (the future hyper's
/// `handshake` returns), and returns the exchange's result. A connection
/// that ends first (closed, or done after an upgrade) leaves the exchange
/// to finish with what it was given.
pub async fn on_connection<T>(
    connection: impl Future<Output = Result<(), hyper::Error>>,
    exchange: impl Future<Output = T>,
) -> T {
    let mut exchange = std::pin::pin!(exchange);
    tokio::select! {
        answer = &mut exchange => answer,
        ended = connection => {
            if let Err(err) = ended {
                tracing::debug!("client connection ended: {err}");
            }
            exchange.await
        }
    }
}
