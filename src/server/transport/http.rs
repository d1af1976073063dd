//! The small HTTP layer in front of the WebSocket: reads the request head,
//! answers `GET /readyz`, refuses browser origins (403) and missing or wrong
//! bearer tokens (401), sends `GET /metrics` (behind the same token) to the
//! metrics, and accepts the upgrade (101) — all before any byte
//! is handed to the WebSocket codec. It also reads bounded request bodies
//! for the rendezvous's registry API. Heads and bodies are bounded in size
//! here; callers bound the time a whole request may take.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest request head accepted.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
}

impl RequestHead {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn header_has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

/// Why a head could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("connection closed before a complete request head")]
    Closed,
    #[error("request head exceeds {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("malformed request head")]
    Malformed,
    #[error("reading request head: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads up to the blank line. Returns the head and any bytes read past it.
pub async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<(RequestHead, Vec<u8>), HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        let scan_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(pos) = find(&buf[scan_from..], b"\r\n\r\n") {
            let end = scan_from + pos + 4;
            let head = parse_head(&buf[..end]).ok_or(HeadError::Malformed)?;
            return Ok((head, buf[end..].to_vec()));
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(HeadError::TooLarge);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Parses `METHOD PATH HTTP/1.x` and the header lines.
pub fn parse_head(bytes: &[u8]) -> Option<RequestHead> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    if !request_line.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let mut headers = Vec::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    Some(RequestHead {
        method,
        path,
        headers,
    })
}

/// Who may connect.
#[derive(Debug, Clone, Default)]
pub struct AccessPolicy {
    /// Required bearer token.
    pub token: Option<String>,
    /// Allowed `Origin` values.
    pub allowed_origins: Vec<String>,
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Switch to WebSocket, answering with this `Sec-WebSocket-Accept`.
    Upgrade { accept: String },
    /// Answer with a plain HTTP response and close.
    Respond { status: u16, reason: &'static str },
    /// Answer with the metrics exposition and close.
    Metrics,
}

/// Applies origin, readiness, auth and upgrade rules, in that order.
pub fn decide(head: &RequestHead, policy: &AccessPolicy) -> Decision {
    if let Some(origin) = head.header("origin") {
        if !policy.allowed_origins.iter().any(|o| o == origin) {
            return Decision::Respond {
                status: 403,
                reason: "Forbidden",
            };
        }
    }
    let path = head.path.split('?').next().unwrap_or_default();
    if path == "/readyz" {
        return if head.method == "GET" || head.method == "HEAD" {
            Decision::Respond {
                status: 200,
                reason: "OK",
            }
        } else {
            Decision::Respond {
                status: 405,
                reason: "Method Not Allowed",
            }
        };
    }
    if let Some(expected) = &policy.token {
        let presented = head.header("authorization").and_then(bearer_token);
        if !presented.is_some_and(|p| token_matches(expected, p)) {
            return Decision::Respond {
                status: 401,
                reason: "Unauthorized",
            };
        }
    }
    if path == crate::metrics::PATH {
        return if head.method == "GET" {
            Decision::Metrics
        } else {
            Decision::Respond {
                status: 405,
                reason: "Method Not Allowed",
            }
        };
    }
    match websocket_accept(head) {
        Some(accept) => Decision::Upgrade { accept },
        None => Decision::Respond {
            status: 426,
            reason: "Upgrade Required",
        },
    }
}

/// The `Sec-WebSocket-Accept` value when `head` is a valid WebSocket upgrade.
pub fn websocket_accept(head: &RequestHead) -> Option<String> {
    let key = head.header("sec-websocket-key")?;
    let is_upgrade = head.method == "GET"
        && head.header_has_token("connection", "upgrade")
        && head.header_has_token("upgrade", "websocket")
        && head.header("sec-websocket-version") == Some("13");
    is_upgrade.then(|| tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("the request needs a valid Content-Length")]
    LengthRequired,
    #[error("the body exceeds {max} bytes")]
    TooLarge { max: usize },
    #[error("connection closed before the whole body")]
    Closed,
    #[error("reading the body: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads a request body of `Content-Length` bytes (at most `max`), starting
/// with `leftover` (bytes read past the head). It has no deadline of its
/// own: a caller bounds the whole request (head and body) with one, so a
/// body trickled a byte at a time cannot hold the connection either.
pub async fn read_body<S: AsyncRead + Unpin>(
    stream: &mut S,
    head: &RequestHead,
    mut leftover: Vec<u8>,
    max: usize,
) -> Result<Vec<u8>, BodyError> {
    let length: usize = head
        .header("content-length")
        .and_then(|value| value.trim().parse().ok())
        .ok_or(BodyError::LengthRequired)?;
    if length > max {
        return Err(BodyError::TooLarge { max });
    }
    let mut chunk = [0u8; 4096];
    while leftover.len() < length {
        let n = stream.read(&mut chunk).await?;
        let read = chunk.get(..n).filter(|read| !read.is_empty());
        leftover.extend_from_slice(read.ok_or(BodyError::Closed)?);
    }
    leftover.truncate(length);
    Ok(leftover)
}

/// The bytes of a response carrying a JSON body, closing the connection.
pub fn json_response(status: u16, reason: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The token of an `Authorization: Bearer TOKEN` header value, trimmed.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    authorization
        .strip_prefix("Bearer ")
        .or_else(|| authorization.strip_prefix("bearer "))
        .map(str::trim)
}

/// Constant-time token comparison (over fixed-length digests, so the length
/// of the secret does not leak either).
pub fn token_matches(expected: &str, presented: &str) -> bool {
    let a = Sha256::digest(expected.as_bytes());
    let b = Sha256::digest(presented.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The bytes of a plain response that closes the connection.
pub fn response(status: u16, reason: &str) -> String {
    let extra = if status == 401 {
        "WWW-Authenticate: Bearer\r\n"
    } else {
        ""
    };
    format!("HTTP/1.1 {status} {reason}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n")
}

/// The 101 answer to an accepted upgrade.
pub fn switching_protocols(accept: &str) -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(lines: &str) -> RequestHead {
        parse_head(
            format!("{lines}\r\n\r\n")
                .replace('\n', "\r\n")
                .replace("\r\r", "\r")
                .as_bytes(),
        )
        .unwrap()
    }

    const UPGRADE: &str = "GET / HTTP/1.1\nHost: x\nConnection: keep-alive, Upgrade\nUpgrade: websocket\nSec-WebSocket-Version: 13\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==";

    #[test]
    fn upgrade_is_accepted_with_the_rfc_accept_key() {
        assert_eq!(
            decide(&head(UPGRADE), &AccessPolicy::default()),
            Decision::Upgrade {
                accept: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into()
            }
        );
    }

    #[test]
    fn readyz_origin_and_token_rules() {
        let policy = AccessPolicy::default();
        assert!(matches!(
            decide(&head("GET /readyz HTTP/1.1"), &policy),
            Decision::Respond { status: 200, .. }
        ));
        assert!(matches!(
            decide(&head("GET /readyz HTTP/1.1\nOrigin: http://evil"), &policy),
            Decision::Respond { status: 403, .. }
        ));
        let allowed = AccessPolicy {
            allowed_origins: vec!["http://ok".into()],
            ..Default::default()
        };
        assert!(matches!(
            decide(&head(&format!("{UPGRADE}\nOrigin: http://ok")), &allowed),
            Decision::Upgrade { .. }
        ));
        let secured = AccessPolicy {
            token: Some("s3cret".into()),
            ..Default::default()
        };
        assert!(matches!(
            decide(&head(UPGRADE), &secured),
            Decision::Respond { status: 401, .. }
        ));
        assert!(matches!(
            decide(
                &head(&format!("{UPGRADE}\nAuthorization: Bearer nope")),
                &secured
            ),
            Decision::Respond { status: 401, .. }
        ));
        assert!(matches!(
            decide(
                &head(&format!("{UPGRADE}\nAuthorization: Bearer s3cret")),
                &secured
            ),
            Decision::Upgrade { .. }
        ));
        assert!(matches!(
            decide(&head("GET / HTTP/1.1"), &policy),
            Decision::Respond { status: 426, .. }
        ));
    }

    #[test]
    fn metrics_are_behind_the_token_of_the_listener() {
        let open = AccessPolicy::default();
        let metrics = head("GET /metrics HTTP/1.1");
        assert_eq!(decide(&metrics, &open), Decision::Metrics);
        assert!(matches!(
            decide(&head("POST /metrics HTTP/1.1"), &open),
            Decision::Respond { status: 405, .. }
        ));
        let secured = AccessPolicy {
            token: Some("s3cret".into()),
            ..Default::default()
        };
        assert!(matches!(
            decide(&metrics, &secured),
            Decision::Respond { status: 401, .. }
        ));
        let presented = head("GET /metrics HTTP/1.1\nAuthorization: Bearer s3cret");
        assert_eq!(decide(&presented, &secured), Decision::Metrics);
    }
}
