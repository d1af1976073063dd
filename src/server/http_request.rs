//! `http/request` (docs/protocol.md): the
//! reference's validation order and messages, then the request runs in its
//! own task so other requests on the connection are served meanwhile.
//! Buffered bodies are capped at [`MAX_BUFFERED_BODY_BYTES`]; streamed
//! bodies go out as `http/request/bodyDelta` notifications of at most
//! [`DELTA_BYTES`] through the connection's bounded queue, so a slow client
//! slows the download instead of growing memory. Streams are
//! connection-local: a closed connection ends them.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::connection::Connection;
use super::reply::{to_json, Deferred};
use crate::net::client::{fetch, Outgoing};
use crate::net::upstream::Upstream;
use crate::protocol::envelope::encode_notification;
use crate::protocol::http::{
    BodyDeltaNotification, HttpHeader, HttpRequestParams, HttpRequestResult, RedirectPolicy,
    NOTIFY_BODY_DELTA,
};
use crate::protocol::{RequestId, RpcError};

/// Largest body a buffered (not streamed) response may have.
pub const MAX_BUFFERED_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Largest decoded body delta sent (the wire allows up to 1 MiB; smaller
/// deltas keep what a stalled client can hold in the queue small).
pub const DELTA_BYTES: usize = 128 * 1024;

/// Releases a reserved stream id when the stream ends, however it ends.
struct StreamReservation {
    conn: Arc<Connection>,
    request_id: String,
}

impl Drop for StreamReservation {
    fn drop(&mut self) {
        self.conn.http_streams.release(&self.request_id);
    }
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Validates in the reference's order: method, URL, scheme, headers.
/// Checks only: sends nothing.
pub fn prepare(params: &HttpRequestParams) -> Result<Outgoing, RpcError> {
    let method = Method::from_bytes(params.method.as_bytes())
        .map_err(|e| RpcError::invalid_params(format!("http/request method is invalid: {e}")))?;
    let uri = parse_url(&params.url)?;
    let mut headers = HeaderMap::new();
    for header in &params.headers {
        let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|e| {
            RpcError::invalid_params(format!("http/request header name is invalid: {e}"))
        })?;
        let value = HeaderValue::from_str(&header.value).map_err(|e| {
            RpcError::invalid_params(format!(
                "http/request header value is invalid for {}: {e}",
                header.name
            ))
        })?;
        headers.append(name, value);
    }
    let body = match &params.body_base64 {
        Some(text) => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| {
                RpcError::invalid_params(format!("http/request bodyBase64 is invalid: {e}"))
            })?,
        None => Vec::new(),
    };
    Ok(Outgoing {
        method,
        uri,
        headers,
        body: Bytes::from(body),
        follow_redirects: params.redirect_policy == RedirectPolicy::Follow,
    })
}

/// Parses `text` as a browser (and the reference's client) does: the
/// WHATWG URL rules, so a Unicode host goes out as its IDNA ASCII form
/// (`münich.invalid` as `xn--mnich-kva.invalid`), non-ASCII in the path
/// and query is percent-encoded, the host is lower-cased and a default
/// port dropped. The fragment is never sent.
fn parse_url(text: &str) -> Result<Uri, RpcError> {
    let invalid = |e: &dyn std::fmt::Display| {
        RpcError::invalid_params(format!("http/request url is invalid: {e}"))
    };
    let mut url = url::Url::parse(text).map_err(|e| invalid(&e))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(RpcError::invalid_params(format!(
            "http/request only supports http and https URLs, got {}",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid(&url::ParseError::EmptyHost));
    }
    url.set_fragment(None);
    url.as_str().parse().map_err(|e| invalid(&e))
}

/// `http/request`: validates now, answers from its own task.
pub async fn http_request(
    conn: &Arc<Connection>,
    id: &RequestId,
    params: HttpRequestParams,
) -> Result<Deferred, RpcError> {
    let outgoing = prepare(&params)?;
    let reservation = if params.stream_response {
        let fresh = conn.http_streams.reserve(&params.request_id);
        if !fresh {
            return Err(RpcError::invalid_params(format!(
                "http/request streamResponse requestId `{}` is already active",
                params.request_id
            )));
        }
        Some(StreamReservation {
            conn: conn.clone(),
            request_id: params.request_id.clone(),
        })
    } else {
        None
    };
    let Ok(permit) = conn.deferred.clone().acquire_owned().await else {
        return Err(RpcError::internal("connection is shutting down"));
    };
    let deadline = params
        .timeout_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let (conn, id) = (conn.clone(), id.clone());
    tokio::spawn(async move {
        let _permit = permit;
        run(
            &conn,
            &id,
            outgoing,
            deadline,
            reservation,
            params.request_id,
        )
        .await;
    });
    Ok(Deferred::Later)
}

/// Runs `future` until `deadline` (if any); `None` when it passed.
async fn before<F: std::future::Future>(deadline: Option<Instant>, future: F) -> Option<F::Output> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}

async fn run(
    conn: &Arc<Connection>,
    id: &RequestId,
    outgoing: Outgoing,
    deadline: Option<Instant>,
    reservation: Option<StreamReservation>,
    request_id: String,
) {
    let upstream = Upstream::from_process_env();
    let cookies = super::cloudflare_cookies::CloudflareCookies::global();
    let response = match before(deadline, fetch(outgoing, &upstream, Some(cookies))).await {
        Some(Ok(response)) => response,
        Some(Err(err)) => {
            let message = format!("http/request failed: {err}");
            return conn.reply(id, Err(RpcError::internal(message))).await;
        }
        None => {
            return conn
                .reply(
                    id,
                    Err(RpcError::internal(
                        "http/request failed: operation timed out",
                    )),
                )
                .await
        }
    };
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .filter_map(|(name, value)| {
            Some(HttpHeader {
                name: name.as_str().to_owned(),
                value: value.to_str().ok()?.to_owned(),
            })
        })
        .collect();
    let mut body = response.into_body();
    let Some(reservation) = reservation else {
        let collected = before(deadline, collect_capped(&mut body)).await;
        let result = match collected {
            Some(Ok(bytes)) => Ok(HttpRequestResult {
                status,
                headers,
                body_base64: base64(&bytes),
            }),
            Some(Err(message)) => Err(RpcError::internal(message)),
            None => Err(RpcError::internal(
                "failed to read http/request response body: operation timed out",
            )),
        };
        return match result.and_then(|r| to_json(&r)) {
            Ok(text) => conn.reply_raw(id, text).await,
            Err(error) => conn.reply(id, Err(error)).await,
        };
    };
    let head = HttpRequestResult {
        status,
        headers,
        body_base64: String::new(),
    };
    match to_json(&head) {
        Ok(text) => conn.reply_raw(id, text).await,
        Err(error) => return conn.reply(id, Err(error)).await,
    }
    let mut seq = 0u64;
    let error = loop {
        if conn.out.is_closed() {
            return;
        }
        let frame = match before(deadline, body.frame()).await {
            None => {
                break Some(
                    "failed to read http/request response body: operation timed out".to_owned(),
                )
            }
            Some(None) => break None,
            Some(Some(Err(err))) => {
                break Some(format!("failed to read http/request response body: {err}"))
            }
            Some(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        for piece in data.chunks(DELTA_BYTES) {
            seq += 1;
            send_delta(conn, &request_id, seq, base64(piece), false, None).await;
        }
    };
    seq += 1;
    send_delta(conn, &request_id, seq, String::new(), true, error).await;
    drop(reservation);
}

async fn send_delta(
    conn: &Connection,
    request_id: &str,
    seq: u64,
    delta_base64: String,
    done: bool,
    error: Option<String>,
) {
    let params = BodyDeltaNotification {
        request_id: request_id.to_owned(),
        seq,
        delta_base64,
        done,
        error,
    };
    conn.send(encode_notification(NOTIFY_BODY_DELTA, &params))
        .await;
}

/// The whole body, or an error past [`MAX_BUFFERED_BODY_BYTES`].
async fn collect_capped(body: &mut hyper::body::Incoming) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("failed to read http/request response body: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > MAX_BUFFERED_BODY_BYTES {
                return Err(format!(
                    "failed to read http/request response body: larger than {MAX_BUFFERED_BODY_BYTES} bytes; use streamResponse"
                ));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(method: &str, url: &str, headers: &[(&str, &str)]) -> HttpRequestParams {
        HttpRequestParams {
            method: method.into(),
            url: url.into(),
            headers: headers
                .iter()
                .map(|(n, v)| HttpHeader {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
            body_base64: None,
            timeout_ms: None,
            redirect_policy: RedirectPolicy::Follow,
            request_id: "r".into(),
            stream_response: false,
        }
    }

    fn message(p: &HttpRequestParams) -> String {
        prepare(p).unwrap_err().message
    }

    #[test]
    fn validation_follows_the_reference_order_and_messages() {
        assert!(message(&params("GE T", "http://a/", &[]))
            .starts_with("http/request method is invalid: "));
        assert!(message(&params("GET", "http://a b/", &[]))
            .starts_with("http/request url is invalid: "));
        assert_eq!(
            message(&params("GET", "/relative", &[])),
            "http/request url is invalid: relative URL without a base"
        );
        assert_eq!(
            message(&params("GET", "ftp://a/", &[])),
            "http/request only supports http and https URLs, got ftp"
        );
        assert!(message(&params("GET", "http://a/", &[("bad name", "v")]))
            .starts_with("http/request header name is invalid: "));
        assert!(
            message(&params("GET", "http://a/", &[("x-a", "line\nbreak")]))
                .starts_with("http/request header value is invalid for x-a: ")
        );
        assert!(message(&params("GE T", "ftp://a/", &[("bad name", "v")])).contains("method"));
        assert!(prepare(&params(
            "PATCH",
            "https://a.test:8443/x?y",
            &[("x-a", "1"), ("x-a", "2")]
        ))
        .is_ok());
    }
}
