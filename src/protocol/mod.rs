//! Wire types of the Codex JSON-RPC dialect: envelope, methods, params and
//! results, and path URIs.

pub mod path;

pub use path::{PathDialect, PathError, WirePath};
pub mod fs;
pub mod sandbox;
