//! Sandboxed `true` through the exec-server (start→`process/exited`, p50),
//! each figure beside its baseline measured in the same run:
//!
//! - baselines: unsandboxed `true` through the same server, and the
//!   minimal bubblewrap run directly (`--ro-bind / / --unshare-all --dev
//!   /dev --proc /proc true`);
//! - per shape (read-only; workspace, a git checkout of 1k files;
//!   workspace with the deny glob `**/*.env` over 1k, 50k and 200k
//!   files): the steady state (a prepared sandbox reused; target ≤ 2.5 ms
//!   and ≤ 2× unsandboxed), the first command of a session (it prepares
//!   the sandbox), and `--sandbox-reuse off` (a one-shot sandbox each);
//! - 100 sandboxed `true` side by side against 100 unsandboxed (target
//!   ≤ 2×).
//!
//! Runs of a figure and of its baseline alternate in blocks, so load
//! drifts over both. The workspaces live under the target directory and
//! are kept between runs (making 200k files takes a while).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codexbox::client::{ExecServerClient, Notification, ProcessEvent, StartParams};
use futures_util::future::join_all;
use serde_json::{json, Value as Json};
use tokio::sync::mpsc;

use crate::common::{ms, quantile, ratio_at_most, Report, Server, Value};
use crate::process::{connect, next_event, BenchResult};

/// Measured runs of a steady-state figure (and of its baseline).
const STEADY_RUNS: usize = 200;
/// Fewer where every run rescans a large workspace.
const LARGE_RUNS: usize = 40;
/// Runs per block; blocks of a figure and its baseline alternate.
const BLOCK: usize = 20;
/// Unmeasured runs at the start of each block.
const WARM_UP: usize = 3;
/// Sessions whose first command is timed.
const FIRST_RUNS: usize = 15;
/// One-shot runs per shape.
const ONE_SHOT_RUNS: usize = 40;
const SIDE_BY_SIDE: usize = 100;
/// Targets of the steady state.
const TARGET_MS: f64 = 2.5;
const TARGET_RATIO: f64 = 2.0;

/// Adds the sandboxed figures to the report.
pub fn run(report: &mut Report) {
    if let Err(err) = measure(report) {
        report.failed("sandboxed true", &err.to_string());
    }
}

/// One shape of sandbox: its permissions and workspace.
struct Shape {
    name: String,
    permissions: Json,
    ws: PathBuf,
    runs: usize,
}

impl Shape {
    fn sandbox(&self) -> Json {
        json!({
            "permissions": self.permissions,
            "cwd": self.ws,
            "workspaceRoots": [self.ws],
            "windowsSandboxLevel": "disabled",
        })
    }
}

fn read_only() -> Json {
    json!({"type": "managed", "file_system": {"type": "restricted", "entries": [
        {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]},
        "network": "restricted"})
}

fn workspace(deny_glob: bool) -> Json {
    let special = |kind: &str, access: &str| json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access});
    let meta = |sub: &str| json!({"path": {"type": "special", "value": {"kind": "project_roots", "subpath": sub}}, "access": "read"});
    let mut entries = vec![
        special("root", "read"),
        special("project_roots", "write"),
        special("slash_tmp", "write"),
        meta(".git"),
        meta(".agents"),
        meta(".codex"),
    ];
    if deny_glob {
        entries.push(
            json!({"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"}),
        );
    }
    json!({"type": "managed", "file_system": {"type": "restricted", "entries": entries},
           "network": "restricted"})
}

/// A git checkout of `files` empty files (100 per directory, every 1000th
/// a `.env`), made once under the target directory.
fn workspace_of(files: usize) -> BenchResult<PathBuf> {
    let ws = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("bench-ws-{files}"));
    let done = ws.join(".bench-complete");
    if done.exists() {
        return Ok(ws);
    }
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(&ws)?;
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws)
        .status()?;
    if !git.success() {
        return Err("git init failed".into());
    }
    for i in 0..files {
        let dir = ws.join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let name = if i % 1000 == 0 {
            format!("f{i}.env")
        } else {
            format!("f{i}.rs")
        };
        std::fs::File::create(dir.join(name))?;
    }
    std::fs::File::create(&done)?;
    Ok(ws)
}

fn measure(report: &mut Report) -> BenchResult {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let small = workspace_of(1_000)?;
    let shapes = vec![
        Shape {
            name: "read-only".into(),
            permissions: read_only(),
            ws: small.clone(),
            runs: STEADY_RUNS,
        },
        Shape {
            name: "workspace (git checkout, 1k files)".into(),
            permissions: workspace(false),
            ws: small.clone(),
            runs: STEADY_RUNS,
        },
        Shape {
            name: "workspace + deny glob, 1k files".into(),
            permissions: workspace(true),
            ws: small,
            runs: STEADY_RUNS,
        },
        Shape {
            name: "workspace + deny glob, 50k files".into(),
            permissions: workspace(true),
            ws: workspace_of(50_000)?,
            runs: LARGE_RUNS,
        },
        Shape {
            name: "workspace + deny glob, 200k files".into(),
            permissions: workspace(true),
            ws: workspace_of(200_000)?,
            runs: LARGE_RUNS,
        },
    ];
    // Sessions end when their connection does: the first-command runs
    // open a session each, whose prepared sandboxes would otherwise count
    // against the server's bound until their grace ran out.
    let warm = Server::start(&["--session-grace-secs", "0"])?;
    let cold = Server::start(&["--sandbox-reuse", "off"])?;
    let true_path = which::which("true")?.to_string_lossy().into_owned();
    runtime.block_on(baselines(report, &warm.url, &true_path))?;
    for shape in &shapes {
        let outcome = runtime.block_on(figures(report, &warm.url, &cold.url, shape, &true_path));
        if let Err(err) = outcome {
            report.failed(&format!("sandboxed true, {}", shape.name), &err.to_string());
        }
    }
    if let Some(shape) = shapes.get(1) {
        let outcome = runtime.block_on(side_by_side(report, &warm.url, shape, &true_path));
        if let Err(err) = outcome {
            report.failed("100 sandboxed side by side", &err.to_string());
        }
    }
    Ok(())
}

/// Unsandboxed `true` through the server beside the minimal bubblewrap.
async fn baselines(report: &mut Report, url: &str, true_path: &str) -> BenchResult {
    let (client, mut events) = connect(url).await?;
    let mut served = Vec::new();
    let mut bwrap = Vec::new();
    let minimal = [
        "--ro-bind",
        "/",
        "/",
        "--unshare-all",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        true_path,
    ];
    let bwrap_path = which::which("bwrap").map_err(|_| "no system bwrap on PATH")?;
    for block in 0..STEADY_RUNS / BLOCK {
        served
            .extend(timed_runs(&client, &mut events, &format!("u{block}"), None, true_path).await?);
        for i in 0..WARM_UP + BLOCK {
            let started = Instant::now();
            let status = Command::new(&bwrap_path)
                .args(minimal)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            if !status.success() {
                return Err(format!("minimal bwrap exited with {status}").into());
            }
            if i >= WARM_UP {
                bwrap.push(started.elapsed());
            }
        }
    }
    let measured = ms(quantile(&mut served, 0.5));
    let base = ms(quantile(&mut bwrap, 0.5));
    report.figure(
        Value::new(
            "unsandboxed true via exec-server (start->exited) p50",
            measured,
            "ms",
        ),
        Value::new("minimal bwrap run directly p50", base, "ms"),
        "(the baselines of the figures below)",
    );
    Ok(())
}

/// `BLOCK` timed runs (after `WARM_UP`) of `true`, sandboxed when
/// `sandbox` is given; start→exited each.
async fn timed_runs(
    client: &ExecServerClient,
    events: &mut mpsc::Receiver<Notification>,
    prefix: &str,
    sandbox: Option<&Json>,
    true_path: &str,
) -> BenchResult<Vec<Duration>> {
    let mut out = Vec::with_capacity(BLOCK);
    for i in 0..WARM_UP + BLOCK {
        let elapsed = one_run(client, events, &format!("{prefix}-{i}"), sandbox, true_path).await?;
        if i >= WARM_UP {
            out.push(elapsed);
        }
    }
    Ok(out)
}

async fn one_run(
    client: &ExecServerClient,
    events: &mut mpsc::Receiver<Notification>,
    id: &str,
    sandbox: Option<&Json>,
    true_path: &str,
) -> BenchResult<Duration> {
    let mut params = StartParams::new(id, [true_path]);
    params.sandbox = sandbox.cloned();
    let started = Instant::now();
    client.process_start(&params).await?;
    loop {
        if let ProcessEvent::Exited {
            process_id,
            exit_code,
            ..
        } = next_event(events).await?
        {
            if process_id == id {
                if exit_code != 0 {
                    return Err(format!("{id}: true exited {exit_code}").into());
                }
                return Ok(started.elapsed());
            }
        }
    }
}

/// The steady state, the first command of a session and one-shot runs of
/// one shape, each beside unsandboxed runs of the same blocks.
async fn figures(
    report: &mut Report,
    url: &str,
    cold_url: &str,
    shape: &Shape,
    true_path: &str,
) -> BenchResult {
    let sandbox = shape.sandbox();
    let (client, mut events) = connect(url).await?;
    let (mut steady, mut unsandboxed) = (Vec::new(), Vec::new());
    for block in 0..(shape.runs / BLOCK).max(1) {
        let prefix = format!("s{block}");
        steady.extend(timed_runs(&client, &mut events, &prefix, Some(&sandbox), true_path).await?);
        let prefix = format!("u{block}");
        unsandboxed.extend(timed_runs(&client, &mut events, &prefix, None, true_path).await?);
    }
    let measured = ms(quantile(&mut steady, 0.5));
    let base = ms(quantile(&mut unsandboxed, 0.5));
    let within = if measured <= TARGET_MS {
        "ok"
    } else {
        "MISSED"
    };
    report.figure(
        Value::new(
            &format!("sandboxed true, {}, steady p50", shape.name),
            measured,
            "ms",
        ),
        Value::new("unsandboxed true, same blocks, p50", base, "ms"),
        &format!(
            "{}; <= {TARGET_MS} ms: {within}",
            ratio_at_most(measured, base, TARGET_RATIO)
        ),
    );

    let mut first = Vec::new();
    for i in 0..FIRST_RUNS {
        let (client, mut events) = connect(url).await?;
        first.push(
            one_run(
                &client,
                &mut events,
                &format!("f{i}"),
                Some(&sandbox),
                true_path,
            )
            .await?,
        );
    }
    let (cold_client, mut cold_events) = connect(cold_url).await?;
    let mut one_shot = Vec::new();
    for i in 0..ONE_SHOT_RUNS.min(shape.runs) {
        one_shot.push(
            one_run(
                &cold_client,
                &mut cold_events,
                &format!("c{i}"),
                Some(&sandbox),
                true_path,
            )
            .await?,
        );
    }
    let one_shot = ms(quantile(&mut one_shot, 0.5));
    report.figure(
        Value::new(
            &format!(
                "sandboxed true, {}, first command of a session p50",
                shape.name
            ),
            ms(quantile(&mut first, 0.5)),
            "ms",
        ),
        Value::new("one-shot sandbox (--sandbox-reuse off) p50", one_shot, "ms"),
        "(informational: the first command prepares the sandbox)",
    );
    Ok(())
}

/// 100 sandboxed `true` started at once, until every one exited, beside
/// 100 unsandboxed ones; three rounds each, alternating, best kept.
async fn side_by_side(
    report: &mut Report,
    url: &str,
    shape: &Shape,
    true_path: &str,
) -> BenchResult {
    let sandbox = shape.sandbox();
    let (client, mut events) = connect(url).await?;
    // Prepared before the clock runs, as in the steady state.
    one_run(&client, &mut events, "prepare", Some(&sandbox), true_path).await?;
    let (mut sandboxed, mut unsandboxed) = (Vec::new(), Vec::new());
    for round in 0..3 {
        sandboxed.push(
            burst(
                &client,
                &mut events,
                &format!("b{round}"),
                Some(&sandbox),
                true_path,
            )
            .await?,
        );
        unsandboxed.push(burst(&client, &mut events, &format!("n{round}"), None, true_path).await?);
    }
    let measured = ms(quantile(&mut sandboxed, 0.0));
    let base = ms(quantile(&mut unsandboxed, 0.0));
    report.figure(
        Value::new(
            &format!(
                "{SIDE_BY_SIDE} sandboxed true side by side ({})",
                shape.name
            ),
            measured,
            "ms",
        ),
        Value::new(
            &format!("{SIDE_BY_SIDE} unsandboxed true side by side"),
            base,
            "ms",
        ),
        &ratio_at_most(measured, base, TARGET_RATIO),
    );
    Ok(())
}

async fn burst(
    client: &ExecServerClient,
    events: &mut mpsc::Receiver<Notification>,
    prefix: &str,
    sandbox: Option<&Json>,
    true_path: &str,
) -> BenchResult<Duration> {
    let ids: Vec<String> = (0..SIDE_BY_SIDE).map(|i| format!("{prefix}-{i}")).collect();
    let started = Instant::now();
    let starts = ids.iter().map(|id| {
        let mut params = StartParams::new(id.as_str(), [true_path]);
        params.sandbox = sandbox.cloned();
        async move { client.process_start(&params).await }
    });
    for outcome in join_all(starts).await {
        outcome?;
    }
    let mut left = ids.len();
    while left > 0 {
        if let ProcessEvent::Exited {
            process_id,
            exit_code,
            ..
        } = next_event(events).await?
        {
            if process_id.starts_with(&format!("{prefix}-")) {
                if exit_code != 0 {
                    return Err(format!("{process_id} exited {exit_code}").into());
                }
                left -= 1;
            }
        }
    }
    Ok(started.elapsed())
}
