//! The two `pivot_root`s around the setup: into a private tmpfs holding
//! `/oldroot` (the host tree) and `/newroot` (the sandbox's tree), and, once
//! every operation is applied, into `/newroot` with everything else detached.

use std::io;
use std::path::Path;

use nix::mount::{MntFlags, MsFlags};

use super::paths::mkdir_one;
use crate::sys::errno_text;

/// A root step that failed; `Display` is bubblewrap's wording.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {}", errno_text(.source))]
pub struct PivotError {
    step: &'static str,
    #[source]
    source: io::Error,
}

pub type Result<T, E = PivotError> = std::result::Result<T, E>;

const BASE: &str = "/tmp";

fn root_step(step: &'static str) -> impl FnOnce(nix::errno::Errno) -> PivotError {
    move |errno| PivotError {
        step,
        source: errno.into(),
    }
}

/// Step 1: slave `/`, tmpfs on `/tmp`, pivot into it.
pub fn prepare_root() -> Result<()> {
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(root_step("Failed to make / slave"))?;
    nix::mount::mount(
        Some("tmpfs"),
        BASE,
        Some("tmpfs"),
        MsFlags::MS_NODEV | MsFlags::MS_NOSUID,
        None::<&str>,
    )
    .map_err(root_step("Failed to mount tmpfs"))?;
    nix::unistd::chdir(BASE).map_err(root_step("chdir base_path"))?;
    mkdir_one(Path::new("newroot"), 0o755).map_err(|source| PivotError {
        step: "Creating newroot failed",
        source,
    })?;
    nix::mount::mount(
        Some("newroot"),
        "newroot",
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(root_step("setting up newroot bind"))?;
    mkdir_one(Path::new("oldroot"), 0o755).map_err(|source| PivotError {
        step: "Creating oldroot failed",
        source,
    })?;
    nix::unistd::pivot_root(BASE, "oldroot").map_err(root_step("pivot_root"))?;
    nix::unistd::chdir("/").map_err(root_step("chdir / (base path)"))?;
    Ok(())
}

/// Step 3: detach the host tree and make `/newroot` the root.
pub fn finish_root() -> Result<()> {
    nix::mount::mount(
        Some("oldroot"),
        "/oldroot",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(root_step("Failed to make old root rprivate"))?;
    nix::mount::umount2("/oldroot", MntFlags::MNT_DETACH).map_err(root_step("unmount old root"))?;
    nix::unistd::chdir("/newroot").map_err(root_step("chdir /newroot"))?;
    nix::unistd::pivot_root(".", ".").map_err(root_step("pivot_root(/newroot)"))?;
    nix::mount::umount2(".", MntFlags::MNT_DETACH).map_err(root_step("unmount old root"))?;
    nix::unistd::chdir("/").map_err(root_step("chdir /"))?;
    Ok(())
}
