//! Chaining to an upstream HTTP proxy: which one applies (read from the
//! process's own `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`, upper or lower
//! case, and `NO_PROXY`), and opening a CONNECT tunnel or a plain
//! connection through it. Shared by the proxy (`allowUpstreamProxy`) and
//! `http/request`. Only `http://` upstreams are used; others are ignored
//! with a warning.

use std::io;

use base64::Engine;
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::dial::dial_unchecked;

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
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(percent_decode(user))
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
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
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
        let conn = tokio::spawn(conn.with_upgrades());
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
        let response = sender.send_request(request).await.map_err(http_error)?;
        if response.status() != http::StatusCode::OK {
            conn.abort();
            return Err(UpstreamError::Refused {
                proxy,
                target: target.to_owned(),
                status: response.status().as_u16(),
            });
        }
        let upgraded = hyper::upgrade::on(response).await.map_err(http_error)?;
        let parts =
            upgraded
                .downcast::<TokioIo<TcpStream>>()
                .map_err(|_| UpstreamError::Takeover {
                    proxy: proxy.clone(),
                })?;
        Ok((parts.io.into_inner(), parts.read_buf))
    }
}

/// `%XX` decoding of URL userinfo (invalid escapes are kept as they are).
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(value)) => {
                out.push(value);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// The upstream proxies configured in an environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstream {
    http: Option<ProxyEndpoint>,
    https: Option<ProxyEndpoint>,
    all: Option<ProxyEndpoint>,
    /// `NO_PROXY` entries (lowercase, leading dots removed); `*` = all.
    no_proxy: Vec<String>,
}

impl Upstream {
    /// Reads the proxy variables through `var` (first non-empty of the
    /// upper- and lower-case spelling).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        let pick = |upper: &str| {
            let value = [upper.to_owned(), upper.to_ascii_lowercase()]
                .iter()
                .filter_map(|k| var(k))
                .find(|v| !v.trim().is_empty())?;
            let endpoint = ProxyEndpoint::parse(&value);
            if endpoint.is_none() {
                tracing::warn!("ignoring {upper}: only http:// upstream proxies are supported");
            }
            endpoint
        };
        let no_proxy = ["NO_PROXY", "no_proxy"]
            .iter()
            .filter_map(|k| var(k))
            .find(|v| !v.trim().is_empty())
            .unwrap_or_default()
            .split(',')
            .map(|entry| entry.trim().trim_start_matches('.').to_ascii_lowercase())
            .filter(|entry| !entry.is_empty())
            .collect();
        Self {
            http: pick("HTTP_PROXY"),
            https: pick("HTTPS_PROXY"),
            all: pick("ALL_PROXY"),
            no_proxy,
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

    fn bypassed(&self, host: &str) -> bool {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        self.no_proxy
            .iter()
            .any(|entry| entry == "*" || host == *entry || host.ends_with(&format!(".{entry}")))
    }

    /// The upstream for a CONNECT (or https) target: HTTPS, HTTP, ALL.
    pub fn for_tunnel(&self, host: &str) -> Option<&ProxyEndpoint> {
        if self.bypassed(host) {
            return None;
        }
        self.https
            .as_ref()
            .or(self.http.as_ref())
            .or(self.all.as_ref())
    }

    /// The upstream for a plain-HTTP target: HTTP, ALL.
    pub fn for_plain(&self, host: &str) -> Option<&ProxyEndpoint> {
        if self.bypassed(host) {
            return None;
        }
        self.http.as_ref().or(self.all.as_ref())
    }

    /// Whether any upstream is configured.
    pub fn is_empty(&self) -> bool {
        self.http.is_none() && self.https.is_none() && self.all.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(up.for_tunnel("x.com").unwrap().host, "h");
        assert_eq!(up.for_plain("x.com").unwrap().host, "h");
        assert!(up.for_tunnel("internal.corp").is_none());
        assert!(up.for_plain("a.skip.me").is_none());
        assert!(Upstream::from_env(|_| None).is_empty());
    }
}
