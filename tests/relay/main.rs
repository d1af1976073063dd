//! Remote mode: registry, rendezvous, Noise, frames and client recovery,
//! against this project's relay and a double that follows the reference's wire.

#[path = "../common/mod.rs"]
mod common;

mod client;
mod embedded;
mod flaky;
mod fleet;
mod interop;
mod large;
mod link;
mod metrics;
mod properties;
mod proxy;
mod remote;
mod security;
mod tls;
