//! Low-level Linux process primitives shared by the sandbox ([`crate::sandbox`])
//! and the built-in bubblewrap ([`crate::bwrap`]): capabilities, securebits,
//! no_new_privs and the session keyring ([`confine`]), raw file
//! descriptors (`fds`) and passing them over sockets (`scm`), signal
//! dispositions (`signals`), network namespaces (`netns`), and the
//! one search for a program on `PATH` (`program`).
//!
//! This module depends on neither of its users: dependencies run one way,
//! `sandbox → sys` and `bwrap → sys`. It holds system calls and their error
//! handling only, no policy.

pub mod confine;
pub(crate) mod fds;
pub(crate) mod netns;
pub(crate) mod program;
pub(crate) mod scm;
pub(crate) mod signals;

use std::io;

/// The C library's text for an errno (`strerror`), without Rust's
/// " (os error N)" suffix; other errors as they display.
pub fn errno_text(err: &io::Error) -> String {
    let text = err.to_string();
    match (err.raw_os_error(), text.rfind(" (os error ")) {
        (Some(_), Some(cut)) => text.get(..cut).unwrap_or(&text).to_owned(),
        _ => text,
    }
}
