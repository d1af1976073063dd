//! The exec-server: transports, connections, sessions and request handlers.
pub mod cli;
pub mod fs_methods;
pub mod process_sandbox;
