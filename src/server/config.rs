//! Server settings, parsed once by the CLI (or built by an embedder) and
//! shared read-only by every connection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::listen::ListenUrl;
use super::sandbox_reuse::ReuseConfig;
use crate::link;
use crate::link::liveness::TAKEOVER_PROBE;
use crate::process::retention::RETAINED_OUTPUT_BYTES;

/// Environment variable holding the bearer token (alternative to the file).
pub const AUTH_TOKEN_ENV: &str = "CODEXBOX_AUTH_TOKEN";

/// Default largest JSON-RPC message accepted: 128 MiB. A 64 MiB file is
/// 89.5 MB of base64, so `fs/writeFile` of up to about 95 MiB fits in one
/// message out of the box; larger files go through `fs/open` +
/// `fs/writeBlock` in bounded memory. Parsing a message costs about twice
/// its size (the text and the decoded value), which the cap bounds.
pub const MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;
/// The smallest transport-level message cap (see [`ServerConfig::transport_cap`]).
pub const MIN_TRANSPORT_CAP: usize = 128 * 1024 * 1024;
/// Default live processes per session.
pub const MAX_PROCESSES_PER_SESSION: usize = 1024;
/// Default grace period of a detached session.
pub const SESSION_GRACE: Duration = Duration::from_secs(30);
/// Default longest grace period a client may ask for (one day).
pub const MAX_SESSION_GRACE: Duration = Duration::from_secs(24 * 3600);
/// Messages queued per connection before producers wait.
pub const OUTBOUND_QUEUE: usize = 128;

/// Everything the server needs to run.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: ListenUrl,
    /// How long a detached session survives unless its client asked otherwise.
    pub session_grace: Duration,
    /// The longest grace period a client may ask for in `initialize`.
    pub max_session_grace: Duration,
    /// Pings, the peer deadline and the write timeout of every WebSocket.
    pub link: link::Timing,
    /// How long a resume waits for the current holder's answer.
    pub takeover_probe: Duration,
    pub retained_output_bytes: usize,
    pub max_message_bytes: usize,
    pub max_processes: usize,
    /// Required bearer token on the WebSocket upgrade.
    pub auth_token: Option<String>,
    /// `Origin` header values that are not refused.
    pub allowed_origins: Vec<String>,
    /// Allow a non-loopback bind without a token.
    pub insecure_no_auth: bool,
    /// Paths every sandbox the server builds denies (e.g. the token file);
    /// the Unix socket being listened on is added by the server itself.
    pub protected_paths: Vec<PathBuf>,
    /// How long a SIGTERM lets running processes finish (zero: kill at once).
    pub drain_grace: Duration,
    /// A side port serving only `GET /metrics` (`--metrics-listen`).
    pub metrics_listen: Option<SocketAddr>,
    /// Whether sandboxed commands reuse prepared sandboxes, and for how long
    /// an unused one is kept.
    pub sandbox_reuse: ReuseConfig,
    /// Connections served at once; one more is answered `503`.
    pub max_connections: usize,
}

impl ServerConfig {
    /// Defaults for `listen`.
    pub fn new(listen: ListenUrl) -> Self {
        Self {
            listen,
            session_grace: SESSION_GRACE,
            max_session_grace: MAX_SESSION_GRACE,
            link: link::Timing::default(),
            takeover_probe: TAKEOVER_PROBE,
            retained_output_bytes: RETAINED_OUTPUT_BYTES,
            max_message_bytes: MAX_MESSAGE_BYTES,
            max_processes: MAX_PROCESSES_PER_SESSION,
            auth_token: None,
            allowed_origins: Vec::new(),
            insecure_no_auth: false,
            protected_paths: Vec::new(),
            drain_grace: Duration::ZERO,
            metrics_listen: None,
            sandbox_reuse: ReuseConfig::default(),
            max_connections: crate::accept::MAX_CONNECTIONS,
        }
    }

    /// Frames above this close the WebSocket (1009) unread, so the memory a
    /// peer can make one connection hold is bounded by it; between the JSON
    /// limit and this, a message is read and refused with an error carrying
    /// its id (found by a scan) and the connection stays open. Twice the
    /// JSON limit (256 MiB by default), so a client that overshoots by up to
    /// 2× is told why instead of being cut off, and never below
    /// `MIN_TRANSPORT_CAP`, so a small `--max-message-bytes` still answers
    /// oversized messages.
    pub fn transport_cap(&self) -> usize {
        transport_cap(self.max_message_bytes)
    }
}

/// The transport cap for a JSON limit of `max_message_bytes` (see
/// [`ServerConfig::transport_cap`]).
pub const fn transport_cap(max_message_bytes: usize) -> usize {
    let doubled = max_message_bytes.saturating_mul(2);
    if doubled > MIN_TRANSPORT_CAP {
        doubled
    } else {
        MIN_TRANSPORT_CAP
    }
}
