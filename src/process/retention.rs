//! Retained output of one process (docs/protocol.md): the newest N bytes and at most
//! 50,000 chunks, evicting the oldest, plus the `process/read` selection rules
//! (`afterSeq`, `maxBytes`, `truncated`). Pure data, no I/O.

use std::collections::VecDeque;

use crate::protocol::process::StreamKind;

/// Default retained bytes per process.
pub const RETAINED_OUTPUT_BYTES: usize = 1024 * 1024;
/// Retained chunks per process.
pub const RETAINED_CHUNKS: usize = 50_000;

/// One chunk of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub seq: u64,
    pub stream: StreamKind,
    pub data: Vec<u8>,
}

/// The retained chunks of one process.
#[derive(Debug)]
pub struct Retention {
    chunks: VecDeque<Chunk>,
    bytes: usize,
    max_bytes: usize,
    max_chunks: usize,
    /// The highest seq ever evicted (0 = none).
    evicted_through: u64,
}

/// What `process/read` selected.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pub chunks: Vec<Chunk>,
    /// Chunks after the cursor were evicted before this read.
    pub truncated: bool,
}

impl Retention {
    /// An empty buffer keeping at most `max_bytes` bytes and `max_chunks` chunks.
    pub fn new(max_bytes: usize, max_chunks: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            bytes: 0,
            max_bytes,
            max_chunks: max_chunks.max(1),
            evicted_through: 0,
        }
    }

    /// Appends a chunk, evicting the oldest ones over the limits. The newest
    /// chunk is always kept.
    pub fn push(&mut self, chunk: Chunk) {
        self.bytes += chunk.data.len();
        self.chunks.push_back(chunk);
        while self.chunks.len() > 1
            && (self.bytes > self.max_bytes || self.chunks.len() > self.max_chunks)
        {
            if let Some(old) = self.chunks.pop_front() {
                self.bytes -= old.data.len();
                self.evicted_through = old.seq;
            }
        }
    }

    /// Retained bytes.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Every retained chunk, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Chunk> {
        self.chunks.iter()
    }

    /// Chunks with `seq > after_seq`: the first always, then while the byte
    /// total stays within `max_bytes`; stops once the total reaches it.
    pub fn select(&self, after_seq: u64, max_bytes: Option<u64>) -> Selection {
        let start = self.chunks.partition_point(|c| c.seq <= after_seq);
        let mut out = Vec::new();
        let mut total: u64 = 0;
        for chunk in self.chunks.range(start..) {
            let len = chunk.data.len() as u64;
            if let Some(max) = max_bytes {
                if !out.is_empty() && (total >= max || total + len > max) {
                    break;
                }
            }
            total += len;
            out.push(chunk.clone());
        }
        Selection {
            chunks: out,
            truncated: self.evicted_through > after_seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(seq: u64, len: usize) -> Chunk {
        Chunk {
            seq,
            stream: StreamKind::Stdout,
            data: vec![b'x'; len],
        }
    }

    #[test]
    fn oldest_chunks_are_evicted_and_reported_as_truncated() {
        let mut r = Retention::new(10, 100);
        for seq in 1..=4 {
            r.push(chunk(seq, 4));
        }
        assert_eq!(r.bytes(), 8);
        let sel = r.select(0, None);
        assert_eq!(sel.chunks.iter().map(|c| c.seq).collect::<Vec<_>>(), [3, 4]);
        assert!(sel.truncated);
        assert!(!r.select(2, None).truncated);
    }

    #[test]
    fn chunk_count_limit_applies() {
        let mut r = Retention::new(1000, 2);
        for seq in 1..=3 {
            r.push(chunk(seq, 1));
        }
        assert_eq!(r.iter().count(), 2);
    }

    #[test]
    fn max_bytes_returns_first_chunk_then_fits() {
        let mut r = Retention::new(1000, 100);
        r.push(chunk(1, 5));
        r.push(chunk(2, 3));
        r.push(chunk(3, 3));
        let seqs = |s: Selection| s.chunks.iter().map(|c| c.seq).collect::<Vec<_>>();
        assert_eq!(seqs(r.select(0, Some(0))), [1]);
        assert_eq!(seqs(r.select(0, Some(2))), [1]);
        assert_eq!(seqs(r.select(0, Some(8))), [1, 2]);
        assert_eq!(seqs(r.select(0, Some(11))), [1, 2, 3]);
        assert_eq!(seqs(r.select(1, None)), [2, 3]);
    }
}
