//! `codexbox sandbox` and the confinement layers: capabilities, `doctor`,
//! Landlock, seccomp, the `codex sandbox` command line, and the incremental
//! deny-glob index.

#[path = "../common/mod.rs"]
mod common;

mod caps;
mod cli;
mod deny_index;
mod doctor;
mod installed_names;
mod landlock;
mod seccomp;
