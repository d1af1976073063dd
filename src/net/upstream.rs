//! Chaining to an upstream HTTP proxy: which one applies (read from the
//! process's own `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`, upper or lower
//! case, and `NO_PROXY`), and opening a CONNECT tunnel or a plain
//! connection through it. Shared by the proxy (`allowUpstreamProxy`) and
//! `http/request`. Only `http://` upstreams are used; others are ignored
//! with a warning.

use std::io;
use std::net::IpAddr;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::dial::dial_unchecked;
use super::exchange::on_connection;
use crate::web_url::{host_port, WebUrl};

/// Why a tunnel through the upstream could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot connect to upstream proxy {proxy}: {source}")]
    Connect {
        proxy: String,
        #[source]
        source: io::Error,
    },
    #[error("upstream proxy {proxy} failed: {source}")]
    Http {
        proxy: String,
        #[source]
        source: hyper::Error,
    },
    #[error("upstream proxy {proxy} answered {status} to CONNECT {target}")]
    Refused {
        proxy: String,
        target: String,
        status: u16,
    },
    #[error("upstream proxy {proxy} tunnel could not be taken over")]
    Takeover { proxy: String },
}

/// One upstream proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyEndpoint {
    pub host: String,
    pub port: u16,
    /// `Basic …` from the URL's userinfo.
    pub authorization: Option<String>,
}

impl ProxyEndpoint {
    /// Parses `http://[user:pass@]host[:port][/]` (scheme optional).
    pub fn parse(url: &str) -> Option<Self> {
        let url = url.trim();
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some(_) => return None,
            None => url,
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        let parsed: http::uri::Authority = hostport.parse().ok()?;
        let host = parsed.host().trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return None;
        }
        let authorization = userinfo.map(|user| {
            let decoded: Vec<u8> = percent_encoding::percent_decode_str(user).collect();
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(decoded)
            )
        });
        Some(Self {
            host: host.to_owned(),
            port: parsed.port_u16().unwrap_or(80),
            authorization,
        })
    }

    /// `host:port` for messages and the Host header.
    pub fn display(&self) -> String {
        host_port(&self.host, self.port)
    }

    /// A plain connection to the upstream (for absolute-form requests).
    pub async fn connect(&self) -> Result<TcpStream, UpstreamError> {
        dial_unchecked(&self.host, self.port)
            .await
            .map_err(|source| UpstreamError::Connect {
                proxy: self.display(),
                source,
            })
    }

    /// A CONNECT tunnel to `target` (`host:port`) through the upstream.
    /// Bytes the upstream sent after its `200` are returned with the stream.
    /// The exchange runs in the caller's task: a refusal closes the
    /// connection to the upstream when this returns.
    pub async fn tunnel(&self, target: &str) -> Result<(TcpStream, Bytes), UpstreamError> {
        let proxy = self.display();
        let http_error = |source| UpstreamError::Http {
            proxy: proxy.clone(),
            source,
        };
        let stream = self.connect().await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http_error)?;
        let mut request = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri(target)
            .header(http::header::HOST, target);
        if let Some(auth) = &self.authorization {
            request = request.header(http::header::PROXY_AUTHORIZATION, auth);
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|_| UpstreamError::Refused {
                proxy: proxy.clone(),
                target: target.to_owned(),
                status: 0,
            })?;
        let exchange = async {
            let response = sender.send_request(request).await.map_err(http_error)?;
            if response.status() != http::StatusCode::OK {
                return Err(UpstreamError::Refused {
                    proxy: proxy.clone(),
                    target: target.to_owned(),
                    status: response.status().as_u16(),
                });
            }
            hyper::upgrade::on(response).await.map_err(http_error)
        };
        let upgraded = on_connection(conn.with_upgrades(), exchange).await?;
        let parts =
            upgraded
                .downcast::<TokioIo<TcpStream>>()
                .map_err(|_| UpstreamError::Takeover {
                    proxy: proxy.clone(),
                })?;
        Ok((parts.io.into_inner(), parts.read_buf))
    }
}

/// The upstream proxies configured in an environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstream {
    http: Option<ProxyEndpoint>,
    https: Option<ProxyEndpoint>,
    all: Option<ProxyEndpoint>,
    no_proxy: NoProxy,
}

impl Upstream {
    /// Reads the proxy variables through `var` (first non-empty of the
    /// upper- and lower-case spelling).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        let value = |upper: &str| {
            [upper.to_owned(), upper.to_ascii_lowercase()]
                .iter()
                .filter_map(|k| var(k))
                .find(|v| !v.trim().is_empty())
        };
        let pick = |upper: &str| {
            let endpoint = ProxyEndpoint::parse(&value(upper)?);
            if endpoint.is_none() {
                tracing::warn!("ignoring {upper}: only http:// upstream proxies are supported");
            }
            endpoint
        };
        Self {
            http: pick("HTTP_PROXY"),
            https: pick("HTTPS_PROXY"),
            all: pick("ALL_PROXY"),
            no_proxy: NoProxy::parse(&value("NO_PROXY").unwrap_or_default()),
        }
    }

    /// From this process's environment, read (and any warning about it
    /// given) once: the environment of a running process does not change.
    pub fn from_process_env() -> Self {
        static UPSTREAM: std::sync::OnceLock<Upstream> = std::sync::OnceLock::new();
        UPSTREAM
            .get_or_init(|| Self::from_env(|key| std::env::var(key).ok()))
            .clone()
    }

    /// The upstream the proxy chains a CONNECT target to: HTTPS, HTTP, ALL.
    pub fn for_tunnel(&self, host: &str, port: u16) -> Option<&ProxyEndpoint> {
        if self.no_proxy.bypasses(host, port) {
            return None;
        }
        self.https
            .as_ref()
            .or(self.http.as_ref())
            .or(self.all.as_ref())
    }

    /// The upstream the proxy chains a plain-HTTP target to: HTTP, ALL.
    pub fn for_plain(&self, host: &str, port: u16) -> Option<&ProxyEndpoint> {
        if self.no_proxy.bypasses(host, port) {
            return None;
        }
        self.http.as_ref().or(self.all.as_ref())
    }

    /// The proxy codexbox's own client uses for `url`, as curl picks it:
    /// `HTTPS_PROXY` for `https`/`wss`, `HTTP_PROXY` for `http`/`ws`,
    /// else `ALL_PROXY`; none when `NO_PROXY` covers the host.
    pub fn for_url(&self, url: &WebUrl) -> Option<&ProxyEndpoint> {
        if self.no_proxy.bypasses(url.host(), url.port()) {
            return None;
        }
        let by_scheme = if url.is_secure() {
            self.https.as_ref()
        } else {
            self.http.as_ref()
        };
        by_scheme.or(self.all.as_ref())
    }

    /// Whether any upstream is configured.
    pub fn is_empty(&self) -> bool {
        self.http.is_none() && self.https.is_none() && self.all.is_none()
    }
}

/// The hosts `NO_PROXY` sends direct: comma-separated entries, each `*`
/// (every host), an IP address or CIDR block (`10.0.0.0/8`, `::1`,
/// `[::1]`), or a domain matching itself and its subdomains (a leading
/// `.` or `*.` changes nothing); any entry may end in `:PORT` to cover
/// that port only. Names are compared as written, so `localhost` does not
/// cover `127.0.0.1`: loopback is not special unless listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoProxy {
    entries: Vec<NoProxyEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct NoProxyEntry {
    host: NoProxyHost,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum NoProxyHost {
    All,
    Network { ip: IpAddr, prefix: u8 },
    Domain(String),
}

impl NoProxy {
    /// Parses a `NO_PROXY` value; entries that mean nothing are skipped.
    pub fn parse(value: &str) -> Self {
        Self {
            entries: value.split(',').filter_map(NoProxyEntry::parse).collect(),
        }
    }

    /// Whether a connection to `host` (no brackets needed) on `port` goes
    /// direct.
    pub fn bypasses(&self, host: &str, port: u16) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        self.entries.iter().any(|entry| {
            !matches!(entry.port, Some(wanted) if wanted != port)
                && match &entry.host {
                    NoProxyHost::All => true,
                    NoProxyHost::Network { ip: net, prefix } => {
                        ip.is_some_and(|ip| in_network(ip, *net, *prefix))
                    }
                    NoProxyHost::Domain(domain) => {
                        host == *domain
                            || host
                                .strip_suffix(domain.as_str())
                                .is_some_and(|rest| rest.ends_with('.'))
                    }
                }
        })
    }
}

impl NoProxyEntry {
    fn parse(entry: &str) -> Option<Self> {
        let entry = entry.trim().to_ascii_lowercase();
        if entry.is_empty() {
            return None;
        }
        if entry == "*" {
            return Some(Self {
                host: NoProxyHost::All,
                port: None,
            });
        }
        let (host, port) = split_port(&entry)?;
        if let Some(network) = parse_network(host) {
            return Some(Self {
                host: network,
                port,
            });
        }
        let domain = host
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .trim_end_matches('.');
        (!domain.is_empty() && !domain.contains(['/', '*', '[', ']'])).then(|| Self {
            host: NoProxyHost::Domain(domain.to_owned()),
            port,
        })
    }
}

/// `host` and the port of `host:PORT` or `[v6]:PORT`; a bare IPv6
/// address keeps all its colons. `None` for a port that is not a number.
fn split_port(entry: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() || after.starts_with('/') => Some((entry, None)),
            None => None,
        };
    }
    match entry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Some((host, Some(port.parse().ok()?))),
        _ => Some((entry, None)),
    }
}

/// An IP address (`/32` or `/128`) or a CIDR block.
fn parse_network(text: &str) -> Option<NoProxyHost> {
    let text = text.replace(['[', ']'], "");
    let (address, prefix) = match text.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix.parse::<u8>().ok()?)),
        None => (text.as_str(), None),
    };
    let ip: IpAddr = address.parse().ok()?;
    let full = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = prefix.unwrap_or(full);
    (prefix <= full).then_some(NoProxyHost::Network { ip, prefix })
}

fn in_network(ip: IpAddr, network: IpAddr, prefix: u8) -> bool {
    let (ip, network, width) = match (ip, network) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            (u128::from(u32::from(ip)), u128::from(u32::from(net)), 32u32)
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => (u128::from(ip), u128::from(net), 128),
        _ => return false,
    };
    let shift = width.saturating_sub(u32::from(prefix));
    let mask = u128::MAX.checked_shl(shift).unwrap_or(0);
    ip & mask == network & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CONNECT through an upstream on 127.0.0.1 that answers `answer`
    /// and keeps the connection open; the upstream's task ends when the
    /// tunnel's side closes it.
    async fn tunnel_answered(
        answer: &'static [u8],
    ) -> (
        Result<(TcpStream, Bytes), UpstreamError>,
        tokio::task::JoinHandle<()>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let (mut seen, mut buf) = (Vec::new(), [0u8; 512]);
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request head came whole");
                seen.extend_from_slice(&buf[..n]);
            }
            stream.write_all(answer).await.unwrap();
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let endpoint = ProxyEndpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let tunnel = tokio::time::timeout(WAIT, endpoint.tunnel("example.test:443")).await;
        (tunnel.expect("the tunnel is answered in time"), served)
    }

    const WAIT: std::time::Duration = std::time::Duration::from_secs(10);

    #[tokio::test]
    async fn a_refused_tunnel_closes_the_connection_to_the_upstream() {
        let answer = b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 4\r\n\r\nnope";
        let (tunnel, served) = tunnel_answered(answer).await;
        assert!(
            matches!(tunnel, Err(UpstreamError::Refused { status: 407, .. })),
            "{tunnel:?}"
        );
        let closed = tokio::time::timeout(WAIT, served).await;
        assert!(matches!(closed, Ok(Ok(()))), "{closed:?}");
    }

    #[tokio::test]
    async fn an_accepted_tunnel_hands_over_the_socket_and_early_bytes() {
        let answer = b"HTTP/1.1 200 Connection Established\r\n\r\nearly";
        let (tunnel, _served) = tunnel_answered(answer).await;
        let Ok((_stream, early)) = tunnel else {
            panic!("{tunnel:?}");
        };
        assert_eq!(&early[..], b"early");
    }

    #[test]
    fn endpoints_parse_userinfo_ports_and_refuse_other_schemes() {
        let e = ProxyEndpoint::parse("http://u%40x:p@proxy.corp:3128/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("proxy.corp", 3128));
        assert_eq!(e.authorization.as_deref(), Some("Basic dUB4OnA="));
        let e = ProxyEndpoint::parse("[::1]:8080").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.display()),
            ("::1", 8080, "[::1]:8080".to_owned())
        );
        assert_eq!(ProxyEndpoint::parse("http://p").unwrap().port, 80);
        assert!(ProxyEndpoint::parse("socks5h://127.0.0.1:1080").is_none());
        assert!(ProxyEndpoint::parse("https://p:1").is_none());
    }

    #[test]
    fn selection_order_and_no_proxy() {
        let env = |k: &str| match k {
            "http_proxy" => Some("http://h:1".to_owned()),
            "ALL_PROXY" => Some("http://a:2".to_owned()),
            "NO_PROXY" => Some("internal.corp, .skip.me".to_owned()),
            _ => None,
        };
        let up = Upstream::from_env(env);
        assert_eq!(up.for_tunnel("x.com", 443).unwrap().host, "h");
        assert_eq!(up.for_plain("x.com", 80).unwrap().host, "h");
        assert!(up.for_tunnel("internal.corp", 443).is_none());
        assert!(up.for_plain("a.skip.me", 80).is_none());
        assert!(Upstream::from_env(|_| None).is_empty());
    }

    #[test]
    fn the_client_picks_the_proxy_by_scheme_as_curl_does() {
        let url = |text: &str| WebUrl::parse(text).unwrap();
        let env = |k: &str| match k {
            "HTTPS_PROXY" => Some("http://s:1".to_owned()),
            "http_proxy" => Some("http://p:2".to_owned()),
            _ => None,
        };
        let up = Upstream::from_env(env);
        assert_eq!(up.for_url(&url("https://x.test/")).unwrap().host, "s");
        assert_eq!(up.for_url(&url("wss://x.test/")).unwrap().host, "s");
        assert_eq!(up.for_url(&url("http://x.test/")).unwrap().host, "p");
        assert_eq!(up.for_url(&url("ws://127.0.0.1:9/")).unwrap().host, "p");
        let only_http = Upstream::from_env(|k| (k == "HTTP_PROXY").then(|| "http://p:2".into()));
        assert!(only_http.for_url(&url("https://x.test/")).is_none());
        let all = Upstream::from_env(|k| (k == "all_proxy").then(|| "http://a:3".into()));
        assert_eq!(all.for_url(&url("wss://x.test/")).unwrap().host, "a");
    }

    #[test]
    fn no_proxy_matches_hosts_suffixes_addresses_networks_and_ports() {
        let rules = NoProxy::parse(
            " .corp.test, *.wild.test,example.org , 10.0.0.0/8, ::1, [fe80::1]:8443, only.port:8080, 192.168.1.7,bad:port, ",
        );
        for (host, port) in [
            ("a.corp.test", 443),
            ("corp.test", 80),
            ("x.wild.test", 1),
            ("EXAMPLE.org.", 80),
            ("www.example.org", 80),
            ("10.20.30.40", 80),
            ("[::1]", 80),
            ("fe80::1", 8443),
            ("only.port", 8080),
            ("192.168.1.7", 1),
        ] {
            assert!(rules.bypasses(host, port), "{host}:{port} goes direct");
        }
        for (host, port) in [
            ("notexample.org", 80),
            ("corp.test.evil", 80),
            ("11.0.0.1", 80),
            ("fe80::1", 443),
            ("only.port", 80),
            ("127.0.0.1", 80),
            ("localhost", 80),
            ("192.168.1.8", 1),
            ("bad", 80),
        ] {
            assert!(!rules.bypasses(host, port), "{host}:{port} goes through");
        }
        assert!(NoProxy::parse("*").bypasses("anything", 1));
        assert!(NoProxy::parse("localhost").bypasses("localhost", 1));
        assert!(!NoProxy::parse("localhost").bypasses("127.0.0.1", 1));
        assert!(NoProxy::parse("127.0.0.0/8").bypasses("127.0.0.2", 1));
        assert!(NoProxy::parse("::/0").bypasses("2001:db8::1", 1));
        assert!(!NoProxy::parse("::/0").bypasses("10.0.0.1", 1));
        assert!(NoProxy::parse("").entries.is_empty());
    }
}
