//! Property tests (fuzzing with shrinking) of the relay's parsers: the frame
//! decoder, the record layer (message framing) and one stream's channel,
//! fed arbitrary bytes and arbitrary loss, duplication and reordering.

use std::time::{Duration, Instant};

use codexbox::relay::channel::{Channel, RETRANSMIT_AFTER};
use codexbox::relay::frame::{FrameHeader, RelayMessageFrame};
use codexbox::relay::framing::{
    frame_message, MessageDecoder, MessageLimits, MAX_RECORD_PLAINTEXT, REFERENCE_MAX_MESSAGE_BYTES,
};
use codexbox::relay::noise::{prologue, Initiator, NoiseIdentity, Responder};
use codexbox::relay::Dialect;
use proptest::prelude::*;

fn channels(dialect: Dialect) -> (Channel, Channel) {
    let harness = NoiseIdentity::generate().expect("identity");
    let executor = NoiseIdentity::generate().expect("identity");
    let p = prologue("env", "reg", "stream");
    let (initiator, msg1) =
        Initiator::start(&harness, &executor.public_key(), &p, b"auth").expect("msg1");
    let (msg2, exec) = Responder::read_request(&executor, &p, &msg1)
        .expect("read msg1")
        .finish()
        .expect("msg2");
    let harn = initiator.finish(&msg2).expect("finish");
    let now = Instant::now();
    (
        Channel::new("stream", dialect, harn, MessageLimits::REFERENCE, now),
        Channel::new("stream", dialect, exec, MessageLimits::REFERENCE, now),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn frame_decoder_never_panics_and_reencodes_what_it_accepts(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for dialect in [Dialect::Reference, Dialect::Reliable] {
            if let Ok(frame) = RelayMessageFrame::parse(&bytes, dialect) {
                let again = RelayMessageFrame::parse(&frame.to_bytes(), dialect);
                prop_assert_eq!(again.ok(), Some(frame.clone()));
                // The rendezvous's header scan agrees with the full decoder.
                let header = FrameHeader::peek(&bytes).expect("a valid frame has a header");
                prop_assert_eq!(header.stream_id, frame.stream_id);
                prop_assert_eq!(header.ack_bits, frame.ack_bits);
            }
        }
        let _ = FrameHeader::peek(&bytes);
    }

    #[test]
    fn frames_round_trip(
        stream in "[a-z0-9-]{1,40}",
        ack in any::<u32>(),
        bits in any::<u32>(),
        seq in any::<u32>(),
        count in 1u32..2000,
        payload in proptest::collection::vec(any::<u8>(), 1..300),
        kind in 0u8..6,
    ) {
        let frame = match kind {
            0 => RelayMessageFrame::data(&stream, seq, count - 1, count, payload),
            1 => RelayMessageFrame::ack_only(&stream),
            2 => RelayMessageFrame::resume(&stream, seq),
            3 => RelayMessageFrame::reset(&stream, "reason"),
            4 => RelayMessageFrame::heartbeat(&stream),
            _ => RelayMessageFrame::handshake(&stream, payload, bits),
        }
        .with_ack(ack, bits);
        let parsed = RelayMessageFrame::parse(&frame.to_bytes(), Dialect::Reliable);
        prop_assert_eq!(parsed.ok(), Some(frame));
    }

    #[test]
    fn record_layer_reassembles_any_split(
        messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..5000), 1..8),
        cuts in proptest::collection::vec(1usize..MAX_RECORD_PLAINTEXT, 1..40),
    ) {
        let mut stream = Vec::new();
        for message in &messages {
            for record in frame_message(message, REFERENCE_MAX_MESSAGE_BYTES).expect("frame") {
                stream.extend(record);
            }
        }
        let mut decoder = MessageDecoder::new(REFERENCE_MAX_MESSAGE_BYTES);
        let mut out = Vec::new();
        let mut rest = &stream[..];
        let mut cut = cuts.iter().cycle();
        while !rest.is_empty() {
            let n = (*cut.next().unwrap_or(&1)).min(rest.len());
            let (record, tail) = rest.split_at(n);
            out.extend(decoder.push(record).expect("valid stream"));
            rest = tail;
        }
        prop_assert_eq!(out, messages);
        prop_assert!(!decoder.is_mid_message());
    }

    #[test]
    fn record_layer_never_panics_on_garbage(records in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..20)) {
        let mut decoder = MessageDecoder::new(REFERENCE_MAX_MESSAGE_BYTES);
        for record in records {
            if decoder.push(&record).is_err() {
                break;
            }
        }
    }

    #[test]
    fn channel_survives_garbage_frames(
        frames in proptest::collection::vec((any::<u32>(), any::<u32>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..200)), 1..20),
    ) {
        for dialect in [Dialect::Reference, Dialect::Reliable] {
            let (_, mut receiver) = channels(dialect);
            let now = Instant::now();
            for (seq, index, count, payload) in &frames {
                let frame = RelayMessageFrame::data("stream", *seq % 8, *index, *count, payload.clone());
                if frame.validate(dialect).is_err() {
                    continue;
                }
                if receiver.receive(frame, now).is_err() {
                    break;
                }
            }
        }
    }

    #[test]
    fn reliable_channel_delivers_exactly_once_in_order_despite_loss_duplication_and_reordering(
        sizes in proptest::collection::vec(1usize..150_000, 1..6),
        fate in proptest::collection::vec(0u8..10, 64),
    ) {
        let (mut sender, mut receiver) = channels(Dialect::Reliable);
        let messages: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| ((i * 31 + j) % 251) as u8).collect())
            .collect();
        for message in &messages {
            sender.queue_message(message).expect("queue");
        }
        let mut now = Instant::now();
        let mut fates = fate.iter().cycle();
        let mut delivered = Vec::new();
        let mut held: Option<RelayMessageFrame> = None;
        for _round in 0..200 {
            for frame in sender.poll_transmit(now).expect("transmit") {
                match fates.next().copied().unwrap_or(0) {
                    // lost
                    0 | 1 => {}
                    // duplicated
                    2 => {
                        delivered.extend(receiver.receive(frame.clone(), now).expect("dup").messages);
                        delivered.extend(receiver.receive(frame, now).expect("dup").messages);
                    }
                    // held back and delivered after the next one
                    3 => {
                        if let Some(old) = held.replace(frame) {
                            delivered.extend(receiver.receive(old, now).expect("late").messages);
                        }
                    }
                    _ => delivered.extend(receiver.receive(frame, now).expect("frame").messages),
                }
            }
            if let Some(old) = held.take() {
                delivered.extend(receiver.receive(old, now).expect("late").messages);
            }
            now += Duration::from_millis(10);
            for ack in receiver.poll_transmit(now).expect("acks") {
                // Acknowledgements are lost sometimes too.
                if fates.next().copied().unwrap_or(0) != 0 {
                    sender.receive(ack, now).expect("ack");
                }
            }
            if sender.is_idle() {
                break;
            }
            now += RETRANSMIT_AFTER;
        }
        prop_assert!(sender.is_idle(), "everything acknowledged");
        prop_assert_eq!(delivered, messages);
    }
}
