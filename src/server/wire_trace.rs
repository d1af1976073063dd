//! The wire trace: with `RUST_LOG=codexbox::wire=trace`, every message a
//! connection receives, and every message a WebSocket or stdio connection
//! sends (relay streams hand theirs to the executor), is logged as it
//! crosses the transport,
//! with the connection's id and its direction (`in`, `out`). For
//! debugging a client, and for the tests, which check every message of
//! their servers against the shipped schemas. Costs one level check per
//! message when off.

use std::borrow::Cow;

/// The `tracing` target of the trace.
pub const TARGET: &str = "codexbox::wire";

/// Messages larger than this are traced by size only (a 64 MiB
/// `fs/writeFile` would double the server's memory in the log line).
pub const MAX_TRACED_BYTES: usize = 1024 * 1024;

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    In,
    Out,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

/// Traces one message of connection `connection`.
pub fn trace(connection: u64, direction: Direction, message: &[u8]) {
    if !tracing::enabled!(target: TARGET, tracing::Level::TRACE) {
        return;
    }
    let direction = direction.as_str();
    if message.len() > MAX_TRACED_BYTES {
        tracing::trace!(target: TARGET, connection, direction, omitted_bytes = message.len(), "message");
        return;
    }
    let frame: Cow<'_, str> = String::from_utf8_lossy(message);
    tracing::trace!(target: TARGET, connection, direction, frame = %frame, "message");
}
