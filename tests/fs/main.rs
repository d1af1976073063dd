//! The `fs/*` methods, direct and through the sandboxed fs-helper: path
//! semantics, entries, large files, the helper pool and sandboxed access.

#[path = "../common/mod.rs"]
mod common;

mod entries;
mod helper;
mod helper_pool;
mod large;
mod ops;
mod paths;
mod process_sandbox;
mod sandbox;
