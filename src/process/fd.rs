//! The server's ends of a process's descriptors on the async runtime:
//! registering a pipe or PTY master with the reactor, and reading the
//! supervisor's status records (see `supervisor.rs` for the format).

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;

use super::supervisor;

/// Registers an owned descriptor with the reactor.
pub fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd owns its descriptor: it stays open and names the
    // same file description until the AsyncFd (its owner) drops it.
    unsafe { AsyncFd::register(fd) }.map_err(|err| err.into_parts().1)
}

/// One status record, or `None` at EOF (or on a short read or error).
/// Cancel-safe: the record is only taken by a completed read.
pub async fn read_record(fd: &AsyncFd<OwnedFd>) -> Option<i32> {
    loop {
        let mut guard = fd.readable().await.ok()?;
        let mut record = [0u8; supervisor::RECORD_LEN];
        match guard.try_io(|inner| {
            nix::unistd::read(inner.get_ref(), &mut record).map_err(io::Error::from)
        }) {
            Ok(Ok(n)) if n == supervisor::RECORD_LEN => return Some(i32::from_ne_bytes(record)),
            Ok(_) => return None,
            Err(_would_block) => continue,
        }
    }
}
