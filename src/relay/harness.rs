//! The harness side of a virtual stream: fetch a single-use bundle from the
//! registry, open one rendezvous WebSocket for the stream, run the Noise
//! handshake (offering the reliable dialect), then hand the application a
//! pair of channels carrying whole JSON-RPC messages. What may pass while a
//! stream opens (the executor offline for a moment, a cut socket) is tried
//! again within a window.
//!
//! The socket is watched by a manager task. In the reference dialect its
//! loss ends the stream (the caller recovers with a session resume on a new
//! stream). In the reliable dialect the manager fetches a fresh bundle,
//! reconnects, and the stream resumes where it was (`resume`, retransmission
//! of cached ciphertext), invisibly to the application, until the peer has
//! been silent for [`super::channel::PEER_SILENCE_TIMEOUT`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::link::{Incoming, Link, Timing};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

use super::channel::Channel;
use super::frame::{Body, RelayMessageFrame, FEATURE_RELIABLE};
use super::framing::{advertise, advertised, MessageLimits};
use super::noise::{prologue, Initiator, NoiseError, NoiseIdentity};
use super::registry_api::ConnectResponse;
use super::registry_client::{RegistryClient, RegistryError};
use super::socket::{dial, DialError};
use super::stream::{drive, Oversize, StreamIo};
use super::Dialect;
use crate::backoff::Backoff;

/// Time allowed for the socket and the handshake of a new stream.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long opening a stream retries what may pass by default (the
/// reference's recovery window).
pub const OPEN_WINDOW: Duration = Duration::from_secs(25);
/// Delays between attempts to open a stream ([`Backoff`]).
const OPEN_RETRY_FIRST: Duration = Duration::from_millis(100);
const OPEN_RETRY_MAX: Duration = Duration::from_secs(2);
/// Reset reason a harness sends when its application closes a reliable stream.
pub const RESET_HARNESS_CLOSED: &str = "harness_closed";
/// Frames queued for the socket writer.
const SOCKET_OUTBOX: usize = 256;
/// Messages queued between the stream and the application, each way.
const APPLICATION_QUEUE: usize = 128;
/// The largest message a harness accepts from a reliable executor (what the
/// Rust client accepts on a direct connection); the reference dialect's is
/// the reference's 64 MiB.
pub const MAX_INBOUND_MESSAGE_BYTES: usize = 256 << 20;
/// Reconnect delays of a reliable stream ([`Backoff`]: the first at most
/// this long, doubling up to [`RECONNECT_MAX`]).
const RECONNECT_FIRST: Duration = Duration::from_millis(50);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// Why a stream could not be opened (texts as the reference's where it has them).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("failed to start Noise relay handshake: {0}")]
    Start(#[source] NoiseError),
    #[error(transparent)]
    Dial(#[from] DialError),
    #[error("Noise relay handshake failed: {0}")]
    Handshake(#[source] NoiseError),
    #[error("Noise relay stream reset")]
    Reset,
    #[error("Noise relay received data before handshake completion")]
    EarlyData,
    #[error("failed to parse Noise relay frame: {0}")]
    Frame(#[source] super::frame::FrameError),
    #[error("Noise relay transport expects binary protobuf frames")]
    TextFrame,
    #[error("Noise relay websocket ended during handshake")]
    Ended,
    #[error("timed out waiting for the Noise relay handshake after {0:?}")]
    Timeout(Duration),
}

impl HarnessError {
    /// Whether trying again (with a new bundle) may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Registry(err) => err.is_retryable(),
            Self::Dial(_) | Self::Reset | Self::Ended | Self::Timeout(_) => true,
            _ => false,
        }
    }
}

/// How a harness reaches an environment.
#[derive(Debug, Clone)]
pub struct HarnessConfig {
    pub registry: RegistryClient,
    /// Kept across streams and bundles, as the reference does.
    pub identity: NoiseIdentity,
    /// Offer the reliable dialect (a reference executor ignores the offer).
    pub offer_reliable: bool,
    /// How long [`open`] keeps trying what may pass (the environment's
    /// executor offline, a socket cut, ...).
    pub open_window: Duration,
}

impl HarnessConfig {
    /// A harness of `registry`'s environment with the default [`OPEN_WINDOW`].
    pub fn new(registry: RegistryClient, identity: NoiseIdentity, offer_reliable: bool) -> Self {
        Self {
            registry,
            identity,
            offer_reliable,
            open_window: OPEN_WINDOW,
        }
    }
}

/// An open stream, as the application sees it.
#[derive(Debug)]
pub struct RelayStream {
    pub stream_id: String,
    pub dialect: Dialect,
    /// Outbound JSON-RPC messages (UTF-8, passed on without a copy);
    /// dropping it closes the stream.
    pub outbound: mpsc::Sender<Bytes>,
    /// Inbound JSON-RPC messages; ends when the stream does.
    pub inbound: mpsc::Receiver<Vec<u8>>,
    /// Resolves (with an error) once the stream's socket task has finished:
    /// after a closed stream's last frames (its reset) were written and the
    /// socket closed.
    pub released: oneshot::Receiver<()>,
}

type Socket = super::socket::RelaySocket;

/// Dials within [`HANDSHAKE_TIMEOUT`] (as the reference bounds its connect).
async fn dial_bounded(url: &str) -> Result<Socket, HarnessError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, dial(url))
        .await
        .map_err(|_| HarnessError::Timeout(HANDSHAKE_TIMEOUT))?
        .map_err(HarnessError::from)
}

async fn connect_socket(config: &HarnessConfig) -> Result<(ConnectResponse, Socket), HarnessError> {
    let key = config.identity.public_key().encode();
    let bundle = config.registry.connect(&key).await?;
    match dial_bounded(&bundle.url).await {
        Ok(ws) => Ok((bundle, ws)),
        // An expired or stale URL: one fresh bundle, as the reference does.
        Err(HarnessError::Dial(DialError::Rejected(401))) => {
            let bundle = config.registry.connect(&key).await?;
            let ws = dial_bounded(&bundle.url).await?;
            Ok((bundle, ws))
        }
        Err(err) => Err(err),
    }
}

/// Opens a new stream: bundle, socket, handshake. What may pass (the
/// registry's `409 environment_offline` while the executor is away, a cut
/// socket, a reset from the rendezvous) is tried again, with `Backoff`,
/// for up to the config's `open_window`.
pub async fn open(config: Arc<HarnessConfig>) -> Result<RelayStream, HarnessError> {
    let deadline = tokio::time::Instant::now() + config.open_window;
    let mut backoff = Backoff::new(OPEN_RETRY_FIRST, OPEN_RETRY_MAX);
    loop {
        match open_once(&config).await {
            Err(err) if err.is_retryable() => {
                let delay = backoff.next_delay();
                if tokio::time::Instant::now() + delay >= deadline {
                    return Err(err);
                }
                tracing::info!("relay stream not open yet, trying again: {err}");
                tokio::time::sleep(delay).await;
            }
            outcome => return outcome,
        }
    }
}

async fn open_once(config: &Arc<HarnessConfig>) -> Result<RelayStream, HarnessError> {
    let (bundle, mut ws) = connect_socket(config).await?;
    let executor_key = bundle
        .executor_public_key
        .decode()
        .map_err(HarnessError::Start)?;
    let stream_id = uuid::Uuid::new_v4().to_string();
    let p = prologue(
        &bundle.environment_id,
        &bundle.executor_registration_id,
        &stream_id,
    );
    let (initiator, msg1) = Initiator::start(
        &config.identity,
        &executor_key,
        &p,
        bundle.harness_key_authorization.as_bytes(),
    )
    .map_err(HarnessError::Start)?;
    let mut offer = RelayMessageFrame::handshake(&stream_id, msg1, 0);
    if config.offer_reliable {
        offer = offer.with_ack(advertise(MAX_INBOUND_MESSAGE_BYTES), FEATURE_RELIABLE);
    }
    let hello = [RelayMessageFrame::resume(&stream_id, 0), offer];
    for frame in hello {
        ws.feed(Message::Binary(frame.to_bytes().into()))
            .await
            .map_err(|_| HarnessError::Ended)?;
    }
    ws.flush().await.map_err(|_| HarnessError::Ended)?;
    let reply = tokio::time::timeout(HANDSHAKE_TIMEOUT, await_handshake(&mut ws, &stream_id))
        .await
        .map_err(|_| HarnessError::Timeout(HANDSHAKE_TIMEOUT))??;
    let transport = initiator
        .finish(&reply.payload)
        .map_err(HarnessError::Handshake)?;
    let (dialect, limits) = if config.offer_reliable && reply.features & FEATURE_RELIABLE != 0 {
        let limits = MessageLimits {
            outbound: advertised(reply.max_message),
            inbound: MAX_INBOUND_MESSAGE_BYTES,
        };
        (Dialect::Reliable, limits)
    } else {
        (Dialect::Reference, MessageLimits::REFERENCE)
    };
    let channel = Channel::new(&stream_id, dialect, transport, limits, Instant::now());
    let (frames_tx, frames_rx) = mpsc::channel(APPLICATION_QUEUE);
    let (outbox, queue) = mpsc::channel(SOCKET_OUTBOX);
    let (link_tx, link_rx) = watch::channel(Some((1u64, outbox)));
    let (outbound, from_application) = mpsc::channel::<Bytes>(APPLICATION_QUEUE);
    let (to_application, inbound) = mpsc::channel(APPLICATION_QUEUE);
    let io = StreamIo {
        frames: frames_rx,
        link: link_rx,
        to_application,
        from_application,
        close_reason: (dialect == Dialect::Reliable).then_some(RESET_HARNESS_CLOSED),
        liveness: None,
        oversize: Oversize::AnswerRequest,
    };
    let (release, released) = oneshot::channel();
    let stream_side = StreamSide {
        frames: frames_tx,
        link: link_tx,
        _release: release,
    };
    tokio::spawn(manage_socket(
        config.clone(),
        stream_id.clone(),
        dialect,
        ws,
        queue,
        stream_side,
    ));
    let id = stream_id.clone();
    tokio::spawn(async move {
        let end = drive(channel, io, 1).await;
        tracing::debug!(stream = %id, "relay stream ended: {end}");
    });
    Ok(RelayStream {
        stream_id,
        dialect,
        outbound,
        inbound,
        released,
    })
}

/// msg2 and what its frame says: the feature bits (`ack_bits`) and, from a
/// reliable executor, the largest message it accepts (`ack`).
struct HandshakeReply {
    payload: Vec<u8>,
    features: u32,
    max_message: u32,
}

async fn await_handshake(ws: &mut Socket, stream_id: &str) -> Result<HandshakeReply, HarnessError> {
    while let Some(message) = ws.next().await {
        let bytes = match message {
            Ok(Message::Binary(bytes)) => bytes,
            Ok(Message::Text(_)) => return Err(HarnessError::TextFrame),
            Ok(Message::Close(_)) | Err(_) => return Err(HarnessError::Ended),
            Ok(_) => continue,
        };
        let frame = RelayMessageFrame::from_bytes(&bytes).map_err(HarnessError::Frame)?;
        if frame.stream_id != stream_id {
            continue;
        }
        if frame.validate(Dialect::Reliable).is_err() {
            return Err(HarnessError::EarlyData);
        }
        match frame.body {
            Some(Body::Handshake(handshake)) => {
                return Ok(HandshakeReply {
                    payload: handshake.payload,
                    features: frame.ack_bits,
                    max_message: frame.ack,
                })
            }
            Some(Body::Reset(_)) => return Err(HarnessError::Reset),
            Some(Body::Data(_)) => return Err(HarnessError::EarlyData),
            _ => {}
        }
    }
    Err(HarnessError::Ended)
}

/// What a socket manager holds of its stream task.
struct StreamSide {
    /// Frames of the stream, for the stream task.
    frames: mpsc::Sender<RelayMessageFrame>,
    /// The current link, for the stream task.
    link: watch::Sender<super::stream::LinkState>,
    /// Dropped when the manager returns ([`RelayStream::released`]).
    _release: oneshot::Sender<()>,
}

/// Runs the stream's socket; for a reliable stream, replaces it when it is lost.
async fn manage_socket(
    config: Arc<HarnessConfig>,
    stream_id: String,
    dialect: Dialect,
    mut ws: Socket,
    mut queue: mpsc::Receiver<Vec<u8>>,
    side: StreamSide,
) {
    let StreamSide { frames, link, .. } = &side;
    let mut generation = 1u64;
    loop {
        // The lost socket's queue goes with it, so the stream stops writing
        // into it (its sends fail and it waits for the next link).
        let closing = pump(ws, &stream_id, frames, queue).await;
        link.send_replace(None);
        if closing || dialect == Dialect::Reference {
            return;
        }
        let mut backoff = Backoff::new(RECONNECT_FIRST, RECONNECT_MAX);
        ws = loop {
            if frames.is_closed() {
                return;
            }
            match connect_socket(&config).await {
                Ok((_, ws)) => break ws,
                Err(err) => tracing::debug!(stream = %stream_id, "relay reconnect failed: {err}"),
            }
            backoff.wait().await;
        };
        generation += 1;
        let (outbox, next_queue) = mpsc::channel(SOCKET_OUTBOX);
        queue = next_queue;
        link.send_replace(Some((generation, outbox)));
        tracing::info!(stream = %stream_id, generation, "relay stream reconnected");
    }
}

/// Moves frames between one socket (a [`Link`]) and the stream. Returns
/// true when the stream is closing (its outbox ended, its last frames
/// written), false when the socket was lost.
async fn pump(
    ws: Socket,
    stream_id: &str,
    frames: &mpsc::Sender<RelayMessageFrame>,
    queue: mpsc::Receiver<Vec<u8>>,
) -> bool {
    let (mut reader, writer) = Link::new(ws, Timing::default())
        .start(queue, |frame: Vec<u8>| Some(Message::Binary(frame.into())));
    let closing = loop {
        tokio::select! {
            incoming = reader.next() => {
                let bytes = match incoming {
                    Ok(Incoming::Binary(bytes)) => bytes,
                    Ok(Incoming::Control) => continue,
                    Ok(Incoming::Text(_)) => break false,
                    Err(_) => break writer.queue_ended(),
                };
                let Ok(frame) = RelayMessageFrame::parse(&bytes, Dialect::Reliable) else {
                    tracing::debug!(stream = %stream_id, "dropping an invalid relay frame");
                    continue;
                };
                if frame.stream_id != stream_id {
                    continue;
                }
                if frames.send(frame).await.is_err() {
                    break true;
                }
            }
            _ = writer.done() => break writer.queue_ended(),
            _ = frames.closed() => break true,
        }
    };
    writer.close(None);
    writer.finished().await;
    closing
}
