//! One WebSocket link, as every WebSocket of codexbox runs it: the
//! exec-server's connections, the client's, `connect`'s local side, the
//! executor's and the harness's rendezvous sockets and the rendezvous's own.
//!
//! A [`Link`] takes an established `WebSocketStream` (how it was accepted or
//! dialled is not its business) and splits it:
//!
//! - a **writer** task alone owns the sink: it writes what is queued in
//!   batches (up to [`WRITE_BATCH`] messages, then one flush), pings the
//!   peer every [`Timing::ping_interval`], pings at once when asked (a
//!   takeover probe), and ends with a close frame: when the queue ends,
//!   when a `Close` is queued, or when [`Writer::close`] is called;
//! - a **reader** ([`Reader::next`]) hands out the peer's data frames and
//!   ends the link when the peer has sent nothing at all (no data, ping or
//!   pong) for [`Timing::peer_timeout`] while the reader was waiting for it.
//!   Time the owner spends elsewhere (handling a request) does not count: the
//!   peer's answers wait unread meanwhile.
//!
//! A write that cannot complete for [`Timing::write_timeout`] while nothing
//! was heard from the peer either ends the link too: a peer that neither
//! reads nor speaks is gone, while one that only reads slowly (its own
//! consumer holds it back) but still pings is waited for.
//!
//! A writer that fails ends the link: the reader then returns the writer's
//! [`End`]. The reader ending does not stop the writer by itself: its owner
//! closes it ([`Writer::close`], with [`End::close_frame`] to tell the peer
//! why), or drops it.
//!
//! [`liveness`] tells whether the peer of one connection is still there,
//! whatever carries it (a link, stdio, a relay stream): its transport
//! reports what it hears and asks the link for a ping when probed.
//! This module knows nothing of JSON-RPC, relay frames or sessions.

pub mod liveness;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Bytes, Error as WsError, Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use crate::sync::lock;

/// Default time a peer may stay silent before the link ends.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest time a close frame and the socket's close may take.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Messages written per flush at most.
pub const WRITE_BATCH: usize = 64;
/// The longest close reason a close frame carries (bytes).
const MAX_CLOSE_REASON: usize = 123;

/// The timers of a link. Every link of codexbox uses [`Timing::default`]
/// unless its command line says otherwise (`exec-server
/// --peer-timeout-secs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A ping goes out this often, idle or busy.
    pub ping_interval: Duration,
    /// The peer must be heard from within this, while the link waits for it.
    pub peer_timeout: Duration,
    /// A write stuck this long while the peer is silent ends the link.
    pub write_timeout: Duration,
    /// How long the close frame and the socket's close may take.
    pub close_timeout: Duration,
}

impl Timing {
    /// Pings every half of `peer_timeout` (a peer gets two pings to
    /// answer); writes may stall as long as the peer may stay silent.
    pub fn with_peer_timeout(peer_timeout: Duration) -> Self {
        let peer_timeout = peer_timeout.max(Duration::from_millis(2));
        Self {
            ping_interval: peer_timeout / 2,
            peer_timeout,
            write_timeout: peer_timeout,
            close_timeout: CLOSE_TIMEOUT.min(peer_timeout),
        }
    }
}

impl Default for Timing {
    fn default() -> Self {
        Self::with_peer_timeout(PEER_TIMEOUT)
    }
}

/// Why a link ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum End {
    /// The peer sent a close frame or ended the stream.
    #[error("the peer closed the connection")]
    PeerClosed,
    /// Nothing came from the peer within the deadline.
    #[error("no frame from the peer within {} s", .0.as_secs_f64())]
    PeerSilent(Duration),
    /// A frame or message above the link's size cap.
    #[error("{0}")]
    TooLarge(String),
    /// Reading failed.
    #[error("reading from the peer failed: {0}")]
    Read(String),
    /// Writing failed.
    #[error("writing to the peer failed: {0}")]
    Write(String),
    /// A write stalled while the peer was silent.
    #[error("the peer read nothing and said nothing within {} s", .0.as_secs_f64())]
    WriteTimeout(Duration),
    /// This side closed the link (its queue ended or it asked to close).
    #[error("the link was closed")]
    Closed,
}

impl End {
    /// The close frame that tells the peer why this side ended the link:
    /// `1001` with the reason for a peer that went silent or stopped
    /// reading, `1009` for a message over the cap; none otherwise (the
    /// peer closed, or the socket failed).
    pub fn close_frame(&self) -> Option<CloseFrame> {
        match self {
            Self::PeerSilent(_) | Self::WriteTimeout(_) => {
                Some(close_frame(CloseCode::Away, &self.to_string()))
            }
            Self::TooLarge(reason) => Some(close_frame(CloseCode::Size, reason)),
            Self::PeerClosed | Self::Read(_) | Self::Write(_) | Self::Closed => None,
        }
    }
}

/// A data frame from the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming {
    Text(Utf8Bytes),
    Binary(Bytes),
    /// A ping or pong: the peer is there, nothing to handle.
    Control,
}

/// What the reader and writer share.
#[derive(Debug)]
struct Shared {
    /// When the peer was last heard from.
    heard: Mutex<Instant>,
    /// Set by the half that ended first.
    ended: watch::Sender<Option<End>>,
    /// Asks the writer for a ping now.
    ping_now: Notify,
    /// The close frame the writer sends when asked to close.
    close: Mutex<Option<Option<CloseFrame>>>,
    /// Set when the owner asks the writer to close.
    closing: watch::Sender<bool>,
    /// Set once the writer has let go of the socket.
    done: watch::Sender<bool>,
    /// Set once the queue ended (or carried a close frame): the owner
    /// closed the link, as opposed to losing it.
    queue_ended: AtomicBool,
}

impl Shared {
    fn heard(&self) {
        *lock(&self.heard) = Instant::now();
    }

    fn heard_within(&self, within: Duration) -> bool {
        lock(&self.heard).elapsed() < within
    }

    fn end(&self, end: End) {
        self.ended.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(end);
            true
        });
    }

    fn ended(&self) -> Option<End> {
        self.ended.borrow().clone()
    }
}

/// An established WebSocket, not yet started.
pub struct Link<S> {
    ws: WebSocketStream<S>,
    timing: Timing,
}

impl<S> Link<S>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    /// A link over `ws` with `timing`.
    pub fn new(ws: WebSocketStream<S>, timing: Timing) -> Self {
        Self { ws, timing }
    }

    /// Starts the writer on `queue` (each item turned into a message by
    /// `encode`; `None` skips it) and returns the reader and the writer's
    /// handle.
    pub fn start<T, F>(self, queue: mpsc::Receiver<T>, encode: F) -> (Reader<S>, Writer)
    where
        T: Send + 'static,
        F: FnMut(T) -> Option<Message> + Send + 'static,
    {
        let (sink, source) = self.ws.split();
        let shared = Arc::new(Shared {
            heard: Mutex::new(Instant::now()),
            ended: watch::channel(None).0,
            ping_now: Notify::new(),
            close: Mutex::new(None),
            closing: watch::channel(false).0,
            done: watch::channel(false).0,
            queue_ended: AtomicBool::new(false),
        });
        let task = tokio::spawn(write_loop(sink, queue, encode, shared.clone(), self.timing));
        let reader = Reader {
            source,
            shared: shared.clone(),
            timing: self.timing,
        };
        (reader, Writer { shared, task })
    }
}

/// The reading half of a link.
pub struct Reader<S> {
    source: SplitStream<WebSocketStream<S>>,
    shared: Arc<Shared>,
    timing: Timing,
}

impl<S> Reader<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    /// The next frame of the peer, or why the link ended. Returns
    /// [`Incoming::Control`] for pings and pongs, so the caller may count
    /// them as signs of life.
    pub async fn next(&mut self) -> Result<Incoming, End> {
        if let Some(end) = self.shared.ended() {
            return Err(end);
        }
        let mut ended = self.shared.ended.subscribe();
        let silence = self.timing.peer_timeout;
        let message = tokio::select! {
            message = tokio::time::timeout(silence, self.source.next()) => message,
            _ = until_ended(&mut ended) => {
                return Err(self.shared.ended().unwrap_or(End::Closed));
            }
        };
        let end = match message {
            Err(_) => End::PeerSilent(silence),
            Ok(None | Some(Ok(Message::Close(_)))) => End::PeerClosed,
            Ok(Some(Err(WsError::Capacity(err)))) => End::TooLarge(err.to_string()),
            Ok(Some(Err(err))) => End::Read(err.to_string()),
            Ok(Some(Ok(message))) => {
                self.shared.heard();
                return Ok(match message {
                    Message::Text(text) => Incoming::Text(text),
                    Message::Binary(bytes) => Incoming::Binary(bytes),
                    _ => Incoming::Control,
                });
            }
        };
        self.shared.end(end.clone());
        Err(end)
    }
}

/// The writing half of a link.
pub struct Writer {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Writer {
    /// Asks for a ping now (a takeover probe).
    pub fn ping_now(&self) {
        self.shared.ping_now.notify_one();
    }

    /// Writes what is already queued, then `frame` (if any) as the close
    /// frame, and closes the socket; each write gets at most
    /// [`Timing::close_timeout`] from now on. Returns at once; see
    /// [`Writer::finished`].
    pub fn close(&self, frame: Option<CloseFrame>) {
        lock(&self.shared.close).get_or_insert(frame);
        self.shared.closing.send_replace(true);
    }

    /// Waits until the writer has closed the socket (about
    /// [`Timing::close_timeout`] after [`Writer::close`]), and returns why
    /// the link ended ([`End::Closed`] when this side closed it and the
    /// reader has not ended it).
    pub async fn finished(mut self) -> End {
        let _ = (&mut self.task).await;
        self.shared.ended().unwrap_or(End::Closed)
    }

    /// Why the link ended, once it has.
    #[cfg(test)]
    pub fn end(&self) -> Option<End> {
        self.shared.ended()
    }

    /// Whether the writer's queue ended (all senders dropped, or a close
    /// frame queued) before anything else ended the link.
    pub fn queue_ended(&self) -> bool {
        self.shared.queue_ended.load(Ordering::Acquire)
    }

    /// Completes once the writer has let go of the socket, without
    /// consuming the handle.
    pub async fn done(&self) {
        let _ = self.shared.done.subscribe().wait_for(|done| *done).await;
    }
}

impl Drop for Writer {
    /// A writer nobody holds closes the link (without a close frame, unless
    /// one was asked for).
    fn drop(&mut self) {
        self.shared.closing.send_replace(true);
    }
}

/// A close frame saying `reason` (cut to what a frame carries).
pub fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    let mut end = reason.len().min(MAX_CLOSE_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    CloseFrame {
        code,
        reason: reason.get(..end).unwrap_or_default().into(),
    }
}

/// Completes once the owner asked to close.
async fn until_closing(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}

/// Completes once either half has ended the link.
async fn until_ended(ended: &mut watch::Receiver<Option<End>>) {
    let _ = ended.wait_for(Option::is_some).await;
}

type Sink<S> = SplitSink<WebSocketStream<S>, Message>;

async fn write_loop<S, T, F>(
    mut sink: Sink<S>,
    mut queue: mpsc::Receiver<T>,
    mut encode: F,
    shared: Arc<Shared>,
    timing: Timing,
) where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(T) -> Option<Message>,
{
    let every = timing.ping_interval;
    let mut ping = tokio::time::interval_at(Instant::now() + every, every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing = shared.closing.subscribe();
    let outcome: Result<Option<CloseFrame>, End> = loop {
        tokio::select! {
            biased;
            _ = until_closing(&mut closing) => {
                // What is already queued goes out first (a closing relay
                // stream's reset, the last answers of a connection).
                match drain_queued(&mut sink, &mut queue, &mut encode, &shared, timing).await {
                    Ok(false) => break Ok(lock(&shared.close).take().flatten()),
                    Ok(true) => break Ok(None),
                    Err(end) => break Err(end),
                }
            }
            item = queue.recv() => {
                let Some(item) = item else {
                    shared.queue_ended.store(true, Ordering::Release);
                    break Ok(None);
                };
                match write_batch(&mut sink, item, &mut queue, &mut encode, &shared, timing).await {
                    Ok(false) => {}
                    Ok(true) => break Ok(None),
                    Err(end) => break Err(end),
                }
            }
            _ = ping.tick() => {
                if let Err(end) = write(&mut sink, Message::Ping(Bytes::new()), true, &shared, timing).await {
                    break Err(end);
                }
            }
            _ = shared.ping_now.notified() => {
                if let Err(end) = write(&mut sink, Message::Ping(Bytes::new()), true, &shared, timing).await {
                    break Err(end);
                }
            }
        }
    };
    match outcome {
        // Closing from this side: the reader goes on until the peer
        // answers the close (or its deadline).
        Ok(frame) => {
            if let Some(frame) = frame {
                let close = sink.send(Message::Close(Some(frame)));
                let _ = tokio::time::timeout(timing.close_timeout, close).await;
            }
            let _ = tokio::time::timeout(timing.close_timeout, sink.close()).await;
        }
        Err(end) => {
            shared.end(end);
            let _ = tokio::time::timeout(timing.close_timeout, sink.close()).await;
        }
    }
    shared.done.send_replace(true);
}

/// Writes everything queued now; `Ok(true)` when a close frame was among
/// it.
async fn drain_queued<S, T, F>(
    sink: &mut Sink<S>,
    queue: &mut mpsc::Receiver<T>,
    encode: &mut F,
    shared: &Shared,
    timing: Timing,
) -> Result<bool, End>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(T) -> Option<Message>,
{
    while let Ok(first) = queue.try_recv() {
        if write_batch(sink, first, queue, encode, shared, timing).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes `first` and whatever else is queued (up to [`WRITE_BATCH`]),
/// then flushes once. `Ok(true)` when a close frame was among them.
async fn write_batch<S, T, F>(
    sink: &mut Sink<S>,
    first: T,
    queue: &mut mpsc::Receiver<T>,
    encode: &mut F,
    shared: &Shared,
    timing: Timing,
) -> Result<bool, End>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(T) -> Option<Message>,
{
    let mut next = Some(first);
    let mut written = 0;
    while let Some(item) = next.take() {
        if let Some(message) = encode(item) {
            let closing = message.is_close();
            if closing {
                shared.queue_ended.store(true, Ordering::Release);
            }
            write(sink, message, closing, shared, timing).await?;
            if closing {
                return Ok(true);
            }
        }
        written += 1;
        if written < WRITE_BATCH {
            next = queue.try_recv().ok();
        }
    }
    bounded(sink.flush(), shared, timing).await?;
    Ok(false)
}

/// Feeds (or, with `flush`, sends) one message within the write timeout.
async fn write<S>(
    sink: &mut Sink<S>,
    message: Message,
    flush: bool,
    shared: &Shared,
    timing: Timing,
) -> Result<(), End>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if flush {
        bounded(sink.send(message), shared, timing).await
    } else {
        bounded(sink.feed(message), shared, timing).await
    }
}

/// Runs one write: it may take as long as the peer keeps being heard from,
/// and fails once it has stalled for the write timeout in silence. Once
/// the owner asks to close, it gets [`Timing::close_timeout`] more at most.
async fn bounded<F>(write: F, shared: &Shared, timing: Timing) -> Result<(), End>
where
    F: std::future::Future<Output = Result<(), WsError>>,
{
    tokio::pin!(write);
    let mut closing = shared.closing.subscribe();
    let written = loop {
        tokio::select! {
            written = tokio::time::timeout(timing.write_timeout, &mut write) => match written {
                Ok(written) => break written,
                Err(_) if shared.heard_within(timing.write_timeout) => continue,
                Err(_) => return Err(End::WriteTimeout(timing.write_timeout)),
            },
            _ = until_closing(&mut closing) => {
                match tokio::time::timeout(timing.close_timeout, &mut write).await {
                    Ok(written) => break written,
                    Err(_) => return Err(End::Closed),
                }
            }
        }
    };
    written.map_err(|err| End::Write(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::DuplexStream;
    use tokio_tungstenite::tungstenite::protocol::Role;

    async fn pair() -> (WebSocketStream<DuplexStream>, WebSocketStream<DuplexStream>) {
        let (a, b) = tokio::io::duplex(1 << 16);
        let a = WebSocketStream::from_raw_socket(a, Role::Server, None).await;
        let b = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        (a, b)
    }

    fn text(message: String) -> Option<Message> {
        Some(Message::text(message))
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_ends_the_link_at_its_deadline() {
        let (ours, _silent_peer_never_read) = pair().await;
        let timing = Timing::with_peer_timeout(Duration::from_secs(10));
        let (_tx, rx) = mpsc::channel::<String>(4);
        let (mut reader, writer) = Link::new(ours, timing).start(rx, text);
        let start = Instant::now();
        assert_eq!(
            reader.next().await,
            Err(End::PeerSilent(Duration::from_secs(10)))
        );
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        writer.close(None);
        assert_eq!(
            writer.finished().await,
            End::PeerSilent(Duration::from_secs(10))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pings_go_out_and_are_answered() {
        let (ours, theirs) = pair().await;
        let timing = Timing::with_peer_timeout(Duration::from_secs(10));
        let (_tx, rx) = mpsc::channel::<String>(4);
        let (mut reader, _writer) = Link::new(ours, timing).start(rx, text);
        // The peer runs its own link: it reads our pings and answers them
        // (its WebSocket sends the pong), and pings us too.
        let (_peer_tx, peer_rx) = mpsc::channel::<String>(4);
        let (mut peer, _peer_writer) = Link::new(theirs, timing).start(peer_rx, text);
        let peer = tokio::spawn(async move {
            let mut pings = 0;
            while pings < 3 {
                if peer.next().await? == Incoming::Control {
                    pings += 1;
                }
            }
            Ok::<_, End>(())
        });
        // Well past the deadline: pings and pongs keep the link up.
        let until = Instant::now() + Duration::from_secs(35);
        while Instant::now() < until {
            assert_eq!(reader.next().await, Ok(Incoming::Control));
        }
        assert_eq!(peer.await.ok(), Some(Ok(())));
    }

    #[tokio::test(start_paused = true)]
    async fn queued_messages_go_out_in_order_then_a_close_frame() {
        let (ours, theirs) = pair().await;
        let (tx, rx) = mpsc::channel::<String>(200);
        let (_reader, writer) = Link::new(ours, Timing::default()).start(rx, text);
        for i in 0..150 {
            tx.send(i.to_string()).await.ok();
        }
        drop(tx);
        let (_peer_tx, peer_rx) = mpsc::channel::<String>(1);
        let (mut peer, _w) = Link::new(theirs, Timing::default()).start(peer_rx, text);
        for i in 0..150 {
            assert_eq!(peer.next().await, Ok(Incoming::Text(i.to_string().into())));
        }
        assert_eq!(peer.next().await, Err(End::PeerClosed));
        assert_eq!(writer.finished().await, End::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn close_writes_what_is_queued_then_the_frame_it_is_given() {
        let (ours, mut theirs) = pair().await;
        let (tx, rx) = mpsc::channel::<String>(4);
        // Queued before the writer runs: it sees the close and the message
        // at once, and the message still goes first.
        tx.try_send("last words".to_owned()).ok();
        let (_reader, writer) = Link::new(ours, Timing::default()).start(rx, text);
        writer.close(Some(close_frame(CloseCode::Away, &"é".repeat(100))));
        match theirs.next().await {
            Some(Ok(Message::Text(last))) => assert_eq!(last.as_str(), "last words"),
            other => panic!("{other:?}"),
        }
        let frame = match theirs.next().await {
            Some(Ok(Message::Close(Some(frame)))) => frame,
            other => panic!("{other:?}"),
        };
        assert_eq!(frame.code, CloseCode::Away);
        assert_eq!(frame.reason.len(), 122, "cut on a character boundary");
        assert_eq!(writer.finished().await, End::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_stalled_in_silence_times_out_but_not_while_the_peer_speaks() {
        // A tiny pipe the peer never reads: writes stall at once.
        let (a, b) = tokio::io::duplex(64);
        let ours = WebSocketStream::from_raw_socket(a, Role::Server, None).await;
        let mut theirs = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        let timing = Timing::with_peer_timeout(Duration::from_secs(10));
        let (tx, rx) = mpsc::channel::<String>(4);
        let (mut reader, writer) = Link::new(ours, timing).start(rx, text);
        tx.send("x".repeat(4096)).await.ok();
        // The peer speaks (without reading) for a while: the write waits.
        let speaking = tokio::spawn(async move {
            for _ in 0..4 {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if theirs.send(Message::text("alive")).await.is_err() {
                    break;
                }
            }
            theirs
        });
        for _ in 0..4 {
            assert!(matches!(reader.next().await, Ok(Incoming::Text(_))));
        }
        assert_eq!(writer.end(), None, "a speaking peer is waited for");
        let _theirs = speaking.await;
        // Then silence: the stalled write ends the link.
        let end = reader.next().await;
        assert!(
            matches!(end, Err(End::WriteTimeout(_) | End::PeerSilent(_))),
            "{end:?}"
        );
        writer.close(None);
        assert!(matches!(
            writer.finished().await,
            End::WriteTimeout(_) | End::PeerSilent(_)
        ));
    }
}
