//! codexbox: one Linux executable that lets an agent or any program run
//! commands and touch files on a machine, safely and remotely.
//!
//! The binary is a multi-call program ([`arg0`]) with these modes:
//! - `exec-server` ([`server`]): JSON-RPC over WebSocket, stdio or a Unix
//!   socket, managing processes ([`process`]) and files ([`fs`]);
//! - `linux-sandbox` ([`sandbox`]): runs one command under bubblewrap (or
//!   Landlock), no_new_privs and seccomp;
//! - `bwrap` ([`bwrap`]): a bubblewrap-compatible launcher in Rust;
//! - `fs-helper` ([`fs_helper`]): the sandboxed filesystem worker;
//! - `sandbox` and `doctor` ([`sandbox`]): for people debugging a policy or a host.
//!
//! The library surface: [`protocol`] types, [`client::ExecServerClient`],
//! [`server::run_main`] and the sandbox policy types in [`sandbox::policy`].

pub mod arg0;
pub mod bwrap;
pub mod client;
pub mod fs;
pub mod fs_helper;
pub mod logging;
pub mod process;
pub mod protocol;
pub mod runtime_paths;
pub mod sandbox;
pub mod server;
