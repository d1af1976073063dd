//! Remote mode (docs/remote.md): executors behind a rendezvous, reached by
//! harnesses through end-to-end encrypted virtual streams.
//!
//! The wire, bottom up:
//! - [`frame`]: the protobuf `RelayMessageFrame` and its validation;
//! - [`noise`]: identities, the prologue, the hybrid IK handshake and the
//!   record ciphers;
//! - [`framing`] and `reorder`: length-prefixed messages inside records
//!   (and how large each stream lets them be), and the receive window that
//!   releases records in nonce order;
//! - [`channel`]: one stream's protocol state (both dialects, including the
//!   reliable layer's acknowledgements, retransmission and resume), with no
//!   I/O, so every rule is unit-tested;
//! - `stream`: the task that runs one stream over a [`channel`].
//!
//! The registry: [`registry_api`] (its JSON bodies and error shapes),
//! [`registry_client`] (calls of executors and harnesses, over the one
//! HTTP client, `crate::net::client`) and `credentials` (where an
//! executor's credentials come from).
//!
//! The two ends dial the rendezvous with [`socket`]: the executor
//! (`crate::server::relay_executor`: registers and serves streams over one
//! WebSocket link, `crate::link`) and [`harness`] (opens one stream to an
//! executor). The rendezvous server is `crate::rendezvous`.

pub mod channel;
pub(crate) mod credentials;
pub mod frame;
pub mod framing;
pub mod harness;
pub mod noise;
pub mod registry_api;
pub mod registry_client;
pub(crate) mod reorder;
pub mod socket;
pub(crate) mod stream;

/// Which rules a stream follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The reference's: one record per data frame, `segment_count` 1, no
    /// acknowledgements, no retransmission, no same-stream resume.
    Reference,
    /// Negotiated between two codexbox endpoints: segments, cumulative and
    /// selective acknowledgements, retransmission of cached ciphertext,
    /// heartbeats and same-stream resume.
    Reliable,
}

/// The reset reason an executor sends for any stream error.
pub const RESET_PROTOCOL_ERROR: &str = "noise_relay_protocol_error";
/// The reset reason of an executor refusing new streams while it drains.
pub const RESET_SHUTTING_DOWN: &str = "executor_shutting_down";
/// The reset reason of an executor closing a stream whose connection ended
/// (its harness gone, its session taken over).
pub const RESET_CONNECTION_CLOSED: &str = "connection_closed";
/// Largest relay WebSocket message either endpoint accepts.
pub const MAX_WEBSOCKET_MESSAGE_BYTES: usize = 256 * 1024;
