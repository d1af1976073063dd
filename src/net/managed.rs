//! A proxy for one command a person runs (`codexbox sandbox
//! --allow-domain …`): started on a runtime of its own beside the blocking
//! caller, or an already running proxy named by `--proxy URL`; the
//! variables the command gets; and, at the end, one summary line per
//! destination that was refused.

use std::net::SocketAddr;

use super::cli::PolicyArgs;
use super::env::{http_proxy_url, proxy_env, socks5_proxy_url};
use super::proxy::{ProxyConfig, ProxyHandle};
use super::upstream::ProxyEndpoint;

/// Why the proxy for a run is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ManagedError {
    #[error(transparent)]
    Policy(#[from] super::cli::PolicyArgsError),
    #[error("cannot start the proxy runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Proxy(#[from] super::proxy::ProxyError),
    #[error("--proxy {0:?} must be an http:// URL on 127.0.0.1, ::1 or localhost")]
    ExternalProxy(String),
}

/// The proxy of one run.
pub struct ManagedRun {
    /// Our own proxy and the runtime serving it; `None` for `--proxy`.
    own: Option<(tokio::runtime::Runtime, ProxyHandle)>,
    http: SocketAddr,
    socks5: Option<SocketAddr>,
    allow_local_binding: bool,
    /// The policy in words, for `--explain` (our own proxy only).
    policy: Option<String>,
}

impl ManagedRun {
    /// Starts a proxy with `policy` (HTTP and SOCKS5 on ephemeral loopback
    /// ports) on two worker threads.
    pub fn start(policy: &PolicyArgs) -> Result<Self, ManagedError> {
        let mut config: ProxyConfig = policy.to_config()?;
        config.socks5_listen = Some(config.http_listen);
        config.socks5_udp = true;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(ManagedError::Runtime)?;
        let handle = runtime.block_on(ProxyHandle::start(config))?;
        Ok(Self {
            http: handle.http_addr(),
            socks5: handle.socks5_addr(),
            own: Some((runtime, handle)),
            allow_local_binding: policy.allow_local_binding,
            policy: Some(format!(
                "allow: {}; deny: {}; mode: {}; local/private destinations: {}",
                list(&policy.allow),
                list(&policy.deny),
                super::policy::Mode::from(policy.mode).as_str(),
                if policy.allow_local_binding {
                    "allowed"
                } else {
                    "only exact IP or localhost entries"
                }
            )),
        })
    }

    /// Uses the proxy at `url` (already running, loopback HTTP).
    pub fn external(url: &str, allow_local_binding: bool) -> Result<Self, ManagedError> {
        let endpoint =
            ProxyEndpoint::parse(url).ok_or_else(|| ManagedError::ExternalProxy(url.to_owned()))?;
        let ip: std::net::IpAddr = match endpoint.host.as_str() {
            "localhost" => std::net::Ipv4Addr::LOCALHOST.into(),
            host => host
                .parse()
                .map_err(|_| ManagedError::ExternalProxy(url.to_owned()))?,
        };
        if !ip.is_loopback() {
            return Err(ManagedError::ExternalProxy(url.to_owned()));
        }
        Ok(Self {
            own: None,
            http: SocketAddr::new(ip, endpoint.port),
            socks5: None,
            allow_local_binding,
            policy: None,
        })
    }

    /// The proxy variables for the command.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        proxy_env(self.http, self.socks5, self.allow_local_binding)
    }

    /// One line for `--explain`.
    pub fn describe(&self) -> String {
        let mut line = format!("proxy: {}", http_proxy_url(self.http));
        if let Some(socks) = self.socks5 {
            line.push_str(&format!(" and {}", socks5_proxy_url(socks)));
        }
        match &self.policy {
            Some(policy) => line.push_str(&format!("\npolicy: {policy}")),
            None => line.push_str(" (external)"),
        }
        line
    }

    /// Stops our proxy and returns the summary lines (none for `--proxy`).
    pub fn finish(self) -> Vec<String> {
        let Some((runtime, handle)) = self.own else {
            return Vec::new();
        };
        let lines = handle
            .blocked_destinations()
            .iter()
            .map(|blocked| format!("codexbox: blocked {blocked}"))
            .collect();
        runtime.block_on(handle.shutdown());
        lines
    }
}

fn list(entries: &[String]) -> String {
    if entries.is_empty() {
        "none".to_owned()
    } else {
        entries.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_proxies_must_be_loopback_http() {
        assert!(ManagedRun::external("http://127.0.0.1:3128", false).is_ok());
        assert!(ManagedRun::external("http://localhost:3128", false).is_ok());
        assert!(ManagedRun::external("http://10.0.0.1:3128", false).is_err());
        assert!(ManagedRun::external("socks5h://127.0.0.1:1080", false).is_err());
        let run = ManagedRun::external("http://[::1]:8080", true).unwrap();
        assert!(run
            .env()
            .contains(&("HTTPS_PROXY", "http://[::1]:8080".to_owned())));
        assert!(run.finish().is_empty());
    }
}
