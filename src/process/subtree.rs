//! Killing a supervisor's whole subtree from inside the supervisor, for the
//! case where nobody else will: the server (and the zygote with it) died,
//! for instance of SIGKILL or the OOM killer. The supervisor is a child
//! subreaper, so every descendant of its command, even one that called
//! setsid or double-forked, is its child or a descendant of one; killing
//! its children round after round, while the orphans of each round are
//! adopted by it, leaves nothing behind.
//!
//! This can run in a supervisor forked from the multi-threaded server
//! (between fork and exec), so it only makes system calls on stack buffers:
//! no allocation, no locks, no std file APIs.

use std::os::fd::RawFd;

/// Kills every descendant of this process, reaps them, and exits.
pub fn kill_all_and_exit() -> ! {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    loop {
        signal_children(me, libc::SIGKILL);
        // Wait for one to exit (a killed child's own children are adopted
        // by us at that moment), then collect any other that already did.
        let mut flags = 0;
        loop {
            // SAFETY: waitpid with a null status pointer.
            let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), flags) };
            if pid > 0 {
                flags = libc::WNOHANG;
                continue;
            }
            if pid < 0 && errno() == libc::ECHILD {
                // SAFETY: _exit skips every user-space cleanup.
                unsafe { libc::_exit(0) }
            }
            if pid == 0 || errno() != libc::EINTR {
                break;
            }
        }
    }
}

fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Sends `signal` to every process whose parent is `parent`, found by one
/// scan of `/proc`. Our own children cannot be reaped by anyone else, so a
/// pid read here cannot be reused before we kill it.
fn signal_children(parent: libc::pid_t, signal: libc::c_int) {
    // SAFETY: opening a directory read-only with a static NUL-terminated path.
    let dir = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return;
    }
    let mut entries = [0u8; 8192];
    loop {
        // SAFETY: getdents64 fills at most `entries.len()` bytes of our buffer.
        let len = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir,
                entries.as_mut_ptr(),
                entries.len(),
            )
        };
        let Ok(len) = usize::try_from(len) else { break };
        if len == 0 {
            break;
        }
        let mut offset = 0;
        while let Some((name, record_len)) = dirent_at(&entries[..len], offset) {
            if let Some(pid) = parse_pid(name) {
                if parent_of(dir, name) == Some(parent) {
                    // SAFETY: kill with a pid and a signal number.
                    unsafe { libc::kill(pid, signal) };
                }
            }
            offset += record_len;
        }
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(dir) };
}

/// The name (without its NUL) and record length of the `linux_dirent64` at
/// `offset`: `d_ino` (8), `d_off` (8), `d_reclen` (2), `d_type` (1), name.
fn dirent_at(buf: &[u8], offset: usize) -> Option<(&[u8], usize)> {
    let record = buf.get(offset..)?;
    let record_len = usize::from(u16::from_ne_bytes([*record.get(16)?, *record.get(17)?]));
    let name_area = record.get(19..record_len)?;
    let name_len = name_area.iter().position(|&b| b == 0)?;
    Some((name_area.get(..name_len)?, record_len))
}

fn parse_pid(name: &[u8]) -> Option<libc::pid_t> {
    if name.is_empty() || name.len() > 10 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    name.iter().try_fold(0 as libc::pid_t, |acc, &digit| {
        acc.checked_mul(10)?
            .checked_add(libc::pid_t::from(digit - b'0'))
    })
}

/// The parent pid in `/proc/<name>/stat`, read relative to the open `/proc`.
fn parent_of(proc_dir: RawFd, name: &[u8]) -> Option<libc::pid_t> {
    let mut path = [0u8; 24];
    let suffix = b"/stat\0";
    let total = name.len() + suffix.len();
    path.get_mut(..name.len())?.copy_from_slice(name);
    path.get_mut(name.len()..total)?.copy_from_slice(suffix);
    // SAFETY: `path` is NUL-terminated within the buffer (checked above).
    let fd = unsafe {
        libc::openat(
            proc_dir,
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // The fields up to the parent pid fit easily: `pid (comm) S ppid`, with
    // comm at most 16 bytes.
    let mut stat = [0u8; 256];
    // SAFETY: reads at most `stat.len()` bytes into our buffer; then closing
    // the descriptor opened above.
    let len = unsafe {
        let len = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        len
    };
    parse_parent(stat.get(..usize::try_from(len).ok()?)?)
}

/// The parent pid from the start of a `/proc/PID/stat` line.
fn parse_parent(stat: &[u8]) -> Option<libc::pid_t> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat.get(close + 1..)?.split(|&b| b == b' ');
    fields.next()?; // the empty field before the state
    fields.next()?; // the state
    parse_pid(fields.next()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_pids_parse_whatever_the_command_name() {
        assert_eq!(parse_parent(b"42 (sleep) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parse_parent(b"42 (a) b (c)) R 1234 1 1"), Some(1234));
        assert_eq!(parse_parent(b"42 (x) Z"), None);
        assert_eq!(parse_parent(b"garbage"), None);
    }

    #[test]
    fn pid_names_are_digits_only() {
        assert_eq!(parse_pid(b"123"), Some(123));
        assert_eq!(parse_pid(b"self"), None);
        assert_eq!(parse_pid(b""), None);
        assert_eq!(parse_pid(b"99999999999"), None);
    }

    #[test]
    fn this_process_is_found_as_a_child_of_its_parent() {
        // SAFETY: getpid/getppid have no preconditions.
        let (me, parent) = unsafe { (libc::getpid(), libc::getppid()) };
        // SAFETY: opening /proc read-only.
        let dir = unsafe { libc::open(c"/proc".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
        assert!(dir >= 0);
        assert_eq!(parent_of(dir, me.to_string().as_bytes()), Some(parent));
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(dir) };
    }
}
