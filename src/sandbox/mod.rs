//! The Linux sandbox: policy model, bubblewrap argv, launcher selection, seccomp, Landlock, and the `linux-sandbox`, `sandbox` and `doctor` front ends.
pub mod bwrap_args;
pub mod cli;
pub mod debug;
pub mod doctor;
pub mod glob;
pub mod inner;
pub mod landlock;
pub mod launcher;
pub mod policy;
pub mod probe;
pub mod proxy_routing;
pub mod read_only_links;
pub mod route_bridges;
pub mod routed_netns;
pub mod run;
pub mod seccomp;
pub mod state;
