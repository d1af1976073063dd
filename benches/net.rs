//! The network figures of docs/performance.md, each beside its baseline of the same run:
//! a 256 MiB CONNECT tunnel through `codexbox proxy` against a direct
//! loopback TCP copy (target ≥ 80 %), with the ceiling any relay reaches
//! here (minimal splice and copy relays in this process, same sockets,
//! same chunks) and the CPU time each path costs per GiB; the p50 latency
//! a proxied HTTP request adds over a direct one (target ≤ 0.5 ms);
//! sandboxed `true` with managed routing against without (target ≤ +3
//! ms); and `http/request` streaming 256 MiB through the exec-server
//! against the same download read directly. Every server is on 127.0.0.1;
//! runs alternate.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::json;

use crate::common::{self, cpu_time, ms, quantile, Report, Server, Value};
use crate::process::{connect, BenchResult};

const TUNNEL_BYTES: usize = 256 << 20;
const TUNNEL_RUNS: usize = 9;
/// Pipe size of the minimal relay (the proxy's).
const RELAY_PIPE_BYTES: libc::c_int = 1 << 20;
const LATENCY_RUNS: usize = 300;
const SANDBOX_RUNS: usize = 40;
const STREAM_BYTES: usize = 256 << 20;
const CHUNK: usize = 256 << 10;
const READ_ONLY: &str = r#"{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"}"#;

/// Adds the network figures to the report.
pub fn run(report: &mut Report) {
    let proxy = match Proxy::start() {
        Ok(proxy) => proxy,
        Err(err) => return report.failed("network proxy", &err.to_string()),
    };
    if let Err(err) = tunnel(report, &proxy) {
        report.failed("CONNECT tunnel", &err.to_string());
    }
    if let Err(err) = latency(report, &proxy) {
        report.failed("proxied HTTP request", &err.to_string());
    }
    if let Err(err) = routed_sandbox(report, &proxy) {
        report.failed("sandboxed true with managed routing", &err.to_string());
    }
    if let Err(err) = streamed(report) {
        report.failed("http/request streamed", &err.to_string());
    }
}

/// `codexbox proxy` allowing 127.0.0.1.
struct Proxy {
    child: Child,
    addr: String,
}

impl Proxy {
    fn start() -> BenchResult<Proxy> {
        let mut child = Command::new(common::BIN)
            .args(["proxy", "--allow", "127.0.0.1", "--no-upstream-proxy"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("http://")
            .ok_or("no URL line from codexbox proxy")?
            .to_owned();
        Ok(Proxy { child, addr })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server that reads everything a connection sends, then answers one byte.
fn sink() -> BenchResult<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; CHUNK];
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
                let _ = stream.write_all(b"k");
            });
        }
    });
    Ok(addr)
}

/// Sends `TUNNEL_BYTES` on `stream`, half-closes it and waits for the ack.
fn push(mut stream: TcpStream) -> BenchResult<Duration> {
    let chunk = vec![7u8; CHUNK];
    let started = Instant::now();
    for _ in 0..TUNNEL_BYTES / CHUNK {
        stream.write_all(&chunk)?;
    }
    stream.shutdown(std::net::Shutdown::Write)?;
    let mut ack = [0u8; 1];
    stream.read_exact(&mut ack)?;
    Ok(started.elapsed())
}

fn connect_through(proxy: &str, target: SocketAddr) -> BenchResult<TcpStream> {
    let mut stream = TcpStream::connect(proxy)?;
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    )?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte)?;
        head.push(byte[0]);
    }
    if !head.starts_with(b"HTTP/1.1 200") {
        return Err(format!("CONNECT refused: {}", String::from_utf8_lossy(&head)).into());
    }
    Ok(stream)
}

fn mib_per_s(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / time.as_secs_f64()
}

/// Moves everything `from` sends to `to` with blocking `splice(2)`
/// through a pipe, then half-closes `to`.
fn splice_one_way(from: &TcpStream, to: &TcpStream) {
    use std::os::fd::AsRawFd;
    let mut ends = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the live two-element array.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    let [read_end, write_end] = ends;
    // SAFETY: F_SETPIPE_SZ on the pipe just made; integer argument.
    unsafe { libc::fcntl(write_end, libc::F_SETPIPE_SZ, RELAY_PIPE_BYTES) };
    let splice = |from: libc::c_int, to: libc::c_int, len: usize| {
        // SAFETY: open fds for the call; null offsets (pipes and sockets).
        unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE,
            )
        }
    };
    'relay: loop {
        let filled = splice(from.as_raw_fd(), write_end, RELAY_PIPE_BYTES as usize);
        if filled <= 0 {
            break;
        }
        let mut left = filled;
        while left > 0 {
            let moved = splice(read_end, to.as_raw_fd(), left as usize);
            if moved <= 0 {
                break 'relay;
            }
            left -= moved;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
    // SAFETY: both pipe ends are ours and closed once.
    unsafe {
        libc::close(read_end);
        libc::close(write_end);
    }
}

/// Moves everything `from` sends to `to` with blocking reads and writes
/// through one buffer of `CHUNK` bytes, then half-closes `to`.
fn copy_one_way(mut from: &TcpStream, mut to: &TcpStream) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// How a minimal relay moves bytes.
#[derive(Clone, Copy)]
enum Moves {
    /// `splice(2)` through a pipe as large as the proxy's.
    Splice,
    /// `read`/`write` through a buffer.
    Copy,
}

/// The least a tunnel costs: a relay in this process with a blocking
/// thread per direction and nothing else (no policy, no HTTP, no
/// runtime). Its throughput is a ceiling for the proxy's on this machine,
/// measured in the same run.
fn minimal_relay(target: SocketAddr, moves: Moves) -> BenchResult<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let one_way = match moves {
        Moves::Splice => splice_one_way,
        Moves::Copy => copy_one_way,
    };
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(origin) = TcpStream::connect(target) else {
                continue;
            };
            let (Ok(client_back), Ok(origin_back)) = (client.try_clone(), origin.try_clone())
            else {
                continue;
            };
            std::thread::spawn(move || one_way(&client, &origin));
            std::thread::spawn(move || one_way(&origin_back, &client_back));
        }
    });
    Ok(addr)
}

/// The ways of moving the same bytes to the same sink.
#[derive(Clone, Copy)]
enum Path {
    Direct,
    Proxy,
    Relay(SocketAddr),
}

/// Time and CPU time (this process and the proxy) of one kind of run.
#[derive(Default)]
struct Runs {
    times: Vec<Duration>,
    cpu: Duration,
}

impl Runs {
    fn mib_per_s(&mut self) -> f64 {
        mib_per_s(TUNNEL_BYTES, quantile(&mut self.times, 0.5))
    }

    /// CPU seconds per GiB moved, over all runs.
    fn cpu_per_gib(&self) -> f64 {
        let gib = (TUNNEL_BYTES * self.times.len()) as f64 / f64::from(1u32 << 30);
        self.cpu.as_secs_f64() / gib
    }
}

fn tunnel(report: &mut Report, proxy: &Proxy) -> BenchResult {
    let target = sink()?;
    let paths = [
        Path::Direct,
        Path::Proxy,
        Path::Relay(minimal_relay(target, Moves::Splice)?),
        Path::Relay(minimal_relay(target, Moves::Copy)?),
    ];
    let mut runs: [Runs; 4] = Default::default();
    let cpu = || -> BenchResult<Duration> {
        let own = cpu_time(std::process::id()).ok_or("no CPU time for the benchmark")?;
        let proxy = cpu_time(proxy.child.id()).ok_or("no CPU time for the proxy")?;
        Ok(own + proxy)
    };
    for i in 0..TUNNEL_RUNS {
        // Each path goes first in turn, so that load drifts over all.
        for k in 0..paths.len() {
            let which = (i + k) % paths.len();
            let stream = match paths[which] {
                Path::Direct => TcpStream::connect(target)?,
                Path::Proxy => connect_through(&proxy.addr, target)?,
                Path::Relay(relay) => TcpStream::connect(relay)?,
            };
            let before = cpu()?;
            runs[which].times.push(push(stream)?);
            runs[which].cpu += cpu()?.saturating_sub(before);
        }
    }
    let [direct, tunnelled, splice, copy] = &mut runs;
    let (measured, baseline) = (tunnelled.mib_per_s(), direct.mib_per_s());
    let (splice_rate, copy_rate) = (splice.mib_per_s(), copy.mib_per_s());
    let ratio = measured / baseline;
    report.figure(
        Value::new("CONNECT tunnel 256 MiB", measured, "MiB/s"),
        Value::new("direct loopback TCP copy", baseline, "MiB/s"),
        &format!(
            "ratio {ratio:.2} (target >= 0.8): {}; ceilings in this run: minimal splice relay \
             {splice_rate:.0} MiB/s (ratio {:.2}), minimal copy relay {copy_rate:.0} MiB/s \
             (ratio {:.2}); the proxy reaches {:.2} of the better",
            if ratio >= 0.8 { "ok" } else { "MISSED" },
            splice_rate / baseline,
            copy_rate / baseline,
            measured / splice_rate.max(copy_rate),
        ),
    );
    let cpu_direct = direct.cpu_per_gib();
    let (cpu_tunnel, cpu_splice, cpu_copy) = (
        tunnelled.cpu_per_gib(),
        splice.cpu_per_gib(),
        copy.cpu_per_gib(),
    );
    report.figure(
        Value::new("CPU time per GiB through the tunnel", cpu_tunnel, "s"),
        Value::new("direct copy", cpu_direct, "s"),
        &format!(
            "x{:.2} (minimal splice relay x{:.2}, copy relay x{:.2}): a relay takes every byte \
             through the TCP stack twice",
            cpu_tunnel / cpu_direct,
            cpu_splice / cpu_direct,
            cpu_copy / cpu_direct,
        ),
    );
    Ok(())
}

/// An HTTP origin answering each request with a short body and closing.
fn origin() -> BenchResult<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let _ = stream.set_nodelay(true);
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line == "\r\n" => {
                        let _ = reader.get_mut().write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        );
                        break;
                    }
                    Ok(_) => {}
                }
            }
        }
    });
    Ok(addr)
}

/// One request on a new connection to `addr` for the origin `host`;
/// `target` is the request target (origin-form direct, absolute-form
/// through the proxy).
fn request(addr: &str, host: &str, target: &str) -> BenchResult<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    if !response.starts_with(b"HTTP/1.1 200") || !response.ends_with(b"ok") {
        return Err(format!("bad response {:?}", String::from_utf8_lossy(&response)).into());
    }
    Ok(started.elapsed())
}

fn latency(report: &mut Report, proxy: &Proxy) -> BenchResult {
    let origin = origin()?;
    let absolute = format!("http://{origin}/x");
    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for i in 0..LATENCY_RUNS + 20 {
        let host = origin.to_string();
        let d = request(&host, &host, "/x")?;
        let p = request(&proxy.addr, &host, &absolute)?;
        if i >= 20 {
            direct.push(d);
            proxied.push(p);
        }
    }
    let (direct, proxied) = (
        ms(quantile(&mut direct, 0.5)),
        ms(quantile(&mut proxied, 0.5)),
    );
    let added = proxied - direct;
    report.figure(
        Value::new("proxied HTTP request p50", proxied, "ms"),
        Value::new("direct HTTP request p50", direct, "ms"),
        &format!(
            "added {added:.3} ms (target <= 0.5 ms): {}",
            if added <= 0.5 { "ok" } else { "MISSED" }
        ),
    );
    Ok(())
}

fn sandboxed_true(proxy: Option<&str>) -> BenchResult<Duration> {
    let mut cmd = Command::new(common::BIN);
    cmd.args([
        "linux-sandbox",
        "--sandbox-policy-cwd",
        "/tmp",
        "--permission-profile",
        READ_ONLY,
    ]);
    if let Some(proxy) = proxy {
        cmd.arg("--allow-network-for-proxy")
            .env("HTTP_PROXY", format!("http://{proxy}"));
    }
    cmd.args(["--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Instant::now();
    let status = cmd.status()?;
    if !status.success() {
        return Err(format!("sandboxed true failed: {status}").into());
    }
    Ok(started.elapsed())
}

fn routed_sandbox(report: &mut Report, proxy: &Proxy) -> BenchResult {
    let (mut plain, mut routed) = (Vec::new(), Vec::new());
    for i in 0..SANDBOX_RUNS + 3 {
        let p = sandboxed_true(None)?;
        let r = sandboxed_true(Some(&proxy.addr))?;
        if i >= 3 {
            plain.push(p);
            routed.push(r);
        }
    }
    let (plain, routed) = (
        ms(quantile(&mut plain, 0.5)),
        ms(quantile(&mut routed, 0.5)),
    );
    let added = routed - plain;
    report.figure(
        Value::new("sandboxed true with managed routing p50", routed, "ms"),
        Value::new("sandboxed true without p50", plain, "ms"),
        &format!(
            "added {added:.2} ms (target <= 3 ms): {}",
            if added <= 3.0 { "ok" } else { "MISSED" }
        ),
    );
    Ok(())
}

/// An origin serving `STREAM_BYTES` to every request.
fn big_origin() -> BenchResult<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                while matches!(reader.read_line(&mut line), Ok(n) if n > 0) && line != "\r\n" {
                    line.clear();
                }
                let stream = reader.get_mut();
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {STREAM_BYTES}\r\n\r\n");
                let chunk = vec![3u8; CHUNK];
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                for _ in 0..STREAM_BYTES / CHUNK {
                    if stream.write_all(&chunk).is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(addr)
}

fn direct_download(addr: SocketAddr) -> BenchResult<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr)?;
    write!(stream, "GET /big HTTP/1.1\r\nHost: h\r\n\r\n")?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0usize;
    while total < STREAM_BYTES {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n;
    }
    Ok(started.elapsed())
}

fn streamed(report: &mut Report) -> BenchResult {
    let origin = big_origin()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let server = Server::start(&[])?;
    let (client, mut events) = runtime.block_on(connect(&server.url))?;
    let baseline = direct_download(origin)?;
    let started = Instant::now();
    let received = runtime.block_on(async {
        let url = format!("http://{origin}/big");
        client
            .call(
                "http/request",
                json!({"method": "GET", "url": url, "requestId": "bench", "streamResponse": true}),
            )
            .await?;
        let mut received = 0usize;
        loop {
            let note = tokio::time::timeout(Duration::from_secs(60), events.recv())
                .await
                .map_err(|_| "no body delta within 60 s")?
                .ok_or("connection closed")?;
            if note.method != "http/request/bodyDelta" {
                continue;
            }
            let delta = note.params["deltaBase64"].as_str().unwrap_or("");
            received += base64::engine::general_purpose::STANDARD
                .decode(delta)?
                .len();
            if note.params["done"] == true {
                return Ok::<_, Box<dyn std::error::Error>>(received);
            }
        }
    })?;
    let elapsed = started.elapsed();
    if received != STREAM_BYTES {
        return Err(format!("received {received} of {STREAM_BYTES} bytes").into());
    }
    let measured = mib_per_s(STREAM_BYTES, elapsed) * 1.048_576;
    let direct = mib_per_s(STREAM_BYTES, baseline) * 1.048_576;
    report.figure(
        Value::new("http/request streamed 256 MiB", measured, "MB/s"),
        Value::new("direct download", direct, "MB/s"),
        &format!("ratio {:.2}", measured / direct),
    );
    Ok(())
}
