//! Descriptor passing over a connected Unix socket: one message of bytes
//! with its descriptors as `SCM_RIGHTS`, sent whole and received whole
//! (made for `SOCK_SEQPACKET`, where a message keeps its boundaries).
//! Received descriptors are close-on-exec.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The most descriptors one message carries.
pub const MAX_FDS: usize = 32;

/// Control buffer room for [`MAX_FDS`] descriptors (`CMSG_SPACE` of
/// 32 × 4 bytes is 144 on 64-bit targets), in `u64`s for alignment.
const CMSG_WORDS: usize = 24;

/// Sends `data` with `fds` (at most [`MAX_FDS`]) as one message.
pub fn send_with_fds(socket: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
    if fds.len() > MAX_FDS {
        return Err(invalid());
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cmsg_buf = [0u64; CMSG_WORDS];
    let fd_bytes = u32::try_from(std::mem::size_of_val(fds)).map_err(|_| invalid())?;
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the
    // sendmsg call, and the control buffer is large and aligned enough for
    // one SCM_RIGHTS message with `fds` (checked against CMSG_SPACE). With
    // no descriptors, no control message is attached.
    unsafe {
        let space = libc::CMSG_SPACE(fd_bytes) as usize;
        if space > std::mem::size_of_val(&cmsg_buf) {
            return Err(invalid());
        }
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = cmsg_buf.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null() {
                return Err(invalid());
            }
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        }
        loop {
            let sent = libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL);
            if sent >= 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// Receives one message into `buf`: its length and descriptors, `None` at
/// EOF. A message whose descriptors did not fit is refused (the ones that
/// did are closed).
pub fn recv_with_fds(socket: RawFd, buf: &mut [u8]) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cmsg_buf = [0u64; CMSG_WORDS];
    // SAFETY: as in `send_with_fds`; the kernel fills at most the lengths we
    // pass, and received descriptors are taken into OwnedFds exactly once.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg_buf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cmsg_buf) as _;
        let n = loop {
            let n = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        };
        let mut fds = Vec::new();
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let header = libc::CMSG_LEN(0) as usize;
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(header)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        if n == 0 && fds.is_empty() {
            return Ok(None);
        }
        Ok(Some((n, fds)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn pair() -> (OwnedFd, OwnedFd) {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap()
    }

    #[test]
    fn messages_carry_their_descriptors_close_on_exec_and_eof_reads_none() {
        let (a, b) = pair();
        let (r, w) = nix::unistd::pipe().unwrap();
        let sent = [r.as_raw_fd(); MAX_FDS];
        send_with_fds(a.as_raw_fd(), b"hello", &sent).unwrap();
        let mut buf = [0u8; 16];
        let (n, got) = recv_with_fds(b.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!((&buf[..n], got.len()), (&b"hello"[..], MAX_FDS));
        let flags = nix::fcntl::fcntl(&got[0], nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        nix::unistd::write(&w, b"x").unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(nix::unistd::read(&got[5], &mut byte).unwrap(), 1);
        send_with_fds(a.as_raw_fd(), b"bare", &[]).unwrap();
        let (n, got) = recv_with_fds(b.as_raw_fd(), &mut buf).unwrap().unwrap();
        assert_eq!((n, got.len()), (4, 0));
        assert!(send_with_fds(a.as_raw_fd(), b"x", &[r.as_raw_fd(); MAX_FDS + 1]).is_err());
        drop(a);
        assert!(recv_with_fds(b.as_raw_fd(), &mut buf).unwrap().is_none());
    }
}
