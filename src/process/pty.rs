//! Pseudo-terminals for `tty: true` processes: allocation with the requested
//! size, resize, and the terminal's EOF character for `closeStdin`; and the
//! size of a terminal (for a client sending its own window's size).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::pty::{openpty, Winsize};

use crate::protocol::process::PtySize;

/// A freshly opened PTY pair.
pub struct PtyPair {
    /// The server's side: read output, write input. Non-blocking, close-on-exec.
    pub master: OwnedFd,
    /// The child's side (becomes its stdin/stdout/stderr). Close-on-exec.
    pub slave: OwnedFd,
}

fn winsize(size: PtySize) -> Winsize {
    Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// Opens a PTY of `size`.
pub fn open(size: PtySize) -> io::Result<PtyPair> {
    let pair = openpty(Some(&winsize(size)), None).map_err(io::Error::from)?;
    for fd in [&pair.master, &pair.slave] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(io::Error::from)?;
    }
    set_nonblocking(&pair.master)?;
    Ok(PtyPair {
        master: pair.master,
        slave: pair.slave,
    })
}

/// Puts `fd` in non-blocking mode.
pub fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

nix::ioctl_write_ptr_bad!(set_winsize, libc::TIOCSWINSZ, Winsize);

/// Changes the terminal size (the foreground group gets SIGWINCH).
pub fn resize(master: BorrowedFd<'_>, size: PtySize) -> io::Result<()> {
    // SAFETY: TIOCSWINSZ reads one Winsize from the pointer, which is valid
    // for the duration of the call.
    unsafe { set_winsize(master.as_raw_fd(), &winsize(size)) }
        .map(drop)
        .map_err(io::Error::from)
}

nix::ioctl_read_bad!(get_winsize, libc::TIOCGWINSZ, Winsize);

/// The size of the terminal `fd` refers to (`ENOTTY` when it is not one).
pub fn size_of(fd: BorrowedFd<'_>) -> io::Result<PtySize> {
    let mut size = winsize(PtySize::default());
    // SAFETY: TIOCGWINSZ writes one Winsize through the pointer, which
    // points at a live, writable Winsize for the duration of the call.
    unsafe { get_winsize(fd.as_raw_fd(), &mut size) }.map_err(io::Error::from)?;
    Ok(PtySize {
        rows: size.ws_row,
        cols: size.ws_col,
    })
}

/// The terminal's EOF character (normally ^D).
pub fn eof_char(master: BorrowedFd<'_>) -> u8 {
    nix::sys::termios::tcgetattr(master)
        .map(|t| t.control_chars[libc::VEOF])
        .unwrap_or(4)
}
