//! The front ends for people: `codexbox exec` (run a command on an
//! exec-server as if it ran here), `codexbox attach` (re-attach to a
//! process of a detached session), `codexbox ps` (list the sessions to
//! attach to) and `codexbox cp` (copy files and trees both ways). They are
//! thin: connecting is [`target`]'s, the terminal [`terminal`]'s, the I/O
//! loop of an attached process [`attachment`]'s, the command lines printed
//! for a person [`hint`]'s, and everything on the wire the client
//! library's ([`crate::client::RemoteExecServerClient`],
//! [`crate::client::ExecServerClient`] and its transfers). Exit codes are
//! decided here, in [`ShellError::exit_code`] and [`report`], which also
//! ends the command of an `exec` that was told to stop.

pub mod attach;
pub mod attachment;
pub mod cp;
pub mod exec;
pub mod hint;
pub mod ps;
pub mod target;
pub mod terminal;

use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::client::remote::RECOVERY_WINDOW;
use crate::client::{ClientError, ConnectOptions};
use crate::terminal_text::Escaped;
use crate::wire_path::WirePath;
use attachment::{Attachment, Outcome};

/// Exit code when the connection is lost or cannot be made (as ssh does).
pub const EXIT_CONNECTION: i32 = 255;

/// Why a front end stopped before its command finished.
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Target(#[from] target::TargetError),
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("cannot start `{command}`: {}", reason(source))]
    Start {
        command: String,
        #[source]
        source: ClientError,
    },
    #[error("cannot start `{command}` in {dir} on the server: {problem}")]
    Directory {
        command: String,
        dir: String,
        problem: String,
    },
    #[error(transparent)]
    Terminal(#[from] terminal::TerminalError),
    #[error("{0}")]
    Failed(String),
}

/// Why a request failed, for a person: the server's own words when it
/// answered with an error, the client's otherwise.
fn reason(err: &ClientError) -> String {
    match err {
        ClientError::Rpc(rpc) => rpc.message.clone(),
        other => other.to_string(),
    }
}

impl ShellError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Usage(_) => 2,
            Self::Target(err) => err.exit_code(),
            Self::Client(ClientError::Rpc(_)) => 1,
            Self::Client(_) => EXIT_CONNECTION,
            // The server words the OS error of the exec (`No such file or
            // directory (os error 2)`): not found, or found but not runnable,
            // as a shell tells them apart.
            Self::Start {
                source: ClientError::Rpc(rpc),
                ..
            } if rpc.message.contains("(os error 2)") => crate::cli::EXIT_NOT_FOUND,
            Self::Start {
                source: ClientError::Rpc(_),
                ..
            }
            | Self::Directory { .. } => crate::cli::EXIT_CANNOT_EXECUTE,
            Self::Start { .. } => EXIT_CONNECTION,
            Self::Terminal(_) | Self::Failed(_) => 1,
        }
    }
}

/// The flags of a long-lived connection (`exec`, `attach`).
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Seconds to keep trying to get a lost connection back (the session is
    /// resumed and the missed output backfilled) before giving up.
    #[arg(long, value_name = "SECS", default_value_t = RECOVERY_WINDOW.as_secs())]
    reconnect_secs: u64,
}

impl ConnectionArgs {
    fn apply(&self, options: ConnectOptions) -> ConnectOptions {
        options.recovery_window(Duration::from_secs(self.reconnect_secs))
    }
}

/// The entry point of a front end: parses `argv` as `A`, runs `run` on a
/// fresh runtime and turns its result into the exit code.
fn main_with<A, F, Fut>(name: &str, argv: &[std::ffi::OsString], run: F) -> i32
where
    A: clap::Parser,
    F: FnOnce(A) -> Fut,
    Fut: Future<Output = Result<i32, ShellError>>,
{
    match crate::cli::parse::<A>(argv, name) {
        Ok(args) => finish(name, run_async(name, run(args))),
        Err(exit) => exit.report(),
    }
}

/// Runs a front end's future on a fresh runtime (dispatch runs before any
/// runtime exists) with logging on stderr.
fn run_async<F>(name: &str, future: F) -> Result<i32, ShellError>
where
    F: Future<Output = Result<i32, ShellError>>,
{
    crate::logging::init(crate::logging::LogFormat::Text);
    crate::startup::tune_allocator(crate::startup::Memory::Lean);
    // Without a runtime `startup::runtime` has said why: exit 1.
    let Some(runtime) = crate::startup::runtime(name, crate::startup::Threads::PerCpu) else {
        return Ok(1);
    };
    let outcome = runtime.block_on(future);
    // A thread may sit in a blocking read of stdin: do not wait for it.
    runtime.shutdown_background();
    tracing::debug!(mode = name, "done");
    outcome
}

/// The exit code of a front end's result, printing its error (escaped:
/// it may carry the server's words).
fn finish(name: &str, outcome: Result<i32, ShellError>) -> i32 {
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{name}: {}", Escaped(&err.to_string()));
            if matches!(&err, ShellError::Client(client) if client.is_unauthorized()) {
                eprintln!("{name}: the server wants a bearer token: --token-file FILE or CODEXBOX_AUTH_TOKEN (a `codexbox connect` of this user on a loopback address is found without either)");
            }
            err.exit_code()
        }
    }
}

/// A path on the server: `text` (absolute, a `file:` URI, or relative to
/// the server's working directory `server_cwd`, a `file:` URI or `/`),
/// with `.` components dropped.
pub fn remote_path(server_cwd: Option<&str>, text: &str) -> Result<PathBuf, ShellError> {
    let parse = |text: &str| {
        WirePath::parse(text)
            .map(WirePath::into_path)
            .map_err(|err| ShellError::Usage(format!("invalid server path `{text}`: {err}")))
    };
    let path = if text.starts_with('/') || text.starts_with("file:") {
        parse(text)?
    } else {
        let base = match server_cwd {
            Some(cwd) => parse(cwd)?,
            None => PathBuf::from("/"),
        };
        base.join(text)
    };
    let mut clean = PathBuf::new();
    for component in path.components() {
        if component != Component::CurDir {
            clean.push(component);
        }
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") && clean != Path::new("/") {
        clean.push("");
    }
    Ok(clean)
}

/// Where an attachment runs, for the lines printed when it ends.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// `codexbox exec` or `codexbox attach`.
    pub name: &'a str,
    /// The flags naming the server ([`target::TargetArgs::flags`]).
    pub target: &'a [String],
    pub session: &'a str,
}

impl Place<'_> {
    /// The `codexbox attach` command that continues `attachment` after
    /// `after_seq`.
    pub fn attach_command<'b>(
        &'b self,
        attachment: &'b Attachment,
        after_seq: u64,
    ) -> hint::AttachCommand<'b> {
        hint::AttachCommand {
            target: self.target,
            session: self.session,
            process: &attachment.process_id,
            after_seq: Some(after_seq),
            tty: attachment.tty,
            stdin: attachment.stdin,
        }
    }
}

/// How long the owner of a process waits for the server to end it when it
/// was told to stop.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// Prints what an attachment's end means and returns the exit code: the
/// command's own (0–255, 128+N for signal N), 128+N when our signal N ended
/// a watch, [`EXIT_CONNECTION`] when the connection was lost for good. The
/// process of an attachment told to stop ([`Outcome::Stopped`]) is ended
/// first (`process/terminate`, bounded by [`STOP_WAIT`]).
async fn report(
    place: &Place<'_>,
    client: &crate::client::RemoteExecServerClient,
    attachment: &Attachment,
    outcome: Outcome,
) -> i32 {
    let name = place.name;
    match outcome {
        Outcome::Closed {
            exit_code,
            sandbox_denied,
        } => {
            if sandbox_denied {
                eprintln!("{name}: the sandbox denied something the command tried to do");
            }
            if (0..=255).contains(&exit_code) {
                exit_code
            } else {
                EXIT_CONNECTION
            }
        }
        Outcome::Detached { signal, after_seq } => {
            eprintln!(
                "{name}: detached; the process goes on. To continue: {}",
                place.attach_command(attachment, after_seq)
            );
            128 + signal
        }
        Outcome::Stopped { signal, after_seq } => {
            let what = crate::process::kill::signal_name(signal);
            let terminated =
                tokio::time::timeout(STOP_WAIT, client.process_terminate(&attachment.process_id))
                    .await;
            match terminated {
                Ok(Ok(true)) => eprintln!("{name}: stopped by {what}; the command was killed"),
                Ok(Ok(false)) => eprintln!(
                    "{name}: stopped by {what}; the command had already exited, and what it left running was killed"
                ),
                Ok(Err(err)) => eprintln!(
                    "{name}: stopped by {what} without reaching the server ({}); the command may still be running: {}",
                    Escaped(&err.to_string()),
                    place.attach_command(attachment, after_seq)
                ),
                Err(_) => eprintln!(
                    "{name}: stopped by {what} without an answer from the server within {} s; the command may still be running: {}",
                    STOP_WAIT.as_secs(),
                    place.attach_command(attachment, after_seq)
                ),
            }
            128 + signal
        }
        Outcome::Lost { message, after_seq } => {
            eprintln!("{name}: {}.", Escaped(&message));
            eprintln!(
                "{name}: the command may still be running (for the session's grace period); to continue: {}",
                place.attach_command(attachment, after_seq)
            );
            EXIT_CONNECTION
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_resolve_against_the_server_directory() {
        let cwd = Some("file:///srv/app");
        let resolve = |text| remote_path(cwd, text).ok();
        assert_eq!(resolve("."), Some(PathBuf::from("/srv/app")));
        assert_eq!(resolve("sub/./x"), Some(PathBuf::from("/srv/app/sub/x")));
        assert_eq!(resolve("/etc/hosts"), Some(PathBuf::from("/etc/hosts")));
        assert_eq!(resolve("file:///tmp/x"), Some(PathBuf::from("/tmp/x")));
        assert_eq!(resolve("dir/"), Some(PathBuf::from("/srv/app/dir/")));
        assert_eq!(remote_path(None, "x").ok(), Some(PathBuf::from("/x")));
        assert!(matches!(
            remote_path(cwd, "file://host/x"),
            Err(ShellError::Usage(_))
        ));
    }

    #[test]
    fn exit_codes_follow_what_went_wrong() {
        let start = |message: &str| ShellError::Start {
            command: "nope".into(),
            source: ClientError::Rpc(crate::protocol::RpcError::internal(message)),
        };
        let not_found = start("No such file or directory (os error 2)");
        assert_eq!(not_found.exit_code(), crate::cli::EXIT_NOT_FOUND);
        let denied = start("Permission denied (os error 13)");
        assert_eq!(denied.exit_code(), crate::cli::EXIT_CANNOT_EXECUTE);
        assert_eq!(ShellError::Client(ClientError::Closed).exit_code(), 255);
        assert_eq!(ShellError::Usage("x".into()).exit_code(), 2);
    }
}
