//! Filesystem operations, implemented once and shared by the server's direct
//! path and the fs-helper (docs/filesystem.md): the one-shot
//! operations ([`ops::run`]), the entry-changing `fs/remove` (`remove`)
//! and `fs/copy` (`copy`) that reach entries through their parent
//! directory's descriptor (`entry`), `fs/walk` (`walk`), the tables of
//! streaming reads and writes ([`stream::FileStreams`]) and the error-to-code mapping
//! ([`error::FsError`]), and the capability discovery of
//! `capabilityRoots/discoverV1` ([`discovery`]). Where an operation runs (directly or in a sandboxed
//! helper) is decided by the server, not here.

pub(crate) mod copy;
pub mod discovery;
pub(crate) mod entry;
pub(crate) mod error;
pub mod ops;
pub(crate) mod remove;
pub(crate) mod stream;
pub(crate) mod walk;

pub use error::FsError;
pub use ops::run;
pub use stream::FileStreams;
