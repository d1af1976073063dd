//! Transports: WebSocket over TCP or a Unix socket (behind a small HTTP
//! gate), and newline-delimited JSON over stdio.

pub mod http;
pub mod stdio;
pub mod websocket;
