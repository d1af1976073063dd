//! Network namespace primitives shared by the built-in bubblewrap and the
//! sandbox's prepared namespace (`sandbox::routed_netns`): unshare and
//! enter namespaces, bring `lo` up, write a `/proc` file, list interfaces.
//!
//! Everything but [`interface_names`] is async-signal-safe (no allocation,
//! no locks), so it may run between fork and exec.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

// `ioctl` takes its request as `unsigned long` in glibc and as `int` in
// musl; libc's constants are `unsigned long`. The values (0x8913, 0x8914)
// fit either, and with glibc the cast changes nothing.
/// `SIOCGIFFLAGS` as this C library's `ioctl` takes it.
#[allow(clippy::unnecessary_cast)]
const GET_FLAGS: libc::Ioctl = libc::SIOCGIFFLAGS as libc::Ioctl;
/// `SIOCSIFFLAGS` as this C library's `ioctl` takes it.
#[allow(clippy::unnecessary_cast)]
const SET_FLAGS: libc::Ioctl = libc::SIOCSIFFLAGS as libc::Ioctl;

/// `unshare(flags)`.
pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes a flag word and touches no memory of ours.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `setns(fd, nstype)`: joins the namespace `fd` refers to.
pub fn setns(fd: RawFd, nstype: libc::c_int) -> io::Result<()> {
    // SAFETY: setns takes an fd number and a flag word, no pointers.
    if unsafe { libc::setns(fd, nstype) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `data` to the existing file `path` in one `write` (what a `/proc`
/// control file needs).
pub fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and lives for the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open just returned this fd; nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `data` is a live buffer of `data.len()` bytes.
    let written = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    match usize::try_from(written) {
        Ok(n) if n == data.len() => Ok(()),
        Ok(_) => Err(io::Error::from(io::ErrorKind::WriteZero)),
        Err(_) => Err(io::Error::last_os_error()),
    }
}

/// Brings `lo` up in the current network namespace; the kernel then adds
/// 127.0.0.1/8 and ::1 by itself.
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: plain socket creation, the fd is owned right below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sock` was just returned by socket() and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = libc::c_char::from_ne_bytes([*byte]);
    }
    // SAFETY: SIOCGIFFLAGS reads into the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), GET_FLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let up = libc::c_short::try_from(libc::IFF_UP | libc::IFF_RUNNING).unwrap_or(0);
    // SAFETY: the flags member of the union is the one SIOCGIFFLAGS filled.
    unsafe {
        req.ifr_ifru.ifru_flags |= up;
    }
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), SET_FLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The names of the current network namespace's interfaces. Allocates.
pub fn interface_names() -> io::Result<Vec<String>> {
    // SAFETY: if_nameindex takes no arguments; the list it returns is freed
    // below, once, after its entries were copied.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut names = Vec::new();
    let mut entry = list;
    loop {
        // SAFETY: the list ends with an entry whose index is 0 and name
        // NULL; every entry up to it is valid, and `entry` never passes it.
        let current = unsafe { &*entry };
        if current.if_index == 0 || current.if_name.is_null() {
            break;
        }
        // SAFETY: a non-NULL if_name is a NUL-terminated string owned by
        // the list, alive until if_freenameindex.
        let name = unsafe { CStr::from_ptr(current.if_name) };
        names.push(name.to_string_lossy().into_owned());
        // SAFETY: the terminating entry has not been reached, so the next
        // one is inside the list.
        entry = unsafe { entry.add(1) };
    }
    // SAFETY: `list` came from if_nameindex and is freed exactly once.
    unsafe { libc::if_freenameindex(list) };
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_lists_its_loopback_interface() {
        let names = interface_names().unwrap();
        assert!(names.iter().any(|n| n == "lo"), "{names:?}");
    }

    #[test]
    fn writing_a_missing_file_fails_with_its_errno() {
        let err = write_file(c"/proc/self/no-such-control", b"1").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
