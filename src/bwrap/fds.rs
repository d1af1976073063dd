//! File descriptors handed to bwrap: reading `--args`/`--file`/seccomp data,
//! the `--info-fd`/`--json-status-fd` documents, the `--block-fd` wait, and
//! the reaper's fd clean-up.
//!
//! Only raw fd numbers come from the command line; each is read or written
//! once and closed where bubblewrap closes it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};

/// The text bubblewrap prints for an errno (`strerror`), without Rust's
/// " (os error N)" suffix.
pub fn desc(err: &io::Error) -> String {
    let text = err.to_string();
    match (err.raw_os_error(), text.rfind(" (os error ")) {
        (Some(_), Some(cut)) => text[..cut].to_owned(),
        _ => text,
    }
}

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

/// Closes an fd the command line named while parsing (`--args`), leaving
/// `/dev/null` under its number: the number stays taken, so no descriptor
/// the launcher opens later can get it and then be read or closed by an
/// option that names the same number (`--args 0 --file 0 /x`).
pub fn retire(fd: RawFd) {
    // SAFETY: the path is a NUL-terminated literal; flags take no pointer.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if null < 0 {
        close(fd);
        return;
    }
    if null != fd {
        // SAFETY: dup3 takes two fd numbers; it atomically replaces `fd`
        // (closing the caller's file) with the /dev/null just opened.
        if unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) } < 0 {
            close(fd);
        }
        close(null);
    }
}

/// `--block-fd`: waits until one byte (or EOF) can be read.
pub fn block_on(fd: RawFd) {
    let mut byte = [0u8; 1];
    loop {
        // SAFETY: reads at most one byte into a live one-byte buffer.
        let rc = unsafe { libc::read(fd, byte.as_mut_ptr().cast(), 1) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    close(fd);
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
    let entries: Vec<u32> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in entries.into_iter().filter(|fd| (first..=last).contains(fd)) {
        if let Ok(fd) = RawFd::try_from(fd) {
            each(fd);
        }
    }
    Ok(())
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

/// The namespace inode numbers bubblewrap reports, for the process `pid`.
pub fn namespace_ids(pid: libc::pid_t, unshared: &[(&'static str, bool)]) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    unshared
        .iter()
        .filter(|(_, on)| *on)
        .filter_map(|(name, _)| {
            let meta = std::fs::metadata(format!("/proc/{pid}/ns/{name}")).ok()?;
            Some((format!("{name}-namespace"), meta.ino()))
        })
        .collect()
}

/// The `--info-fd` document: pretty-printed like bubblewrap's.
pub fn info_json(pid: libc::pid_t, namespaces: &[(String, u64)]) -> String {
    let mut text = format!("{{\n    \"child-pid\": {pid}");
    for (key, id) in namespaces {
        text.push_str(&format!(",\n    \"{key}\": {id}"));
    }
    text.push_str("\n}\n");
    text
}

/// The first `--json-status-fd` line.
pub fn status_child_json(pid: libc::pid_t, namespaces: &[(String, u64)]) -> String {
    let mut text = format!("{{ \"child-pid\": {pid}");
    for (key, id) in namespaces {
        text.push_str(&format!(", \"{key}\": {id}"));
    }
    text.push_str(" }\n");
    text
}

/// The last `--json-status-fd` line.
pub fn status_exit_json(code: i32) -> String {
    format!("{{ \"exit-code\": {code} }}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_documents_match_bubblewrap_layout() {
        let ns = vec![("mnt-namespace".to_owned(), 7u64)];
        assert_eq!(
            info_json(12, &ns),
            "{\n    \"child-pid\": 12,\n    \"mnt-namespace\": 7\n}\n"
        );
        assert_eq!(
            status_child_json(12, &ns),
            "{ \"child-pid\": 12, \"mnt-namespace\": 7 }\n"
        );
        assert_eq!(status_exit_json(3), "{ \"exit-code\": 3 }\n");
    }
}
