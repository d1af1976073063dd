//! The HTTP rules in front of a WebSocket (the exec-server's and
//! `connect`'s listeners; the rendezvous shares the pieces): `GET /readyz`,
//! browser origins refused (403), missing or wrong bearer tokens refused
//! (401), `GET /metrics` sent to the metrics (behind the same token), and
//! the upgrade accepted (101), all decided from the request
//! head before any byte goes to the WebSocket codec. Requests are read and
//! answered by hyper ([`crate::net::http_server`]).

use std::time::Duration;

use http::header::{
    HeaderValue, AUTHORIZATION, CONNECTION, CONTENT_TYPE, ORIGIN, SEC_WEBSOCKET_ACCEPT,
    SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE, WWW_AUTHENTICATE,
};
pub use http::StatusCode;
use http::{HeaderMap, Method, Request, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use crate::net::http_server::{status, Body};

/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// Answer with this status and close.
    Respond(StatusCode),
    /// Answer with the metrics exposition and close.
    Metrics,
}

/// Applies origin, readiness, auth and upgrade rules, in that order.
pub fn decide<B>(request: &Request<B>, policy: &AccessPolicy) -> Decision {
    if !origin_allowed(request.headers(), &policy.allowed_origins) {
        return Decision::Respond(StatusCode::FORBIDDEN);
    }
    if request.uri().path() == "/readyz" {
        return Decision::Respond(match *request.method() {
            Method::GET | Method::HEAD => StatusCode::OK,
            _ => StatusCode::METHOD_NOT_ALLOWED,
        });
    }
    if let Some(expected) = &policy.token {
        let presented = header(request.headers(), AUTHORIZATION).and_then(bearer_token);
        if !presented.is_some_and(|p| token_matches(expected, p)) {
            return Decision::Respond(StatusCode::UNAUTHORIZED);
        }
    }
    if request.uri().path() == crate::metrics::PATH {
        return match *request.method() {
            Method::GET => Decision::Metrics,
            _ => Decision::Respond(StatusCode::METHOD_NOT_ALLOWED),
        };
    }
    match websocket_accept(request) {
        Some(accept) => Decision::Upgrade { accept },
        None => Decision::Respond(StatusCode::UPGRADE_REQUIRED),
    }
}

/// Whether the request carries no `Origin`, or one of `allowed`.
pub fn origin_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    headers
        .get_all(ORIGIN)
        .iter()
        .all(|origin| allowed.iter().any(|o| o.as_bytes() == origin.as_bytes()))
}

/// The first value of `name`, when it is text.
pub fn header(headers: &HeaderMap, name: http::header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// The `Sec-WebSocket-Accept` value when `request` is a valid WebSocket
/// upgrade.
pub fn websocket_accept<B>(request: &Request<B>) -> Option<String> {
    let headers = request.headers();
    let key = headers.get(SEC_WEBSOCKET_KEY)?;
    let is_upgrade = request.method() == Method::GET
        && has_token(headers, CONNECTION, "upgrade")
        && has_token(headers, UPGRADE, "websocket")
        && headers
            .get(SEC_WEBSOCKET_VERSION)
            .map(HeaderValue::as_bytes)
            == Some(b"13");
    is_upgrade.then(|| tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

fn has_token(headers: &HeaderMap, name: http::header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
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
    let expected = Sha256::digest(expected.as_bytes());
    let presented = Sha256::digest(presented.as_bytes());
    expected.ct_eq(&presented).into()
}

/// An empty answer with `code` (`WWW-Authenticate: Bearer` on a 401).
pub fn refusal(code: StatusCode) -> Response<Body> {
    let mut response = status(code);
    if code == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// An answer carrying a JSON body.
pub fn json(code: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The 101 answer to an accepted upgrade.
pub fn switching_protocols(accept: &str) -> Response<Body> {
    let mut response = status(StatusCode::SWITCHING_PROTOCOLS);
    let headers = response.headers_mut();
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(accept) {
        headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    const UPGRADE_HEADERS: &[(&str, &str)] = &[
        ("Host", "x"),
        ("Connection", "keep-alive, Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    fn upgrade_with(extra: &[(&str, &str)]) -> Request<()> {
        let mut headers = UPGRADE_HEADERS.to_vec();
        headers.extend_from_slice(extra);
        request("GET", "/", &headers)
    }

    #[test]
    fn upgrade_is_accepted_with_the_rfc_accept_key() {
        assert_eq!(
            decide(&upgrade_with(&[]), &AccessPolicy::default()),
            Decision::Upgrade {
                accept: "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".into()
            }
        );
    }

    #[test]
    fn readyz_origin_and_token_rules() {
        let policy = AccessPolicy::default();
        let respond = |code| Decision::Respond(code);
        assert_eq!(
            decide(&request("GET", "/readyz?x", &[]), &policy),
            respond(StatusCode::OK)
        );
        assert_eq!(
            decide(&request("POST", "/readyz", &[]), &policy),
            respond(StatusCode::METHOD_NOT_ALLOWED)
        );
        assert_eq!(
            decide(
                &request("GET", "/readyz", &[("Origin", "http://evil")]),
                &policy
            ),
            respond(StatusCode::FORBIDDEN)
        );
        let allowed = AccessPolicy {
            allowed_origins: vec!["http://ok".into()],
            ..Default::default()
        };
        assert!(matches!(
            decide(&upgrade_with(&[("Origin", "http://ok")]), &allowed),
            Decision::Upgrade { .. }
        ));
        assert_eq!(
            decide(
                &upgrade_with(&[("Origin", "http://ok"), ("Origin", "http://evil")]),
                &allowed
            ),
            respond(StatusCode::FORBIDDEN)
        );
        let secured = AccessPolicy {
            token: Some("s3cret".into()),
            ..Default::default()
        };
        assert_eq!(
            decide(&upgrade_with(&[]), &secured),
            respond(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            decide(&upgrade_with(&[("Authorization", "Bearer nope")]), &secured),
            respond(StatusCode::UNAUTHORIZED)
        );
        assert!(matches!(
            decide(
                &upgrade_with(&[("Authorization", "Bearer s3cret")]),
                &secured
            ),
            Decision::Upgrade { .. }
        ));
        assert_eq!(
            decide(&request("GET", "/", &[]), &policy),
            respond(StatusCode::UPGRADE_REQUIRED)
        );
    }

    #[test]
    fn metrics_are_behind_the_token_of_the_listener() {
        let open = AccessPolicy::default();
        let metrics = request("GET", "/metrics", &[]);
        assert_eq!(decide(&metrics, &open), Decision::Metrics);
        assert_eq!(
            decide(&request("POST", "/metrics", &[]), &open),
            Decision::Respond(StatusCode::METHOD_NOT_ALLOWED)
        );
        let secured = AccessPolicy {
            token: Some("s3cret".into()),
            ..Default::default()
        };
        assert_eq!(
            decide(&metrics, &secured),
            Decision::Respond(StatusCode::UNAUTHORIZED)
        );
        let presented = request("GET", "/metrics", &[("Authorization", "Bearer s3cret")]);
        assert_eq!(decide(&presented, &secured), Decision::Metrics);
    }

    #[test]
    fn tokens_match_only_themselves() {
        assert!(token_matches("s3cret", "s3cret"));
        assert!(!token_matches("s3cret", "s3cre"));
        assert!(!token_matches("s3cret", ""));
    }
}
