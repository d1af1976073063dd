//! `codexbox bwrap`: its command line, a differential comparison with
//! bubblewrap option by option (as root and as uid 65534), lifecycle and
//! privileges, and the sandbox it builds.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod compat;
mod lifecycle;
mod sandbox;
