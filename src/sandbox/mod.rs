//! The Linux sandbox: enforcing a policy (`crate::policy`) on one command.
//!
//! - the `linux-sandbox` mode: [`cli`] (its command line), `orchestrate`
//!   (what one command line runs: the backend, `--explain`), `run` (the
//!   outer stage: fork, wait, cleanup) and `inner` (the stage inside the
//!   namespaces that confines and execs the command);
//! - the bubblewrap backend: `bwrap_args` (the argv), `launcher` (which
//!   bubblewrap, and what it supports), [`probe`] (host facts, cached) and
//!   [`state`] (the capability cache and the registry of mount points);
//! - reused sandboxes: `warm` (namespaces prepared once per shape by a
//!   keeper, each command launched into them after the same decision a
//!   one-shot run makes);
//! - what a policy needs on the host: [`glob`] and [`deny_index`] (the
//!   paths deny globs match, once or kept current), `read_only_links`
//!   (refusing planted workspace metadata);
//! - confinement: [`seccomp`] (the filter) and [`landlock`] (the backend
//!   without user namespaces);
//! - managed network routing: `proxy_routing` (the proxy URLs rewritten
//!   to the bridges, the host side, the inner network namespace),
//!   `routed_netns` (the namespace made before the launcher runs) and
//!   `route_bridges` (the bridges served from outside);
//! - the modes for people: [`debug`] (`codexbox sandbox`) and `doctor`.
pub(crate) mod bwrap_args;
pub mod cli;
pub mod debug;
pub mod deny_index;
pub(crate) mod doctor;
pub mod glob;
pub(crate) mod inner;
pub mod landlock;
pub(crate) mod launcher;
pub(crate) mod orchestrate;
pub mod probe;
pub(crate) mod proxy_routing;
pub(crate) mod read_only_links;
pub(crate) mod route_bridges;
pub(crate) mod routed_netns;
pub(crate) mod run;
pub mod seccomp;
pub mod state;
pub(crate) mod warm;
