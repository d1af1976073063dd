//! Logging set-up shared by every mode: `tracing` to stderr, filtered by
//! `RUST_LOG` (default `warn`), human-readable or JSON, in colour only when
//! stderr is a terminal (and `NO_COLOR` is unset).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are rendered on stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global subscriber. Calling it twice is harmless.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Whether log lines may carry colour: only on a terminal, and not when
/// `NO_COLOR` is set (a log redirected to a file stays plain text).
fn colour() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    std::io::stderr().is_terminal() && !no_color
}
