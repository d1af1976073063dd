//! The front ends for people (`exec`, `attach`, `ps`, `cp`), the
//! command-line convention of every mode, and the fleet manifests and image.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod cp;
mod detach;
mod docs;
mod exec;
mod image;
mod manifests;
mod remote_text;
mod stop;
mod tty;
