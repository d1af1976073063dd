//! Attacks on the proxy's idea of a destination, through the real binary:
//! addresses smuggled into names a wildcard covers (`[100.128.0.2%25.x]`,
//! SOCKS5 `100.128.0.2%.x`, over HTTP, CONNECT, SOCKS5 TCP and UDP, in
//! `codexbox proxy`, `codexbox sandbox --allow-domain` with both launchers
//! and the exec-server's `networkProxy`), odd spellings of denied addresses
//! (`inet_aton` forms, IPv4-mapped and embedded IPv6, zone ids), IPv6
//! special-purpose ranges, ports above 65535, two `Host` headers, and DNS
//! questions no name can answer. The targets are real listeners on
//! addresses the test puts on `lo` of a network namespace of its own (or on
//! 127.0.0.1): an attack that works reaches them, which the test sees.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::net::{
    in_new_netns, proxy_connect, proxy_get, roundtrip, socks_connect, Origin, Proxy, IO_TIMEOUT,
    PROXY_VARS,
};

/// Runs `body` in a new network namespace whose `lo` also carries
/// `addresses`; reports the skip when namespaces cannot be made here.
fn in_netns_with(addresses: &'static [&'static str], body: impl FnOnce() + Send + 'static) {
    let ran = in_new_netns(move || {
        for address in addresses {
            let args: Vec<String> = if address.contains(':') {
                [
                    "-6",
                    "addr",
                    "add",
                    &format!("{address}/128"),
                    "dev",
                    "lo",
                    "nodad",
                ]
                .map(str::to_owned)
                .to_vec()
            } else {
                ["addr", "add", &format!("{address}/32"), "dev", "lo"]
                    .map(str::to_owned)
                    .to_vec()
            };
            let status = Command::new("ip").args(&args).status().expect("run ip");
            assert!(status.success(), "ip {args:?}");
        }
        body();
    });
    if ran.is_none() {
        crate::common::host::host_has(
            "network namespaces",
            Err("cannot create one here (needs root)".into()),
        );
    }
}

/// A TCP listener on every address of the namespace (`[::]`, dual stack)
/// that records the address each connection reached, reads one request
/// head and answers `200 sink`.
struct Sink {
    port: u16,
    reached: Arc<Mutex<Vec<IpAddr>>>,
}

impl Sink {
    fn start() -> Sink {
        Self::bind("[::]:0")
    }

    fn bind(addr: &str) -> Sink {
        let listener = TcpListener::bind(addr).expect("bind sink");
        let port = listener.local_addr().unwrap().port();
        let reached = Arc::new(Mutex::new(Vec::new()));
        let seen = reached.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let local = stream.local_addr().unwrap().ip().to_canonical();
                seen.lock().unwrap().push(local);
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nsink",
                    );
                });
            }
        });
        Sink { port, reached }
    }

    /// The addresses connections reached so far.
    fn reached(&self) -> Vec<IpAddr> {
        self.reached.lock().unwrap().clone()
    }
}

/// A UDP echo on `[::]` (dual stack) that keeps every payload it got.
fn udp_sink() -> (u16, Arc<Mutex<Vec<Vec<u8>>>>) {
    let socket = UdpSocket::bind("[::]:0").expect("bind udp sink");
    let port = socket.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let log = got.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            log.lock().unwrap().push(buf[..n].to_vec());
            let _ = socket.send_to(&buf[..n], from);
        }
    });
    (port, got)
}

/// A CONNECT through `proxy` that must be refused with `header`, and the
/// audit decision it produced.
fn refused_connect(proxy: &mut Proxy, target: &str, header: &str) -> Value {
    let (response, _) = proxy_connect(&proxy.http, target);
    assert_eq!(response.status, 403, "CONNECT {target}: {response:?}");
    assert_eq!(
        response.header("x-proxy-error").as_deref(),
        Some(header),
        "CONNECT {target}"
    );
    let decision = proxy.next_decision();
    assert_eq!(decision["decision"], "deny", "CONNECT {target}: {decision}");
    decision
}

/// A CONNECT through `proxy` that is allowed and reaches the sink.
fn tunnel_reaches_sink(proxy: &mut Proxy, target: &str) {
    let (response, mut tunnel) = proxy_connect(&proxy.http, target);
    assert_eq!(response.status, 200, "CONNECT {target}: {response:?}");
    tunnel
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let _ = tunnel.read_to_string(&mut text);
    assert!(text.ends_with("sink"), "CONNECT {target}: {text:?}");
    assert_eq!(
        proxy.next_decision()["decision"],
        "allow",
        "CONNECT {target}"
    );
}

/// SOCKS5 greeting and a CONNECT with the raw address `atyp_address`
/// (ATYP and address bytes); returns the reply code.
fn socks_connect_raw(proxy: &str, atyp_address: &[u8], port: u16) -> u8 {
    let mut stream = TcpStream::connect(proxy).expect("connect socks");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.write_all(&[5, 1, 0]).unwrap();
    let mut choice = [0u8; 2];
    stream.read_exact(&mut choice).unwrap();
    let mut request = vec![5, 1, 0];
    request.extend_from_slice(atyp_address);
    request.extend_from_slice(&port.to_be_bytes());
    stream.write_all(&request).unwrap();
    let mut reply = [0u8; 4];
    stream.read_exact(&mut reply).unwrap();
    reply[1]
}

/// SOCKS5 `ATYP_NAME` address bytes for `name`.
fn socks_name(name: &str) -> Vec<u8> {
    let mut out = vec![3, u8::try_from(name.len()).unwrap()];
    out.extend_from_slice(name.as_bytes());
    out
}

/// Opens a UDP association on `proxy`; returns the control connection (the
/// association lives as long as it does) and the relay address.
fn udp_associate(proxy: &str) -> (TcpStream, SocketAddr) {
    let mut control = TcpStream::connect(proxy).unwrap();
    control.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    control.write_all(&[5, 1, 0]).unwrap();
    let mut choice = [0u8; 2];
    control.read_exact(&mut choice).unwrap();
    control.write_all(&[5, 3, 0, 1, 0, 0, 0, 0, 0, 0]).unwrap();
    let mut reply = [0u8; 10];
    control.read_exact(&mut reply).unwrap();
    assert_eq!(reply[1], 0, "UDP ASSOCIATE refused");
    let relay = SocketAddr::from((
        [reply[4], reply[5], reply[6], reply[7]],
        u16::from_be_bytes([reply[8], reply[9]]),
    ));
    (control, relay)
}

/// A SOCKS5 UDP datagram to `atyp_address:port`.
fn datagram(atyp_address: &[u8], port: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0];
    out.extend_from_slice(atyp_address);
    out.extend_from_slice(&port.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Sends `bad` then `good` datagrams through the association and waits
/// for the echo of `good`; the sink must never have seen `bad`'s payload
/// (the association relays in order, so it would have arrived first).
fn udp_refused_before_allowed(
    socks: &str,
    bad: &[u8],
    good: &[u8],
    port: u16,
    sink: &Mutex<Vec<Vec<u8>>>,
) {
    let (_control, relay) = udp_associate(socks);
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    client
        .send_to(&datagram(bad, port, b"smuggled"), relay)
        .unwrap();
    client
        .send_to(&datagram(good, port, b"allowed"), relay)
        .unwrap();
    let mut buf = [0u8; 512];
    let (n, _) = client
        .recv_from(&mut buf)
        .expect("echo of the allowed datagram");
    assert!(buf[..n].ends_with(b"allowed"), "{:?}", &buf[..n]);
    assert_eq!(*sink.lock().unwrap(), vec![b"allowed".to_vec()]);
}

const WILDCARD_ADDRESSES: &[&str] = &["100.128.0.2", "2001:db8::1"];

#[test]
fn a_wildcard_entry_admits_no_address_spelled_into_a_name() {
    in_netns_with(WILDCARD_ADDRESSES, || {
        let sink = Sink::start();
        let (udp_port, udp_got) = udp_sink();
        let mut proxy = Proxy::start(&[
            "--allow",
            "*.allowed.test",
            "--resolve",
            "ok.allowed.test=100.128.0.2",
            "--socks5-listen",
            "127.0.0.1:0",
            "--audit-log",
            "-",
        ]);
        let socks = proxy.socks.clone().unwrap();
        let port = sink.port;
        for target in [
            format!("[100.128.0.2%25.allowed.test]:{port}"),
            format!("[2001:db8::1%25.allowed.test]:{port}"),
            format!("[100.128.0.2%.allowed.test]:{port}"),
            format!("[::ffff:100.128.0.2%25.allowed.test]:{port}"),
        ] {
            let decision = refused_connect(&mut proxy, &target, "blocked-by-allowlist");
            assert_eq!(decision["reason"], "not_allowed", "{target}");
            // The refused text is logged as it came, never as an address.
            let (host, _) = target.rsplit_once(':').unwrap();
            assert_eq!(decision["host"], host, "{target}");
        }
        let get = proxy_get(&proxy.http, "[100.128.0.2%25.allowed.test]", port, "GET");
        assert_eq!(get.status, 403, "{get:?}");
        assert_eq!(get.json()["reason"], "not_allowed");
        assert_eq!(proxy.next_decision()["reason"], "not_allowed");
        for name in [
            "100.128.0.2%.allowed.test",
            "100.128.0.2%25.allowed.test",
            "[100.128.0.2%25.allowed.test]",
            "100.128.0.2\0.allowed.test",
        ] {
            let (code, _) = socks_connect(&socks, name, port);
            assert_eq!(code, 2, "SOCKS5 {name:?}");
            let decision = proxy.next_decision();
            assert_eq!(decision["reason"], "not_allowed", "{name:?}");
        }
        udp_refused_before_allowed(
            &socks,
            &socks_name("100.128.0.2%.allowed.test"),
            &socks_name("ok.allowed.test"),
            udp_port,
            &udp_got,
        );
        let udp_denied = proxy.next_decision();
        assert_eq!(
            (
                udp_denied["protocol"].as_str(),
                udp_denied["reason"].as_str()
            ),
            (Some("socks5_udp"), Some("not_allowed"))
        );
        assert_eq!(proxy.next_decision()["decision"], "allow");
        // The same address by an allowed name is reachable: the refusals
        // above are the policy's, not the namespace's.
        assert!(sink.reached().is_empty(), "{:?}", sink.reached());
        tunnel_reaches_sink(&mut proxy, &format!("ok.allowed.test:{port}"));
        assert_eq!(
            sink.reached(),
            vec!["100.128.0.2".parse::<IpAddr>().unwrap()]
        );
    });
}

#[test]
fn with_local_binding_a_wildcard_entry_reaches_no_host_port_through_a_name() {
    let origin = Origin::start();
    let mut proxy = Proxy::start(&[
        "--allow",
        "*.allowed.test",
        "--allow-local-binding",
        "--socks5-listen",
        "127.0.0.1:0",
        "--audit-log",
        "-",
    ]);
    let port = origin.port();
    for target in [
        format!("[127.0.0.1%25.allowed.test]:{port}"),
        format!("[::1%25.allowed.test]:{port}"),
        format!("[0x7f.1%25.allowed.test]:{port}"),
    ] {
        refused_connect(&mut proxy, &target, "blocked-by-allowlist");
    }
    let get = proxy_get(&proxy.http, "[127.0.0.1%25.allowed.test]", port, "GET");
    assert_eq!(get.status, 403, "{get:?}");
    let socks = proxy.socks.clone().unwrap();
    for name in ["127.0.0.1%.allowed.test", "2130706433%.allowed.test"] {
        assert_eq!(socks_connect(&socks, name, port).0, 2, "{name}");
    }
    assert_eq!(origin.connection_count(), 0);
}

/// Neighbours of the wildcard bypass: text around an allowed name that
/// a parser could read as another host. None may pass as the allowed name,
/// and none may reach anything.
#[test]
fn text_around_an_allowed_name_is_not_the_allowed_name() {
    let origin = Origin::start();
    let resolve = "ok.allowed.test=127.0.0.1".to_owned();
    let mut proxy = Proxy::start(&[
        "--allow",
        "**.allowed.test",
        "--allow-local-binding",
        "--resolve",
        &resolve,
        "--socks5-listen",
        "127.0.0.1:0",
        "--audit-log",
        "-",
    ]);
    let port = origin.port();
    let socks = proxy.socks.clone().unwrap();
    for name in [
        "evil.test@ok.allowed.test",
        "ok.allowed.test@127.0.0.1",
        "ok%2eallowed.test",
        "ok.allowed.test%00",
        "ok.allowed.test\\@evil.test",
        "ok.allowed.test ",
        " ok.allowed.test",
        "ok..allowed.test",
        "ok.allowed.test..",
        ".ok.allowed.test",
        "ok.allowed.test.127.0.0.1",
        "ok.allowed.test.2130706433",
        "ok.allowed.test.0x7f000001",
        "ok.allowed.test.\u{3002}",
        "ok\u{ff0e}allowed.test",
        "ok.allowed.tes\u{0074}\u{0301}",
        "-ok.allowed.test",
    ] {
        assert_eq!(socks_connect(&socks, name, port).0, 2, "SOCKS5 {name:?}");
        let decision = proxy.next_decision();
        assert_eq!(decision["decision"], "deny", "{name:?}: {decision}");
    }
    for target in [
        format!("evil.test@ok.allowed.test:{port}"),
        format!("ok.allowed.test@127.0.0.1:{port}"),
        format!("ok%2eallowed.test:{port}"),
        format!("ok.allowed.test.2130706433:{port}"),
    ] {
        let (response, _) = proxy_connect(&proxy.http, &target);
        assert!(
            response.status == 403 || response.status == 400,
            "CONNECT {target}: {response:?}"
        );
        if response.status == 403 {
            assert_eq!(proxy.next_decision()["decision"], "deny", "{target}");
        }
    }
    assert_eq!(origin.connection_count(), 0);
    // Upper case and one trailing dot are the same name, logged canonically.
    let (response, _) = proxy_connect(&proxy.http, &format!("OK.Allowed.TEST.:{port}"));
    assert_eq!(response.status, 200, "{response:?}");
    let decision = proxy.next_decision();
    assert_eq!(
        (decision["decision"].as_str(), decision["host"].as_str()),
        (Some("allow"), Some("ok.allowed.test"))
    );
}

const DENIED_ADDRESSES: &[&str] = &["100.128.0.2", "100.128.0.3", "2001:2::1", "2001:2::2"];

#[test]
fn an_ip_deny_entry_covers_every_spelling_of_its_address() {
    in_netns_with(DENIED_ADDRESSES, || {
        let sink = Sink::start();
        let (udp_port, udp_got) = udp_sink();
        let mut proxy = Proxy::start(&[
            "--allow",
            "*",
            "--deny",
            "100.128.0.2",
            "--deny",
            "[2001:2::1]",
            "--allow-local-binding",
            "--socks5-listen",
            "127.0.0.1:0",
            "--audit-log",
            "-",
        ]);
        let port = sink.port;
        for host in [
            "1686110210",
            "0x64800002",
            "0X64800002",
            "100.128.2",
            "100.8388610",
            "0144.0200.0.2",
            "0x64.0x80.0.2",
            "100.128.0.2.",
            "[::ffff:100.128.0.2]",
            "[::ffff:6480:2]",
            "[::FFFF:6480:0002]",
            "[0:0:0:0:0:ffff:100.128.0.2]",
            "[::100.128.0.2]",
            "[64:ff9b::6480:2]",
            "[2002:6480:2::1]",
            "[2001:0002::0001]",
            "[2001:2:0::1]",
            "[2001:2:0:0:0:0:0:1]",
        ] {
            let decision =
                refused_connect(&mut proxy, &format!("{host}:{port}"), "blocked-by-denylist");
            assert_eq!(decision["reason"], "denied", "{host}");
        }
        // Zone ids are refused outright: the proxy dials no interface.
        for host in ["[100.128.0.2%25x]", "[2001:2:0::1%25x]", "[2001:2::1%25lo]"] {
            refused_connect(
                &mut proxy,
                &format!("{host}:{port}"),
                "blocked-by-allowlist",
            );
        }
        for host in ["1686110210", "[::ffff:6480:2]", "[2001:0002::0001]"] {
            let get = proxy_get(&proxy.http, host, port, "GET");
            assert_eq!(get.status, 403, "GET {host}: {get:?}");
            assert_eq!(get.json()["reason"], "denied", "GET {host}");
            assert_eq!(proxy.next_decision()["reason"], "denied");
        }
        let socks = proxy.socks.clone().unwrap();
        let mut mapped = vec![4];
        mapped.extend_from_slice(
            &"::ffff:100.128.0.2"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        for address in [
            socks_name("1686110210"),
            socks_name("0x64800002"),
            socks_name("::ffff:100.128.0.2"),
            socks_name("[2001:0002::0001]"),
            mapped,
        ] {
            assert_eq!(socks_connect_raw(&socks, &address, port), 2, "{address:?}");
            assert_eq!(proxy.next_decision()["reason"], "denied", "{address:?}");
        }
        udp_refused_before_allowed(
            &socks,
            &socks_name("0144.0200.0.2"),
            &socks_name("100.128.0.3"),
            udp_port,
            &udp_got,
        );
        assert_eq!(proxy.next_decision()["reason"], "denied");
        assert_eq!(proxy.next_decision()["decision"], "allow");
        assert!(sink.reached().is_empty(), "{:?}", sink.reached());
        // Neighbouring addresses, oddly spelled, are reached: the entries
        // deny one address each, and the canonical one is what is dialed.
        tunnel_reaches_sink(&mut proxy, &format!("0x64800003:{port}"));
        tunnel_reaches_sink(&mut proxy, &format!("[2001:0002::0002]:{port}"));
        assert_eq!(
            sink.reached(),
            vec![
                "100.128.0.3".parse::<IpAddr>().unwrap(),
                "2001:2::2".parse().unwrap()
            ]
        );
    });
}

const SPECIAL_ADDRESSES: &[&str] = &[
    "2001:db8::1",
    "3fff::1",
    "2002:a00:1::1",
    "64:ff9b::a00:1",
    "64:ff9b:1::1",
    "fec0::1",
    "100::1",
    "2001:2::1",
    "2001::1",
    "2606:4700::1",
];

#[test]
fn ipv6_special_purpose_ranges_are_local_addresses() {
    in_netns_with(SPECIAL_ADDRESSES, || {
        let sink = Sink::start();
        let mut proxy = Proxy::start(&["--allow", "*", "--audit-log", "-"]);
        for address in SPECIAL_ADDRESSES.iter().filter(|a| **a != "2606:4700::1") {
            let decision = refused_connect(
                &mut proxy,
                &format!("[{address}]:{}", sink.port),
                "blocked-by-allowlist",
            );
            assert_eq!(decision["reason"], "not_allowed_local", "{address}");
            assert_eq!(decision["host"], *address);
        }
        assert!(sink.reached().is_empty(), "{:?}", sink.reached());
        // A global address in the same namespace is reached.
        tunnel_reaches_sink(&mut proxy, &format!("[2606:4700::1]:{}", sink.port));
    });
}

#[test]
fn a_port_above_65535_is_refused_not_read_as_the_default() {
    in_netns_with(&[], || {
        let default_port = Sink::bind("127.0.0.1:443");
        let mut proxy = Proxy::start(&[
            "--allow",
            "allowed.test",
            "--allow-local-binding",
            "--resolve",
            "allowed.test=127.0.0.1",
            "--audit-log",
            "-",
        ]);
        for port in [
            "73616", "65536", "131515", "0", "-1", "+443", "44 3", "443x",
        ] {
            let target = format!("allowed.test:{port}");
            let (response, _) = proxy_connect(&proxy.http, &target);
            assert_eq!(response.status, 400, "CONNECT {target}: {response:?}");
            let get = roundtrip(
                &proxy.http,
                &format!(
                    "GET http://{target}/ HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"
                ),
            );
            assert_eq!(get.status, 400, "GET {target}: {get:?}");
        }
        assert!(default_port.reached().is_empty());
        tunnel_reaches_sink(&mut proxy, "allowed.test:443");
        assert_eq!(default_port.reached().len(), 1);
    });
}

#[test]
fn a_request_with_two_host_headers_is_refused() {
    let origin = Origin::start();
    let proxy = Proxy::start(&["--allow", "127.0.0.1"]);
    let port = origin.port();
    for (first, second) in [
        (format!("127.0.0.1:{port}"), "evil.test".to_owned()),
        (format!("127.0.0.1:{port}"), format!("127.0.0.1:{port}")),
        ("evil.test".to_owned(), format!("127.0.0.1:{port}")),
    ] {
        let response = roundtrip(
            &proxy.http,
            &format!(
                "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: {first}\r\nHost: {second}\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(
            (response.status, response.body.as_str()),
            (400, "multiple Host headers"),
            "{first} {second}"
        );
    }
    // A Host header spelling the same address differently is the same host.
    let same = roundtrip(
        &proxy.http,
        &format!("GET http://127.0.0.1:{port}/s HTTP/1.1\r\nHost: 0x7f000001:{port}\r\nConnection: close\r\n\r\n"),
    );
    assert_eq!(same.status, 200, "{same:?}");
    let heads = origin.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    // Exactly one Host header reaches the origin, naming the destination
    // canonically.
    let hosts: Vec<&str> = heads[0]
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| name.eq_ignore_ascii_case("host"))
        .map(|(_, value)| value.trim())
        .collect();
    assert_eq!(hosts, vec![format!("127.0.0.1:{port}")], "{heads:?}");
}

/// Which launcher a sandbox test runs under.
fn launcher_usable(launcher: crate::common::redteam::Launcher) -> bool {
    match launcher {
        crate::common::redteam::Launcher::System => {
            crate::common::bwrap::have_system_bwrap("managed routing with system bwrap")
        }
        _ => true,
    }
}

/// The attacks from inside a sandbox: CONNECT and SOCKS5 to the proxy the
/// command is given, and raw DNS questions to the stub. One line per
/// attempt: `key=value`.
const SANDBOX_PROBE: &str = r#"
import os, socket, struct
def proxy(var):
    host, port = os.environ[var].rsplit("/", 1)[-1].rsplit(":", 1)
    return host, int(port)
def connect(target):
    s = socket.create_connection(proxy("HTTP_PROXY"), timeout=20)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    return s.recv(64).split(b" ")[1].decode()
def socks(name, port):
    s = socket.create_connection(proxy("ALL_PROXY"), timeout=20)
    s.sendall(b"\x05\x01\x00"); s.recv(2)
    s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack(">H", port))
    return s.recv(10)[1]
def dns(labels):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in labels:
        q += bytes([len(label)]) + label
    q += b"\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(20)
    s.sendto(q, ("127.0.0.1", 53))
    return s.recv(512)[3] & 0x0f
port = int(os.environ["SINK_PORT"])
print("connect_zone=" + connect("[127.0.0.1%%25.wild.test]:%d" % port))
print("connect_ok=" + connect("ok.wild.test:%d" % port))
print("socks_zone=%d" % socks(b"127.0.0.1%.wild.test", port))
print("socks_digits=%d" % socks(b"2130706433", port))
print("dns_long=%d" % dns([b"a" * 63] * 4 + [b"wild", b"test"]))
print("dns_percent=%d" % dns([b"127.0.0.1%", b"wild", b"test"]))
print("dns_dotted_label=%d" % dns([b"x.y", b"wild", b"test"]))
print("dns_ok=%d" % dns([b"ok", b"wild", b"test"]))
"#;

fn sandboxed_wildcard_bypass(launcher: crate::common::redteam::Launcher) {
    crate::common::sandbox::require_sandbox!();
    if !launcher_usable(launcher) || !crate::common::host::python3() {
        return;
    }
    let origin = Origin::start();
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let mut cmd = Command::new(crate::common::redteam::BIN);
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    launcher.apply(&mut cmd);
    let out = cmd
        .arg("sandbox")
        .arg("-C")
        .arg(dir.path())
        .args([
            "--allow-domain",
            "*.wild.test",
            "--allow-local-binding",
            "--resolve",
            "ok.wild.test=127.0.0.1",
            "--audit-log",
            audit.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            SANDBOX_PROBE,
        ])
        .env("SINK_PORT", origin.port().to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run codexbox sandbox");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{launcher:?}: {text}\n{err}");
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{launcher:?}: no {key} in {text}\n{err}"))
            .to_owned()
    };
    assert_eq!(value("connect_zone="), "403", "{launcher:?}");
    assert_eq!(value("connect_ok="), "200", "{launcher:?}");
    assert_eq!(value("socks_zone="), "2", "{launcher:?}");
    assert_eq!(value("socks_digits="), "2", "{launcher:?}");
    // NXDOMAIN (3), never SERVFAIL (2) or FORMERR (1).
    for key in ["dns_long=", "dns_percent=", "dns_dotted_label="] {
        assert_eq!(value(key), "3", "{launcher:?} {key}");
    }
    assert_eq!(value("dns_ok="), "0", "{launcher:?}");
    // Only the allowed CONNECT reached the host's port.
    assert_eq!(origin.connection_count(), 1, "{launcher:?}");
    let audit = std::fs::read_to_string(&audit).unwrap();
    assert!(
        audit.contains(
            r#""decision":"deny","reason":"not_allowed","host":"[127.0.0.1%25.wild.test]""#
        ),
        "{launcher:?}: {audit}"
    );
    assert!(
        !audit.contains(r#""decision":"allow","reason":"allow","host":"127.0.0.1""#),
        "{launcher:?}: {audit}"
    );
}

#[test]
fn system_bwrap_sandbox_admits_no_address_spelled_into_an_allowed_name() {
    sandboxed_wildcard_bypass(crate::common::redteam::Launcher::System);
}

#[test]
fn builtin_bwrap_sandbox_admits_no_address_spelled_into_an_allowed_name() {
    sandboxed_wildcard_bypass(crate::common::redteam::Launcher::Builtin);
}

#[tokio::test]
async fn an_exec_server_network_proxy_admits_no_address_spelled_into_an_allowed_name() {
    use crate::common::client::{unb64, Raw, Server};
    if !crate::common::host::python3() {
        return;
    }
    let origin = Origin::start();
    let server = Server::start_listen("ws://127.0.0.1:0", &[], &[("NO_PROXY", "*")]);
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    let network_proxy = json!({
        "proxy": {"enabled": true, "enableSocks5": true, "enableSocks5Udp": true,
            "allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false,
            "mode": "full", "domains": {"*.wild.test": "allow"}, "unixSockets": null,
            "allowLocalBinding": true},
        "auditMetadata": {}, "environmentId": "remote", "executionId": "execution-1"
    });
    let probe = "import os, socket\n\
host, port = os.environ['HTTP_PROXY'].rsplit('/', 1)[-1].rsplit(':', 1)\n\
s = socket.create_connection((host, int(port)), timeout=20)\n\
t = '[127.0.0.1%%25.wild.test]:%s' % os.environ['SINK_PORT']\n\
s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (t, t)).encode())\n\
print('status=' + s.recv(64).split(b' ')[1].decode())\n";
    raw.call(
        "process/start",
        json!({"processId": "p1", "argv": ["python3", "-c", probe], "cwd": "/",
            "env": {"PATH": std::env::var("PATH").unwrap_or_default(),
                "SINK_PORT": origin.port().to_string()},
            "tty": false, "networkProxy": network_proxy}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    let mut after = 0;
    let result = loop {
        assert!(Instant::now() < deadline, "process did not close");
        let result = raw
            .call(
                "process/read",
                json!({"processId": "p1", "afterSeq": after, "waitMs": 20000}),
            )
            .await;
        for chunk in result["chunks"].as_array().unwrap() {
            out.extend(unb64(chunk["chunk"].as_str().unwrap()));
        }
        if result["closed"] == true {
            break result;
        }
        after = result["nextSeq"].as_u64().unwrap() - 1;
    };
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("status=403"), "{out}");
    assert_eq!(origin.connection_count(), 0);
    assert_eq!(
        result["networkDenials"],
        json!([{"host": "[127.0.0.1%25.wild.test]", "port": origin.port(),
            "protocol": "https_connect", "reason": "not_allowed"}])
    );
}
