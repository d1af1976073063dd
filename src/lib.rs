//! codexbox: one Linux executable that lets an agent or any program run
//! commands and touch files on a machine, safely and remotely.
//!
//! The binary is a multi-call program with these modes: `exec-server`
//! (JSON-RPC over WebSocket, stdio or a Unix socket, managing processes and
//! files), `linux-sandbox` (one command under bubblewrap or Landlock,
//! no_new_privs and seccomp), `bwrap` (a bubblewrap-compatible launcher),
//! `fs-helper` (the sandboxed filesystem worker), `sandbox` and `doctor`
//! (for people debugging a policy or a host), `proxy` (the network proxy
//! that enforces destination allowlists), `rendezvous` and `connect`
//! (remote mode's registry and relay, and a local bridge to a remote
//! executor), and `exec`, `attach`, `ps` and `cp` (a remote shell for
//! people). `docs/architecture.md` describes how the modules are layered.
//!
//! The library surface: the [`protocol`] types (with paths on the wire in
//! [`wire_path`]), [`client::ExecServerClient`], the server's entry points
//! ([`server::run_main`], [`server::bind`]) with the paths it re-executes
//! ([`runtime_paths`]), and the sandbox policy types in [`policy`]. The
//! JSON Schema of every message ships in `resources/schema/`, generated
//! from the protocol types by `protocol::schema::files` (built with the
//! `schema` feature). The modules marked hidden below are internal: public
//! only so the tests, benchmarks and examples of this crate can reach
//! them, with no stability promise.
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

// The library surface.
pub mod client;
pub mod policy;
pub mod protocol;
pub mod runtime_paths;
pub mod server;
pub mod wire_path;

/// The binary's entry point: runs the mode argv names, returns its status.
pub use arg0::dispatch;

// Internal, reached by this crate's tests, benchmarks and examples.
#[doc(hidden)]
pub mod backoff;
#[doc(hidden)]
pub mod bwrap;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod commands;
#[doc(hidden)]
pub mod fs;
#[doc(hidden)]
pub mod fs_helper;
#[doc(hidden)]
pub mod glob_pattern;
#[doc(hidden)]
pub mod listener_token;
#[doc(hidden)]
pub mod net;
#[doc(hidden)]
pub mod process;
#[doc(hidden)]
pub mod relay;
#[doc(hidden)]
pub mod rendezvous;
#[doc(hidden)]
pub mod sandbox;
#[doc(hidden)]
pub mod sys;
#[doc(hidden)]
pub mod terminal_text;

// Internal.
pub(crate) mod accept;
pub(crate) mod arg0;
pub(crate) mod connect;
pub(crate) mod install_links;
pub(crate) mod link;
pub(crate) mod logging;
pub(crate) mod metrics;
pub(crate) mod mode;
pub(crate) mod shell;
pub(crate) mod shutdown;
pub(crate) mod startup;
pub(crate) mod stdout;
pub(crate) mod sync;
pub(crate) mod web_url;
pub(crate) mod wire;
