//! The fds bwrap talks to its caller through: the `--info-fd` and
//! `--json-status-fd` documents (with the namespace ids they report) and the
//! `--block-fd` wait.
//!
//! Only raw fd numbers come from the command line; each is written or read
//! where bubblewrap does, through [`crate::sys::fds`].

use std::io;
use std::os::fd::RawFd;

use crate::sys::fds::close;

/// `--block-fd`: waits until one byte (or EOF) can be read. As in
/// bubblewrap, a read error ends the wait too: the fd is the caller's, and
/// a broken one must not hold the sandbox forever.
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

/// The namespace inode numbers bubblewrap reports, for the process `pid`.
/// One that cannot be read is left out, as bubblewrap leaves it out.
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
