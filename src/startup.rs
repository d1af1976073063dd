//! What the long-running modes (exec-server, rendezvous, connect) do once
//! dispatch chose them: build the multi-threaded tokio runtime (dispatch
//! runs before any runtime exists) and print their one stdout line.

use std::io::Write;

/// The runtime of a serving mode; on failure prints `{name}: …` and
/// returns `None` (the caller exits 1).
pub fn runtime(name: &str) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
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
