//! `codexbox attach`: re-attach to a process of a detached session (one
//! started with `exec --detach`, or whose client went away) within the
//! server's session grace period, and follow it as `exec` would: from now,
//! from a given seq (`--after-seq`, as `exec` and `attach` print when they
//! let go), or from the start of the retained output (`--from-start`).
//! With `-t`/`-i` it is interactive (keys and signals go to the process; a
//! second Ctrl-C, SIGTERM or SIGHUP lets go of it); without, it only
//! watches, and Ctrl-C ends the watch. Either way the process goes on when
//! `attach` leaves before it closed.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::time::Duration;

use clap::Parser;

use super::attachment::{self, Attachment};
use super::target::TargetArgs;
use super::terminal::{self, RawMode};
use super::{ConnectionArgs, Place, ShellError};
use crate::client::remote::AttachFrom;
use crate::client::{ClientError, RemoteExecServerClient};
use crate::protocol::envelope::code::SESSION_ALREADY_ATTACHED;

const NAME: &str = "codexbox attach";

/// Re-attach to a process of a detached session.
#[derive(Debug, Parser)]
#[command(
    name = "codexbox attach",
    after_help = "Exit status: the process's (as for exec) once it closes; 128+N when signal N ended a watch; 255 when the connection was lost for good."
)]
struct Args {
    #[command(flatten)]
    target: TargetArgs,
    #[command(flatten)]
    connection: ConnectionArgs,
    /// The session (printed by `exec --detach`).
    #[arg(long, value_name = "ID")]
    session: String,
    /// The process in that session.
    #[arg(long, value_name = "ID")]
    process: String,
    /// Show the retained output from its start first.
    #[arg(long, conflicts_with = "after_seq")]
    from_start: bool,
    /// Continue after this event (as printed when an attachment ends).
    #[arg(long, value_name = "SEQ")]
    after_seq: Option<u64>,
    /// The process runs on a terminal: raw mode here, window size sent.
    #[arg(short = 't', long)]
    tty: bool,
    /// Send stdin to the process (and signals: interactive).
    #[arg(short = 'i', long = "stdin")]
    stdin: bool,
    /// How long the server keeps the session once no client is attached
    /// (default: as it was). The server bounds it by its maximum.
    #[arg(long, value_name = "SECS")]
    session_grace_secs: Option<u64>,
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Entry point of the `attach` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    super::main_with(NAME, &argv, run)
}

async fn run(args: Args) -> Result<i32, ShellError> {
    let local_env = |name: &str| std::env::var(name).ok();
    let target = args.target.flags(&local_env)?;
    let mut options = args
        .connection
        .apply(args.target.connect_options(&local_env)?);
    if let Some(secs) = args.session_grace_secs {
        options = options.session_grace(Duration::from_secs(secs));
    }
    let stdin_is_terminal = std::io::stdin().is_terminal();
    let tty = args.tty && stdin_is_terminal;
    if args.tty && !tty {
        eprintln!("{NAME}: stdin is not a terminal: -t ignored");
    }
    let (client, mut events) = RemoteExecServerClient::resume(options, NAME, &args.session)
        .await
        .map_err(|err| match err {
            ClientError::Rpc(rpc) if rpc.code == SESSION_ALREADY_ATTACHED => ShellError::Failed(format!(
                "cannot resume session {}: {}, which still answers",
                args.session, rpc.message
            )),
            ClientError::Rpc(rpc) => ShellError::Failed(format!(
                "cannot resume session {}: {} (a session without a client lives for its grace period; codexbox ps lists the live ones)",
                args.session, rpc.message
            )),
            other => ShellError::Client(other),
        })?;
    let from = match (args.from_start, args.after_seq) {
        (true, _) => AttachFrom::After(0),
        (false, Some(seq)) => AttachFrom::After(seq),
        (false, None) => AttachFrom::Now,
    };
    let interactive = tty || args.stdin;
    let raw = if tty { RawMode::enter()? } else { None };
    let start = match client.attach_process(&args.process, from).await {
        Ok(start) => start,
        Err(err) => {
            drop(raw);
            client.close().await;
            return Err(match err {
                ClientError::Rpc(rpc) => ShellError::Failed(format!(
                    "cannot attach to process {}: {}",
                    args.process, rpc.message
                )),
                other => ShellError::Client(other),
            });
        }
    };
    if tty {
        if let Some(size) = terminal::window_size() {
            if let Err(err) = client.process_resize(&args.process, size).await {
                tracing::debug!("cannot resize {}: {err}", args.process);
            }
        }
    }
    let attachment = Attachment {
        process_id: args.process.clone(),
        tty,
        stdin: args.stdin || (tty && raw.is_some()),
        forward_signals: interactive,
        owns_process: false,
        stop_grace: Duration::ZERO,
        raw: raw.is_some(),
        after_seq: start,
    };
    let outcome = attachment::run(&client, &mut events, &attachment).await;
    drop(raw);
    let place = Place {
        name: NAME,
        target: &target,
        session: &args.session,
    };
    let code = super::report(&place, &client, &attachment, outcome).await;
    client.close().await;
    Ok(code)
}
