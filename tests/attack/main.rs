//! Attacks on every boundary codexbox keeps, one file per boundary: the
//! sandbox under every launcher (system bubblewrap, built-in bwrap,
//! Landlock) through the filesystem, the kernel, the built-in launcher and
//! the processes the sandbox starts for its own purposes; the server's
//! methods; the network proxy's reading of destinations; the local
//! listeners; and the rendezvous against denial of service.

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
mod rendezvous;
mod reuse;
mod sandbox_escape;
mod server;
