//! Sandboxed `true` (docs/performance.md: through the server, at most the direct
//! bubblewrap run with the same argv + 2 ms), measured beside that baseline
//! in the same run through the exec-server's sandboxed `process/start`, and
//! for reference through `codexbox linux-sandbox` run directly. The
//! baseline argv is the one `linux-sandbox --explain` prints for the
//! read-only profile, run with the system bubblewrap.
//! Runs alternate so that machine load affects every variant alike.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codexbox::client::{ProcessEvent, StartParams};
use serde_json::json;

use crate::common::{self, ms, quantile, Report, Server, Value};
use crate::process::{connect, next_event, BenchResult};

const RUNS: usize = 150;
const WARM_UP_RUNS: usize = 5;
/// The target: sandboxed `true` may cost at most this much over direct bwrap.
const BUDGET_MS: f64 = 2.0;
const READ_ONLY: &str = r#"{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"}"#;
const CWD: &str = "/tmp";

/// Adds the sandboxed `true` figures to the report.
pub fn run(report: &mut Report) {
    if let Err(err) = measure(report) {
        report.failed("sandboxed true", &err.to_string());
    }
}

fn measure(report: &mut Report) -> BenchResult {
    let bwrap = which::which("bwrap").map_err(|_| "no system bwrap on PATH to compare with")?;
    let direct = explained_argv()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let server = Server::start(&[])?;
    let (client, mut events) = runtime.block_on(connect(&server.url))?;
    let true_path = which::which("true")?.to_string_lossy().into_owned();

    let (mut baseline, mut helper, mut served) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..WARM_UP_RUNS + RUNS {
        let base = timed(Command::new(&bwrap).args(&direct[1..]))?;
        let cli = timed(Command::new(common::BIN).args([
            "linux-sandbox",
            "--sandbox-policy-cwd",
            CWD,
            "--permission-profile",
            READ_ONLY,
            "--",
            &true_path,
        ]))?;
        let id = format!("sandboxed{i}");
        let mut params = StartParams::new(id.as_str(), [true_path.as_str()]);
        params.sandbox = Some(json!({
            "permissions": serde_json::from_str::<serde_json::Value>(READ_ONLY)?,
            "cwd": CWD,
            "windowsSandboxLevel": "disabled",
        }));
        let started = Instant::now();
        runtime.block_on(async {
            client.process_start(&params).await?;
            loop {
                if let ProcessEvent::Exited {
                    process_id,
                    exit_code,
                    ..
                } = next_event(&mut events).await?
                {
                    if process_id == id {
                        if exit_code != 0 {
                            return Err(format!("sandboxed true exited {exit_code}").into());
                        }
                        return Ok::<_, Box<dyn std::error::Error>>(());
                    }
                }
            }
        })?;
        let through_server = started.elapsed();
        if i >= WARM_UP_RUNS {
            baseline.push(base);
            helper.push(cli);
            served.push(through_server);
        }
    }
    let base = ms(quantile(&mut baseline, 0.5));
    // The budget is for the server path; the helper run from a shell
    // is shown beside it for reference.
    for (name, samples, budgeted) in [
        (
            "sandboxed true via codex-linux-sandbox p50",
            &mut helper,
            false,
        ),
        (
            "sandboxed true via exec-server (start->exited) p50",
            &mut served,
            true,
        ),
    ] {
        let measured = ms(quantile(samples, 0.5));
        let overhead = measured - base;
        let verdict = match (budgeted, overhead <= BUDGET_MS) {
            (false, _) => "informational: the target is through the server",
            (true, true) => "ok",
            (true, false) => "MISSED",
        };
        let target = if budgeted {
            format!(" (target <= +{BUDGET_MS} ms)")
        } else {
            String::new()
        };
        report.figure(
            Value::new(name, measured, "ms"),
            Value::new("direct bwrap, same argv, p50", base, "ms"),
            &format!("overhead {overhead:+.2} ms{target}: {verdict}"),
        );
    }
    Ok(())
}

/// The launcher argv `linux-sandbox --explain` prints (`argv: bwrap …`), split
/// like a shell would (it single-quotes the profile JSON).
fn explained_argv() -> BenchResult<Vec<String>> {
    let output = Command::new(common::BIN)
        .args([
            "linux-sandbox",
            "--explain",
            "--sandbox-policy-cwd",
            CWD,
            "--permission-profile",
            READ_ONLY,
            "--",
            "true",
        ])
        .env("CODEXBOX_BWRAP", "system")
        .output()?;
    let text = String::from_utf8(output.stdout)?;
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("argv: "))
        .ok_or("linux-sandbox --explain printed no argv line")?;
    let argv = split_single_quoted(line);
    if argv.first().map(String::as_str) != Some("bwrap") {
        return Err(format!("unexpected explained argv: {line}").into());
    }
    Ok(argv)
}

fn split_single_quoted(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            ' ' if !quoted => words.extend(word.take()),
            _ => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

fn timed(cmd: &mut Command) -> BenchResult<Duration> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let start = Instant::now();
    let status = cmd.status()?;
    let elapsed = start.elapsed();
    if !status.success() {
        return Err(format!("{cmd:?} exited with {status}").into());
    }
    Ok(elapsed)
}
