//! Where the running binary lives, how it re-executes itself in another
//! mode (the sandbox helper, the filesystem helper), and its private
//! runtime directory. No helper symlink directory is needed: `argv[0]` is set
//! on the spawned process.
//!
//! The private directory ([`private_dir`]) holds the sandbox's state and
//! the tokens of local listeners: `/run/codexbox` for root, else
//! `$XDG_RUNTIME_DIR/codexbox`, else `~/.cache/codexbox`, else
//! `/tmp/codexbox-<uid>`, the first that is a real directory owned by the
//! caller with mode 0700 (checked with `lstat`, never followed through a
//! symlink). The sandbox hides it, so a sandboxed command can neither read
//! nor plant anything there.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
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

    /// A command that runs the Linux sandbox helper (`argv[0]` `codex-linux-sandbox`).
    pub fn linux_sandbox_command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(self.linux_sandbox_exe());
        cmd.arg0(LINUX_SANDBOX_ARG0);
        cmd
    }

    /// A command that runs the filesystem helper (`argv[0]` `codex-fs-helper`).
    pub fn fs_helper_command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&self.codex_self_exe);
        cmd.arg0(FS_HELPER_ARG0);
        cmd
    }
}

/// No candidate for the private directory could be used.
#[derive(Debug, thiserror::Error)]
#[error("no usable private state directory (tried {tried}; each must be a directory owned by uid {uid} with mode 0700)")]
pub struct NoPrivateDir {
    tried: String,
    uid: u32,
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The environment that chooses the private directory: `$XDG_RUNTIME_DIR`
/// and `$HOME`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PrivateDirEnv {
    pub xdg_runtime_dir: Option<OsString>,
    pub home: Option<OsString>,
}

impl PrivateDirEnv {
    /// This process's.
    pub fn of_process() -> PrivateDirEnv {
        PrivateDirEnv {
            xdg_runtime_dir: std::env::var_os("XDG_RUNTIME_DIR"),
            home: std::env::var_os("HOME"),
        }
    }
}

/// Candidate locations, best first.
fn candidates(env: &PrivateDirEnv) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let uid = euid();
    if uid == 0 {
        out.push(PathBuf::from("/run/codexbox"));
    }
    if let Some(x) = env.xdg_runtime_dir.as_ref().map(PathBuf::from) {
        if x.is_absolute() {
            out.push(x.join("codexbox"));
        }
    }
    if let Some(h) = env.home.as_ref().map(PathBuf::from) {
        if h.is_absolute() {
            out.push(h.join(".cache").join("codexbox"));
        }
    }
    out.push(PathBuf::from(format!("/tmp/codexbox-{uid}")));
    out
}

/// True when `dir` is a directory (not a symlink) owned by us, mode 0700.
pub(crate) fn is_private_dir(dir: &Path) -> bool {
    match dir.symlink_metadata() {
        Ok(m) => m.file_type().is_dir() && m.uid() == euid() && m.mode() & 0o077 == 0,
        Err(_) => false,
    }
}

/// The private runtime directory, created on first use.
pub fn private_dir() -> Result<PathBuf, NoPrivateDir> {
    private_dir_in(&PrivateDirEnv::of_process())
}

/// The private runtime directory of a process whose environment is `env`.
pub fn private_dir_in(env: &PrivateDirEnv) -> Result<PathBuf, NoPrivateDir> {
    let mut tried = Vec::new();
    for dir in candidates(env) {
        if let Some(parent) = dir.parent() {
            if !parent.is_dir() {
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent);
            }
        }
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        if is_private_dir(&dir) {
            return Ok(dir);
        }
        tried.push(dir.display().to_string());
    }
    Err(NoPrivateDir {
        tried: tried.join(", "),
        uid: euid(),
    })
}
