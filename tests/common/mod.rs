//! Shared integration-test utilities, one submodule per area.
pub mod bwrap;
pub mod client;
pub mod confine;
pub mod sandbox;
