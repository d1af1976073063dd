//! Helpers for the network tests: `codexbox proxy` as a child, small
//! origins on 127.0.0.1 (HTTP, TCP echo, UDP echo, a scripted DNS server),
//! raw proxy requests, and a thread moved into a network namespace of its
//! own (for tests that must resolve names without reaching any real DNS
//! server). Every address used is loopback.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_codexbox");
/// Safety net for reads in these tests.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// Proxy variables removed from every child the tests start, so the
/// environment the tests run in cannot redirect anything.
pub const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// A running `codexbox proxy`.
pub struct Proxy {
    pub child: Child,
    /// `127.0.0.1:PORT` of the HTTP listener.
    pub http: String,
    /// `127.0.0.1:PORT` of the SOCKS5 listener.
    pub socks: Option<String>,
    stdout: BufReader<ChildStdout>,
}

impl Proxy {
    pub fn start(args: &[&str]) -> Proxy {
        Self::start_with(Command::new(BIN), args, &[])
    }

    /// `cmd` runs the binary (directly, or through a wrapper whose last
    /// argument is the binary).
    pub fn start_with(mut cmd: Command, args: &[&str], envs: &[(&str, &str)]) -> Proxy {
        for var in PROXY_VARS {
            cmd.env_remove(var);
        }
        cmd.arg("proxy").args(args).envs(envs.iter().copied());
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn codexbox proxy");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("proxy url line");
        let Some(http) = line.trim().strip_prefix("http://").map(str::to_owned) else {
            let _ = child.kill();
            let out = child.wait_with_output().expect("proxy output");
            panic!(
                "no http:// line from codexbox proxy {args:?}: {line:?}, stderr {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let socks = if args.contains(&"--socks5-listen") {
            line.clear();
            stdout.read_line(&mut line).expect("socks url line");
            let socks = line.trim().strip_prefix("socks5h://").map(str::to_owned);
            assert!(socks.is_some(), "unexpected second line {line:?}");
            socks
        } else {
            None
        };
        Proxy {
            child,
            http,
            socks,
            stdout,
        }
    }

    /// The next line the proxy wrote on stdout (the audit log with `-`).
    pub fn next_line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("audit line");
        line
    }

    /// The next audit decision as JSON.
    pub fn next_decision(&mut self) -> serde_json::Value {
        let line = self.next_line();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("audit line {line:?}: {e}"))
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.http)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 origin on 127.0.0.1 answering every request with
/// `origin <port> <METHOD> <target>` and `x-origin: yes`; it counts
/// connections and keeps the request heads it saw.
pub struct Origin {
    pub addr: SocketAddr,
    pub connections: Arc<AtomicUsize>,
    pub heads: Arc<Mutex<Vec<String>>>,
}

impl Origin {
    pub fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind origin");
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (connections.clone(), heads.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                count.fetch_add(1, Ordering::SeqCst);
                let seen = seen.clone();
                std::thread::spawn(move || serve_origin(stream, addr.port(), &seen));
            }
        });
        Origin {
            addr,
            connections,
            heads,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn serve_origin(stream: TcpStream, port: u16, seen: &Mutex<Vec<String>>) {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let mut reader = BufReader::new(stream);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            head.push_str(&line);
            if line == "\r\n" || head.len() > 64 * 1024 {
                break;
            }
        }
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request_line = head.lines().next().unwrap_or("").to_owned();
        seen.lock().unwrap().push(head.clone());
        let mut parts = request_line.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        let query = target.split_once('?').map_or("", |(_, q)| q);
        let stream = reader.get_mut();
        let written = match path {
            // Holds the request without answering until the client leaves.
            "/hang" => {
                let mut sink = [0u8; 64];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
                return;
            }
            "/redirect" => {
                let to = query.strip_prefix("to=").unwrap_or("/redirect");
                stream.write_all(
                    format!(
                        "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 5\r\n\r\nmoved"
                    )
                    .as_bytes(),
                )
            }
            // `bytes=N` of a repeating 0..=250 pattern, in 64 KiB writes.
            "/big" => {
                let total: usize = query
                    .strip_prefix("bytes=")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let chunk: Vec<u8> = (0..65_536usize).map(|i| (i % 251) as u8).collect();
                let mut result = stream.write_all(
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {total}\r\n\r\n").as_bytes(),
                );
                let mut sent = 0;
                while result.is_ok() && sent < total {
                    let n = (total - sent).min(chunk.len());
                    result = stream.write_all(&chunk[..n]);
                    sent += n;
                }
                result
            }
            _ => {
                let mut reply = format!("origin {port} {method} {target}").into_bytes();
                if !body.is_empty() {
                    reply.push(b'\n');
                    reply.extend_from_slice(&body);
                }
                let length = if method == "HEAD" { 0 } else { reply.len() };
                let mut out =
                    format!("HTTP/1.1 200 OK\r\nx-origin: yes\r\ncontent-length: {length}\r\n\r\n")
                        .into_bytes();
                if method != "HEAD" {
                    out.extend_from_slice(&reply);
                }
                stream.write_all(&out)
            }
        };
        let close = head
            .lines()
            .any(|l| l.to_ascii_lowercase().replace(' ', "") == "connection:close");
        if written.is_err() || close {
            return;
        }
    }
}

/// The byte at `offset` of a `/big` body.
pub fn big_body_byte(offset: usize) -> u8 {
    ((offset % 65_536) % 251) as u8
}

/// A TCP server on 127.0.0.1 that writes `banner` first, then echoes.
pub fn tcp_echo(banner: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind echo");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let _ = stream.write_all(banner);
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A UDP echo server on 127.0.0.1.
pub fn udp_echo() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind udp echo");
    let addr = socket.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let _ = socket.send_to(&buf[..n], from);
        }
    });
    addr
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body {:?}: {e}", self.body))
    }
}

/// Sends `request` (which should carry `Connection: close`) to `addr` and
/// reads the response until EOF.
pub fn roundtrip(addr: &str, request: &str) -> Response {
    let mut stream = TcpStream::connect(addr).expect("connect proxy");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&String::from_utf8_lossy(&raw))
}

pub fn parse_response(text: &str) -> Response {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    Response {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// `GET http://HOST:PORT/path` through the proxy.
pub fn proxy_get(proxy: &str, host: &str, port: u16, method: &str) -> Response {
    roundtrip(
        proxy,
        &format!(
            "{method} http://{host}:{port}/p HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    )
}

/// Sends CONNECT and returns the response head and the open stream.
pub fn proxy_connect(proxy: &str, target: &str) -> (Response, TcpStream) {
    let mut stream = TcpStream::connect(proxy).expect("connect proxy");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let mut response = parse_response(&String::from_utf8_lossy(&head));
    let length: usize = response
        .header("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    if length > 0 {
        let mut body = vec![0; length];
        stream.read_exact(&mut body).unwrap();
        response.body = String::from_utf8_lossy(&body).into_owned();
    }
    (response, stream)
}

/// SOCKS5 no-auth greeting and a CONNECT to a name; returns the reply code
/// and the stream.
pub fn socks_connect(proxy: &str, host: &str, port: u16) -> (u8, TcpStream) {
    let mut stream = TcpStream::connect(proxy).expect("connect socks");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.write_all(&[5, 1, 0]).unwrap();
    let mut choice = [0u8; 2];
    stream.read_exact(&mut choice).unwrap();
    assert_eq!(choice, [5, 0]);
    let mut request = vec![5, 1, 0, 3, host.len() as u8];
    request.extend_from_slice(host.as_bytes());
    request.extend_from_slice(&port.to_be_bytes());
    stream.write_all(&request).unwrap();
    let mut reply = [0u8; 10];
    stream.read_exact(&mut reply).unwrap();
    (reply[1], stream)
}

/// Runs `body` on a thread moved into a new network namespace whose
/// loopback is up; sockets and children it creates live there. `None`
/// when namespaces cannot be created here (not root).
pub fn in_new_netns<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .ok()?;
        assert!(up.success(), "ip link set lo up failed");
        Some(body())
    })
    .join()
    .expect("netns thread")
}

/// What the scripted DNS server answers for `A` queries of a name: one
/// address per query in turn (the last one repeats), or NXDOMAIN when empty.
pub type DnsScript = Vec<(String, Vec<std::net::Ipv4Addr>)>;

/// A DNS server on 127.0.0.1:53 (in the caller's namespace) answering `A`
/// queries from `script` and every other query with no records; counts `A`
/// queries per name.
pub fn dns_server(script: DnsScript) -> Arc<Mutex<Vec<String>>> {
    let socket = UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53");
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let query = &buf[..n];
            let Some((name, qtype, end)) = dns_question(query) else {
                continue;
            };
            let mut answer = query[..end].to_vec();
            answer[2] = 0x81; // QR, RD
            answer[3] = 0x80; // RA, NOERROR
            answer[6..12].copy_from_slice(&[0, 0, 0, 0, 0, 0]);
            if qtype == 1 {
                let count = {
                    let mut log = log.lock().unwrap();
                    log.push(name.clone());
                    log.iter().filter(|n| **n == name).count()
                };
                match script.iter().find(|(n, _)| *n == name) {
                    Some((_, ips)) if !ips.is_empty() => {
                        let ip = ips[(count - 1).min(ips.len() - 1)];
                        answer[7] = 1;
                        answer.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4]);
                        answer.extend_from_slice(&ip.octets());
                    }
                    _ => answer[3] = 0x83, // NXDOMAIN
                }
            }
            let _ = socket.send_to(&answer, from);
        }
    });
    asked
}

fn dns_question(query: &[u8]) -> Option<(String, u16, usize)> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(i..i + len)?).to_ascii_lowercase());
        i += len;
    }
    let qtype = u16::from_be_bytes([*query.get(i)?, *query.get(i + 1)?]);
    Some((labels.join("."), qtype, i + 4))
}

/// A command that runs the binary in a private mount namespace where
/// `/etc/resolv.conf` names 127.0.0.1 (so lookups go to [`dns_server`]).
pub fn with_local_resolver(dir: &std::path::Path) -> Command {
    let resolv = dir.join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 127.0.0.1\noptions attempts:1 timeout:2\n",
    )
    .unwrap();
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#)
        .arg(&resolv)
        .arg(BIN);
    cmd
}

/// An HTTPS origin on 127.0.0.1 with a self-signed certificate for
/// `origin.test` and 127.0.0.1 (made by the openssl command line); every
/// request gets `200` with the body `tls origin`.
pub struct TlsOrigin {
    pub addr: SocketAddr,
    /// The CA certificate that signed the origin's, to trust it.
    pub cert: std::path::PathBuf,
    _certificates: TestCertificates,
}

/// A test CA and a leaf certificate it signs for `san` (an openssl
/// `subjectAltName` value), made with the openssl command line in a fresh
/// directory under cargo's target tmp dir; and the TLS server
/// configuration serving that leaf.
pub struct TestCertificates {
    /// The CA certificate, to trust the leaf.
    pub ca: std::path::PathBuf,
    pub server_config: std::sync::Arc<rustls::ServerConfig>,
    pub dir: tempfile::TempDir,
}

impl TestCertificates {
    pub fn make(san: &str) -> TestCertificates {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let dir = tempfile::Builder::new()
            .prefix("tls")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let path = |name: &str| dir.path().join(name);
        let openssl = |args: &[&str]| {
            let status = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("openssl");
            assert!(status.success(), "openssl {args:?} failed");
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        // A CA, and a leaf it signs.
        openssl(
            &[
                &["req", "-x509"],
                &ec[..],
                &["-days", "2", "-subj", "/CN=codexbox test CA"],
                &["-keyout", "ca.key", "-out", "ca.pem"],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"],
                &ec[..],
                &[
                    "-subj",
                    "/CN=codexbox test leaf",
                    "-keyout",
                    "key.pem",
                    "-out",
                    "leaf.csr",
                ],
            ]
            .concat(),
        );
        std::fs::write(
            path("leaf.ext"),
            format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\n"),
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
            "-out",
            "cert.pem",
        ]);
        let (cert, key) = (path("cert.pem"), path("key.pem"));
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
        let key = PrivateKeyDer::from_pem_file(&key).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        TestCertificates {
            ca: path("ca.pem"),
            server_config: std::sync::Arc::new(config),
            dir,
        }
    }
}

/// Binds 127.0.0.1:0 and runs `serve` on the listener in a thread of its
/// own, on a current-thread runtime; returns the address.
fn serve_in_thread<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            serve(tokio::net::TcpListener::from_std(listener).unwrap()).await
        });
    });
    addr
}

/// Reads an HTTP head (up to the blank line, at most 64 KiB).
async fn read_head<S: tokio::io::AsyncRead + Unpin>(stream: &mut S) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= 64 * 1024 {
            return None;
        }
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    String::from_utf8(head).ok()
}

/// One request an [`InterceptingProxy`] saw: the `CONNECT` target and the
/// head of the request sent through the tunnel.
#[derive(Debug, Clone)]
pub struct Intercepted {
    pub authority: String,
    pub head: String,
}

impl Intercepted {
    /// The values of header `name` (lower-case), in order.
    pub fn header(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim().to_owned())
            .collect()
    }
}

/// An HTTPS proxy on 127.0.0.1 that intercepts: it accepts `CONNECT`,
/// terminates TLS itself with a leaf for `names` signed by its own CA
/// (trust [`InterceptingProxy::ca`]), records the request and answers the
/// `n`-th connection with the `n`-th of its responses (the last one
/// again afterwards). Lets a test talk to `https://chatgpt.com` without
/// leaving the machine.
pub struct InterceptingProxy {
    pub addr: SocketAddr,
    pub ca: std::path::PathBuf,
    requests: std::sync::mpsc::Receiver<Intercepted>,
    _certificates: TestCertificates,
}

impl InterceptingProxy {
    pub fn start(names: &[&str], responses: Vec<String>) -> InterceptingProxy {
        let san = names
            .iter()
            .map(|name| format!("DNS:{name}"))
            .collect::<Vec<_>>()
            .join(",");
        let certificates = TestCertificates::make(&san);
        let acceptor = tokio_rustls::TlsAcceptor::from(certificates.server_config.clone());
        let (tx, requests) = std::sync::mpsc::channel();
        let addr = serve_in_thread(move |listener| async move {
            use tokio::io::AsyncWriteExt;
            for index in 0.. {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let Some(connect) = read_head(&mut stream).await else {
                    continue;
                };
                let authority = connect
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_owned();
                if stream
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await
                    .is_err()
                {
                    continue;
                }
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    continue;
                };
                let Some(head) = read_head(&mut tls).await else {
                    continue;
                };
                let _ = tx.send(Intercepted { authority, head });
                let response = responses
                    .get(index)
                    .or(responses.last())
                    .cloned()
                    .unwrap_or_default();
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            }
        });
        InterceptingProxy {
            addr,
            ca: certificates.ca.clone(),
            requests,
            _certificates: certificates,
        }
    }

    /// `http://IP:PORT`, for `HTTPS_PROXY`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The next request seen (failing after the guard time).
    pub fn next_request(&self) -> Intercepted {
        self.requests
            .recv_timeout(Duration::from_secs(10))
            .expect("the proxy saw no request")
    }
}

impl TlsOrigin {
    pub fn start() -> TlsOrigin {
        let certificates = TestCertificates::make("DNS:origin.test,IP:127.0.0.1");
        let config = certificates.server_config.clone();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let addr = serve_in_thread(move |listener| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = tls
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\ntls origin")
                            .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        TlsOrigin {
            addr,
            cert: certificates.ca.clone(),
            _certificates: certificates,
        }
    }
}

/// A forwarding HTTP proxy on 127.0.0.1 that records the request line of
/// every connection made through it: `CONNECT host:port` tunnels, and
/// absolute-form requests (`POST http://host:port/path`), which it sends
/// on in origin form. One request or tunnel per connection.
pub struct RecordingProxy {
    pub addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl RecordingProxy {
    pub fn start() -> RecordingProxy {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        let addr = serve_in_thread(move |listener| async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(forward_one(stream, seen.clone()));
            }
        });
        RecordingProxy { addr, lines }
    }

    /// `http://IP:PORT`, for `HTTP_PROXY`/`HTTPS_PROXY`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The request lines seen so far, in order.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

async fn forward_one(mut client: tokio::net::TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    use tokio::io::AsyncWriteExt;
    let Some(head) = read_head(&mut client).await else {
        return;
    };
    let (line, rest) = head.split_once("\r\n").unwrap_or((head.as_str(), ""));
    seen.lock().unwrap().push(line.to_owned());
    let mut parts = line.split(' ');
    let (method, target, version) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let (authority, forwarded) = if method == "CONNECT" {
        (target.to_owned(), None)
    } else {
        let Some(after_scheme) = target.strip_prefix("http://") else {
            let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            return;
        };
        let (authority, path) = after_scheme
            .find('/')
            .map_or((after_scheme, "/"), |at| after_scheme.split_at(at));
        let head = format!("{method} {path} {version}\r\n{rest}");
        (authority.to_owned(), Some(head))
    };
    let Ok(mut origin) = tokio::net::TcpStream::connect(authority.as_str()).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    let sent = match forwarded {
        Some(head) => origin.write_all(head.as_bytes()).await,
        None => {
            client
                .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
        }
    };
    if sent.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut origin).await;
    }
}

/// Writes one byte of `bytes` every 100 ms to `addr` until the server
/// closes the connection; returns whether it did within three times
/// [`super::client::WAIT`].
pub async fn trickle_until_closed(addr: SocketAddr, bytes: &[u8]) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut reader, mut writer) = stream.into_split();
    let bytes = bytes.to_vec();
    let trickle = tokio::spawn(async move {
        for byte in bytes.iter().cycle() {
            if writer.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut sink = Vec::new();
    let closed = tokio::time::timeout(super::client::WAIT * 3, reader.read_to_end(&mut sink))
        .await
        .is_ok();
    trickle.abort();
    closed
}
