//! Which proxy variables a routed sandbox reroutes, and how: the loopback
//! endpoint a `*_PROXY` value names ([`parse_endpoint`]), the same value
//! pointed at a local port ([`rewrite_proxy_url`]), and the routes of an
//! environment ([`plan_routes`]). Pure text; no sockets, no namespaces.

use std::ffi::OsString;
use std::net::SocketAddr;

use super::RoutingError;
use crate::net::env::is_proxy_url_key;

/// One routed variable: its key, its value, the loopback endpoint it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRoute {
    pub env_key: String,
    pub value: String,
    pub endpoint: SocketAddr,
    /// `http://` (or no scheme): the proxy's HTTP listener.
    pub is_http: bool,
}

/// The default port of a proxy URL scheme.
fn default_port(scheme: &str) -> u16 {
    match scheme {
        "https" => 443,
        "socks5" | "socks5h" | "socks4" | "socks4a" => 1080,
        _ => 80,
    }
}

/// `(scheme, start, end)` of the host:port part of a proxy URL value
/// (after any userinfo), the scheme lowercased (`http` when absent).
fn authority_span(value: &str) -> (String, usize, usize) {
    let (scheme, start) = match value.find("://") {
        Some(i) => (value[..i].to_ascii_lowercase(), i + 3),
        None => ("http".to_owned(), 0),
    };
    let rest = &value[start..];
    let end = start + rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host_start = value[start..end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    (scheme, host_start, end)
}

/// The loopback endpoint a proxy URL names, if it names one.
pub fn parse_endpoint(value: &str) -> Option<(SocketAddr, String)> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let (scheme, start, end) = authority_span(value);
    let hostport = value.get(start..end)?;
    let authority: http::uri::Authority = hostport.parse().ok()?;
    let ip = match authority.host() {
        "localhost" | "127.0.0.1" => std::net::Ipv4Addr::LOCALHOST.into(),
        "[::1]" => std::net::Ipv6Addr::LOCALHOST.into(),
        _ => return None,
    };
    let port = authority
        .port_u16()
        .unwrap_or_else(|| default_port(&scheme));
    (port != 0).then(|| (SocketAddr::new(ip, port), scheme))
}

/// `value` with its host:port replaced by `127.0.0.1:port` (scheme,
/// userinfo, path and query kept).
pub fn rewrite_proxy_url(value: &str, port: u16) -> Option<String> {
    let trimmed = value.trim();
    parse_endpoint(trimmed)?;
    let (_, start, end) = authority_span(trimmed);
    Some(format!(
        "{}127.0.0.1:{port}{}",
        trimmed.get(..start)?,
        trimmed.get(end..)?
    ))
}

/// The routes of an environment, sorted by key.
pub fn plan_routes<'a>(
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<PlannedRoute>, RoutingError> {
    let mut any = false;
    let mut routes: Vec<PlannedRoute> = Vec::new();
    for (key, value) in env {
        if !is_proxy_url_key(key) || value.trim().is_empty() {
            continue;
        }
        any = true;
        if let Some((endpoint, scheme)) = parse_endpoint(value) {
            routes.push(PlannedRoute {
                env_key: key.to_owned(),
                value: value.to_owned(),
                endpoint,
                is_http: scheme == "http",
            });
        }
    }
    routes.sort_by(|a, b| a.env_key.cmp(&b.env_key));
    match (routes.is_empty(), any) {
        (false, _) => Ok(routes),
        (true, true) => Err(RoutingError::NoLoopbackEndpoint),
        (true, false) => Err(RoutingError::NoProxyEnv),
    }
}

/// The environment of this process as UTF-8 pairs (others cannot be
/// proxy URLs).
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v): (OsString, OsString)| {
            Some((k.into_string().ok()?, v.into_string().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_cover_every_proxy_key_including_websocket_ones() {
        let env = [
            ("https_proxy", "http://127.0.0.1:3128"),
            ("WSS_PROXY", "http://127.0.0.1:3128"),
            ("ALL_PROXY", "socks5h://localhost:8081"),
            ("NO_PROXY", "127.0.0.1"),
            ("HTTP_PROXY", "http://proxy.corp:3128"),
            ("PATH", "/bin"),
        ];
        let routes = plan_routes(env).unwrap();
        let keys: Vec<&str> = routes.iter().map(|r| r.env_key.as_str()).collect();
        assert_eq!(keys, ["ALL_PROXY", "WSS_PROXY", "https_proxy"]);
        assert!(!routes[0].is_http && routes[1].is_http);
        assert_eq!(routes[0].endpoint, "127.0.0.1:8081".parse().unwrap());
        assert!(matches!(
            plan_routes([("HTTP_PROXY", "http://10.0.0.1:1")]),
            Err(RoutingError::NoLoopbackEndpoint)
        ));
        assert!(matches!(
            plan_routes([("PATH", "/bin")]),
            Err(RoutingError::NoProxyEnv)
        ));
    }

    #[test]
    fn endpoints_default_their_ports_by_scheme_and_refuse_port_zero() {
        let port = |v: &str| parse_endpoint(v).map(|(a, _)| a.port());
        assert_eq!(port("http://127.0.0.1"), Some(80));
        assert_eq!(port("https://localhost"), Some(443));
        assert_eq!(port("socks5h://127.0.0.1"), Some(1080));
        assert_eq!(port("127.0.0.1:3128"), Some(3128));
        assert_eq!(port("http://user:pw@[::1]:8080/x"), Some(8080));
        assert_eq!(port("http://127.0.0.1:0"), None);
        assert_eq!(port("http://example.com:80"), None);
    }

    #[test]
    fn rewriting_keeps_scheme_userinfo_and_path() {
        assert_eq!(
            rewrite_proxy_url("socks5h://127.0.0.1:8081", 43210).unwrap(),
            "socks5h://127.0.0.1:43210"
        );
        assert_eq!(
            rewrite_proxy_url("http://u:p@localhost:3128/", 1).unwrap(),
            "http://u:p@127.0.0.1:1/"
        );
        assert_eq!(
            rewrite_proxy_url("127.0.0.1:3128", 2).unwrap(),
            "127.0.0.1:2"
        );
        assert_eq!(
            rewrite_proxy_url("http://[::1]:3128?x", 3).unwrap(),
            "http://127.0.0.1:3?x"
        );
        assert!(rewrite_proxy_url("http://example.com", 4).is_none());
    }
}
