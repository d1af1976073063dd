//! Managed proxy routing (`--allow-network-for-proxy`,
//! docs/network.md): the command gets a network namespace with no route out,
//! and reaches the loopback proxies named by its `*_PROXY` variables only
//! through bridges: a TCP listener on the sandbox's 127.0.0.1, served by
//! the sandbox helper from outside the sandbox, which dials the proxy on
//! the host's loopback.
//!
//! Outer stage (host): [`plan_routes`] reads the proxy variables;
//! [`HostRouting::prepare`] numbers the distinct endpoints (one bridge
//! each) and, when there is an HTTP proxy for the DNS stub to ask,
//! prepares the sandbox's network namespace (`sandbox::routed_netns`: port
//! 53 bindable without a capability) and the `resolv.conf` the sandbox
//! sees, bound read-only over its own after every other mount, so a
//! restricted-read profile or a `/tmp` tmpfs cannot hide it. Per launch,
//! `sandbox::route_bridges` gives the inner stage one end of a socketpair
//! (its number travels in the [`RouteSpec`]) and serves what comes back
//! from a thread of the helper, which waits for the launcher anyway: the
//! bridges live exactly as long as the sandbox.
//!
//! Inner stage (inside, before seccomp): [`activate_inside`] checks that
//! the network namespace holds nothing but `lo`, binds a listener per
//! bridge and the DNS stub's socket on 127.0.0.1:53, hands them all to the
//! helper and closes its copies, and rewrites every routed variable to its
//! local port (and `NO_PROXY` to its loopback entries, the only
//! destinations still reachable directly). No process of ours stays inside
//! the sandbox to serve them: nothing there that the command could take
//! over through `/proc/PID/mem`, signals or descriptors. The command then
//! runs under the `ProxyRouted` seccomp mode: no new Unix sockets, so it
//! cannot reach host daemons through a socket path visible in the sandbox.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::net::env::is_proxy_url_key;
use crate::sandbox::route_bridges::{self, BridgeError, Bridges, MAX_BRIDGES};
use crate::sandbox::routed_netns::{NetnsError, PreparedNetns};

/// Errors of managed routing (one stderr line each, exit 1).
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    #[error("managed proxy mode requires proxy environment variables")]
    NoProxyEnv,
    #[error("managed proxy mode requires parseable loopback proxy endpoints")]
    NoLoopbackEndpoint,
    #[error("managed proxy mode supports at most {MAX_BRIDGES} distinct proxy endpoints, got {0}")]
    TooManyEndpoints(usize),
    #[error("managed proxy mode requires --proxy-route-spec")]
    MissingSpec,
    #[error("invalid proxy route spec: {0}")]
    Spec(String),
    #[error("proxy routing spec contained no routes")]
    EmptySpec,
    #[error("cannot write the sandbox's resolv.conf {}: {source}", .path.display())]
    ResolvConf {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot bind the local proxy bridge on 127.0.0.1: {0}")]
    BindLocal(#[source] io::Error),
    #[error(transparent)]
    Bridge(#[from] BridgeError),
    #[error("could not rewrite proxy URL for env key {0}")]
    Rewrite(String),
    #[error("cannot list the sandbox's network interfaces: {0}")]
    Interfaces(#[source] io::Error),
    #[error("the sandbox's network namespace is not isolated (interfaces: {0})")]
    NotIsolated(String),
}

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

/// The routes as the inner stage receives them (no URLs, no credentials).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    pub routes: Vec<SpecRoute>,
    /// How many loopback listeners to bind: one per distinct endpoint.
    pub bridges: usize,
    /// Whether to bind the DNS stub's socket too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dns_stub: bool,
    /// The inherited socket the listeners leave the sandbox through.
    pub handoff_fd: RawFd,
}

/// One routed variable and the bridge it goes through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecRoute {
    pub env_key: String,
    pub bridge: usize,
}

impl RouteSpec {
    /// Parses `--proxy-route-spec`.
    pub fn parse(text: &str) -> Result<Self, RoutingError> {
        let spec: RouteSpec =
            serde_json::from_str(text).map_err(|e| RoutingError::Spec(e.to_string()))?;
        if spec.routes.is_empty() {
            return Err(RoutingError::EmptySpec);
        }
        if spec.bridges == 0 || spec.bridges > MAX_BRIDGES {
            return Err(RoutingError::Spec(format!(
                "{} bridges (1 to {MAX_BRIDGES})",
                spec.bridges
            )));
        }
        if let Some(route) = spec.routes.iter().find(|r| r.bridge >= spec.bridges) {
            return Err(RoutingError::Spec(format!(
                "{} uses bridge {} of {}",
                route.env_key, route.bridge, spec.bridges
            )));
        }
        if spec.handoff_fd < 3 {
            return Err(RoutingError::Spec(format!(
                "handoff fd {} is stdio",
                spec.handoff_fd
            )));
        }
        Ok(spec)
    }

    /// The JSON for `--proxy-route-spec`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Where the sandbox's resolv.conf goes: `/etc/resolv.conf`, or what it
/// links to. `None` when neither exists (nothing to bind over).
fn resolv_conf_target() -> Option<PathBuf> {
    let path = Path::new("/etc/resolv.conf");
    let real = path.canonicalize().ok()?;
    real.is_file().then_some(real)
}

/// What the sandbox's resolv.conf says: the stub, nothing else.
const RESOLV_CONF: &str = "nameserver 127.0.0.1\noptions timeout:2 attempts:2\n";

/// `resolv.conf` in the helper's private state directory (which every
/// sandbox hides), written when missing or different: replaced whole
/// (a private temporary name, then a rename), so a concurrent run binds
/// either the old file or the new one, never half of one.
fn resolv_conf_file(state_dir: &Path) -> Result<PathBuf, RoutingError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join("resolv.conf");
    let nofollow = || {
        let mut options = std::fs::OpenOptions::new();
        options.custom_flags(libc::O_NOFOLLOW);
        options
    };
    let mut current = String::new();
    let same = nofollow()
        .read(true)
        .open(&path)
        .and_then(|mut f| f.read_to_string(&mut current))
        .is_ok_and(|_| current == RESOLV_CONF);
    if same {
        return Ok(path);
    }
    let tmp = state_dir.join(format!("resolv.conf.{}", std::process::id()));
    let written = nofollow()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut f| f.write_all(RESOLV_CONF.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    match written {
        Ok(()) => Ok(path),
        Err(source) => {
            let _ = std::fs::remove_file(&tmp);
            Err(RoutingError::ResolvConf { path, source })
        }
    }
}

/// The host side of a routed run, decided once for every launch attempt.
#[derive(Debug)]
pub struct HostRouting {
    routes: Vec<SpecRoute>,
    bridges: Bridges,
    pub mounts: crate::sandbox::bwrap_args::ProxyMounts,
    /// The network namespace the launcher must start in, when the DNS stub
    /// runs.
    pub netns: Option<PreparedNetns>,
    /// Why there is no DNS stub although an HTTP proxy route exists.
    pub no_stub: Option<NetnsError>,
}

impl HostRouting {
    /// Numbers the distinct endpoints of `routes` (one bridge each) and,
    /// when an HTTP proxy can answer the DNS stub, prepares the namespace
    /// it runs in and the resolv.conf naming it (in `state_dir`).
    pub fn prepare(state_dir: &Path, routes: &[PlannedRoute]) -> Result<Self, RoutingError> {
        let mut numbers: BTreeMap<SocketAddr, usize> = BTreeMap::new();
        let mut endpoints = Vec::new();
        let mut spec_routes = Vec::with_capacity(routes.len());
        let mut dns_proxy = None;
        for route in routes {
            let bridge = *numbers.entry(route.endpoint).or_insert_with(|| {
                endpoints.push(route.endpoint);
                endpoints.len() - 1
            });
            if route.is_http && dns_proxy.is_none() {
                dns_proxy = Some(route.endpoint);
            }
            spec_routes.push(SpecRoute {
                env_key: route.env_key.clone(),
                bridge,
            });
        }
        if endpoints.len() > MAX_BRIDGES {
            return Err(RoutingError::TooManyEndpoints(endpoints.len()));
        }
        let mut routing = HostRouting {
            routes: spec_routes,
            bridges: Bridges {
                endpoints,
                dns_proxy: None,
            },
            mounts: crate::sandbox::bwrap_args::ProxyMounts { resolv_conf: None },
            netns: None,
            no_stub: None,
        };
        // The stub needs a resolv.conf to bind over, and a namespace where
        // it may bind port 53.
        let Some(target) = dns_proxy.and_then(|_| resolv_conf_target()) else {
            return Ok(routing);
        };
        match PreparedNetns::create(crate::net::dns::stub_address().port()) {
            Ok(netns) => {
                routing.mounts.resolv_conf = Some((resolv_conf_file(state_dir)?, target));
                routing.netns = Some(netns);
                routing.bridges.dns_proxy = dns_proxy;
            }
            Err(err) => routing.no_stub = Some(err),
        }
        Ok(routing)
    }

    /// The spec for a launch whose inner stage inherits `handoff_fd`.
    pub fn spec(&self, handoff_fd: RawFd) -> RouteSpec {
        RouteSpec {
            routes: self.routes.clone(),
            bridges: self.bridges.endpoints.len(),
            dns_stub: self.bridges.dns_proxy.is_some(),
            handoff_fd,
        }
    }

    /// What the helper serves.
    pub fn bridges(&self) -> &Bridges {
        &self.bridges
    }

    /// Each routed variable with the number of its bridge.
    pub fn routes(&self) -> impl Iterator<Item = (&str, usize)> {
        self.routes.iter().map(|r| (r.env_key.as_str(), r.bridge))
    }
}

/// The inner stage's part: checks that the network namespace is the
/// sandbox's own, binds the local listeners and the DNS stub's socket,
/// hands them to the helper outside, and points every routed variable at
/// its local port. Must run before the process confines itself.
pub fn activate_inside(spec: &RouteSpec) -> Result<(), RoutingError> {
    ensure_isolated()?;
    let listeners = (0..spec.bridges)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<Vec<_>>>()
        .map_err(RoutingError::BindLocal)?;
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<io::Result<Vec<u16>>>()
        .map_err(RoutingError::BindLocal)?;
    let stub = if spec.dns_stub {
        match UdpSocket::bind(crate::net::dns::stub_address()) {
            Ok(socket) => Some(socket),
            Err(err) => {
                warn_no_stub(&format_args!("cannot bind 127.0.0.1:53: {err}"));
                None
            }
        }
    } else {
        None
    };
    route_bridges::hand_over(spec.handoff_fd, &listeners, stub.as_ref())?;
    // The helper holds them now; the command gets no copy.
    drop(listeners);
    drop(stub);
    for route in &spec.routes {
        let port = ports
            .get(route.bridge)
            .copied()
            .ok_or_else(|| RoutingError::Rewrite(route.env_key.clone()))?;
        let value = std::env::var(&route.env_key)
            .map_err(|_| RoutingError::Rewrite(route.env_key.clone()))?;
        let rewritten = rewrite_proxy_url(&value, port)
            .ok_or_else(|| RoutingError::Rewrite(route.env_key.clone()))?;
        std::env::set_var(&route.env_key, rewritten);
    }
    // Nothing but loopback is reachable directly from here.
    for key in crate::net::env::NO_PROXY_KEYS {
        if let Ok(value) = std::env::var(key) {
            std::env::set_var(key, crate::net::env::loopback_no_proxy(&value));
        }
    }
    Ok(())
}

/// Says on stderr that the sandbox has no DNS stub, and why.
pub fn warn_no_stub(reason: &dyn std::fmt::Display) {
    eprintln!(
        "{}: warning: {NO_STUB_WARNING} ({reason}); clients must let the proxy resolve names",
        crate::mode::LINUX_SANDBOX_ARG0
    );
}

/// What the warning of a run without the DNS stub says (`doctor` looks
/// for it).
pub const NO_STUB_WARNING: &str = "no DNS inside the sandbox";

/// Fails unless `lo` is the only interface: the namespace the command
/// would run in has no route out (whoever made it: bubblewrap, or the
/// helper for the DNS stub), so a launcher that was not started in it can
/// never leave the command on the host's network.
fn ensure_isolated() -> Result<(), RoutingError> {
    let names = crate::sys::netns::interface_names().map_err(RoutingError::Interfaces)?;
    if names.iter().any(|name| name != "lo") {
        return Err(RoutingError::NotIsolated(names.join(", ")));
    }
    Ok(())
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

    #[test]
    fn the_route_spec_carries_no_urls_and_refuses_inconsistent_ones() {
        let spec = RouteSpec {
            routes: vec![SpecRoute {
                env_key: "HTTP_PROXY".into(),
                bridge: 0,
            }],
            bridges: 1,
            dns_stub: false,
            handoff_fd: 5,
        };
        assert_eq!(
            spec.to_json(),
            r#"{"routes":[{"env_key":"HTTP_PROXY","bridge":0}],"bridges":1,"handoff_fd":5}"#
        );
        assert_eq!(RouteSpec::parse(&spec.to_json()).unwrap(), spec);
        let refused = |text: &str| RouteSpec::parse(text).unwrap_err().to_string();
        assert_eq!(
            refused(r#"{"routes":[],"bridges":1,"handoff_fd":5}"#),
            "proxy routing spec contained no routes"
        );
        for text in [
            "nope",
            r#"{"routes":[{"env_key":"A","bridge":1}],"bridges":1,"handoff_fd":5}"#,
            r#"{"routes":[{"env_key":"A","bridge":0}],"bridges":0,"handoff_fd":5}"#,
            r#"{"routes":[{"env_key":"A","bridge":0}],"bridges":99,"handoff_fd":5}"#,
            r#"{"routes":[{"env_key":"A","bridge":0}],"bridges":1,"handoff_fd":2}"#,
            r#"{"routes":[{"env_key":"A","uds_path":"/x"}],"bridges":1,"handoff_fd":5}"#,
        ] {
            assert!(
                refused(text).starts_with("invalid proxy route spec: "),
                "{text}"
            );
        }
    }

    #[test]
    fn a_namespace_with_more_than_loopback_is_refused() {
        let names = crate::sys::netns::interface_names().unwrap();
        let result = ensure_isolated();
        if names.iter().all(|n| n == "lo") {
            assert!(result.is_ok());
        } else {
            let err = result.unwrap_err().to_string();
            assert!(
                err.starts_with("the sandbox's network namespace is not isolated"),
                "{err}"
            );
        }
    }

    #[test]
    fn one_bridge_per_endpoint_and_the_stub_asks_the_first_http_proxy() {
        use std::os::unix::fs::PermissionsExt;
        let state = tempfile::tempdir().unwrap();
        let routes = plan_routes([
            ("HTTP_PROXY", "http://127.0.0.1:3128"),
            ("HTTPS_PROXY", "http://localhost:3128"),
            ("ALL_PROXY", "socks5h://127.0.0.1:1080"),
        ])
        .unwrap();
        let routing = HostRouting::prepare(state.path(), &routes).unwrap();
        let proxy: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        let socks: SocketAddr = "127.0.0.1:1080".parse().unwrap();
        assert_eq!(routing.bridges().endpoints, vec![socks, proxy]);
        let spec = routing.spec(7);
        let by_key: Vec<(&str, usize)> = spec
            .routes
            .iter()
            .map(|r| (r.env_key.as_str(), r.bridge))
            .collect();
        assert_eq!(
            by_key,
            [("ALL_PROXY", 0), ("HTTPS_PROXY", 1), ("HTTP_PROXY", 1)]
        );
        assert_eq!((spec.bridges, spec.handoff_fd), (2, 7));
        // The stub runs exactly when its namespace could be made, asks the
        // HTTP proxy, and the resolv.conf naming it is a private file.
        assert_eq!(spec.dns_stub, routing.netns.is_some());
        assert_eq!(routing.mounts.in_prepared_netns(), routing.netns.is_some());
        match &routing.mounts.resolv_conf {
            Some((file, _)) => {
                assert_eq!(routing.bridges().dns_proxy, Some(proxy));
                assert_eq!(std::fs::read_to_string(file).unwrap(), RESOLV_CONF);
                let mode = std::fs::metadata(file).unwrap().permissions().mode();
                assert_eq!(mode & 0o022, 0);
            }
            None => assert!(routing.bridges().dns_proxy.is_none()),
        }
        // A SOCKS-only environment has no stub.
        let socks_only = plan_routes([("ALL_PROXY", "socks5h://127.0.0.1:1080")]).unwrap();
        let routing = HostRouting::prepare(state.path(), &socks_only).unwrap();
        assert!(!routing.spec(3).dns_stub && routing.mounts.resolv_conf.is_none());
    }

    #[test]
    fn a_stale_resolv_conf_is_replaced_whole() {
        let state = tempfile::tempdir().unwrap();
        let path = state.path().join("resolv.conf");
        std::fs::write(&path, "nameserver 10.0.0.1\n").unwrap();
        assert_eq!(resolv_conf_file(state.path()).unwrap(), path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), RESOLV_CONF);
        let names: Vec<_> = std::fs::read_dir(state.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no temporary file is left");
    }
}
