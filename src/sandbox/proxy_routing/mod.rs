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
//!
//! Files: [`proxy_url`] (which variables route where, and rewriting a
//! proxy URL to a local port), [`host`] (the outer stage's numbering of
//! bridges, namespace and resolv.conf) and [`inside`] (the inner stage's
//! listeners and rewritten variables); this module holds the
//! [`RouteSpec`] that travels from the one to the other.

use std::io;
use std::os::fd::RawFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::sandbox::route_bridges::{BridgeError, MAX_BRIDGES};

pub mod host;
pub mod inside;
pub mod proxy_url;

pub use host::{warn_no_stub, HostRouting, NO_STUB_WARNING};
pub use inside::activate_inside;
pub use proxy_url::{plan_routes, process_env};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
