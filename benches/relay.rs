//! Remote-mode figures of docs/performance.md, each beside the same work over a direct
//! WebSocket to an exec-server in the same run: start→closed of `true`
//! (target ≤ direct + 1 ms), 256 MiB of pipe output (target ≥ 50 % of
//! direct), the time to open a stream (bundle, socket, Noise handshake),
//! 100 concurrent streams on one executor, and the rendezvous's memory per
//! idle stream. The relay path is rendezvous + remote executor + the
//! library's relay client on 127.0.0.1, reliable dialect.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codexbox::client::{ConnectOptions, ExecServerClient, Notification, ProcessEvent, StartParams};
use codexbox::relay::harness::HarnessConfig;
use codexbox::relay::noise::NoiseIdentity;
use codexbox::relay::registry_client::{AuthHeaders, RegistryClient};
use futures_util::future::join_all;
use tokio::sync::mpsc;

use crate::common::{ms, quantile, rss_kib, Report, Server, Value, BIN};
use crate::process::{next_event, BenchResult};

const LATENCY_RUNS: usize = 200;
const LATENCY_BLOCK: usize = 20;
const PIPE_BYTES: u64 = 256 << 20;
const HANDSHAKES: usize = 40;
const STREAMS: usize = 100;

/// A child killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the rendezvous and one executor; returns them and the registry URL.
fn start_remote(env: &str) -> BenchResult<(Running, Running, String)> {
    let mut rendezvous = Command::new(BIN)
        .args(["rendezvous", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = rendezvous.stdout.take().ok_or("no stdout")?;
    let mut url = String::new();
    BufReader::new(stdout).read_line(&mut url)?;
    let rendezvous = Running(rendezvous);
    let url = url.trim_end().to_owned();
    if !url.starts_with("http://") {
        return Err(format!("rendezvous printed {url:?}").into());
    }
    let mut executor = Command::new(BIN)
        .args(["exec-server", "--remote", &url, "--environment-id", env])
        .env("RUST_LOG", "codexbox=info")
        .env("CODEX_HOME", "/nonexistent-codex-home")
        .env_remove("CODEX_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = executor.stderr.take().ok_or("no stderr")?;
    let executor = Running(executor);
    let mut lines = BufReader::new(stderr).lines();
    loop {
        let line = lines.next().ok_or("the executor ended")??;
        if line.contains("connected to the rendezvous") {
            break;
        }
    }
    // Keep draining the executor's log so it never blocks on stderr.
    std::thread::spawn(move || for _ in lines {});
    Ok((rendezvous, executor, url))
}

fn relay_options(url: &str, env: &str, identity: &NoiseIdentity) -> BenchResult<ConnectOptions> {
    let registry = RegistryClient::new(url, env, AuthHeaders::default())?;
    Ok(ConnectOptions::relay(HarnessConfig::new(
        registry,
        identity.clone(),
        true,
    )))
}

async fn open(
    options: ConnectOptions,
) -> BenchResult<(ExecServerClient, mpsc::Receiver<Notification>)> {
    let mut client = ExecServerClient::connect_with(options).await?;
    let events = client.take_notifications().ok_or("no receiver")?;
    client.initialize("codexbox-bench", None).await?;
    Ok((client, events))
}

/// Runs every relay figure.
pub fn run(report: &mut Report) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return report.failed("relay", &format!("tokio runtime: {err}")),
    };
    let direct = match Server::start(&[]) {
        Ok(server) => server,
        Err(err) => return report.failed("relay", &format!("exec-server: {err}")),
    };
    let (rendezvous, _executor, url) = match start_remote("bench") {
        Ok(started) => started,
        Err(err) => return report.failed("relay", &format!("remote mode: {err}")),
    };
    let identity = match NoiseIdentity::generate() {
        Ok(identity) => identity,
        Err(err) => return report.failed("relay", &err.to_string()),
    };
    let relay = match relay_options(&url, "bench", &identity) {
        Ok(options) => options,
        Err(err) => return report.failed("relay", &err.to_string()),
    };
    let direct_options = ConnectOptions::new(direct.url.clone());
    // First, while the rendezvous has served nothing yet.
    let outcome = runtime.block_on(idle_memory(report, relay.clone(), rendezvous.0.id()));
    note(report, "rendezvous memory per idle stream", outcome);
    let outcome = runtime.block_on(latency(report, relay.clone(), direct_options.clone()));
    note(report, "relay start->closed of true", outcome);
    let outcome = runtime.block_on(throughput(report, relay.clone(), direct_options.clone()));
    note(report, "relay pipe throughput", outcome);
    let outcome = runtime.block_on(handshakes(report, relay.clone(), direct_options.clone()));
    note(report, "relay handshake", outcome);
    let outcome = runtime.block_on(concurrent(report, relay, direct_options));
    note(report, "relay 100 streams", outcome);
}

fn note(report: &mut Report, name: &str, outcome: BenchResult) {
    if let Err(err) = outcome {
        report.failed(name, &err.to_string());
    }
}

async fn start_to_closed(
    client: &ExecServerClient,
    events: &mut mpsc::Receiver<Notification>,
    id: &str,
    program: &str,
) -> BenchResult<Duration> {
    let started = Instant::now();
    client
        .process_start(&StartParams::new(id, [program]))
        .await?;
    loop {
        if let ProcessEvent::Closed { process_id, .. } = next_event(events).await? {
            if process_id == id {
                return Ok(started.elapsed());
            }
        }
    }
}

/// start->closed of `true`, relay and direct in alternating blocks.
async fn latency(
    report: &mut Report,
    relay: ConnectOptions,
    direct: ConnectOptions,
) -> BenchResult {
    let program = which::which("true")?.to_string_lossy().into_owned();
    let (relay_client, mut relay_events) = open(relay).await?;
    let (direct_client, mut direct_events) = open(direct).await?;
    let (mut through, mut baseline) = (Vec::new(), Vec::new());
    for block in 0..LATENCY_RUNS / LATENCY_BLOCK {
        for i in 0..LATENCY_BLOCK + 3 {
            let took = start_to_closed(
                &relay_client,
                &mut relay_events,
                &format!("r{block}-{i}"),
                &program,
            )
            .await?;
            if i >= 3 {
                through.push(took);
            }
        }
        for i in 0..LATENCY_BLOCK + 3 {
            let took = start_to_closed(
                &direct_client,
                &mut direct_events,
                &format!("d{block}-{i}"),
                &program,
            )
            .await?;
            if i >= 3 {
                baseline.push(took);
            }
        }
    }
    let (p50, base) = (quantile(&mut through, 0.5), quantile(&mut baseline, 0.5));
    let extra = ms(p50) - ms(base);
    report.figure(
        Value::new("start->closed of true through the relay p50", ms(p50), "ms"),
        Value::new("direct WebSocket p50", ms(base), "ms"),
        &format!(
            "+{extra:.2} ms (target <= +1 ms): {}",
            if extra <= 1.0 { "ok" } else { "MISSED" }
        ),
    );
    Ok(())
}

/// MB/s of `head -c 256 MiB /dev/zero` output received by the client.
async fn pipe_rate(options: ConnectOptions) -> BenchResult<f64> {
    let (client, mut events) = open(options).await?;
    let script = format!("head -c {PIPE_BYTES} /dev/zero");
    let started = Instant::now();
    client
        .process_start(&StartParams::new("pipe", ["sh", "-c", script.as_str()]))
        .await?;
    let mut bytes = 0u64;
    loop {
        match next_event(&mut events).await? {
            ProcessEvent::Output { chunk, .. } => bytes += chunk.len() as u64,
            ProcessEvent::Closed { .. } => break,
            ProcessEvent::Exited { .. } => {}
        }
    }
    if bytes != PIPE_BYTES {
        return Err(format!("received {bytes} of {PIPE_BYTES} bytes").into());
    }
    Ok(bytes as f64 / 1e6 / started.elapsed().as_secs_f64())
}

async fn throughput(
    report: &mut Report,
    relay: ConnectOptions,
    direct: ConnectOptions,
) -> BenchResult {
    let base = pipe_rate(direct).await?;
    let through = pipe_rate(relay).await?;
    let ratio = through / base.max(f64::MIN_POSITIVE);
    report.figure(
        Value::new("256 MiB pipe output through the relay", through, "MB/s"),
        Value::new("direct WebSocket", base, "MB/s"),
        &format!(
            "ratio {ratio:.2} (target >= 0.5): {}",
            if ratio >= 0.5 { "ok" } else { "MISSED" }
        ),
    );
    Ok(())
}

/// Time to a usable connection: relay (bundle, socket, Noise handshake,
/// initialize) against a direct WebSocket connect + initialize.
async fn handshakes(
    report: &mut Report,
    relay: ConnectOptions,
    direct: ConnectOptions,
) -> BenchResult {
    let (mut through, mut baseline) = (Vec::new(), Vec::new());
    for _ in 0..HANDSHAKES {
        let started = Instant::now();
        let (client, _events) = open(relay.clone()).await?;
        through.push(started.elapsed());
        client.close();
        let started = Instant::now();
        let (client, _events) = open(direct.clone()).await?;
        baseline.push(started.elapsed());
        client.close();
    }
    report.figure(
        Value::new(
            "open a relay stream + initialize p50",
            ms(quantile(&mut through, 0.5)),
            "ms",
        ),
        Value::new(
            "direct connect + initialize p50",
            ms(quantile(&mut baseline, 0.5)),
            "ms",
        ),
        "(informational)",
    );
    Ok(())
}

/// 100 connections at once, each running `true` to closed.
async fn many(options: ConnectOptions) -> BenchResult<Duration> {
    let program = Arc::new(which::which("true")?.to_string_lossy().into_owned());
    let started = Instant::now();
    let runs = (0..STREAMS).map(|i| {
        let (options, program) = (options.clone(), program.clone());
        async move {
            let (client, mut events) = open(options).await?;
            start_to_closed(&client, &mut events, &format!("c{i}"), &program).await?;
            client.close();
            Ok::<_, Box<dyn std::error::Error>>(())
        }
    });
    for outcome in join_all(runs).await {
        outcome.map_err(|e| e.to_string())?;
    }
    Ok(started.elapsed())
}

async fn concurrent(
    report: &mut Report,
    relay: ConnectOptions,
    direct: ConnectOptions,
) -> BenchResult {
    let base = many(direct).await?;
    let through = many(relay).await?;
    report.figure(
        Value::new(
            "100 concurrent streams on one executor (open + true)",
            ms(through),
            "ms",
        ),
        Value::new("100 direct connections", ms(base), "ms"),
        "no stream lost (ok)",
    );
    Ok(())
}

/// Rendezvous RSS growth per idle stream, beside its idle RSS.
async fn idle_memory(report: &mut Report, relay: ConnectOptions, pid: u32) -> BenchResult {
    let before = rss_kib(pid).ok_or("no RSS")?;
    let mut held = Vec::new();
    for _ in 0..STREAMS {
        held.push(open(relay.clone()).await?);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib(pid).ok_or("no RSS")?;
    let per_stream = after.saturating_sub(before) as f64 / STREAMS as f64;
    report.figure(
        Value::new("rendezvous memory per idle stream", per_stream, "KiB"),
        Value::new("idle rendezvous RSS", before as f64, "KiB"),
        "(informational)",
    );
    drop(held);
    Ok(())
}
