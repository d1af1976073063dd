//! `networkProxy` on `process/start` (docs/network.md): turns the
//! wire settings into a proxy of the process's own on loopback, writes the
//! child's proxy variables, keeps the proxy alive until the process's
//! `process/closed`, and reports its denials — in `process/read` results
//! (`networkDenials`) and, to connections that announced
//! `capabilities.networkDenials` in `initialize`, as
//! `process/networkDenied` notifications.

use std::ffi::OsString;
use std::sync::{Arc, Weak};

use tokio::sync::broadcast;

use super::session::Session;
use crate::metrics::exec::ExecMetrics;
use crate::net::audit::AuditLog;
use crate::net::decision::Decision;
use crate::net::env::apply_proxy_env;
use crate::net::policy::{Mode, Policy};
use crate::net::upstream::Upstream;
use crate::net::{ProxyConfig, ProxyHandle};
use crate::process::ManagedProcess;
use crate::protocol::envelope::encode_notification;
use crate::protocol::network::{
    DomainPermission, ManagedNetworkSandboxContext, NetworkDenial, NetworkDeniedNotification,
    NetworkMode, RemoteNetworkProxyLaunchConfig, UnixSocketPermission, NOTIFY_NETWORK_DENIED,
};
use crate::protocol::RpcError;
use crate::shutdown::SharedShutdown;

/// A proxy started for a process that is not spawned yet.
#[derive(Debug)]
pub struct LaunchedProxy {
    handle: ProxyHandle,
    /// What a sandbox that allowlists loopback ports would need (macOS);
    /// the Linux sandbox routes by the proxy variables instead.
    pub managed_network: ManagedNetworkSandboxContext,
}

impl LaunchedProxy {
    /// The proxy's decisions; outlives the proxy, for `process/read` after
    /// `process/closed` (the server keeps it with the process).
    pub fn log(&self) -> Arc<AuditLog> {
        self.handle.log()
    }
}

fn invalid_config(message: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(format!("invalid network proxy config: {message}"))
}

/// The proxy configuration the wire settings describe (validation as the
/// reference's). Checks only: starts nothing.
pub fn proxy_config(launch: &RemoteNetworkProxyLaunchConfig) -> Result<ProxyConfig, RpcError> {
    let settings = &launch.proxy;
    if !settings.enabled {
        return Err(invalid_config(
            "executor-local network proxy launch requires an enabled proxy",
        ));
    }
    let domains = settings.domains.clone().unwrap_or_default();
    let with = |wanted: DomainPermission| {
        domains
            .iter()
            .filter(move |(_, permission)| **permission == wanted)
            .map(|(pattern, _)| pattern.clone())
    };
    let mode = match settings.mode {
        NetworkMode::Full => Mode::Full,
        NetworkMode::Limited => Mode::Limited,
    };
    let policy = Policy::new(
        with(DomainPermission::Allow),
        with(DomainPermission::Deny),
        mode,
        settings.allow_local_binding,
    )
    .map_err(invalid_config)?;
    let sockets = settings.unix_sockets.clone().unwrap_or_default();
    let allowed_sockets = sockets
        .iter()
        .filter(|(_, permission)| **permission == UnixSocketPermission::Allow);
    for (index, (path, _)) in allowed_sockets.enumerate() {
        if !path.starts_with('/') {
            return Err(invalid_config(format!(
                "invalid network.allow_unix_sockets[{index}]"
            )));
        }
    }
    if !sockets.is_empty() || settings.dangerously_allow_all_unix_sockets {
        tracing::warn!("allowUnixSockets and dangerouslyAllowAllUnixSockets are macOS-only; requests will be rejected on this platform");
    }
    let mut config = ProxyConfig::new(policy);
    if settings.enable_socks5 {
        config.socks5_listen = Some(config.http_listen);
    }
    config.socks5_udp = settings.enable_socks5_udp;
    if settings.allow_upstream_proxy {
        config.upstream = Upstream::from_process_env();
    }
    Ok(config)
}

/// Starts the proxy for a `process/start` and writes the child's proxy
/// variables into `env` (replacing stale ones).
pub async fn launch(
    launch: &RemoteNetworkProxyLaunchConfig,
    env: &mut Vec<(OsString, OsString)>,
) -> Result<LaunchedProxy, RpcError> {
    let config = proxy_config(launch)?;
    let allow_local_binding = config.policy.allow_local_binding;
    let handle = ProxyHandle::start(config).await.map_err(|err| {
        RpcError::internal(format!("failed to build executor network proxy: {err}"))
    })?;
    apply_proxy_env(
        env,
        handle.http_addr(),
        handle.socks5_addr(),
        allow_local_binding,
    );
    let mut loopback_ports: Vec<u16> = std::iter::once(handle.http_addr())
        .chain(handle.socks5_addr())
        .map(|addr| addr.port())
        .collect();
    loopback_ports.sort_unstable();
    loopback_ports.dedup();
    Ok(LaunchedProxy {
        handle,
        managed_network: ManagedNetworkSandboxContext {
            loopback_ports,
            allow_local_binding,
        },
    })
}

/// The denials in `log` so far (oldest first), as `process/read` lists them.
pub fn denials(log: &AuditLog) -> Vec<NetworkDenial> {
    let (recent, _) = log.recent_blocked();
    recent.iter().filter_map(|d| denial_of(d)).collect()
}

/// Ties `proxy` to `process`: decisions are counted in `metrics`, denials
/// reported until the process is closed or the server stops (`tasks`),
/// then the proxy shuts down.
pub fn attach(
    session: &Arc<Session>,
    process: &Arc<ManagedProcess>,
    proxy: LaunchedProxy,
    metrics: Arc<ExecMetrics>,
    tasks: &SharedShutdown,
) {
    // A server that is stopping kills the process anyway: the proxy goes
    // with its handle.
    let Some(mut watcher) = tasks.watcher() else {
        return;
    };
    let session = Arc::downgrade(session);
    let process = process.clone();
    tokio::spawn(async move {
        let handle = proxy.handle;
        let mut decisions = handle.subscribe();
        loop {
            // Decisions already made are counted and reported before
            // the close ends the loop.
            tokio::select! {
                biased;
                decision = decisions.recv() => match decision {
                    Ok(decision) => {
                        metrics.proxy_decision(decision.deny_reason().is_none());
                        report(&session, &process, &decision).await
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(process = process.id(), missed, "network decisions lost");
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                () = closed(&process) => break,
                () = watcher.stopped() => break,
            }
        }
        handle.shutdown().await;
    });
}

/// Sends `process/networkDenied` for a denial to the connection attached
/// to the session, if that connection asked for them.
async fn report(session: &Weak<Session>, process: &ManagedProcess, decision: &Decision) {
    let Some(denial) = denial_of(decision) else {
        return;
    };
    let Some(out) = session.upgrade().and_then(|s| s.denial_route()) else {
        return;
    };
    let params = NetworkDeniedNotification {
        process_id: process.id().to_owned(),
        host: denial.host,
        port: denial.port,
        protocol: denial.protocol,
        reason: denial.reason,
    };
    let _ = out
        .send(encode_notification(NOTIFY_NETWORK_DENIED, &params))
        .await;
}

/// A denial as the wire lists it; `None` for an allow.
fn denial_of(decision: &Decision) -> Option<NetworkDenial> {
    let reason = decision.deny_reason()?;
    Some(NetworkDenial {
        host: decision.host.clone(),
        port: decision.port,
        protocol: decision.protocol.as_str().to_owned(),
        reason: reason.as_str().to_owned(),
    })
}

/// Completes once `process` is closed (exit known, every stream at EOF).
async fn closed(process: &ManagedProcess) {
    loop {
        let changed = process.record().changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if process.is_closed() {
            return;
        }
        changed.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::network::{AuditMetadata, NetworkProxySettings};

    fn launch_config(domains: &[(&str, DomainPermission)]) -> RemoteNetworkProxyLaunchConfig {
        RemoteNetworkProxyLaunchConfig {
            proxy: NetworkProxySettings {
                enabled: true,
                enable_socks5: false,
                enable_socks5_udp: false,
                allow_upstream_proxy: false,
                dangerously_allow_all_unix_sockets: false,
                mode: NetworkMode::Full,
                domains: Some(domains.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()),
                unix_sockets: None,
                allow_local_binding: false,
            },
            audit_metadata: AuditMetadata::default(),
            environment_id: None,
            execution_id: None,
        }
    }

    #[test]
    fn invalid_settings_get_the_reference_messages() {
        let mut disabled = launch_config(&[]);
        disabled.proxy.enabled = false;
        assert_eq!(
            proxy_config(&disabled).unwrap_err().message,
            "invalid network proxy config: executor-local network proxy launch requires an enabled proxy"
        );
        let global = launch_config(&[("*", DomainPermission::Deny)]);
        assert_eq!(
            proxy_config(&global).unwrap_err().message,
            "invalid network proxy config: invalid value for network.denied_domains: * (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)"
        );
        let glob = launch_config(&[("[", DomainPermission::Allow)]);
        assert_eq!(
            proxy_config(&glob).unwrap_err().message,
            "invalid network proxy config: invalid glob pattern: ["
        );
        let mut sockets = launch_config(&[]);
        sockets.proxy.unix_sockets = Some(
            [
                ("/ok".to_owned(), UnixSocketPermission::Allow),
                ("rel".to_owned(), UnixSocketPermission::Allow),
            ]
            .into_iter()
            .collect(),
        );
        assert_eq!(
            proxy_config(&sockets).unwrap_err().message,
            "invalid network proxy config: invalid network.allow_unix_sockets[1]"
        );
        let none = launch_config(&[
            ("a.com", DomainPermission::None),
            ("b.com", DomainPermission::Allow),
        ]);
        assert_eq!(proxy_config(&none).unwrap().policy.allow.len(), 1);
    }
}
