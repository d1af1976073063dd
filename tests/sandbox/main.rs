//! `codexbox sandbox` and the confinement layers: capabilities, `doctor`,
//! Landlock, seccomp and the `codex sandbox` command line.

#[path = "../common/mod.rs"]
mod common;

mod caps;
mod cli;
mod doctor;
mod installed_names;
mod landlock;
mod seccomp;
