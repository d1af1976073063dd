//! The length-prefixed binary fields of the messages codexbox's own
//! processes exchange (the spawn zygote's jobs, the sandbox helper's reuse
//! requests and answers): single bytes, little-endian `u32` counts, and
//! byte strings with a `u32` length before them. Paths need not be UTF-8.

/// Appends fields to a message.
#[derive(Debug, Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn byte(&mut self, byte: u8) {
        self.0.push(byte);
    }

    /// A count (saturated at `u32::MAX`; no message comes near it).
    pub fn count(&mut self, n: usize) {
        self.0
            .extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
    }

    /// A byte string and its length before it.
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.count(bytes.len());
        self.0.extend_from_slice(bytes);
    }
}

/// Takes fields off the front of a message; `None` once it is too short.
#[derive(Debug)]
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    pub fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let head = self.0.get(..N)?;
        let out = <[u8; N]>::try_from(head).ok()?;
        self.0 = self.0.get(N..)?;
        Some(out)
    }

    pub fn count(&mut self) -> Option<usize> {
        usize::try_from(u32::from_le_bytes(self.array::<4>()?)).ok()
    }

    pub fn bytes(&mut self) -> Option<Vec<u8>> {
        let len = self.count()?;
        let out = self.0.get(..len)?.to_vec();
        self.0 = self.0.get(len..)?;
        Some(out)
    }

    /// `Some` when the whole message was read.
    pub fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}
