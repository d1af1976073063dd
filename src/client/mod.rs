//! `ExecServerClient`: an async (tokio) Rust client for the exec-server.
//!
//! It connects over `ws://HOST:PORT` or `unix:///path.sock` (WebSocket over a
//! Unix socket) with an optional bearer token, performs the `initialize` /
//! `initialized` handshake, sends any request with [`ExecServerClient::call`]
//! (many may be in flight; responses are matched by id), hands server
//! notifications out through a bounded channel, and resumes its session on a
//! new connection with [`ExecServerClient::reconnect`].
//!
//! The transport (dialing, reader and writer tasks) lives in `connection`;
//! the typed views of process messages in `types`. The client never replays
//! a request on its own (only the resume handshake is retried while the
//! server detaches the old connection): after a disconnect, callers
//! reconnect and catch up with `process/read { afterSeq }`.

mod connection;
pub mod remote;
pub mod token;
pub mod transfer;
mod types;

use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::protocol::envelope::code::SESSION_ALREADY_ATTACHED;
use crate::protocol::network::ClientCapabilities;
use crate::protocol::sandbox::FileSystemSandboxContext;
pub use crate::protocol::session::{ProcessState, ProcessSummary, SessionSummary};
use crate::protocol::session::{SessionListResult, METHOD_LIST as METHOD_SESSION_LIST};
use crate::protocol::{
    environment, fs, process, InitializeParams, InitializeResult, PathError, WirePath,
    METHOD_INITIALIZE, NOTIFY_INITIALIZED,
};
use connection::{Connection, Endpoint};
pub use remote::RemoteExecServerClient;
pub use types::{
    decode_chunk, EnvironmentInfo, ProcessEvent, ReadChunk, ReadParams, ReadResult, ShellInfo,
    StartParams, WriteResult,
};

/// How long [`ExecServerClient::reconnect`] waits for the server to detach
/// the session from the previous connection.
const DETACH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Default capacity of the notification channel. Once the receiver is taken,
/// a full channel makes the client stop reading the socket until the
/// receiver catches up (the server then holds the output back).
pub const DEFAULT_NOTIFICATION_CAPACITY: usize = 4096;

pub use crate::protocol::envelope::RpcError;
pub use crate::protocol::process::{PtySize, StreamKind, WriteStatus};

/// A notification sent by the server (`process/output`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: Value,
}

/// What can go wrong talking to an exec-server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid exec-server URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("WebSocket handshake with {url} failed: {source}")]
    Handshake {
        url: String,
        #[source]
        source: Box<tokio_tungstenite::tungstenite::Error>,
    },
    #[error("server error: {0}")]
    Rpc(RpcError),
    #[error("the connection to the exec-server is closed")]
    Closed,
    #[error("cannot encode a request: {0}")]
    Encode(#[source] serde_json::Error),
    #[error("{0}")]
    InvalidPath(#[source] PathError),
    #[error("unexpected result of {method}: {source}")]
    Decode {
        method: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{method} returned invalid base64: {source}")]
    Base64 {
        method: String,
        #[source]
        source: base64::DecodeError,
    },
    #[error("the client has no session to resume (call initialize first)")]
    NoSession,
    #[error("cannot open a relay stream: {0}")]
    Relay(#[source] Box<crate::relay::harness::HarnessError>),
    #[error(
        "the connection was lost while {method} was in flight; it may or may not have taken effect"
    )]
    Disconnected { method: String },
    #[error("lost the connection to the exec-server and could not reconnect within {} s (last attempt: {last})", .window.as_secs())]
    Unrecoverable {
        window: std::time::Duration,
        last: String,
    },
    #[error("no response to {method} within {after:?}")]
    Timeout {
        method: String,
        after: std::time::Duration,
    },
}

impl ClientError {
    /// The JSON-RPC error, when the server answered with one.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            Self::Rpc(error) => Some(error),
            _ => None,
        }
    }

    /// Whether the server refused the upgrade for want of a (right) token.
    pub fn is_unauthorized(&self) -> bool {
        matches!(
            self,
            Self::Handshake { source, .. }
                if matches!(&**source, tokio_tungstenite::tungstenite::Error::Http(response)
                    if response.status() == 401)
        )
    }
}

/// How to reach the server.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `ws://HOST:PORT[/path]` or `unix:///path/to.sock`.
    pub url: String,
    /// Sent as `Authorization: Bearer <token>` on the upgrade. Without
    /// one, a literal loopback `ws://IP:PORT` gets the token a codexbox
    /// listener of this user published for that address (`codexbox
    /// connect`'s; see [`crate::listener_token`]), if there is one.
    pub auth_token: Option<String>,
    /// Capacity of the notification channel.
    pub notification_capacity: usize,
    /// Fail a call with [`ClientError::Timeout`] when no response came
    /// within this time (`None`: wait as long as it takes; long-polls and
    /// slow file operations legitimately take a while).
    pub request_timeout: Option<std::time::Duration>,
    /// Reach the server through a registry and rendezvous instead of `url`.
    pub relay: Option<std::sync::Arc<crate::relay::harness::HarnessConfig>>,
    /// How long [`RemoteExecServerClient`] keeps trying to get a lost
    /// connection back before it gives up.
    pub recovery_window: std::time::Duration,
    /// How long the session should survive without a connection, asked of
    /// the server in `initialize` (`None`: ask nothing; the server's grace
    /// period applies). The server bounds it by its maximum.
    pub session_grace: Option<std::time::Duration>,
}

impl ConnectOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            auth_token: None,
            notification_capacity: DEFAULT_NOTIFICATION_CAPACITY,
            request_timeout: None,
            relay: None,
            recovery_window: remote::RECOVERY_WINDOW,
            session_grace: None,
        }
    }

    /// Connections through a registry and rendezvous: each is a new
    /// virtual stream (fresh bundle, Noise handshake).
    pub fn relay(config: crate::relay::harness::HarnessConfig) -> Self {
        let mut options = Self::new(format!(
            "relay:{}/{}",
            config.registry.base_url(),
            config.registry.environment_id()
        ));
        options.relay = Some(std::sync::Arc::new(config));
        options
    }

    pub fn request_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    pub fn auth_token(mut self, token: impl Into<String>) -> Self {
        self.auth_token = Some(token.into());
        self
    }

    /// How long a [`RemoteExecServerClient`] tries to reconnect.
    pub fn recovery_window(mut self, window: std::time::Duration) -> Self {
        self.recovery_window = window;
        // Opening a relay stream retries within the same window.
        if let Some(relay) = &mut self.relay {
            std::sync::Arc::make_mut(relay).open_window = window;
        }
        self
    }

    /// Asks the server to keep the session this long without a connection.
    pub fn session_grace(mut self, grace: std::time::Duration) -> Self {
        self.session_grace = Some(grace);
        self
    }
}

/// An async client bound to one live connection and, after
/// [`initialize`](Self::initialize), one session.
pub struct ExecServerClient {
    options: ConnectOptions,
    endpoint: Endpoint,
    connection: Connection,
    notifications: Option<mpsc::Receiver<Notification>>,
    client_name: String,
    session_id: Option<String>,
    /// The grace period the server granted, when one was asked for.
    session_grace: Option<std::time::Duration>,
}

/// How long [`ExecServerClient::close`] waits for a clean close.
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl ExecServerClient {
    /// Connects to `url` (`ws://…` or `unix://…`) without a token.
    pub async fn connect(url: &str) -> Result<Self, ClientError> {
        Self::connect_with(ConnectOptions::new(url)).await
    }

    /// Connects with explicit options. No handshake is sent yet.
    pub async fn connect_with(options: ConnectOptions) -> Result<Self, ClientError> {
        let endpoint = match &options.relay {
            Some(config) => Endpoint::Relay(connection::RelayEndpoint(config.clone())),
            None => Endpoint::parse(&options.url)?,
        };
        let (tx, rx) = mpsc::channel(options.notification_capacity.max(1));
        let connection = Connection::open(&endpoint, options.auth_token.as_deref(), tx).await?;
        Ok(Self {
            options,
            endpoint,
            connection,
            notifications: Some(rx),
            client_name: String::new(),
            session_id: None,
            session_grace: None,
        })
    }

    /// Connects and completes the handshake for a new session.
    pub async fn connect_and_initialize(
        options: ConnectOptions,
        client_name: &str,
    ) -> Result<Self, ClientError> {
        let mut client = Self::connect_with(options).await?;
        client.initialize(client_name, None).await?;
        Ok(client)
    }

    /// Sends `initialize {clientName, resumeSessionId, sessionGraceSecs?}`
    /// (the grace period of [`ConnectOptions::session_grace`]) and, once it
    /// succeeds, the `initialized` notification. Returns the session id.
    pub async fn initialize(
        &mut self,
        client_name: &str,
        resume_session_id: Option<&str>,
    ) -> Result<String, ClientError> {
        let params = InitializeParams {
            client_name: client_name.to_owned(),
            resume_session_id: resume_session_id.map(str::to_owned),
            capabilities: ClientCapabilities::default(),
            session_grace_secs: self.options.session_grace.map(|grace| grace.as_secs()),
        };
        let result: InitializeResult = self.request(METHOD_INITIALIZE, &params).await?;
        self.connection
            .notify(NOTIFY_INITIALIZED, &Value::Object(Default::default()))
            .await?;
        self.client_name = client_name.to_owned();
        self.session_id = Some(result.session_id.clone());
        self.session_grace = result
            .session_grace_secs
            .map(std::time::Duration::from_secs);
        Ok(result.session_id)
    }

    /// The session id from the last successful `initialize`.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The grace period the server granted the session (`None` when none
    /// was asked for, or the server does not know the extension).
    pub fn session_grace(&self) -> Option<std::time::Duration> {
        self.session_grace
    }

    /// Takes the notification receiver of the current connection. Each
    /// connection has its own; it ends when the connection closes.
    ///
    /// Until it is taken, notifications that do not fit in the channel are
    /// dropped; once taken, a full channel pauses reading from the server
    /// (and with it responses), so keep draining it.
    pub fn take_notifications(&mut self) -> Option<mpsc::Receiver<Notification>> {
        let receiver = self.notifications.take();
        if receiver.is_some() {
            self.connection.mark_receiver_taken();
        }
        receiver
    }

    /// Whether the current connection has ended.
    pub fn is_closed(&self) -> bool {
        self.connection.is_closed()
    }

    /// Opens a new connection to the same server and resumes the session
    /// (`initialize` with `resumeSessionId`). The old connection is closed.
    /// Output produced meanwhile is retained by the server: fetch it with
    /// [`process_read`](Self::process_read) from the last seq seen.
    pub async fn reconnect(&mut self) -> Result<String, ClientError> {
        let session = self.session_id.clone().ok_or(ClientError::NoSession)?;
        let (tx, rx) = mpsc::channel(self.options.notification_capacity.max(1));
        let connection =
            Connection::open(&self.endpoint, self.options.auth_token.as_deref(), tx).await?;
        let old = std::mem::replace(&mut self.connection, connection);
        // The session is attached to the old connection until the server
        // sees it close.
        old.shutdown_and_wait(DETACH_WAIT).await;
        self.notifications = Some(rx);
        let name = self.client_name.clone();
        let mut delay = std::time::Duration::from_millis(5);
        let deadline = tokio::time::Instant::now() + DETACH_WAIT;
        loop {
            match self.initialize(&name, Some(&session)).await {
                // The server may still be detaching the old connection.
                Err(ClientError::Rpc(error))
                    if error.code == SESSION_ALREADY_ATTACHED
                        && tokio::time::Instant::now() + delay < deadline =>
                {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_millis(200));
                }
                other => return other,
            }
        }
    }

    /// Closes the connection without waiting. A WebSocket session stays
    /// resumable for the server's grace period.
    pub fn close(self) {
        self.connection.shutdown();
    }

    /// Closes the connection cleanly and waits (at most [`CLOSE_WAIT`]) until
    /// it is done: the server detaches the session at once, and a relay
    /// stream is reset, so the rendezvous forgets it. Call it before the
    /// process exits; later calls fail with [`ClientError::Closed`].
    pub async fn close_and_wait(&self) {
        self.connection.close_and_wait(CLOSE_WAIT).await;
    }

    /// Sends any request and returns its `result`, or the server's error.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.connection
            .call(method, &params, self.options.request_timeout)
            .await
    }

    /// Like [`call`](Self::call), decoding the result into `R`.
    pub async fn call_as<R: DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<R, ClientError> {
        let value = self
            .connection
            .call(method, &params, self.options.request_timeout)
            .await?;
        R::deserialize(value).map_err(|source| ClientError::Decode {
            method: method.to_owned(),
            source,
        })
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), ClientError> {
        self.connection.notify(method, &params).await
    }

    /// Sends one text frame exactly as given (for protocol testing).
    pub async fn send_raw(&self, text: impl Into<String>) -> Result<(), ClientError> {
        self.connection.send_text(text.into()).await
    }

    // ----- processes -------------------------------------------------------

    /// `process/start`; returns the process id.
    pub async fn process_start(&self, params: &StartParams) -> Result<String, ClientError> {
        let started: process::StartResult = self.request(process::METHOD_START, params).await?;
        Ok(started.process_id)
    }

    /// `process/read`.
    pub async fn process_read(&self, params: &ReadParams) -> Result<ReadResult, ClientError> {
        self.request(process::METHOD_READ, params).await
    }

    /// `process/write` of `data`, with an optional `writeId` (the reference
    /// client's dialect) and `closeStdin`.
    pub async fn process_write(
        &self,
        process_id: &str,
        data: &[u8],
        write_id: Option<&str>,
        close_stdin: bool,
    ) -> Result<WriteResult, ClientError> {
        let params = process::WriteParams {
            process_id: process_id.to_owned(),
            chunk: data.to_vec(),
            write_id: write_id.map(str::to_owned),
            close_stdin,
        };
        self.request(process::METHOD_WRITE, &params).await
    }

    /// `process/signal` with a signal name (`interrupt`, `kill`, `SIGUSR1`…).
    pub async fn process_signal(&self, process_id: &str, signal: &str) -> Result<(), ClientError> {
        let params = process::SignalParams {
            process_id: process_id.to_owned(),
            signal: signal.to_owned(),
        };
        self.request_unit(process::METHOD_SIGNAL, &params).await
    }

    /// `process/resize` of a PTY process.
    pub async fn process_resize(&self, process_id: &str, size: PtySize) -> Result<(), ClientError> {
        let params = process::ResizeParams {
            process_id: process_id.to_owned(),
            rows: size.rows,
            cols: size.cols,
        };
        self.request_unit(process::METHOD_RESIZE, &params).await
    }

    /// `process/terminate`; returns whether the process was still running.
    pub async fn process_terminate(&self, process_id: &str) -> Result<bool, ClientError> {
        let params = process::TerminateParams {
            process_id: process_id.to_owned(),
        };
        let result: process::TerminateResult =
            self.request(process::METHOD_TERMINATE, &params).await?;
        Ok(result.running)
    }

    // ----- sessions --------------------------------------------------------

    /// `session/list`: every session of the server with its processes.
    pub async fn session_list(&self) -> Result<Vec<SessionSummary>, ClientError> {
        let result: SessionListResult = self.call_as(METHOD_SESSION_LIST, Value::Null).await?;
        Ok(result.sessions)
    }

    // ----- environment -----------------------------------------------------

    /// `environment/info`.
    pub async fn environment_info(&self) -> Result<EnvironmentInfo, ClientError> {
        self.call_as(environment::METHOD_INFO, Value::Null).await
    }

    /// `environment/status`; `"ready"` when the server is serving.
    pub async fn environment_status(&self) -> Result<String, ClientError> {
        #[derive(Deserialize)]
        struct Status {
            status: String,
        }
        let status: Status = self
            .call_as(environment::METHOD_STATUS, Value::Null)
            .await?;
        Ok(status.status)
    }

    // ----- filesystem ------------------------------------------------------
    //
    // Paths are absolute native paths or `file:` URIs (anything else is
    // refused here, as the server would refuse it, with
    // [`ClientError::InvalidPath`]); results carrying paths answer in the
    // same dialect. `sandbox` is the optional FileSystemSandboxContext
    // (`None` = no sandbox).

    /// `fs/readFile`: the file's bytes.
    pub async fn fs_read_file(
        &self,
        path: &str,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<Vec<u8>, ClientError> {
        let params = fs::ReadFileParams {
            path: wire_path(path)?,
            sandbox: sandbox.cloned(),
        };
        let data: fs::ReadFileResponse = self.request(fs::method::READ_FILE, &params).await?;
        decode_base64(fs::method::READ_FILE, &data.data_base64)
    }

    /// `fs/writeFile`: creates or truncates `path` (its parent must exist).
    pub async fn fs_write_file(
        &self,
        path: &str,
        data: &[u8],
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        let params = fs::WriteFileParams {
            path: wire_path(path)?,
            data_base64: types::b64().encode(data),
            sandbox: sandbox.cloned(),
        };
        self.request_unit(fs::method::WRITE_FILE, &params).await
    }

    /// `fs/createDirectory` (`recursive` defaults to true on the server).
    pub async fn fs_create_directory(
        &self,
        path: &str,
        recursive: Option<bool>,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        let params = fs::CreateDirectoryParams {
            path: wire_path(path)?,
            recursive,
            sandbox: sandbox.cloned(),
        };
        self.request_unit(fs::method::CREATE_DIRECTORY, &params)
            .await
    }

    /// `fs/getMetadata`: `{isDirectory, isFile, isSymlink, size, createdAtMs, modifiedAtMs}`.
    pub async fn fs_get_metadata(
        &self,
        path: &str,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<Value, ClientError> {
        let params = entry_params(path, None, sandbox)?;
        self.request(fs::method::GET_METADATA, &params).await
    }

    /// `fs/canonicalize`: the resolved path, in the request's dialect.
    pub async fn fs_canonicalize(
        &self,
        path: &str,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<String, ClientError> {
        #[derive(Deserialize)]
        struct Canonical {
            path: String,
        }
        let params = fs::CanonicalizeParams {
            path: wire_path(path)?,
            sandbox: sandbox.cloned(),
        };
        let result: Canonical = self.request(fs::method::CANONICALIZE, &params).await?;
        Ok(result.path)
    }

    /// `fs/readDirectory`: `{entries: [{fileName, isDirectory, isFile}]}`.
    pub async fn fs_read_directory(
        &self,
        path: &str,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<Value, ClientError> {
        let params = entry_params(path, None, sandbox)?;
        self.request(fs::method::READ_DIRECTORY, &params).await
    }

    /// `fs/walk` with the given options.
    pub async fn fs_walk(
        &self,
        path: &str,
        options: &fs::WalkOptions,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<fs::WalkResponse, ClientError> {
        let params = fs::WalkParams {
            path: wire_path(path)?,
            options: options.clone(),
            sandbox: sandbox.cloned(),
        };
        self.request(fs::method::WALK, &params).await
    }

    /// `fs/remove` (`recursive` and `force` default to true on the server).
    pub async fn fs_remove(
        &self,
        path: &str,
        recursive: Option<bool>,
        force: Option<bool>,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        let params = fs::RemoveParams {
            path: wire_path(path)?,
            recursive,
            force,
            sandbox: sandbox.cloned(),
        };
        self.request_unit(fs::method::REMOVE, &params).await
    }

    /// `fs/copy`.
    pub async fn fs_copy(
        &self,
        source: &str,
        destination: &str,
        recursive: bool,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        let params = fs::CopyParams {
            source_path: wire_path(source)?,
            destination_path: wire_path(destination)?,
            recursive,
            sandbox: sandbox.cloned(),
        };
        self.request_unit(fs::method::COPY, &params).await
    }

    /// `fs/open`: opens a streaming read handle named `handle_id`.
    pub async fn fs_open(
        &self,
        handle_id: &str,
        path: &str,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        self.open_handle(handle_id, path, None, sandbox).await
    }

    /// `fs/open` with an explicit mode: `Read` is [`Self::fs_open`];
    /// `Create`, `Truncate` and `Append` open a handle for
    /// [`Self::fs_write_block`].
    pub async fn fs_open_mode(
        &self,
        handle_id: &str,
        path: &str,
        mode: fs::OpenMode,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        self.open_handle(handle_id, path, Some(mode), sandbox).await
    }

    async fn open_handle(
        &self,
        handle_id: &str,
        path: &str,
        mode: Option<fs::OpenMode>,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        let params = fs::OpenParams {
            handle_id: handle_id.to_owned(),
            path: wire_path(path)?,
            mode,
            sandbox: sandbox.cloned(),
        };
        self.request_unit(fs::method::OPEN, &params).await
    }

    /// `fs/writeBlock`: writes `data` (at most 1 MiB) at `offset` of a
    /// handle opened for writing.
    pub async fn fs_write_block(
        &self,
        handle_id: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ClientError> {
        let params = fs::WriteBlockParams {
            handle_id: handle_id.to_owned(),
            offset,
            data_base64: types::b64().encode(data),
        };
        self.request_unit(fs::method::WRITE_BLOCK, &params).await
    }

    /// `fs/readBlock`: up to `len` bytes at `offset`, and whether EOF was hit.
    pub async fn fs_read_block(
        &self,
        handle_id: &str,
        offset: u64,
        len: usize,
    ) -> Result<(Vec<u8>, bool), ClientError> {
        let params = fs::ReadBlockParams {
            handle_id: handle_id.to_owned(),
            offset,
            len,
        };
        let block: fs::ReadBlockResponse = self.request(fs::method::READ_BLOCK, &params).await?;
        Ok((
            decode_base64(fs::method::READ_BLOCK, &block.chunk)?,
            block.eof,
        ))
    }

    /// `fs/getMetadata` decoded, describing a symlink as itself when
    /// `follow_symlinks` is false (and then never failing on a dangling one).
    pub async fn fs_metadata(
        &self,
        path: &str,
        follow_symlinks: bool,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<fs::GetMetadataResponse, ClientError> {
        let params = entry_params(path, Some(follow_symlinks), sandbox)?;
        self.request(fs::method::GET_METADATA, &params).await
    }

    /// `fs/readDirectory` decoded; with `follow_symlinks` false every entry
    /// is described as itself, with its mode, size and symlink target.
    pub async fn fs_directory_entries(
        &self,
        path: &str,
        follow_symlinks: bool,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<Vec<fs::DirectoryEntry>, ClientError> {
        let params = entry_params(path, Some(follow_symlinks), sandbox)?;
        let listing: fs::ReadDirectoryResponse =
            self.request(fs::method::READ_DIRECTORY, &params).await?;
        Ok(listing.entries)
    }

    /// `fs/setPermissions`: the permission bits (and sticky bit) of `path`.
    pub async fn fs_set_permissions(
        &self,
        path: &str,
        mode: u32,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        let params = fs::SetPermissionsParams {
            path: wire_path(path)?,
            mode,
            sandbox: sandbox.cloned(),
        };
        self.request_unit(fs::method::SET_PERMISSIONS, &params)
            .await
    }

    /// `fs/createSymlink`: a new symlink at `path` holding `target`.
    pub async fn fs_create_symlink(
        &self,
        path: &str,
        target: &str,
        sandbox: Option<&FileSystemSandboxContext>,
    ) -> Result<(), ClientError> {
        let params = fs::CreateSymlinkParams {
            path: wire_path(path)?,
            target: target.to_owned(),
            sandbox: sandbox.cloned(),
        };
        self.request_unit(fs::method::CREATE_SYMLINK, &params).await
    }

    /// `fs/close`: a write handle is synced to disk first, and an error
    /// there is returned.
    pub async fn fs_close(&self, handle_id: &str) -> Result<(), ClientError> {
        let params = fs::CloseParams {
            handle_id: handle_id.to_owned(),
        };
        self.request_unit(fs::method::CLOSE, &params).await
    }

    /// Sends `method` with typed `params` and decodes the result into `R`.
    async fn request<R: DeserializeOwned>(
        &self,
        method: &str,
        params: &impl Serialize,
    ) -> Result<R, ClientError> {
        let params = serde_json::to_value(params).map_err(ClientError::Encode)?;
        self.call_as(method, params).await
    }

    /// Sends `method` with typed `params`, ignoring what the result holds.
    async fn request_unit(&self, method: &str, params: &impl Serialize) -> Result<(), ClientError> {
        let params = serde_json::to_value(params).map_err(ClientError::Encode)?;
        self.call(method, params).await.map(drop)
    }
}

/// `path` as the wire carries it, or the reason the server would refuse it.
fn wire_path(path: &str) -> Result<WirePath, ClientError> {
    WirePath::parse(path).map_err(ClientError::InvalidPath)
}

/// The params of `fs/getMetadata` and `fs/readDirectory`.
fn entry_params(
    path: &str,
    follow_symlinks: Option<bool>,
    sandbox: Option<&FileSystemSandboxContext>,
) -> Result<fs::EntryParams, ClientError> {
    Ok(fs::EntryParams {
        path: wire_path(path)?,
        follow_symlinks,
        sandbox: sandbox.cloned(),
    })
}

fn decode_base64(method: &str, text: &str) -> Result<Vec<u8>, ClientError> {
    types::b64()
        .decode(text)
        .map_err(|source| ClientError::Base64 {
            method: method.to_owned(),
            source,
        })
}
