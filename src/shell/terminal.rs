//! The local terminal of `exec -t` and `attach -t`: raw mode (keys go to
//! the remote terminal as typed, its output comes back untouched), restored
//! by a guard on every way out, and the window size to send to the remote
//! PTY. Reading stdin and forwarding signals are `super::attachment`'s.

use std::io::{IsTerminal, Stdin};
use std::os::fd::AsFd;

use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, Termios};

use crate::process::pty;
use crate::protocol::process::PtySize;

/// Why the terminal could not be switched.
#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    #[error("cannot read the terminal settings: {0}")]
    Read(#[source] nix::Error),
    #[error("cannot put the terminal in raw mode: {0}")]
    Raw(#[source] nix::Error),
}

/// Holds the terminal in raw mode; dropping it restores the saved settings.
pub struct RawMode {
    stdin: Stdin,
    saved: Termios,
}

impl RawMode {
    /// Puts stdin's terminal in raw mode; `Ok(None)` when stdin is not a
    /// terminal (nothing to change, nothing to restore).
    pub fn enter() -> Result<Option<RawMode>, TerminalError> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Ok(None);
        }
        let saved = tcgetattr(stdin.as_fd()).map_err(TerminalError::Read)?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin.as_fd(), SetArg::TCSADRAIN, &raw).map_err(TerminalError::Raw)?;
        Ok(Some(RawMode { stdin, saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // Nothing useful is left to do if this fails: the terminal is gone.
        let _ = tcsetattr(self.stdin.as_fd(), SetArg::TCSADRAIN, &self.saved);
    }
}

/// The window size of the local terminal (stdout's, else stdin's), if any.
pub fn window_size() -> Option<PtySize> {
    let stdout = std::io::stdout();
    let stdin = std::io::stdin();
    pty::size_of(stdout.as_fd())
        .or_else(|_| pty::size_of(stdin.as_fd()))
        .ok()
        .filter(|size| size.rows > 0 && size.cols > 0)
}
