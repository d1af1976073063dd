//! `RelayMessageFrame`: the protobuf frame every relay WebSocket message
//! carries (`resources/relay/codex.exec_server.relay.v1.proto`), its
//! constructors and its validation.
//!
//! The structs are derived with `prost` by hand from the `.proto` file (no
//! build script); `tests::rust_types_match_the_proto_file` keeps the two in
//! step. Encoding is canonical prost output: fields in tag order, zero
//! scalars omitted, so a frame is byte-identical to the reference's. What the
//! fields mean in each dialect is decided in [`super::channel`]; this module
//! only checks shape.

use prost::Message as _;

use super::Dialect;

/// The only frame version there is.
pub const FRAME_VERSION: u32 = 1;

/// Feature bit carried in `ack_bits` of a handshake frame: the sender speaks
/// the reliable dialect (README, "Relay reliability").
pub const FEATURE_RELIABLE: u32 = 1;

/// One relay WebSocket message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RelayMessageFrame {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(string, tag = "2")]
    pub stream_id: String,
    #[prost(uint32, tag = "3")]
    pub ack: u32,
    #[prost(uint32, tag = "4")]
    pub ack_bits: u32,
    #[prost(oneof = "Body", tags = "5, 6, 7, 8, 9, 10")]
    pub body: Option<Body>,
}

/// The body of a frame.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Body {
    #[prost(message, tag = "5")]
    Data(RelayData),
    #[prost(message, tag = "6")]
    AckFrame(RelayAck),
    #[prost(message, tag = "7")]
    Resume(RelayResume),
    #[prost(message, tag = "8")]
    Reset(RelayReset),
    #[prost(message, tag = "9")]
    Heartbeat(RelayHeartbeat),
    #[prost(message, tag = "10")]
    Handshake(RelayHandshake),
}

/// One encrypted record (or, in the legacy plaintext dialect, one message).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RelayData {
    #[prost(uint32, tag = "1")]
    pub seq: u32,
    #[prost(uint32, tag = "2")]
    pub segment_index: u32,
    #[prost(uint32, tag = "3")]
    pub segment_count: u32,
    #[prost(bytes = "vec", tag = "4")]
    pub payload: Vec<u8>,
}

/// An acknowledgement with nothing else to say (the frame's `ack` fields).
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct RelayAck {}

/// "Send me records from `next_seq` on" (also claims a stream at the rendezvous).
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct RelayResume {
    #[prost(uint32, tag = "1")]
    pub next_seq: u32,
}

/// The stream is gone.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RelayReset {
    #[prost(string, tag = "1")]
    pub reason: String,
}

/// Keeps an idle stream's acknowledgements flowing.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct RelayHeartbeat {}

/// A Noise handshake message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RelayHandshake {
    #[prost(bytes = "vec", tag = "1")]
    pub payload: Vec<u8>,
}

/// Why a frame was refused (messages as the reference words them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("invalid relay message frame: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("unsupported relay message frame version {0}")]
    UnsupportedVersion(u32),
    #[error("relay message frame is missing stream_id")]
    MissingStreamId,
    #[error("relay data message frame is missing required fields")]
    DataMissingFields,
    #[error("relay reset message frame is missing reason")]
    ResetMissingReason,
    #[error("relay handshake message frame is missing payload")]
    HandshakeMissingPayload,
    #[error("relay message frame is missing body")]
    MissingBody,
}

impl RelayMessageFrame {
    fn with_body(stream_id: &str, body: Body) -> Self {
        Self {
            version: FRAME_VERSION,
            stream_id: stream_id.to_owned(),
            ack: 0,
            ack_bits: 0,
            body: Some(body),
        }
    }

    /// `resume{next_seq}`.
    pub fn resume(stream_id: &str, next_seq: u32) -> Self {
        Self::with_body(stream_id, Body::Resume(RelayResume { next_seq }))
    }

    /// `handshake{payload}` with the given feature bits in `ack_bits`.
    pub fn handshake(stream_id: &str, payload: Vec<u8>, features: u32) -> Self {
        let mut frame = Self::with_body(stream_id, Body::Handshake(RelayHandshake { payload }));
        frame.ack_bits = features;
        frame
    }

    /// `data{seq, segment_index, segment_count, payload}`.
    pub fn data(
        stream_id: &str,
        seq: u32,
        segment_index: u32,
        segment_count: u32,
        payload: Vec<u8>,
    ) -> Self {
        Self::with_body(
            stream_id,
            Body::Data(RelayData {
                seq,
                segment_index,
                segment_count,
                payload,
            }),
        )
    }

    /// `reset{reason}`.
    pub fn reset(stream_id: &str, reason: &str) -> Self {
        Self::with_body(
            stream_id,
            Body::Reset(RelayReset {
                reason: reason.to_owned(),
            }),
        )
    }

    /// `ack_frame{}` (the acknowledgement itself goes in `ack`/`ack_bits`).
    pub fn ack_only(stream_id: &str) -> Self {
        Self::with_body(stream_id, Body::AckFrame(RelayAck {}))
    }

    /// `heartbeat{}`.
    pub fn heartbeat(stream_id: &str) -> Self {
        Self::with_body(stream_id, Body::Heartbeat(RelayHeartbeat {}))
    }

    /// Sets the acknowledgement fields.
    pub fn with_ack(mut self, ack: u32, ack_bits: u32) -> Self {
        self.ack = ack;
        self.ack_bits = ack_bits;
        self
    }

    /// The protobuf encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Decodes one frame without validating it.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, FrameError> {
        Ok(Self::decode(bytes)?)
    }

    /// Decodes and validates one frame.
    pub fn parse(bytes: &[u8], dialect: Dialect) -> Result<Self, FrameError> {
        let frame = Self::from_bytes(bytes)?;
        frame.validate(dialect)?;
        Ok(frame)
    }

    /// The reference's checks, in its order. In the reliable dialect a data
    /// frame may be one segment of several.
    pub fn validate(&self, dialect: Dialect) -> Result<(), FrameError> {
        if self.version != FRAME_VERSION {
            return Err(FrameError::UnsupportedVersion(self.version));
        }
        if self.stream_id.trim().is_empty() {
            return Err(FrameError::MissingStreamId);
        }
        match &self.body {
            Some(Body::Data(data)) => {
                let segments_ok = match dialect {
                    Dialect::Reference => data.segment_index == 0 && data.segment_count == 1,
                    Dialect::Reliable => data.segment_index < data.segment_count,
                };
                if !segments_ok || data.payload.is_empty() {
                    return Err(FrameError::DataMissingFields);
                }
            }
            Some(Body::Reset(reset)) if reset.reason.is_empty() => {
                return Err(FrameError::ResetMissingReason)
            }
            Some(Body::Handshake(handshake)) if handshake.payload.is_empty() => {
                return Err(FrameError::HandshakeMissingPayload)
            }
            Some(_) => {}
            None => return Err(FrameError::MissingBody),
        }
        Ok(())
    }

    /// The body's name, for logs.
    pub fn kind(&self) -> &'static str {
        match &self.body {
            Some(Body::Data(_)) => "data",
            Some(Body::AckFrame(_)) => "ack_frame",
            Some(Body::Resume(_)) => "resume",
            Some(Body::Reset(_)) => "reset",
            Some(Body::Heartbeat(_)) => "heartbeat",
            Some(Body::Handshake(_)) => "handshake",
            None => "none",
        }
    }
}

/// Which body a frame carries, without its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Data,
    AckFrame,
    Resume,
    Reset,
    Heartbeat,
    Handshake,
}

/// What a router needs of a frame: read without copying its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameHeader {
    pub version: u32,
    pub stream_id: String,
    pub ack: u32,
    pub ack_bits: u32,
    pub body: Option<BodyKind>,
}

fn read_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

impl FrameHeader {
    /// Scans the top-level fields of an encoded frame (the body's contents
    /// are skipped, not copied). `None` for anything that is not a
    /// well-formed frame with a non-blank `stream_id`.
    pub fn peek(bytes: &[u8]) -> Option<FrameHeader> {
        let mut header = FrameHeader {
            version: 0,
            stream_id: String::new(),
            ack: 0,
            ack_bits: 0,
            body: None,
        };
        let mut at = 0;
        while at < bytes.len() {
            let key = read_varint(bytes, &mut at)?;
            let (field, wire) = (key >> 3, key & 7);
            match wire {
                0 => {
                    let value = u32::try_from(read_varint(bytes, &mut at)?).ok();
                    match field {
                        1 => header.version = value?,
                        3 => header.ack = value?,
                        4 => header.ack_bits = value?,
                        _ => {}
                    }
                }
                2 => {
                    let len = usize::try_from(read_varint(bytes, &mut at)?).ok()?;
                    let end = at.checked_add(len)?;
                    let value = bytes.get(at..end)?;
                    at = end;
                    let kind = match field {
                        2 => {
                            header.stream_id = std::str::from_utf8(value).ok()?.to_owned();
                            continue;
                        }
                        5 => BodyKind::Data,
                        6 => BodyKind::AckFrame,
                        7 => BodyKind::Resume,
                        8 => BodyKind::Reset,
                        9 => BodyKind::Heartbeat,
                        10 => BodyKind::Handshake,
                        _ => continue,
                    };
                    header.body = Some(kind);
                }
                1 => at = at.checked_add(8)?,
                5 => at = at.checked_add(4)?,
                _ => return None,
            }
        }
        if at != bytes.len() || header.stream_id.trim().is_empty() {
            return None;
        }
        Some(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peek_reads_the_header_of_every_kind_without_the_payload() {
        let frames = [
            (
                RelayMessageFrame::data("s", 5, 0, 1, vec![1; 300]),
                BodyKind::Data,
            ),
            (RelayMessageFrame::ack_only("s"), BodyKind::AckFrame),
            (RelayMessageFrame::resume("s", 0), BodyKind::Resume),
            (RelayMessageFrame::reset("s", "r"), BodyKind::Reset),
            (RelayMessageFrame::heartbeat("s"), BodyKind::Heartbeat),
            (
                RelayMessageFrame::handshake("s", vec![2; 4000], 1),
                BodyKind::Handshake,
            ),
        ];
        for (frame, kind) in frames {
            let bits = frame.ack_bits;
            let header = FrameHeader::peek(&frame.with_ack(7, bits).to_bytes()).unwrap();
            assert_eq!(header.body, Some(kind));
            assert_eq!(
                (header.version, header.stream_id.as_str(), header.ack),
                (1, "s", 7)
            );
        }
        assert_eq!(FrameHeader::peek(&[0xff, 0xff]), None);
        assert_eq!(
            FrameHeader::peek(&RelayMessageFrame::heartbeat(" ").to_bytes()),
            None
        );
        let truncated = RelayMessageFrame::data("s", 0, 0, 1, vec![1; 50]).to_bytes();
        assert_eq!(FrameHeader::peek(&truncated[..truncated.len() - 1]), None);
    }

    const TRANSCRIPT_STREAM: &str = "148d2080-def2-4fef-87d5-5dcbf102a50b";

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn resume_frame_matches_the_recorded_reference_bytes() {
        let frame = RelayMessageFrame::resume(TRANSCRIPT_STREAM, 0);
        let bytes = frame.to_bytes();
        assert_eq!(bytes.len(), 42);
        assert_eq!(
            hex(&bytes),
            "0801122431343864323038302d646566322d346665662d383764352d3564636266313032613530623a00"
        );
        let parsed = RelayMessageFrame::parse(&bytes, Dialect::Reference).unwrap();
        assert_eq!(parsed, frame);
    }

    #[test]
    fn recorded_frame_sizes_match() {
        // The transcript's sizes: data seq 0 with a 117-byte payload is 163
        // bytes, seq 1 with 56 bytes is 104, msg1 (3604) 3650, msg2 (3424)
        // 3470, and the rendezvous's reset 64.
        let sizes = [
            (
                RelayMessageFrame::data(TRANSCRIPT_STREAM, 0, 0, 1, vec![7; 117]),
                163,
            ),
            (
                RelayMessageFrame::data(TRANSCRIPT_STREAM, 1, 0, 1, vec![7; 56]),
                104,
            ),
            (
                RelayMessageFrame::handshake(TRANSCRIPT_STREAM, vec![1; 3604], 0),
                3650,
            ),
            (
                RelayMessageFrame::handshake(TRANSCRIPT_STREAM, vec![1; 3424], 0),
                3470,
            ),
            (
                RelayMessageFrame::reset(TRANSCRIPT_STREAM, "harness_disconnected"),
                64,
            ),
        ];
        for (frame, size) in sizes {
            assert_eq!(frame.to_bytes().len(), size, "{}", frame.kind());
        }
    }

    #[test]
    fn data_frame_omits_zero_fields_like_the_reference() {
        let bytes = RelayMessageFrame::data("s", 0, 0, 1, vec![0xaa]).to_bytes();
        assert_eq!(hex(&bytes), "08011201732a0518012201aa");
        let bytes = RelayMessageFrame::data("s", 2, 0, 1, vec![0xaa]).to_bytes();
        assert_eq!(hex(&bytes), "08011201732a07080218012201aa");
    }

    #[test]
    fn validation_follows_the_reference_order_and_messages() {
        let cases: Vec<(RelayMessageFrame, &str)> = vec![
            (
                RelayMessageFrame {
                    version: 0,
                    ..RelayMessageFrame::heartbeat("s")
                },
                "unsupported relay message frame version 0",
            ),
            (
                RelayMessageFrame::heartbeat("  "),
                "relay message frame is missing stream_id",
            ),
            (
                RelayMessageFrame::data("s", 0, 0, 2, vec![1]),
                "relay data message frame is missing required fields",
            ),
            (
                RelayMessageFrame::data("s", 0, 0, 1, vec![]),
                "relay data message frame is missing required fields",
            ),
            (
                RelayMessageFrame::reset("s", ""),
                "relay reset message frame is missing reason",
            ),
            (
                RelayMessageFrame::handshake("s", vec![], 0),
                "relay handshake message frame is missing payload",
            ),
            (
                RelayMessageFrame {
                    body: None,
                    ..RelayMessageFrame::heartbeat("s")
                },
                "relay message frame is missing body",
            ),
        ];
        for (frame, message) in cases {
            let err = frame.validate(Dialect::Reference).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
        assert!(RelayMessageFrame::resume("s", 9)
            .validate(Dialect::Reference)
            .is_ok());
        assert!(RelayMessageFrame::ack_only("s")
            .validate(Dialect::Reference)
            .is_ok());
    }

    #[test]
    fn reliable_dialect_accepts_segments_in_range_only() {
        let ok = RelayMessageFrame::data("s", 5, 1, 3, vec![1]);
        assert!(ok.validate(Dialect::Reliable).is_ok());
        assert!(ok.validate(Dialect::Reference).is_err());
        let bad = RelayMessageFrame::data("s", 5, 3, 3, vec![1]);
        assert!(bad.validate(Dialect::Reliable).is_err());
        let bad = RelayMessageFrame::data("s", 5, 0, 0, vec![1]);
        assert!(bad.validate(Dialect::Reliable).is_err());
    }

    #[test]
    fn garbage_is_a_decode_error() {
        let err = RelayMessageFrame::parse(&[0xff, 0xff, 0xff], Dialect::Reference).unwrap_err();
        assert!(err.to_string().starts_with("invalid relay message frame: "));
    }

    /// One field of the `.proto` file.
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    struct ProtoField {
        message: String,
        name: String,
        kind: String,
        tag: u32,
    }

    /// The fields the `.proto` file declares (a parser for its small subset).
    fn proto_fields() -> Vec<ProtoField> {
        let text = include_str!("../../resources/relay/codex.exec_server.relay.v1.proto");
        let mut fields = Vec::new();
        let mut message = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with("//") || line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("message ") {
                message = rest.split_whitespace().next().unwrap_or_default().into();
                if line.ends_with("{}") {
                    message.clear();
                }
                continue;
            }
            let Some(decl) = line.strip_suffix(';') else {
                continue;
            };
            let Some((lhs, tag)) = decl.split_once('=') else {
                continue;
            };
            let words: Vec<&str> = lhs.split_whitespace().collect();
            if let [kind, name] = words[..] {
                fields.push(ProtoField {
                    message: message.clone(),
                    name: name.into(),
                    kind: kind.into(),
                    tag: tag.trim().parse().unwrap(),
                });
            }
        }
        fields.sort();
        fields
    }

    /// The protobuf wire type a `.proto` field type encodes with.
    fn wire_type(kind: &str) -> u8 {
        match kind {
            "uint32" => 0,
            _ => 2,
        }
    }

    /// Encodes `frame` and returns the key byte its outer field `tag` uses.
    fn outer_key(frame: &RelayMessageFrame, tag: u32) -> Option<u8> {
        let bytes = frame.to_bytes();
        let mut at = 0;
        while at < bytes.len() {
            let key = bytes[at];
            if u32::from(key >> 3) == tag {
                return Some(key);
            }
            // Every test value is short: one-byte lengths and varints.
            at += if key & 7 == 0 {
                2
            } else {
                2 + usize::from(bytes[at + 1])
            };
        }
        None
    }

    #[test]
    fn rust_types_match_the_proto_file() {
        let declared = proto_fields();
        assert_eq!(declared.len(), 17, "{declared:#?}");
        for field in &declared {
            // Build a frame in which exactly this field is non-zero, then
            // check it is encoded under the declared tag and wire type.
            let key = |tag: u32| (tag << 3) as u8 | wire_type(&field.kind);
            let s = "s";
            let (frame, outer_tag, inner) = match (field.message.as_str(), field.name.as_str()) {
                ("RelayMessageFrame", "version") => (RelayMessageFrame::heartbeat(s), 1, None),
                ("RelayMessageFrame", "stream_id") => (RelayMessageFrame::heartbeat(s), 2, None),
                ("RelayMessageFrame", "ack") => {
                    (RelayMessageFrame::heartbeat(s).with_ack(3, 0), 3, None)
                }
                ("RelayMessageFrame", "ack_bits") => {
                    (RelayMessageFrame::heartbeat(s).with_ack(0, 3), 4, None)
                }
                ("RelayMessageFrame", "data") => {
                    (RelayMessageFrame::data(s, 0, 0, 1, vec![1]), 5, None)
                }
                ("RelayMessageFrame", "ack_frame") => (RelayMessageFrame::ack_only(s), 6, None),
                ("RelayMessageFrame", "resume") => (RelayMessageFrame::resume(s, 0), 7, None),
                ("RelayMessageFrame", "reset") => (RelayMessageFrame::reset(s, "r"), 8, None),
                ("RelayMessageFrame", "heartbeat") => (RelayMessageFrame::heartbeat(s), 9, None),
                ("RelayMessageFrame", "handshake") => {
                    (RelayMessageFrame::handshake(s, vec![1], 0), 10, None)
                }
                ("RelayData", "seq") => (RelayMessageFrame::data(s, 1, 0, 0, vec![]), 5, Some(1)),
                ("RelayData", "segment_index") => {
                    (RelayMessageFrame::data(s, 0, 1, 0, vec![]), 5, Some(2))
                }
                ("RelayData", "segment_count") => {
                    (RelayMessageFrame::data(s, 0, 0, 1, vec![]), 5, Some(3))
                }
                ("RelayData", "payload") => {
                    (RelayMessageFrame::data(s, 0, 0, 0, vec![1]), 5, Some(4))
                }
                ("RelayResume", "next_seq") => (RelayMessageFrame::resume(s, 1), 7, Some(1)),
                ("RelayReset", "reason") => (RelayMessageFrame::reset(s, "r"), 8, Some(1)),
                ("RelayHandshake", "payload") => {
                    (RelayMessageFrame::handshake(s, vec![1], 0), 10, Some(1))
                }
                other => panic!("the .proto declares {other:?}, which the Rust types lack"),
            };
            let bytes = frame.to_bytes();
            match inner {
                None => assert_eq!(
                    outer_key(&frame, outer_tag),
                    Some(key(outer_tag)),
                    "{field:?} in {}",
                    hex(&bytes)
                ),
                Some(tag) => {
                    // The body is the last field: its key, its length, then
                    // exactly one inner field whose key must match.
                    let body_key = (outer_tag << 3) as u8 | 2;
                    let at = bytes.iter().rposition(|&b| b == body_key).unwrap();
                    assert_eq!(bytes[at + 2], key(tag), "{field:?} in {}", hex(&bytes));
                }
            }
        }
    }
}
