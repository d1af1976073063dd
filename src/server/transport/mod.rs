//! Transports: WebSocket over TCP or a Unix socket (behind a small HTTP
//! gate), newline-delimited JSON over stdio, and the virtual streams of
//! remote mode.

pub mod http;
pub mod relay;
pub mod stdio;
pub mod websocket;
