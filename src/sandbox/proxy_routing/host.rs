//! The host side of a routed run, decided once for every launch attempt
//! ([`HostRouting`]): one bridge per distinct proxy endpoint and, when an
//! HTTP proxy can answer a DNS stub, the network namespace the stub binds
//! port 53 in (`sandbox::routed_netns`) and the `resolv.conf` naming it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use super::proxy_url::PlannedRoute;
use super::{RouteSpec, RoutingError, SpecRoute};
use crate::sandbox::route_bridges::{Bridges, MAX_BRIDGES};
use crate::sandbox::routed_netns::{NetnsError, PreparedNetns};

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

#[cfg(test)]
mod tests {
    use super::super::proxy_url::plan_routes;
    use super::*;

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
