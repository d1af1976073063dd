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
//! - `sandbox` and `doctor` ([`sandbox`]): for people debugging a policy or a host;
//! - `proxy` ([`net`]): the network proxy that enforces destination allowlists.
//! - `rendezvous` ([`rendezvous`]) and `connect` ([`connect`]): remote mode's
//!   registry and relay, and a local bridge to a remote executor; the
//!   executor side and the wire ([`relay`]) serve `exec-server --remote`;
//! - `exec`, `attach`, `ps` and `cp` ([`shell`]): a remote shell for people.
//!
//! The library surface: [`protocol`] types, [`client::ExecServerClient`],
//! [`server::run_main`] and the sandbox policy types in [`policy`].
//! The JSON Schema of every message ships in `resources/schema/`, generated
//! from the protocol types by [`protocol::schema::files`].
//!
//! Embedding the server and driving it:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use codexbox::client::{ConnectOptions, ExecServerClient, StartParams};
//! use codexbox::server::{run_main, ListenUrl};
//!
//! let paths = codexbox::runtime_paths::ExecServerRuntimePaths::current()?;
//! tokio::spawn(run_main(paths, ListenUrl::Unix("/tmp/exec.sock".into())));
//! let client =
//!     ExecServerClient::connect_and_initialize(ConnectOptions::new("unix:///tmp/exec.sock"), "me")
//!         .await?;
//! client.process_start(&StartParams::new("p1", ["echo", "hi"])).await?;
//! # Ok(())
//! # }
//! ```

pub mod accept;
pub mod arg0;
pub mod backoff;
pub mod bwrap;
pub mod cli;
pub mod client;
pub mod commands;
pub mod connect;
pub mod fs;
pub mod fs_helper;
pub mod glob_pattern;
pub mod install_links;
pub mod link;
pub mod listener_token;
pub mod logging;
pub mod metrics;
pub mod mode;
pub mod net;
pub mod policy;
pub mod process;
pub mod protocol;
pub mod relay;
pub mod rendezvous;
pub mod runtime_paths;
pub mod sandbox;
pub mod server;
pub mod shell;
pub mod shutdown;
pub mod startup;
pub mod stdout;
pub mod sync;
pub mod sys;
pub mod terminal_text;
pub mod wire;
pub mod wire_path;
