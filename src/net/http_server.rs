//! Serving HTTP/1.1 on hyper, for every listener codexbox has: the
//! proxy's, and the WebSocket gates of the exec-server, `connect` and the
//! rendezvous. [`builder`] sets what they share (a request head bounded
//! in time); [`serve_one`] answers one request on a connection, its head
//! also bounded in size, and hands the connection over when the answer
//! accepted an upgrade. hyper parses and refuses what is not HTTP/1.1
//! (`400`, `431` for an oversize head, a conflicting `Content-Length`, a
//! `Transfer-Encoding` that is not chunked last).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONNECTION};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::sync::lock;

/// Largest request head [`serve_one`] reads (hyper's smallest buffer is
/// 8 KiB).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The body of every answer [`serve_one`] gives.
pub type Body = Full<Bytes>;

/// A connection taken over after a `101`.
pub type Upgraded = TokioIo<hyper::upgrade::Upgraded>;

/// An HTTP/1.1 server whose clients must send a request head within
/// `head_timeout`.
pub fn builder(head_timeout: Duration) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout);
    builder
}

/// Reads one request on `stream` (head within `head_timeout` and
/// [`MAX_HEAD_BYTES`]), answers it with `handler`'s response, then closes
/// the connection, unless the response is a `101` that comes with a `T`:
/// then the connection is returned with it, ready for the new protocol.
pub async fn serve_one<S, T, H, Fut>(
    stream: S,
    head_timeout: Duration,
    handler: H,
) -> Option<(Upgraded, T)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: FnOnce(Request<Incoming>) -> Fut,
    Fut: Future<Output = (Response<Body>, Option<T>)>,
{
    let handler = Mutex::new(Some(handler));
    let taken_over: Mutex<Option<(OnUpgrade, T)>> = Mutex::new(None);
    let service = hyper::service::service_fn(|mut request: Request<Incoming>| {
        let handler = lock(&handler).take();
        let upgrade = hyper::upgrade::on(&mut request);
        let taken_over = &taken_over;
        async move {
            // Every answer closes the connection: there is no second request.
            let Some(handler) = handler else {
                return Ok::<_, Infallible>(status(StatusCode::BAD_REQUEST));
            };
            let (mut response, new_owner) = handler(request).await;
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                *lock(taken_over) = new_owner.map(|owner| (upgrade, owner));
            } else {
                // Said here rather than by turning keep-alive off, which
                // would add `close` to a 101's `Connection: Upgrade` too.
                response
                    .headers_mut()
                    .insert(CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(response)
        }
    });
    let mut builder = builder(head_timeout);
    builder.max_buf_size(MAX_HEAD_BYTES);
    let served = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(err) = served {
        tracing::debug!("HTTP connection ended: {err}");
    }
    let (upgrade, owner) = taken_over.into_inner().ok()??;
    match upgrade.await {
        Ok(upgraded) => Some((TokioIo::new(upgraded), owner)),
        Err(err) => {
            tracing::debug!("upgrade failed: {err}");
            None
        }
    }
}

/// An empty answer with `code`.
pub fn status(code: StatusCode) -> Response<Body> {
    let mut response = Response::new(Body::default());
    *response.status_mut() = code;
    response
}
