//! Host classification and name resolution for the proxy: which addresses
//! are local or private (reference network.md §2.6), `--resolve NAME=IP`
//! overrides, the system resolver with a deadline, and the check that an
//! allowed name's answers are all public (or that local ones are permitted).
//!
//! The addresses checked here are the ones dialed (`net::dial` takes them as
//! they are), so a name cannot re-resolve to a private address between the
//! check and the connection.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::decision::DenyReason;
use super::policy::{normalize_host, HostVerdict};

/// How long one lookup may take before it counts as a failure.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(2);

/// Errors of `--resolve` parsing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("invalid --resolve {0:?}: expected NAME=IP")]
    Override(String),
}

/// Whether `ip` is loopback, private, link-local, CGNAT, documentation,
/// benchmarking, multicast, broadcast, reserved or unspecified (IPv4-mapped
/// and IPv4-compatible IPv6 addresses are judged by their IPv4 part).
pub fn is_non_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_non_public_v4(v4),
        IpAddr::V6(v6) => is_non_public_v6(v6),
    }
}

fn is_non_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..=127).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || (a == 198 && (18..=19).contains(&b))
        || a >= 240
}

fn is_non_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_non_public_v4(v4);
    }
    let segments = ip.segments();
    // IPv4-compatible (::a.b.c.d, deprecated), other than :: and ::1.
    if segments[..6].iter().all(|s| *s == 0) && !ip.is_loopback() && !ip.is_unspecified() {
        let [a, b] = segments[6].to_be_bytes();
        let [c, d] = segments[7].to_be_bytes();
        return is_non_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00
        || (segments[0] & 0xffc0) == 0xfe80
}

/// Name resolution with pinned overrides.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    /// `--resolve NAME=IP` (normalized names; several IPs per name allowed).
    overrides: BTreeMap<String, Vec<IpAddr>>,
}

impl Resolver {
    /// A resolver with the given `NAME=IP` overrides.
    pub fn with_overrides<I>(entries: I) -> Result<Self, ResolveError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut overrides: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for entry in entries {
            let entry = entry.as_ref();
            let parsed = entry.split_once('=').and_then(|(name, ip)| {
                let ip = ip.trim().trim_start_matches('[').trim_end_matches(']');
                Some((normalize_host(name), ip.parse::<IpAddr>().ok()?))
            });
            match parsed {
                Some((name, ip)) if !name.is_empty() => overrides.entry(name).or_default().push(ip),
                _ => return Err(ResolveError::Override(entry.to_owned())),
            }
        }
        Ok(Self { overrides })
    }

    /// The addresses of `host` (normalized) on `port`: an override, the
    /// loopback addresses for `localhost`, or the system resolver within
    /// [`DNS_TIMEOUT`]. `None` when the name does not resolve.
    pub async fn lookup(&self, host: &str, port: u16) -> Option<Vec<SocketAddr>> {
        if let Some(ips) = self.overrides.get(host) {
            return Some(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        }
        if host == "localhost" {
            return Some(vec![
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
                SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port),
            ]);
        }
        let lookup = tokio::net::lookup_host((host, port));
        match tokio::time::timeout(DNS_TIMEOUT, lookup).await {
            Ok(Ok(addrs)) => {
                let mut out: Vec<SocketAddr> = Vec::new();
                for addr in addrs {
                    if !out.contains(&addr) {
                        out.push(addr);
                    }
                }
                (!out.is_empty()).then_some(out)
            }
            Ok(Err(err)) => {
                tracing::debug!(%host, "lookup failed: {err}");
                None
            }
            Err(_) => {
                tracing::debug!(%host, "lookup timed out");
                None
            }
        }
    }

    /// Turns an allowed verdict into the addresses to dial, refusing names
    /// that do not resolve and private answers without permission.
    pub async fn targets(
        &self,
        verdict: &HostVerdict,
        host: &str,
        port: u16,
    ) -> Result<Targets, DenyReason> {
        let host = normalize_host(host);
        match *verdict {
            HostVerdict::Deny(reason) => Err(reason),
            HostVerdict::Literal { ip, local_ok } => Ok(Targets {
                addrs: vec![SocketAddr::new(ip, port)],
                local_ok,
            }),
            HostVerdict::Localhost => {
                let addrs = self
                    .lookup(&host, port)
                    .await
                    .ok_or(DenyReason::DnsFailed)?;
                Ok(Targets {
                    addrs,
                    local_ok: true,
                })
            }
            HostVerdict::Name { local_ok } => {
                let addrs = self
                    .lookup(&host, port)
                    .await
                    .ok_or(DenyReason::DnsFailed)?;
                if !local_ok && addrs.iter().any(|a| is_non_public(a.ip())) {
                    return Err(DenyReason::NotAllowedLocal);
                }
                Ok(Targets { addrs, local_ok })
            }
        }
    }
}

/// Checked addresses of one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    /// In resolver order; every one passed the check.
    pub addrs: Vec<SocketAddr>,
    /// Whether non-public addresses are permitted (checked again at dial).
    pub local_ok: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_ranges_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.1.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "0.1.2.3",
            "100.64.0.1",
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.1",
            "203.0.113.1",
            "198.18.0.1",
            "198.19.255.1",
            "240.0.0.1",
            "::1",
            "::",
            "ff02::1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::10.0.0.1",
        ] {
            assert!(is_non_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "93.184.216.34",
            "100.128.0.1",
            "2001:4860::8888",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_non_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn overrides_pin_names_and_reject_garbage() {
        let r = Resolver::with_overrides(["A.test.=127.0.0.1", "a.test=[::1]"]).unwrap();
        assert_eq!(
            r.lookup("a.test", 80).await.unwrap(),
            vec!["127.0.0.1:80".parse().unwrap(), "[::1]:80".parse().unwrap()]
        );
        assert!(Resolver::with_overrides(["a.test"]).is_err());
        assert!(Resolver::with_overrides(["a.test=nope"]).is_err());
        assert!(Resolver::with_overrides(["=1.2.3.4"]).is_err());
    }

    #[tokio::test]
    async fn allowed_names_resolving_to_private_addresses_stay_blocked() {
        let r = Resolver::with_overrides(["in.test=10.0.0.1", "out.test=8.8.8.8"]).unwrap();
        let name = HostVerdict::Name { local_ok: false };
        assert_eq!(
            r.targets(&name, "in.test", 80).await,
            Err(DenyReason::NotAllowedLocal)
        );
        assert_eq!(
            r.targets(&name, "out.test", 80).await.unwrap().addrs,
            vec!["8.8.8.8:80".parse().unwrap()]
        );
        let local = HostVerdict::Name { local_ok: true };
        assert!(r.targets(&local, "in.test", 80).await.is_ok());
    }
}
