//! `codexbox exec`: run one command on an exec-server (direct or through a
//! registry) as if it ran here — output streamed as it comes, stdin with
//! `-i`, a terminal with `-t` (when there is one here: like `ssh`, `-t`
//! without a terminal on stdin warns and runs without one), signals passed
//! on, the exit status passed through, and stopped (with the command) on a
//! second Ctrl-C or a SIGTERM — or start it detached (`--detach`), its
//! session kept for `--session-grace-secs`, for `codexbox attach`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use clap::Parser;

use super::attachment::{self, Attachment};
use super::hint::{human_duration, AttachCommand};
use super::target::TargetArgs;
use super::terminal::{self, RawMode};
use super::{ConnectionArgs, Place, ShellError};
use crate::client::{ClientError, RemoteExecServerClient, StartParams};
use crate::protocol::process::{EnvInherit, EnvPolicy};
use crate::protocol::sandbox::FileSystemSandboxContext;
use crate::wire_path::WirePath;

const NAME: &str = "codexbox exec";
/// How long a detached command's session survives without a client, unless
/// `--session-grace-secs` says otherwise.
const DETACHED_SESSION_GRACE: Duration = Duration::from_secs(3600);
/// How long a command passed SIGTERM or SIGHUP gets to end before it is killed.
const STOP_GRACE_MS: u64 = 3000;

/// Which of the server's variables the command inherits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum EnvPolicyChoice {
    /// The core variables (PATH, HOME, USER, SHELL, LANG, TMPDIR, …), then
    /// `-e` on top.
    Core,
    /// Everything the server has but names holding KEY, SECRET or TOKEN,
    /// then `-e`.
    All,
    /// Only `-e` (and TERM with `-t`).
    None,
}

/// Run a command on an exec-server.
#[derive(Debug, Parser)]
#[command(
    name = "codexbox exec",
    after_help = "The exit status is the command's (128+N when signal N killed it); 127 when it was not found, 126 when it could not be started otherwise (not executable, a bad -C directory); 255 when the connection was lost for good; 2 for usage errors."
)]
struct Args {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    connection: ConnectionArgs,
    /// Run the command on a terminal (keys are sent as typed; the window
    /// size follows this one).
    #[arg(short = 't', long)]
    tty: bool,
    /// Send stdin to the command (EOF closes its stdin).
    #[arg(short = 'i', long = "stdin")]
    stdin: bool,
    /// Set a variable: K=V, or K to pass this shell's value (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Which of the server's variables the command inherits.
    #[arg(long, value_enum, default_value_t = EnvPolicyChoice::Core)]
    env_policy: EnvPolicyChoice,
    /// Working directory on the server (relative to the server's own).
    #[arg(short = 'C', long = "cd", value_name = "DIR")]
    cwd: Option<String>,
    /// Run in the sandbox with this permission profile (read-only,
    /// workspace, danger-full-access, or a PermissionProfile JSON document
    /// or file), the working directory as the workspace.
    #[arg(short = 'P', long = "permission-profile", value_name = "PROFILE")]
    profile: Option<String>,
    /// Start the command, print how to attach to it, and exit.
    #[arg(short = 'd', long)]
    detach: bool,
    /// How long the server keeps the command's session (and the command)
    /// once no client is attached (default with --detach: 3600; otherwise
    /// the server's own). The server bounds it by its maximum.
    #[arg(long, value_name = "SECS")]
    session_grace_secs: Option<u64>,
    /// Milliseconds a command passed SIGTERM or SIGHUP gets to end before it
    /// is killed.
    #[arg(long, value_name = "MS", default_value_t = STOP_GRACE_MS, hide = true)]
    stop_grace_ms: u64,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Entry point of the `exec` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    super::main_with(NAME, &argv, run)
}

/// Parses `-e` entries: `K=V`, or `K` for this process's value of `K`
/// (skipped when unset, as docker does).
fn env_entries(
    entries: &[String],
    local: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, ShellError> {
    let mut env = BTreeMap::new();
    for entry in entries {
        match entry.split_once('=') {
            Some(("", _)) => return Err(ShellError::Usage(format!("-e {entry}: empty name"))),
            Some((name, value)) => {
                env.insert(name.to_owned(), value.to_owned());
            }
            None if entry.is_empty() => {
                return Err(ShellError::Usage("-e needs K=V or K".into()));
            }
            None => {
                if let Some(value) = local(entry) {
                    env.insert(entry.clone(), value);
                }
            }
        }
    }
    Ok(env)
}

fn command_strings(command: &[OsString]) -> Result<Vec<String>, ShellError> {
    command
        .iter()
        .map(|arg| {
            arg.clone().into_string().map_err(|arg| {
                ShellError::Usage(format!(
                    "{}: arguments must be UTF-8 (the wire carries text)",
                    arg.to_string_lossy()
                ))
            })
        })
        .collect()
}

/// The terminal and stdin a command gets: `-t` only with a terminal on
/// stdin here (else a warning, and stdin is sent instead, as `ssh` does).
fn terminal_choice(args: &Args, stdin_is_terminal: bool) -> (bool, bool) {
    if args.tty && !args.detach && !stdin_is_terminal {
        eprintln!(
            "{NAME}: stdin is not a terminal: the command runs without one (-t ignored) and gets this stdin"
        );
        return (false, true);
    }
    (args.tty, args.stdin)
}

async fn run(args: Args) -> Result<i32, ShellError> {
    let local_env = |name: &str| std::env::var(name).ok();
    let argv = command_strings(&args.command)?;
    let stdin_is_terminal = std::io::stdin().is_terminal();
    let (tty, stdin) = terminal_choice(&args, stdin_is_terminal);
    let mut env = env_entries(&args.env, &local_env)?;
    if tty && !env.contains_key("TERM") {
        env.insert(
            "TERM".into(),
            local_env("TERM").unwrap_or_else(|| "xterm".into()),
        );
    }
    let profile = args
        .profile
        .as_deref()
        .map(crate::sandbox::debug::read_profile)
        .transpose()
        .map_err(ShellError::Usage)?;
    let target = args.target.flags(&local_env)?;
    let mut options = args
        .connection
        .apply(args.target.connect_options(&local_env)?);
    let grace = args
        .session_grace_secs
        .map(Duration::from_secs)
        .or(args.detach.then_some(DETACHED_SESSION_GRACE));
    if let Some(grace) = grace {
        options = options.session_grace(grace);
    }
    let (client, mut events) = RemoteExecServerClient::connect(options, NAME).await?;
    let server_cwd = client.environment_info().await?.cwd;
    let cwd = super::remote_path(server_cwd.as_deref(), args.cwd.as_deref().unwrap_or("."))?;
    let unique: String = uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .take(12)
        .collect();
    let process_id = format!("exec-{unique}");
    let sandbox = profile
        .map(|profile| {
            let context = FileSystemSandboxContext::from_permissions(profile, Some(&cwd));
            serde_json::to_value(context).map_err(|err| ShellError::Usage(err.to_string()))
        })
        .transpose()?;
    let interactive_terminal = tty && stdin_is_terminal && !args.detach;
    let params = StartParams {
        env,
        env_policy: Some(EnvPolicy {
            inherit: match args.env_policy {
                EnvPolicyChoice::Core => EnvInherit::Core,
                EnvPolicyChoice::All => EnvInherit::All,
                EnvPolicyChoice::None => EnvInherit::None,
            },
            ..EnvPolicy::default()
        }),
        sandbox,
        size: tty.then(|| terminal::window_size().unwrap_or_default()),
        ..StartParams::new(process_id.clone(), argv.clone())
            .cwd(WirePath::native(&cwd))
            .tty(tty)
            .pipe_stdin(stdin && !tty)
    };
    // Raw mode before the start, so no key typed meanwhile is echoed here.
    let raw = if interactive_terminal {
        RawMode::enter()?
    } else {
        None
    };
    if let Err(err) = client.process_start(&params).await {
        drop(raw);
        let command = argv.join(" ");
        if matches!(err, ClientError::Rpc(_)) {
            if let Some(problem) = directory_problem(&client, &cwd).await {
                client.close().await;
                return Err(ShellError::Directory {
                    command,
                    dir: cwd.display().to_string(),
                    problem,
                });
            }
        }
        client.close().await;
        return Err(ShellError::Start {
            command,
            source: err,
        });
    }
    let session = client.session_id().await.unwrap_or_default();
    if args.detach {
        let granted = client.session_grace().await;
        client.close().await;
        announce_detached(&target, &session, &process_id, tty, stdin, granted);
        return Ok(0);
    }
    let attachment = Attachment {
        process_id,
        tty,
        stdin: stdin || interactive_terminal,
        forward_signals: true,
        owns_process: true,
        stop_grace: Duration::from_millis(args.stop_grace_ms),
        raw: raw.is_some(),
        after_seq: 0,
    };
    let outcome = attachment::run(&client, &mut events, &attachment).await;
    drop(raw);
    let place = Place {
        name: NAME,
        target: &target,
        session: &session,
    };
    let code = super::report(&place, &client, &attachment, outcome).await;
    client.close().await;
    Ok(code)
}

/// Prints the `attach` command of a detached command on stdout and how long
/// its session is kept on stderr.
fn announce_detached(
    target: &[String],
    session: &str,
    process: &str,
    tty: bool,
    stdin: bool,
    granted: Option<Duration>,
) {
    let command = AttachCommand {
        target,
        session,
        process,
        after_seq: Some(0),
        tty,
        stdin,
    };
    crate::startup::announce(&command.to_string());
    match granted {
        Some(grace) => eprintln!(
            "{NAME}: detached; the server keeps the command for {} after its last client leaves (list with: codexbox ps {})",
            human_duration(grace.as_secs()),
            crate::terminal_text::Escaped(&super::hint::shell_words(target))
        ),
        None => eprintln!(
            "{NAME}: detached; the server did not say how long it keeps the command without a client (its own session grace period: 30 s unless configured)"
        ),
    }
}

/// What is wrong with the working directory `dir` on the server, if
/// anything (asked after a start failed, so that a missing `-C` directory
/// is not blamed on the command).
async fn directory_problem(client: &RemoteExecServerClient, dir: &Path) -> Option<String> {
    let params = serde_json::json!({ "path": WirePath::native(dir) });
    match client.call("fs/getMetadata", params).await {
        Ok(metadata) if metadata["isDirectory"] == false => Some("not a directory".into()),
        Err(ClientError::Rpc(rpc)) => Some(rpc.message),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_entries_take_pairs_and_names_of_local_variables() {
        let local = |name: &str| (name == "HOME").then(|| "/home/me".to_owned());
        let env = env_entries(
            &["A=1".into(), "B=x=y".into(), "HOME".into(), "UNSET".into()],
            &local,
        );
        let expected: BTreeMap<String, String> = [("A", "1"), ("B", "x=y"), ("HOME", "/home/me")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(env.ok(), Some(expected));
        assert!(matches!(
            env_entries(&["=v".into()], &local),
            Err(ShellError::Usage(_))
        ));
    }
}
