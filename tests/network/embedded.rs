//! A proxy embedded in this test process (`ProxyHandle::start` +
//! `shutdown`): stopping it closes its tunnels, its connections and the
//! upstream connections serving them, and `shutdown` returns only once
//! every task it started has ended.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;

use codexbox::net::dns::RESOLVE_PATH;
use codexbox::net::policy::{Mode, Policy};
use codexbox::net::{ProxyConfig, ProxyHandle};

use crate::common::client::WAIT;
use crate::common::net::{parse_response, proxy_connect, socks_connect, Response};

/// What the origin starts each answer with; the rest never comes.
const FIRST_BYTES: &[u8] = b"hello";

/// An origin on 127.0.0.1 that keeps every connection open until its
/// client leaves and then says so on the channel. A request gets the head
/// of a 100-byte answer and its first bytes only.
fn holding_origin() -> (SocketAddr, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind origin");
    let addr = listener.local_addr().unwrap();
    let (closed_tx, closed) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let closed_tx = closed_tx.clone();
            std::thread::spawn(move || {
                stream.set_read_timeout(Some(WAIT * 3)).unwrap();
                let (mut seen, mut answered, mut buf) = (Vec::new(), false, [0u8; 1024]);
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                        // Still open when the test gave up: not a close.
                        Err(err) if is_timeout(&err) => return,
                        Err(_) => break,
                    }
                    if !answered && seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        answered = true;
                        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n";
                        let _ = stream.write_all(head);
                        let _ = stream.write_all(FIRST_BYTES);
                    }
                }
                let _ = closed_tx.send(());
            });
        }
    });
    (addr, closed)
}

fn is_timeout(err: &std::io::Error) -> bool {
    matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Reads until `stream` ends; false if it is still open after [`WAIT`].
fn closed_by_peer(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(err) => return !is_timeout(&err),
        }
    }
}

/// Sends `request` on a new connection to `proxy` and reads the head of a
/// `200` answer; the connection stays open, its body unread.
fn request_head(proxy: &str, request: &str) -> (TcpStream, Response) {
    let mut stream = TcpStream::connect(proxy).unwrap();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("a response head");
        head.push(byte[0]);
    }
    let head = parse_response(&String::from_utf8_lossy(&head));
    assert_eq!(head.status, 200, "{head:?}");
    (stream, head)
}

/// One client of each kind, each left open: a CONNECT tunnel, a SOCKS5
/// tunnel, a forwarded request whose answer is still coming (its upstream
/// connection open), the DNS stub's question answered on a connection kept
/// alive, and a connection that has sent nothing yet.
fn open_clients(http: SocketAddr, socks: SocketAddr, origin: SocketAddr) -> Vec<TcpStream> {
    let (http, socks) = (http.to_string(), socks.to_string());
    let (head, tunnel) = proxy_connect(&http, &origin.to_string());
    assert_eq!(head.status, 200, "{head:?}");
    let (reply, socks_tunnel) = socks_connect(&socks, "127.0.0.1", origin.port());
    assert_eq!(reply, 0, "SOCKS5 CONNECT succeeded");

    let request = format!("GET http://{origin}/ HTTP/1.1\r\nHost: {origin}\r\n\r\n");
    let (mut forwarded, _) = request_head(&http, &request);
    let mut first = vec![0u8; FIRST_BYTES.len()];
    forwarded.read_exact(&mut first).unwrap();
    assert_eq!(first, FIRST_BYTES);

    let request =
        format!("GET {RESOLVE_PATH}?name=localhost HTTP/1.1\r\nHost: codexbox-proxy\r\n\r\n");
    let (mut resolved, head) = request_head(&http, &request);
    let length: usize = head.header("content-length").unwrap().parse().unwrap();
    let mut body = vec![0u8; length];
    resolved.read_exact(&mut body).unwrap();
    assert!(
        String::from_utf8_lossy(&body).contains("127.0.0.1"),
        "{body:?}"
    );

    let silent = TcpStream::connect(&http).unwrap();
    vec![tunnel, socks_tunnel, forwarded, resolved, silent]
}

#[test]
fn a_stopped_embedded_proxy_closes_its_tunnels_and_leaves_no_task_behind() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (origin, origin_closed) = holding_origin();
        let policy = Policy::new(["127.0.0.1", "localhost"], [""; 0], Mode::Full, false).unwrap();
        let mut config = ProxyConfig::new(policy);
        config.socks5_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        let handle = ProxyHandle::start(config).await.unwrap();
        let http = handle.http_addr();
        let socks = handle.socks5_addr().unwrap();
        // The clients block, so they run beside this runtime, which serves
        // the proxy.
        let mut clients = tokio::task::spawn_blocking(move || open_clients(http, socks, origin))
            .await
            .expect("clients");
        let metrics = tokio::runtime::Handle::current().metrics();
        assert!(
            metrics.num_alive_tasks() > clients.len(),
            "connections, tunnels and an upstream connection are being served"
        );

        let outcome = tokio::time::timeout(WAIT, handle.shutdown()).await;
        assert!(outcome.is_ok(), "shutdown returned");
        // Listeners, connection tasks, both tunnels and the upstream
        // connection have all ended.
        assert_eq!(metrics.num_alive_tasks(), 0);

        let closed = tokio::task::spawn_blocking(move || {
            let clients: Vec<bool> = clients.iter_mut().map(closed_by_peer).collect();
            // The CONNECT tunnel, the SOCKS5 tunnel and the upstream
            // connection of the forwarded request.
            let origin = (0..3)
                .filter(|_| origin_closed.recv_timeout(WAIT).is_ok())
                .count();
            (clients, origin)
        })
        .await
        .unwrap();
        assert_eq!(closed, (vec![true; 5], 3), "closed clients, origin sides");
        assert!(TcpStream::connect(http).is_err(), "the listener is closed");
    });
}
