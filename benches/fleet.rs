//! Fleet figures (`scripts/bench fleet`): simulated executors and harnesses
//! in this one process, speaking the relay's wire through the library's
//! registry client and raw relay WebSockets, against one rendezvous and
//! then against three replicas behind HAProxy (`balance uri depth 3`,
//! `hash-type consistent`). Reported: registrations per second, the
//! rendezvous's memory per idle executor and per idle stream (RSS from
//! /proc), CPU per GiB relayed (utime + stime from /proc), and the time
//! until every environment is reachable again after a replica is killed.
//! Sizes are flags: `--fleet-executors=N`, `--fleet-streams=N`,
//! `--fleet-moving=N`, `--fleet-mib-per-stream=N`.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use codexbox::backoff::Backoff;
use codexbox::relay::frame::{Body, RelayMessageFrame};
use codexbox::relay::noise::{NoiseIdentity, NoisePublicKey};
use codexbox::relay::registry_api::RegisterResponse;
use codexbox::relay::registry_client::{AuthHeaders, RegistryClient};
use codexbox::relay::socket::{dial, DialError, RelaySocket};
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::common::{cpu_time, rss_kib, Report, Value, BIN};
use crate::process::BenchResult;

/// A relay payload per data frame (one Noise record's worth).
const FRAME_PAYLOAD: usize = 60 * 1024;
/// Streams per harness socket (the rendezvous's default limit is 16).
const STREAMS_PER_SOCKET: usize = 16;

/// The sizes of a run.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    executors: usize,
    streams: usize,
    moving: usize,
    mib_per_stream: usize,
}

fn flag(name: &str, default: usize) -> usize {
    let prefix = format!("--fleet-{name}=");
    std::env::args()
        .find_map(|arg| arg.strip_prefix(&prefix).and_then(|v| v.parse().ok()))
        .unwrap_or(default)
}

fn sizes() -> Sizes {
    Sizes {
        executors: flag("executors", 2000).max(1),
        streams: flag("streams", 10_000),
        moving: flag("moving", 1000),
        mib_per_stream: flag("mib-per-stream", 4).max(1),
    }
}

/// A child killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Raises this process's open-file limit to its hard limit (children,
/// the rendezvous among them, inherit it).
fn raise_nofile() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit only reads the struct.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    }
}

/// Starts a rendezvous on `listen` with limits sized for the run.
fn rendezvous(
    listen: SocketAddr,
    key_file: &str,
    public_url: Option<&str>,
) -> BenchResult<Running> {
    let mut command = Command::new(BIN);
    command
        .args([
            "rendezvous",
            "--insecure-no-auth",
            "--listen",
            &listen.to_string(),
        ])
        .args(["--signing-key-file", key_file])
        .args([
            "--max-connections",
            "60000",
            "--max-registrations-per-sec",
            "0",
        ])
        .args(["--claim-ttl-secs", "3600", "--environment-ttl-secs", "3600"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env("RUST_LOG", "codexbox=warn");
    if let Some(url) = public_url {
        command.args(["--public-url", url]);
    }
    let mut child = command.spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let child = Running(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if !line.starts_with("http://") {
        return Err(format!("rendezvous printed {line:?}").into());
    }
    Ok(child)
}

fn free_addr() -> BenchResult<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// What the simulated executors share.
#[derive(Default)]
struct Counters {
    /// Successful rendezvous connections, all executors together.
    connected: AtomicU64,
    /// Data payload bytes delivered to executors.
    received: AtomicU64,
}

/// Registers, retrying what is transient.
async fn register(registry: &RegistryClient, key: &NoisePublicKey) -> RegisterResponse {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        match registry.register(key).await {
            Ok(registration) => return registration,
            Err(_) => backoff.wait().await,
        }
    }
}

/// A simulated executor: registers, holds its socket, answers every
/// handshake, counts data, and reconnects (registering again on a 4xx)
/// as the real one does.
async fn executor(registry: RegistryClient, key: NoisePublicKey, counters: Arc<Counters>) {
    let mut registration = register(&registry, &key).await;
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(30));
    loop {
        match dial(&registration.url).await {
            Ok(ws) => {
                backoff.reset();
                counters.connected.fetch_add(1, Ordering::Relaxed);
                serve(ws, &counters).await;
            }
            Err(DialError::Rejected(status)) if (400..500).contains(&status) => {
                registration = register(&registry, &key).await;
                continue;
            }
            Err(_) => {}
        }
        backoff.wait().await;
    }
}

async fn serve(ws: RelaySocket, counters: &Counters) {
    let (mut sink, mut source) = ws.split();
    while let Some(Ok(message)) = source.next().await {
        let Message::Binary(bytes) = message else {
            continue;
        };
        let Ok(frame) = RelayMessageFrame::from_bytes(&bytes) else {
            continue;
        };
        match frame.body {
            Some(Body::Handshake(_)) => {
                let reply = RelayMessageFrame::handshake(&frame.stream_id, vec![0; 96], 0);
                if sink
                    .send(Message::Binary(reply.to_bytes().into()))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Some(Body::Data(data)) => {
                counters
                    .received
                    .fetch_add(data.payload.len() as u64, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

/// A harness socket holding `streams` confirmed streams of one environment.
struct HarnessSocket {
    ws: RelaySocket,
    streams: Vec<String>,
}

/// Opens a harness socket on `environment` and claims `count` streams,
/// waiting for the executor's answer to each.
async fn harness(
    registry_url: &str,
    environment: &str,
    count: usize,
) -> BenchResult<HarnessSocket> {
    let registry = RegistryClient::new(registry_url, environment, AuthHeaders::default())?;
    let identity = NoiseIdentity::generate()?;
    let key = identity.public_key().encode();
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let bundle = loop {
        match registry.connect(&key).await {
            Ok(bundle) => break bundle,
            Err(err) if err.is_retryable() => backoff.wait().await,
            Err(err) => return Err(err.into()),
        }
    };
    let mut ws = dial(&bundle.url).await?;
    let streams: Vec<String> = (0..count).map(|k| format!("{environment}-s{k}")).collect();
    for stream in &streams {
        let frame = RelayMessageFrame::handshake(stream, vec![0; 1200], 0);
        ws.send(Message::Binary(frame.to_bytes().into())).await?;
    }
    let mut answered = 0;
    while answered < count {
        match tokio::time::timeout(Duration::from_secs(60), ws.next()).await {
            Ok(Some(Ok(Message::Binary(bytes)))) => {
                if let Ok(RelayMessageFrame {
                    body: Some(Body::Handshake(_)),
                    ..
                }) = RelayMessageFrame::from_bytes(&bytes)
                {
                    answered += 1;
                }
            }
            Ok(Some(Ok(_))) => {}
            _ => {
                return Err(
                    format!("{environment}: handshake answers stopped at {answered}").into(),
                )
            }
        }
    }
    Ok(HarnessSocket { ws, streams })
}

/// RSS of `pids` together, in KiB.
fn rss(pids: &[u32]) -> BenchResult<u64> {
    pids.iter()
        .map(|&pid| rss_kib(pid).ok_or_else(|| "no RSS".into()))
        .sum()
}

fn cpu(pids: &[u32]) -> BenchResult<Duration> {
    pids.iter()
        .map(|&pid| cpu_time(pid).ok_or_else(|| "no CPU time".into()))
        .sum()
}

/// Settles allocations before a reading.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Executors, idle streams and moving streams against `registry_url`,
/// served by the rendezvous processes `pids`. Returns the executors'
/// counters and tasks.
async fn load(
    report: &mut Report,
    label: &str,
    registry_url: &str,
    pids: &[u32],
    sizes: Sizes,
) -> BenchResult<Loaded> {
    let key = NoiseIdentity::generate()?.public_key().encode();
    let counters = Arc::new(Counters::default());
    settle().await;
    let idle = rss(pids)?;
    let started = Instant::now();
    let mut executors = Vec::new();
    for i in 0..sizes.executors {
        let registry =
            RegistryClient::new(registry_url, &format!("env-{i}"), AuthHeaders::default())?;
        executors.push(tokio::spawn(executor(
            registry,
            key.clone(),
            counters.clone(),
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while counters.connected.load(Ordering::Relaxed) < sizes.executors as u64 {
        if Instant::now() > deadline {
            return Err("executors did not all connect within 10 min".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let connect_time = started.elapsed();
    let took = connect_time;
    let per_second = sizes.executors as f64 / took.as_secs_f64();
    report.figure(
        Value::new(
            &format!("{label}: registrations+connections per second"),
            per_second,
            "/s",
        ),
        Value::new(
            &format!("{} executors connected in", sizes.executors),
            took.as_secs_f64(),
            "s",
        ),
        "(informational)",
    );
    settle().await;
    let with_executors = rss(pids)?;
    let per_executor = with_executors.saturating_sub(idle) as f64 / sizes.executors as f64;
    report.figure(
        Value::new(
            &format!("{label}: memory per idle executor"),
            per_executor,
            "KiB",
        ),
        Value::new("idle rendezvous RSS", idle as f64, "KiB"),
        "(informational)",
    );

    // Idle streams, STREAMS_PER_SOCKET per harness socket, over the environments.
    let mut sockets = Vec::new();
    let mut remaining = sizes.streams;
    let mut environment = 0;
    let mut opening = Vec::new();
    while remaining > 0 {
        let count = remaining.min(STREAMS_PER_SOCKET);
        remaining -= count;
        let url = registry_url.to_owned();
        let env = format!("env-{}", environment % sizes.executors);
        environment += 1;
        opening.push(tokio::spawn(async move {
            harness(&url, &env, count).await.map_err(|e| e.to_string())
        }));
        if opening.len() >= 64 {
            for task in opening.drain(..) {
                sockets.push(task.await.map_err(|e| e.to_string())??);
            }
        }
    }
    for task in opening.drain(..) {
        sockets.push(task.await.map_err(|e| e.to_string())??);
    }
    settle().await;
    let with_streams = rss(pids)?;
    if sizes.streams > 0 {
        let per_stream = with_streams.saturating_sub(with_executors) as f64 / sizes.streams as f64;
        report.figure(
            Value::new(
                &format!("{label}: memory per idle stream"),
                per_stream,
                "KiB",
            ),
            Value::new(
                "harness sockets holding them",
                sockets.len() as f64,
                "sockets",
            ),
            "(informational)",
        );
    }

    // Moving streams: each sends mib_per_stream MiB of data frames.
    let frames_per_stream = sizes.mib_per_stream * 1024 * 1024 / FRAME_PAYLOAD;
    let mut left = sizes.moving;
    let mut kept = Vec::new();
    let mut senders = Vec::new();
    let mut total = 0u64;
    let cpu_before = cpu(pids)?;
    let started = Instant::now();
    for socket in sockets {
        let take = left.min(socket.streams.len());
        left -= take;
        if take == 0 {
            kept.push(socket.ws);
            continue;
        }
        total += (take * frames_per_stream * FRAME_PAYLOAD) as u64;
        let streams: Vec<String> = socket.streams.into_iter().take(take).collect();
        let mut ws = socket.ws;
        senders.push(tokio::spawn(async move {
            let payload = vec![0x5a; FRAME_PAYLOAD];
            for seq in 0..frames_per_stream {
                for stream in &streams {
                    let seq = u32::try_from(seq).unwrap_or(u32::MAX);
                    let frame = RelayMessageFrame::data(stream, seq, 0, 1, payload.clone());
                    if ws
                        .feed(Message::Binary(frame.to_bytes().into()))
                        .await
                        .is_err()
                    {
                        return ws;
                    }
                }
                let _ = ws.flush().await;
            }
            ws
        }));
    }
    for sender in senders {
        if let Ok(ws) = sender.await {
            kept.push(ws);
        }
    }
    if total > 0 {
        let deadline = Instant::now() + Duration::from_secs(900);
        while counters.received.load(Ordering::Relaxed) < total {
            if Instant::now() > deadline {
                return Err("relayed data did not all arrive".into());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let took = started.elapsed();
        let spent = cpu(pids)?.saturating_sub(cpu_before);
        let gib = total as f64 / f64::from(1u32 << 30);
        report.figure(
            Value::new(
                &format!("{label}: rendezvous CPU per GiB relayed"),
                spent.as_secs_f64() / gib,
                "s",
            ),
            Value::new(
                &format!(
                    "{} MiB over {} streams at",
                    total >> 20,
                    sizes.moving.min(sizes.streams)
                ),
                gib * 1024.0 / took.as_secs_f64(),
                "MiB/s",
            ),
            "(informational)",
        );
    }
    drop(kept);
    Ok(Loaded {
        counters,
        executors,
        connect_time,
    })
}

/// The simulated executors of a load, still running.
struct Loaded {
    counters: Arc<Counters>,
    executors: Vec<tokio::task::JoinHandle<()>>,
    /// How long all of them took to register and connect.
    connect_time: Duration,
}

pub fn run(report: &mut Report) {
    raise_nofile();
    let sizes = sizes();
    println!("fleet sizes: {sizes:?}");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return report.failed("fleet", &format!("tokio runtime: {err}")),
    };
    if let Err(err) = runtime.block_on(one_replica(report, sizes)) {
        report.failed("fleet: one replica", &err.to_string());
    }
    if let Err(err) = runtime.block_on(three_replicas(report, sizes)) {
        report.failed("fleet: three replicas behind HAProxy", &err.to_string());
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
}

/// A private key file for the replicas.
fn key_file(dir: &std::path::Path) -> BenchResult<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("signing.key");
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| e.to_string())?;
    std::fs::write(&path, key)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(path.to_string_lossy().into_owned())
}

async fn one_replica(report: &mut Report, sizes: Sizes) -> BenchResult {
    let dir = tempfile::tempdir()?;
    let key = key_file(dir.path())?;
    let addr = free_addr()?;
    let replica = rendezvous(addr, &key, None)?;
    let loaded = load(
        report,
        "1 replica",
        &format!("http://{addr}"),
        &[replica.0.id()],
        sizes,
    )
    .await?;
    for task in loaded.executors {
        task.abort();
    }
    Ok(())
}

async fn three_replicas(report: &mut Report, sizes: Sizes) -> BenchResult {
    let dir = tempfile::tempdir()?;
    let key = key_file(dir.path())?;
    let front = free_addr()?;
    let url = format!("http://{front}");
    let addrs = [free_addr()?, free_addr()?, free_addr()?];
    let mut replicas = Vec::new();
    for addr in addrs {
        replicas.push(Some(rendezvous(addr, &key, Some(&url))?));
    }
    let maxconn = 2 * (sizes.executors + sizes.streams.div_ceil(STREAMS_PER_SOCKET)) + 100;
    let mut config = format!(
        "global\n  maxconn {maxconn}\ndefaults\n  mode http\n  timeout connect 2s\n  timeout client 300s\n  timeout server 300s\n  timeout tunnel 1h\n  retries 3\n  option redispatch\nfrontend fleet\n  bind {front}\n  default_backend rendezvous\nbackend rendezvous\n  balance uri depth 3\n  hash-type consistent\n  default-server check inter 200ms fall 1 rise 1 maxconn {maxconn}\n"
    );
    for (i, addr) in addrs.iter().enumerate() {
        config.push_str(&format!("  server r{i} {addr}\n"));
    }
    let config_path = dir.path().join("haproxy.cfg");
    std::fs::write(&config_path, config)?;
    let _haproxy = Running(
        Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("haproxy: {e}"))?,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(front).is_err() {
        if Instant::now() > deadline {
            return Err("haproxy does not listen".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pids: Vec<u32> = replicas.iter().flatten().map(|r| r.0.id()).collect();
    let Loaded {
        counters,
        executors,
        connect_time,
    } = load(report, "3 replicas", &url, &pids, sizes).await?;

    // Kill -9 the replica holding the most environments.
    let held: Vec<u64> = addrs
        .iter()
        .map(|a| environments(*a).unwrap_or(0))
        .collect();
    let victim = (0..3).max_by_key(|&i| held[i]).unwrap_or(0);
    let lost = held[victim];
    let before = counters.connected.load(Ordering::Relaxed);
    let started = Instant::now();
    replicas[victim] = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    while counters.connected.load(Ordering::Relaxed) < before + lost {
        if Instant::now() > deadline {
            return Err("executors of the killed replica did not all come back".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Every environment answers connect again.
    let harness_key = NoiseIdentity::generate()?.public_key().encode();
    let mut checks = Vec::new();
    for i in 0..sizes.executors {
        let registry = RegistryClient::new(&url, &format!("env-{i}"), AuthHeaders::default())?;
        let key = harness_key.clone();
        checks.push(tokio::spawn(async move {
            let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
            while registry.connect(&key).await.is_err() {
                backoff.wait().await;
            }
        }));
        if checks.len() >= 64 {
            for check in checks.drain(..) {
                let _ = check.await;
            }
        }
    }
    for check in checks {
        let _ = check.await;
    }
    let recovered = started.elapsed();
    report.figure(
        Value::new(&format!("time until all {} environments are reachable after kill -9 of the replica holding {lost}", sizes.executors), recovered.as_secs_f64(), "s"),
        Value::new("first registration and connection of every executor", connect_time.as_secs_f64(), "s"),
        "(informational)",
    );
    for task in executors {
        task.abort();
    }
    Ok(())
}

/// The environments a replica holds (`GET /readyz`).
fn environments(addr: SocketAddr) -> Option<u64> {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(addr).ok()?;
    socket.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    socket.write_all(b"GET /readyz HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = String::new();
    socket.read_to_string(&mut answer).ok()?;
    let body = answer.split("\r\n\r\n").nth(1)?;
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value["environments"].as_u64()
}
