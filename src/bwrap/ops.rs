//! The setup operations the command line is parsed into.
//!
//! Parsing (`bwrap::cli`) only appends [`SetupOp`] records; `bwrap::setup`
//! walks them in order inside the new mount namespace. Nothing here touches
//! the system. Paths are kept as given: sources are resolved on the host
//! before the pivot and destinations looked up under the new root, relative
//! ones counting from `/`.

use std::ffi::OsString;
use std::os::fd::RawFd;

/// What a bind mount may do below its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindKind {
    /// `--bind`: writable, device nodes unusable (nodev).
    ReadWrite,
    /// `--ro-bind`: read-only on every submount, nodev.
    ReadOnly,
    /// `--dev-bind`: writable, device nodes usable.
    Devices,
}

/// One operation, applied in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupOp {
    /// `--bind`, `--ro-bind`, `--dev-bind`, their `-try` forms, and
    /// `--bind-fd`/`--ro-bind-fd` (source `/proc/self/fd/N`, `fd` set).
    Bind {
        source: OsString,
        dest: OsString,
        kind: BindKind,
        /// `-try`: a missing source is skipped silently.
        allow_missing: bool,
        /// `--bind-fd`: the fd whose file the mount must be, closed after.
        fd: Option<RawFd>,
    },
    /// `--remount-ro`: make one existing mount read-only (not recursive).
    RemountRo { dest: OsString },
    /// `--proc`: a procfs for the new pid namespace (host `/proc` bound otherwise).
    Proc { dest: OsString },
    /// `--dev`: a tmpfs with the minimal device set, devpts and shm.
    Dev { dest: OsString },
    /// `--tmpfs`, with the `--perms` (default 0755) and `--size` before it.
    Tmpfs {
        dest: OsString,
        perms: u32,
        size: Option<u64>,
    },
    /// `--mqueue`.
    Mqueue { dest: OsString },
    /// `--dir`, with `--perms` (default 0755).
    Dir { dest: OsString, perms: u32 },
    /// `--symlink TARGET DEST`.
    Symlink { target: OsString, dest: OsString },
    /// `--file FD DEST`: a regular file with the fd's content (default 0666).
    File {
        fd: RawFd,
        dest: OsString,
        perms: u32,
    },
    /// `--bind-data` / `--ro-bind-data`: the fd's content (default 0600), bound.
    BindData {
        fd: RawFd,
        dest: OsString,
        readonly: bool,
        perms: u32,
    },
    /// `--chmod OCTAL PATH`.
    Chmod { dest: OsString, mode: u32 },
    /// `--hostname NAME`, set where it stands among the operations.
    SetHostname { name: OsString },
}

impl SetupOp {
    /// The destination, for the operations that have one.
    pub fn dest(&self) -> Option<&OsString> {
        match self {
            SetupOp::Bind { dest, .. }
            | SetupOp::RemountRo { dest }
            | SetupOp::Proc { dest }
            | SetupOp::Dev { dest }
            | SetupOp::Tmpfs { dest, .. }
            | SetupOp::Mqueue { dest }
            | SetupOp::Dir { dest, .. }
            | SetupOp::Symlink { dest, .. }
            | SetupOp::File { dest, .. }
            | SetupOp::BindData { dest, .. }
            | SetupOp::Chmod { dest, .. } => Some(dest),
            SetupOp::SetHostname { .. } => None,
        }
    }

    /// Whether the destination's parents are created before the operation
    /// (every operation but `--chmod` and `--hostname`).
    pub fn creates_parents(&self) -> bool {
        !matches!(self, SetupOp::Chmod { .. } | SetupOp::SetHostname { .. })
    }

    /// The mode bubblewrap keeps with the operation: what `--perms` (or the
    /// option's default) gave, 0 for options that take no `--perms`. It
    /// decides the mode of the parents created for the destination.
    pub fn perms(&self) -> u32 {
        match self {
            SetupOp::Tmpfs { perms, .. }
            | SetupOp::Dir { perms, .. }
            | SetupOp::File { perms, .. }
            | SetupOp::BindData { perms, .. } => *perms,
            SetupOp::Chmod { mode, .. } => *mode,
            _ => 0,
        }
    }

    /// The fd the operation consumes, if any.
    pub fn fd(&self) -> Option<RawFd> {
        match self {
            SetupOp::Bind { fd, .. } => *fd,
            SetupOp::File { fd, .. } | SetupOp::BindData { fd, .. } => Some(*fd),
            _ => None,
        }
    }
}

/// One environment change, applied in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvOp {
    Set(OsString, OsString),
    Unset(OsString),
    Clear,
}
