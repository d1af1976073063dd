//! What the long-running modes (exec-server, rendezvous, connect, proxy) do
//! once dispatch chose them: parse their flags, build their tokio runtime
//! (dispatch runs before any runtime exists) and print their one stdout
//! line.

use std::ffi::OsString;
use std::io::Write;

/// Parses a mode's flags; on `--help`, `--version` or a usage error prints
/// clap's text and returns the exit code (0 or 2).
pub fn parse<A: clap::Parser>(argv: &[OsString]) -> Result<A, i32> {
    A::try_parse_from(argv).map_err(|err| {
        let _ = err.print();
        err.exit_code()
    })
}

/// How many threads run a mode's async tasks (blocking work always goes to
/// tokio's blocking pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// One: tasks that hand work to each other (a process's output pump and
    /// its connection's writer) do it without waking another thread.
    One,
    /// One per CPU: for modes that relay many independent connections.
    PerCpu,
}

/// The runtime of a serving mode; on failure prints `{name}: …` and
/// returns `None` (the caller exits 1).
pub fn runtime(name: &str, threads: Threads) -> Option<tokio::runtime::Runtime> {
    let mut builder = match threads {
        Threads::One => tokio::runtime::Builder::new_current_thread(),
        Threads::PerCpu => tokio::runtime::Builder::new_multi_thread(),
    };
    match builder.enable_all().build() {
        Ok(runtime) => Some(runtime),
        Err(err) => {
            eprintln!("{name}: cannot start the runtime: {err}");
            None
        }
    }
}

/// Prints the one stdout line (the bound URL) and flushes it.
pub fn announce(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}
