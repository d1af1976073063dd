//! Command line of the `exec-server` mode: parses flags, sets up logging,
//! builds the tokio runtime (dispatch happened before any runtime existed)
//! and runs the server until SIGINT/SIGTERM or stdin EOF (stdio).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::CommandFactory;

use super::config::{
    ServerConfig, AUTH_TOKEN_ENV, MAX_MESSAGE_BYTES, MAX_PROCESSES_PER_SESSION, MAX_SESSION_GRACE,
};
use super::listen::{ListenUrl, DEFAULT_LISTEN_URL};
use super::sandbox_reuse::{ReuseConfig, DEFAULT_IDLE};
use crate::link::liveness::TAKEOVER_PROBE_MS;
use crate::link::{self, PEER_TIMEOUT};
use crate::logging::{self, LogFormat};
use crate::process::retention::RETAINED_OUTPUT_BYTES;
use crate::runtime_paths::ExecServerRuntimePaths;

/// Run processes and serve files over JSON-RPC (WebSocket, Unix socket or stdio)
#[derive(Debug, clap::Parser)]
#[command(long_about = None)]
struct Args {
    /// Where to listen: ws://IP:PORT, unix:///path/to.sock, or stdio.
    #[arg(long, value_name = "URL", default_value = DEFAULT_LISTEN_URL, conflicts_with = "remote")]
    listen: String,
    /// Seconds a detached session survives before its processes are killed (0 = at once).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    session_grace_secs: u64,
    /// The longest grace period a client may ask for its session.
    #[arg(long, value_name = "SECS", default_value_t = MAX_SESSION_GRACE.as_secs())]
    max_session_grace_secs: u64,
    /// Seconds a client may stay silent (no message, ping or pong) before
    /// its connection is closed and its session detached; pings go out
    /// every half of it, and a write stalled this long in silence also ends it.
    #[arg(long, value_name = "SECS", default_value_t = PEER_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    peer_timeout_secs: u64,
    /// Milliseconds a resume waits for the connection holding the session
    /// to answer a ping before taking the session over (for tests).
    #[arg(long, value_name = "MS", default_value_t = TAKEOVER_PROBE_MS, hide = true)]
    takeover_probe_ms: u64,
    /// Output bytes retained per process for process/read.
    #[arg(long, value_name = "BYTES", default_value_t = RETAINED_OUTPUT_BYTES)]
    retained_output_bytes: usize,
    /// Largest JSON-RPC message accepted; larger ones get an error reply.
    #[arg(long, value_name = "BYTES", default_value_t = MAX_MESSAGE_BYTES)]
    max_message_bytes: usize,
    /// WebSocket connections served at once; one more is answered
    /// `503 Service Unavailable` until one leaves.
    #[arg(long, value_name = "N", default_value_t = crate::accept::MAX_CONNECTIONS)]
    max_connections: usize,
    /// Live processes allowed per session.
    #[arg(long, value_name = "N", default_value_t = MAX_PROCESSES_PER_SESSION)]
    max_processes: usize,
    /// File holding the bearer token required on the WebSocket upgrade
    /// (or set CODEXBOX_AUTH_TOKEN).
    #[arg(long, value_name = "PATH")]
    auth_token_file: Option<PathBuf>,
    /// Origin allowed to connect (repeatable); any other Origin gets 403.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Allow listening on a non-loopback address without a token.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Also serve `GET /metrics` (Prometheus text) on this IP:PORT, with the
    /// auth rules of --listen: for --remote executors, which listen nowhere.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Remote mode: register with this environment registry and serve
    /// harnesses through its rendezvous instead of listening.
    #[arg(long, value_name = "URL", requires = "environment_id")]
    remote: Option<String>,
    /// The environment to register as (remote mode).
    #[arg(long, value_name = "ID", alias = "executor-id", requires = "remote")]
    environment_id: Option<String>,
    /// A name for this executor (remote mode; kept locally, sent nowhere).
    #[arg(long, value_name = "NAME", default_value = "codex-exec-server")]
    name: String,
    /// Authenticate to the registry with CODEX_ACCESS_TOKEN (remote mode).
    #[arg(long, requires = "remote")]
    use_agent_identity_auth: bool,
    /// Remote mode: register again every this many seconds (each wait
    /// drawn from the second half), so that an environment a fleet of
    /// rendezvous replicas moved to another replica is reachable there
    /// within that time; 0 registers only at start and when the URL is
    /// refused.
    #[arg(long, value_name = "SECS", requires = "remote", default_value_t = super::relay_executor::DEFAULT_REGISTER_INTERVAL.as_secs())]
    register_interval_secs: u64,
    /// On SIGTERM, take no new connection, stream or process and give
    /// running processes this long to finish before killing them
    /// (0 = kill at once; SIGINT always does).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    drain_grace_secs: u64,
    /// Whether sandboxed commands reuse a sandbox prepared per shape
    /// (on) or each get a sandbox of their own built for them (off).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    sandbox_reuse: String,
    /// Seconds an unused prepared sandbox is kept.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_IDLE.as_secs())]
    sandbox_reuse_idle_secs: u64,
}

/// The registry client of remote mode, with its credentials.
fn remote_registry(
    remote: &str,
    environment_id: &str,
    agent_identity: bool,
) -> Result<crate::relay::registry_client::RegistryClient, (String, i32)> {
    let env = |name: &str| std::env::var(name).ok();
    let auth = crate::relay::credentials::load(remote, agent_identity, &env)
        .map_err(|err| (err.to_string(), crate::cli::EXIT_FAILURE))?;
    crate::relay::registry_client::RegistryClient::new(remote, environment_id, auth)
        .map_err(|err| (err.to_string(), crate::cli::EXIT_USAGE))
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    Args::command()
}

/// Entry point of the `exec-server` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let name = crate::cli::mode_name(&argv, crate::mode::EXEC_SERVER_ARG0);
    let args: Args = match crate::cli::parse(&argv, &name) {
        Ok(args) => args,
        Err(exit) => return exit.report(),
    };
    let remote = match (&args.remote, &args.environment_id) {
        (Some(url), Some(id)) => match remote_registry(url, id, args.use_agent_identity_auth) {
            Ok(registry) => Some(registry),
            Err((message, code)) => {
                eprintln!("{name}: {message}");
                return code;
            }
        },
        _ => None,
    };
    let register_interval =
        Some(Duration::from_secs(args.register_interval_secs)).filter(|d| !d.is_zero());
    let config = match build_config(args) {
        Ok(config) => config,
        Err((message, code)) => {
            eprintln!("{name}: {message}");
            return code;
        }
    };
    raise_fd_limit();
    crate::startup::tune_allocator(crate::startup::Memory::Reuse);
    let paths = match ExecServerRuntimePaths::current() {
        Ok(paths) => paths,
        Err(err) => {
            eprintln!("{name}: cannot locate the executable: {err}");
            return 1;
        }
    };
    // One thread runs every task: a process's output pump and its
    // connection's writer then hand each message over without waking another
    // thread (a multi-threaded runtime spent as much CPU on those cross-thread
    // wake-ups as on the streaming itself). Blocking work still goes to
    // tokio's blocking pool; the children, the client and the kernel's
    // terminal worker get the other CPUs.
    let Some(runtime) = crate::startup::runtime(&name, crate::startup::Threads::One) else {
        return 1;
    };
    let outcome = match remote {
        Some(registry) => runtime.block_on(async {
            let metrics_listener = super::metrics_listener::bind(&config)
                .await
                .map_err(|err| (err.to_string(), err.exit_code()))?;
            let shared = super::shared_state(paths, config, Vec::new());
            let server_state = shared.clone();
            let scrapes = super::metrics_listener::spawn(metrics_listener, &shared);
            let outcome = super::relay_executor::run(
                shared,
                registry,
                register_interval,
                crate::startup::stop_signal(),
            )
            .await;
            drop(scrapes);
            super::shutdown_cleanup(&server_state).await;
            outcome.map_err(|err| (err.to_string(), crate::cli::EXIT_FAILURE))
        }),
        None => runtime
            .block_on(async { super::run(paths, config, crate::startup::stop_signal()).await })
            .map_err(|err| (err.to_string(), err.exit_code())),
    };
    // The stdin reader of the stdio transport may sit in a blocking read.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match outcome {
        Ok(()) => 0,
        Err((err, code)) => {
            // Remote mode's errors may quote the registry.
            eprintln!("{name}: {}", crate::terminal_text::Escaped(&err));
            code
        }
    }
}

fn build_config(args: Args) -> Result<ServerConfig, (String, i32)> {
    logging::init(args.log_format);
    let listen: ListenUrl = args
        .listen
        .parse()
        .map_err(|e| (format!("{e}"), crate::cli::EXIT_USAGE))?;
    let token = match &args.auth_token_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
            (
                format!("cannot read --auth-token-file {}: {e}", path.display()),
                crate::cli::EXIT_FAILURE,
            )
        })?),
        None => std::env::var(AUTH_TOKEN_ENV).ok(),
    }
    .map(|t| t.trim().to_owned());
    if token.as_deref() == Some("") {
        let source = match &args.auth_token_file {
            Some(path) => format!("--auth-token-file {}", path.display()),
            None => AUTH_TOKEN_ENV.to_owned(),
        };
        return Err((
            format!("the auth token in {source} is empty"),
            crate::cli::EXIT_USAGE,
        ));
    }
    if args.max_message_bytes == 0 || args.max_processes == 0 || args.max_connections == 0 {
        return Err((
            "--max-message-bytes, --max-processes and --max-connections must be greater than zero"
                .into(),
            crate::cli::EXIT_USAGE,
        ));
    }
    Ok(ServerConfig {
        listen,
        session_grace: Duration::from_secs(args.session_grace_secs),
        max_session_grace: Duration::from_secs(args.max_session_grace_secs),
        link: link::Timing::with_peer_timeout(Duration::from_secs(args.peer_timeout_secs)),
        takeover_probe: Duration::from_millis(args.takeover_probe_ms),
        retained_output_bytes: args.retained_output_bytes,
        max_message_bytes: args.max_message_bytes,
        max_processes: args.max_processes,
        auth_token: token,
        allowed_origins: args.allow_origin,
        insecure_no_auth: args.insecure_no_auth,
        protected_paths: args.auth_token_file.into_iter().collect(),
        drain_grace: Duration::from_secs(args.drain_grace_secs),
        metrics_listen: args.metrics_listen,
        sandbox_reuse: ReuseConfig {
            enabled: args.sandbox_reuse == "on",
            idle: Duration::from_secs(args.sandbox_reuse_idle_secs),
        },
        max_connections: args.max_connections,
    })
}

/// Many managed processes need many descriptors: lift the soft limit to the hard one.
fn raise_fd_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}
