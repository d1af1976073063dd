//! What can fail while a command is started in a reused sandbox, before
//! it runs (`super::launch`, `super::mounts`), and the stderr line that
//! says so in the words of the one-shot sandbox's part that would have
//! failed.

use std::io;
use std::path::PathBuf;

use crate::bwrap::namespaces;
use crate::sandbox::cli::PREFIX;
use crate::sandbox::inner::InnerError;

/// A step that failed before the command ran.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot enter the prepared sandbox ({what}): {source}")]
    Enter {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Seccomp(#[from] crate::sandbox::seccomp::SeccompError),
    #[error(transparent)]
    Namespace(#[from] namespaces::NamespaceError),
    #[error("cannot {what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("cannot mount {what} on {}: {source}", .dest.display())]
    Mount {
        what: &'static str,
        dest: PathBuf,
        #[source]
        source: io::Error,
    },
    /// What the inner stage of a one-shot sandbox says (confinement,
    /// seccomp, exec), with its words.
    #[error(transparent)]
    Inner(#[from] InnerError),
    /// What the launcher of a one-shot sandbox says (the working
    /// directory, the parent-death signal), with its words.
    #[error(transparent)]
    Launcher(#[from] crate::bwrap::BwrapError),
}

impl LaunchError {
    /// The stderr line, prefixed as the one-shot sandbox's part that would
    /// have failed prefixes it.
    pub fn line(&self) -> String {
        match self {
            LaunchError::Launcher(err) => format!("bwrap: {err}"),
            other => format!("{PREFIX}: {other}"),
        }
    }
}
