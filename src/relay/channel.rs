//! One virtual stream after its handshake: JSON-RPC messages in, relay
//! frames out, and back. No I/O: the drivers (executor demux, harness
//! socket) feed it frames and the clock and send what it returns.
//!
//! Both dialects share the sealing, framing and receive window. The
//! reliable dialect (README, "Relay reliability") adds, per direction:
//! - `seq` is the record's Noise nonce; `segment_index`/`segment_count`
//!   place the record in its message and are checked on receipt;
//! - every frame carries `ack` (the next seq expected from the peer) and
//!   `ack_bits` (bit i: seq `ack + 1 + i` received out of order);
//! - sent records stay in a bounded replay buffer until acknowledged and are
//!   retransmitted as the same ciphertext (never re-encrypted) after
//!   [`RETRANSMIT_AFTER`], or at once when the peer's `resume` asks;
//! - records already received are dropped (and acknowledged again);
//! - `heartbeat` frames keep acknowledgements flowing on an idle stream, and
//!   a peer silent for [`PEER_SILENCE_TIMEOUT`] ends it;
//! - after a new link, only `resume` (repeated on the retransmission
//!   schedule) and acknowledgements go out until the peer is heard on it:
//!   resending the whole replay buffer into a rendezvous where the peer is
//!   not attached yet would be dropped there, and on a path that cuts
//!   connections after a few hundred kilobytes it would use up every new
//!   connection before anything useful crossed it.
//!
//! In the reference dialect nothing is retained and a record beyond the
//! receive window is fatal, as the reference has it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::frame::{Body, RelayMessageFrame};
use super::framing::{frame_message, FramingError, MessageDecoder, MessageLimits};
use super::noise::{NoiseError, Transport};
use super::reorder::{
    Inserted, ReorderError, ReorderWindow, REFERENCE_MAX_DISTANCE, REFERENCE_MAX_PENDING_BYTES,
};
use super::Dialect;

/// Bytes of ciphertext a reliable sender keeps unacknowledged at most.
pub const REPLAY_BUFFER_BYTES: usize = 4 << 20;
/// Records a reliable sender keeps unacknowledged at most.
pub const REPLAY_BUFFER_RECORDS: usize = 256;
/// How far ahead a reliable receiver buffers records.
const RELIABLE_MAX_DISTANCE: u32 = 2 * REPLAY_BUFFER_RECORDS as u32;
/// Bytes a reliable receiver buffers while a gap is open.
const RELIABLE_MAX_PENDING_BYTES: usize = REPLAY_BUFFER_BYTES + (1 << 20);
/// An unacknowledged record is sent again after this long (doubling per try).
pub const RETRANSMIT_AFTER: Duration = Duration::from_secs(1);
/// The retransmission interval stops doubling here.
const RETRANSMIT_MAX: Duration = Duration::from_secs(8);
/// Records received before an acknowledgement is sent without waiting.
const ACK_EVERY: u32 = 8;
/// How long an owed acknowledgement waits for outbound data to ride on.
const ACK_DELAY: Duration = Duration::from_millis(5);
/// A reliable stream with nothing to send says so this often.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(15);
/// A reliable stream whose peer said nothing for this long is over.
pub const PEER_SILENCE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a stream cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error(transparent)]
    Noise(#[from] NoiseError),
    #[error(transparent)]
    Framing(#[from] FramingError),
    #[error(transparent)]
    Reorder(#[from] ReorderError),
    #[error("Noise relay sequence number exhausted")]
    SequenceExhausted,
    #[error("Noise relay received invalid post-handshake frame")]
    UnexpectedHandshake,
    #[error("relay segment {index} of {count} does not continue the message")]
    SegmentOutOfOrder { index: u32, count: u32 },
    #[error("relay message ended before its last segment")]
    SegmentMismatch,
    #[error("Noise relay peer silent for {0:?}")]
    PeerSilent(Duration),
}

/// What one inbound frame produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Complete JSON-RPC messages, in order.
    pub messages: Vec<Vec<u8>>,
    /// The peer reset the stream with this reason.
    pub reset: Option<String>,
}

/// A record sent and not yet acknowledged (reliable dialect).
#[derive(Debug)]
struct Unacked {
    seq: u32,
    segment_index: u32,
    segment_count: u32,
    ciphertext: Vec<u8>,
    /// When it was last put on the wire (`None`: it must go out again now).
    sent_at: Option<Instant>,
    /// Retransmissions so far.
    tries: u32,
    /// Acknowledged selectively, waiting for the records before it.
    acked: bool,
}

/// A record queued for sealing.
#[derive(Debug)]
struct Outgoing {
    segment_index: u32,
    segment_count: u32,
    plaintext: Vec<u8>,
}

/// A received record waiting in the window.
#[derive(Debug)]
struct Incoming {
    segment_index: u32,
    segment_count: u32,
    ciphertext: Vec<u8>,
}

/// One stream's protocol state.
pub struct Channel {
    stream_id: String,
    dialect: Dialect,
    transport: Transport,
    decoder: MessageDecoder,
    /// The largest message the peer accepts.
    max_outbound: usize,
    window: ReorderWindow<Incoming>,
    /// Records not sealed yet (the window of a reliable stream may be full).
    outbox: VecDeque<Outgoing>,
    unacked: VecDeque<Unacked>,
    unacked_bytes: usize,
    /// (next index, count) of the message being received (reliable).
    segment: Option<(u32, u32)>,
    acks_owed: u32,
    ack_due: Option<Instant>,
    last_sent: Instant,
    last_heard: Instant,
    /// Set by a new link until the peer is heard (see the module doc).
    awaiting_peer: Option<AwaitingPeer>,
}

/// A reliable stream's new link on which the peer was not heard yet.
#[derive(Debug, Clone, Copy)]
struct AwaitingPeer {
    /// When `resume` goes out again.
    resume_due: Instant,
    /// `resume` frames sent on this link so far.
    resumes: u32,
}

/// The retransmission interval after `tries` retransmissions: doubling from
/// [`RETRANSMIT_AFTER`] up to [`RETRANSMIT_MAX`].
fn retransmit_interval(tries: u32) -> Duration {
    RETRANSMIT_AFTER
        .saturating_mul(1 << tries.min(3))
        .min(RETRANSMIT_MAX)
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("stream_id", &self.stream_id)
            .field("dialect", &self.dialect)
            .field("unacked", &self.unacked.len())
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// A stream whose handshake just completed, carrying messages up to `limits`.
    pub fn new(
        stream_id: &str,
        dialect: Dialect,
        transport: Transport,
        limits: MessageLimits,
        now: Instant,
    ) -> Self {
        let window = match dialect {
            Dialect::Reference => {
                ReorderWindow::new(REFERENCE_MAX_DISTANCE, REFERENCE_MAX_PENDING_BYTES)
            }
            Dialect::Reliable => {
                ReorderWindow::new(RELIABLE_MAX_DISTANCE, RELIABLE_MAX_PENDING_BYTES)
            }
        };
        Self {
            stream_id: stream_id.to_owned(),
            dialect,
            transport,
            decoder: MessageDecoder::new(limits.inbound),
            max_outbound: limits.outbound,
            window,
            outbox: VecDeque::new(),
            unacked: VecDeque::new(),
            unacked_bytes: 0,
            segment: None,
            acks_owed: 0,
            ack_due: None,
            last_sent: now,
            last_heard: now,
            awaiting_peer: None,
        }
    }

    /// The stream id.
    pub fn stream_id(&self) -> &str {
        &self.stream_id
    }

    /// The negotiated dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The largest message [`queue_message`](Self::queue_message) takes:
    /// what the peer accepts.
    pub fn max_outbound_message(&self) -> usize {
        self.max_outbound
    }

    /// Whether another message may be queued: nothing is waiting to be sealed.
    /// (Queueing stops here, so a slow peer holds the producer back.)
    pub fn is_ready_for_message(&self) -> bool {
        self.outbox.is_empty() && self.window_has_room()
    }

    /// Whether everything sent was acknowledged (always, in the reference dialect).
    pub fn is_idle(&self) -> bool {
        self.outbox.is_empty() && self.unacked.is_empty()
    }

    fn window_has_room(&self) -> bool {
        match self.dialect {
            Dialect::Reference => true,
            Dialect::Reliable => {
                self.unacked_bytes < REPLAY_BUFFER_BYTES
                    && self.unacked.len() < REPLAY_BUFFER_RECORDS
            }
        }
    }

    /// Queues one JSON-RPC message; [`poll_transmit`](Self::poll_transmit) seals it.
    pub fn queue_message(&mut self, message: &[u8]) -> Result<(), ChannelError> {
        let records = frame_message(message, self.max_outbound)?;
        let count = u32::try_from(records.len()).map_err(|_| ChannelError::SequenceExhausted)?;
        for (index, plaintext) in (0u32..).zip(records) {
            let (segment_index, segment_count) = match self.dialect {
                Dialect::Reference => (0, 1),
                Dialect::Reliable => (index, count),
            };
            self.outbox.push_back(Outgoing {
                segment_index,
                segment_count,
                plaintext,
            });
        }
        Ok(())
    }

    fn with_ack(&mut self, frame: RelayMessageFrame) -> RelayMessageFrame {
        match self.dialect {
            Dialect::Reference => frame,
            Dialect::Reliable => {
                self.acks_owed = 0;
                self.ack_due = None;
                frame.with_ack(self.window.next_seq(), self.window.buffered_bits())
            }
        }
    }

    /// Everything due now: new records the window allows, retransmissions,
    /// an owed acknowledgement, a heartbeat. Frames come out in send order.
    pub fn poll_transmit(&mut self, now: Instant) -> Result<Vec<RelayMessageFrame>, ChannelError> {
        let mut out = Vec::new();
        if let Some(waiting) = self.awaiting_peer {
            if waiting.resume_due <= now {
                let resume = RelayMessageFrame::resume(&self.stream_id, self.window.next_seq());
                let resume = self.with_ack(resume);
                out.push(resume);
                self.awaiting_peer = Some(AwaitingPeer {
                    resume_due: now + retransmit_interval(waiting.resumes),
                    resumes: waiting.resumes.saturating_add(1),
                });
            }
            if out.is_empty() && self.ack_is_due(now) {
                let frame = RelayMessageFrame::ack_only(&self.stream_id);
                out.push(self.with_ack(frame));
            }
            if !out.is_empty() {
                self.last_sent = now;
            }
            return Ok(out);
        }
        if self.dialect == Dialect::Reliable {
            self.retransmit_due(now, &mut out);
        }
        while self.window_has_room() {
            let Some(record) = self.outbox.pop_front() else {
                break;
            };
            let seq = u32::try_from(self.transport.sealer.next_nonce())
                .map_err(|_| ChannelError::SequenceExhausted)?;
            let ciphertext = self.transport.sealer.seal(&record.plaintext)?;
            // Only the reliable dialect keeps a copy, for retransmission.
            let (payload, kept) = match self.dialect {
                Dialect::Reliable => (ciphertext.clone(), Some(ciphertext)),
                Dialect::Reference => (ciphertext, None),
            };
            let frame = RelayMessageFrame::data(
                &self.stream_id,
                seq,
                record.segment_index,
                record.segment_count,
                payload,
            );
            if let Some(ciphertext) = kept {
                self.unacked_bytes += ciphertext.len();
                self.unacked.push_back(Unacked {
                    seq,
                    segment_index: record.segment_index,
                    segment_count: record.segment_count,
                    ciphertext,
                    sent_at: Some(now),
                    tries: 0,
                    acked: false,
                });
            }
            let frame = self.with_ack(frame);
            out.push(frame);
        }
        if self.dialect == Dialect::Reliable {
            if out.is_empty() && self.ack_is_due(now) {
                let frame = RelayMessageFrame::ack_only(&self.stream_id);
                out.push(self.with_ack(frame));
            }
            if out.is_empty() && now.saturating_duration_since(self.last_sent) >= HEARTBEAT_INTERVAL
            {
                let frame = RelayMessageFrame::heartbeat(&self.stream_id);
                out.push(self.with_ack(frame));
            }
        }
        if !out.is_empty() {
            self.last_sent = now;
        }
        Ok(out)
    }

    fn ack_is_due(&self, now: Instant) -> bool {
        self.acks_owed >= ACK_EVERY || self.ack_due.is_some_and(|due| due <= now)
    }

    fn retransmit_due(&mut self, now: Instant, out: &mut Vec<RelayMessageFrame>) {
        let mut resend = Vec::new();
        for record in self.unacked.iter_mut().filter(|r| !r.acked) {
            let due = match record.sent_at {
                None => true,
                Some(at) => now.saturating_duration_since(at) >= retransmit_interval(record.tries),
            };
            if due {
                if record.sent_at.is_some() {
                    record.tries = record.tries.saturating_add(1);
                }
                record.sent_at = Some(now);
                resend.push(RelayMessageFrame::data(
                    &self.stream_id,
                    record.seq,
                    record.segment_index,
                    record.segment_count,
                    record.ciphertext.clone(),
                ));
            }
        }
        for frame in resend {
            let frame = self.with_ack(frame);
            out.push(frame);
        }
    }

    /// When [`poll_transmit`](Self::poll_transmit) next has something to do
    /// on its own (a retransmission, an owed ack, a heartbeat), or when the
    /// peer's silence ends the stream.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.dialect == Dialect::Reference {
            return None;
        }
        let mut deadline = self.last_sent + HEARTBEAT_INTERVAL;
        deadline = deadline.min(self.last_heard + PEER_SILENCE_TIMEOUT);
        if let Some(due) = self.ack_due {
            deadline = deadline.min(due);
        }
        if let Some(waiting) = self.awaiting_peer {
            // Nothing else goes out until the peer is heard.
            return Some(deadline.min(waiting.resume_due));
        }
        for record in self.unacked.iter().filter(|r| !r.acked) {
            let Some(at) = record.sent_at else {
                return Some(self.last_sent);
            };
            deadline = deadline.min(at + retransmit_interval(record.tries));
        }
        Some(deadline)
    }

    /// When the peer's silence ends a reliable stream (for a stream whose
    /// link is down and so transmits nothing).
    pub fn silence_deadline(&self) -> Option<Instant> {
        (self.dialect == Dialect::Reliable).then(|| self.last_heard + PEER_SILENCE_TIMEOUT)
    }

    /// Fails a reliable stream whose peer has been silent too long.
    pub fn check_peer(&self, now: Instant) -> Result<(), ChannelError> {
        let silent = now.saturating_duration_since(self.last_heard);
        if self.dialect == Dialect::Reliable && silent >= PEER_SILENCE_TIMEOUT {
            return Err(ChannelError::PeerSilent(silent));
        }
        Ok(())
    }

    /// The frame an endpoint sends after its link came back: where it wants
    /// the peer to resume. Until the peer is heard again, only this frame
    /// (repeated) and acknowledgements go out; then everything not
    /// acknowledged is retransmitted at once.
    pub fn resume_after_reconnect(&mut self, now: Instant) -> RelayMessageFrame {
        for record in self.unacked.iter_mut() {
            record.sent_at = None;
        }
        self.awaiting_peer = Some(AwaitingPeer {
            resume_due: now + retransmit_interval(0),
            resumes: 1,
        });
        let frame = RelayMessageFrame::resume(&self.stream_id, self.window.next_seq());
        self.with_ack(frame)
    }

    /// A frame a live reliable peer answers at once with an acknowledgement
    /// (a `resume` at what this side expects next), changing nothing here.
    pub fn probe(&mut self) -> RelayMessageFrame {
        let frame = RelayMessageFrame::resume(&self.stream_id, self.window.next_seq());
        self.with_ack(frame)
    }

    /// Whether a new link waits for the peer to be heard on it.
    pub fn is_awaiting_peer(&self) -> bool {
        self.awaiting_peer.is_some()
    }

    /// Handles one inbound frame of this stream.
    pub fn receive(
        &mut self,
        frame: RelayMessageFrame,
        now: Instant,
    ) -> Result<Received, ChannelError> {
        self.last_heard = now;
        // The peer is there: what waited for it may go.
        self.awaiting_peer = None;
        let mut received = Received::default();
        let Some(body) = frame.body else {
            return Ok(received);
        };
        if self.dialect == Dialect::Reliable && !matches!(body, Body::Handshake(_)) {
            self.apply_ack(frame.ack, frame.ack_bits);
        }
        match body {
            Body::Data(data) => {
                let incoming = Incoming {
                    segment_index: data.segment_index,
                    segment_count: data.segment_count,
                    ciphertext: data.payload,
                };
                let bytes = incoming.ciphertext.len();
                match self.window.insert(data.seq, incoming, bytes) {
                    Ok(Inserted::Released(records)) => {
                        self.owe_acks(records.len(), now);
                        for (_, record) in records {
                            self.open(record, &mut received)?;
                        }
                    }
                    Ok(Inserted::Buffered) => self.owe_acks(1, now),
                    Ok(Inserted::Duplicate) => self.acks_owed = ACK_EVERY,
                    Err(err) => match self.dialect {
                        Dialect::Reference => return Err(err.into()),
                        // Dropped: the sender retransmits it.
                        Dialect::Reliable => {}
                    },
                }
            }
            Body::Resume(resume) => {
                if self.dialect == Dialect::Reliable {
                    self.apply_resume(resume.next_seq);
                }
            }
            Body::Reset(reset) => received.reset = Some(reset.reason),
            Body::Handshake(_) => return Err(ChannelError::UnexpectedHandshake),
            Body::AckFrame(_) | Body::Heartbeat(_) => {}
        }
        Ok(received)
    }

    fn owe_acks(&mut self, records: usize, now: Instant) {
        if self.dialect == Dialect::Reference {
            return;
        }
        self.acks_owed = self
            .acks_owed
            .saturating_add(u32::try_from(records).unwrap_or(u32::MAX));
        self.ack_due.get_or_insert(now + ACK_DELAY);
    }

    fn open(&mut self, record: Incoming, received: &mut Received) -> Result<(), ChannelError> {
        let plaintext = self.transport.opener.open(&record.ciphertext)?;
        let messages = self.decoder.push(&plaintext)?;
        if self.dialect == Dialect::Reliable {
            let (index, count) = (record.segment_index, record.segment_count);
            let expected = self.segment.map_or(0, |(next, _)| next);
            let same_message = self.segment.is_none_or(|(_, c)| c == count);
            if index != expected || !same_message {
                return Err(ChannelError::SegmentOutOfOrder { index, count });
            }
            let last = index + 1 == count;
            self.segment = if last { None } else { Some((index + 1, count)) };
            if last && self.decoder.is_mid_message() {
                return Err(ChannelError::SegmentMismatch);
            }
        }
        received.messages.extend(messages);
        Ok(())
    }

    /// Drops every record the peer acknowledged.
    fn apply_ack(&mut self, ack: u32, ack_bits: u32) {
        for record in self.unacked.iter_mut() {
            let acked_by_bits = record
                .seq
                .checked_sub(ack)
                .and_then(|d| d.checked_sub(1))
                .is_some_and(|bit| bit < 32 && ack_bits & (1 << bit) != 0);
            if record.seq < ack || acked_by_bits {
                record.acked = true;
            }
        }
        while self.unacked.front().is_some_and(|r| r.acked) {
            if let Some(record) = self.unacked.pop_front() {
                self.unacked_bytes -= record.ciphertext.len();
            }
        }
    }

    /// The peer lost its link and wants everything from `next_seq` on.
    fn apply_resume(&mut self, next_seq: u32) {
        self.apply_ack(next_seq, 0);
        for record in self.unacked.iter_mut().filter(|r| !r.acked) {
            record.sent_at = None;
        }
        // Tell the peer at once what this side has.
        self.acks_owed = ACK_EVERY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::frame::RelayData;
    use crate::relay::noise::{prologue, Initiator, NoiseIdentity, Responder};

    fn pair(dialect: Dialect) -> (Channel, Channel) {
        let harness = NoiseIdentity::generate().unwrap();
        let executor = NoiseIdentity::generate().unwrap();
        let p = prologue("env", "reg", "s1");
        let (initiator, msg1) =
            Initiator::start(&harness, &executor.public_key(), &p, b"auth").unwrap();
        let (msg2, exec) = Responder::read_request(&executor, &p, &msg1)
            .unwrap()
            .finish()
            .unwrap();
        let harn = initiator.finish(&msg2).unwrap();
        let now = Instant::now();
        (
            Channel::new("s1", dialect, harn, MessageLimits::REFERENCE, now),
            Channel::new("s1", dialect, exec, MessageLimits::REFERENCE, now),
        )
    }

    fn deliver(to: &mut Channel, frames: Vec<RelayMessageFrame>, now: Instant) -> Vec<Vec<u8>> {
        let mut messages = Vec::new();
        for frame in frames {
            messages.extend(to.receive(frame, now).unwrap().messages);
        }
        messages
    }

    #[test]
    fn reference_dialect_sends_single_segments_from_seq_zero_without_acks() {
        let (mut a, mut b) = pair(Dialect::Reference);
        let now = Instant::now();
        let big = vec![b'x'; 150_000];
        a.queue_message(b"{\"id\":1}").unwrap();
        a.queue_message(&big).unwrap();
        let frames = a.poll_transmit(now).unwrap();
        assert_eq!(frames.len(), 4);
        for (seq, frame) in (0u32..).zip(&frames) {
            assert_eq!((frame.ack, frame.ack_bits), (0, 0));
            match &frame.body {
                Some(Body::Data(RelayData {
                    seq: s,
                    segment_index: 0,
                    segment_count: 1,
                    ..
                })) => assert_eq!(*s, seq),
                other => panic!("{other:?}"),
            }
            frame.validate(Dialect::Reference).unwrap();
        }
        assert!(a.is_idle(), "the reference dialect retains nothing");
        let got = deliver(&mut b, frames, now);
        assert_eq!(got, vec![b"{\"id\":1}".to_vec(), big]);
        assert!(b.poll_transmit(now).unwrap().is_empty(), "no acks");
        assert_eq!(a.next_deadline(), None);
    }

    #[test]
    fn reference_dialect_fails_beyond_the_reorder_window() {
        let (mut a, mut b) = pair(Dialect::Reference);
        let now = Instant::now();
        for _ in 0..70 {
            a.queue_message(b"{}").unwrap();
        }
        let frames = a.poll_transmit(now).unwrap();
        let last = frames.last().cloned().unwrap();
        assert!(matches!(
            b.receive(last, now),
            Err(ChannelError::Reorder(ReorderError::Window))
        ));
    }

    #[test]
    fn reliable_dialect_segments_acks_and_drops_acknowledged_records() {
        let (mut a, mut b) = pair(Dialect::Reliable);
        let now = Instant::now();
        let big = vec![b'y'; 150_000];
        a.queue_message(&big).unwrap();
        let frames = a.poll_transmit(now).unwrap();
        let segments: Vec<(u32, u32)> = frames
            .iter()
            .map(|f| match &f.body {
                Some(Body::Data(d)) => (d.segment_index, d.segment_count),
                _ => (99, 99),
            })
            .collect();
        assert_eq!(segments, vec![(0, 3), (1, 3), (2, 3)]);
        assert!(!a.is_idle());
        assert_eq!(deliver(&mut b, frames, now), vec![big]);
        // Three records owed: the ack waits for the delay, then goes alone.
        assert!(b.poll_transmit(now).unwrap().is_empty());
        let acks = b.poll_transmit(now + ACK_DELAY).unwrap();
        assert_eq!(acks.len(), 1);
        assert_eq!(
            (acks[0].kind(), acks[0].ack, acks[0].ack_bits),
            ("ack_frame", 3, 0)
        );
        deliver(&mut a, acks, now);
        assert!(a.is_idle());
    }

    #[test]
    fn lost_records_are_retransmitted_as_the_same_ciphertext() {
        let (mut a, mut b) = pair(Dialect::Reliable);
        let t0 = Instant::now();
        for i in 0..3 {
            a.queue_message(format!("{{\"id\":{i}}}").as_bytes())
                .unwrap();
        }
        let frames = a.poll_transmit(t0).unwrap();
        let lost = frames[1].clone();
        // seq 1 is lost; 0 and 2 arrive.
        let got = deliver(&mut b, vec![frames[0].clone(), frames[2].clone()], t0);
        assert_eq!(got, vec![b"{\"id\":0}".to_vec()]);
        let acks = b.poll_transmit(t0 + ACK_DELAY).unwrap();
        assert_eq!(
            (acks[0].ack, acks[0].ack_bits),
            (1, 0b1),
            "seq 2 selectively acked"
        );
        deliver(&mut a, acks, t0);
        assert!(a
            .poll_transmit(t0 + Duration::from_millis(10))
            .unwrap()
            .is_empty());
        let resent = a.poll_transmit(t0 + RETRANSMIT_AFTER).unwrap();
        assert_eq!(resent.len(), 1, "only the lost record goes again");
        let (Some(Body::Data(old)), Some(Body::Data(new))) = (&lost.body, &resent[0].body) else {
            panic!("not data")
        };
        assert_eq!(old.payload, new.payload, "never re-encrypted");
        assert_eq!(old.seq, new.seq);
        let got = deliver(&mut b, resent, t0 + RETRANSMIT_AFTER);
        assert_eq!(got, vec![b"{\"id\":1}".to_vec(), b"{\"id\":2}".to_vec()]);
    }

    #[test]
    fn duplicates_are_suppressed_and_acknowledged_again() {
        let (mut a, mut b) = pair(Dialect::Reliable);
        let now = Instant::now();
        a.queue_message(b"{\"once\":true}").unwrap();
        let frames = a.poll_transmit(now).unwrap();
        assert_eq!(deliver(&mut b, frames.clone(), now).len(), 1);
        assert!(deliver(&mut b, frames, now).is_empty(), "duplicate dropped");
        let acks = b.poll_transmit(now).unwrap();
        assert_eq!(acks.len(), 1, "a duplicate is acknowledged at once");
    }

    #[test]
    fn resume_retransmits_everything_from_next_seq_at_once() {
        let (mut a, mut b) = pair(Dialect::Reliable);
        let now = Instant::now();
        for _ in 0..4 {
            a.queue_message(b"{}").unwrap();
        }
        let frames = a.poll_transmit(now).unwrap();
        deliver(&mut b, frames[..2].to_vec(), now);
        // b's link dropped; it comes back and asks for seq 2 on.
        let resume = b.resume_after_reconnect(now);
        assert_eq!(resume.kind(), "resume");
        assert_eq!(resume.ack, 2);
        deliver(&mut a, vec![resume], now);
        let resent = a.poll_transmit(now).unwrap();
        let seqs: Vec<u32> = resent
            .iter()
            .filter_map(|f| match &f.body {
                Some(Body::Data(d)) => Some(d.seq),
                _ => None,
            })
            .collect();
        assert_eq!(seqs, vec![2, 3]);
        assert_eq!(deliver(&mut b, resent, now).len(), 2);
    }

    #[test]
    fn a_new_link_carries_only_resume_until_the_peer_is_heard() {
        let (mut a, mut b) = pair(Dialect::Reliable);
        let t0 = Instant::now();
        for _ in 0..4 {
            a.queue_message(&vec![b'r'; 50_000]).unwrap();
        }
        let sent = a.poll_transmit(t0).unwrap();
        assert_eq!(sent.len(), 4);
        // a's link drops with everything unacknowledged; a new one comes.
        let resume = a.resume_after_reconnect(t0);
        assert_eq!(resume.kind(), "resume");
        assert!(a.is_awaiting_peer());
        a.queue_message(b"{\"new\":1}").unwrap();
        assert!(
            a.poll_transmit(t0).unwrap().is_empty(),
            "no retransmission and no new data before the peer is heard"
        );
        // Nobody answers: resume goes again on the retransmission schedule.
        assert_eq!(a.next_deadline(), Some(t0 + RETRANSMIT_AFTER));
        let again = a.poll_transmit(t0 + RETRANSMIT_AFTER).unwrap();
        let kinds: Vec<&str> = again.iter().map(|f| f.kind()).collect();
        assert_eq!(kinds, vec!["resume"]);
        let later = t0 + RETRANSMIT_AFTER + Duration::from_millis(10);
        assert!(a.poll_transmit(later).unwrap().is_empty());
        assert_eq!(
            a.next_deadline(),
            Some(t0 + RETRANSMIT_AFTER + 2 * RETRANSMIT_AFTER)
        );
        // The peer's resume arrives: everything goes, the new message too.
        let peer = b.resume_after_reconnect(later);
        let got = deliver(&mut a, vec![peer], later);
        assert!(got.is_empty());
        assert!(!a.is_awaiting_peer());
        let frames = a.poll_transmit(later).unwrap();
        let data = frames.iter().filter(|f| f.kind() == "data").count();
        assert_eq!(data, 5, "four retransmissions and the new message");
        assert_eq!(deliver(&mut b, frames, later).len(), 5);
    }

    #[test]
    fn the_replay_buffer_bounds_what_is_in_flight() {
        let (mut a, _) = pair(Dialect::Reliable);
        let now = Instant::now();
        let big = vec![b'z'; 8 << 20];
        a.queue_message(&big).unwrap();
        let frames = a.poll_transmit(now).unwrap();
        let bytes: usize = frames
            .iter()
            .map(|f| match &f.body {
                Some(Body::Data(d)) => d.payload.len(),
                _ => 0,
            })
            .sum();
        assert!(bytes <= REPLAY_BUFFER_BYTES + 61_456, "{bytes}");
        assert!(!a.is_ready_for_message());
    }

    #[test]
    fn heartbeats_flow_and_silence_ends_a_reliable_stream() {
        let (mut a, _) = pair(Dialect::Reliable);
        let t0 = Instant::now();
        assert!(a.poll_transmit(t0).unwrap().is_empty());
        let beat = a.poll_transmit(t0 + HEARTBEAT_INTERVAL).unwrap();
        assert_eq!(beat.len(), 1);
        assert_eq!(beat[0].kind(), "heartbeat");
        assert!(a.check_peer(t0 + HEARTBEAT_INTERVAL).is_ok());
        assert!(matches!(
            a.check_peer(t0 + PEER_SILENCE_TIMEOUT),
            Err(ChannelError::PeerSilent(_))
        ));
    }

    #[test]
    fn segments_out_of_order_are_refused() {
        let (mut a, mut b) = pair(Dialect::Reliable);
        let now = Instant::now();
        a.queue_message(&vec![b'q'; 100_000]).unwrap();
        let mut frames = a.poll_transmit(now).unwrap();
        if let Some(Body::Data(d)) = &mut frames[0].body {
            d.segment_index = 1;
        }
        assert!(matches!(
            b.receive(frames.remove(0), now),
            Err(ChannelError::SegmentOutOfOrder { .. })
        ));
    }

    #[test]
    fn reset_and_post_handshake_frames_are_reported() {
        let (_, mut b) = pair(Dialect::Reference);
        let now = Instant::now();
        let got = b
            .receive(RelayMessageFrame::reset("s1", "gone"), now)
            .unwrap();
        assert_eq!(got.reset.as_deref(), Some("gone"));
        let err = b
            .receive(RelayMessageFrame::handshake("s1", vec![1], 0), now)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Noise relay received invalid post-handshake frame"
        );
    }
}
