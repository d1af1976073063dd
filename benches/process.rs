//! Process figures of docs/performance.md through the exec-server, each beside a
//! baseline measured in the same run: start→closed latency of `true`,
//! streaming throughput (pipes and PTY), 500 concurrent processes on one
//! connection, 64 concurrent connections, and idle server RSS.

use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use codexbox::client::{ExecServerClient, Notification, ProcessEvent, StartParams};
use futures_util::future::join_all;
use tokio::sync::mpsc;

use crate::common::{
    at_least, cpu_time, ms, process_tree, quantile, ratio_at_most, rss_kib, Report, Server, Value,
};
use crate::outside;

pub type BenchResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Unmeasured runs at the start of each block.
const LATENCY_WARMUP: usize = 5;
const LATENCY_RUNS: usize = 300;
/// Runs per block; blocks of the two sides alternate.
const LATENCY_BLOCK: usize = 30;
const PIPE_BYTES: u64 = 512 << 20;
const PTY_BYTES: u64 = 128 << 20;
/// Alternating rounds of each streaming side.
const STREAM_ROUNDS: usize = 3;
/// PTY streaming through the server against a plain read loop on a PTY.
const PTY_TARGET_RATIO: f64 = 0.9;
/// Pipe streaming of the reference exec-server to a client on loopback,
/// as stated for this machine class (it cannot be run here).
const REFERENCE_PIPE_MB_S: f64 = 346.0;
const ONE_CONNECTION_PROCESSES: usize = 500;
const CONNECTIONS: usize = 64;
const PROCESSES_PER_CONNECTION: usize = 8;
/// Guard for any single wait; only reached when something is broken.
const WAIT: Duration = Duration::from_secs(60);

/// Runs every process figure.
pub fn run(report: &mut Report) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return report.failed("process", &format!("tokio runtime: {err}")),
    };
    let server = match Server::start(&[]) {
        Ok(server) => server,
        Err(err) => return report.failed("process", &format!("exec-server: {err}")),
    };
    let url = server.url.as_str();
    let pid = server.pid();
    let outcome = runtime.block_on(round_trip(report, url));
    note(report, "request round trip", outcome);
    let outcome = runtime.block_on(latency(report, url));
    note(report, "start->closed latency of true", outcome);
    let outcome = runtime.block_on(throughput(report, url, pid, false));
    note(report, "pipe throughput", outcome);
    let outcome = runtime.block_on(throughput(report, url, pid, true));
    note(report, "pty throughput", outcome);
    let outcome = runtime.block_on(one_connection(report, url));
    note(report, "500 processes on one connection", outcome);
    let outcome = runtime.block_on(many_connections(report, url));
    note(report, "64 connections", outcome);
    drop(server);
    if let Err(err) = runtime.block_on(idle_rss(report)) {
        report.failed("idle server RSS", &err.to_string());
    }
}

/// Prints a failed section instead of its figures.
fn note(report: &mut Report, name: &str, outcome: BenchResult) {
    if let Err(err) = outcome {
        report.failed(name, &err.to_string());
    }
}

pub async fn connect(url: &str) -> BenchResult<(ExecServerClient, mpsc::Receiver<Notification>)> {
    let mut client = ExecServerClient::connect(url).await?;
    let events = client
        .take_notifications()
        .ok_or("no notification receiver")?;
    client.initialize("codexbox-bench", None).await?;
    Ok((client, events))
}

pub async fn next_event(events: &mut mpsc::Receiver<Notification>) -> BenchResult<ProcessEvent> {
    loop {
        let notification = tokio::time::timeout(WAIT, events.recv())
            .await
            .map_err(|_| "no notification within the guard time")?
            .ok_or("connection closed")?;
        if let Some(event) = ProcessEvent::from_notification(&notification) {
            return Ok(event);
        }
    }
}

fn program(name: &str) -> BenchResult<String> {
    Ok(which::which(name)?.to_string_lossy().into_owned())
}

/// `environment/status` round trips through the client and server, beside
/// a bare TCP echo round trip on loopback: the protocol's fixed cost.
async fn round_trip(report: &mut Report, url: &str) -> BenchResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const RUNS: usize = 2000;
    let (client, _events) = connect(url).await?;
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let started = Instant::now();
        client.environment_status().await?;
        samples.push(started.elapsed());
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        use std::io::{Read, Write};
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut byte = [0u8; 64];
        loop {
            let n = stream.read(&mut byte)?;
            if n == 0 {
                return Ok(());
            }
            stream.write_all(&byte[..n])?;
        }
    });
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut baseline = Vec::with_capacity(RUNS);
    let mut byte = [0u8; 1];
    for _ in 0..RUNS {
        let started = Instant::now();
        stream.write_all(b"x").await?;
        stream.read_exact(&mut byte).await?;
        baseline.push(started.elapsed());
    }
    drop(stream);
    let _ = echo.join();
    let measured = quantile(&mut samples, 0.5).as_secs_f64() * 1e6;
    let base = quantile(&mut baseline, 0.5).as_secs_f64() * 1e6;
    report.figure(
        Value::new("environment/status round trip p50", measured, "us"),
        Value::new("loopback TCP echo round trip p50", base, "us"),
        &format!(
            "ratio {:.2} (informational)",
            measured / base.max(f64::MIN_POSITIVE)
        ),
    );
    Ok(())
}

/// start->closed of `true` through the server, seen by the Rust client and
/// by the outside (Python) client, beside a bare spawn+wait. Each side runs
/// back to back in blocks of [`LATENCY_BLOCK`], the blocks alternating, so
/// machine load drifts over all alike while each side keeps its own steady
/// state (interleaving single runs would put one side's leftover work on
/// the other's clock).
async fn latency(report: &mut Report, url: &str) -> BenchResult {
    let (client, mut events) = connect(url).await?;
    let true_path = program("true")?;
    let mut samples = Vec::with_capacity(LATENCY_RUNS);
    let mut responses = Vec::with_capacity(LATENCY_RUNS);
    let mut outside_samples = Vec::with_capacity(LATENCY_RUNS);
    let mut outside_responses = Vec::with_capacity(LATENCY_RUNS);
    let mut outside_error = None;
    let mut baseline = Vec::with_capacity(LATENCY_RUNS);
    let mut spawns = Vec::with_capacity(LATENCY_RUNS);
    for block in 0..LATENCY_RUNS / LATENCY_BLOCK {
        for i in 0..LATENCY_WARMUP + LATENCY_BLOCK {
            let id = format!("lat{block}-{i}");
            let started = Instant::now();
            client
                .process_start(&StartParams::new(id.as_str(), [true_path.as_str()]))
                .await?;
            let answered = started.elapsed();
            loop {
                if let ProcessEvent::Closed { process_id, .. } = next_event(&mut events).await? {
                    if process_id == id {
                        break;
                    }
                }
            }
            if i >= LATENCY_WARMUP {
                responses.push(answered);
                samples.push(started.elapsed());
            }
        }
        if outside_error.is_none() {
            match outside::latency(url, &true_path, LATENCY_BLOCK, LATENCY_WARMUP) {
                Ok(run) => {
                    outside_samples.extend(outside::from_ms(&run.samples_ms));
                    outside_responses.extend(outside::from_ms(&run.responses_ms));
                }
                Err(err) => outside_error = Some(err.to_string()),
            }
        }
        for i in 0..LATENCY_WARMUP + LATENCY_BLOCK {
            let started = Instant::now();
            let mut child = Command::new(&true_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            let spawned = started.elapsed();
            child.wait()?;
            if i >= LATENCY_WARMUP {
                spawns.push(spawned);
                baseline.push(started.elapsed());
            }
        }
    }
    let clients = [
        ("", &mut samples, &mut responses),
        (
            " (outside Python client)",
            &mut outside_samples,
            &mut outside_responses,
        ),
    ];
    for (client, samples, responses) in clients {
        if samples.is_empty() {
            let reason = outside_error.as_deref().unwrap_or("no sample");
            report.failed(&format!("start->closed of true{client}"), reason);
            continue;
        }
        for (label, q) in [("p50", 0.5), ("p90", 0.9)] {
            let measured = ms(quantile(samples, q));
            let base = ms(quantile(&mut baseline, q));
            report.figure(
                Value::new(
                    &format!("start->closed of true{client} {label}"),
                    measured,
                    "ms",
                ),
                Value::new(&format!("bare spawn+wait of true {label}"), base, "ms"),
                &ratio_at_most(measured, base, 1.5),
            );
        }
        let measured = ms(quantile(responses, 0.5));
        let base = ms(quantile(&mut spawns, 0.5));
        report.figure(
            Value::new(
                &format!("process/start response of true{client} p50"),
                measured,
                "ms",
            ),
            Value::new("bare spawn (exec done, no wait) p50", base, "ms"),
            &format!(
                "ratio {:.2} (informational: where the start->closed time goes)",
                measured / base.max(f64::MIN_POSITIVE)
            ),
        );
    }
    Ok(())
}

/// One streaming run through the server to the Rust client: MB/s and the
/// CPU time the server and the client spent.
struct RustStream {
    mb_per_s: f64,
    cpu: String,
}

async fn stream_to_rust_client(
    url: &str,
    server_pid: u32,
    tty: bool,
    argv: &[&str],
    bytes: u64,
    id: &str,
) -> BenchResult<RustStream> {
    let (client, mut events) = connect(url).await?;
    let server_cpu = cpu_time(server_pid);
    let client_cpu = cpu_time(std::process::id());
    let started = Instant::now();
    client
        .process_start(&StartParams::new(id, argv.iter().copied()).tty(tty))
        .await?;
    let mut received = 0u64;
    loop {
        match next_event(&mut events).await? {
            ProcessEvent::Output {
                process_id, chunk, ..
            } if process_id == id => {
                received += chunk.len() as u64;
            }
            ProcessEvent::Closed { process_id, .. } if process_id == id => break,
            _ => {}
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let spent = |before: Option<Duration>, pid: u32| {
        let (before, after) = (before?, cpu_time(pid)?);
        Some(after.saturating_sub(before).as_secs_f64())
    };
    let cpu = match (
        spent(server_cpu, server_pid),
        spent(client_cpu, std::process::id()),
    ) {
        (Some(server), Some(client)) => {
            format!("CPU server {server:.2} s, client {client:.2} s in {elapsed:.2} s")
        }
        _ => String::new(),
    };
    if received != bytes {
        return Err(format!("received {received} of {bytes} bytes").into());
    }
    Ok(RustStream {
        mb_per_s: received as f64 / 1e6 / elapsed,
        cpu,
    })
}

/// The median of `values` (sorted in place); 0 when empty.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// Streaming throughput of `head -c N /dev/zero` through the server to the
/// Rust client and to the outside (Python) client, beside the same producer
/// read directly (pipe, or a PTY read in a plain loop). The three sides
/// alternate for [`STREAM_ROUNDS`] rounds; each figure is the median.
async fn throughput(report: &mut Report, url: &str, server_pid: u32, tty: bool) -> BenchResult {
    let bytes = if tty { PTY_BYTES } else { PIPE_BYTES };
    let head = program("head")?;
    let count = bytes.to_string();
    let argv = [head.as_str(), "-c", count.as_str(), "/dev/zero"];
    let mut rust = Vec::new();
    let mut cpu = String::new();
    let mut python = Vec::new();
    let mut python_cpu = Vec::new();
    let mut python_error = None;
    let mut direct = Vec::new();
    for round in 0..STREAM_ROUNDS {
        let id = format!("{}-stream-{round}", if tty { "pty" } else { "pipe" });
        let run = stream_to_rust_client(url, server_pid, tty, &argv, bytes, &id).await?;
        rust.push(run.mb_per_s);
        cpu = run.cpu;
        if python_error.is_none() {
            match outside::stream(url, tty, bytes, &argv) {
                Ok(run) => {
                    python.push(run.mb_per_s());
                    python_cpu.push(format!(
                        "client CPU {:.2} s in {:.2} s, {} chunks",
                        run.cpu_seconds, run.seconds, run.chunks
                    ));
                }
                Err(err) => python_error = Some(err.to_string()),
            }
        }
        direct.push(if tty {
            direct_pty_rate(&head, &count)?
        } else {
            direct_pipe_rate(&head, &count)?
        });
    }
    let base = median(&mut direct);
    let (what, base_name) = if tty {
        ("PTY", "plain read loop on a PTY, same producer")
    } else {
        ("pipe", "direct pipe read, same producer")
    };
    let verdict = |measured: f64| {
        if tty {
            format!(
                "{} | target ratio >= {PTY_TARGET_RATIO}: {}",
                at_least(measured, base, 100.0, "MB/s"),
                if measured >= PTY_TARGET_RATIO * base {
                    "ok"
                } else {
                    "MISSED"
                }
            )
        } else {
            format!(
                "{} | {:.2}x the reference exec-server's {REFERENCE_PIPE_MB_S} MB/s \
                 (a stated figure, not measured here; target >= 2x): {}",
                at_least(measured, base, 300.0, "MB/s"),
                measured / REFERENCE_PIPE_MB_S,
                if measured >= 2.0 * REFERENCE_PIPE_MB_S {
                    "ok"
                } else {
                    "MISSED"
                }
            )
        }
    };
    let measured = median(&mut rust);
    report.figure(
        Value::new(
            &format!("{what} streaming to the Rust client, median of {STREAM_ROUNDS}"),
            measured,
            "MB/s",
        ),
        Value::new(base_name, base, "MB/s"),
        &format!("{} | last run: {cpu}", verdict(measured)),
    );
    if python.is_empty() {
        let reason = python_error.as_deref().unwrap_or("no run");
        report.failed(
            &format!("{what} streaming to the outside Python client"),
            reason,
        );
        return Ok(());
    }
    let measured = median(&mut python);
    report.figure(
        Value::new(
            &format!(
                "{what} streaming to the outside Python client, median of {}",
                python.len()
            ),
            measured,
            "MB/s",
        ),
        Value::new(base_name, base, "MB/s"),
        &format!(
            "{} | last run: {}",
            verdict(measured),
            python_cpu.last().map_or("", String::as_str)
        ),
    );
    Ok(())
}

/// MB/s of `head -c COUNT /dev/zero` read straight from a pipe.
fn direct_pipe_rate(head: &str, count: &str) -> BenchResult<f64> {
    let started = Instant::now();
    let mut child = Command::new(head)
        .args(["-c", count, "/dev/zero"])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let total = drain(&mut stdout)?;
    child.wait()?;
    Ok(total as f64 / 1e6 / started.elapsed().as_secs_f64())
}

/// MB/s of the same producer writing to a PTY whose master is read
/// straight, in a loop: what the kernel's terminal layer allows here.
fn direct_pty_rate(head: &str, count: &str) -> BenchResult<f64> {
    let pair = codexbox::process::pty::open(Default::default())?;
    // Blocking reads on the master for the plain loop.
    let flags = nix::fcntl::fcntl(&pair.master, nix::fcntl::FcntlArg::F_GETFL)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) - nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&pair.master, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    let started = Instant::now();
    let mut child = Command::new(head)
        .args(["-c", count, "/dev/zero"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(pair.slave))
        .spawn()?;
    let mut master = std::fs::File::from(pair.master);
    // The master reports EIO once the last slave descriptor is closed.
    let total = drain(&mut master)?;
    child.wait()?;
    Ok(total as f64 / 1e6 / started.elapsed().as_secs_f64())
}

/// Reads until EOF (or EIO, a PTY's end); returns the bytes read.
fn drain(source: &mut impl Read) -> BenchResult<u64> {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match source.read(&mut buffer) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(err) if err.raw_os_error() == Some(libc::EIO) => return Ok(total),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err.into()),
        }
    }
}

/// Per-process bookkeeping: every event of an `echo` process must arrive,
/// in seq order: output 1, exited 2, closed 3.
#[derive(Default)]
struct Ledger {
    next_seq: HashMap<String, u64>,
    closed: usize,
    bad: Vec<String>,
}

impl Ledger {
    fn record(&mut self, event: &ProcessEvent) {
        let id = event.process_id().to_owned();
        let expected = self.next_seq.entry(id.clone()).or_insert(1);
        let shape_ok = match event {
            ProcessEvent::Output { seq, chunk, .. } => *seq == 1 && chunk == b"x\n",
            ProcessEvent::Exited { seq, exit_code, .. } => *seq == 2 && *exit_code == 0,
            ProcessEvent::Closed { seq, .. } => *seq == 3,
        };
        if !shape_ok || event.seq() != *expected {
            self.bad.push(format!("{id}: {event:?}"));
        }
        *expected = event.seq() + 1;
        if matches!(event, ProcessEvent::Closed { .. }) {
            self.closed += 1;
        }
    }
}

async fn run_echoes(url: &str, prefix: &str, count: usize) -> BenchResult<Ledger> {
    let (client, mut events) = connect(url).await?;
    let echo = program("echo")?;
    let params: Vec<StartParams> = (0..count)
        .map(|i| StartParams::new(format!("{prefix}-{i}"), [echo.as_str(), "x"]))
        .collect();
    let mut ledger = Ledger::default();
    let starts = join_all(params.iter().map(|p| client.process_start(p)));
    tokio::pin!(starts);
    // Drain notifications while the starts are in flight.
    let results = loop {
        tokio::select! {
            results = &mut starts => break results,
            event = next_event(&mut events) => ledger.record(&event?),
        }
    };
    for result in results {
        result?;
    }
    while ledger.closed < count {
        let event = next_event(&mut events).await?;
        ledger.record(&event);
    }
    Ok(ledger)
}

fn bare_echoes(count: usize) -> BenchResult<Duration> {
    let echo = program("echo")?;
    let started = Instant::now();
    let children = (0..count)
        .map(|_| Command::new(&echo).arg("x").stdout(Stdio::piped()).spawn())
        .collect::<Result<Vec<_>, _>>()?;
    for child in children {
        let output = child.wait_with_output()?;
        if output.stdout != b"x\n" {
            return Err("bare echo printed something else".into());
        }
    }
    Ok(started.elapsed())
}

fn lost_events(ledger: &Ledger, count: usize) -> usize {
    let seen: u64 = ledger.next_seq.values().map(|next| next - 1).sum();
    (count as u64 * 3).saturating_sub(seen) as usize + ledger.bad.len()
}

async fn one_connection(report: &mut Report, url: &str) -> BenchResult {
    let count = ONE_CONNECTION_PROCESSES;
    let started = Instant::now();
    let ledger = run_echoes(url, "one", count).await?;
    let elapsed = started.elapsed();
    let lost = lost_events(&ledger, count);
    let base = bare_echoes(count)?;
    report.figure(
        Value::new(
            &format!(
                "{count} concurrent processes on one connection ({lost} events lost or misordered)"
            ),
            ms(elapsed),
            "ms",
        ),
        Value::new(&format!("{count} bare spawns"), ms(base), "ms"),
        &format!(
            "ratio {:.2} | target no lost event: {}",
            ms(elapsed) / ms(base).max(f64::MIN_POSITIVE),
            if lost == 0 { "ok" } else { "MISSED" }
        ),
    );
    Ok(())
}

async fn many_connections(report: &mut Report, url: &str) -> BenchResult {
    let started = Instant::now();
    let runs = join_all((0..CONNECTIONS).map(|c| async move {
        run_echoes(url, &format!("conn{c}"), PROCESSES_PER_CONNECTION).await
    }))
    .await;
    let elapsed = started.elapsed();
    let mut lost = 0;
    for run in runs {
        lost += lost_events(&run?, PROCESSES_PER_CONNECTION);
    }
    let total = CONNECTIONS * PROCESSES_PER_CONNECTION;
    let base = bare_echoes(total)?;
    report.figure(
        Value::new(
            &format!(
                "{CONNECTIONS} connections x {PROCESSES_PER_CONNECTION} processes ({lost} events lost or misordered)"
            ),
            ms(elapsed),
            "ms",
        ),
        Value::new(&format!("{total} bare spawns"), ms(base), "ms"),
        &format!(
            "ratio {:.2} | target no lost event: {}",
            ms(elapsed) / ms(base).max(f64::MIN_POSITIVE),
            if lost == 0 { "ok" } else { "MISSED" }
        ),
    );
    Ok(())
}

async fn idle_rss(report: &mut Report) -> BenchResult {
    let server = Server::start(&[])?;
    {
        let (client, _events) = connect(&server.url).await?;
        client.environment_status().await?;
        client.close();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tree = process_tree(server.pid());
    let server_kib = tree
        .iter()
        .map(|&pid| rss_kib(pid).ok_or("cannot read a VmRSS"))
        .sum::<Result<u64, _>>()?;
    let mut sleeper = Command::new(program("sleep")?).arg("10").spawn()?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sleep_kib = rss_kib(sleeper.id()).ok_or("cannot read sleep's VmRSS");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let sleep_kib = sleep_kib?;
    let mib = server_kib as f64 / 1024.0;
    report.figure(
        Value::new(
            &format!(
                "idle server RSS ({} processes: server and helpers)",
                tree.len()
            ),
            mib,
            "MiB",
        ),
        Value::new("idle `sleep` RSS", sleep_kib as f64 / 1024.0, "MiB"),
        &format!(
            "target <= 10 MiB: {}",
            if mib <= 10.0 { "ok" } else { "MISSED" }
        ),
    );
    Ok(())
}
