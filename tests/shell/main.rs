//! The front ends for people (`exec`, `attach`, `ps`, `cp`) and the fleet
//! manifests and image.

#[path = "../common/mod.rs"]
mod common;

mod cp;
mod detach;
mod exec;
mod image;
mod manifests;
mod remote_text;
mod stop;
mod tty;
