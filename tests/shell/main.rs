//! The front ends for people (`exec`, `attach`, `cp`) and the fleet
//! manifests and image.

#[path = "../common/mod.rs"]
mod common;

mod cp;
mod exec;
mod image;
mod manifests;
mod remote_text;
mod tty;
