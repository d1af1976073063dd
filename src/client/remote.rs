//! `RemoteExecServerClient`: one logical exec-server client over connections
//! that come and go (a `ws://` URL, or virtual streams through a registry
//! and rendezvous), with the reconnect invariants of the Codex seed:
//!
//! - one shared reconnect attempt per client: callers that find the
//!   connection gone wait for the same attempt (generation counter under a
//!   lock), bounded by [`RECOVERY_WINDOW`];
//! - the same session id is resumed (`initialize {resumeSessionId}`) and
//!   every tracked process is rebound: its events continue in seq order on
//!   the client's one notification channel, the gap backfilled with
//!   `process/read {afterSeq}` (a lost tail is announced with a local
//!   `process/outputTruncated` notification, never papered over);
//! - `process/read` is retried once after a transport-close race (it is
//!   read-only); `process/write` is retried with the same `writeId` (the
//!   server deduplicates); `process/start`, `process/terminate`,
//!   `process/signal`, fs calls and anything else are never replayed after an
//!   ambiguous disconnect: they fail with [`ClientError::Disconnected`] and
//!   later calls use the new connection. A start that may have happened is
//!   terminated once the client is back;
//! - when recovery fails for good, a local `client/connectionLost`
//!   notification says so, so a reader of the channel never waits forever.
//!
//! [`RemoteExecServerClient::resume`] re-attaches a detached session from a
//! new client, and [`RemoteExecServerClient::attach_process`] starts
//! following one of its processes after a given seq (or from now).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, RwLock};

use super::{
    ClientError, ConnectOptions, EnvironmentInfo, ExecServerClient, Notification, PtySize,
    ReadParams, ReadResult, StartParams, WriteResult,
};
use crate::backoff::Backoff;
use crate::protocol::process::{self as wire, NOTIFY_CLOSED, NOTIFY_EXITED, NOTIFY_OUTPUT};
use crate::relay::credentials::{
    harness_auth, NOISE_ACCOUNT_ID_ENV, NOISE_AUTH_TOKEN_ENV, NOISE_ENVIRONMENT_ID_ENV,
    NOISE_REGISTRY_URL_ENV,
};
use crate::relay::harness::HarnessConfig;
use crate::relay::noise::NoiseIdentity;
use crate::relay::registry_client::RegistryClient;
use crate::sync::lock;

/// How long a reconnect may take before the client gives up.
pub const RECOVERY_WINDOW: Duration = Duration::from_secs(25);
/// The local notification announcing output lost while disconnected.
pub const NOTIFY_OUTPUT_TRUNCATED: &str = "process/outputTruncated";
/// The local notification announcing that the connection could not be
/// recovered (`{message}`); nothing follows it.
pub const NOTIFY_CONNECTION_LOST: &str = "client/connectionLost";
/// Reconnect delays within the recovery window ([`Backoff`]: the first at
/// most this long, doubling up to [`RECONNECT_MAX`]).
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// Events of one process held back while an earlier one is missing.
const MAX_HELD_EVENTS: usize = 256;

/// Why a client could not be configured from the environment.
#[derive(Debug, thiserror::Error)]
pub enum RemoteConfigError {
    #[error("environment registry configuration error: Noise environment requires CODEX_EXEC_SERVER_NOISE_REGISTRY_URL, CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID, and CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN")]
    Incomplete,
    #[error(transparent)]
    Credentials(#[from] crate::relay::credentials::CredentialError),
    #[error(transparent)]
    Registry(#[from] crate::relay::registry_client::RegistryError),
    #[error(transparent)]
    Noise(#[from] crate::relay::noise::NoiseError),
}

impl RemoteConfigError {
    /// The exit code for a front end: 1 when the host could not make a
    /// Noise identity, 2 (usage) for everything about the given settings.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Noise(_) => 1,
            _ => 2,
        }
    }
}

/// Harness settings from the reference client's variables: all three of
/// registry, environment and token set (trimmed, non-empty), or none (`Ok(None)`).
pub fn harness_config_from_env(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<HarnessConfig>, RemoteConfigError> {
    let get = |name| {
        env(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let (url, id, token) = (
        get(NOISE_REGISTRY_URL_ENV),
        get(NOISE_ENVIRONMENT_ID_ENV),
        get(NOISE_AUTH_TOKEN_ENV),
    );
    let (url, id, token) = match (url, id, token) {
        (None, None, None) => return Ok(None),
        (Some(url), Some(id), Some(token)) => (url, id, token),
        _ => return Err(RemoteConfigError::Incomplete),
    };
    let account = get(NOISE_ACCOUNT_ID_ENV);
    harness_config(&url, &id, Some(&token), account.as_deref(), true).map(Some)
}

/// Harness settings for environment `environment_id` of the registry at
/// `registry_url`: the token (if any) and account become its headers (never
/// sent to a non-loopback `http://` registry), with a fresh Noise identity.
pub fn harness_config(
    registry_url: &str,
    environment_id: &str,
    token: Option<&str>,
    account_id: Option<&str>,
    offer_reliable: bool,
) -> Result<HarnessConfig, RemoteConfigError> {
    let auth = harness_auth(registry_url, token, account_id)?;
    Ok(HarnessConfig::new(
        RegistryClient::new(registry_url, environment_id, auth)?,
        NoiseIdentity::generate()?,
        offer_reliable,
    ))
}

/// Per-process ordering state.
#[derive(Debug, Default)]
struct Tracked {
    /// The last seq delivered to the caller.
    delivered: u64,
    /// Events that arrived ahead of a gap, by seq.
    held: BTreeMap<u64, Notification>,
    /// Write ids handed out.
    next_write: u64,
    closed: bool,
    /// Where delivery starts is not known yet: hold everything.
    positioning: bool,
}

impl Tracked {
    /// Moves the held events that continue what was delivered to `ready`.
    /// Saturating: a start seq given by a caller may be as large as u64 goes.
    fn release(&mut self, ready: &mut Vec<Notification>) {
        while let Some(next) = self.held.remove(&self.delivered.saturating_add(1)) {
            self.delivered = self.delivered.saturating_add(1);
            self.closed |= next.method == NOTIFY_CLOSED;
            ready.push(next);
        }
    }
}

/// Where [`RemoteExecServerClient::attach_process`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachFrom {
    /// Every retained event after this seq (`0`: from the start).
    After(u64),
    /// Only what happens from now on (and the exit, if it already happened).
    Now,
}

/// What every clone of the client shares.
struct Inner {
    current: RwLock<ExecServerClient>,
    /// Bumped by each successful reconnect.
    generation: AtomicU64,
    /// Held by the one reconnect attempt in progress.
    reconnecting: tokio::sync::Mutex<()>,
    /// Set when recovery failed for good: the last attempt's error.
    failure: Mutex<Option<String>>,
    /// Set by [`RemoteExecServerClient::close`]: a connection that ends is
    /// not recovered.
    closing: std::sync::atomic::AtomicBool,
    processes: Mutex<HashMap<String, Tracked>>,
    events: mpsc::Sender<Notification>,
    /// How long one recovery may take.
    recovery_window: Duration,
}

/// A reconnecting exec-server client (cheap to clone; clones share it all).
#[derive(Clone)]
pub struct RemoteExecServerClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RemoteExecServerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteExecServerClient")
            .field("generation", &self.inner.generation.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RemoteExecServerClient {
    /// Connects, initializes a new session and returns the client with the
    /// receiver of every notification (ordered per process across reconnects).
    pub async fn connect(
        options: ConnectOptions,
        client_name: &str,
    ) -> Result<(Self, mpsc::Receiver<Notification>), ClientError> {
        Self::open(options, client_name, None).await
    }

    /// Connects and re-attaches the detached session `session_id`
    /// (`initialize {resumeSessionId}`); follow its processes with
    /// [`attach_process`](Self::attach_process). The events of a process
    /// are delivered from its attach on, never before.
    pub async fn resume(
        options: ConnectOptions,
        client_name: &str,
        session_id: &str,
    ) -> Result<(Self, mpsc::Receiver<Notification>), ClientError> {
        Self::open(options, client_name, Some(session_id)).await
    }

    async fn open(
        options: ConnectOptions,
        client_name: &str,
        resume: Option<&str>,
    ) -> Result<(Self, mpsc::Receiver<Notification>), ClientError> {
        let capacity = options.notification_capacity.max(1);
        let recovery_window = options.recovery_window;
        let mut client = ExecServerClient::connect_with(options).await?;
        let connection_events = client.take_notifications();
        client.initialize(client_name, resume).await?;
        let (events, receiver) = mpsc::channel(capacity);
        let remote = Self {
            inner: Arc::new(Inner {
                current: RwLock::new(client),
                generation: AtomicU64::new(0),
                reconnecting: tokio::sync::Mutex::new(()),
                failure: Mutex::new(None),
                closing: std::sync::atomic::AtomicBool::new(false),
                processes: Mutex::new(HashMap::new()),
                events,
                recovery_window,
            }),
        };
        if let Some(connection_events) = connection_events {
            remote.spawn_pump(connection_events, 0);
        }
        Ok((remote, receiver))
    }

    /// The session id (the same across reconnects).
    pub async fn session_id(&self) -> Option<String> {
        self.inner
            .current
            .read()
            .await
            .session_id()
            .map(str::to_owned)
    }

    /// How many times the client reconnected.
    pub fn reconnects(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// The grace period the server granted the session, when
    /// [`ConnectOptions::session_grace`] asked for one and the server knows
    /// the extension.
    pub async fn session_grace(&self) -> Option<Duration> {
        self.inner.current.read().await.session_grace()
    }

    /// Closes the connection cleanly and waits (at most
    /// [`super::CLOSE_WAIT`]) until it is done, without reconnecting: the
    /// server detaches the session at once (it lives on for its grace
    /// period) and a relay stream is reset, so the rendezvous forgets it.
    pub async fn close(&self) {
        self.inner.closing.store(true, Ordering::Release);
        // A reconnect under way holds the connection: do not wait it out.
        let close = async { self.inner.current.read().await.close_and_wait().await };
        let _ = tokio::time::timeout(super::CLOSE_WAIT, close).await;
    }

    /// `session/list` (read-only, retried once).
    pub async fn session_list(&self) -> Result<Vec<super::SessionSummary>, ClientError> {
        self.with_connection(
            crate::protocol::session::METHOD_LIST,
            true,
            |inner| async move { inner.current.read().await.session_list().await },
        )
        .await
    }

    /// Forwards one connection's notifications; when it ends, recovers.
    fn spawn_pump(&self, mut receiver: mpsc::Receiver<Notification>, generation: u64) {
        let this = self.clone();
        tokio::spawn(async move {
            while let Some(notification) = receiver.recv().await {
                this.deliver(notification).await;
            }
            if this.inner.events.is_closed() || this.inner.closing.load(Ordering::Acquire) {
                return;
            }
            if let Err(err) = this.recover(generation).await {
                let lost = Notification {
                    method: NOTIFY_CONNECTION_LOST.into(),
                    params: json!({"message": err.to_string()}),
                };
                let _ = this.inner.events.send(lost).await;
            }
        });
    }

    /// Puts a process event in order, or passes any other notification on.
    async fn deliver(&self, notification: Notification) {
        let ready = {
            let mut processes = lock(&self.inner.processes);
            order(&mut processes, notification)
        };
        for notification in ready {
            let _ = self.inner.events.send(notification).await;
        }
    }

    /// Reconnects once for everyone who saw generation `seen` fail.
    async fn recover(&self, seen: u64) -> Result<(), ClientError> {
        let _attempt = self.inner.reconnecting.lock().await;
        if self.inner.generation.load(Ordering::Acquire) > seen {
            return Ok(());
        }
        let window = self.inner.recovery_window;
        if let Some(last) = lock(&self.inner.failure).clone() {
            return Err(ClientError::Unrecoverable { window, last });
        }
        if self.inner.closing.load(Ordering::Acquire) {
            return Err(ClientError::Closed);
        }
        let deadline = tokio::time::Instant::now() + window;
        let mut backoff = Backoff::new(RECONNECT_FIRST, RECONNECT_MAX);
        let mut client = self.inner.current.write().await;
        loop {
            let delay = backoff.next_delay();
            match client.reconnect().await {
                Ok(_) => break,
                Err(err) if tokio::time::Instant::now() + delay < deadline => {
                    tracing::debug!("exec-server reconnect failed: {err}");
                    tokio::time::sleep(delay).await;
                }
                Err(err) => {
                    let last = err.to_string();
                    *lock(&self.inner.failure) = Some(last.clone());
                    return Err(ClientError::Unrecoverable { window, last });
                }
            }
        }
        let receiver = client.take_notifications();
        let generation = self.inner.generation.fetch_add(1, Ordering::AcqRel) + 1;
        // Rebind every tracked process: backfill what the old connection missed.
        let tracked: Vec<(String, u64)> = lock(&self.inner.processes)
            .iter()
            .filter(|(_, t)| !t.closed && !t.positioning)
            .map(|(id, t)| (id.clone(), t.delivered))
            .collect();
        for (process_id, after) in tracked {
            if let Err(err) = self.catch_up(&client, &process_id, after).await {
                tracing::warn!(process = %process_id, "cannot backfill after reconnect: {err}");
            }
        }
        drop(client);
        if let Some(receiver) = receiver {
            self.spawn_pump(receiver, generation);
        }
        Ok(())
    }

    /// Delivers the retained events of `process_id` after `after` (in
    /// order, with those that come live meanwhile), announcing output that
    /// was evicted before it could be read.
    async fn catch_up(
        &self,
        client: &ExecServerClient,
        process_id: &str,
        mut after: u64,
    ) -> Result<(), ClientError> {
        loop {
            let read = client
                .process_read(&ReadParams {
                    process_id: process_id.to_owned(),
                    after_seq: Some(after),
                    max_bytes: None,
                    wait_ms: Some(0),
                })
                .await?;
            if read.truncated {
                // Output was evicted meanwhile: say so, and continue from
                // the first retained event.
                let resume_at = read.chunks.first().map_or(read.next_seq, |c| c.seq);
                if let Some(tracked) = lock(&self.inner.processes).get_mut(process_id) {
                    tracked.delivered = tracked.delivered.max(resume_at.saturating_sub(1));
                    tracked.held.retain(|&seq, _| seq >= resume_at);
                }
                let _ = self
                    .inner
                    .events
                    .send(Notification {
                        method: NOTIFY_OUTPUT_TRUNCATED.into(),
                        params: json!({"processId": process_id, "afterSeq": after, "resumeAtSeq": resume_at}),
                    })
                    .await;
            }
            let notifications = backfill(process_id, after, &read);
            let more = !read.chunks.is_empty() && !read.closed;
            after = read.chunks.last().map_or(after, |c| c.seq);
            for notification in notifications {
                self.deliver(notification).await;
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Follows `process_id` of this (resumed) session: its events after
    /// `from` arrive on the notification channel in seq order, and it is
    /// rebound after a reconnect like a process this client started.
    /// Returns the seq delivery starts after. A start past the newest event
    /// (or, for a closed process, at or past its close) starts from the
    /// newest one, so the close is always delivered.
    pub async fn attach_process(
        &self,
        process_id: &str,
        from: AttachFrom,
    ) -> Result<u64, ClientError> {
        lock(&self.inner.processes).insert(
            process_id.to_owned(),
            Tracked {
                positioning: true,
                ..Tracked::default()
            },
        );
        let outcome = self.position(process_id, from).await;
        if outcome.is_err() {
            lock(&self.inner.processes).remove(process_id);
        }
        outcome
    }

    async fn position(&self, process_id: &str, from: AttachFrom) -> Result<u64, ClientError> {
        let status = self
            .process_read(&ReadParams {
                process_id: process_id.to_owned(),
                after_seq: Some(u64::MAX),
                max_bytes: None,
                wait_ms: Some(0),
            })
            .await?;
        let newest = if status.closed {
            status.next_seq.saturating_sub(2)
        } else {
            status.next_seq.saturating_sub(1)
        };
        let start = match from {
            AttachFrom::After(seq) => seq.min(newest),
            AttachFrom::Now => newest,
        };
        let ready = {
            let mut processes = lock(&self.inner.processes);
            let mut ready = Vec::new();
            if let Some(tracked) = processes.get_mut(process_id) {
                tracked.positioning = false;
                tracked.delivered = start;
                tracked.held.retain(|&seq, _| seq > start);
                tracked.release(&mut ready);
            }
            ready
        };
        for notification in ready {
            let _ = self.inner.events.send(notification).await;
        }
        let client = self.inner.current.read().await;
        self.catch_up(&client, process_id, start).await?;
        Ok(start)
    }

    /// Runs `call` on the current connection; on a lost connection recovers,
    /// then retries when `replayable`, else reports the ambiguity.
    async fn with_connection<T, F, Fut>(
        &self,
        method: &str,
        replayable: bool,
        call: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(Arc<Inner>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut retried = false;
        loop {
            let generation = self.inner.generation.load(Ordering::Acquire);
            match call(self.inner.clone()).await {
                Err(ClientError::Closed) => {
                    self.recover(generation).await?;
                    if !replayable || retried {
                        return Err(ClientError::Disconnected {
                            method: method.to_owned(),
                        });
                    }
                    retried = true;
                }
                other => return other,
            }
        }
    }

    /// Any request (never replayed after an ambiguous disconnect).
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let owned = (method.to_owned(), params);
        self.with_connection(method, false, |inner| {
            let (method, params) = owned.clone();
            async move { inner.current.read().await.call(&method, params).await }
        })
        .await
    }

    /// `process/start`; the process is tracked for rebinding. Not replayed:
    /// after an ambiguous disconnect it is terminated once the client is back.
    pub async fn process_start(&self, params: &StartParams) -> Result<String, ClientError> {
        let id = params.process_id.clone();
        lock(&self.inner.processes).insert(id.clone(), Tracked::default());
        let params = serde_json::to_value(params).map_err(ClientError::Encode)?;
        let outcome = self.call(wire::METHOD_START, params).await;
        match outcome {
            Ok(_) => Ok(id),
            Err(err) => {
                lock(&self.inner.processes).remove(&id);
                if matches!(err, ClientError::Disconnected { .. }) {
                    let this = self.clone();
                    let cleanup = id.clone();
                    tokio::spawn(async move {
                        let _ = this.process_terminate(&cleanup).await;
                    });
                }
                Err(err)
            }
        }
    }

    /// `process/read`, retried once after a transport-close race.
    pub async fn process_read(&self, params: &ReadParams) -> Result<ReadResult, ClientError> {
        let params = params.clone();
        self.with_connection(wire::METHOD_READ, true, |inner| {
            let params = params.clone();
            async move { inner.current.read().await.process_read(&params).await }
        })
        .await
    }

    /// `process/write` with a `writeId` of its own, re-sent with the same id
    /// after a reconnect (the server writes it once).
    pub async fn process_write(
        &self,
        process_id: &str,
        data: &[u8],
        close_stdin: bool,
    ) -> Result<WriteResult, ClientError> {
        let write_id = {
            let mut processes = lock(&self.inner.processes);
            let tracked = processes.entry(process_id.to_owned()).or_default();
            tracked.next_write += 1;
            tracked.next_write.to_string()
        };
        let (process_id, data) = (process_id.to_owned(), data.to_vec());
        self.with_connection(wire::METHOD_WRITE, true, |inner| {
            let (process_id, data, write_id) = (process_id.clone(), data.clone(), write_id.clone());
            async move {
                inner
                    .current
                    .read()
                    .await
                    .process_write(&process_id, &data, Some(&write_id), close_stdin)
                    .await
            }
        })
        .await
    }

    /// `process/terminate` (not replayed).
    pub async fn process_terminate(&self, process_id: &str) -> Result<bool, ClientError> {
        let process_id = process_id.to_owned();
        self.with_connection(wire::METHOD_TERMINATE, false, |inner| {
            let process_id = process_id.clone();
            async move {
                inner
                    .current
                    .read()
                    .await
                    .process_terminate(&process_id)
                    .await
            }
        })
        .await
    }

    /// `process/signal` (not replayed: a signal may have been delivered).
    pub async fn process_signal(&self, process_id: &str, signal: &str) -> Result<(), ClientError> {
        let (process_id, signal) = (process_id.to_owned(), signal.to_owned());
        self.with_connection(wire::METHOD_SIGNAL, false, |inner| {
            let (process_id, signal) = (process_id.clone(), signal.clone());
            async move {
                inner
                    .current
                    .read()
                    .await
                    .process_signal(&process_id, &signal)
                    .await
            }
        })
        .await
    }

    /// `process/resize`, retried after a transport-close race (setting the
    /// same size twice is harmless).
    pub async fn process_resize(&self, process_id: &str, size: PtySize) -> Result<(), ClientError> {
        let process_id = process_id.to_owned();
        self.with_connection(wire::METHOD_RESIZE, true, |inner| {
            let process_id = process_id.clone();
            async move {
                inner
                    .current
                    .read()
                    .await
                    .process_resize(&process_id, size)
                    .await
            }
        })
        .await
    }

    /// `environment/info` (read-only, retried once).
    pub async fn environment_info(&self) -> Result<EnvironmentInfo, ClientError> {
        self.with_connection(
            crate::protocol::environment::METHOD_INFO,
            true,
            |inner| async move { inner.current.read().await.environment_info().await },
        )
        .await
    }
}

/// Orders one notification; returns what may be delivered now.
fn order(
    processes: &mut HashMap<String, Tracked>,
    notification: Notification,
) -> Vec<Notification> {
    let is_process_event =
        [NOTIFY_OUTPUT, NOTIFY_EXITED, NOTIFY_CLOSED].contains(&notification.method.as_str());
    let process_id = notification.params["processId"].as_str().map(str::to_owned);
    let seq = notification.params["seq"].as_u64();
    let (Some(process_id), Some(seq), true) = (process_id, seq, is_process_event) else {
        return vec![notification];
    };
    // A process this client neither started nor attached (one of a resumed
    // session's): its events would arrive out of order with what
    // `attach_process` reads back later, so they wait for the attach, which
    // reads them from the server.
    let Some(tracked) = processes.get_mut(&process_id) else {
        return Vec::new();
    };
    if tracked.positioning {
        tracked.held.insert(seq, notification);
        return Vec::new();
    }
    if seq <= tracked.delivered {
        return Vec::new();
    }
    tracked.held.insert(seq, notification);
    let mut ready = Vec::new();
    tracked.release(&mut ready);
    if tracked.held.len() > MAX_HELD_EVENTS {
        // A gap that never closes: say so and move on.
        let first = tracked
            .held
            .keys()
            .next()
            .copied()
            .unwrap_or_else(|| tracked.delivered.saturating_add(1));
        ready.push(Notification {
            method: NOTIFY_OUTPUT_TRUNCATED.into(),
            params: json!({"processId": process_id, "afterSeq": tracked.delivered}),
        });
        tracked.delivered = first.saturating_sub(1);
        tracked.release(&mut ready);
    }
    ready
}

/// The notifications a `process/read` after `after` stands for (the
/// caller handles `truncated`).
fn backfill(process_id: &str, after: u64, read: &ReadResult) -> Vec<Notification> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut last = after;
    for chunk in &read.chunks {
        last = last.max(chunk.seq);
        out.push(Notification {
            method: NOTIFY_OUTPUT.into(),
            params: json!({
                "processId": process_id,
                "seq": chunk.seq,
                "stream": chunk.stream,
                "chunk": super::types::b64().encode(&chunk.chunk),
            }),
        });
    }
    // `closed` is `nextSeq - 1` once recorded. The exit is the one seq
    // below that no chunk took: normally right before the close, but output
    // written after the exit (a background child still holding the pipe)
    // comes after it.
    let closed_seq = (read.closed && read.next_seq >= 2).then(|| read.next_seq - 1);
    if read.exited {
        let upper = closed_seq.unwrap_or(read.next_seq);
        let taken: std::collections::BTreeSet<u64> = read.chunks.iter().map(|c| c.seq).collect();
        let exit_seq = match read.chunks.first() {
            // Every retained chunk was evicted: the usual place is all we know.
            None if read.truncated => upper.checked_sub(1),
            first => {
                let start = match first {
                    Some(chunk) if read.truncated => chunk.seq,
                    _ => after.saturating_add(1),
                };
                (start..upper).find(|seq| !taken.contains(seq))
            }
        };
        if let Some(seq) = exit_seq.filter(|&seq| seq > after) {
            out.push(Notification {
                method: NOTIFY_EXITED.into(),
                params: json!({
                    "processId": process_id,
                    "seq": seq,
                    "exitCode": read.exit_code,
                    "sandboxDenied": read.sandbox_denied,
                }),
            });
        }
    }
    if let Some(seq) = closed_seq.filter(|&seq| seq > last) {
        out.push(Notification {
            method: NOTIFY_CLOSED.into(),
            params: json!({"processId": process_id, "seq": seq}),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::process::{ReadChunk, StreamKind};

    fn output(id: &str, seq: u64) -> Notification {
        Notification {
            method: NOTIFY_OUTPUT.into(),
            params: json!({"processId": id, "seq": seq, "stream": "stdout", "chunk": ""}),
        }
    }

    fn seqs(notifications: &[Notification]) -> Vec<u64> {
        notifications
            .iter()
            .filter_map(|n| n.params["seq"].as_u64())
            .collect()
    }

    #[test]
    fn events_are_released_in_seq_order_without_duplicates() {
        let mut processes = HashMap::new();
        processes.insert("p".to_owned(), Tracked::default());
        assert_eq!(
            seqs(&order(&mut processes, output("p", 2))),
            Vec::<u64>::new()
        );
        assert_eq!(seqs(&order(&mut processes, output("p", 1))), vec![1, 2]);
        assert!(
            order(&mut processes, output("p", 2)).is_empty(),
            "duplicate"
        );
        assert_eq!(seqs(&order(&mut processes, output("p", 3))), vec![3]);
    }

    #[test]
    fn backfill_synthesizes_the_missing_exit_and_close() {
        let read = ReadResult {
            chunks: vec![ReadChunk {
                seq: 4,
                stream: StreamKind::Stdout,
                chunk: b"x".to_vec(),
            }],
            next_seq: 7,
            exited: true,
            exit_code: Some(0),
            closed: true,
            failure: None,
            sandbox_denied: false,
            truncated: false,
            network_denials: Vec::new(),
        };
        let out = backfill("p", 3, &read);
        let methods: Vec<&str> = out.iter().map(|n| n.method.as_str()).collect();
        assert_eq!(methods, vec![NOTIFY_OUTPUT, NOTIFY_EXITED, NOTIFY_CLOSED]);
        assert_eq!(seqs(&out), vec![4, 5, 6]);
    }

    fn chunk(seq: u64) -> ReadChunk {
        ReadChunk {
            seq,
            stream: StreamKind::Stdout,
            chunk: b"x".to_vec(),
        }
    }

    fn read(chunks: Vec<ReadChunk>, next_seq: u64, closed: bool) -> ReadResult {
        ReadResult {
            chunks,
            next_seq,
            exited: true,
            exit_code: Some(3),
            closed,
            failure: None,
            sandbox_denied: false,
            truncated: false,
            network_denials: Vec::new(),
        }
    }

    fn exit_seq(out: &[Notification]) -> Option<u64> {
        out.iter()
            .find(|n| n.method == NOTIFY_EXITED)
            .and_then(|n| n.params["seq"].as_u64())
    }

    #[test]
    fn backfill_finds_an_exit_followed_by_output() {
        // out(1) exit(2) out(3) closed(4): a background child wrote after the exit.
        let out = backfill("p", 0, &read(vec![chunk(1), chunk(3)], 5, true));
        assert_eq!(seqs(&out), vec![1, 3, 2, 4]);
        assert_eq!(exit_seq(&out), Some(2));
        // Exited, not closed yet: the exit is known, the close comes later.
        let out = backfill("p", 1, &read(vec![chunk(3)], 4, false));
        assert_eq!(exit_seq(&out), Some(2));
        assert!(out.iter().all(|n| n.method != NOTIFY_CLOSED));
        // An exit already delivered is not repeated.
        let out = backfill("p", 2, &read(vec![chunk(3)], 5, true));
        assert_eq!(seqs(&out), vec![3, 4]);
    }

    #[test]
    fn a_positioning_process_holds_everything_until_placed() {
        let mut processes = HashMap::new();
        processes.insert(
            "p".to_owned(),
            Tracked {
                positioning: true,
                ..Tracked::default()
            },
        );
        assert!(order(&mut processes, output("p", 1)).is_empty());
        assert!(order(&mut processes, output("p", 7)).is_empty());
        assert_eq!(processes["p"].held.len(), 2);
    }

    #[test]
    fn a_process_not_yet_attached_delivers_nothing() {
        // A resumed session's live output that arrives before the attach
        // would otherwise come out ahead of the retained output.
        let mut processes = HashMap::new();
        assert!(order(&mut processes, output("p", 9)).is_empty());
        assert!(processes.is_empty());
    }

    #[test]
    fn a_start_at_the_largest_seq_neither_panics_nor_delivers() {
        let mut processes = HashMap::new();
        processes.insert(
            "p".to_owned(),
            Tracked {
                delivered: u64::MAX,
                ..Tracked::default()
            },
        );
        assert!(order(&mut processes, output("p", u64::MAX)).is_empty());
        assert!(order(&mut processes, output("p", 1)).is_empty());
    }
}
