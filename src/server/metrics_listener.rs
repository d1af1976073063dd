//! `--metrics-listen IP:PORT`: a side port that serves only `GET /metrics`
//! (and `GET /readyz`), for executors without a listener of their own
//! (`--remote`, stdio) or to keep scrapes off the WebSocket port. It is
//! held to the rules of the main listener: a non-loopback address needs the
//! auth token (or `--insecure-no-auth`), a configured token is required on
//! every scrape, browser origins are refused, and so are peers inside a
//! sandboxed subtree. Anything else, an upgrade included, gets 404.

use tokio::net::TcpListener;

use super::connection::Shared;
use super::transport::{http, websocket};
use super::{ServerConfig, ServerError};

/// Binds the side port when one is configured (checking the auth rule of a
/// non-loopback address) and logs where it is.
pub async fn bind(config: &ServerConfig) -> Result<Option<TcpListener>, ServerError> {
    let Some(addr) = config.metrics_listen else {
        return Ok(None);
    };
    super::check_public_bind(addr, config)?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            url: format!("http://{addr}"),
            source,
        })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!("serving metrics on http://{bound}{}", crate::metrics::PATH);
    Ok(Some(listener))
}

/// Serves the side port, if bound, until the returned guard is dropped.
pub fn spawn(listener: Option<TcpListener>, shared: &Shared) -> Scrapes {
    Scrapes(listener.map(|listener| tokio::spawn(serve(listener, shared.clone()))))
}

/// The task answering scrapes; dropping it closes the side port.
#[derive(Debug)]
pub struct Scrapes(Option<tokio::task::JoinHandle<()>>);

impl Drop for Scrapes {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Answers scrapes on `listener`.
async fn serve(listener: TcpListener, shared: Shared) {
    let policy = std::sync::Arc::new(websocket::access_policy(&shared));
    loop {
        let (stream, peer) = crate::accept::next_tcp(&listener).await;
        let (shared, policy) = (shared.clone(), policy.clone());
        tokio::spawn(async move {
            if super::refused_tcp(&stream, peer, &shared).await {
                return super::refuse(stream, &peer.to_string()).await;
            }
            let scrape = |request| async move {
                let decision = match http::decide(&request, &policy) {
                    // Not a page of this port.
                    http::Decision::Respond(http::StatusCode::UPGRADE_REQUIRED) => {
                        http::Decision::Respond(http::StatusCode::NOT_FOUND)
                    }
                    decision => decision,
                };
                (
                    websocket::answer(decision, Some(&shared.metrics)),
                    None::<()>,
                )
            };
            crate::net::http_server::serve_one(stream, http::HEAD_TIMEOUT, scrape).await;
        });
    }
}
