//! Byte relay between two TCP connections (CONNECT and SOCKS5 tunnels).
//! On Linux it moves data with `splice(2)` through a pipe per direction, so
//! the payload is never copied into the proxy's memory; each direction ends
//! with a half-close of the other side, and the relay ends when both
//! directions have. A pipe that cannot be created falls back to a
//! buffered copy.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes moved per `splice` call (and the buffer of the fallback copy).
pub const RELAY_CHUNK_BYTES: usize = 64 * 1024;
/// Pipe capacity asked for (fewer calls and wake-ups per byte; the
/// default 64 KiB stays when the system refuses).
const PIPE_BYTES: libc::c_int = 1024 * 1024;

/// Relays both ways until both sides are done.
pub async fn relay(mut a: TcpStream, mut b: TcpStream) {
    match (pipe(), pipe()) {
        (Ok(ab), Ok(ba)) => {
            let _ = tokio::join!(one_way(&a, &b, &ab), one_way(&b, &a, &ba));
        }
        _ => {
            let _ = tokio::io::copy_bidirectional_with_sizes(
                &mut a,
                &mut b,
                RELAY_CHUNK_BYTES,
                RELAY_CHUNK_BYTES,
            )
            .await;
        }
    }
}

/// A non-blocking close-on-exec pipe `(read, write)`, enlarged if allowed.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(io::Error::from)?;
    // SAFETY: F_SETPIPE_SZ on a pipe fd we own, integer argument.
    unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    Ok((read, write))
}

/// What one `splice` from a socket may move: the pipe's capacity.
fn pipe_capacity(pipe: &OwnedFd) -> usize {
    // SAFETY: F_GETPIPE_SZ on a pipe fd we own.
    let size = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_GETPIPE_SZ) };
    usize::try_from(size)
        .unwrap_or(RELAY_CHUNK_BYTES)
        .max(RELAY_CHUNK_BYTES)
}

/// One non-blocking `splice` of at most `len` bytes from `from` to `to`.
fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    let flags = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;
    // SAFETY: both are open fds owned by the caller for the duration of the
    // call; null offsets mean "current position", as pipes and sockets need.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            flags,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Moves everything `from` sends to `to` through `pipe`, then half-closes
/// `to`.
async fn one_way(from: &TcpStream, to: &TcpStream, pipe: &(OwnedFd, OwnedFd)) -> io::Result<()> {
    let (pipe_read, pipe_write) = (pipe.0.as_raw_fd(), pipe.1.as_raw_fd());
    let chunk = pipe_capacity(&pipe.1);
    let result = async {
        loop {
            let filled = loop {
                from.readable().await?;
                match from.try_io(Interest::READABLE, || {
                    splice(from.as_raw_fd(), pipe_write, chunk)
                }) {
                    Ok(n) => break n,
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(err) => return Err(err),
                }
            };
            if filled == 0 {
                return Ok(());
            }
            let mut left = filled;
            while left > 0 {
                to.writable().await?;
                match to.try_io(Interest::WRITABLE, || {
                    splice(pipe_read, to.as_raw_fd(), left)
                }) {
                    Ok(n) => left = left.saturating_sub(n),
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(err) => return Err(err),
                }
            }
        }
    }
    .await;
    // SAFETY: shutdown on an open socket fd owned by `to`; integers only.
    unsafe { libc::shutdown(to.as_raw_fd(), libc::SHUT_WR) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn bytes_pass_both_ways_and_half_closes_propagate() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (addr, target_addr) = (listener.local_addr().unwrap(), target.local_addr().unwrap());
        tokio::spawn(async move {
            let (a, _) = listener.accept().await.unwrap();
            let b = TcpStream::connect(target_addr).await.unwrap();
            relay(a, b).await;
        });
        let echo = tokio::spawn(async move {
            let (mut s, _) = target.accept().await.unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).await.unwrap();
            s.write_all(&all).await.unwrap();
            all.len()
        });
        let mut client = TcpStream::connect(addr).await.unwrap();
        let payload: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&payload).await.unwrap();
        client.shutdown().await.unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(echo.await.unwrap(), payload.len());
        assert_eq!(back, payload);
    }
}
