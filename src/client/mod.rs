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
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::protocol::envelope::code::SESSION_ALREADY_ATTACHED;
pub use crate::protocol::session::{ProcessState, ProcessSummary, SessionSummary};
use crate::protocol::session::{SessionListResult, METHOD_LIST as METHOD_SESSION_LIST};
use crate::protocol::{
    environment, fs, process, InitializeResult, METHOD_INITIALIZE, NOTIFY_INITIALIZED,
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
        let mut params = json!({"clientName": client_name, "resumeSessionId": resume_session_id});
        if let Some(grace) = self.options.session_grace {
            params["sessionGraceSecs"] = json!(grace.as_secs());
        }
        let result: InitializeResult = self.call_as(METHOD_INITIALIZE, params).await?;
        self.connection
            .notify(NOTIFY_INITIALIZED, &json!({}))
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
        let params = serde_json::to_value(params).map_err(ClientError::Encode)?;
        let started: process::StartResult = self.call_as(process::METHOD_START, params).await?;
        Ok(started.process_id)
    }

    /// `process/read`.
    pub async fn process_read(&self, params: &ReadParams) -> Result<ReadResult, ClientError> {
        let params = serde_json::to_value(params).map_err(ClientError::Encode)?;
        self.call_as(process::METHOD_READ, params).await
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
        let mut params = json!({"processId": process_id, "chunk": types::b64().encode(data)});
        if let Some(write_id) = write_id {
            params["writeId"] = json!(write_id);
        }
        if close_stdin {
            params["closeStdin"] = json!(true);
        }
        self.call_as(process::METHOD_WRITE, params).await
    }

    /// `process/signal` with a signal name (`interrupt`, `kill`, `SIGUSR1`…).
    pub async fn process_signal(&self, process_id: &str, signal: &str) -> Result<(), ClientError> {
        self.call(
            process::METHOD_SIGNAL,
            json!({"processId": process_id, "signal": signal}),
        )
        .await
        .map(drop)
    }

    /// `process/resize` of a PTY process.
    pub async fn process_resize(&self, process_id: &str, size: PtySize) -> Result<(), ClientError> {
        let params = json!({"processId": process_id, "rows": size.rows, "cols": size.cols});
        self.call(process::METHOD_RESIZE, params).await.map(drop)
    }

    /// `process/terminate`; returns whether the process was still running.
    pub async fn process_terminate(&self, process_id: &str) -> Result<bool, ClientError> {
        let result: process::TerminateResult = self
            .call_as(process::METHOD_TERMINATE, json!({"processId": process_id}))
            .await?;
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
    // Paths are absolute native paths or `file:` URIs; results carrying
    // paths answer in the same dialect. `sandbox` is the optional
    // FileSystemSandboxContext (`None` = no sandbox).

    /// `fs/readFile`: the file's bytes.
    pub async fn fs_read_file(
        &self,
        path: &str,
        sandbox: Option<&Value>,
    ) -> Result<Vec<u8>, ClientError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Data {
            data_base64: String,
        }
        let data: Data = self
            .call_as(
                fs::method::READ_FILE,
                json!({"path": path, "sandbox": sandbox}),
            )
            .await?;
        decode_base64(fs::method::READ_FILE, &data.data_base64)
    }

    /// `fs/writeFile`: creates or truncates `path` (its parent must exist).
    pub async fn fs_write_file(
        &self,
        path: &str,
        data: &[u8],
        sandbox: Option<&Value>,
    ) -> Result<(), ClientError> {
        let params =
            json!({"path": path, "dataBase64": types::b64().encode(data), "sandbox": sandbox});
        self.call(fs::method::WRITE_FILE, params).await.map(drop)
    }

    /// `fs/createDirectory` (`recursive` defaults to true on the server).
    pub async fn fs_create_directory(
        &self,
        path: &str,
        recursive: Option<bool>,
        sandbox: Option<&Value>,
    ) -> Result<(), ClientError> {
        let params = json!({"path": path, "recursive": recursive, "sandbox": sandbox});
        self.call(fs::method::CREATE_DIRECTORY, params)
            .await
            .map(drop)
    }

    /// `fs/getMetadata`: `{isDirectory, isFile, isSymlink, size, createdAtMs, modifiedAtMs}`.
    pub async fn fs_get_metadata(
        &self,
        path: &str,
        sandbox: Option<&Value>,
    ) -> Result<Value, ClientError> {
        self.call(
            fs::method::GET_METADATA,
            json!({"path": path, "sandbox": sandbox}),
        )
        .await
    }

    /// `fs/canonicalize`: the resolved path, in the request's dialect.
    pub async fn fs_canonicalize(
        &self,
        path: &str,
        sandbox: Option<&Value>,
    ) -> Result<String, ClientError> {
        #[derive(Deserialize)]
        struct Canonical {
            path: String,
        }
        let result: Canonical = self
            .call_as(
                fs::method::CANONICALIZE,
                json!({"path": path, "sandbox": sandbox}),
            )
            .await?;
        Ok(result.path)
    }

    /// `fs/readDirectory`: `{entries: [{fileName, isDirectory, isFile}]}`.
    pub async fn fs_read_directory(
        &self,
        path: &str,
        sandbox: Option<&Value>,
    ) -> Result<Value, ClientError> {
        self.call(
            fs::method::READ_DIRECTORY,
            json!({"path": path, "sandbox": sandbox}),
        )
        .await
    }

    /// `fs/walk` with the given `WalkOptions` object.
    pub async fn fs_walk(
        &self,
        path: &str,
        options: Value,
        sandbox: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let params = json!({"path": path, "options": options, "sandbox": sandbox});
        self.call(fs::method::WALK, params).await
    }

    /// `fs/remove` (`recursive` and `force` default to true on the server).
    pub async fn fs_remove(
        &self,
        path: &str,
        recursive: Option<bool>,
        force: Option<bool>,
        sandbox: Option<&Value>,
    ) -> Result<(), ClientError> {
        let params =
            json!({"path": path, "recursive": recursive, "force": force, "sandbox": sandbox});
        self.call(fs::method::REMOVE, params).await.map(drop)
    }

    /// `fs/copy`.
    pub async fn fs_copy(
        &self,
        source: &str,
        destination: &str,
        recursive: bool,
        sandbox: Option<&Value>,
    ) -> Result<(), ClientError> {
        let params = json!({
            "sourcePath": source,
            "destinationPath": destination,
            "recursive": recursive,
            "sandbox": sandbox,
        });
        self.call(fs::method::COPY, params).await.map(drop)
    }

    /// `fs/open`: opens a streaming read handle named `handle_id`.
    pub async fn fs_open(
        &self,
        handle_id: &str,
        path: &str,
        sandbox: Option<&Value>,
    ) -> Result<(), ClientError> {
        let params = json!({"handleId": handle_id, "path": path, "sandbox": sandbox});
        self.call(fs::method::OPEN, params).await.map(drop)
    }

    /// `fs/open` with an explicit mode: `Read` is [`Self::fs_open`];
    /// `Create`, `Truncate` and `Append` open a handle for
    /// [`Self::fs_write_block`].
    pub async fn fs_open_mode(
        &self,
        handle_id: &str,
        path: &str,
        mode: crate::protocol::fs::OpenMode,
        sandbox: Option<&Value>,
    ) -> Result<(), ClientError> {
        let params = json!({"handleId": handle_id, "path": path, "mode": mode, "sandbox": sandbox});
        self.call(fs::method::OPEN, params).await.map(drop)
    }

    /// `fs/writeBlock`: writes `data` (at most 1 MiB) at `offset` of a
    /// handle opened for writing.
    pub async fn fs_write_block(
        &self,
        handle_id: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ClientError> {
        let params = json!({
            "handleId": handle_id,
            "offset": offset,
            "dataBase64": types::b64().encode(data),
        });
        self.call(fs::method::WRITE_BLOCK, params).await.map(drop)
    }

    /// `fs/readBlock`: up to `len` bytes at `offset`, and whether EOF was hit.
    pub async fn fs_read_block(
        &self,
        handle_id: &str,
        offset: u64,
        len: usize,
    ) -> Result<(Vec<u8>, bool), ClientError> {
        #[derive(Deserialize)]
        struct Block {
            chunk: String,
            eof: bool,
        }
        let params = json!({"handleId": handle_id, "offset": offset, "len": len});
        let block: Block = self.call_as(fs::method::READ_BLOCK, params).await?;
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
        sandbox: Option<&Value>,
    ) -> Result<fs::GetMetadataResponse, ClientError> {
        let params = json!({"path": path, "followSymlinks": follow_symlinks, "sandbox": sandbox});
        self.call_as(fs::method::GET_METADATA, params).await
    }

    /// `fs/readDirectory` decoded; with `follow_symlinks` false every entry
    /// is described as itself, with its mode, size and symlink target.
    pub async fn fs_directory_entries(
        &self,
        path: &str,
        follow_symlinks: bool,
        sandbox: Option<&Value>,
    ) -> Result<Vec<fs::DirectoryEntry>, ClientError> {
        let params = json!({"path": path, "followSymlinks": follow_symlinks, "sandbox": sandbox});
        let listing: fs::ReadDirectoryResponse =
            self.call_as(fs::method::READ_DIRECTORY, params).await?;
        Ok(listing.entries)
    }

    /// `fs/setPermissions`: the permission bits (and sticky bit) of `path`.
    pub async fn fs_set_permissions(
        &self,
        path: &str,
        mode: u32,
        sandbox: Option<&Value>,
    ) -> Result<(), ClientError> {
        let params = json!({"path": path, "mode": mode, "sandbox": sandbox});
        self.call(fs::method::SET_PERMISSIONS, params)
            .await
            .map(drop)
    }

    /// `fs/createSymlink`: a new symlink at `path` holding `target`.
    pub async fn fs_create_symlink(
        &self,
        path: &str,
        target: &str,
        sandbox: Option<&Value>,
    ) -> Result<(), ClientError> {
        let params = json!({"path": path, "target": target, "sandbox": sandbox});
        self.call(fs::method::CREATE_SYMLINK, params)
            .await
            .map(drop)
    }

    /// `fs/close`: a write handle is synced to disk first, and an error
    /// there is returned.
    pub async fn fs_close(&self, handle_id: &str) -> Result<(), ClientError> {
        self.call(fs::method::CLOSE, json!({"handleId": handle_id}))
            .await
            .map(drop)
    }
}

fn decode_base64(method: &str, text: &str) -> Result<Vec<u8>, ClientError> {
    types::b64()
        .decode(text)
        .map_err(|source| ClientError::Base64 {
            method: method.to_owned(),
            source,
        })
}
