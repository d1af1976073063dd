//! The one parsed form of an `http`, `https`, `ws` or `wss` URL that
//! codexbox dials (registries, rendezvous sockets, `http/request`, upstream
//! proxies): scheme, bare host, port with the scheme's default, the URI to
//! send, and a redacted text for messages (no userinfo, query or fragment).

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use http::Uri;

/// Why a URL is not one codexbox dials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid URL `{url}`: {reason}")]
pub struct UrlError {
    /// The URL, redacted.
    pub url: String,
    pub reason: &'static str,
}

/// A URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
    Ws,
    Wss,
}

impl Scheme {
    fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Self::Http),
            "https" => Some(Self::Https),
            "ws" => Some(Self::Ws),
            "wss" => Some(Self::Wss),
            _ => None,
        }
    }

    /// Whether the connection runs TLS.
    pub fn is_secure(self) -> bool {
        matches!(self, Self::Https | Self::Wss)
    }

    fn default_port(self) -> u16 {
        if self.is_secure() {
            443
        } else {
            80
        }
    }
}

/// A parsed URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebUrl {
    scheme: Scheme,
    /// The host alone: no brackets, lower case.
    host: String,
    port: u16,
    uri: Uri,
}

impl WebUrl {
    /// Parses `http(s)://` or `ws(s)://` URLs (userinfo allowed, and never
    /// shown again).
    pub fn parse(url: &str) -> Result<Self, UrlError> {
        let invalid = |reason| UrlError {
            url: redact(url),
            reason,
        };
        let uri: Uri = url.trim().parse().map_err(|_| invalid("not a URL"))?;
        let scheme = uri
            .scheme_str()
            .and_then(Scheme::parse)
            .ok_or_else(|| invalid("the scheme must be http, https, ws or wss"))?;
        let authority = uri.authority().ok_or_else(|| invalid("missing host"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if host.is_empty() {
            return Err(invalid("missing host"));
        }
        let port = authority.port_u16().unwrap_or(scheme.default_port());
        Ok(Self {
            scheme,
            host,
            port,
            uri,
        })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host without brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, the scheme's default when the URL names none.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the connection runs TLS (`https`, `wss`).
    pub fn is_secure(&self) -> bool {
        self.scheme.is_secure()
    }

    /// `host:port` to dial, IPv6 in brackets.
    pub fn authority(&self) -> String {
        host_port(&self.host, self.port)
    }

    /// The `Host` header: the URL's own authority without userinfo.
    pub fn host_header(&self) -> String {
        let host = self
            .uri
            .authority()
            .map_or(self.host.as_str(), |authority| authority.host());
        match self.uri.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        }
    }

    /// Path and query, at least `/`.
    pub fn path_and_query(&self) -> &str {
        self.uri.path_and_query().map_or("/", |pq| pq.as_str())
    }

    /// The whole URI.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// Whether the host is `localhost`, 127.0.0.0/8 or `::1`.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// The socket address when the host is a literal IP address.
    pub fn literal_address(&self) -> Option<SocketAddr> {
        let ip: IpAddr = self.host.parse().ok()?;
        Some(SocketAddr::new(ip, self.port))
    }
}

impl fmt::Display for WebUrl {
    /// The URL without userinfo, query or fragment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = self.uri.scheme_str().unwrap_or("http");
        write!(f, "{scheme}://{}{}", self.host_header(), self.uri.path())
    }
}

/// `host:port`, an IPv6 host in brackets.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `text` with its query, fragment and userinfo removed (for messages
/// about URLs that may not even parse).
pub fn redact(text: &str) -> String {
    let cut = text.find(['?', '#']).unwrap_or(text.len());
    let url = text.get(..cut).unwrap_or(text);
    match (url.find("://"), url.rfind('@')) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_userinfo_ipv6_and_default_ports() {
        let url = WebUrl::parse("http://u:p@127.0.0.1:8080/base?x=1/cloud").unwrap();
        assert_eq!(url.authority(), "127.0.0.1:8080");
        assert_eq!(url.host_header(), "127.0.0.1:8080");
        assert_eq!(url.path_and_query(), "/base?x=1/cloud");
        assert_eq!(url.to_string(), "http://127.0.0.1:8080/base");
        assert!(url.is_loopback());
        let url = WebUrl::parse("ws://[::1]/relay").unwrap();
        assert_eq!((url.authority().as_str(), url.host()), ("[::1]:80", "::1"));
        assert_eq!(url.literal_address(), "[::1]:80".parse().ok());
        assert!(url.is_loopback());
        assert!(WebUrl::parse("https://Example.com").unwrap().is_secure());
        assert_eq!(WebUrl::parse("wss://h").unwrap().port(), 443);
        assert!(!WebUrl::parse("http://example.com").unwrap().is_loopback());
        assert!(WebUrl::parse("ftp://x").is_err());
        assert!(WebUrl::parse("not a url").is_err());
        assert!(WebUrl::parse("http://u:secret@/x").is_err());
    }

    #[test]
    fn redaction_drops_query_fragment_and_userinfo() {
        assert_eq!(
            redact("http://user:secret@host:1/p?token=secret#f"),
            "http://host:1/p"
        );
        assert_eq!(redact("ws://h/relay?sig=abc"), "ws://h/relay");
        assert_eq!(redact("http://a@b@host/"), "http://host/");
        let err = WebUrl::parse("gopher://u:secret@h/?k=v").unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }
}
