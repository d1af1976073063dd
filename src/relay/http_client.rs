//! A minimal HTTP/1.1 client for the registry's JSON calls: one `POST` per
//! connection, no redirects followed (a 3xx is returned like any status),
//! bodies by `Content-Length`, chunked or until close, capped in size.
//! `https://` through [`super::tls`] (system roots).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::http::Uri;

use super::tls::MaybeTls;

/// Largest response body read.
const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// Largest response head read.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Why a request failed before a status was known.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("invalid URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: &'static str },
    #[error("cannot connect to {authority}: {source}")]
    Connect {
        authority: String,
        #[source]
        source: super::tls::ConnectError,
    },
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed HTTP response")]
    Malformed,
    #[error("HTTP response larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

impl HttpError {
    /// Whether the request never got an answer because of the network
    /// (worth retrying) rather than a bad request.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Connect { .. } | Self::Io(_) | Self::Malformed | Self::Timeout(_)
        )
    }
}

/// A parsed `http://` (or `ws://`) URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// `host:port` to dial (IPv6 in brackets).
    pub authority: String,
    /// The `Host` header (no userinfo).
    pub host_header: String,
    /// The host alone (no brackets).
    pub host: String,
    /// Path and query, at least `/`.
    pub path_and_query: String,
    /// The scheme was `https`/`wss`.
    pub secure: bool,
}

impl HttpUrl {
    /// Parses `http(s)://` or `ws(s)://` URLs.
    pub fn parse(url: &str) -> Result<Self, HttpError> {
        let invalid = |reason| HttpError::InvalidUrl {
            url: redact(url),
            reason,
        };
        let uri: Uri = url.parse().map_err(|_| invalid("not a URL"))?;
        let (secure, default_port) = match uri.scheme_str() {
            Some("http" | "ws") => (false, 80),
            Some("https" | "wss") => (true, 443),
            _ => return Err(invalid("the scheme must be http, https, ws or wss")),
        };
        let authority = uri.authority().ok_or_else(|| invalid("missing host"))?;
        let host = authority.host();
        if host.is_empty() {
            return Err(invalid("missing host"));
        }
        let port = authority.port_u16().unwrap_or(default_port);
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let host_header = match authority.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Ok(Self {
            authority: format!("{host}:{port}"),
            host_header,
            host: bare,
            path_and_query: uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            secure,
        })
    }

    /// Whether the host is `localhost`, 127.0.0.0/8 or `::1`.
    pub fn is_loopback(&self) -> bool {
        if self.host.eq_ignore_ascii_case("localhost") {
            return true;
        }
        self.host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
    }
}

/// The URL with its query, fragment and userinfo removed (for messages).
pub fn redact(url: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let url = url.get(..cut).unwrap_or(url);
    match (url.find("://"), url.find('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!(
                "{}{}",
                url.get(..scheme_end + 3).unwrap_or(""),
                url.get(at + 1..).unwrap_or("")
            )
        }
        _ => url.to_owned(),
    }
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub body: Vec<u8>,
    /// A `Retry-After` given in seconds (a date is ignored).
    pub retry_after: Option<Duration>,
}

/// `POST`s `body` as JSON to `url` with extra `headers`, within `timeout`
/// for the whole exchange when one is given.
pub async fn post_json(
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Option<Duration>,
) -> Result<HttpResponse, HttpError> {
    let exchange = post_json_unbounded(url, headers, body);
    match timeout {
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| HttpError::Timeout(limit))?,
        None => exchange.await,
    }
}

async fn post_json_unbounded(
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<HttpResponse, HttpError> {
    let target = HttpUrl::parse(url)?;
    let mut stream = MaybeTls::connect(&target.authority, &target.host, target.secure)
        .await
        .map_err(|source| HttpError::Connect {
            authority: target.authority.clone(),
            source,
        })?;
    let mut request = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: */*\r\ncontent-length: {}\r\nconnection: close\r\n",
        target.path_and_query,
        target.host_header,
        body.len()
    );
    for (name, value) in headers {
        request.push_str(name);
        request.push_str(": ");
        request.push_str(value);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await?;
    read_response(&mut stream).await
}

async fn read_response<S: AsyncRead + Unpin>(stream: &mut S) -> Result<HttpResponse, HttpError> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(HttpError::Malformed);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HttpError::Malformed);
        }
    };
    let head = std::str::from_utf8(buf.get(..head_end).unwrap_or_default())
        .map_err(|_| HttpError::Malformed)?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or(HttpError::Malformed)?;
    let mut parts = status_line.splitn(3, ' ');
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(HttpError::Malformed);
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or(HttpError::Malformed)?;
    let mut content_length = None;
    let mut chunked = false;
    let mut retry_after = None;
    for line in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Malformed);
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            content_length = Some(
                value
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| HttpError::Malformed)?,
            );
        } else if name.trim().eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.trim().eq_ignore_ascii_case("retry-after") {
            retry_after = value.trim().parse::<u64>().ok().map(Duration::from_secs);
        }
    }
    let mut body = buf.split_off(head_end);
    if chunked {
        loop {
            if let Some(decoded) = decode_chunked(&body)? {
                return Ok(HttpResponse {
                    status,
                    body: decoded,
                    retry_after,
                });
            }
            read_more(stream, &mut body, &mut chunk).await?;
        }
    }
    match content_length {
        Some(length) => {
            if length > MAX_RESPONSE_BYTES {
                return Err(HttpError::TooLarge);
            }
            while body.len() < length {
                read_more(stream, &mut body, &mut chunk).await?;
            }
            body.truncate(length);
        }
        None => loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(chunk.get(..n).unwrap_or_default());
            if body.len() > MAX_RESPONSE_BYTES {
                return Err(HttpError::TooLarge);
            }
        },
    }
    Ok(HttpResponse {
        status,
        body,
        retry_after,
    })
}

async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    body: &mut Vec<u8>,
    chunk: &mut [u8],
) -> Result<(), HttpError> {
    let n = stream.read(chunk).await?;
    if n == 0 {
        return Err(HttpError::Malformed);
    }
    body.extend_from_slice(chunk.get(..n).unwrap_or_default());
    if body.len() > MAX_RESPONSE_BYTES {
        return Err(HttpError::TooLarge);
    }
    Ok(())
}

/// Decodes a complete chunked body, or `None` when more bytes are needed.
fn decode_chunked(mut input: &[u8]) -> Result<Option<Vec<u8>>, HttpError> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = input.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(input.get(..line_end).unwrap_or_default())
            .map_err(|_| HttpError::Malformed)?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| HttpError::Malformed)?;
        let data_start = line_end + 2;
        if size == 0 {
            return Ok(Some(out));
        }
        let data_end = data_start.checked_add(size).ok_or(HttpError::TooLarge)?;
        if data_end > MAX_RESPONSE_BYTES {
            return Err(HttpError::TooLarge);
        }
        let (Some(data), Some(rest)) = (input.get(data_start..data_end), input.get(data_end + 2..))
        else {
            return Ok(None);
        };
        out.extend_from_slice(data);
        input = rest;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_userinfo_ipv6_and_default_ports() {
        let url = HttpUrl::parse("http://u:p@127.0.0.1:8080/base?x=1/cloud").unwrap();
        assert_eq!(url.authority, "127.0.0.1:8080");
        assert_eq!(url.host_header, "127.0.0.1:8080");
        assert_eq!(url.path_and_query, "/base?x=1/cloud");
        assert!(url.is_loopback());
        let url = HttpUrl::parse("ws://[::1]/relay").unwrap();
        assert_eq!(url.authority, "[::1]:80");
        assert!(url.is_loopback());
        assert!(HttpUrl::parse("https://example.com").unwrap().secure);
        assert!(!HttpUrl::parse("http://example.com").unwrap().is_loopback());
        assert!(HttpUrl::parse("ftp://x").is_err());
        assert!(HttpUrl::parse("not a url").is_err());
    }

    #[test]
    fn redaction_drops_query_fragment_and_userinfo() {
        assert_eq!(
            redact("http://user:secret@host:1/p?token=secret#f"),
            "http://host:1/p"
        );
        assert_eq!(redact("ws://h/relay?sig=abc"), "ws://h/relay");
    }

    #[test]
    fn chunked_bodies_decode_when_complete() {
        assert_eq!(
            decode_chunked(b"4\r\nWiki\r\n5;x=1\r\npedia\r\n0\r\n\r\n").unwrap(),
            Some(b"Wikipedia".to_vec())
        );
        assert_eq!(decode_chunked(b"4\r\nWi").unwrap(), None);
        assert!(decode_chunked(b"zz\r\n").is_err());
    }

    #[tokio::test]
    async fn retry_after_in_seconds_is_read_and_a_date_ignored() {
        let mut seconds: &[u8] =
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 2\r\n\r\n{}";
        let response = read_response(&mut seconds).await.unwrap();
        assert_eq!(response.status, 429);
        assert_eq!(response.retry_after, Some(Duration::from_secs(3)));
        let mut date: &[u8] = b"HTTP/1.1 503 Busy\r\nretry-after: Wed, 21 Oct 2015 07:28:00 GMT\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(read_response(&mut date).await.unwrap().retry_after, None);
    }
}
