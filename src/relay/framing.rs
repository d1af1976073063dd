//! Length-prefixed message framing inside the Noise records of a stream:
//! each JSON-RPC message becomes a u32 big-endian length and the JSON bytes,
//! cut into records of at most [`MAX_RECORD_PLAINTEXT`] bytes. The decoder
//! accepts any record boundaries (a record may end several messages or carry
//! part of one) and checks every limit before buffering the payload.

/// Largest plaintext of one record (60 KiB).
pub const MAX_RECORD_PLAINTEXT: usize = 60 * 1024;
/// Largest JSON-RPC message (64 MiB); a length of 0 is invalid too.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Bytes of the length prefix.
const PREFIX_BYTES: usize = 4;

/// Why a message could not be framed or deframed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("JSON-RPC message of {0} bytes exceeds the relay message limit")]
    MessageTooLarge(usize),
    #[error("relay message must not be empty")]
    EmptyMessage,
    #[error("Noise relay record of {0} bytes exceeds the plaintext limit")]
    RecordTooLarge(usize),
    #[error("declared relay message length {0} is invalid")]
    InvalidDeclaredLength(u64),
}

/// Splits one message into record plaintexts.
pub fn frame_message(message: &[u8]) -> Result<Vec<Vec<u8>>, FramingError> {
    if message.is_empty() {
        return Err(FramingError::EmptyMessage);
    }
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(FramingError::MessageTooLarge(message.len()));
    }
    let len =
        u32::try_from(message.len()).map_err(|_| FramingError::MessageTooLarge(message.len()))?;
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
#[derive(Debug, Default)]
pub struct MessageDecoder {
    buffer: Vec<u8>,
    /// The length of the message being assembled, once its prefix is known.
    expected: Option<usize>,
}

impl MessageDecoder {
    /// A decoder with nothing buffered.
    pub fn new() -> Self {
        Self::default()
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
                            .filter(|&n| n > 0 && n <= MAX_MESSAGE_BYTES)
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
        let records = frame_message(b"{}").unwrap();
        assert_eq!(records, vec![vec![0, 0, 0, 2, b'{', b'}']]);
        let mut decoder = MessageDecoder::new();
        assert_eq!(decoder.push(&records[0]).unwrap(), vec![b"{}".to_vec()]);
        assert!(!decoder.is_mid_message());
    }

    #[test]
    fn fragments_and_reassembles_large_jsonrpc_message() {
        let message: Vec<u8> = (0..3 * MAX_RECORD_PLAINTEXT)
            .map(|i| (i % 251) as u8)
            .collect();
        let records = frame_message(&message).unwrap();
        assert_eq!(records.len(), 4);
        assert!(records.iter().all(|r| r.len() <= MAX_RECORD_PLAINTEXT));
        assert_eq!(records[0].len(), MAX_RECORD_PLAINTEXT);
        let mut decoder = MessageDecoder::new();
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
        let mut decoder = MessageDecoder::new();
        let first = decoder.push(&stream[..9]).unwrap();
        assert_eq!(first, vec![b"one".to_vec()]);
        assert!(decoder.is_mid_message());
        let rest = decoder.push(&stream[9..]).unwrap();
        assert_eq!(rest, vec![b"two".to_vec(), b"three".to_vec()]);
    }

    #[test]
    fn rejects_declared_message_length_above_limit_without_payload() {
        let mut decoder = MessageDecoder::new();
        let too_long = ((MAX_MESSAGE_BYTES + 1) as u32).to_be_bytes();
        assert_eq!(
            decoder.push(&too_long),
            Err(FramingError::InvalidDeclaredLength(
                MAX_MESSAGE_BYTES as u64 + 1
            ))
        );
        let mut decoder = MessageDecoder::new();
        assert!(decoder.push(&[0, 0, 0, 0]).is_err());
    }

    #[test]
    fn rejects_oversized_plaintext_record_and_bad_messages() {
        let mut decoder = MessageDecoder::new();
        assert_eq!(
            decoder.push(&vec![0; MAX_RECORD_PLAINTEXT + 1]),
            Err(FramingError::RecordTooLarge(MAX_RECORD_PLAINTEXT + 1))
        );
        assert_eq!(frame_message(b""), Err(FramingError::EmptyMessage));
    }
}
