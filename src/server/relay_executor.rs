//! The remote-mode executor (`exec-server --remote URL --environment-id ID`):
//! registers its Noise key with the registry, holds one WebSocket to the
//! rendezvous (a `crate::link`, reconnect with backoff, re-registration when the
//! upgrade is refused with a 4xx), and serves many virtual streams on it,
//! demultiplexed by `stream_id`. Each stream is a normal JSON-RPC
//! connection on the shared session registry
//! ([`super::transport::relay`]), so sessions resume across
//! streams. The handshake rules and limits are the reference's: 128
//! streams, 32 validations in flight, authorizations of at most 4096 bytes,
//! each harness key checked with the registry's `validate` before msg2 is
//! sent. One difference: a failed handshake resets its stream and nothing
//! else. The reference also closes its socket after 8 failures, which lets
//! any harness cut every other harness's streams; the budget belongs where
//! harness sockets can be told apart, at the rendezvous.
//!
//! Reliable streams (negotiated on the handshake) outlive the socket: they
//! pause until the next one and then resume on it.
//!
//! For a fleet of rendezvous replicas behind a load balancer that hashes on
//! the environment, the executor also registers again on a jittered timer:
//! when the hash ring moves its environment to another replica, that
//! replica answers with another registration id, and the executor moves
//! its socket there. A registration the registry refuses for now (429
//! `Retry-After`, and once serving also the network, 5xx, 408) is tried
//! again after the wait it asked for plus the reconnect backoff's jitter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::Message;

use super::connection::Shared;
use super::drain::{self, Stop};
use super::transport::relay as relay_transport;
use crate::backoff::Backoff;
use crate::link::liveness::Liveness;
use crate::link::{End, Incoming, Link};
use crate::relay::channel::Channel;
use crate::relay::frame::{Body, RelayMessageFrame, FEATURE_RELIABLE};
use crate::relay::framing::{advertise, advertised, MessageLimits};
use crate::relay::noise::{prologue, NoiseError, NoiseIdentity, NoisePublicKey, Responder};
use crate::relay::registry_api::RegisterResponse;
use crate::relay::registry_client::{RegistryClient, RegistryError};
use crate::relay::socket::{dial, DialError, RelaySocket};
use crate::relay::stream::{drive, LinkState, Outbox, Oversize, StreamIo};
use crate::relay::{Dialect, RESET_PROTOCOL_ERROR, RESET_SHUTTING_DOWN};
use crate::sync::lock;
use crate::web_url::redact;

/// Virtual streams per executor.
pub const MAX_ACTIVE_STREAMS: usize = 128;
/// Harness key validations in flight per socket.
pub const MAX_PENDING_VALIDATIONS: usize = 32;
/// Largest harness key authorization.
pub const MAX_AUTHORIZATION_BYTES: usize = 4096;
/// Longest first reconnect delay, after a socket that was up ends (each
/// failed attempt doubles it up to [`MAX_BACKOFF`]; see `crate::backoff`).
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
/// Longest reconnect delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Longest `Retry-After` honoured (a longer one is cut to this).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Default period of the re-registration timer (each wait is drawn
/// uniformly from its second half).
pub const DEFAULT_REGISTER_INTERVAL: Duration = Duration::from_secs(20);
/// Frames queued for the socket writer.
const SOCKET_OUTBOX: usize = 1024;
/// Frames queued per stream before the demux refuses more.
const STREAM_FRAMES: usize = 128;

/// Why the executor stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("cannot create the Noise identity: {0}")]
    Identity(#[from] NoiseError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// A running virtual stream, as the demux sees it.
struct StreamHandle {
    instance: u64,
    frames: mpsc::Sender<RelayMessageFrame>,
    dialect: Dialect,
}

/// What lives as long as the executor.
struct Executor {
    shared: Shared,
    registry: RegistryClient,
    identity: NoiseIdentity,
    registration: Mutex<RegisterResponse>,
    /// Bumped when a re-registration moved the environment to another
    /// registration (another replica): the socket moves to its URL.
    moved: watch::Sender<u64>,
    streams: Mutex<HashMap<String, StreamHandle>>,
    link: watch::Sender<LinkState>,
    next_instance: AtomicU64,
}

/// A handshake waiting for the registry's `validate`.
struct Pending {
    id: u64,
    responder: Responder,
    reliable: bool,
    /// The `ack` of the harness's handshake frame: in the reliable dialect,
    /// the largest message it accepts.
    max_message: u32,
}

/// The outcome of one `validate` call.
struct Validated {
    stream_id: String,
    id: u64,
    result: Result<(), RegistryError>,
}

/// Why a rendezvous socket ended (logged).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Disconnect {
    /// The link ended (the peer closed or went silent, the socket failed).
    Link(End),
    /// This side closed it.
    LocalShutdown,
    /// The environment's registration moved: the socket goes to its URL.
    Moved,
}

/// Runs the executor until `shutdown` completes. A failed registration
/// (at start-up or after a refused upgrade) is fatal, as with the reference.
/// When `shutdown` asks for a drain, the rendezvous connection and the open
/// streams stay up while new streams are refused, until the drain ends.
/// `register_interval` is the period of the re-registration timer (`None`:
/// register only at start and when the rendezvous refuses the URL).
pub async fn run(
    shared: Shared,
    registry: RegistryClient,
    register_interval: Option<Duration>,
    shutdown: impl std::future::Future<Output = impl Into<Stop>>,
) -> Result<(), ExecutorError> {
    let identity = NoiseIdentity::generate()?;
    let key = identity.public_key().encode();
    let mut backoff = Backoff::new(INITIAL_BACKOFF, MAX_BACKOFF);
    let registration = register(&registry, &key, &mut backoff, Retry::RateLimited).await?;
    tracing::info!(environment = %registration.environment_id, registration = %registration.executor_registration_id, "registered with the environment registry");
    let executor = Arc::new(Executor {
        shared,
        registry,
        identity,
        registration: Mutex::new(registration),
        moved: watch::channel(0).0,
        streams: Mutex::new(HashMap::new()),
        link: watch::channel(None).0,
        next_instance: AtomicU64::new(1),
    });
    let serving = async {
        match register_interval {
            Some(period) => tokio::select! {
                outcome = connect_loop(executor.clone()) => outcome,
                never = register_periodically(executor.clone(), period) => match never {},
            },
            None => connect_loop(executor.clone()).await,
        }
    };
    tokio::pin!(serving);
    let stop: Stop = tokio::select! {
        outcome = &mut serving => return outcome,
        stop = shutdown => stop.into(),
    };
    if stop == Stop::Drain {
        let sessions = executor.shared.registry.clone();
        let grace = executor.shared.config.drain_grace;
        tokio::select! {
            outcome = &mut serving => return outcome,
            _ = drain::drain(&sessions, grace, super::shutdown_signal()) => {}
        }
    }
    Ok(())
}

/// Which refusals of a registration are waited out rather than returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Only "too many at once" (429): at start, where anything else is
    /// fatal, as with the reference.
    RateLimited,
    /// Everything passing (the network, 5xx, 408, 429, `environment_offline`):
    /// once serving, when a replica is lost or the fleet restarts.
    Transient,
}

/// Registers `key`, waiting out the refusals `retry` names: after the
/// registry's `Retry-After` (at most [`MAX_RETRY_AFTER`]) plus the
/// backoff's jitter, so executors refused together come back spread out.
async fn register(
    registry: &RegistryClient,
    key: &NoisePublicKey,
    backoff: &mut Backoff,
    retry: Retry,
) -> Result<RegisterResponse, RegistryError> {
    loop {
        let err = match registry.register(key).await {
            Ok(registration) => return Ok(registration),
            Err(err) => err,
        };
        let waits = match retry {
            Retry::RateLimited => err.is_rate_limited(),
            Retry::Transient => err.is_retryable(),
        };
        if !waits {
            return Err(err);
        }
        let told = err.retry_after().unwrap_or_default().min(MAX_RETRY_AFTER);
        let wait = told + backoff.next_delay();
        tracing::warn!(
            "registration refused for now ({err}); trying again in {} ms",
            wait.as_millis()
        );
        tokio::time::sleep(wait).await;
    }
}

async fn connect_loop(executor: Arc<Executor>) -> Result<(), ExecutorError> {
    let mut backoff = Backoff::new(INITIAL_BACKOFF, MAX_BACKOFF);
    let mut generation = 0u64;
    loop {
        let url = lock(&executor.registration).url.clone();
        match dial(&url).await {
            Ok(ws) => {
                backoff.reset();
                generation += 1;
                tracing::info!(url = %redact(&url), "connected to the rendezvous");
                let reason = serve_socket(&executor, ws, generation).await;
                tracing::info!(?reason, "rendezvous connection ended");
                if reason == Disconnect::Moved {
                    continue;
                }
            }
            Err(DialError::Rejected(status)) if (400..500).contains(&status) => {
                tracing::info!(status, "rendezvous refused the URL; registering again");
                let key = executor.identity.public_key().encode();
                let registration =
                    register(&executor.registry, &key, &mut backoff, Retry::Transient).await?;
                *lock(&executor.registration) = registration;
            }
            Err(err) => tracing::warn!("cannot reach the rendezvous: {err}"),
        }
        backoff.wait().await;
    }
}

/// Registers again every `period` (each wait drawn uniformly from its
/// second half). The same registration id back means the same replica
/// still holds the environment: only the URL is refreshed. Another id means
/// the registry now places the environment elsewhere (the hash ring of a
/// fleet moved): the socket is moved to the new URL. A failure is logged
/// and tried at the next tick.
async fn register_periodically(
    executor: Arc<Executor>,
    period: Duration,
) -> std::convert::Infallible {
    let mut jitter = Backoff::new(period / 2, period / 2);
    let key = executor.identity.public_key().encode();
    loop {
        tokio::time::sleep(period / 2 + jitter.next_delay()).await;
        let registration = match executor.registry.register(&key).await {
            Ok(registration) => registration,
            Err(err) => {
                tracing::warn!("periodic registration failed: {err}");
                continue;
            }
        };
        let mut current = lock(&executor.registration);
        let moved = current.executor_registration_id != registration.executor_registration_id;
        *current = registration;
        drop(current);
        if moved {
            tracing::info!(
                "the registry placed this environment elsewhere; moving the rendezvous connection"
            );
            executor.moved.send_modify(|n| *n += 1);
        }
    }
}

fn send_reset(outbox: &Outbox, stream_id: &str) {
    let _ = outbox.try_send(RelayMessageFrame::reset(stream_id, RESET_PROTOCOL_ERROR).to_bytes());
}

/// Whether a new stream must be refused because the server drains.
fn is_draining(executor: &Executor) -> bool {
    executor.shared.registry.is_draining()
}

/// Serves one rendezvous socket until it ends, on the server's link
/// timing; returns why it ended.
async fn serve_socket(executor: &Arc<Executor>, ws: RelaySocket, generation: u64) -> Disconnect {
    let (outbox, queue) = mpsc::channel::<Vec<u8>>(SOCKET_OUTBOX);
    let timing = executor.shared.config.link;
    let (mut reader, writer) =
        Link::new(ws, timing).start(queue, |frame: Vec<u8>| Some(Message::Binary(frame.into())));
    executor
        .link
        .send_replace(Some((generation, outbox.clone())));
    let (validated_tx, mut validated_rx) = mpsc::channel::<Validated>(MAX_PENDING_VALIDATIONS);
    let mut pending: HashMap<String, Pending> = HashMap::new();
    let mut next_validation = 0u64;
    let mut moved = executor.moved.subscribe();
    moved.mark_unchanged();
    let reason = loop {
        let incoming = tokio::select! {
            incoming = reader.next() => incoming,
            _ = moved.changed() => break Disconnect::Moved,
            Some(done) = validated_rx.recv() => {
                if !finish_handshake(executor, &outbox, &mut pending, done, generation) {
                    break Disconnect::LocalShutdown;
                }
                continue;
            }
        };
        let bytes = match incoming {
            Err(end) => break Disconnect::Link(end),
            Ok(Incoming::Binary(bytes)) => bytes,
            Ok(Incoming::Text(_)) => {
                tracing::warn!("ignoring a text frame from the rendezvous");
                continue;
            }
            Ok(Incoming::Control) => continue,
        };
        let frame = match RelayMessageFrame::parse(&bytes, Dialect::Reliable) {
            Ok(frame) => frame,
            Err(err) => {
                tracing::debug!("dropping relay frame: {err}");
                continue;
            }
        };
        if matches!(frame.body, Some(Body::Handshake(_))) {
            start_handshake(
                executor,
                &outbox,
                &mut pending,
                &mut next_validation,
                &validated_tx,
                frame,
            );
        } else {
            route_frame(executor, &outbox, &mut pending, frame);
        }
    };
    executor.link.send_if_modified(|link| {
        let current = link.as_ref().is_some_and(|(g, _)| *g == generation);
        if current {
            *link = None;
        }
        current
    });
    drop(outbox);
    writer.close(None);
    reason
}

fn start_handshake(
    executor: &Arc<Executor>,
    outbox: &Outbox,
    pending: &mut HashMap<String, Pending>,
    next_validation: &mut u64,
    validated_tx: &mpsc::Sender<Validated>,
    frame: RelayMessageFrame,
) {
    let stream_id = frame.stream_id.clone();
    let Some(Body::Handshake(handshake)) = frame.body else {
        return;
    };
    if lock(&executor.streams).contains_key(&stream_id) {
        return send_reset(outbox, &stream_id);
    }
    if is_draining(executor) {
        tracing::info!(stream = %stream_id, "refused a new relay stream: draining");
        let reset = RelayMessageFrame::reset(&stream_id, RESET_SHUTTING_DOWN);
        let _ = outbox.try_send(reset.to_bytes());
        return;
    }
    if pending.remove(&stream_id).is_some() {
        return send_reset(outbox, &stream_id);
    }
    if lock(&executor.streams).len() >= MAX_ACTIVE_STREAMS
        || pending.len() >= MAX_PENDING_VALIDATIONS
    {
        return send_reset(outbox, &stream_id);
    }
    let (environment_id, registration_id) = {
        let registration = lock(&executor.registration);
        (
            registration.environment_id.clone(),
            registration.executor_registration_id.clone(),
        )
    };
    let p = prologue(&environment_id, &registration_id, &stream_id);
    let responder = match Responder::read_request(&executor.identity, &p, &handshake.payload) {
        Ok(responder) => responder,
        Err(err) => {
            tracing::info!(stream = %stream_id, "refused a relay handshake: {err}");
            return send_reset(outbox, &stream_id);
        }
    };
    let authorization = match std::str::from_utf8(responder.payload()) {
        Ok(text) if text.len() <= MAX_AUTHORIZATION_BYTES => text.to_owned(),
        _ => {
            tracing::info!(stream = %stream_id, "refused a relay handshake: bad authorization");
            return send_reset(outbox, &stream_id);
        }
    };
    *next_validation += 1;
    let id = *next_validation;
    let harness_key = responder.remote_key().encode();
    pending.insert(
        stream_id.clone(),
        Pending {
            id,
            responder,
            reliable: frame.ack_bits & FEATURE_RELIABLE != 0,
            max_message: frame.ack,
        },
    );
    let (registry, tx) = (executor.registry.clone(), validated_tx.clone());
    tokio::spawn(async move {
        let result = registry
            .validate(&registration_id, &harness_key, &authorization)
            .await;
        let _ = tx
            .send(Validated {
                stream_id,
                id,
                result,
            })
            .await;
    });
}

/// Completes a validated handshake. Returns false when the socket must close.
fn finish_handshake(
    executor: &Arc<Executor>,
    outbox: &Outbox,
    pending: &mut HashMap<String, Pending>,
    done: Validated,
    generation: u64,
) -> bool {
    let stream_id = done.stream_id;
    if pending.get(&stream_id).map(|p| p.id) != Some(done.id) {
        return true;
    }
    let Some(entry) = pending.remove(&stream_id) else {
        return true;
    };
    if let Err(err) = done.result {
        tracing::info!(stream = %stream_id, "harness key not validated: {err}");
        send_reset(outbox, &stream_id);
        return true;
    }
    if lock(&executor.streams).len() >= MAX_ACTIVE_STREAMS {
        send_reset(outbox, &stream_id);
        return true;
    }
    let (msg2, transport) = match entry.responder.finish() {
        Ok(done) => done,
        Err(err) => {
            tracing::info!(stream = %stream_id, "cannot finish a relay handshake: {err}");
            send_reset(outbox, &stream_id);
            return true;
        }
    };
    // A reliable stream carries what each end says it accepts: the server's
    // own cap inbound, the harness's outbound.
    let mut reply = RelayMessageFrame::handshake(&stream_id, msg2, 0);
    let (dialect, limits) = if entry.reliable {
        let said = advertise(executor.shared.config.max_message_bytes);
        reply = reply.with_ack(said, FEATURE_RELIABLE);
        let limits = MessageLimits {
            outbound: advertised(entry.max_message),
            inbound: advertised(said),
        };
        (Dialect::Reliable, limits)
    } else {
        (Dialect::Reference, MessageLimits::REFERENCE)
    };
    let reply = reply.to_bytes();
    if outbox.try_send(reply).is_err() {
        return false;
    }
    let instance = executor.next_instance.fetch_add(1, Ordering::Relaxed);
    let (frames_tx, frames_rx) = mpsc::channel(STREAM_FRAMES);
    // Only a reliable peer answers a probe (with an acknowledgement).
    let liveness = Liveness::new(dialect == Dialect::Reliable);
    let (to_application, from_application) =
        relay_transport::open(executor.shared.clone(), &stream_id, liveness.clone());
    let channel = Channel::new(&stream_id, dialect, transport, limits, Instant::now());
    let io = StreamIo {
        frames: frames_rx,
        link: executor.link.subscribe(),
        to_application,
        from_application,
        close_reason: None,
        liveness: Some(liveness.clone()),
        oversize: Oversize::ReplaceResponse,
    };
    lock(&executor.streams).insert(
        stream_id.clone(),
        StreamHandle {
            instance,
            frames: frames_tx,
            dialect,
        },
    );
    tracing::info!(stream = %stream_id, ?dialect, "relay stream opened");
    let executor = executor.clone();
    tokio::spawn(async move {
        let end = drive(channel, io, generation).await;
        liveness.transport_closed();
        tracing::info!(stream = %stream_id, "relay stream ended: {end}");
        let mut streams = lock(&executor.streams);
        if streams.get(&stream_id).map(|s| s.instance) == Some(instance) {
            streams.remove(&stream_id);
        }
        drop(streams);
        if end.is_protocol_error() {
            if let Some((_, outbox)) = executor.link.borrow().as_ref() {
                send_reset(outbox, &stream_id);
            }
        }
    });
    true
}

fn route_frame(
    executor: &Arc<Executor>,
    outbox: &Outbox,
    pending: &mut HashMap<String, Pending>,
    frame: RelayMessageFrame,
) {
    let stream_id = frame.stream_id.clone();
    // Data, and the reliable dialect's own frames for a stream this process
    // never had (e.g. after a restart), get a reset so the harness stops
    // waiting. A plain `resume{0}` opens a new stream and is ignored.
    let is_data = match &frame.body {
        Some(Body::Data(_) | Body::Heartbeat(_) | Body::AckFrame(_)) => true,
        Some(Body::Resume(resume)) => resume.next_seq > 0 || frame.ack > 0,
        _ => false,
    };
    let is_reset = matches!(frame.body, Some(Body::Reset(_)));
    if is_reset && pending.remove(&stream_id).is_some() {
        return;
    }
    let mut streams = lock(&executor.streams);
    let Some(stream) = streams.get(&stream_id) else {
        drop(streams);
        if is_data {
            send_reset(outbox, &stream_id);
            pending.remove(&stream_id);
        }
        return;
    };
    if stream.dialect == Dialect::Reference && frame.validate(Dialect::Reference).is_err() {
        streams.remove(&stream_id);
        drop(streams);
        return send_reset(outbox, &stream_id);
    }
    match stream.frames.try_send(frame) {
        Ok(()) => {}
        // A reliable stream's sender retransmits what is dropped here.
        Err(_) if stream.dialect == Dialect::Reliable && !is_reset => {}
        Err(_) => {
            streams.remove(&stream_id);
            drop(streams);
            if !is_reset {
                send_reset(outbox, &stream_id);
            }
        }
    }
}
