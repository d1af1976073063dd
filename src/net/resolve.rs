//! Name resolution for the proxy: `--resolve NAME=IP`
//! overrides, the system resolver with a deadline, and the check that an
//! allowed name's answers are all public (or that local ones are permitted).
//!
//! The addresses checked here are the ones dialed (`net::dial` takes them as
//! they are), so a name cannot re-resolve to a private address between the
//! check and the connection.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::address::is_non_public;
use super::decision::DenyReason;
use super::destination::{canonical_ip, DnsName, Host};
use super::policy::HostVerdict;

/// How long one lookup may take before it counts as a failure.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(2);

/// Errors of `--resolve` parsing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("invalid --resolve {0:?}: expected NAME=IP")]
    Override(String),
}

/// Name resolution with pinned overrides.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    /// `--resolve NAME=IP` (several IPs per name allowed).
    overrides: BTreeMap<DnsName, Vec<IpAddr>>,
}

impl Resolver {
    /// A resolver with the given `NAME=IP` overrides.
    pub fn with_overrides<I>(entries: I) -> Result<Self, ResolveError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut overrides: BTreeMap<DnsName, Vec<IpAddr>> = BTreeMap::new();
        for entry in entries {
            let entry = entry.as_ref();
            let parsed = entry.split_once('=').and_then(|(name, ip)| {
                let name = DnsName::parse(name.trim()).ok()?;
                match Host::parse(ip.trim()).ok()? {
                    Host::Ip(ip) => Some((name, ip)),
                    Host::Name(_) => None,
                }
            });
            match parsed {
                Some((name, ip)) => overrides.entry(name).or_default().push(ip),
                None => return Err(ResolveError::Override(entry.to_owned())),
            }
        }
        Ok(Self { overrides })
    }

    /// The addresses of `name` on `port`: an override, the loopback
    /// addresses for `localhost`, or the system resolver within
    /// [`DNS_TIMEOUT`] (IPv4-mapped answers folded into IPv4). `None` when
    /// the name does not resolve.
    pub async fn lookup(&self, name: &DnsName, port: u16) -> Option<Vec<SocketAddr>> {
        if let Some(ips) = self.overrides.get(name) {
            return Some(ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        }
        let host = name.as_str();
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
                    let addr = SocketAddr::new(canonical_ip(addr.ip()), addr.port());
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
    pub async fn targets(&self, verdict: &HostVerdict, port: u16) -> Result<Targets, DenyReason> {
        match verdict {
            HostVerdict::Deny(reason) => Err(*reason),
            HostVerdict::Literal { ip, local_ok } => Ok(Targets {
                addrs: vec![SocketAddr::new(*ip, port)],
                local_ok: *local_ok,
            }),
            HostVerdict::Name { name, local_ok } => {
                let local_ok = *local_ok;
                let addrs = self.lookup(name, port).await.ok_or(DenyReason::DnsFailed)?;
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

    #[tokio::test]
    async fn overrides_pin_names_and_reject_garbage() {
        let r = Resolver::with_overrides([
            "A.test.=127.0.0.1",
            "a.test=[::1]",
            "b.test=[::ffff:10.0.0.1]",
        ])
        .unwrap();
        let name = |text: &str| DnsName::parse(text).unwrap();
        assert_eq!(
            r.lookup(&name("a.test"), 80).await.unwrap(),
            vec!["127.0.0.1:80".parse().unwrap(), "[::1]:80".parse().unwrap()]
        );
        assert_eq!(
            r.lookup(&name("b.test"), 80).await.unwrap(),
            vec!["10.0.0.1:80".parse().unwrap()]
        );
        for bad in [
            "a.test",
            "a.test=nope",
            "=1.2.3.4",
            "1.2.3.4=5.6.7.8",
            "a%.test=1.2.3.4",
            "a.test=[fe80::1%25lo]",
        ] {
            assert!(Resolver::with_overrides([bad]).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn allowed_names_resolving_to_private_addresses_stay_blocked() {
        let r = Resolver::with_overrides(["in.test=10.0.0.1", "out.test=8.8.8.8"]).unwrap();
        let verdict = |text: &str, local_ok| HostVerdict::Name {
            name: DnsName::parse(text).unwrap(),
            local_ok,
        };
        assert_eq!(
            r.targets(&verdict("in.test", false), 80).await,
            Err(DenyReason::NotAllowedLocal)
        );
        assert_eq!(
            r.targets(&verdict("out.test", false), 80)
                .await
                .unwrap()
                .addrs,
            vec!["8.8.8.8:80".parse().unwrap()]
        );
        assert!(r.targets(&verdict("in.test", true), 80).await.is_ok());
    }
}
