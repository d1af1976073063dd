//! `codexbox ps [TARGET]`: the sessions of an exec-server and their
//! processes (`session/list`), so a person finds what to `attach` to
//! without the ids `exec --detach` printed once: one line per process (a
//! session without any gets one line too), whether a client is attached or
//! how long the session has left, the state and the command; `--json`
//! prints the server's answer. Its own session is left out, and asks for no
//! grace period, so it is gone as soon as `ps` is.

use std::ffi::OsString;
use std::time::Duration;

use clap::Parser;

use super::hint::{human_duration, shell_words};
use super::target::TargetArgs;
use super::ShellError;
use crate::client::{ClientError, ExecServerClient, ProcessState, SessionSummary};
use crate::protocol::envelope::code::METHOD_NOT_FOUND;
use crate::terminal_text::{self, Escaped};

const NAME: &str = "codexbox ps";

/// List the sessions of an exec-server and their processes.
#[derive(Debug, Parser)]
#[command(
    name = "codexbox ps",
    after_help = "Follow a listed process with: codexbox attach TARGET --session SESSION --process PROCESS (--from-start to see its retained output first).\n\nExit status: 0; 1 when the server cannot list its sessions; 255 when the connection failed; 2 for usage errors."
)]
struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// Print the server's answer as JSON: {"sessions": [...]}.
    #[arg(long)]
    json: bool,
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Entry point of the `ps` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    super::main_with(NAME, &argv, run)
}

async fn run(args: Args) -> Result<i32, ShellError> {
    let local_env = |name: &str| std::env::var(name).ok();
    let target = args.target.flags(&local_env)?;
    // Its own session goes away with it.
    let options = args
        .target
        .connect_options(&local_env)?
        .session_grace(Duration::ZERO);
    let client = ExecServerClient::connect_and_initialize(options, NAME).await?;
    let listed = client.session_list().await;
    client.close_and_wait().await;
    let sessions: Vec<SessionSummary> = listed
        .map_err(|err| match err {
            ClientError::Rpc(rpc) if rpc.code == METHOD_NOT_FOUND => ShellError::Failed(
                "this server cannot list its sessions (it does not know session/list, a codexbox extension)".into(),
            ),
            other => ShellError::Client(other),
        })?
        .into_iter()
        .filter(|session| !session.current)
        .collect();
    if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "sessions": sessions }))
            .map_err(|err| ShellError::Failed(err.to_string()))?;
        crate::startup::announce(&text);
        return Ok(0);
    }
    crate::startup::announce(table(&sessions).trim_end_matches('\n'));
    if sessions.iter().any(|s| !s.processes.is_empty()) {
        eprintln!(
            "{NAME}: follow one with: codexbox attach {} --session SESSION --process PROCESS",
            Escaped(&shell_words(&target))
        );
    }
    Ok(0)
}

/// The listing as aligned columns, every string from the server escaped.
fn table(sessions: &[SessionSummary]) -> String {
    let mut rows = vec![["SESSION", "CLIENT", "PROCESS", "STATE", "COMMAND"].map(str::to_owned)];
    for session in sessions {
        let client = match (session.attached, session.expires_in_ms) {
            (true, _) => "attached".to_owned(),
            (false, Some(ms)) => format!("none, {} left", human_duration(ms.div_ceil(1000))),
            (false, None) => "none".to_owned(),
        };
        let id = terminal_text::escape(&session.session_id).into_owned();
        if session.processes.is_empty() {
            rows.push([id, client, "-".into(), "-".into(), String::new()]);
            continue;
        }
        for process in &session.processes {
            let state = match (process.state, process.exit_code) {
                (ProcessState::Running, _) => "running".to_owned(),
                (ProcessState::Exited, Some(code)) => format!("exited {code}"),
                (ProcessState::Closed, Some(code)) => format!("closed {code}"),
                (ProcessState::Exited, None) => "exited".to_owned(),
                (ProcessState::Closed, None) => "closed".to_owned(),
            };
            rows.push([
                id.clone(),
                client.clone(),
                terminal_text::escape(&process.process_id).into_owned(),
                state,
                terminal_text::escape(&shell_words(&process.argv)).into_owned(),
            ]);
        }
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(terminal_text::width(cell));
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (index, (cell, width)) in row.iter().zip(widths).enumerate() {
            line.push_str(cell);
            if index + 1 < row.len() {
                let pad = width.saturating_sub(terminal_text::width(cell)) + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ProcessSummary;

    #[test]
    fn the_table_aligns_its_columns_and_escapes_the_server_strings() {
        let process = |id: &str, state, exit_code, argv: &[&str]| ProcessSummary {
            process_id: id.into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            tty: false,
            state,
            exit_code,
            next_seq: 1,
            started_at_ms: 0,
        };
        let sessions = [
            SessionSummary {
                session_id: "s1".into(),
                attached: false,
                current: false,
                session_grace_secs: 3600,
                expires_in_ms: Some(3_599_001),
                processes: vec![
                    process("exec-a", ProcessState::Running, None, &["sleep", "9"]),
                    process(
                        "p\u{1b}",
                        ProcessState::Closed,
                        Some(3),
                        &["sh", "-c", "exit 3"],
                    ),
                ],
            },
            SessionSummary {
                session_id: "session-two".into(),
                attached: true,
                current: false,
                session_grace_secs: 30,
                expires_in_ms: None,
                processes: Vec::new(),
            },
        ];
        let text = table(&sessions);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(
            lines[1],
            "s1           none, 1 h left  exec-a   running   sleep 9"
        );
        assert!(
            lines[2].contains("p\\x1b") && lines[2].ends_with("closed 3  sh -c 'exit 3'"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("session-two  attached") && lines[3].ends_with('-'),
            "{text}"
        );
        let column = |line: &str| line.find("PROCESS").or_else(|| line.find("exec-a"));
        assert_eq!(column(lines[0]), column(lines[1]));
    }
}
