//! The exec-server: transports, connections, sessions and request handlers,
//! and remote mode's executor (`relay_executor`), which serves them over
//! relay streams.
//!
//! [`bind`] binds the configured listener and returns a [`Server`] that
//! knows its address; [`Server::run`] serves until `shutdown` completes (or
//! stdin ends, for stdio), then kills every managed process tree. [`run`]
//! and [`run_main`] do both and print the bound URL (the CLI behaviour).
//!
//! Its modules are internal; the four marked hidden are public only for
//! this crate's fuzz tests, which feed their parsers directly.

pub(crate) mod applied_roots;
pub(crate) mod cli;
pub(crate) mod cloudflare_cookies;
pub(crate) mod config;
pub(crate) mod connection;
pub(crate) mod drain;
pub(crate) mod fs_helper_pool;
#[doc(hidden)]
pub mod fs_methods;
pub(crate) mod handlers;
#[doc(hidden)]
pub mod http_request;
pub(crate) mod listen;
pub(crate) mod metrics_listener;
#[doc(hidden)]
pub mod network_proxy;
pub(crate) mod peer_guard;
#[doc(hidden)]
pub mod process_sandbox;
pub(crate) mod relay_executor;
pub(crate) mod reply;
pub(crate) mod router;
pub(crate) mod sandbox_reuse;
pub(crate) mod session;
pub(crate) mod transport;
pub(crate) mod wire_trace;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use config::ServerConfig;
pub use drain::Stop;
pub use listen::{ListenUrl, ListenUrlParseError, DEFAULT_LISTEN_URL};

use crate::accept::ConnectionLimit;
use crate::process::reaper;
use crate::runtime_paths::ExecServerRuntimePaths;
use crate::shutdown::Shutdown;
use connection::Shared;
use session::Registry;

/// How long shutdown waits for killed trees to be reaped.
const SHUTDOWN_REAP_TIMEOUT: Duration = Duration::from_secs(3);

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("refusing to listen on non-loopback address {0} without an auth token (--auth-token-file or CODEXBOX_AUTH_TOKEN); pass --insecure-no-auth to allow it")]
    UnauthenticatedPublicBind(SocketAddr),
    #[error("cannot listen on {url}: {source}")]
    Bind {
        url: String,
        #[source]
        source: std::io::Error,
    },
}

impl ServerError {
    /// The exit status of the `exec-server` mode: a listen address refused
    /// for want of a token is a usage error.
    pub fn exit_code(&self) -> i32 {
        match self {
            ServerError::UnauthenticatedPublicBind(_) => crate::cli::EXIT_USAGE,
            ServerError::Bind { .. } => crate::cli::EXIT_FAILURE,
        }
    }
}

/// Runs the server on `listen` with default settings until SIGINT/SIGTERM
/// (or stdin EOF for stdio). For embedding.
pub async fn run_main(paths: ExecServerRuntimePaths, listen: ListenUrl) -> Result<(), ServerError> {
    run(paths, ServerConfig::new(listen), shutdown_signal()).await
}

/// Completes on SIGINT or SIGTERM, whose handlers are installed at the
/// call (see `startup::stop_signal`).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    let stop = crate::startup::stop_signal();
    async move {
        stop.await;
    }
}

/// Runs the server until `shutdown` completes: [`bind`], print the bound
/// URL as the one stdout line (not for stdio), then [`Server::run`].
pub async fn run(
    paths: ExecServerRuntimePaths,
    config: ServerConfig,
    shutdown: impl Future<Output = impl Into<drain::Stop>>,
) -> Result<(), ServerError> {
    let server = bind(paths, config).await?;
    if !matches!(server.listener, Listener::Stdio) {
        crate::startup::announce(&server.url());
    }
    server.run(shutdown).await
}

/// The bound listener of a [`Server`].
enum Listener {
    Stdio,
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener, PathBuf),
}

/// A server bound to its listener, not serving yet (for embedders: the
/// address is known before [`Server::run`]).
pub struct Server {
    shared: Shared,
    listener: Listener,
    /// The `--metrics-listen` side port.
    metrics_listener: Option<tokio::net::TcpListener>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("url", &self.url()).finish()
    }
}

/// Binds the configured listener (checking the auth rules of a
/// non-loopback bind) without printing anything.
pub async fn bind(
    paths: ExecServerRuntimePaths,
    config: ServerConfig,
) -> Result<Server, ServerError> {
    let bind_error = |source| ServerError::Bind {
        url: config.listen.to_string(),
        source,
    };
    let listener = match config.listen.clone() {
        ListenUrl::Stdio => Listener::Stdio,
        ListenUrl::WebSocket(addr) => {
            check_public_bind(addr, &config)?;
            Listener::Tcp(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(bind_error)?,
            )
        }
        ListenUrl::Unix(path) => Listener::Unix(bind_unix(&path).map_err(bind_error)?, path),
    };
    let extra_denied = match &listener {
        Listener::Unix(_, path) => vec![path.clone()],
        _ => Vec::new(),
    };
    let metrics_listener = metrics_listener::bind(&config).await?;
    let shared = shared_state(paths, config, extra_denied);
    Ok(Server {
        shared,
        listener,
        metrics_listener,
    })
}

/// Refuses a non-loopback `addr` without an auth token (unless told to).
fn check_public_bind(addr: SocketAddr, config: &ServerConfig) -> Result<(), ServerError> {
    if !addr.ip().is_loopback() && config.auth_token.is_none() && !config.insecure_no_auth {
        return Err(ServerError::UnauthenticatedPublicBind(addr));
    }
    Ok(())
}

/// The state every connection shares, for a server with no listener of its
/// own (remote mode) or with one; `extra_denied` is added to the paths every
/// sandbox denies.
pub fn shared_state(
    paths: ExecServerRuntimePaths,
    config: ServerConfig,
    extra_denied: Vec<PathBuf>,
) -> Shared {
    let mut denied = config.protected_paths.clone();
    denied.extend(extra_denied);
    let reuse = sandbox_reuse::Reuse::new(config.sandbox_reuse, paths.codex_self_exe.clone());
    Shared {
        registry: Registry::new(config.session_grace),
        config: Arc::new(config),
        paths: Arc::new(paths),
        guard: Arc::new(process_sandbox::SandboxGuard::new(denied)),
        metrics: crate::metrics::exec::ExecMetrics::new(fs_methods::METHODS),
        reuse: Arc::new(reuse),
        fs_helpers: fs_helper_pool::HelperPool::from_env(),
        sandboxed_roots: Default::default(),
        process_tasks: Default::default(),
    }
}

/// Kills every managed process tree of the server and waits for them to be
/// reaped, and closes its idle fs-helpers.
pub async fn shutdown_cleanup(shared: &Shared) {
    let registry = shared.registry.clone();
    let _ = tokio::task::spawn_blocking(move || registry.kill_everything_blocking()).await;
    shared.fs_helpers.close().await;
    reaper::wait_all(SHUTDOWN_REAP_TIMEOUT).await;
    // The processes' own tasks (output pumps, stdin writers, network
    // proxies) have mostly ended with them; the rest end now.
    shared.process_tasks.stop().await;
    let _ = tokio::task::spawn_blocking(|| {
        crate::process::spawn::shutdown_zygote(SHUTDOWN_REAP_TIMEOUT)
    })
    .await;
}

impl Server {
    /// The bound TCP address (`None` for stdio and Unix sockets).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Tcp(listener) => listener.local_addr().ok(),
            _ => None,
        }
    }

    /// `ws://IP:PORT` with the real port, `unix:///path`, or `stdio`.
    pub fn url(&self) -> String {
        match &self.listener {
            Listener::Tcp(listener) => match listener.local_addr() {
                Ok(addr) => format!("ws://{addr}"),
                Err(_) => self.shared.config.listen.to_string(),
            },
            Listener::Unix(_, path) => format!("unix://{}", path.display()),
            Listener::Stdio => ListenUrl::Stdio.to_string(),
        }
    }

    /// Serves until `shutdown` completes (or stdin ends, for stdio), then
    /// kills every managed process tree and removes the Unix socket. When
    /// `shutdown` asks for [`Stop::Drain`], no new connection is
    /// taken and running processes get the configured drain grace first.
    pub async fn run(
        self,
        shutdown: impl Future<Output = impl Into<drain::Stop>>,
    ) -> Result<(), ServerError> {
        let Server {
            shared,
            listener,
            metrics_listener,
        } = self;
        let registry = shared.registry.clone();
        let scrapes = metrics_listener::spawn(metrics_listener, &shared);
        let tasks = Shutdown::new();
        let limit = ConnectionLimit::new(shared.config.max_connections);
        let mut socket_path: Option<PathBuf> = None;
        let stop: drain::Stop = match listener {
            Listener::Stdio => {
                tokio::select! {
                    _ = transport::stdio::serve(shared.clone()) => drain::Stop::Now,
                    stop = shutdown => stop.into(),
                }
            }
            Listener::Tcp(listener) => {
                tokio::select! {
                    _ = accept_tcp(listener, shared.clone(), &limit, &tasks) => drain::Stop::Now,
                    stop = shutdown => stop.into(),
                }
            }
            Listener::Unix(listener, path) => {
                socket_path = Some(path);
                tokio::select! {
                    _ = accept_unix(listener, shared.clone(), &limit, &tasks) => drain::Stop::Now,
                    stop = shutdown => stop.into(),
                }
            }
        };
        // The listener is gone: connections already open go on serving.
        if stop == drain::Stop::Drain {
            drain::drain(&registry, shared.config.drain_grace, shutdown_signal()).await;
        }
        drop(scrapes);
        // Every connection closes (a close frame saying why) and its task ends.
        tasks.stop().await;
        shutdown_cleanup(&shared).await;
        if let Some(path) = socket_path {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }
}

/// Accepts TCP connections, each in its own task holding a slot of `limit`
/// and watching `tasks`.
async fn accept_tcp(
    listener: tokio::net::TcpListener,
    shared: Shared,
    limit: &ConnectionLimit,
    tasks: &Shutdown,
) {
    let policy = Arc::new(transport::websocket::access_policy(&shared));
    loop {
        let (stream, peer) = crate::accept::next_tcp(&listener).await;
        let Some(slot) = limit.try_admit() else {
            crate::accept::refuse_busy(stream, &peer.to_string());
            continue;
        };
        let (shared, policy, watcher) = (shared.clone(), policy.clone(), tasks.watcher());
        tokio::spawn(async move {
            let _slot = slot;
            if refused_tcp(&stream, peer, &shared).await {
                return refuse(stream, &peer.to_string()).await;
            }
            transport::websocket::serve_stream(stream, peer.to_string(), shared, policy, watcher)
                .await
        });
    }
}

/// Accepts Unix-socket connections, like [`accept_tcp`].
async fn accept_unix(
    listener: tokio::net::UnixListener,
    shared: Shared,
    limit: &ConnectionLimit,
    tasks: &Shutdown,
) {
    let policy = Arc::new(transport::websocket::access_policy(&shared));
    loop {
        let stream = crate::accept::next_unix(&listener).await;
        let Some(slot) = limit.try_admit() else {
            crate::accept::refuse_busy(stream, "unix socket");
            continue;
        };
        let (shared, policy, watcher) = (shared.clone(), policy.clone(), tasks.watcher());
        tokio::spawn(async move {
            let _slot = slot;
            let pid = stream.peer_cred().ok().and_then(|cred| cred.pid());
            let roots = shared.sandboxed_roots.pids();
            let refused = tokio::task::spawn_blocking(move || peer_guard::refuse_unix(pid, &roots))
                .await
                .unwrap_or(true);
            if refused {
                return refuse(stream, "unix socket").await;
            }
            let peer = "unix socket".to_owned();
            transport::websocket::serve_stream(stream, peer, shared, policy, watcher).await
        });
    }
}

/// Whether the TCP peer is inside one of the server's sandboxed subtrees
/// ([`peer_guard`]);
/// true when that cannot be told.
async fn refused_tcp(stream: &tokio::net::TcpStream, peer: SocketAddr, shared: &Shared) -> bool {
    let roots = shared.sandboxed_roots.pids();
    match stream.local_addr() {
        Ok(local) => {
            tokio::task::spawn_blocking(move || peer_guard::refuse_tcp(local, peer, roots))
                .await
                .unwrap_or(true)
        }
        Err(_) => true,
    }
}

/// Answers 403 to a peer inside a sandboxed subtree ([`peer_guard`]).
async fn refuse<S>(stream: S, peer: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use transport::http;
    tracing::warn!(%peer, "refused a connection from a sandboxed process");
    let forbidden = |_| async { (http::refusal(http::StatusCode::FORBIDDEN), None::<()>) };
    crate::net::http_server::serve_one(stream, http::HEAD_TIMEOUT, forbidden).await;
}

/// Binds a Unix socket readable and writable by the owner only. A stale
/// socket at `path` is replaced; any other file is an error.
fn bind_unix(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(path)?;
        } else {
            return Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists));
        }
    }
    // The umask covers the window between bind and chmod.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let listener = tokio::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = listener?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}
