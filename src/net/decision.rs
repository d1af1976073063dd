//! What the proxy decided and how a denial looks: reasons with their
//! `x-proxy-error` header and human message (docs/network.md, the
//! reference's plus `dns_failed`), the protocol and source of a decision, and the
//! [`Decision`] record every caller sees (audit log line, exec-server
//! notification, blocked summary). Pure data; emitting lives in `net::audit`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Why a destination was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DenyReason {
    /// No allow entry covers the host.
    NotAllowed,
    /// A local or private destination without permission for it.
    NotAllowedLocal,
    /// A deny entry covers the host.
    Denied,
    /// `limited` mode and a method other than GET/HEAD/OPTIONS.
    MethodNotAllowed,
    /// `limited` mode and HTTPS (would need TLS interception).
    MitmRequired,
    /// The name did not resolve (or resolution timed out).
    DnsFailed,
    /// Unix-socket forwarding is not available on Linux.
    UnixSocketUnsupported,
}

impl DenyReason {
    /// The wire name (`not_allowed`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::NotAllowed => "not_allowed",
            DenyReason::NotAllowedLocal => "not_allowed_local",
            DenyReason::Denied => "denied",
            DenyReason::MethodNotAllowed => "method_not_allowed",
            DenyReason::MitmRequired => "mitm_required",
            DenyReason::DnsFailed => "dns_failed",
            DenyReason::UnixSocketUnsupported => "unix_socket_unsupported",
        }
    }

    /// The `x-proxy-error` header value.
    pub fn header(self) -> &'static str {
        match self {
            DenyReason::NotAllowed | DenyReason::NotAllowedLocal => "blocked-by-allowlist",
            DenyReason::Denied => "blocked-by-denylist",
            DenyReason::MethodNotAllowed => "blocked-by-method-policy",
            DenyReason::MitmRequired => "blocked-by-mitm-required",
            DenyReason::DnsFailed => "blocked-by-dns-failure",
            DenyReason::UnixSocketUnsupported => "blocked-by-policy",
        }
    }

    /// The human message (403 bodies, SOCKS logs).
    pub fn message(self) -> &'static str {
        match self {
            DenyReason::NotAllowed => "Domain not in allowlist.",
            DenyReason::NotAllowedLocal => "Sandbox policy blocks local/private network addresses.",
            DenyReason::Denied => "Domain denied by the sandbox policy.",
            DenyReason::MethodNotAllowed => "Method not allowed in limited mode.",
            DenyReason::MitmRequired => "MITM required for limited HTTPS.",
            DenyReason::DnsFailed => "Domain name could not be resolved.",
            DenyReason::UnixSocketUnsupported => "Request blocked by network policy.",
        }
    }

    /// Short words for a person (`codexbox: blocked HOST:PORT (…)`).
    pub fn summary(self) -> &'static str {
        match self {
            DenyReason::NotAllowed => "not in allowlist",
            DenyReason::NotAllowedLocal => "local/private address",
            DenyReason::Denied => "denied",
            DenyReason::MethodNotAllowed => "method not allowed in limited mode",
            DenyReason::MitmRequired => "HTTPS not allowed in limited mode",
            DenyReason::DnsFailed => "name did not resolve",
            DenyReason::UnixSocketUnsupported => "unix sockets unsupported",
        }
    }

    /// Which part of the proxy decided.
    pub fn source(self) -> Source {
        match self {
            DenyReason::MethodNotAllowed | DenyReason::MitmRequired => Source::ModeGuard,
            DenyReason::UnixSocketUnsupported => Source::ProxyState,
            _ => Source::BaselinePolicy,
        }
    }
}

/// Which part of the proxy decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    BaselinePolicy,
    ModeGuard,
    ProxyState,
}

/// How the destination was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Absolute-form plain HTTP.
    Http,
    /// HTTP CONNECT.
    HttpsConnect,
    Socks5Tcp,
    Socks5Udp,
    /// A name asked by the in-sandbox DNS stub.
    Dns,
}

impl Protocol {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::HttpsConnect => "https_connect",
            Protocol::Socks5Tcp => "socks5_tcp",
            Protocol::Socks5Udp => "socks5_udp",
            Protocol::Dns => "dns",
        }
    }
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny,
}

/// One policy decision, as written to the audit log (one JSON line, keys in
/// this order; `reason` is `allow` for an allowed destination).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    pub decision: Verdict,
    pub reason: &'static str,
    pub host: String,
    pub port: u16,
    pub protocol: Protocol,
    /// The HTTP method, `CONNECT`, or `none`.
    pub method: String,
    /// The client's address as the proxy saw it.
    pub client: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<&'static str>,
    /// What `decision`, `reason`, `source` and `message` were written from.
    #[serde(skip)]
    denied: Option<DenyReason>,
}

impl Decision {
    /// A decision stamped now. `denied: None` is an allow.
    pub fn new(
        denied: Option<DenyReason>,
        host: &str,
        port: u16,
        protocol: Protocol,
        method: &str,
        client: &str,
    ) -> Self {
        Self {
            timestamp: rfc3339_now(),
            decision: if denied.is_some() {
                Verdict::Deny
            } else {
                Verdict::Allow
            },
            reason: denied.map_or("allow", DenyReason::as_str),
            host: host.to_owned(),
            port,
            protocol,
            method: method.to_owned(),
            client: client.to_owned(),
            source: denied.map(DenyReason::source),
            message: denied.map(DenyReason::message),
            denied,
        }
    }

    /// The reason of a denial.
    pub fn deny_reason(&self) -> Option<DenyReason> {
        self.denied
    }
}

/// The JSON body of a plain-HTTP 403 (reference key order; `decision` is
/// always `deny` here).
#[derive(Debug, Serialize)]
pub struct BlockedBody<'a> {
    pub status: &'static str,
    pub host: &'a str,
    pub reason: &'static str,
    pub decision: Verdict,
    pub source: Source,
    pub protocol: Protocol,
    pub port: u16,
    pub message: &'static str,
}

impl<'a> BlockedBody<'a> {
    /// The body for a refused request.
    pub fn new(reason: DenyReason, host: &'a str, port: u16, protocol: Protocol) -> Self {
        Self {
            status: "blocked",
            host,
            reason: reason.as_str(),
            decision: Verdict::Deny,
            source: reason.source(),
            protocol,
            port,
            message: reason.message(),
        }
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_now() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since.as_secs(), since.subsec_millis())
}

fn rfc3339(secs: u64, millis: u32) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// algorithm, unsigned since the input is never before the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc_with_millis() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_735_689_600, 5), "2025-01-01T00:00:00.005Z");
        assert_eq!(rfc3339(951_782_400 + 3661, 999), "2000-02-29T01:01:01.999Z");
    }

    #[test]
    fn blocked_body_has_the_reference_key_order() {
        let body = serde_json::to_string(&BlockedBody::new(
            DenyReason::NotAllowed,
            "example.com",
            80,
            Protocol::Http,
        ))
        .unwrap();
        assert_eq!(
            body,
            r#"{"status":"blocked","host":"example.com","reason":"not_allowed","decision":"deny","source":"baseline_policy","protocol":"http","port":80,"message":"Domain not in allowlist."}"#
        );
    }

    #[test]
    fn decisions_round_trip_their_reason() {
        let d = Decision::new(
            Some(DenyReason::DnsFailed),
            "a",
            1,
            Protocol::Dns,
            "none",
            "c",
        );
        assert_eq!(d.deny_reason(), Some(DenyReason::DnsFailed));
        assert_eq!(
            Decision::new(None, "a", 1, Protocol::Http, "GET", "c").deny_reason(),
            None
        );
    }
}
