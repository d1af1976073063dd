//! Reports the command-line modes print on stdout (`--explain`, `doctor`,
//! `--help`, `--version`). A reader that goes away early
//! (`codexbox sandbox --explain … | head -1`) is a clean end, as for any
//! Unix filter, not the panic `println!` gives on a closed stdout.

use std::io::{self, Write};

/// Writes `text` to stdout and flushes. Returns the exit code the mode
/// ends with: 0 when written or when stdout is closed (`EPIPE`), 1 after a
/// one-line message for any other write error.
pub fn print(text: &str) -> i32 {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(err) => {
            eprintln!("codexbox: cannot write to stdout: {err}");
            1
        }
    }
}
