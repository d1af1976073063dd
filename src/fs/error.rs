//! The error of a filesystem operation and its JSON-RPC code
//! (docs/filesystem.md): NotFound → ‑32004, PermissionDenied/InvalidInput → ‑32600,
//! any other I/O error → ‑32603; the message is the I/O error's text.
//! Paths an operation refuses to act on (see [`super::entry`]) are ‑32600
//! with a message naming the path.

use std::io;
use std::path::PathBuf;

/// JSON-RPC code: invalid request.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC code: invalid params.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC code: internal error.
pub const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC code: not found.
pub const NOT_FOUND: i64 = -32004;

/// A failed filesystem operation.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// An OS error; its code follows its kind.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// A request the operation refuses (‑32600).
    #[error("{0}")]
    InvalidRequest(String),
    /// Params that do not decode (‑32602).
    #[error("{0}")]
    InvalidParams(String),
    /// A path this host cannot use (a non-native URI, a relative path):
    /// the fs family's path error code.
    #[error("{0}")]
    InvalidPath(#[from] crate::protocol::PathError),
    /// Something missing that is not an OS NotFound (‑32004).
    #[error("{0}")]
    NotFound(String),
    /// Anything else (‑32603).
    #[error("{0}")]
    Internal(String),
    /// The path is `/` (‑32600). `op` is the method, e.g. `fs/remove`.
    #[error("{op} refuses `{}`: it names the root directory", .path.display())]
    RootDirectory { op: &'static str, path: PathBuf },
    /// The path's last component is `.` or `..` (‑32600).
    #[error("{op} refuses `{}`: its last component is `.` or `..`", .path.display())]
    DotComponent { op: &'static str, path: PathBuf },
    /// The path ends in `/` and its last component is a symlink, so it names
    /// whatever the link points to (‑32600).
    #[error(
        "{op} refuses `{}`: the trailing `/` names what the symlink `{}` points to, and {op} does not go through symlinks",
        .path.display(), .link.display()
    )]
    ThroughSymlink {
        op: &'static str,
        path: PathBuf,
        link: PathBuf,
    },
    /// An entry the operation would create or overwrite is a symlink (‑32600).
    #[error("{op} refuses to write `{}`: it is a symlink, and {op} does not write through symlinks", .path.display())]
    SymlinkInTheWay { op: &'static str, path: PathBuf },
    /// The path ends in `/` but what would be created there is not a
    /// directory (‑32600).
    #[error("{op} refuses `{}`: a path ending in `/` names a directory, and the source is not one", .path.display())]
    TrailingSlash { op: &'static str, path: PathBuf },
}

impl From<nix::errno::Errno> for FsError {
    fn from(errno: nix::errno::Errno) -> Self {
        FsError::Io(errno.into())
    }
}

/// A result of a filesystem operation.
pub type Result<T> = std::result::Result<T, FsError>;

impl FsError {
    /// An error with an explicit code, e.g. one relayed from a fs-helper.
    pub fn from_code(code: i64, message: String) -> Self {
        match code {
            NOT_FOUND => FsError::NotFound(message),
            INVALID_REQUEST => FsError::InvalidRequest(message),
            INVALID_PARAMS => FsError::InvalidParams(message),
            _ => FsError::Internal(message),
        }
    }

    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        match self {
            FsError::Io(err) => match err.kind() {
                io::ErrorKind::NotFound => NOT_FOUND,
                io::ErrorKind::PermissionDenied | io::ErrorKind::InvalidInput => INVALID_REQUEST,
                _ => INTERNAL_ERROR,
            },
            FsError::InvalidRequest(_) => INVALID_REQUEST,
            FsError::InvalidParams(_) => INVALID_PARAMS,
            FsError::InvalidPath(_) => crate::protocol::RequestFamily::Filesystem.path_error_code(),
            FsError::NotFound(_) => NOT_FOUND,
            FsError::Internal(_) => INTERNAL_ERROR,
            FsError::RootDirectory { .. }
            | FsError::DotComponent { .. }
            | FsError::ThroughSymlink { .. }
            | FsError::SymlinkInTheWay { .. }
            | FsError::TrailingSlash { .. } => INVALID_REQUEST,
        }
    }

    /// The code a helper's answer keeps: ‑32004 and ‑32600 survive, the rest
    /// fold into ‑32603, as the reference's helper does.
    pub fn helper_code(&self) -> i64 {
        match self.code() {
            code @ (NOT_FOUND | INVALID_REQUEST) => code,
            _ => INTERNAL_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_kinds_map_to_the_reference_codes() {
        let code = |kind| FsError::Io(io::Error::from(kind)).code();
        assert_eq!(code(io::ErrorKind::NotFound), -32004);
        assert_eq!(code(io::ErrorKind::PermissionDenied), -32600);
        assert_eq!(code(io::ErrorKind::InvalidInput), -32600);
        assert_eq!(code(io::ErrorKind::AlreadyExists), -32603);
        let err = FsError::Io(io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(err.to_string(), "No such file or directory (os error 2)");
    }
}
