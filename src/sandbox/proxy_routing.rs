//! Managed proxy routing (`--allow-network-for-proxy`, reference
//! network.md §3): the command gets a network namespace with no route out,
//! and reaches the loopback proxies named by its `*_PROXY` variables only
//! through bridges: TCP (127.0.0.1, inside) → Unix socket → TCP (the
//! proxy, on the host).
//!
//! Outer stage (host): [`plan_routes`] reads the proxy variables,
//! [`HostRouting::start`] creates a private socket directory (stale ones of
//! dead helpers are removed first), binds one Unix socket per distinct
//! endpoint and serves each from a thread of the helper (which waits for
//! bubblewrap anyway, so the bridges live exactly as long as the sandbox),
//! and, when there is a DNS stub to serve, prepares the sandbox's network
//! namespace (`sandbox::routed_netns`: port 53 bindable without a
//! capability) and writes the `resolv.conf` the sandbox sees. The
//! directory is bound into the sandbox read-only and explicitly, so a
//! restricted-read profile or a `/tmp` tmpfs cannot hide it.
//!
//! Inner stage (inside, before seccomp): [`activate_inside`] checks that
//! the network namespace holds nothing but `lo`, binds a listener per
//! socket and the DNS stub on 127.0.0.1:53, hands them to a
//! namespace helper process (double-forked, so the command never has it as
//! a child; the pid namespace ends it), and rewrites every routed variable
//! to its local port (and `NO_PROXY` to its loopback entries, the only
//! destinations still reachable directly). The command then runs under the `ProxyRouted`
//! seccomp mode: no new Unix sockets, so it cannot reach host daemons
//! through the bridge directory or anything else.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::net::env::is_proxy_url_key;
use crate::sandbox::routed_netns::{NetnsError, PreparedNetns};

/// The longest Unix socket path (`sun_path` minus the NUL).
pub const MAX_SOCKET_PATH_BYTES: usize = 107;
/// Name prefix of a socket directory: `<pid>-<attempt>`.
const DIR_ATTEMPTS: u32 = 128;

/// Errors of managed routing (one stderr line each, exit 1).
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    #[error("managed proxy mode requires proxy environment variables")]
    NoProxyEnv,
    #[error("managed proxy mode requires parseable loopback proxy endpoints")]
    NoLoopbackEndpoint,
    #[error("managed proxy mode requires --proxy-route-spec")]
    MissingSpec,
    #[error("invalid proxy route spec: {0}")]
    Spec(String),
    #[error("proxy routing spec contained no routes")]
    EmptySpec,
    #[error("proxy socket path {} is longer than {MAX_SOCKET_PATH_BYTES} bytes", .0.display())]
    PathTooLong(PathBuf),
    #[error("failed to allocate proxy routing temp dir under {}: {source}", .parent.display())]
    Dir {
        parent: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot bind proxy bridge socket {}: {source}", .path.display())]
    BindUnix {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot bind the local proxy bridge on 127.0.0.1: {0}")]
    BindLocal(#[source] io::Error),
    #[error("cannot start the proxy bridge: {0}")]
    Spawn(#[source] io::Error),
    #[error("cannot fork the namespace network helper: {0}")]
    Fork(#[source] nix::Error),
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

/// Where socket directories go: beside the helper's state directory (which
/// the sandbox hides), e.g. `/run/codexbox-net`.
pub fn socket_parent(state_dir: &Path) -> PathBuf {
    let mut name = state_dir
        .file_name()
        .map(OsString::from)
        .unwrap_or_default();
    name.push("-net");
    state_dir.with_file_name(name)
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
pub struct RouteSpec {
    pub routes: Vec<SpecRoute>,
    /// The socket of the proxy's HTTP listener, for the DNS stub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_uds_path: Option<PathBuf>,
}

/// One routed variable and its socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecRoute {
    pub env_key: String,
    pub uds_path: PathBuf,
}

impl RouteSpec {
    /// Parses `--proxy-route-spec`.
    pub fn parse(text: &str) -> Result<Self, RoutingError> {
        let spec: RouteSpec =
            serde_json::from_str(text).map_err(|e| RoutingError::Spec(e.to_string()))?;
        if spec.routes.is_empty() {
            return Err(RoutingError::EmptySpec);
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

/// The host side of a routed run: the socket directory (removed on drop)
/// and the bridges serving it.
#[derive(Debug)]
pub struct HostRouting {
    dir: PathBuf,
    pub spec: RouteSpec,
    pub mounts: crate::sandbox::bwrap_args::ProxyMounts,
    /// The network namespace the launcher must start in, when the DNS stub
    /// runs.
    pub netns: Option<PreparedNetns>,
    /// Why there is no DNS stub although an HTTP proxy route exists.
    pub no_stub: Option<NetnsError>,
}

impl Drop for HostRouting {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `<parent>/<pid>-<attempt>` directories whose helper is gone.
fn remove_stale_dirs(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::Error::ESRCH)
        );
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Creates a fresh private `<parent>/<pid>-<n>` directory.
fn allocate_dir(parent: &Path) -> Result<PathBuf, RoutingError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir_error = |source| RoutingError::Dir {
        parent: parent.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(dir_error)?;
    // Someone else's directory (or a symlink to one) could swap the
    // sockets and so the proxy the sandbox talks to.
    if !crate::sandbox::state::is_private_dir(parent) {
        return Err(dir_error(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "not a directory owned by this user with mode 0700",
        )));
    }
    remove_stale_dirs(parent);
    let pid = std::process::id();
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for attempt in 0..DIR_ATTEMPTS {
        let dir = parent.join(format!("{pid}-{attempt}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(err) => last = err,
        }
    }
    Err(dir_error(last))
}

impl HostRouting {
    /// Creates the socket directory under `parent` and starts a bridge per
    /// distinct endpoint of `routes`.
    pub fn start(parent: &Path, routes: &[PlannedRoute]) -> Result<Self, RoutingError> {
        let dir = allocate_dir(parent)?;
        // Removed on any early return from here on.
        let mut routing = HostRouting {
            dir: dir.clone(),
            spec: RouteSpec {
                routes: Vec::new(),
                dns_uds_path: None,
            },
            mounts: crate::sandbox::bwrap_args::ProxyMounts {
                socket_dir: dir.clone(),
                resolv_conf: None,
            },
            netns: None,
            no_stub: None,
        };
        let mut sockets: BTreeMap<SocketAddr, PathBuf> = BTreeMap::new();
        for route in routes {
            let next = sockets.len();
            let path = match sockets.get(&route.endpoint) {
                Some(path) => path.clone(),
                None => {
                    let path = dir.join(format!("r{next}.sock"));
                    if path.as_os_str().len() > MAX_SOCKET_PATH_BYTES {
                        return Err(RoutingError::PathTooLong(path));
                    }
                    let listener =
                        UnixListener::bind(&path).map_err(|source| RoutingError::BindUnix {
                            path: path.clone(),
                            source,
                        })?;
                    let endpoint = route.endpoint;
                    spawn_quiet(move || serve_host_bridge(listener, endpoint))
                        .map_err(RoutingError::Spawn)?;
                    sockets.insert(route.endpoint, path.clone());
                    path
                }
            };
            if route.is_http && routing.spec.dns_uds_path.is_none() {
                routing.spec.dns_uds_path = Some(path.clone());
            }
            routing.spec.routes.push(SpecRoute {
                env_key: route.env_key.clone(),
                uds_path: path,
            });
        }
        // The stub needs a resolv.conf to bind over, and a namespace where
        // it may bind port 53.
        let stub_target = routing
            .spec
            .dns_uds_path
            .as_ref()
            .and_then(|_| resolv_conf_target());
        let prepared = stub_target.map(|target| {
            (
                target,
                PreparedNetns::create(crate::net::dns::stub_address().port()),
            )
        });
        match prepared {
            Some((target, Ok(netns))) => {
                let file = dir.join("resolv.conf");
                std::fs::write(
                    &file,
                    "nameserver 127.0.0.1\noptions timeout:2 attempts:2\n",
                )
                .map_err(|source| RoutingError::Dir {
                    parent: dir.clone(),
                    source,
                })?;
                routing.mounts.resolv_conf = Some((file, target));
                routing.netns = Some(netns);
            }
            Some((_, Err(err))) => {
                routing.spec.dns_uds_path = None;
                routing.no_stub = Some(err);
            }
            None => routing.spec.dns_uds_path = None,
        }
        Ok(routing)
    }
}

/// Starts a thread with every signal blocked, so signals meant for the
/// helper's `signalfd` never land on it.
fn spawn_quiet(body: impl FnOnce() + Send + 'static) -> io::Result<()> {
    use nix::sys::signal::{SigSet, SigmaskHow};
    let old = SigSet::all()
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(io::Error::from)?;
    let spawned = std::thread::Builder::new()
        .name("proxy-bridge".into())
        .spawn(body);
    let _ = old.thread_set_mask();
    spawned.map(drop)
}

/// Accepts bridge connections and joins each to a new TCP connection to
/// the proxy.
fn serve_host_bridge(listener: UnixListener, endpoint: SocketAddr) {
    for stream in listener.incoming() {
        let Ok(inside) = stream else { continue };
        let _ = std::thread::Builder::new()
            .name("proxy-bridge-conn".into())
            .spawn(move || {
                if let Ok(outside) = TcpStream::connect(endpoint) {
                    let _ = outside.set_nodelay(true);
                    join_unix_tcp(inside, outside);
                }
            });
    }
}

/// Copies both ways until both directions end.
fn join_unix_tcp(unix: UnixStream, tcp: TcpStream) {
    let (Ok(mut unix_read), Ok(mut tcp_write)) = (unix.try_clone(), tcp.try_clone()) else {
        return;
    };
    let upstream = std::thread::spawn(move || {
        let _ = io::copy(&mut unix_read, &mut tcp_write);
        let _ = tcp_write.shutdown(std::net::Shutdown::Write);
    });
    let (mut tcp_read, mut unix_write) = (tcp, unix);
    let _ = io::copy(&mut tcp_read, &mut unix_write);
    let _ = unix_write.shutdown(std::net::Shutdown::Write);
    let _ = upstream.join();
}

/// The inner stage's part: checks that the network namespace is the
/// sandbox's own, binds the local listeners and the DNS stub, starts the
/// namespace helper with them, and points every routed variable at its
/// local port. Must run before the process confines itself (the helper
/// needs Unix sockets).
pub fn activate_inside(spec: &RouteSpec) -> Result<(), RoutingError> {
    ensure_isolated()?;
    let mut ports: BTreeMap<PathBuf, u16> = BTreeMap::new();
    let mut bridges: Vec<(TcpListener, PathBuf)> = Vec::new();
    for route in &spec.routes {
        if ports.contains_key(&route.uds_path) {
            continue;
        }
        let listener = TcpListener::bind("127.0.0.1:0").map_err(RoutingError::BindLocal)?;
        let port = listener
            .local_addr()
            .map_err(RoutingError::BindLocal)?
            .port();
        ports.insert(route.uds_path.clone(), port);
        bridges.push((listener, route.uds_path.clone()));
    }
    let stub = match &spec.dns_uds_path {
        Some(path) => match UdpSocket::bind(crate::net::dns::stub_address()) {
            Ok(socket) => Some((socket, path.clone())),
            Err(err) => {
                warn_no_stub(&format_args!("cannot bind 127.0.0.1:53: {err}"));
                None
            }
        },
        None => None,
    };
    start_namespace_helper(bridges, stub)?;
    for route in &spec.routes {
        let port = ports
            .get(&route.uds_path)
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

/// Double-forks the helper serving `bridges` and `stub`; returns once the
/// intermediate child is reaped (the helper then belongs to the sandbox's
/// pid 1, and the pid namespace's end ends it).
fn start_namespace_helper(
    bridges: Vec<(TcpListener, PathBuf)>,
    stub: Option<(UdpSocket, PathBuf)>,
) -> Result<(), RoutingError> {
    use nix::unistd::{fork, ForkResult};
    // SAFETY: the inner stage is single-threaded (bubblewrap exec'd it and
    // nothing here starts threads before this point), so the child may do
    // anything the parent could.
    match unsafe { fork() }.map_err(RoutingError::Fork)? {
        ForkResult::Parent { child } => {
            let _ = nix::sys::wait::waitpid(child, None);
            drop(bridges);
            drop(stub);
            Ok(())
        }
        ForkResult::Child => {
            // SAFETY: as above; this child is single-threaded too.
            if let Ok(ForkResult::Child) = unsafe { fork() } {
                serve_namespace_helper(bridges, stub);
            }
            // SAFETY: _exit skips the parent's atexit handlers and buffers,
            // which belong to the inner stage.
            unsafe { libc::_exit(0) }
        }
    }
}

/// The namespace helper: confined like the command except for the network
/// filter (it needs Unix sockets), then serves until killed.
fn serve_namespace_helper(
    bridges: Vec<(TcpListener, PathBuf)>,
    stub: Option<(UdpSocket, PathBuf)>,
) -> ! {
    let code = match run_namespace_helper(bridges, stub) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("{}: proxy bridge: {err}", crate::mode::LINUX_SANDBOX_ARG0);
            1
        }
    };
    // SAFETY: see start_namespace_helper.
    unsafe { libc::_exit(code) }
}

fn run_namespace_helper(
    bridges: Vec<(TcpListener, PathBuf)>,
    stub: Option<(UdpSocket, PathBuf)>,
) -> Result<(), String> {
    crate::sandbox::inner::confine(crate::sandbox::seccomp::SeccompMode::NetworkEnabled)
        .map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for (listener, path) in bridges {
            listener.set_nonblocking(true).map_err(|e| e.to_string())?;
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            tasks.spawn(serve_local_bridge(listener, path));
        }
        if let Some((socket, path)) = stub {
            socket.set_nonblocking(true).map_err(|e| e.to_string())?;
            let socket = tokio::net::UdpSocket::from_std(socket).map_err(|e| e.to_string())?;
            tasks.spawn(crate::net::dns::serve(socket, path));
        }
        while tasks.join_next().await.is_some() {}
        Ok::<(), String>(())
    })
}

async fn serve_local_bridge(listener: tokio::net::TcpListener, path: PathBuf) {
    loop {
        let Ok((mut tcp, _)) = listener.accept().await else {
            continue;
        };
        let path = path.clone();
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            if let Ok(mut unix) = tokio::net::UnixStream::connect(&path).await {
                let _ = tokio::io::copy_bidirectional_with_sizes(
                    &mut tcp,
                    &mut unix,
                    64 * 1024,
                    64 * 1024,
                )
                .await;
            }
        });
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

    #[test]
    fn the_route_spec_carries_no_urls_and_refuses_empty_routes() {
        let spec = RouteSpec {
            routes: vec![SpecRoute {
                env_key: "HTTP_PROXY".into(),
                uds_path: "/run/x/r0.sock".into(),
            }],
            dns_uds_path: None,
        };
        assert_eq!(
            spec.to_json(),
            r#"{"routes":[{"env_key":"HTTP_PROXY","uds_path":"/run/x/r0.sock"}]}"#
        );
        assert_eq!(RouteSpec::parse(&spec.to_json()).unwrap(), spec);
        assert!(matches!(
            RouteSpec::parse(r#"{"routes":[]}"#),
            Err(RoutingError::EmptySpec)
        ));
        assert!(matches!(
            RouteSpec::parse("nope"),
            Err(RoutingError::Spec(_))
        ));
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
    fn socket_dirs_are_private_and_stale_ones_go() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let stale = parent.path().join("999999999-0");
        std::fs::create_dir(&stale).unwrap();
        let routes = plan_routes([("HTTP_PROXY", "http://127.0.0.1:9")]).unwrap();
        let routing = HostRouting::start(parent.path(), &routes).unwrap();
        assert!(!stale.exists());
        let dir = routing.mounts.socket_dir.clone();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(dir.join("r0.sock").exists());
        // The stub's socket is the HTTP route's, when a namespace for it
        // could be made; otherwise the reason is kept.
        match &routing.netns {
            Some(_) => assert_eq!(
                routing.spec.dns_uds_path.as_deref(),
                Some(dir.join("r0.sock").as_path())
            ),
            None => assert!(routing.spec.dns_uds_path.is_none()),
        }
        assert_eq!(routing.mounts.in_prepared_netns(), routing.netns.is_some());
        drop(routing);
        assert!(!dir.exists());
        let long = parent.path().join("x".repeat(100));
        assert!(matches!(
            HostRouting::start(&long, &routes),
            Err(RoutingError::PathTooLong(_))
        ));
        // A parent others can write to, or a symlink, is refused.
        let shared = parent.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            HostRouting::start(&shared, &routes),
            Err(RoutingError::Dir { .. })
        ));
        let link = parent.path().join("link");
        std::os::unix::fs::symlink(parent.path(), &link).unwrap();
        assert!(matches!(
            HostRouting::start(&link, &routes),
            Err(RoutingError::Dir { .. })
        ));
    }
}
