//! How bwrap speaks: one line `bwrap: TEXT` on stderr per message, with the
//! syslog level in front (`<3>` error, `<4>` warning) after `--level-prefix`,
//! as bubblewrap does.
//!
//! Writing never panics: a closed or broken stderr loses the message, not
//! the launch.

use std::fmt::Display;
use std::io::Write;

/// `LOG_ERR`.
const LEVEL_ERROR: u8 = 3;
/// `LOG_WARNING`.
const LEVEL_WARNING: u8 = 4;

/// Where and how messages go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Log {
    /// `--level-prefix` was given (before the message).
    pub level_prefix: bool,
}

impl Log {
    /// An error: bwrap exits 1 after it.
    pub fn error(&self, message: &dyn Display) {
        self.line(LEVEL_ERROR, message);
    }

    /// A warning: bwrap carries on.
    pub fn warn(&self, message: &dyn Display) {
        self.line(LEVEL_WARNING, message);
    }

    fn line(&self, level: u8, message: &dyn Display) {
        let mut stderr = std::io::stderr().lock();
        let _ = if self.level_prefix {
            writeln!(stderr, "<{level}>bwrap: {message}")
        } else {
            writeln!(stderr, "bwrap: {message}")
        };
    }
}

/// Text for stdout or stderr as is (usage, version), losing it rather than
/// panicking when the stream is gone.
pub fn print(mut out: impl Write, text: &str) {
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
