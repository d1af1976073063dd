//! The network allowlist: `codexbox proxy`, sandboxed commands routed
//! through it, the server's `networkProxy` and `http/request`.

#[path = "../common/mod.rs"]
mod common;

mod embedded;
mod exec_server;
mod http_request;
mod proxy;
mod sandbox;
