//! The command-line convention every mode holds to (docs/cli.md), in one
//! place: how a mode parses its flags ([`parse`]), how it names itself
//! ([`mode_name`]), its version line ([`VERSION`]), and the exit statuses
//! (usage errors [`EXIT_USAGE`], commands that cannot run
//! [`EXIT_CANNOT_EXECUTE`] and [`EXIT_NOT_FOUND`]).
//!
//! A leaf: every mode's parser uses it, it knows no mode. The whole
//! command line assembled from every mode (help, completions, man pages)
//! is [`crate::commands`]'s; the bubblewrap-compatible `bwrap` mode keeps
//! bubblewrap's own conventions and parser.

use std::ffi::OsString;
use std::path::Path;

/// Something went wrong that is not the caller's spelling.
pub const EXIT_FAILURE: i32 = 1;
/// The command line is wrong: an unknown flag, a bad value, a missing
/// argument, flags that do not go together.
pub const EXIT_USAGE: i32 = 2;
/// The command was found but cannot be executed (not executable, a
/// directory, a bad interpreter), as `sh` and `docker run` report it.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// The command was not found, as `sh` and `docker run` report it.
pub const EXIT_NOT_FOUND: i32 = 127;

/// The version, and the commit it was built from when the build knew it:
/// `0.1.0 (abc1234 2026-11-28)`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("CODEXBOX_BUILD_SUFFIX"));

/// The version line of a mode: `codexbox exec 0.1.0 (abc1234 2026-11-28)`.
pub fn version_line(name: &str) -> String {
    format!("{name} {VERSION}\n")
}

/// How a command line that does not run ends a mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseExit {
    /// `--help` or `--version`: this text on stdout, exit 0.
    Print(String),
    /// A usage error: this one line on stderr, exit 2.
    Usage(String),
}

impl ParseExit {
    /// The exit status.
    pub fn code(&self) -> i32 {
        match self {
            ParseExit::Print(_) => 0,
            ParseExit::Usage(_) => EXIT_USAGE,
        }
    }

    /// Prints the text where it goes; returns the exit status.
    pub fn report(&self) -> i32 {
        match self {
            ParseExit::Print(text) => crate::stdout::print(text),
            ParseExit::Usage(line) => {
                eprintln!("{line}");
                self.code()
            }
        }
    }
}

/// Parses `argv` (`argv[0]` first) with a mode's clap definition, the mode
/// speaking as `name`: the arguments, or how the mode ends (help and
/// version text; one `name: …` usage line naming the flag). `--help`/`-h`
/// and `--version`/`-V` work in every mode. Prints nothing.
pub fn parse<A: clap::Parser>(argv: &[OsString], name: &str) -> Result<A, ParseExit> {
    let command = with_convention(A::command(), name);
    command
        .try_get_matches_from(argv)
        .and_then(|matches| A::from_arg_matches(&matches))
        .map_err(|err| parse_exit(&err, name))
}

/// A mode's clap definition as it is shown: named `name` in its usage and
/// version line, with this build's version.
pub fn with_convention(command: clap::Command, name: &str) -> clap::Command {
    command
        .name(name.to_owned())
        .bin_name(name.to_owned())
        .display_name(name.to_owned())
        .version(VERSION)
}

/// What a clap error means for the mode: text to print, or a usage line.
fn parse_exit(err: &clap::Error, name: &str) -> ParseExit {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            ParseExit::Print(err.render().to_string())
        }
        _ => ParseExit::Usage(format!("{name}: {} (see --help)", usage_message(err))),
    }
}

/// One line saying what is wrong and with which flag, from clap's error
/// (whose first line alone leaves out the missing flags, the values
/// allowed and its tips).
pub fn usage_message(err: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let rendered = err.render().to_string();
    let first = rendered
        .lines()
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .trim_end_matches(':')
        .to_owned();
    let strings = |kind| match err.get(kind) {
        Some(ContextValue::Strings(values)) => values.clone(),
        Some(ContextValue::String(value)) => vec![value.clone()],
        Some(ContextValue::StyledStrs(values)) => values.iter().map(|v| v.to_string()).collect(),
        _ => Vec::new(),
    };
    let mut message = first;
    if err.kind() == ErrorKind::MissingRequiredArgument {
        let missing = strings(ContextKind::InvalidArg);
        if !missing.is_empty() {
            message = format!("{message}: {}", missing.join(", "));
        }
    }
    let valid = strings(ContextKind::ValidValue);
    if !valid.is_empty() && !message.contains("possible values") {
        message = format!("{message} (possible values: {})", valid.join(", "));
    }
    let similar = strings(ContextKind::SuggestedArg);
    if let Some(similar) = similar.first() {
        message = format!("{message}; did you mean '{similar}'?");
    }
    for tip in strings(ContextKind::Suggested) {
        message = format!("{message}; {tip}");
    }
    message
}

/// The name a mode speaks as: `codexbox MODE` when reached through the
/// subcommand (dispatch puts that in `argv[0]`), else the basename it was
/// invoked by (`codex-exec-server`), else `fallback`.
pub fn mode_name(argv: &[OsString], fallback: &str) -> String {
    let Some(arg0) = argv.first().and_then(|arg0| arg0.to_str()) else {
        return fallback.to_owned();
    };
    if arg0.contains(' ') {
        return arg0.to_owned();
    }
    Path::new(arg0)
        .file_name()
        .and_then(|name| name.to_str())
        .filter(|name| !name.is_empty())
        .unwrap_or(fallback)
        .to_owned()
}

/// The exit status for a command that could not be executed:
/// [`EXIT_NOT_FOUND`] when it does not exist, [`EXIT_CANNOT_EXECUTE`]
/// otherwise.
pub fn exec_failure_status(err: &std::io::Error) -> i32 {
    if err.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXECUTE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A small definition to exercise the rules.
    #[derive(Debug, Parser)]
    struct Demo {
        #[arg(long, value_name = "ID")]
        session: String,
        #[arg(long, value_enum, default_value_t = Shape::Round)]
        shape: Shape,
        #[arg(long)]
        json: bool,
    }

    #[derive(Debug, Clone, Copy, clap::ValueEnum)]
    enum Shape {
        Round,
        Square,
    }

    fn argv(args: &[&str]) -> Vec<OsString> {
        std::iter::once("codexbox demo")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn usage_line(args: &[&str]) -> String {
        match parse::<Demo>(&argv(args), "codexbox demo") {
            Err(ParseExit::Usage(line)) => line,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn usage_errors_are_one_line_naming_the_flag() {
        let missing = usage_line(&[]);
        assert!(
            missing.starts_with("codexbox demo: ") && missing.contains("--session <ID>"),
            "{missing}"
        );
        let bad = usage_line(&["--session", "s", "--shape", "oval"]);
        assert!(
            bad.contains("'oval'") && bad.contains("--shape") && bad.contains("round, square"),
            "{bad}"
        );
        let similar = usage_line(&["--session", "s", "--jsn"]);
        assert!(similar.contains("did you mean '--json'"), "{similar}");
        for line in [missing, bad, similar] {
            assert!(!line.contains('\n'), "{line}");
            assert!(line.ends_with("(see --help)"), "{line}");
        }
    }

    #[test]
    fn help_and_version_are_printed_with_the_mode_name() {
        for flag in ["-V", "--version"] {
            assert_eq!(
                parse::<Demo>(&argv(&[flag]), "codexbox demo").unwrap_err(),
                ParseExit::Print(version_line("codexbox demo"))
            );
        }
        for flag in ["-h", "--help"] {
            match parse::<Demo>(&argv(&[flag]), "codexbox demo") {
                Err(ParseExit::Print(text)) => {
                    assert!(text.contains("Usage: codexbox demo"), "{text}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn names_follow_the_invocation() {
        let name = |arg0: &str| mode_name(&[OsString::from(arg0)], "fallback");
        assert_eq!(name("codexbox exec"), "codexbox exec");
        assert_eq!(name("/usr/bin/codex-exec-server"), "codex-exec-server");
        assert_eq!(name(""), "fallback");
        assert_eq!(mode_name(&[], "fallback"), "fallback");
    }

    #[test]
    fn commands_that_cannot_run_get_shell_statuses() {
        let status = |errno| exec_failure_status(&std::io::Error::from_raw_os_error(errno));
        assert_eq!(status(libc::ENOENT), EXIT_NOT_FOUND);
        assert_eq!(status(libc::EACCES), EXIT_CANNOT_EXECUTE);
        assert_eq!(status(libc::ENOEXEC), EXIT_CANNOT_EXECUTE);
    }
}
