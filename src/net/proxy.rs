//! The proxy's handle, the API its three callers share (`codexbox proxy`,
//! the exec-server's per-process `networkProxy`, `codexbox sandbox
//! --allow-domain`): [`ProxyHandle::start`] with a [`ProxyConfig`], learn the
//! bound addresses, [`ProxyHandle::subscribe`] to decisions, read the
//! blocked summary, [`ProxyHandle::shutdown`], which returns once every
//! task of the proxy has ended (`crate::shutdown`: each listener,
//! connection, tunnel and upstream connection holds a watcher). Dropping
//! the handle stops it too, without waiting. Also owns the admission step
//! every protocol shares: host policy, mode guard, resolution, upstream
//! choice, one recorded decision, all on the one canonical host the
//! request's text was parsed into (`net::destination`).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::address::is_non_public;
use super::audit::{AuditLog, AuditSink, BlockedDestination};
use super::decision::{Decision, DenyReason, Protocol};
use super::destination::{shown_parsed, DnsName, Host, HostError};
use super::policy::{HostVerdict, Policy};
use super::resolve::{Resolver, Targets};
use super::upstream::{ProxyEndpoint, Upstream};
use super::{http_proxy, socks5};
use crate::accept::ConnectionLimit;
use crate::shutdown::{Shutdown, Watcher};

/// The port name lookups are recorded under.
pub const DNS_PORT: u16 = 53;

/// Connections one listener serves at once; more wait to be accepted.
pub const MAX_CONNECTIONS: usize = 512;

/// How long a stopping proxy waits for its audit log to be written out
/// (stdout may be a pipe nobody reads).
const AUDIT_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("refusing to listen on non-loopback address {0}: the proxy serves this host only")]
    NonLoopback(SocketAddr),
    #[error("reserve managed loopback proxy listeners: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the audit log: {0}")]
    AuditLog(#[source] std::io::Error),
}

/// Everything a proxy needs to start.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub policy: Policy,
    pub resolver: Resolver,
    /// HTTP listener (loopback; port 0 = ephemeral).
    pub http_listen: SocketAddr,
    /// SOCKS5 listener, if any (loopback).
    pub socks5_listen: Option<SocketAddr>,
    /// SOCKS5 UDP ASSOCIATE.
    pub socks5_udp: bool,
    /// Upstream proxies to chain HTTP and CONNECT through (empty: direct).
    pub upstream: Upstream,
    pub audit_sink: Option<AuditSink>,
}

impl ProxyConfig {
    /// A proxy for `policy` on ephemeral loopback ports, HTTP only, direct.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            resolver: Resolver::default(),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            socks5_listen: None,
            socks5_udp: false,
            upstream: Upstream::default(),
            audit_sink: None,
        }
    }
}

/// One destination asked for, as the policy sees it.
#[derive(Debug, Clone)]
pub(crate) struct Destination<'a> {
    /// The canonical host, or why the text asked for names none (refused
    /// as `not_allowed`: no entry can allow what is not a destination).
    pub host: Result<Host, HostError>,
    pub port: u16,
    pub protocol: Protocol,
    pub method: &'a str,
    pub client: &'a str,
}

impl Destination<'_> {
    /// What the audit log and the summary show: the canonical host, or
    /// the refused text escaped.
    pub fn shown(&self) -> String {
        shown_parsed(&self.host)
    }
}

/// Where an admitted destination is reached.
#[derive(Debug)]
pub(crate) enum Admission {
    Direct(Targets),
    Upstream(ProxyEndpoint),
}

/// What the connection handlers share.
#[derive(Debug)]
pub(crate) struct ProxyState {
    pub policy: Policy,
    pub resolver: Resolver,
    pub upstream: Upstream,
    pub audit: Arc<AuditLog>,
    pub socks5_udp: bool,
}

impl ProxyState {
    /// Records a denial that happened before admission (malformed input
    /// excepted: those are not decisions).
    pub async fn record_denial(&self, dest: &Destination<'_>, reason: DenyReason) {
        self.record(dest, Some(reason)).await;
    }

    /// Records the decision about `dest` (`None`: allowed).
    async fn record(&self, dest: &Destination<'_>, denied: Option<DenyReason>) {
        self.audit
            .record(Decision::new(
                denied,
                &dest.shown(),
                dest.port,
                dest.protocol,
                dest.method,
                dest.client,
            ))
            .await;
    }

    /// Host policy, then `mode_denial` (the protocol's mode guard), then
    /// resolution; records the decision. `upstream` is where the request
    /// would be chained: a name that does not resolve locally is then left
    /// to the upstream, but a private answer is still refused.
    pub async fn admit(
        &self,
        dest: &Destination<'_>,
        mode_denial: Option<DenyReason>,
        upstream: Option<&ProxyEndpoint>,
    ) -> Result<Admission, DenyReason> {
        let verdict = match &dest.host {
            Ok(host) => self.policy.check(host, dest.port),
            Err(err) => {
                tracing::info!("refused destination: {err}");
                HostVerdict::Deny(DenyReason::NotAllowed)
            }
        };
        let outcome = match (&verdict, mode_denial) {
            (HostVerdict::Deny(reason), _) => Err(*reason),
            (_, Some(reason)) => Err(reason),
            (_, None) => match upstream {
                Some(endpoint) => self
                    .check_upstream_target(&verdict, dest.port)
                    .await
                    .map(|()| Admission::Upstream(endpoint.clone())),
                None => self
                    .resolver
                    .targets(&verdict, dest.port)
                    .await
                    .map(Admission::Direct),
            },
        };
        self.record(dest, outcome.as_ref().err().copied()).await;
        outcome
    }

    /// A name lookup for the in-sandbox DNS stub: the policy for the name on
    /// any port, then resolution with the same local/private rules as a
    /// dial. Records a `dns` decision.
    pub async fn resolve_name(
        &self,
        name: Result<DnsName, HostError>,
        client: &str,
    ) -> Result<Vec<std::net::IpAddr>, DenyReason> {
        let verdict = match &name {
            Ok(name) => self.policy.check_name(name),
            Err(_) => HostVerdict::Deny(DenyReason::NotAllowed),
        };
        let outcome = self
            .resolver
            .targets(&verdict, DNS_PORT)
            .await
            .map(|targets| targets.addrs.iter().map(|a| a.ip()).collect());
        let dest = Destination {
            host: name.map(Host::Name),
            port: DNS_PORT,
            protocol: Protocol::Dns,
            method: "none",
            client,
        };
        self.record(&dest, outcome.as_ref().err().copied()).await;
        outcome
    }

    async fn check_upstream_target(
        &self,
        verdict: &HostVerdict,
        port: u16,
    ) -> Result<(), DenyReason> {
        let HostVerdict::Name {
            name,
            local_ok: false,
        } = verdict
        else {
            return Ok(());
        };
        match self.resolver.lookup(name, port).await {
            Some(addrs) if addrs.iter().any(|a| is_non_public(a.ip())) => {
                Err(DenyReason::NotAllowedLocal)
            }
            _ => Ok(()),
        }
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct ProxyHandle {
    http_addr: SocketAddr,
    socks5_addr: Option<SocketAddr>,
    audit: Arc<AuditLog>,
    audit_writer: Option<JoinHandle<()>>,
    /// Stops every task of the proxy; dropped with the handle, it tells
    /// them to stop without waiting.
    tasks: Shutdown,
}

impl ProxyHandle {
    /// Binds the listeners (so their ports are live when this returns) and
    /// starts serving.
    pub async fn start(config: ProxyConfig) -> Result<Self, ProxyError> {
        let ProxyConfig {
            policy,
            resolver,
            http_listen,
            socks5_listen,
            socks5_udp,
            upstream,
            audit_sink,
        } = config;
        let http = bind_loopback(http_listen).await?;
        let socks = match socks5_listen {
            Some(addr) => Some(bind_loopback(addr).await?),
            None => None,
        };
        let (audit, audit_writer) = AuditLog::open(audit_sink.as_ref())
            .await
            .map_err(ProxyError::AuditLog)?;
        let state = Arc::new(ProxyState {
            policy,
            resolver,
            upstream,
            audit: audit.clone(),
            socks5_udp,
        });
        let tasks = Shutdown::new();
        let (http_listener, http_addr) = http;
        tokio::spawn(accept_loop(
            http_listener,
            state.clone(),
            Service::Http,
            tasks.watcher(),
        ));
        let socks5_addr = match socks {
            Some((listener, addr)) => {
                let watcher = tasks.watcher();
                tokio::spawn(accept_loop(listener, state, Service::Socks5, watcher));
                Some(addr)
            }
            None => None,
        };
        Ok(Self {
            http_addr,
            socks5_addr,
            audit,
            audit_writer,
            tasks,
        })
    }

    /// The HTTP listener's address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The SOCKS5 listener's address, if one was asked for.
    pub fn socks5_addr(&self) -> Option<SocketAddr> {
        self.socks5_addr
    }

    /// Every later decision (bounded; a subscriber that lags loses the oldest).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Decision>> {
        self.audit.subscribe()
    }

    /// Distinct denied destinations so far.
    pub fn blocked_destinations(&self) -> Vec<BlockedDestination> {
        self.audit.blocked_destinations()
    }

    /// The decision hub (outlives the proxy: read it after shutdown).
    pub fn log(&self) -> Arc<AuditLog> {
        self.audit.clone()
    }

    /// Closes the listeners, every connection and tunnel (and the
    /// upstream connections serving them), waits until each of their
    /// tasks has ended, then writes out the audit log (within
    /// [`AUDIT_FLUSH_TIMEOUT`]; a writer stuck on a full pipe is
    /// cancelled), so no task of the proxy is left when this returns.
    pub async fn shutdown(self) {
        let Self {
            audit,
            audit_writer,
            tasks,
            ..
        } = self;
        tasks.stop().await;
        // Nothing records any more: the writer ends with the queued lines.
        audit.close_sink();
        if let Some(mut writer) = audit_writer {
            if tokio::time::timeout(AUDIT_FLUSH_TIMEOUT, &mut writer)
                .await
                .is_err()
            {
                tracing::warn!("the audit log was not written out in time");
                writer.abort();
                let _ = writer.await;
            }
        }
    }
}

async fn bind_loopback(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ProxyError> {
    if !addr.ip().is_loopback() {
        return Err(ProxyError::NonLoopback(addr));
    }
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ProxyError::Bind { addr, source })?;
    Ok((listener, bound))
}

#[derive(Debug, Clone, Copy)]
enum Service {
    Http,
    Socks5,
}

/// Accepts connections, at most [`MAX_CONNECTIONS`] at once, until the
/// proxy stops (the listener closes with this task). Each connection task
/// holds a watcher and ends when the proxy stops.
async fn accept_loop(
    listener: TcpListener,
    state: Arc<ProxyState>,
    service: Service,
    mut watcher: Watcher,
) {
    let limit = ConnectionLimit::new(MAX_CONNECTIONS);
    loop {
        let next = async {
            let permit = limit.admit().await;
            let (stream, peer) = crate::accept::next_tcp(&listener).await;
            (permit, stream, peer)
        };
        let (permit, stream, peer) = tokio::select! {
            next = next => next,
            () = watcher.stopped() => return,
        };
        let (state, connection) = (state.clone(), watcher.watcher());
        tokio::spawn(async move {
            let _permit = permit;
            match service {
                Service::Http => {
                    http_proxy::serve_connection(stream, peer, state, connection).await
                }
                Service::Socks5 => socks5::serve_connection(stream, peer, state, connection).await,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::policy::Mode;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn shutdown_ends_open_tunnels_and_the_listener() {
        let origin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin_addr = origin.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = origin.accept().await.unwrap();
            let mut buf = [0u8; 16];
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let policy = Policy::new(["127.0.0.1"], [""; 0], Mode::Full, false).unwrap();
        let handle = ProxyHandle::start(ProxyConfig::new(policy)).await.unwrap();
        let proxy = handle.http_addr();
        let mut client = tokio::net::TcpStream::connect(proxy).await.unwrap();
        let request = format!("CONNECT {origin_addr} HTTP/1.1\r\nHost: {origin_addr}\r\n\r\n");
        client.write_all(request.as_bytes()).await.unwrap();
        let mut head = vec![0u8; 19];
        client.read_exact(&mut head).await.unwrap();
        assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
        handle.shutdown().await;
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            client.read_to_end(&mut rest),
        )
        .await;
        assert!(
            matches!(read, Ok(Ok(_)) | Ok(Err(_))),
            "tunnel still open after shutdown"
        );
        assert!(tokio::net::TcpStream::connect(proxy).await.is_err());
    }
}
