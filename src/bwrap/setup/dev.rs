//! `--dev DEST`: a fresh tmpfs holding only the harmless device nodes (bound
//! from the host `/dev`), the standard symlinks, an empty `shm`, a private
//! devpts instance with `ptmx`, and the caller's terminal as `console`.
//!
//! Everything else of the host `/dev` (disks, `/dev/mem`, …) stays out.

use std::ffi::OsStr;
use std::path::Path;

use nix::mount::MsFlags;

use super::bind::bind_mount;
use super::paths::{ensure_dir, ensure_file, newroot_path};
use super::{Context, Result, SetupError};

/// Device nodes bound from the host, in bubblewrap's order.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Symlinks created in the new `/dev`.
const LINKS: [(&str, &str); 6] = [
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("fd", "/proc/self/fd"),
    ("core", "/proc/kcore"),
    ("ptmx", "pts/ptmx"),
];

pub fn mount_dev(dest: &OsStr, ctx: &Context) -> Result<()> {
    let to = newroot_path(dest);
    ensure_dir(&to, 0o755).map_err(|err| SetupError::Mkdir {
        path: dest.to_owned(),
        source: err,
    })?;
    nix::mount::mount(
        Some("tmpfs"),
        &to,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755"),
    )
    .map_err(|errno| SetupError::Mount {
        kind: "tmpfs",
        dest: to.clone(),
        source: errno.into(),
    })?;
    for device in DEVICES {
        let node = to.join(device);
        let host = Path::new("/oldroot/dev").join(device);
        bind_node(&host, &node)?;
    }
    for (name, target) in LINKS.iter().take(5) {
        symlink(target, &to.join(name))?;
    }
    for dir in ["shm", "pts"] {
        let path = to.join(dir);
        ensure_dir(&path, 0o755).map_err(|err| SetupError::Mkdir {
            path: path.as_os_str().to_owned(),
            source: err,
        })?;
    }
    let pts = to.join("pts");
    nix::mount::mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .map_err(|errno| SetupError::Mount {
        kind: "devpts",
        dest: pts.clone(),
        source: errno.into(),
    })?;
    let (name, target) = LINKS[5];
    symlink(target, &to.join(name))?;
    if let Some(tty) = &ctx.host_tty {
        let host = Path::new("/oldroot").join(tty.strip_prefix("/").unwrap_or(tty));
        bind_node(&host, &to.join("console"))?;
    }
    Ok(())
}

fn bind_node(host: &Path, node: &Path) -> Result<()> {
    ensure_file(node, 0o444).map_err(|err| SetupError::CreateFile {
        path: node.as_os_str().to_owned(),
        source: err,
    })?;
    bind_mount(host, node, false, true).map_err(|err| SetupError::Bind {
        from: host.as_os_str().to_owned(),
        to: node.as_os_str().to_owned(),
        source: err,
    })
}

fn symlink(target: &str, link: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, link).map_err(|err| SetupError::Symlink {
        path: link.as_os_str().to_owned(),
        source: err,
    })
}
