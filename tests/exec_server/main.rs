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
#[cfg(feature = "schema")]
mod schema;
/// The schema tests need the `schema` feature (`scripts/test` passes it):
/// without it, say so out loud rather than pass in silence.
#[cfg(not(feature = "schema"))]
#[test]
fn shipped_schemas_are_checked_with_the_schema_feature() {
    common::host::not_applicable(
        "the shipped JSON Schemas are checked only with `--features schema`",
    );
}
mod session;
mod smoke;
mod stop;
mod traced_schema;
mod transport;
mod wire;
