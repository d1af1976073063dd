//! Shared integration-test utilities, one submodule per area.
#![allow(dead_code)]
pub mod bwrap;
pub mod client;
pub mod confine;
pub mod fleet;
pub mod fs;
pub mod fuzz;
pub mod host;
pub mod metrics;
pub mod net;
pub mod redteam;
pub mod reference_relay;
pub mod relay;
pub mod sandbox;
pub mod schema;
pub mod shell;
pub mod silent;
pub mod wire;
