//! `--proc`: a procfs for the sandbox, its kernel-global corners read-only.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::bind::{bind_mount, BindFlags};
use super::{make_dir, mount_fs, Context, Result, SetupError};

/// The `/proc` entries that reach kernel-global state, covered read-only by
/// `--proc` (bubblewrap's list).
const PROC_COVERED: [&str; 4] = ["sys", "sysrq-trigger", "irq", "bus"];

/// `--proc`: a fresh procfs in a new pid namespace, the host's bound
/// otherwise (as bubblewrap does); then the entries of [`PROC_COVERED`]
/// bound read-only over themselves, so writes fail with EROFS while reads
/// keep working.
///
/// Unlike bubblewrap, an entry is covered whenever it exists: bubblewrap
/// skips those that `access(W_OK)` reports unwritable, and `/proc/sys` is a
/// mode 0555 directory whose permission check ignores capabilities, so it
/// is always skipped, while its files only check the global euid. A root
/// caller (sandbox uid 0 mapped to host uid 0) could then write any sysctl,
/// `kernel.core_pattern` included.
pub fn mount_proc(shown: &OsStr, to: &Path, ctx: &Context) -> Result<()> {
    make_dir(to, shown, 0o755)?;
    if ctx.new_pid_namespace {
        mount_fs(
            "proc",
            to,
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV,
            "",
        )?;
    } else {
        // bubblewrap names the host's /proc relative to the setup root.
        let host = Path::new("oldroot/proc");
        bind_mount(host, to, BindFlags::default()).map_err(|err| SetupError::Bind {
            from: host.to_path_buf(),
            to: to.to_path_buf(),
            source: err,
        })?;
    }
    for corner in PROC_COVERED {
        let mut path = to.as_os_str().to_owned();
        path.push("/");
        path.push(corner);
        let path = PathBuf::from(path);
        match fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(err) => {
                return Err(SetupError::Step {
                    what: format!("Can't access {}", path.display()),
                    source: err,
                })
            }
        }
        let flags = BindFlags {
            readonly: true,
            devices: false,
        };
        bind_mount(&path, &path, flags).map_err(|err| SetupError::Bind {
            from: path.clone(),
            to: path.clone(),
            source: err,
        })?;
    }
    Ok(())
}
