//! The setup operations the command line is parsed into.
//!
//! Parsing (`bwrap::cli`) only appends [`SetupOp`] records; `bwrap::setup`
//! walks them in order inside the new mount namespace. Nothing here touches
//! the system. Paths are kept as given: sources are later looked up under the
//! old root and destinations under the new root, both relative to `/`.

use std::ffi::OsString;
use std::os::fd::RawFd;

/// One filesystem operation, applied in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupOp {
    /// `--bind`, `--ro-bind`, `--dev-bind` and their `-try` forms.
    Bind {
        source: OsString,
        dest: OsString,
        readonly: bool,
        devices: bool,
        /// `-try`: a missing source is skipped silently.
        allow_missing: bool,
    },
    /// `--bind-fd` / `--ro-bind-fd`: bind what an open fd refers to.
    BindFd {
        fd: RawFd,
        dest: OsString,
        readonly: bool,
    },
    /// `--remount-ro`: make one existing mount read-only (not recursive).
    RemountRo { dest: OsString },
    /// `--proc`: a procfs for the new pid namespace (host `/proc` bound otherwise).
    Proc { dest: OsString },
    /// `--dev`: a tmpfs with the minimal device set, devpts and shm.
    Dev { dest: OsString },
    /// `--tmpfs`, with the `--perms` and `--size` given before it.
    Tmpfs {
        dest: OsString,
        perms: Option<u32>,
        size: Option<u64>,
    },
    /// `--mqueue`.
    Mqueue { dest: OsString },
    /// `--dir`, with `--perms` if given.
    Dir { dest: OsString, perms: Option<u32> },
    /// `--symlink TARGET DEST`.
    Symlink { target: OsString, dest: OsString },
    /// `--file FD DEST`: a regular file with the fd's content.
    File {
        fd: RawFd,
        dest: OsString,
        perms: Option<u32>,
    },
    /// `--bind-data` / `--ro-bind-data`: the fd's content, bind-mounted.
    BindData {
        fd: RawFd,
        dest: OsString,
        readonly: bool,
        perms: Option<u32>,
    },
    /// `--chmod OCTAL PATH`.
    Chmod { dest: OsString, mode: u32 },
}

impl SetupOp {
    /// Whether `--perms` may precede this operation.
    pub fn takes_perms(&self) -> bool {
        matches!(
            self,
            SetupOp::Tmpfs { .. }
                | SetupOp::Dir { .. }
                | SetupOp::File { .. }
                | SetupOp::BindData { .. }
        )
    }
}

/// One environment change, applied in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvOp {
    Set(OsString, OsString),
    Unset(OsString),
    Clear,
}
