//! How a request is answered: now, with the result's JSON text, or later by
//! the task that waits for it (a long poll, a streamed body).

use crate::protocol::RpcError;

/// Whether a request was answered now (with this JSON text) or will be
/// answered by its own task.
#[derive(Debug)]
pub enum Deferred {
    Now(String),
    Later,
}

/// Serializes a result in its declared key order.
pub fn to_json<T: serde::Serialize>(value: &T) -> Result<String, RpcError> {
    serde_json::to_string(value).map_err(|e| RpcError::internal(e.to_string()))
}
