//! The exec-server driven over its real transports: processes, sessions,
//! the wire format and its schemas, drain, and the library client.

#[path = "../common/mod.rs"]
mod common;

mod capability;
mod client;
mod drain;
mod library;
mod link;
mod metrics;
mod process;
mod schema;
mod session;
mod smoke;
mod stop;
mod traced_schema;
mod transport;
mod wire;
