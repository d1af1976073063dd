//! Attacks on the sandbox and the server: every launcher (system bubblewrap,
//! built-in bwrap, Landlock) against escapes through the filesystem, the
//! kernel, the built-in launcher itself, the processes the sandbox starts
//! for its own purposes, the server's methods, and the network proxy's
//! reading of destinations; and other local processes against codexbox's
//! local listeners.

#[path = "../common/mod.rs"]
mod common;

mod builtin;
mod fs;
mod helpers;
mod kernel;
mod landlock_escape;
mod listeners;
mod planted_links;
mod proxy;
mod sandbox_escape;
mod server;
