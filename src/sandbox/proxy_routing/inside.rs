//! The inner stage's part of a routed run, inside the sandbox's network
//! namespace and before the process confines itself: check that nothing
//! but `lo` is there, bind the bridges' listeners and the DNS stub's
//! socket, hand them to the helper outside, and point every routed
//! variable at its local port.

use std::io;
use std::net::{TcpListener, UdpSocket};

use super::host::warn_no_stub;
use super::proxy_url::rewrite_proxy_url;
use super::{RouteSpec, RoutingError};
use crate::sandbox::route_bridges;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
