//! Namespaces: the `clone` that creates them, the uid/gid maps, loopback in a
//! new network namespace, the nested user namespace the command runs in, and
//! `--disable-userns`.
//!
//! Unprivileged user namespaces only: the child maps its own uid and gid (one
//! line each, `setgroups` denied), so no setuid helper and no host capability
//! is ever used. A root caller gets a user namespace too. The setup runs in
//! that first namespace, which owns the mount namespace; the command then
//! runs in a second one nested in it, so whatever capabilities it holds never
//! reach its mounts (as bubblewrap does whenever it nests).

use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use super::cli::Unshare;
use crate::sys::errno_text;

/// A namespace step that failed; `Display` is bubblewrap's wording.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    #[error("{}", clone_message(.0))]
    Clone(#[source] io::Error),
    #[error("Cannot create new cgroup namespace because the kernel does not support it")]
    NoCgroupNamespace,
    #[error("stat on /proc/self/ns/cgroup failed: {}", errno_text(.0))]
    CgroupStat(#[source] io::Error),
    #[error("setting up uid map: {}", errno_text(.0))]
    UidMap(#[source] io::Error),
    #[error("error writing to setgroups: {}", errno_text(.0))]
    Setgroups(#[source] io::Error),
    #[error("setting up gid map: {}", errno_text(.0))]
    GidMap(#[source] io::Error),
    #[error("loopback: Failed RTM_NEWLINK: {}", errno_text(.0))]
    Loopback(#[source] io::Error),
    #[error("cannot open /proc/sys/user/max_user_namespaces: {}", errno_text(.0))]
    OpenMaxUserNamespaces(#[source] io::Error),
    #[error("sysctl user.max_user_namespaces = 1: {}", errno_text(.0))]
    WriteMaxUserNamespaces(#[source] io::Error),
    #[error("unshare user ns: {}", errno_text(.0))]
    NestedUserns(#[source] io::Error),
    #[error("creation of new user namespaces was not disabled as requested")]
    UsernsStillAllowed,
}

pub type Result<T, E = NamespaceError> = std::result::Result<T, E>;

/// bubblewrap's wording for a failed clone: callers grep for the EPERM one
/// to tell "user namespaces are not allowed here".
fn clone_message(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::EPERM) => "No permissions to create a new namespace, likely because the kernel \
             does not allow non-privileged user namespaces. On e.g. debian this can be enabled \
             with 'sysctl kernel.unprivileged_userns_clone=1'."
            .to_owned(),
        Some(libc::EINVAL) => "Creating new namespace failed, likely because the kernel does not \
             support user namespaces.  bwrap must be installed setuid on such systems."
            .to_owned(),
        Some(libc::ENOSPC) => "Creating new namespace failed: nesting depth or \
             /proc/sys/user/max_*_namespaces exceeded (ENOSPC)"
            .to_owned(),
        _ => format!("Creating new namespace failed: {}", errno_text(err)),
    }
}

/// The clone flags for what was asked; a user and mount namespace always.
pub fn clone_flags(unshare: &Unshare) -> Result<libc::c_int> {
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
    if unshare.pid {
        flags |= libc::CLONE_NEWPID;
    }
    if unshare.net {
        flags |= libc::CLONE_NEWNET;
    }
    if unshare.ipc {
        flags |= libc::CLONE_NEWIPC;
    }
    if unshare.uts {
        flags |= libc::CLONE_NEWUTS;
    }
    let cgroup_ns = std::fs::metadata("/proc/self/ns/cgroup");
    let has_cgroup_ns = cgroup_ns.is_ok();
    if unshare.cgroup {
        if let Err(err) = cgroup_ns {
            return Err(if err.raw_os_error() == Some(libc::ENOENT) {
                NamespaceError::NoCgroupNamespace
            } else {
                NamespaceError::CgroupStat(err)
            });
        }
        flags |= libc::CLONE_NEWCGROUP;
    }
    if unshare.cgroup_try && has_cgroup_ns {
        flags |= libc::CLONE_NEWCGROUP;
    }
    Ok(flags)
}

/// What `clone` returned.
pub enum Forked {
    Parent(libc::pid_t),
    Child,
}

/// fork()-like clone into new namespaces: the child continues on a copy of
/// this stack. Only sound because the bwrap mode is single-threaded.
pub fn clone_into(flags: libc::c_int) -> Result<Forked> {
    let flags = libc::c_ulong::try_from(flags | libc::SIGCHLD)
        .map_err(|_| NamespaceError::Clone(io::Error::from_raw_os_error(libc::EINVAL)))?;
    // SAFETY: with a NULL stack, clone behaves like fork: the child gets a
    // copy-on-write copy of this (single-threaded) process. No pointers are
    // passed (parent/child tid and tls are unused without their flags).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    match pid {
        -1 => Err(NamespaceError::Clone(io::Error::last_os_error())),
        0 => Ok(Forked::Child),
        pid => libc::pid_t::try_from(pid)
            .map(Forked::Parent)
            .map_err(|_| NamespaceError::Clone(io::Error::from_raw_os_error(libc::EOVERFLOW))),
    }
}

/// Opens `relative` under the directory fd `dir` for writing.
pub fn open_write_at(dir: &OwnedFd, relative: &str) -> io::Result<std::fs::File> {
    let path =
        std::ffi::CString::new(relative).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `path` is a valid NUL-terminated string and `dir` an open fd.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat just returned this fd; nothing else owns it.
    Ok(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

fn write_proc(proc_fd: &OwnedFd, name: &str, data: &str) -> io::Result<()> {
    open_write_at(proc_fd, &format!("self/{name}"))?.write_all(data.as_bytes())
}

/// One id of the namespace (`inside`) and the id of the parent namespace it
/// stands for (`outside`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    pub inside: u32,
    pub outside: u32,
}

/// Writes this process's (new) user namespace's maps, one id each, in
/// bubblewrap's order: uid map, then (with `deny_setgroups`) setgroups,
/// then gid map. `proc_fd` is the host `/proc`, opened before the mount
/// tree changed.
pub fn write_id_maps(
    proc_fd: &OwnedFd,
    uid: IdMap,
    gid: IdMap,
    deny_setgroups: bool,
) -> Result<()> {
    write_proc(
        proc_fd,
        "uid_map",
        &format!("{} {} 1\n", uid.inside, uid.outside),
    )
    .map_err(NamespaceError::UidMap)?;
    if deny_setgroups {
        match write_proc(proc_fd, "setgroups", "deny\n") {
            // Kernels before 3.19 have no setgroups file.
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
            other => other.map_err(NamespaceError::Setgroups)?,
        }
    }
    write_proc(
        proc_fd,
        "gid_map",
        &format!("{} {} 1\n", gid.inside, gid.outside),
    )
    .map_err(NamespaceError::GidMap)?;
    Ok(())
}

/// Brings `lo` up in a new network namespace; the kernel then adds
/// 127.0.0.1/8 and ::1 by itself.
pub fn loopback_up() -> Result<()> {
    crate::sys::netns::loopback_up().map_err(NamespaceError::Loopback)
}

/// After every mount: move into the nested user namespace the command runs
/// in, mapping the requested ids onto the setup ids. With `disable_userns`
/// it is the last one allowed: `max_user_namespaces` is set to 1 first (in
/// the setup namespace, still holding its capabilities), and creating
/// another one is checked to fail.
pub fn enter_nested_user_namespace(
    proc_fd: &OwnedFd,
    uid: IdMap,
    gid: IdMap,
    disable_userns: bool,
) -> Result<()> {
    if disable_userns {
        let mut sysctl = open_write_at(proc_fd, "sys/user/max_user_namespaces")
            .map_err(NamespaceError::OpenMaxUserNamespaces)?;
        sysctl
            .write_all(b"1")
            .map_err(NamespaceError::WriteMaxUserNamespaces)?;
    }
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(|errno| NamespaceError::NestedUserns(errno.into()))?;
    write_id_maps(proc_fd, uid, gid, false)?;
    if disable_userns && nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).is_ok() {
        return Err(NamespaceError::UsernsStillAllowed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_and_mount_namespaces_are_always_created() {
        let flags = clone_flags(&Unshare::default()).expect("flags");
        assert_eq!(flags, libc::CLONE_NEWUSER | libc::CLONE_NEWNS);
        let all = clone_flags(&Unshare {
            pid: true,
            net: true,
            ipc: true,
            uts: true,
            cgroup: true,
            ..Unshare::default()
        })
        .expect("flags");
        for flag in [
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWUTS,
            libc::CLONE_NEWCGROUP,
        ] {
            assert_ne!(all & flag, 0);
        }
    }

    #[test]
    fn a_refused_clone_says_user_namespaces_are_not_allowed() {
        let err = NamespaceError::Clone(io::Error::from_raw_os_error(libc::EPERM));
        assert!(err
            .to_string()
            .starts_with("No permissions to create a new namespace"));
        let err = NamespaceError::Clone(io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(err.to_string().ends_with("exceeded (ENOSPC)"));
    }
}
