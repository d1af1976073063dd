//! Descriptor passing on the job socket: one `SOCK_SEQPACKET` message with
//! the encoded job and its descriptors as `SCM_RIGHTS`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::JOB_FDS;

const CMSG_BUF: usize = 128;

pub(super) fn send_with_fds(socket: RawFd, data: &[u8], fds: &[RawFd; JOB_FDS]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cmsg_buf = [0u64; CMSG_BUF / 8];
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the
    // sendmsg call, and the control buffer is large and aligned enough for
    // one SCM_RIGHTS message with four descriptors (checked by CMSG_SPACE).
    unsafe {
        let space = libc::CMSG_SPACE(fd_bytes) as usize;
        if space > CMSG_BUF {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg_buf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), JOB_FDS);
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

/// Receives one job: `None` at EOF.
pub(super) fn recv_with_fds(
    socket: RawFd,
    buf: &mut [u8],
) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cmsg_buf = [0u64; CMSG_BUF / 8];
    // SAFETY: as in `send_with_fds`; the kernel fills at most the lengths we
    // pass, and received descriptors are taken into OwnedFds exactly once.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg_buf.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_BUF as _;
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
        if n == 0 && fds.is_empty() {
            return Ok(None);
        }
        Ok(Some((n, fds)))
    }
}
