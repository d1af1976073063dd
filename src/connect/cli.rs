//! Command line of `codexbox connect`: the registry, environment and token
//! (flags or the reference client's `CODEX_EXEC_SERVER_NOISE_*` variables),
//! the local listen address, the dialect offered to the executor, and the
//! local listener's own token: generated and published for codexbox's
//! clients ([`crate::listener_token`]) unless `--insecure-no-auth`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use crate::client::remote::harness_config;
use crate::listener_token::{self, ListenerTokenError, Published};
use crate::logging::{self, LogFormat};
use crate::relay::credentials::{
    NOISE_ACCOUNT_ID_ENV, NOISE_AUTH_TOKEN_ENV, NOISE_ENVIRONMENT_ID_ENV, NOISE_REGISTRY_URL_ENV,
};
use crate::relay::harness::HarnessConfig;

const NAME: &str = "codexbox connect";

/// Which relay dialect to offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DialectChoice {
    /// Offer the reliable dialect (same-stream resume); falls back by itself.
    Reliable,
    /// Speak only the reference dialect.
    Reference,
}

/// Expose a remote executor as a local exec-server endpoint.
#[derive(Debug, Parser)]
#[command(long_about = None)]
struct Args {
    /// The environment registry (or set CODEX_EXEC_SERVER_NOISE_REGISTRY_URL).
    #[arg(long, value_name = "URL", env = NOISE_REGISTRY_URL_ENV)]
    registry: String,
    /// The environment to reach (or set CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID).
    #[arg(long, value_name = "ID", env = NOISE_ENVIRONMENT_ID_ENV)]
    environment_id: String,
    /// File holding the registry bearer token (else CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN).
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Local address: ws://IP:PORT.
    #[arg(long, value_name = "URL", default_value = "ws://127.0.0.1:0")]
    listen: String,
    /// Relay dialect offered to the executor.
    #[arg(long, value_enum, default_value_t = DialectChoice::Reliable)]
    relay_dialect: DialectChoice,
    /// Serve without a token, for clients that cannot send one: every local
    /// process (another user's, a sandboxed command with network access)
    /// can then use the executor with your registry credentials.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Seconds a local client may stay silent (no message, ping or pong)
    /// before its connection is closed; pings go out every half of it.
    #[arg(long, value_name = "SECS", default_value_t = crate::link::PEER_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    peer_timeout_secs: u64,
    /// Local connections served at once; one more is answered
    /// `503 Service Unavailable` until one leaves.
    #[arg(long, value_name = "N", default_value_t = crate::accept::MAX_CONNECTIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

fn build(args: &Args) -> Result<(SocketAddr, HarnessConfig), (String, i32)> {
    let listen: SocketAddr = args
        .listen
        .strip_prefix("ws://")
        .unwrap_or(&args.listen)
        .trim_end_matches('/')
        .parse()
        .map_err(|_| {
            (
                format!("invalid --listen `{}`; expected ws://IP:PORT", args.listen),
                crate::cli::EXIT_USAGE,
            )
        })?;
    if !listen.ip().is_loopback() {
        return Err((
            format!("refusing to expose the remote executor on non-loopback address {listen}"),
            crate::cli::EXIT_USAGE,
        ));
    }
    let env = |name: &str| std::env::var(name).ok();
    let token =
        crate::client::token::read_token(args.token_file.as_deref(), NOISE_AUTH_TOKEN_ENV, &env)
            .map_err(|err| (err.to_string(), err.exit_code()))?;
    let account = std::env::var(NOISE_ACCOUNT_ID_ENV).ok();
    let config = harness_config(
        &args.registry,
        &args.environment_id,
        token.as_deref(),
        account.as_deref(),
        args.relay_dialect == DialectChoice::Reliable,
    )
    .map_err(|err| (err.to_string(), err.exit_code()))?;
    Ok((listen, config))
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Entry point of the `connect` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args: Args = match crate::cli::parse(&argv, NAME) {
        Ok(args) => args,
        Err(exit) => return exit.report(),
    };
    let (listen, config) = match build(&args) {
        Ok(built) => built,
        Err((message, code)) => {
            eprintln!("{NAME}: {message}");
            return code;
        }
    };
    logging::init(args.log_format);
    let Some(runtime) = crate::startup::runtime(NAME, crate::startup::Threads::PerCpu) else {
        return 1;
    };
    let bound = std::net::TcpListener::bind(listen)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .and_then(|listener| listener.local_addr().map(|addr| (listener, addr)));
    let (listener, addr) = match bound {
        Ok(bound) => bound,
        Err(err) => {
            eprintln!("{NAME}: cannot listen on {listen}: {err}");
            return 1;
        }
    };
    runtime.block_on(async {
        // Signals are handled from here on: one sent as soon as the token
        // or the address is out ends the listener cleanly, token and all.
        let shutdown = crate::server::shutdown_signal();
        let (token, published) = if args.insecure_no_auth {
            eprintln!(
                "{NAME}: warning: serving {addr} without a token (--insecure-no-auth): every local process can use the executor with your registry credentials"
            );
            (None, None)
        } else {
            match publish_token(addr) {
                Ok((token, published)) => (Some(token), Some(published)),
                Err(err) => {
                    eprintln!("{NAME}: {err}; (--insecure-no-auth serves without a token)");
                    return 1;
                }
            }
        };
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(err) => {
                eprintln!("{NAME}: cannot listen on {addr}: {err}");
                return 1;
            }
        };
        crate::startup::announce(&format!("ws://{addr}"));
        let local = super::LocalConfig {
            token,
            link: crate::link::Timing::with_peer_timeout(Duration::from_secs(
                args.peer_timeout_secs,
            )),
            max_connections: args.max_connections,
        };
        super::serve(listener, Arc::new(config), local, shutdown).await;
        // The token goes with the listener.
        drop(published);
        0
    })
}

/// A fresh token for the listener at `addr`, published where codexbox's
/// clients look for it.
fn publish_token(addr: SocketAddr) -> Result<(String, Published), ListenerTokenError> {
    let token = listener_token::generate()?;
    let published = listener_token::publish(addr, &token)?;
    tracing::info!(
        path = %published.path().display(),
        "clients send the token in this file as `Authorization: Bearer TOKEN`"
    );
    Ok((token, published))
}
