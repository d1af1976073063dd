//! The names of the binary's modes: the argv[0] basenames and subcommands
//! that select each one, and the aliases `install-links` creates. A leaf
//! module: everything that spawns this binary in another mode names it from
//! here, and only the dispatcher ([`crate::arg0`]) maps a mode to its code.

use std::ffi::OsStr;
use std::path::Path;

/// argv[0] basename that selects the exec-server.
pub const EXEC_SERVER_ARG0: &str = "codex-exec-server";
/// argv[0] basename that selects the Linux sandbox helper.
pub const LINUX_SANDBOX_ARG0: &str = "codex-linux-sandbox";
/// argv[0] basename that selects the built-in bubblewrap.
pub const BWRAP_ARG0: &str = "bwrap";
/// argv[0] basename that selects the filesystem helper.
pub const FS_HELPER_ARG0: &str = "codex-fs-helper";
/// argv[1] that selects the filesystem helper (the reference's hidden flag).
pub const FS_HELPER_ARG1: &str = "--codex-run-as-fs-helper";
/// argv[1] that selects the Linux sandbox helper: the sandbox's re-exec of
/// its own inner stage through a bubblewrap that cannot set argv[0].
pub const LINUX_SANDBOX_ARG1: &str = "--codex-run-as-linux-sandbox";

/// The aliases `install-links` creates, each a symlink to the binary.
pub const ALIASES: [&str; 4] = [
    EXEC_SERVER_ARG0,
    LINUX_SANDBOX_ARG0,
    BWRAP_ARG0,
    FS_HELPER_ARG0,
];

/// One of the binary's modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    ExecServer,
    LinuxSandbox,
    Bwrap,
    FsHelper,
    Sandbox,
    Doctor,
    InstallLinks,
    Rendezvous,
    Connect,
    Proxy,
    Exec,
    Attach,
    Ps,
    Cp,
    Completions,
}

impl Mode {
    /// Every mode, in the order help lists them.
    pub const ALL: [Mode; 15] = [
        Mode::ExecServer,
        Mode::LinuxSandbox,
        Mode::Bwrap,
        Mode::FsHelper,
        Mode::Sandbox,
        Mode::Doctor,
        Mode::InstallLinks,
        Mode::Rendezvous,
        Mode::Connect,
        Mode::Proxy,
        Mode::Exec,
        Mode::Attach,
        Mode::Ps,
        Mode::Cp,
        Mode::Completions,
    ];

    /// The subcommand name (`codexbox <name> …`).
    pub fn subcommand(self) -> &'static str {
        match self {
            Mode::ExecServer => "exec-server",
            Mode::LinuxSandbox => "linux-sandbox",
            Mode::Bwrap => "bwrap",
            Mode::FsHelper => "fs-helper",
            Mode::Sandbox => "sandbox",
            Mode::Doctor => "doctor",
            Mode::InstallLinks => "install-links",
            Mode::Rendezvous => "rendezvous",
            Mode::Connect => "connect",
            Mode::Proxy => "proxy",
            Mode::Exec => "exec",
            Mode::Attach => "attach",
            Mode::Ps => "ps",
            Mode::Cp => "cp",
            Mode::Completions => "completions",
        }
    }

    pub fn from_arg0(arg0: &OsStr) -> Option<Mode> {
        let name = Path::new(arg0).file_name()?;
        match name.to_str()? {
            EXEC_SERVER_ARG0 => Some(Mode::ExecServer),
            LINUX_SANDBOX_ARG0 => Some(Mode::LinuxSandbox),
            BWRAP_ARG0 => Some(Mode::Bwrap),
            FS_HELPER_ARG0 => Some(Mode::FsHelper),
            _ => None,
        }
    }

    /// The mode an internal argv[1] marker selects.
    pub fn from_marker(arg: &OsStr) -> Option<Mode> {
        if arg == FS_HELPER_ARG1 {
            Some(Mode::FsHelper)
        } else if arg == LINUX_SANDBOX_ARG1 {
            Some(Mode::LinuxSandbox)
        } else {
            None
        }
    }

    pub fn from_subcommand(arg: &OsStr) -> Option<Mode> {
        Mode::ALL.into_iter().find(|mode| arg == mode.subcommand())
    }
}
