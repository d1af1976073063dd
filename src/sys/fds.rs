//! Raw file descriptors a process was handed by number: reading one to its
//! end, writing to one, closing one, and closing (or marking close-on-exec)
//! every fd above stdio at once.
//!
//! Only borrowed: nothing here takes ownership of an fd it did not open.

use std::fs::File;
use std::io::{self, Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};

/// Borrows a raw fd as a `File` without taking ownership of it.
fn borrow(fd: RawFd) -> io::Result<ManuallyDrop<File>> {
    // fcntl(F_GETFD) tells a closed fd apart before anything reads it.
    // SAFETY: F_GETFD takes no pointer argument.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd is open (checked above); ManuallyDrop keeps it from being
    // closed here, the caller closes it where bubblewrap does.
    Ok(ManuallyDrop::new(unsafe { File::from_raw_fd(fd) }))
}

/// Reads an fd to its end.
pub fn read_all(fd: RawFd) -> io::Result<Vec<u8>> {
    let mut file = borrow(fd)?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

/// Writes all of `data` to an fd.
pub fn write_all(fd: RawFd, data: &[u8]) -> io::Result<()> {
    let mut file = borrow(fd)?;
    file.write_all(data)
}

/// Closes an fd we were given and are done with.
pub fn close(fd: RawFd) {
    // SAFETY: closing an fd number we own by contract; errors (EBADF) ignored.
    unsafe { libc::close(fd) };
}

/// Closes every fd from 3 upwards except those in `keep` (for a process
/// that never execs, such as the reaper).
pub fn close_all_but(keep: &[RawFd]) -> io::Result<()> {
    for_ranges_but(keep, |first, last| close_range_or(first, last, 0, close))
}

/// Marks every fd from 3 upwards close-on-exec.
pub fn cloexec_from_3() {
    let _ = close_range_or(3, u32::MAX, libc::CLOSE_RANGE_CLOEXEC, |fd| {
        // SAFETY: flags an fd; a stale number fails harmlessly with EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    });
}

/// `close_range(first, last, flags)`; where the kernel lacks it, `each` on
/// every fd in the range that /proc/self/fd lists.
fn close_range_or(first: u32, last: u32, flags: u32, each: impl Fn(RawFd)) -> io::Result<()> {
    // SAFETY: close_range only closes or flags fds; nothing here borrows them.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) };
    if rc == 0 {
        return Ok(());
    }
    let entries: Vec<u32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        // No /proc here (a sandbox without one): every number up to the
        // process's fd limit instead.
        Err(_) => (first..open_fd_limit()?.min(last.saturating_add(1))).collect(),
    };
    for fd in entries.into_iter().filter(|fd| (first..=last).contains(fd)) {
        if let Ok(fd) = RawFd::try_from(fd) {
            each(fd);
        }
    }
    Ok(())
}

/// The soft limit on open fds: no fd number reaches it.
fn open_fd_limit() -> io::Result<u32> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the live struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(u32::try_from(limit.rlim_cur).unwrap_or(u32::MAX))
}

fn for_ranges_but(
    keep: &[RawFd],
    mut each: impl FnMut(u32, u32) -> io::Result<()>,
) -> io::Result<()> {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter_map(|fd| u32::try_from(*fd).ok())
        .filter(|fd| *fd >= 3)
        .collect();
    keep.sort_unstable();
    keep.dedup();
    let mut start = 3u32;
    for fd in keep.iter().copied().chain(std::iter::once(u32::MAX)) {
        if fd > start {
            let end = if fd == u32::MAX { u32::MAX } else { fd - 1 };
            each(start, end)?;
        }
        start = fd.saturating_add(1);
    }
    Ok(())
}
