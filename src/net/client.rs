//! codexbox's one outbound HTTP client (`http/request`, registry calls):
//! HTTP/1.1 on hyper over [`super::connector`] (the process's own
//! `HTTP(S)_PROXY`/`NO_PROXY`, one TLS configuration), idle connections
//! kept for the next request to the same place, redirects (up to 10, or
//! none). 1xx interim answers are skipped and a response whose length is
//! ambiguous is refused, by hyper. No destination policy: the server's
//! own requests are not a sandboxed process's.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, COOKIE, HOST,
    LOCATION, PROXY_AUTHORIZATION, RETRY_AFTER, SET_COOKIE,
};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use super::connector::{connect, ConnectError, Through};
use super::upstream::{ProxyEndpoint, Upstream};
use crate::sync::lock;
use crate::web_url::WebUrl;

/// Redirect hops followed before giving up.
pub const MAX_REDIRECTS: usize = 10;

/// Why a request failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("error sending request for url ({url}): {source}")]
    Connect {
        url: String,
        #[source]
        source: ConnectError,
    },
    #[error("error sending request for url ({url}): {source}")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("error following redirect for url ({url}): too many redirects")]
    TooManyRedirects { url: String },
    #[error("error following redirect for url ({url}): invalid location {location:?}")]
    BadRedirect { url: String, location: String },
}

/// A request ready to send.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub method: Method,
    /// Absolute `http` or `https` URI.
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub follow_redirects: bool,
}

/// Cookies kept from one request to the next (what `http/request` keeps
/// is decided by the store: see `server::cloudflare_cookies`). Asked at
/// every hop, redirects included, as reqwest's cookie provider is.
pub trait CookieStore: Send + Sync {
    /// Takes note of the `Set-Cookie` headers of a response from `uri`.
    fn store(&self, uri: &Uri, set_cookies: &mut dyn Iterator<Item = &HeaderValue>);
    /// The `Cookie` header a request to `uri` carries, if any.
    fn cookie_header(&self, uri: &Uri) -> Option<HeaderValue>;
}

/// Sends `request`, following redirects when asked. With `cookies`, each
/// hop without a `Cookie` header of its own carries the store's, and each
/// response's `Set-Cookie` goes to the store.
pub async fn fetch(
    request: Outgoing,
    upstream: &Upstream,
    cookies: Option<&dyn CookieStore>,
) -> Result<Response<Incoming>, FetchError> {
    let Outgoing {
        mut method,
        mut uri,
        mut headers,
        mut body,
        follow_redirects,
    } = request;
    for _ in 0..=MAX_REDIRECTS {
        let stored = cookies
            .filter(|_| !headers.contains_key(COOKIE))
            .and_then(|store| store.cookie_header(&uri));
        let response = match stored {
            Some(cookie) => {
                let mut with_cookie = headers.clone();
                with_cookie.insert(COOKIE, cookie);
                fetch_once(&method, &uri, &with_cookie, body.clone(), upstream).await?
            }
            None => fetch_once(&method, &uri, &headers, body.clone(), upstream).await?,
        };
        if let Some(store) = cookies {
            store.store(&uri, &mut response.headers().get_all(SET_COOKIE).iter());
        }
        let status = response.status();
        if !follow_redirects || !status.is_redirection() {
            return Ok(response);
        }
        let Some(location) = response.headers().get(LOCATION).cloned() else {
            return Ok(response);
        };
        let next = resolve_location(&uri, &location).ok_or_else(|| FetchError::BadRedirect {
            url: uri.to_string(),
            location: String::from_utf8_lossy(location.as_bytes()).into_owned(),
        })?;
        if next.authority() != uri.authority() || next.scheme() != uri.scheme() {
            for name in [AUTHORIZATION, COOKIE, PROXY_AUTHORIZATION] {
                headers.remove(name);
            }
        }
        let keeps_method = matches!(
            status,
            StatusCode::TEMPORARY_REDIRECT | StatusCode::PERMANENT_REDIRECT
        );
        if !keeps_method && method != Method::HEAD {
            method = Method::GET;
            body = Bytes::new();
            headers.remove(http::header::CONTENT_TYPE);
            headers.remove(http::header::CONTENT_LENGTH);
        }
        uri = next;
    }
    Err(FetchError::TooManyRedirects {
        url: uri.to_string(),
    })
}

/// The absolute URI a `Location` names, relative to `base`.
fn resolve_location(base: &Uri, location: &HeaderValue) -> Option<Uri> {
    let location = location.to_str().ok()?;
    if location.contains("://") {
        let parsed: Uri = location.parse().ok()?;
        return matches!(parsed.scheme_str(), Some("http" | "https")).then_some(parsed);
    }
    let mut parts = base.clone().into_parts();
    let path = if location.starts_with('/') {
        location.to_owned()
    } else {
        let base_path = base.path();
        let dir = base_path.rsplit_once('/').map_or("", |(dir, _)| dir);
        format!("{dir}/{location}")
    };
    parts.path_and_query = Some(path.parse().ok()?);
    Uri::from_parts(parts).ok()
}

async fn fetch_once(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    upstream: &Upstream,
) -> Result<Response<Incoming>, FetchError> {
    let url = uri.to_string();
    let target = WebUrl::parse(&url).map_err(|_| FetchError::BadRedirect {
        url: url.clone(),
        location: url.clone(),
    })?;
    let key = PoolKey {
        secure: target.is_secure(),
        authority: target.authority(),
        proxy: upstream.for_url(&target).map(ProxyEndpoint::display),
    };
    let http_error = |source| FetchError::Http {
        url: url.clone(),
        source,
    };
    let mut request = None;
    while let Some(mut sender) = IDLE.take(&key) {
        let next = match request.take() {
            Some(next) => next,
            None => build_request(method, &target, headers, body.clone(), key.proxy.is_some())?,
        };
        match sender.try_send_request(next).await {
            Ok(response) => {
                IDLE.put(key, sender);
                return Ok(response);
            }
            // Closed before the request went out: try another connection.
            Err(mut err) => match err.take_message() {
                Some(unsent) => request = Some(unsent),
                None => return Err(http_error(err.into_error())),
            },
        }
    }
    let connection = connect(&target, upstream, Through::Request)
        .await
        .map_err(|source| FetchError::Connect {
            url: url.clone(),
            source,
        })?;
    let forward = connection.forward_proxy.as_ref();
    let request = match request {
        Some(request) => request,
        None => build_request(method, &target, headers, body, forward.is_some())?,
    };
    let request = with_proxy_authorization(request, forward);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(connection.io))
        .await
        .map_err(http_error)?;
    tokio::spawn(async move {
        if let Err(err) = conn.await {
            tracing::debug!("outbound HTTP connection ended: {err}");
        }
    });
    let response = sender.send_request(request).await.map_err(http_error)?;
    IDLE.put(key, sender);
    Ok(response)
}

/// The request for `target`: in absolute form to a forwarding proxy, in
/// origin form on a connection (tunnelled or not) to the origin.
fn build_request(
    method: &Method,
    target: &WebUrl,
    headers: &HeaderMap,
    body: Bytes,
    absolute_form: bool,
) -> Result<Request<Full<Bytes>>, FetchError> {
    let bad = || FetchError::BadRedirect {
        url: target.to_string(),
        location: target.to_string(),
    };
    let uri = if absolute_form {
        target.uri().clone()
    } else {
        target.path_and_query().parse().map_err(|_| bad())?
    };
    let mut request = Request::builder().method(method.clone()).uri(uri);
    if let Some(map) = request.headers_mut() {
        *map = headers.clone();
        if !map.contains_key(HOST) {
            if let Ok(value) = HeaderValue::from_str(&target.host_header()) {
                map.insert(HOST, value);
            }
        }
    }
    request.body(Full::new(body)).map_err(|_| bad())
}

fn with_proxy_authorization(
    mut request: Request<Full<Bytes>>,
    forward: Option<&ProxyEndpoint>,
) -> Request<Full<Bytes>> {
    if let Some(auth) = forward.and_then(|proxy| proxy.authorization.as_deref()) {
        if let Ok(value) = HeaderValue::from_str(auth) {
            request.headers_mut().insert(PROXY_AUTHORIZATION, value);
        }
    }
    request
}

/// Where a kept connection leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    secure: bool,
    authority: String,
    /// The proxy it goes through, if any.
    proxy: Option<String>,
}

/// Connections kept for reuse, a few per place and for a short while. A
/// connection whose response body is still being read is not ready and
/// is skipped; one the server closed is dropped.
struct IdleConnections {
    idle: Mutex<HashMap<PoolKey, Vec<(Sender, Instant)>>>,
}

/// The sending half of a kept connection.
type Sender = SendRequest<Full<Bytes>>;

/// Connections kept per place at most.
const IDLE_PER_PLACE: usize = 4;
/// Places connections are kept for at most.
const IDLE_PLACES: usize = 64;
/// How long an unused connection is kept.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

static IDLE: LazyLock<IdleConnections> = LazyLock::new(|| IdleConnections {
    idle: Mutex::new(HashMap::new()),
});

impl IdleConnections {
    fn take(&self, key: &PoolKey) -> Option<Sender> {
        let mut idle = lock(&self.idle);
        let senders = idle.get_mut(key)?;
        senders.retain(|(sender, since)| !sender.is_closed() && since.elapsed() < IDLE_TIMEOUT);
        let ready = senders.iter().position(|(sender, _)| sender.is_ready())?;
        Some(senders.swap_remove(ready).0)
    }

    fn put(&self, key: PoolKey, sender: Sender) {
        let mut idle = lock(&self.idle);
        if !idle.contains_key(&key) && idle.len() >= IDLE_PLACES {
            idle.retain(|_, senders| {
                senders.retain(|(sender, since)| {
                    !sender.is_closed() && since.elapsed() < IDLE_TIMEOUT
                });
                !senders.is_empty()
            });
            if idle.len() >= IDLE_PLACES {
                return;
            }
        }
        let senders = idle.entry(key).or_default();
        if senders.len() < IDLE_PER_PLACE {
            senders.push((sender, Instant::now()));
        }
    }
}

/// A response read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    pub status: u16,
    pub body: Bytes,
    /// A `Retry-After` given in seconds (a date is ignored).
    pub retry_after: Option<Duration>,
}

/// Why [`post_json`] got no whole answer.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("invalid URL `{0}`")]
    InvalidUrl(String),
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error("reading the response from {url}: {source}")]
    Body {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("the response from {url} is larger than {max} bytes")]
    TooLarge { url: String, max: usize },
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

impl PostError {
    /// Whether no answer came because of the network (worth retrying)
    /// rather than a bad request.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Fetch(_) | Self::Body { .. } | Self::Timeout(_))
    }
}

/// `POST`s `body` as JSON to `url` with extra `headers` (redirects are
/// not followed), reads a body of at most `max_body` bytes, all within
/// `timeout` when one is given.
pub async fn post_json(
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
    max_body: usize,
    timeout: Option<Duration>,
) -> Result<Collected, PostError> {
    let exchange = post_json_unbounded(url, headers, body, max_body);
    match timeout {
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| PostError::Timeout(limit))?,
        None => exchange.await,
    }
}

async fn post_json_unbounded(
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
    max_body: usize,
) -> Result<Collected, PostError> {
    let shown = crate::web_url::redact(url);
    let uri: Uri = url
        .parse()
        .map_err(|_| PostError::InvalidUrl(shown.clone()))?;
    let mut map = HeaderMap::new();
    map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    map.insert(ACCEPT, HeaderValue::from_static("*/*"));
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| PostError::InvalidUrl(shown.clone()))?;
        let value =
            HeaderValue::from_str(value).map_err(|_| PostError::InvalidUrl(shown.clone()))?;
        map.append(name, value);
    }
    let request = Outgoing {
        method: Method::POST,
        uri,
        headers: map,
        body,
        follow_redirects: false,
    };
    let response = fetch(request, &Upstream::from_process_env(), None).await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let limited = Limited::new(response.into_body(), max_body);
    let body = match limited.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) => {
            return Err(match err.downcast::<hyper::Error>() {
                Ok(source) => PostError::Body {
                    url: shown,
                    source: *source,
                },
                Err(_) => PostError::TooLarge {
                    url: shown,
                    max: max_body,
                },
            })
        }
    };
    Ok(Collected {
        status,
        body,
        retry_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_request() {
        let base: Uri = "http://a.test:8080/x/y?q=1".parse().unwrap();
        let loc = |l: &str| {
            resolve_location(&base, &HeaderValue::from_str(l).unwrap()).map(|u| u.to_string())
        };
        assert_eq!(loc("/z").as_deref(), Some("http://a.test:8080/z"));
        assert_eq!(loc("w?k").as_deref(), Some("http://a.test:8080/x/w?k"));
        assert_eq!(loc("https://b.test/").as_deref(), Some("https://b.test/"));
        assert_eq!(loc("ftp://b.test/"), None);
    }
}
