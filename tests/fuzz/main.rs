//! Property-based fuzzing of every parser that takes outside input, on
//! stable Rust with proptest: the JSON-RPC envelope and every method's
//! params, the policy JSON, path URIs, the proxy's destinations (host
//! spellings and allow/deny decisions), the bwrap, linux-sandbox and
//! `codexbox sandbox` command lines, the fs-helper request stream, and the
//! agreement of the server with its shipped JSON Schemas.
//!
//! Properties: no panic; bounded inputs and calls that finish; the right
//! error code or exit status for each class of bad input; round trips where
//! they apply. Pure parsers are called in-process; what forks, execs or
//! changes process state is driven through the real binary with a bounded
//! number of cases.
//!
//! The test suite runs a few hundred cases per target from fixed seeds
//! (`PROPTEST_CASES` overrides the count); `scripts/fuzz SECONDS` runs the
//! same targets for a time budget from fresh seeds (see
//! `tests/common/fuzz.rs`). Inputs that once failed are kept as named
//! regression tests beside their target.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod destination;
mod envelope;
mod fs_helper;
mod gen;
mod params;
mod path;
mod policy;
mod server;
