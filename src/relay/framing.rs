//! Length-prefixed message framing inside the Noise records of a stream:
//! each JSON-RPC message becomes a u32 big-endian length and the JSON bytes,
//! cut into records of at most [`MAX_RECORD_PLAINTEXT`] bytes. The decoder
//! accepts any record boundaries (a record may end several messages or carry
//! part of one) and checks every limit before buffering the payload.
//!
//! How large a message may be is the stream's business ([`MessageLimits`]):
//! the reference's 64 MiB in its dialect, and in the reliable dialect what
//! each end says it accepts in its handshake frame ([`advertised`]).

/// Largest plaintext of one record (60 KiB).
pub const MAX_RECORD_PLAINTEXT: usize = 60 * 1024;
/// Largest JSON-RPC message of the reference dialect (64 MiB), and of a
/// reliable peer that does not say what it accepts.
pub const REFERENCE_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Bytes of the length prefix.
const PREFIX_BYTES: usize = 4;

/// The largest message each direction of a stream carries; a length of 0 is
/// invalid too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    /// What the peer accepts: larger messages are never framed.
    pub outbound: usize,
    /// What this end accepts: a larger declared length fails the stream.
    pub inbound: usize,
}

impl MessageLimits {
    /// The reference dialect's: 64 MiB each way.
    pub const REFERENCE: MessageLimits = MessageLimits {
        outbound: REFERENCE_MAX_MESSAGE_BYTES,
        inbound: REFERENCE_MAX_MESSAGE_BYTES,
    };
}

/// The value an end puts in the `ack` field of its reliable handshake frame
/// to say the largest message it accepts (the length prefix is a u32).
pub fn advertise(limit: usize) -> u32 {
    u32::try_from(limit).unwrap_or(u32::MAX)
}

/// The largest message a peer accepts, from the `ack` field of its
/// handshake frame: 0 (a peer that says nothing) is the reference's limit.
pub fn advertised(ack: u32) -> usize {
    match usize::try_from(ack) {
        Ok(0) | Err(_) => REFERENCE_MAX_MESSAGE_BYTES,
        Ok(limit) => limit,
    }
}

/// Why a message could not be framed or deframed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("JSON-RPC message of {size} bytes exceeds the relay message limit of {limit} bytes")]
    MessageTooLarge { size: usize, limit: usize },
    #[error("relay message must not be empty")]
    EmptyMessage,
    #[error("Noise relay record of {0} bytes exceeds the plaintext limit")]
    RecordTooLarge(usize),
    #[error("declared relay message length {0} is invalid")]
    InvalidDeclaredLength(u64),
}

/// Splits one message of at most `limit` bytes into record plaintexts.
pub fn frame_message(message: &[u8], limit: usize) -> Result<Vec<Vec<u8>>, FramingError> {
    let too_large = || FramingError::MessageTooLarge {
        size: message.len(),
        limit,
    };
    if message.is_empty() {
        return Err(FramingError::EmptyMessage);
    }
    if message.len() > limit {
        return Err(too_large());
    }
    let len = u32::try_from(message.len()).map_err(|_| too_large())?;
    let total = message.len() + PREFIX_BYTES;
    let mut records = Vec::with_capacity(total.div_ceil(MAX_RECORD_PLAINTEXT));
    let mut first = Vec::with_capacity(MAX_RECORD_PLAINTEXT.min(total));
    first.extend_from_slice(&len.to_be_bytes());
    let head = message.len().min(MAX_RECORD_PLAINTEXT - PREFIX_BYTES);
    let (head_bytes, rest) = message.split_at(head);
    first.extend_from_slice(head_bytes);
    records.push(first);
    records.extend(rest.chunks(MAX_RECORD_PLAINTEXT).map(<[u8]>::to_vec));
    Ok(records)
}

/// Reassembles messages from record plaintexts.
#[derive(Debug)]
pub struct MessageDecoder {
    buffer: Vec<u8>,
    /// The length of the message being assembled, once its prefix is known.
    expected: Option<usize>,
    /// The largest message accepted.
    limit: usize,
}

impl MessageDecoder {
    /// A decoder of messages of at most `limit` bytes, with nothing buffered.
    pub fn new(limit: usize) -> Self {
        Self {
            buffer: Vec::new(),
            expected: None,
            limit,
        }
    }

    /// Whether a message is partly received.
    pub fn is_mid_message(&self) -> bool {
        !self.buffer.is_empty() || self.expected.is_some()
    }

    /// Feeds one record and returns every message it completes.
    pub fn push(&mut self, record: &[u8]) -> Result<Vec<Vec<u8>>, FramingError> {
        if record.len() > MAX_RECORD_PLAINTEXT {
            return Err(FramingError::RecordTooLarge(record.len()));
        }
        let mut done = Vec::new();
        let mut input = record;
        while !input.is_empty() {
            match self.expected {
                None => {
                    let want = PREFIX_BYTES - self.buffer.len();
                    let take = want.min(input.len());
                    let (head, rest) = input.split_at(take);
                    self.buffer.extend_from_slice(head);
                    input = rest;
                    if let Ok(prefix) = <[u8; PREFIX_BYTES]>::try_from(self.buffer.as_slice()) {
                        let declared = u32::from_be_bytes(prefix);
                        let length = usize::try_from(declared)
                            .ok()
                            .filter(|&n| n > 0 && n <= self.limit)
                            .ok_or(FramingError::InvalidDeclaredLength(u64::from(declared)))?;
                        self.buffer.clear();
                        self.buffer.reserve(length.min(MAX_RECORD_PLAINTEXT * 4));
                        self.expected = Some(length);
                    }
                }
                Some(length) => {
                    let take = (length - self.buffer.len()).min(input.len());
                    let (head, rest) = input.split_at(take);
                    self.buffer.extend_from_slice(head);
                    input = rest;
                    if self.buffer.len() == length {
                        done.push(std::mem::take(&mut self.buffer));
                        self.expected = None;
                    }
                }
            }
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_message_is_one_record_with_its_length() {
        let records = frame_message(b"{}", REFERENCE_MAX_MESSAGE_BYTES).unwrap();
        assert_eq!(records, vec![vec![0, 0, 0, 2, b'{', b'}']]);
        let mut decoder = MessageDecoder::new(REFERENCE_MAX_MESSAGE_BYTES);
        assert_eq!(decoder.push(&records[0]).unwrap(), vec![b"{}".to_vec()]);
        assert!(!decoder.is_mid_message());
    }

    #[test]
    fn fragments_and_reassembles_large_jsonrpc_message() {
        let message: Vec<u8> = (0..3 * MAX_RECORD_PLAINTEXT)
            .map(|i| (i % 251) as u8)
            .collect();
        let records = frame_message(&message, REFERENCE_MAX_MESSAGE_BYTES).unwrap();
        assert_eq!(records.len(), 4);
        assert!(records.iter().all(|r| r.len() <= MAX_RECORD_PLAINTEXT));
        assert_eq!(records[0].len(), MAX_RECORD_PLAINTEXT);
        let mut decoder = MessageDecoder::new(REFERENCE_MAX_MESSAGE_BYTES);
        let mut out = Vec::new();
        for record in &records {
            out.extend(decoder.push(record).unwrap());
        }
        assert_eq!(out, vec![message]);
    }

    #[test]
    fn one_record_may_finish_several_messages_and_split_a_prefix() {
        let mut stream = Vec::new();
        for text in [&b"one"[..], b"two", b"three"] {
            stream.extend_from_slice(&(text.len() as u32).to_be_bytes());
            stream.extend_from_slice(text);
        }
        let mut decoder = MessageDecoder::new(REFERENCE_MAX_MESSAGE_BYTES);
        let first = decoder.push(&stream[..9]).unwrap();
        assert_eq!(first, vec![b"one".to_vec()]);
        assert!(decoder.is_mid_message());
        let rest = decoder.push(&stream[9..]).unwrap();
        assert_eq!(rest, vec![b"two".to_vec(), b"three".to_vec()]);
    }

    #[test]
    fn rejects_declared_message_length_above_limit_without_payload() {
        let limit = REFERENCE_MAX_MESSAGE_BYTES;
        let mut decoder = MessageDecoder::new(limit);
        let too_long = ((limit + 1) as u32).to_be_bytes();
        assert_eq!(
            decoder.push(&too_long),
            Err(FramingError::InvalidDeclaredLength(limit as u64 + 1))
        );
        let mut decoder = MessageDecoder::new(limit);
        assert!(decoder.push(&[0, 0, 0, 0]).is_err());
        // A larger limit takes the same prefix.
        let mut decoder = MessageDecoder::new(2 * limit);
        assert_eq!(decoder.push(&too_long), Ok(Vec::new()));
        assert!(decoder.is_mid_message());
    }

    #[test]
    fn a_message_over_the_limit_is_never_framed() {
        let message = vec![b'x'; 1000];
        assert_eq!(
            frame_message(&message, 999),
            Err(FramingError::MessageTooLarge {
                size: 1000,
                limit: 999
            })
        );
        assert!(frame_message(&message, 1000).is_ok());
    }

    #[test]
    fn an_unsaid_limit_is_the_references() {
        assert_eq!(advertised(0), REFERENCE_MAX_MESSAGE_BYTES);
        assert_eq!(advertised(128 << 20), 128 << 20);
        assert_eq!(advertise(128 << 20), 128 << 20);
        assert_eq!(advertise(usize::MAX), u32::MAX);
    }

    #[test]
    fn rejects_oversized_plaintext_record_and_bad_messages() {
        let mut decoder = MessageDecoder::new(REFERENCE_MAX_MESSAGE_BYTES);
        assert_eq!(
            decoder.push(&vec![0; MAX_RECORD_PLAINTEXT + 1]),
            Err(FramingError::RecordTooLarge(MAX_RECORD_PLAINTEXT + 1))
        );
        assert_eq!(
            frame_message(b"", REFERENCE_MAX_MESSAGE_BYTES),
            Err(FramingError::EmptyMessage)
        );
    }
}
