//! `--dev DEST`: a fresh tmpfs holding only the harmless device nodes (bound
//! from the host `/dev`), the standard symlinks, an empty `shm`, a private
//! devpts instance with `ptmx`, and the caller's terminal as `console`.
//!
//! Everything else of the host `/dev` (disks, `/dev/mem`, …) stays out.
//! Steps and messages follow bubblewrap's `SETUP_MOUNT_DEV`.

use std::ffi::{OsStr, OsString};
use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::bind::{bind_mount, BindFlags};
use super::paths::create_file;
use super::{make_dir, mount_fs, Context, Result, SetupError};

/// Device nodes bound from the host, in bubblewrap's order.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// The standard streams, linked to `/proc/self/fd/N`.
const STDIO: [&str; 3] = ["stdin", "stdout", "stderr"];

/// `path` + `/` + `name`, as bytes.
fn join(path: &OsStr, name: &str) -> PathBuf {
    let mut joined = path.to_owned();
    joined.push("/");
    joined.push(name);
    PathBuf::from(joined)
}

fn step(what: String) -> impl FnOnce(io::Error) -> SetupError {
    move |source| SetupError::Step { what, source }
}

fn shown_with(shown: &OsStr, name: &str) -> String {
    join(shown, name).display().to_string()
}

pub fn mount_dev(shown: &OsStr, to: &Path, ctx: &Context) -> Result<()> {
    make_dir(to, shown, 0o755)?;
    mount_fs(
        "tmpfs",
        to,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=0755",
    )?;
    let to_os = to.as_os_str();
    let devices = BindFlags {
        readonly: false,
        devices: true,
    };
    for device in DEVICES {
        let node = join(to_os, device);
        let host = join(OsStr::new("/oldroot/dev"), device);
        create_file(&node, 0o444).map_err(step(format!(
            "Can't create file {}",
            shown_with(shown, device)
        )))?;
        bind_node(&host, &node, devices)?;
    }
    for (fd, name) in STDIO.iter().enumerate() {
        std::os::unix::fs::symlink(format!("/proc/self/fd/{fd}"), join(to_os, name)).map_err(
            step(format!("Can't create symlink {}", shown_with(shown, name))),
        )?;
    }
    for (name, target) in [("fd", "/proc/self/fd"), ("core", "/proc/kcore")] {
        let link = join(to_os, name);
        std::os::unix::fs::symlink(target, &link)
            .map_err(step(format!("Can't create symlink {}", link.display())))?;
    }
    let (pts, shm) = (join(to_os, "pts"), join(to_os, "shm"));
    DirBuilder::new()
        .mode(0o755)
        .create(&shm)
        .map_err(step(format!("Can't create {}", shown_with(shown, "shm"))))?;
    DirBuilder::new()
        .mode(0o755)
        .create(&pts)
        .map_err(step(format!(
            "Can't create {}",
            shown_with(shown, "devpts")
        )))?;
    mount_fs(
        "devpts",
        &pts,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=620",
    )?;
    std::os::unix::fs::symlink("pts/ptmx", join(to_os, "ptmx")).map_err(|source| {
        SetupError::Symlink {
            path: join(shown, "ptmx").into_os_string(),
            source,
        }
    })?;
    if let Some(tty) = ctx
        .host_tty
        .as_deref()
        .filter(|tty| !tty.as_os_str().is_empty())
    {
        let mut host = OsString::from("/oldroot");
        host.push(tty.as_os_str());
        let console = join(to_os, "console");
        create_file(&console, 0o444)
            .map_err(step(format!("creating {}", shown_with(shown, "console"))))?;
        bind_node(Path::new(&host), &console, devices)?;
    }
    Ok(())
}

fn bind_node(host: &Path, node: &Path, flags: BindFlags) -> Result<()> {
    bind_mount(host, node, flags).map_err(|err| SetupError::Bind {
        from: host.to_path_buf(),
        to: node.to_path_buf(),
        source: err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn names_are_joined_as_bytes() {
        assert_eq!(
            join(OsStr::new("/newroot/dev"), "null")
                .as_os_str()
                .as_bytes(),
            b"/newroot/dev/null"
        );
        assert_eq!(shown_with(OsStr::new("/dev"), "shm"), "/dev/shm");
    }
}
