//! The receive window of a stream: ciphertexts arrive by `seq` and leave in
//! nonce order, before decryption (nonces are implicit). A seq already
//! released or already buffered is a duplicate and the first copy wins. How
//! far ahead a record may be, and how many bytes may wait, is bounded; what
//! happens beyond the bounds depends on the dialect (fatal for the
//! reference's, a drop for the reliable one, which retransmits).

use std::collections::BTreeMap;

/// How far ahead of the next expected seq a record may be (reference dialect).
pub const REFERENCE_MAX_DISTANCE: u32 = 64;
/// Bytes that may wait for a gap to close (reference dialect).
pub const REFERENCE_MAX_PENDING_BYTES: usize = 1 << 20;

/// A window that overflowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReorderError {
    #[error("Noise relay ciphertext exceeds reorder window")]
    Window,
    #[error("Noise relay pending ciphertext buffer is full")]
    Full,
}

/// What [`ReorderWindow::insert`] did with a record.
#[derive(Debug, PartialEq, Eq)]
pub enum Inserted<T> {
    /// Already released or buffered: ignored.
    Duplicate,
    /// Buffered until the gap before it closes.
    Buffered,
    /// These records, in seq order, are ready to decrypt.
    Released(Vec<(u32, T)>),
}

/// Ciphertexts (with whatever the caller keeps beside them) waiting for their turn.
#[derive(Debug)]
pub struct ReorderWindow<T> {
    next: u32,
    /// Set once seq `u32::MAX` has been released: nothing more may come.
    exhausted: bool,
    /// Each record with its size in bytes.
    pending: BTreeMap<u32, (T, usize)>,
    pending_bytes: usize,
    max_distance: u32,
    max_pending_bytes: usize,
}

impl<T> ReorderWindow<T> {
    /// A window starting at seq 0.
    pub fn new(max_distance: u32, max_pending_bytes: usize) -> Self {
        Self {
            next: 0,
            exhausted: false,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            max_distance,
            max_pending_bytes,
        }
    }

    /// The next seq to be released (records below it have all been released).
    pub fn next_seq(&self) -> u32 {
        self.next
    }

    /// Bit i set: seq `next + 1 + i` is buffered (i < 32).
    pub fn buffered_bits(&self) -> u32 {
        let mut bits = 0u32;
        for &seq in self.pending.keys() {
            let Some(offset) = seq.checked_sub(self.next).and_then(|d| d.checked_sub(1)) else {
                continue;
            };
            if offset >= 32 {
                break;
            }
            bits |= 1 << offset;
        }
        bits
    }

    /// Bytes waiting.
    #[cfg(test)]
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Offers one record of `bytes` bytes.
    pub fn insert(
        &mut self,
        seq: u32,
        record: T,
        bytes: usize,
    ) -> Result<Inserted<T>, ReorderError> {
        if self.exhausted || seq < self.next || self.pending.contains_key(&seq) {
            return Ok(Inserted::Duplicate);
        }
        if seq - self.next > self.max_distance {
            return Err(ReorderError::Window);
        }
        if seq != self.next {
            if self.pending_bytes + bytes > self.max_pending_bytes {
                return Err(ReorderError::Full);
            }
            self.pending_bytes += bytes;
            self.pending.insert(seq, (record, bytes));
            return Ok(Inserted::Buffered);
        }
        let mut released = vec![(seq, record)];
        self.advance();
        while let Some(record) = self.take_next() {
            released.push((self.next, record));
            self.advance();
        }
        Ok(Inserted::Released(released))
    }

    fn take_next(&mut self) -> Option<T> {
        if self.exhausted {
            return None;
        }
        let (record, bytes) = self.pending.remove(&self.next)?;
        self.pending_bytes -= bytes;
        Some(record)
    }

    fn advance(&mut self) {
        match self.next.checked_add(1) {
            Some(next) => self.next = next,
            None => self.exhausted = true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window() -> ReorderWindow<Vec<u8>> {
        ReorderWindow::new(REFERENCE_MAX_DISTANCE, REFERENCE_MAX_PENDING_BYTES)
    }

    fn seqs(inserted: Inserted<Vec<u8>>) -> Vec<u32> {
        match inserted {
            Inserted::Released(records) => records.into_iter().map(|(seq, _)| seq).collect(),
            _ => Vec::new(),
        }
    }

    fn ins(
        w: &mut ReorderWindow<Vec<u8>>,
        seq: u32,
        record: Vec<u8>,
    ) -> Result<Inserted<Vec<u8>>, ReorderError> {
        let bytes = record.len();
        w.insert(seq, record, bytes)
    }

    #[test]
    fn releases_ciphertexts_only_in_nonce_order() {
        let mut w = window();
        assert_eq!(ins(&mut w, 2, vec![2]), Ok(Inserted::Buffered));
        assert_eq!(ins(&mut w, 1, vec![1]), Ok(Inserted::Buffered));
        assert_eq!(w.buffered_bits(), 0b11);
        assert_eq!(seqs(ins(&mut w, 0, vec![0]).unwrap()), vec![0, 1, 2]);
        assert_eq!(w.next_seq(), 3);
        assert_eq!(w.pending_bytes(), 0);
    }

    #[test]
    fn ignores_duplicate_ciphertexts_without_replacing_buffered_record() {
        let mut w = window();
        assert_eq!(ins(&mut w, 1, vec![b'a']), Ok(Inserted::Buffered));
        assert_eq!(ins(&mut w, 1, vec![b'b']), Ok(Inserted::Duplicate));
        match ins(&mut w, 0, vec![0]).unwrap() {
            Inserted::Released(records) => assert_eq!(records[1], (1, vec![b'a'])),
            other => panic!("{other:?}"),
        }
        assert_eq!(ins(&mut w, 0, vec![0]), Ok(Inserted::Duplicate));
    }

    #[test]
    fn rejects_unbounded_reordering() {
        let mut w = window();
        assert_eq!(ins(&mut w, 65, vec![1]), Err(ReorderError::Window));
        assert_eq!(ins(&mut w, 64, vec![1]), Ok(Inserted::Buffered));
        let mut w = window();
        assert_eq!(ins(&mut w, 1, vec![0; 1 << 20]), Ok(Inserted::Buffered));
        assert_eq!(ins(&mut w, 2, vec![0; 1]), Err(ReorderError::Full));
    }

    #[test]
    fn the_last_sequence_number_ends_the_window() {
        let mut w = window();
        w.next = u32::MAX;
        assert_eq!(
            seqs(ins(&mut w, u32::MAX, vec![1]).unwrap()),
            vec![u32::MAX]
        );
        assert_eq!(ins(&mut w, 0, vec![1]), Ok(Inserted::Duplicate));
    }
}
