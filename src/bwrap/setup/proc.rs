//! `--proc`: a procfs for the sandbox, its kernel-global corners read-only.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::Path;

use nix::mount::MsFlags;

use super::bind::bind_mount;
use super::paths::{ensure_dir, newroot_path};
use super::{mount_fs, Context, Result, SetupError};

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
pub fn mount_proc(dest: &OsStr, ctx: &Context) -> Result<()> {
    let to = newroot_path(dest);
    ensure_dir(&to, 0o755).map_err(|err| SetupError::Mkdir {
        path: dest.to_owned(),
        source: err,
    })?;
    if ctx.new_pid_namespace {
        mount_fs(
            "proc",
            &to,
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_NODEV,
            "",
        )?;
    } else {
        bind_mount(Path::new("/oldroot/proc"), &to, false, false).map_err(|err| {
            SetupError::Mount {
                kind: "proc",
                dest: to.clone(),
                source: err,
            }
        })?;
    }
    for corner in PROC_COVERED {
        let path = to.join(corner);
        match fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => {
                return Err(SetupError::Mount {
                    kind: "proc",
                    dest: path,
                    source: err,
                })
            }
        }
        bind_mount(&path, &path, true, false).map_err(|err| SetupError::Bind {
            from: path.as_os_str().to_owned(),
            to: path.as_os_str().to_owned(),
            source: err,
        })?;
    }
    Ok(())
}
