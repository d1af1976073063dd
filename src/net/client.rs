//! The outbound HTTP client behind `http/request`: HTTP/1.1 on hyper, TLS
//! with rustls (the system's root certificates, plus `CODEX_CA_CERTIFICATE`
//! when set), the server's own `HTTP(S)_PROXY`/`NO_PROXY`, redirects
//! (up to 10, or none). One connection per hop; no destination policy (the
//! server's own requests are not a sandboxed process's).

use std::io;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{
    HeaderMap, HeaderValue, AUTHORIZATION, COOKIE, HOST, LOCATION, PROXY_AUTHORIZATION, SET_COOKIE,
};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::dial::dial_unchecked;
use super::upstream::{ProxyEndpoint, Upstream};

/// Redirect hops followed before giving up.
pub const MAX_REDIRECTS: usize = 10;
/// Environment variable naming an extra PEM bundle of trusted roots.
pub const CA_CERTIFICATE_ENV: &str = "CODEX_CA_CERTIFICATE";

/// Why a request failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("error sending request for url ({url}): {source}")]
    Connect {
        url: String,
        #[source]
        source: io::Error,
    },
    #[error("error sending request for url ({url}): {source}")]
    Http {
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("error sending request for url ({url}): {source}")]
    Upstream {
        url: String,
        #[source]
        source: super::upstream::UpstreamError,
    },
    #[error("error following redirect for url ({url}): too many redirects")]
    TooManyRedirects { url: String },
    #[error("error following redirect for url ({url}): invalid location {location:?}")]
    BadRedirect { url: String, location: String },
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
    #[error("cannot load trusted certificates: {0}")]
    Roots(String),
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

/// Anything a hyper connection can run on.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// The TLS configuration, built once per process.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, FetchError> {
    tls_client_config().map_err(FetchError::Roots)
}

/// The TLS client configuration of every outgoing connection (`http/request`,
/// registries, rendezvous sockets): rustls with the ring provider, the
/// system's root certificates and those of `CODEX_CA_CERTIFICATE`; built
/// once per process. The error says why no configuration could be built.
pub fn tls_client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG.get_or_init(build_tls_config).clone()
}

fn build_tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = std::env::var_os(CA_CERTIFICATE_ENV).filter(|p| !p.is_empty()) {
        let certs = CertificateDer::pem_file_iter(&path)
            .map_err(|e| format!("{}: {e}", std::path::Path::new(&path).display()))?;
        for cert in certs {
            let cert =
                cert.map_err(|e| format!("{}: {e}", std::path::Path::new(&path).display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("{}: {e}", std::path::Path::new(&path).display()))?;
        }
    }
    if roots.is_empty() {
        return Err("no usable root certificate on this system".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
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
    let authority = uri
        .authority()
        .cloned()
        .ok_or_else(|| FetchError::BadRedirect {
            url: url.clone(),
            location: url.clone(),
        })?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let https = uri.scheme_str() == Some("https");
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let connect_error = |source| FetchError::Connect {
        url: url.clone(),
        source,
    };
    let proxy: Option<&ProxyEndpoint> = if https {
        upstream.for_tunnel(&host)
    } else {
        upstream.for_plain(&host)
    };
    // Plain HTTP through a proxy is sent in absolute form; everything else
    // in origin form on a connection (tunnelled or not) to the origin.
    let mut absolute_form = false;
    let io: Box<dyn Io> = match (proxy, https) {
        (Some(endpoint), false) => {
            absolute_form = true;
            Box::new(
                endpoint
                    .connect()
                    .await
                    .map_err(|source| FetchError::Upstream {
                        url: url.clone(),
                        source,
                    })?,
            )
        }
        (Some(endpoint), true) => {
            let target = format!("{}:{port}", bracketed(&host));
            let (stream, _) =
                endpoint
                    .tunnel(&target)
                    .await
                    .map_err(|source| FetchError::Upstream {
                        url: url.clone(),
                        source,
                    })?;
            Box::new(tls_connect(stream, &host).await.map_err(connect_error)?)
        }
        (None, false) => Box::new(dial_unchecked(&host, port).await.map_err(connect_error)?),
        (None, true) => {
            let stream = dial_unchecked(&host, port).await.map_err(connect_error)?;
            Box::new(tls_connect(stream, &host).await.map_err(connect_error)?)
        }
    };
    let target: Uri = if absolute_form {
        uri.clone()
    } else {
        uri.path_and_query()
            .map_or("/", |pq| pq.as_str())
            .parse()
            .unwrap_or_else(|_| Uri::from_static("/"))
    };
    let mut request = Request::builder().method(method.clone()).uri(target);
    if let Some(map) = request.headers_mut() {
        *map = headers.clone();
        if !map.contains_key(HOST) {
            if let Ok(value) = HeaderValue::from_str(authority.as_str()) {
                map.insert(HOST, value);
            }
        }
        if let (true, Some(auth)) = (
            absolute_form,
            proxy.and_then(|p| p.authorization.as_deref()),
        ) {
            if let Ok(value) = HeaderValue::from_str(auth) {
                map.insert(PROXY_AUTHORIZATION, value);
            }
        }
    }
    let request = request
        .body(Full::new(body))
        .map_err(|_| FetchError::BadRedirect {
            url: url.clone(),
            location: url.clone(),
        })?;
    let http_error = |source| FetchError::Http {
        url: url.clone(),
        source,
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(http_error)?;
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!("http/request connection ended: {err}");
        }
    });
    sender.send_request(request).await.map_err(http_error)
}

fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

async fn tls_connect(
    stream: tokio::net::TcpStream,
    host: &str,
) -> io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let config = tls_config().map_err(io::Error::other)?;
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|_| io::Error::other(FetchError::ServerName(host.to_owned())))?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await
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
