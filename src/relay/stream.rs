//! The task that runs one virtual stream, on the executor and on the
//! harness alike: frames of this stream come in, whole JSON-RPC messages go
//! to the application, the application's messages go out as frames over the
//! current physical link, and the [`Channel`]'s timers run.
//!
//! It never blocks on the application: decoded messages wait in a small
//! queue and, while it is full, frames are no longer read (the demux then
//! refuses or drops them, as the dialect says). The physical link is a
//! `watch` of the current outbox with a generation: a reference-dialect
//! stream ends with its link; a reliable one pauses while there is none and
//! resumes (`resume` frame, retransmission) on the next.
//!
//! A message larger than the peer accepts never ends the stream: it is
//! answered or replaced by an error for its id ([`Oversize`]), and
//! everything else goes on.
//!
//! An executor's stream also reports to its connection's `Liveness`
//! (`crate::link::liveness`):
//! every frame from the harness is heard, a takeover probe sends a `resume`
//! (a live reliable peer answers it with an acknowledgement at once), and a
//! connection the server closes resets the stream.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::channel::{Channel, ChannelError};
use super::frame::RelayMessageFrame;
use super::{Dialect, RESET_CONNECTION_CLOSED};
use crate::link::liveness::Liveness;
use crate::protocol::envelope;

/// Decoded messages waiting for the application before frames stop being read.
const MAX_UNDELIVERED: usize = 64;

/// Where a stream's frames go: encoded frames for the physical writer.
pub type Outbox = mpsc::Sender<Vec<u8>>;

/// The physical link of the moment: its generation and outbox (`None`: down).
pub type LinkState = Option<(u64, Outbox)>;

/// Why a stream ended.
#[derive(Debug, thiserror::Error)]
pub enum StreamEnd {
    #[error("the peer reset the stream: {0}")]
    PeerReset(String),
    #[error(transparent)]
    Protocol(#[from] ChannelError),
    #[error("the application closed the stream")]
    ApplicationClosed,
    #[error("the relay connection was lost")]
    LinkLost,
    #[error("the server closed the connection: {0}")]
    Closed(String),
}

impl StreamEnd {
    /// Whether this side broke the protocol (worth a reset to the peer).
    pub fn is_protocol_error(&self) -> bool {
        matches!(self, Self::Protocol(_))
    }
}

/// What a stream does with an application message larger than its peer
/// accepts (its [`Channel::max_outbound_message`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oversize {
    /// The harness's: the request is answered to the application with
    /// `-32600` for its own id, as an exec-server answers what exceeds its cap.
    AnswerRequest,
    /// The executor's: the peer gets an error for the response's id instead
    /// (a notification too large is dropped).
    ReplaceResponse,
}

/// How the errors about oversize messages begin.
const OVERSIZE_CONTEXT: &str = "the relay stream cannot carry this message";

/// The channels a stream task works with.
pub struct StreamIo<T> {
    /// Frames of this stream, from the physical reader.
    pub frames: mpsc::Receiver<RelayMessageFrame>,
    /// The current physical link.
    pub link: watch::Receiver<LinkState>,
    /// Decoded JSON-RPC messages for the application.
    pub to_application: mpsc::Sender<Vec<u8>>,
    /// The application's outbound JSON-RPC messages.
    pub from_application: mpsc::Receiver<T>,
    /// Reset reason sent to the peer when the application closes the stream
    /// (`None`: close silently).
    pub close_reason: Option<&'static str>,
    /// The liveness of the connection this stream carries (executor side).
    pub liveness: Option<Arc<Liveness>>,
    /// What becomes of a message too large for the peer.
    pub oversize: Oversize,
}

async fn probe_requested(liveness: &Option<Arc<Liveness>>) {
    match liveness {
        Some(liveness) => liveness.probe_requested().await,
        None => std::future::pending().await,
    }
}

async fn killed(liveness: &Option<Arc<Liveness>>) -> String {
    match liveness {
        Some(liveness) => liveness.killed().await,
        None => std::future::pending().await,
    }
}

/// Sends frames over the link; a closed outbox means the link is down.
async fn send_all(outbox: &Outbox, frames: Vec<RelayMessageFrame>) -> bool {
    for frame in frames {
        if outbox.send(frame.to_bytes()).await.is_err() {
            return false;
        }
    }
    true
}

/// Runs the stream until it ends. `generation` is the link it was opened on.
pub async fn drive<T: AsRef<[u8]>>(
    mut channel: Channel,
    mut io: StreamIo<T>,
    generation: u64,
) -> StreamEnd {
    let mut undelivered: VecDeque<Vec<u8>> = VecDeque::new();
    let mut link: LinkState = io.link.borrow_and_update().clone();
    if link.as_ref().map(|(g, _)| *g) != Some(generation) {
        return StreamEnd::LinkLost;
    }
    loop {
        let now = Instant::now();
        if let Some((_, outbox)) = &link {
            match channel.poll_transmit(now) {
                Ok(frames) => {
                    if !send_all(outbox, frames).await {
                        if channel.dialect() == Dialect::Reference {
                            return StreamEnd::LinkLost;
                        }
                        link = None;
                    }
                }
                Err(err) => return err.into(),
            }
        }
        if let Err(err) = channel.check_peer(now) {
            return err.into();
        }
        let link_up = link.is_some();
        let probeable = link_up && channel.dialect() == Dialect::Reliable;
        let deadline = if link_up {
            channel.next_deadline()
        } else {
            channel.silence_deadline()
        }
        .map(tokio::time::Instant::from_std);
        tokio::select! {
            frame = io.frames.recv(), if undelivered.len() < MAX_UNDELIVERED => {
                // The demux dropped the stream.
                let Some(frame) = frame else { return StreamEnd::LinkLost };
                if let Some(liveness) = &io.liveness {
                    liveness.heard();
                }
                match channel.receive(frame, Instant::now()) {
                    Ok(received) => {
                        undelivered.extend(received.messages);
                        if let Some(reason) = received.reset {
                            return StreamEnd::PeerReset(reason);
                        }
                    }
                    Err(err) => return err.into(),
                }
            }
            permit = io.to_application.reserve(), if !undelivered.is_empty() => {
                let Ok(permit) = permit else { return StreamEnd::ApplicationClosed };
                if let Some(message) = undelivered.pop_front() {
                    permit.send(message);
                }
            }
            message = io.from_application.recv(), if link_up && channel.is_ready_for_message() => {
                let Some(message) = message else {
                    if let (Some(reason), Some((_, outbox))) = (io.close_reason, &link) {
                        let reset = RelayMessageFrame::reset(channel.stream_id(), reason);
                        send_all(outbox, vec![reset]).await;
                    }
                    return StreamEnd::ApplicationClosed;
                };
                let message = message.as_ref();
                let limit = channel.max_outbound_message();
                if message.len() > limit {
                    tracing::warn!(
                        stream = %channel.stream_id(),
                        bytes = message.len(),
                        limit,
                        "a message is larger than the relay peer accepts: answered with an error"
                    );
                    match io.oversize {
                        Oversize::AnswerRequest => undelivered.push_back(
                            envelope::refuse_oversize_request(message, limit, OVERSIZE_CONTEXT)
                                .into_bytes(),
                        ),
                        Oversize::ReplaceResponse => {
                            let replaced =
                                envelope::replace_oversize_response(message, limit, OVERSIZE_CONTEXT);
                            if let Some(error) = replaced {
                                if let Err(err) = channel.queue_message(error.as_bytes()) {
                                    return err.into();
                                }
                            }
                        }
                    }
                    continue;
                }
                if let Err(err) = channel.queue_message(message) {
                    return err.into();
                }
            }
            _ = probe_requested(&io.liveness), if probeable => {
                if let Some((_, outbox)) = &link {
                    if !send_all(outbox, vec![channel.probe()]).await {
                        link = None;
                    }
                }
            }
            reason = killed(&io.liveness) => {
                if let Some((_, outbox)) = &link {
                    let reset = RelayMessageFrame::reset(channel.stream_id(), RESET_CONNECTION_CLOSED);
                    send_all(outbox, vec![reset]).await;
                }
                return StreamEnd::Closed(reason);
            }
            changed = io.link.changed() => {
                if changed.is_err() {
                    return StreamEnd::LinkLost;
                }
                let next = io.link.borrow_and_update().clone();
                if channel.dialect() == Dialect::Reference {
                    if next.as_ref().map(|(g, _)| *g) != Some(generation) {
                        return StreamEnd::LinkLost;
                    }
                } else if let Some((_, outbox)) = &next {
                    let resume = channel.resume_after_reconnect(Instant::now());
                    if !send_all(outbox, vec![resume]).await {
                        link = None;
                        continue;
                    }
                }
                link = next;
            }
            _ = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {}
        }
    }
}
