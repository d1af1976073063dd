//! Remote-mode test utilities: start the real `codexbox rendezvous`, a
//! remote executor (`exec-server --remote`) and `codexbox connect`, each
//! killed on drop; and a TCP proxy between peers and the rendezvous that
//! records what it relays, delays chunks and cuts connections: all at once
//! at random moments, each after a byte budget, or each after a random
//! lifetime (every random choice from the test's seed).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::client::{
    assert_well_ordered, collect_stderr, stderr_text, wait_exit, Event, Raw, BIN, WAIT,
};

/// A child process with its stderr collected, killed on drop.
pub struct Proc {
    pub child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Signalled when stderr reached its end.
    stderr_done: std::sync::mpsc::Receiver<()>,
    what: String,
}

/// The binary with no credential or proxy setting from the test's own
/// environment.
fn command() -> Command {
    let mut command = Command::new(BIN);
    for var in super::net::PROXY_VARS {
        command.env_remove(var);
    }
    command
        .env_remove("CODEXBOX_AUTH_TOKEN")
        .env_remove("CODEX_API_KEY")
        .env_remove("CODEX_ACCESS_TOKEN")
        .env_remove("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN")
        .env("CODEX_HOME", "/nonexistent-codex-home")
        .env("RUST_LOG", "codexbox=info");
    command
}

impl Proc {
    fn spawn(mut command: Command, what: &str) -> Proc {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => panic!("spawn {what}: {err}"),
        };
        let (buffer, stderr_done) = collect_stderr(&mut child);
        Proc {
            child,
            stderr: buffer,
            stderr_done,
            what: what.to_owned(),
        }
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        stderr_text(&self.stderr)
    }

    /// Reads the first stdout line (bounded wait).
    fn first_line(&mut self, prefix: &str) -> String {
        let stdout = self.child.stdout.take().expect("stdout piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(WAIT).unwrap_or_default();
        assert!(
            line.starts_with(prefix),
            "{}: first line {line:?}; stderr:\n{}",
            self.what,
            self.stderr()
        );
        line.trim_end().to_owned()
    }

    /// Waits (bounded) until stderr has `needle` at least `count` times.
    pub fn wait_stderr(&mut self, needle: &str, count: usize) {
        let deadline = Instant::now() + WAIT * 3;
        loop {
            if self.stderr().matches(needle).count() >= count {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let _ = self.stderr_done.recv_timeout(WAIT);
                if self.stderr().matches(needle).count() >= count {
                    return;
                }
                panic!(
                    "{} exited with {status}; stderr:\n{}",
                    self.what,
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}: no {needle:?} (x{count}) on stderr:\n{}",
                self.what,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (bounded) for the exit status.
    /// Waits (bounded) for the exit status, and for the end of stderr, so
    /// [`Proc::stderr`] then holds all of it.
    pub fn wait(&mut self) -> Option<std::process::ExitStatus> {
        let status = wait_exit(&mut self.child);
        if status.is_some() {
            let _ = self.stderr_done.recv_timeout(WAIT);
        }
        status
    }

    /// Kills the process now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `codexbox rendezvous`.
pub struct Rendezvous {
    pub proc: Proc,
    /// `http://IP:PORT`.
    pub url: String,
}

impl Rendezvous {
    pub fn start(extra: &[&str]) -> Rendezvous {
        Self::start_on("127.0.0.1:0", extra)
    }

    /// Starts on a given `IP:PORT` (to restart on the same address).
    pub fn start_on(listen: &str, extra: &[&str]) -> Rendezvous {
        let mut command = command();
        command.args(["rendezvous", "--listen", listen]).args(extra);
        let mut proc = Proc::spawn(command, "rendezvous");
        let url = proc.first_line("http://");
        Rendezvous { proc, url }
    }

    /// `IP:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.url
            .trim_start_matches("http://")
            .parse()
            .expect("rendezvous address")
    }

    /// The stream count `GET /readyz` reports.
    pub fn streams(&self) -> u64 {
        use std::io::{Read, Write};
        let mut socket = std::net::TcpStream::connect(self.addr()).expect("connect /readyz");
        socket.set_read_timeout(Some(WAIT)).expect("read timeout");
        socket
            .write_all(b"GET /readyz HTTP/1.0\r\nHost: rendezvous\r\n\r\n")
            .expect("write /readyz");
        let mut answer = String::new();
        let _ = socket.read_to_string(&mut answer);
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let value: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|err| panic!("/readyz answered {answer:?}: {err}"));
        value["streams"]
            .as_u64()
            .unwrap_or_else(|| panic!("/readyz answered {answer:?}"))
    }
}

/// A running `codexbox exec-server --remote`.
pub struct Executor {
    pub proc: Proc,
}

/// The stderr line an executor logs on each rendezvous connection.
pub const EXECUTOR_CONNECTED: &str = "connected to the rendezvous";

impl Executor {
    /// Starts an executor and waits until it is connected to the rendezvous.
    pub fn start(
        registry: &str,
        environment: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Executor {
        let mut executor = Self::spawn(registry, environment, extra, envs);
        executor.proc.wait_stderr(EXECUTOR_CONNECTED, 1);
        executor
    }

    /// Starts an executor in `dir` and waits until it is connected.
    pub fn start_in(dir: &std::path::Path, registry: &str, environment: &str) -> Executor {
        let mut command = command();
        command.current_dir(dir).args([
            "exec-server",
            "--remote",
            registry,
            "--environment-id",
            environment,
        ]);
        let mut executor = Executor {
            proc: Proc::spawn(command, "executor"),
        };
        executor.proc.wait_stderr(EXECUTOR_CONNECTED, 1);
        executor
    }

    /// Starts an executor without waiting for anything.
    pub fn spawn(
        registry: &str,
        environment: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Executor {
        let mut command = command();
        command
            .args([
                "exec-server",
                "--remote",
                registry,
                "--environment-id",
                environment,
            ])
            .args(extra)
            .envs(envs.iter().copied());
        Executor {
            proc: Proc::spawn(command, "executor"),
        }
    }
}

/// A running `codexbox connect`.
pub struct Bridge {
    pub proc: Proc,
    /// `ws://IP:PORT`.
    pub url: String,
}

impl Bridge {
    /// The token the bridge published for its address, as codexbox's own
    /// clients find it (`None` with `--insecure-no-auth`).
    pub fn token(&self) -> Option<String> {
        let addr = codexbox::listener_token::loopback_address(&self.url).expect("loopback URL");
        codexbox::listener_token::find(addr)
    }

    /// A raw WebSocket client of the bridge, with its token.
    pub async fn client(&self) -> Raw {
        Raw::connect_authorized(&self.url, self.token().as_deref()).await
    }
}

impl Bridge {
    pub fn start(
        registry: &str,
        environment: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Bridge {
        let mut command = command();
        command
            .args([
                "connect",
                "--registry",
                registry,
                "--environment-id",
                environment,
            ])
            .args(extra)
            .envs(envs.iter().copied());
        let mut proc = Proc::spawn(command, "connect");
        let url = proc.first_line("ws://");
        Bridge { proc, url }
    }
}

/// How a [`Proxy`] misbehaves.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Cut every open connection at random intervals of up to this long.
    pub cut_every: Option<Duration>,
    /// Delay each forwarded chunk by up to this long.
    pub max_delay: Option<Duration>,
    /// Keep a copy of every relayed byte (see [`Proxy::seen`]).
    pub record: bool,
    /// Cut each connection once it has relayed this many bytes (both
    /// directions together; the chunk that reaches the budget is cut short).
    pub budget: Option<usize>,
    /// Cut each connection after a lifetime drawn uniformly from this range.
    pub lifetime: Option<(Duration, Duration)>,
}

/// Shared state of a proxy.
#[derive(Default)]
struct ProxyState {
    target: Mutex<Option<SocketAddr>>,
    /// Every byte relayed in either direction.
    seen: Mutex<Vec<u8>>,
    /// Bumped to cut every connection open at that moment.
    cut_epoch: AtomicU64,
    cuts: AtomicU64,
    /// Bumped to freeze every connection open at that moment: nothing more
    /// is forwarded either way, and both sockets stay open (a half-open
    /// path, as when a peer's host vanishes).
    freeze_epoch: AtomicU64,
    /// Connections forwarded so far.
    accepted: AtomicU64,
    stop: AtomicBool,
}

/// A TCP proxy on 127.0.0.1 running on its own thread and runtime.
pub struct Proxy {
    pub addr: SocketAddr,
    state: Arc<ProxyState>,
}

/// A tiny deterministic RNG (xorshift) for fault timing.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, limit: Duration) -> Duration {
        let micros = u64::try_from(limit.as_micros()).unwrap_or(u64::MAX).max(1);
        Duration::from_micros(self.next() % micros)
    }

    fn between(&mut self, (low, high): (Duration, Duration)) -> Duration {
        low + self.below(high.saturating_sub(low))
    }
}

/// What the two directions of one proxied connection share.
#[derive(Default)]
struct Connection {
    /// Bytes relayed so far, both ways.
    relayed: std::sync::atomic::AtomicUsize,
    /// Set when the connection's own fault (budget, lifetime) cut it.
    cut: AtomicBool,
}

impl Proxy {
    /// Binds now; forwards to the target set with [`set_target`](Self::set_target).
    pub fn start(faults: Faults, seed: u64) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(ProxyState::default());
        let thread_state = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(run_proxy(listener, thread_state, faults, seed));
        });
        Proxy { addr, state }
    }

    pub fn set_target(&self, target: SocketAddr) {
        *self.state.target.lock().expect("lock") = Some(target);
    }

    /// `http://IP:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every byte relayed so far.
    pub fn seen(&self) -> Vec<u8> {
        self.state
            .seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Cuts every open connection now.
    pub fn cut_all(&self) {
        self.state.cut_epoch.fetch_add(1, Ordering::SeqCst);
        self.state.cuts.fetch_add(1, Ordering::SeqCst);
    }

    /// Freezes every open connection: from now on it forwards nothing and
    /// never closes (until cut), like a peer whose host vanished.
    pub fn freeze_all(&self) {
        self.state.freeze_epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// How many times connections were cut.
    pub fn cuts(&self) -> u64 {
        self.state.cuts.load(Ordering::SeqCst)
    }

    /// How many connections were forwarded.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.cut_all();
    }
}

async fn run_proxy(
    listener: std::net::TcpListener,
    state: Arc<ProxyState>,
    faults: Faults,
    seed: u64,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    if let Some(every) = faults.cut_every {
        let state = state.clone();
        tokio::spawn(async move {
            let mut rng = Rng(seed | 1);
            while !state.stop.load(Ordering::SeqCst) {
                tokio::time::sleep(every / 4 + rng.below(every)).await;
                state.cut_epoch.fetch_add(1, Ordering::SeqCst);
                state.cuts.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    let mut connection = 0u64;
    while !state.stop.load(Ordering::SeqCst) {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        let Some(target) = *state.target.lock().expect("lock") else {
            continue;
        };
        let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
            continue;
        };
        let _ = inbound.set_nodelay(true);
        let _ = outbound.set_nodelay(true);
        connection += 1;
        state.accepted.fetch_add(1, Ordering::SeqCst);
        let epoch = Epochs {
            cut: state.cut_epoch.load(Ordering::SeqCst),
            freeze: state.freeze_epoch.load(Ordering::SeqCst),
        };
        let (a_read, a_write) = inbound.into_split();
        let (b_read, b_write) = outbound.into_split();
        let seed = seed.wrapping_add(connection.wrapping_mul(0x9e37_79b9));
        let shared = Arc::new(Connection::default());
        if let Some(range) = faults.lifetime {
            let lifetime = Rng(seed | 1).between(range);
            let (shared, state) = (shared.clone(), state.clone());
            tokio::spawn(async move {
                tokio::time::sleep(lifetime).await;
                shared.cut.store(true, Ordering::SeqCst);
                state.cuts.fetch_add(1, Ordering::SeqCst);
            });
        }
        let link = Pipe {
            state: state.clone(),
            connection: shared.clone(),
            epoch,
            faults,
        };
        tokio::spawn(pipe(a_read, b_write, link, seed));
        let link = Pipe {
            state: state.clone(),
            connection: shared,
            epoch,
            faults,
        };
        tokio::spawn(pipe(b_read, a_write, link, seed ^ 0xdead));
    }
}

/// What one direction of a proxied connection knows.
struct Pipe {
    state: Arc<ProxyState>,
    connection: Arc<Connection>,
    /// The proxy-wide epochs at accept.
    epoch: Epochs,
    faults: Faults,
}

impl Pipe {
    fn is_cut(&self) -> bool {
        self.state.cut_epoch.load(Ordering::SeqCst) != self.epoch.cut
            || self.connection.cut.load(Ordering::SeqCst)
    }

    fn is_frozen(&self) -> bool {
        self.state.freeze_epoch.load(Ordering::SeqCst) != self.epoch.freeze
    }

    /// How much of `n` bytes may still go; cuts the connection when that
    /// reaches its budget.
    fn take_budget(&self, n: usize) -> usize {
        let Some(budget) = self.faults.budget else {
            return n;
        };
        let before = self.connection.relayed.fetch_add(n, Ordering::SeqCst);
        let allowed = budget.saturating_sub(before).min(n);
        if before + n >= budget && !self.connection.cut.swap(true, Ordering::SeqCst) {
            self.state.cuts.fetch_add(1, Ordering::SeqCst);
        }
        allowed
    }
}

/// The cut and freeze epochs a connection was accepted in.
#[derive(Debug, Clone, Copy)]
struct Epochs {
    cut: u64,
    freeze: u64,
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    link: Pipe,
    seed: u64,
) {
    let mut rng = Rng(seed | 1);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if link.is_frozen() {
            // Hold both sockets, forward nothing, until cut.
            while !link.is_cut() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            return;
        }
        let read = tokio::time::timeout(Duration::from_millis(20), from.read(&mut buf)).await;
        if link.is_cut() {
            return;
        }
        if link.is_frozen() {
            continue;
        }
        let n = match read {
            Err(_) => continue,
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => n,
        };
        if let Some(limit) = link.faults.max_delay {
            tokio::time::sleep(rng.below(limit)).await;
        }
        let n = link.take_budget(n);
        if link.faults.record {
            if let Ok(mut seen) = link.state.seen.lock() {
                seen.extend_from_slice(&buf[..n]);
            }
        }
        if to.write_all(&buf[..n]).await.is_err() || link.is_cut() {
            return;
        }
    }
}

/// The SHA-256 of `data`, in hex (to compare large outputs in messages).
pub fn sha(data: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(data))
}

/// Checks that `events` are well ordered and their output is exactly the
/// first `len` bytes `seq 1 N` prints: nothing lost, nothing duplicated.
pub fn assert_seq_output(events: &[Event], len: usize) {
    assert_well_ordered(events);
    let mut output = Vec::with_capacity(len);
    for event in events.iter().filter(|e| e.kind == "output") {
        output.extend_from_slice(&event.data);
    }
    let expected = seq_output(len);
    assert_eq!(output.len(), expected.len(), "nothing lost or duplicated");
    assert_eq!(sha(&output), sha(&expected));
}

/// The bytes `seq 1 N` prints, cut to `len`.
pub fn seq_output(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 16);
    let mut i = 1u64;
    while out.len() < len {
        out.extend_from_slice(format!("{i}\n").as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}
