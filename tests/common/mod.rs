//! Shared integration-test utilities, one submodule per area.
pub mod client;
