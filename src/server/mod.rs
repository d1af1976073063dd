//! The exec-server: transports, connections, sessions and request handlers.
pub mod cli;
