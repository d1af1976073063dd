//! Command line of `codexbox rendezvous`: parses flags, refuses a public
//! bind without a token file, warns when told to serve without tokens, sets
//! up logging and the runtime, prints the `http://IP:PORT` line and serves
//! until SIGINT/SIGTERM.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::{Rendezvous, RendezvousConfig};
use crate::logging::{self, LogFormat};

const NAME: &str = "codexbox rendezvous";

/// Registry and rendezvous for remote executors (self-hosted).
#[derive(Debug, Parser)]
#[command(long_about = None)]
struct Args {
    /// Address to listen on: IP:PORT (or http://IP:PORT).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    listen: String,
    /// Base URL advertised in registry answers (http:// or https://), when
    /// clients reach this service through a load balancer or TLS terminator.
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// Who may register and connect: `TOKEN ENVIRONMENT-ID|* executor|harness|both`
    /// per line, `#` comments; reloaded on SIGHUP. Without it, an executor
    /// token and a harness token are generated and published for your own
    /// codexbox executors and clients.
    #[arg(long, value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// Serve without tokens: every process that reaches the port (any local
    /// process on loopback) may register environments and run commands on
    /// their executors.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Origin allowed to call (repeatable); a request with any other
    /// Origin header gets 403.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Lifetime of the WebSocket URLs and harness key authorizations handed out.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    url_ttl_secs: u64,
    /// TCP connections served at once.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    max_connections: usize,
    /// Of those, connections still sending their request (default: a
    /// quarter of --max-connections); the oldest gives way to a newcomer.
    #[arg(long, value_name = "N")]
    max_pending_connections: Option<usize>,
    /// Time a client has to send its whole request (head and body).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    request_timeout_secs: u64,
    /// Streams one environment may have at once.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_streams: usize,
    /// Streams one harness WebSocket may claim at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    max_streams_per_socket: usize,
    /// Streams, and harness WebSockets, one harness token may hold in one
    /// environment at once (with --tokens).
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_streams_per_token: usize,
    /// How long a claimed stream may wait for the executor to answer its
    /// handshake, and a harness WebSocket may hold no stream.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    claim_ttl_secs: u64,
    /// How long an environment whose executor is not connected is
    /// remembered (its executor registers again when it comes back later).
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    environment_ttl_secs: u64,
    /// Largest relay WebSocket message (bytes).
    #[arg(long, value_name = "BYTES", default_value_t = crate::relay::MAX_WEBSOCKET_MESSAGE_BYTES)]
    max_frame_bytes: usize,
    /// Seconds a relay socket may stay silent (no frame, ping or pong)
    /// before it is closed; pings go out every half of it.
    #[arg(long, value_name = "SECS", default_value_t = crate::link::PEER_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    peer_timeout_secs: u64,
    /// How long a reliable stream waits for a lost side to come back.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    resume_hold_secs: u64,
    /// The URL signing key, shared by every replica of a fleet: a private
    /// file (not readable by other users) holding at least 32 random bytes,
    /// as base64 text or raw. Without it a key is made at start.
    #[arg(long, value_name = "PATH")]
    signing_key_file: Option<PathBuf>,
    /// Registrations admitted per second (more get 429 with Retry-After);
    /// 0 admits every one.
    #[arg(long, value_name = "N", default_value_t = super::DEFAULT_REGISTRATIONS_PER_SEC)]
    max_registrations_per_sec: u32,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

fn build_config(args: &Args) -> Result<RendezvousConfig, String> {
    let listen = args
        .listen
        .strip_prefix("http://")
        .unwrap_or(&args.listen)
        .trim_end_matches('/');
    let listen: SocketAddr = listen
        .parse()
        .map_err(|_| format!("invalid --listen `{}`; expected IP:PORT", args.listen))?;
    if !listen.ip().is_loopback() && args.tokens.is_none() && !args.insecure_no_auth {
        return Err(format!(
            "refusing to listen on non-loopback address {listen} without --tokens; pass --insecure-no-auth to allow it"
        ));
    }
    let max_pending = args
        .max_pending_connections
        .unwrap_or(args.max_connections / 4)
        .max(1);
    if args.max_connections == 0
        || args.max_streams == 0
        || args.max_streams_per_socket == 0
        || args.max_streams_per_token == 0
        || args.max_pending_connections == Some(0)
    {
        return Err("the --max-* limits must be greater than zero".into());
    }
    if max_pending > args.max_connections {
        return Err("--max-pending-connections cannot exceed --max-connections".into());
    }
    if args.request_timeout_secs == 0 || args.claim_ttl_secs == 0 || args.environment_ttl_secs == 0
    {
        return Err("--request-timeout-secs, --claim-ttl-secs and --environment-ttl-secs must be greater than zero".into());
    }
    if args.max_frame_bytes < 64 * 1024 {
        return Err(
            "--max-frame-bytes must be at least 65536 (a relay record is up to 61.5 KiB)".into(),
        );
    }
    let mut config = RendezvousConfig::new(listen);
    config.public_url = args.public_url.clone();
    config.tokens_file = args.tokens.clone();
    config.insecure_no_auth = args.insecure_no_auth && args.tokens.is_none();
    config.allowed_origins = args.allow_origin.clone();
    config.url_ttl = Duration::from_secs(args.url_ttl_secs.max(1));
    config.max_connections = args.max_connections;
    config.max_pending_connections = max_pending;
    config.request_timeout = Duration::from_secs(args.request_timeout_secs);
    config.max_frame_bytes = args.max_frame_bytes;
    config.link =
        crate::link::Timing::with_peer_timeout(Duration::from_secs(args.peer_timeout_secs));
    config.limits.streams_per_environment = args.max_streams;
    config.limits.streams_per_harness_socket = args.max_streams_per_socket;
    config.limits.streams_per_token = args.max_streams_per_token;
    config.limits.claim_ttl = Duration::from_secs(args.claim_ttl_secs);
    config.limits.environment_ttl = Duration::from_secs(args.environment_ttl_secs);
    config.limits.resume_hold = Duration::from_secs(args.resume_hold_secs);
    config.signing_key_file = args.signing_key_file.clone();
    config.max_registrations_per_sec = args.max_registrations_per_sec;
    Ok(config)
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Entry point of the `rendezvous` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args: Args = match crate::cli::parse(&argv, NAME) {
        Ok(args) => args,
        Err(exit) => return exit.report(),
    };
    let config = match build_config(&args) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("{NAME}: {message}");
            return crate::cli::EXIT_USAGE;
        }
    };
    logging::init(args.log_format);
    if config.insecure_no_auth {
        eprintln!(
            "{NAME}: warning: serving {} without tokens (--insecure-no-auth): every process that reaches it can register any environment, taking over its streams, and run commands on every registered executor",
            config.listen
        );
    }
    let Some(runtime) = crate::startup::runtime(NAME, crate::startup::Threads::PerCpu) else {
        return 1;
    };
    runtime.block_on(async {
        // Signals are handled from here on: one sent as soon as the tokens
        // or the address are out ends the rendezvous cleanly, tokens and all.
        let shutdown = crate::server::shutdown_signal();
        let rendezvous = match Rendezvous::bind(config).await {
            Ok(rendezvous) => rendezvous,
            Err(err) => {
                eprintln!("{NAME}: {err}");
                return 1;
            }
        };
        crate::startup::announce(&rendezvous.url());
        rendezvous.run(shutdown).await;
        0
    })
}
