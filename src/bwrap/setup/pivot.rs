//! The two `pivot_root`s around the setup: into a private tmpfs holding
//! `/oldroot` (the host tree) and `/newroot` (the sandbox's tree), and, once
//! every operation is applied, into `/newroot` with everything else detached.

use std::ffi::OsString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use nix::mount::{MntFlags, MsFlags};

use super::mount_strerror;
use crate::sys::errno_text;

/// A root step that failed; `Display` is bubblewrap's wording.
#[derive(Debug, thiserror::Error)]
pub enum PivotError {
    #[error("{step}: {}", errno_text(.source))]
    Call {
        step: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{step}: {}", mount_strerror(.source))]
    Mount {
        step: &'static str,
        #[source]
        source: io::Error,
    },
}

pub type Result<T, E = PivotError> = std::result::Result<T, E>;

/// The setup tmpfs is mounted here, a path that surely exists and that the
/// setup never needs itself.
const BASE: &str = "/tmp";

fn call(step: &'static str) -> impl FnOnce(nix::errno::Errno) -> PivotError {
    move |errno| PivotError::Call {
        step,
        source: errno.into(),
    }
}

fn mount(step: &'static str) -> impl FnOnce(nix::errno::Errno) -> PivotError {
    move |errno| PivotError::Mount {
        step,
        source: errno.into(),
    }
}

fn mkdir(path: &str, step: &'static str) -> Result<()> {
    nix::unistd::mkdir(path, nix::sys::stat::Mode::from_bits_truncate(0o755)).map_err(call(step))
}

/// Step 1: slave `/`, tmpfs on `/tmp`, pivot into it. Returns the caller's
/// working directory as `get_current_dir_name` sees it at that moment
/// (`$PWD` when it names the same directory, else the resolved path).
pub fn prepare_root() -> Result<Option<OsString>> {
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_SILENT | MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(mount("Failed to make / slave"))?;
    nix::mount::mount(
        Some("tmpfs"),
        BASE,
        Some("tmpfs"),
        MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
        None::<&str>,
    )
    .map_err(mount("Failed to mount tmpfs"))?;
    let old_cwd = current_dir_name();
    nix::unistd::chdir(BASE).map_err(call("chdir base_path"))?;
    mkdir("newroot", "Creating newroot failed")?;
    nix::mount::mount(
        Some("newroot"),
        "newroot",
        None::<&str>,
        MsFlags::MS_SILENT | MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(mount("setting up newroot bind"))?;
    mkdir("oldroot", "Creating oldroot failed")?;
    nix::unistd::pivot_root(BASE, "oldroot").map_err(call("pivot_root"))?;
    nix::unistd::chdir("/").map_err(call("chdir / (base path)"))?;
    Ok(old_cwd)
}

/// glibc's `get_current_dir_name`: `$PWD` if it is absolute and names the
/// working directory, otherwise `getcwd`; `None` if neither works.
fn current_dir_name() -> Option<OsString> {
    use std::os::unix::fs::MetadataExt;
    let here = std::fs::metadata(".").ok();
    if let (Some(pwd), Some(here)) = (std::env::var_os("PWD"), here) {
        let same = Path::new(&pwd).is_absolute()
            && std::fs::metadata(&pwd)
                .is_ok_and(|there| (there.dev(), there.ino()) == (here.dev(), here.ino()));
        if same {
            return Some(pwd);
        }
    }
    nix::unistd::getcwd().ok().map(|cwd| cwd.into_os_string())
}

/// Step 4: detach the host tree and make `/newroot` the root.
pub fn finish_root() -> Result<()> {
    nix::mount::mount(
        Some("oldroot"),
        "oldroot",
        None::<&str>,
        MsFlags::MS_SILENT | MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(mount("Failed to make old root rprivate"))?;
    nix::mount::umount2("oldroot", MntFlags::MNT_DETACH).map_err(call("unmount old root"))?;
    // SAFETY: the path is a NUL-terminated literal; the fd is owned below.
    let raw = unsafe {
        libc::open(
            c"/".as_ptr(),
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(PivotError::Call {
            step: "can't open /",
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: open just returned this fd; nothing else owns it.
    let old_root = unsafe { OwnedFd::from_raw_fd(raw) };
    nix::unistd::chdir("/newroot").map_err(call("chdir /newroot"))?;
    nix::unistd::pivot_root(".", ".").map_err(call("pivot_root(/newroot)"))?;
    nix::unistd::fchdir(&old_root).map_err(call("fchdir to oldroot"))?;
    nix::mount::umount2(".", MntFlags::MNT_DETACH).map_err(call("umount old root"))?;
    nix::unistd::chdir("/").map_err(call("chdir /"))?;
    Ok(())
}
