//! `codexbox attach`: re-attach to a process of a detached session (one
//! started with `exec --detach`, or whose client went away) within the
//! server's session grace period, and follow it as `exec` would: from now,
//! from a given seq (`--after-seq`, as `exec` and `attach` print when they
//! let go), or from the start of the retained output (`--from-start`).
//! With `-t`/`-i` it is interactive (keys and signals go to the process);
//! without, it only watches, and Ctrl-C ends the watch.

use std::ffi::OsString;
use std::io::IsTerminal;

use clap::Parser;

use super::attachment::{self, Attachment};
use super::target::TargetArgs;
use super::terminal::{self, RawMode};
use super::{finish, ConnectionArgs, ShellError};
use crate::client::remote::AttachFrom;
use crate::client::{ClientError, RemoteExecServerClient};

const NAME: &str = "codexbox attach";

/// Re-attach to a process of a detached session.
#[derive(Debug, Parser)]
#[command(
    name = "codexbox attach",
    version,
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
}

/// Entry point of the `attach` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args: Args = match crate::startup::parse(&argv) {
        Ok(args) => args,
        Err(code) => return code,
    };
    finish(NAME, super::run_async(NAME, run(args)))
}

async fn run(args: Args) -> Result<i32, ShellError> {
    let local_env = |name: &str| std::env::var(name).ok();
    let options = args
        .connection
        .apply(args.target.connect_options(&local_env)?);
    let (client, mut events) = RemoteExecServerClient::resume(options, NAME, &args.session)
        .await
        .map_err(|err| match err {
            ClientError::Rpc(rpc) => ShellError::Failed(format!(
                "cannot resume session {}: {} (a detached session lives for the server's --session-grace-secs)",
                args.session, rpc.message
            )),
            other => ShellError::Client(other),
        })?;
    let from = match (args.from_start, args.after_seq) {
        (true, _) => AttachFrom::After(0),
        (false, Some(seq)) => AttachFrom::After(seq),
        (false, None) => AttachFrom::Now,
    };
    let interactive = args.tty || args.stdin;
    let raw = if args.tty && std::io::stdin().is_terminal() {
        RawMode::enter()?
    } else {
        None
    };
    let start = match client.attach_process(&args.process, from).await {
        Ok(start) => start,
        Err(err) => {
            drop(raw);
            return Err(match err {
                ClientError::Rpc(rpc) => ShellError::Failed(format!(
                    "cannot attach to process {}: {}",
                    args.process, rpc.message
                )),
                other => ShellError::Client(other),
            });
        }
    };
    if args.tty {
        if let Some(size) = terminal::window_size() {
            if let Err(err) = client.process_resize(&args.process, size).await {
                tracing::debug!("cannot resize {}: {err}", args.process);
            }
        }
    }
    let attachment = Attachment {
        process_id: args.process.clone(),
        tty: args.tty,
        stdin: args.stdin || (args.tty && raw.is_some()),
        forward_signals: interactive,
        raw: raw.is_some(),
        after_seq: start,
    };
    let outcome = attachment::run(&client, &mut events, &attachment).await;
    drop(raw);
    Ok(super::report(NAME, &args.session, &attachment, outcome))
}
