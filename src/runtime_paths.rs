//! Where the running binary lives, and how it re-executes itself in another
//! mode (the sandbox helper, the filesystem helper). No helper symlink
//! directory is needed: argv[0] is set on the spawned process.

use std::path::PathBuf;
use std::process::Command;

use crate::mode::{FS_HELPER_ARG0, LINUX_SANDBOX_ARG0};

/// The running executable (`/proc/self/exe`, resolved once per process).
pub fn self_exe() -> std::io::Result<&'static std::path::Path> {
    static EXE: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    EXE.get_or_init(|| std::env::current_exe().ok())
        .as_deref()
        .ok_or_else(|| std::io::Error::other("/proc/self/exe cannot be resolved"))
}

/// Paths the server needs to spawn its own helper modes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecServerRuntimePaths {
    /// The codexbox executable itself (absolute).
    pub codex_self_exe: PathBuf,
    /// The executable run as `codex-linux-sandbox`; `None` = the same binary.
    pub codex_linux_sandbox_exe: Option<PathBuf>,
}

impl ExecServerRuntimePaths {
    /// The paths of the running binary (`/proc/self/exe`, resolved).
    pub fn current() -> std::io::Result<Self> {
        Ok(Self {
            codex_self_exe: self_exe()?.to_path_buf(),
            codex_linux_sandbox_exe: None,
        })
    }

    /// The executable that runs the Linux sandbox helper.
    pub fn linux_sandbox_exe(&self) -> &std::path::Path {
        self.codex_linux_sandbox_exe
            .as_deref()
            .unwrap_or(&self.codex_self_exe)
    }

    /// The directories of the executables a helper or sandboxed process
    /// needs to read (this binary and the sandbox helper).
    pub fn exe_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for exe in [self.codex_self_exe.as_path(), self.linux_sandbox_exe()] {
            if let Some(dir) = exe.parent() {
                if !dirs.iter().any(|d| d == dir) {
                    dirs.push(dir.to_path_buf());
                }
            }
        }
        dirs
    }

    /// A command that runs the Linux sandbox helper (argv[0] `codex-linux-sandbox`).
    pub fn linux_sandbox_command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(self.linux_sandbox_exe());
        cmd.arg0(LINUX_SANDBOX_ARG0);
        cmd
    }

    /// A command that runs the filesystem helper (argv[0] `codex-fs-helper`).
    pub fn fs_helper_command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&self.codex_self_exe);
        cmd.arg0(FS_HELPER_ARG0);
        cmd
    }
}
