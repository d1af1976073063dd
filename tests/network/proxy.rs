//! `codexbox proxy` policy, end to end: each pattern form, deny over allow,
//! port scoping, limited mode, local/private protection (including a name
//! that re-resolves to 127.0.0.1), IP-literal allows, the DNS-failure
//! reason, exact 403 bodies and headers, SOCKS5 (TCP and UDP), upstream
//! chaining and the audit log. Every origin is a server this file starts on
//! 127.0.0.1; names reach it through `--resolve` or a scripted DNS server
//! in a network namespace of the test's own.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, UdpSocket};
use std::process::Command;

use crate::common::net::*;

fn resolve(name: &str) -> String {
    format!("{name}=127.0.0.1")
}

#[test]
fn exact_subdomain_and_apex_patterns_cover_what_they_say() {
    let origin = Origin::start();
    let names = [
        "a.test", "x.a.test", "b.test", "y.b.test", "c.test", "y.c.test", "cc.test",
    ];
    let mut args = vec![
        "--allow",
        "a.test",
        "--allow",
        "*.b.test",
        "--allow",
        "**.c.test",
        "--allow-local-binding",
    ];
    let resolves: Vec<String> = names.iter().map(|n| resolve(n)).collect();
    for r in &resolves {
        args.extend(["--resolve", r.as_str()]);
    }
    let proxy = Proxy::start(&args);
    let expect = [
        ("a.test", 200),
        ("x.a.test", 403),
        ("b.test", 403),
        ("y.b.test", 200),
        ("c.test", 200),
        ("y.c.test", 200),
        ("cc.test", 403),
    ];
    for (host, status) in expect {
        let response = proxy_get(&proxy.http, host, origin.port(), "GET");
        assert_eq!(response.status, status, "{host}: {response:?}");
        if status == 200 {
            assert_eq!(response.body, format!("origin {} GET /p", origin.port()));
        } else {
            assert_eq!(response.json()["reason"], "not_allowed", "{host}");
        }
    }
}

#[test]
fn global_wildcard_allows_every_name_and_is_refused_as_a_deny_entry() {
    let origin = Origin::start();
    let proxy = Proxy::start(&[
        "--allow",
        "*",
        "--allow-local-binding",
        "--resolve",
        "anything.test=127.0.0.1",
    ]);
    assert_eq!(
        proxy_get(&proxy.http, "anything.test", origin.port(), "GET").status,
        200
    );

    let out = Command::new(BIN)
        .args(["proxy", "--deny", "*"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "codexbox proxy: invalid value '*' for '--deny <PATTERN>': a deny pattern cannot cover every host; name hosts or scoped wildcards like *.example.com or **.example.com (see --help)"
    );
    let out = Command::new(BIN)
        .args(["proxy", "--allow", "["])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid glob pattern: ["));
}

#[test]
fn deny_wins_over_allow() {
    let origin = Origin::start();
    let proxy = Proxy::start(&[
        "--allow",
        "**.corp.test",
        "--deny",
        "secret.corp.test",
        "--allow-local-binding",
        "--resolve",
        "secret.corp.test=127.0.0.1",
        "--resolve",
        "www.corp.test=127.0.0.1",
    ]);
    assert_eq!(
        proxy_get(&proxy.http, "www.corp.test", origin.port(), "GET").status,
        200
    );
    let denied = proxy_get(&proxy.http, "secret.corp.test", origin.port(), "GET");
    assert_eq!(denied.status, 403);
    assert_eq!(
        denied.header("x-proxy-error").as_deref(),
        Some("blocked-by-denylist")
    );
    let (connect, _) = proxy_connect(&proxy.http, &format!("secret.corp.test:{}", origin.port()));
    assert_eq!(connect.status, 403);
    assert_eq!(connect.body, "Domain denied by the sandbox policy.");
}

#[test]
fn a_port_scoped_entry_allows_that_port_only() {
    let (open, other) = (Origin::start(), Origin::start());
    let entry = format!("svc.test:{}", open.port());
    let proxy = Proxy::start(&[
        "--allow",
        &entry,
        "--allow-local-binding",
        "--resolve",
        "svc.test=127.0.0.1",
    ]);
    assert_eq!(
        proxy_get(&proxy.http, "svc.test", open.port(), "GET").status,
        200
    );
    let refused = proxy_get(&proxy.http, "svc.test", other.port(), "GET");
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["reason"], "not_allowed");
    assert_eq!(other.connection_count(), 0);
}

#[test]
fn limited_mode_allows_get_head_options_and_refuses_the_rest() {
    let origin = Origin::start();
    let proxy = Proxy::start(&[
        "--allow",
        "ro.test",
        "--mode",
        "limited",
        "--allow-local-binding",
        "--resolve",
        "ro.test=127.0.0.1",
    ]);
    for method in ["GET", "HEAD", "OPTIONS"] {
        assert_eq!(
            proxy_get(&proxy.http, "ro.test", origin.port(), method).status,
            200,
            "{method}"
        );
    }
    for method in ["POST", "PUT", "DELETE"] {
        let refused = proxy_get(&proxy.http, "ro.test", origin.port(), method);
        assert_eq!(refused.status, 403, "{method}");
        assert_eq!(
            refused.header("x-proxy-error").as_deref(),
            Some("blocked-by-method-policy")
        );
        assert_eq!(refused.json()["reason"], "method_not_allowed");
        assert_eq!(refused.json()["source"], "mode_guard");
    }
    let (connect, _) = proxy_connect(&proxy.http, &format!("ro.test:{}", origin.port()));
    assert_eq!(connect.status, 403);
    assert_eq!(
        connect.header("x-proxy-error").as_deref(),
        Some("blocked-by-mitm-required")
    );
    assert_eq!(connect.body, "MITM required for limited HTTPS.");
    // A denied host reports the host reason, not the method.
    let other = proxy_get(&proxy.http, "rw.test", origin.port(), "POST");
    assert_eq!(other.json()["reason"], "not_allowed");
    assert_eq!(origin.heads.lock().unwrap().len(), 3);
}

#[test]
fn names_resolving_to_loopback_need_allow_local_binding() {
    let origin = Origin::start();
    let strict = Proxy::start(&["--allow", "lo.test", "--resolve", "lo.test=127.0.0.1"]);
    let refused = proxy_get(&strict.http, "lo.test", origin.port(), "GET");
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["reason"], "not_allowed_local");
    assert_eq!(
        refused.json()["message"],
        "Sandbox policy blocks local/private network addresses."
    );
    let (connect, _) = proxy_connect(&strict.http, &format!("lo.test:{}", origin.port()));
    assert_eq!(connect.status, 403);
    // Wildcards never count as an explicit local allow.
    let wildcard = Proxy::start(&["--allow", "*"]);
    let literal = proxy_get(&wildcard.http, "127.0.0.1", origin.port(), "GET");
    assert_eq!(literal.json()["reason"], "not_allowed_local");
    let localhost = proxy_get(&wildcard.http, "localhost", origin.port(), "GET");
    assert_eq!(localhost.json()["reason"], "not_allowed_local");
    assert_eq!(origin.connection_count(), 0);

    let open = Proxy::start(&[
        "--allow",
        "lo.test",
        "--allow-local-binding",
        "--resolve",
        "lo.test=127.0.0.1",
    ]);
    assert_eq!(
        proxy_get(&open.http, "lo.test", origin.port(), "GET").status,
        200
    );
}

#[test]
fn an_allowed_ip_literal_or_localhost_is_reached_without_local_binding() {
    let origin = Origin::start();
    let proxy = Proxy::start(&["--allow", "127.0.0.1", "--allow", "localhost"]);
    assert_eq!(
        proxy_get(&proxy.http, "127.0.0.1", origin.port(), "GET").status,
        200
    );
    let (connect, mut tunnel) = proxy_connect(&proxy.http, &format!("127.0.0.1:{}", origin.port()));
    assert_eq!(connect.status, 200);
    write!(
        tunnel,
        "GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    let _ = tunnel.read_to_string(&mut text);
    assert!(
        text.ends_with(&format!("origin {} GET /t", origin.port())),
        "{text:?}"
    );
    let localhost = proxy_get(&proxy.http, "localhost", origin.port(), "GET");
    assert_eq!(localhost.status, 200, "{localhost:?}");
    let other = proxy_get(&proxy.http, "127.0.0.2", origin.port(), "GET");
    assert_eq!(other.json()["reason"], "not_allowed_local");
}

#[test]
fn denials_carry_the_reference_bodies_and_headers() {
    let proxy = Proxy::start(&["--allow", "ok.test"]);
    let plain = proxy_get(&proxy.http, "evil.test", 80, "GET");
    assert_eq!(plain.status, 403);
    assert_eq!(
        plain.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(
        plain.header("x-proxy-error").as_deref(),
        Some("blocked-by-allowlist")
    );
    assert_eq!(
        plain.body,
        r#"{"status":"blocked","host":"evil.test","reason":"not_allowed","decision":"deny","source":"baseline_policy","protocol":"http","port":80,"message":"Domain not in allowlist."}"#
    );
    let (connect, _) = proxy_connect(&proxy.http, "evil.test:443");
    assert_eq!(connect.status, 403);
    assert_eq!(
        connect.header("content-type").as_deref(),
        Some("text/plain")
    );
    assert_eq!(
        connect.header("x-proxy-error").as_deref(),
        Some("blocked-by-allowlist")
    );
    assert_eq!(connect.body, "Domain not in allowlist.");

    let mismatch = roundtrip(
        &proxy.http,
        "GET http://ok.test/ HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        (mismatch.status, mismatch.body.as_str()),
        (400, "Host header does not match request target")
    );
    let origin_form = roundtrip(
        &proxy.http,
        "GET / HTTP/1.1\r\nHost: ok.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        (origin_form.status, origin_form.body.as_str()),
        (400, "missing host")
    );
    let unix = roundtrip(
        &proxy.http,
        "GET http://ok.test/ HTTP/1.1\r\nx-unix-socket: /run/docker.sock\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        (unix.status, unix.body.as_str()),
        (501, "unix sockets unsupported")
    );
}

#[test]
fn connect_tunnels_bytes_both_ways_including_server_first_protocols() {
    let echo = tcp_echo(b"SSH-2.0-test\r\n");
    let entry = format!("ssh.test:{}", echo.port());
    let proxy = Proxy::start(&[
        "--allow",
        &entry,
        "--allow-local-binding",
        "--resolve",
        "ssh.test=127.0.0.1",
    ]);
    let (response, mut tunnel) = proxy_connect(&proxy.http, &entry);
    assert_eq!(response.status, 200);
    let mut banner = [0u8; 14];
    tunnel.read_exact(&mut banner).unwrap();
    assert_eq!(&banner, b"SSH-2.0-test\r\n");
    tunnel.write_all(b"ping").unwrap();
    let mut echoed = [0u8; 4];
    tunnel.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"ping");
}

#[test]
fn socks5_connect_follows_the_policy_and_answers_rep_2_when_denied() {
    let origin = Origin::start();
    let proxy = Proxy::start(&[
        "--socks5-listen",
        "127.0.0.1:0",
        "--allow",
        "s.test",
        "--allow-local-binding",
        "--resolve",
        "s.test=127.0.0.1",
    ]);
    let socks = proxy.socks.clone().unwrap();
    let (code, mut stream) = socks_connect(&socks, "s.test", origin.port());
    assert_eq!(code, 0);
    stream
        .write_all(b"GET /s HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    assert!(
        text.ends_with(&format!("origin {} GET /s", origin.port())),
        "{text:?}"
    );
    let (code, _) = socks_connect(&socks, "evil.test", origin.port());
    assert_eq!(code, 2, "connection not allowed by ruleset");

    let limited = Proxy::start(&[
        "--socks5-listen",
        "127.0.0.1:0",
        "--allow",
        "*",
        "--mode",
        "limited",
    ]);
    let (code, _) = socks_connect(limited.socks.as_deref().unwrap(), "x.test", 80);
    assert_eq!(code, 2);
}

#[test]
fn socks5_udp_associate_relays_to_allowed_addresses_only() {
    let echo = udp_echo();
    let entry = format!("127.0.0.1:{}", echo.port());
    let proxy = Proxy::start(&[
        "--socks5-listen",
        "127.0.0.1:0",
        "--allow",
        &entry,
        "--audit-log",
        "-",
    ]);
    let mut control = std::net::TcpStream::connect(proxy.socks.as_deref().unwrap()).unwrap();
    control.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    control.write_all(&[5, 1, 0]).unwrap();
    let mut choice = [0u8; 2];
    control.read_exact(&mut choice).unwrap();
    control.write_all(&[5, 3, 0, 1, 0, 0, 0, 0, 0, 0]).unwrap();
    let mut reply = [0u8; 10];
    control.read_exact(&mut reply).unwrap();
    assert_eq!(reply[1], 0);
    let relay = std::net::SocketAddr::from((
        Ipv4Addr::new(reply[4], reply[5], reply[6], reply[7]),
        u16::from_be_bytes([reply[8], reply[9]]),
    ));
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let datagram = |port: u16, payload: &[u8]| {
        let mut d = vec![0, 0, 0, 1, 127, 0, 0, 1];
        d.extend_from_slice(&port.to_be_bytes());
        d.extend_from_slice(payload);
        d
    };
    // A denied destination first: dropped, and logged.
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .send_to(&datagram(closed.local_addr().unwrap().port(), b"no"), relay)
        .unwrap();
    client
        .send_to(&datagram(echo.port(), b"hello"), relay)
        .unwrap();
    let mut buf = [0u8; 64];
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], &datagram(echo.port(), b"hello")[..]);
    let mut proxy = proxy;
    let first = proxy.next_decision();
    assert_eq!(
        (first["decision"].as_str(), first["protocol"].as_str()),
        (Some("deny"), Some("socks5_udp"))
    );
    assert_eq!(proxy.next_decision()["decision"], "allow");
}

#[test]
fn requests_chain_through_an_upstream_proxy() {
    let origin = Origin::start();
    let mut upstream = Proxy::start(&["--allow", "127.0.0.1", "--audit-log", "-"]);
    let upstream_url = upstream.url();
    let mut front = Proxy::start_with(
        Command::new(BIN),
        &["--allow", "127.0.0.1", "--audit-log", "-"],
        &[("HTTP_PROXY", upstream_url.as_str())],
    );
    let response = proxy_get(&front.http, "127.0.0.1", origin.port(), "GET");
    assert_eq!(response.status, 200, "{response:?}");
    let (connect, mut tunnel) = proxy_connect(&front.http, &format!("127.0.0.1:{}", origin.port()));
    assert_eq!(connect.status, 200);
    write!(
        tunnel,
        "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    let _ = tunnel.read_to_string(&mut text);
    assert!(text.ends_with("GET /c"), "{text:?}");
    for protocol in ["http", "https_connect"] {
        assert_eq!(front.next_decision()["protocol"], protocol);
        let seen = upstream.next_decision();
        assert_eq!(
            (seen["protocol"].as_str(), seen["decision"].as_str()),
            (Some(protocol), Some("allow"))
        );
    }
    // The upstream saw absolute-form, the origin origin-form.
    assert!(origin.heads.lock().unwrap()[0].starts_with("GET /p HTTP/1.1"));
}

#[test]
fn the_audit_log_records_every_decision_as_a_json_line() {
    let origin = Origin::start();
    let mut proxy = Proxy::start(&[
        "--allow",
        "ok.test",
        "--allow-local-binding",
        "--resolve",
        "ok.test=127.0.0.1",
        "--audit-log",
        "-",
    ]);
    assert_eq!(
        proxy_get(&proxy.http, "ok.test", origin.port(), "GET").status,
        200
    );
    assert_eq!(proxy_get(&proxy.http, "no.test", 8080, "POST").status, 403);
    let allow = proxy.next_decision();
    assert_eq!(allow["decision"], "allow");
    assert_eq!(allow["reason"], "allow");
    assert_eq!(allow["host"], "ok.test");
    assert_eq!(allow["method"], "GET");
    let line = proxy.next_line();
    let deny: serde_json::Value = serde_json::from_str(&line).unwrap();
    let order = [
        "timestamp",
        "decision",
        "reason",
        "host",
        "port",
        "protocol",
        "method",
        "client",
        "source",
        "message",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|k| {
            line.find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} in {line}"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "key order of {line}"
    );
    assert_eq!(
        (deny["host"].as_str(), deny["port"].as_u64()),
        (Some("no.test"), Some(8080))
    );
    assert!(deny["timestamp"].as_str().unwrap().ends_with('Z'));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit.jsonl");
    let mut proxy = Proxy::start(&["--allow", "x.test", "--audit-log", file.to_str().unwrap()]);
    assert_eq!(proxy_get(&proxy.http, "y.test", 80, "GET").status, 403);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(proxy.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(proxy.child.wait().unwrap().success());
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains(r#""host":"y.test""#));
}

#[test]
fn listeners_are_loopback_only() {
    let out = Command::new(BIN)
        .args(["proxy", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("'0.0.0.0:0' for '--listen <ADDR>': not a loopback address"));
}

/// The namespace tests: a scripted DNS server on 127.0.0.1:53 of a network
/// namespace of this test's own, the proxy's resolver pointed at it.
fn with_scripted_dns(
    script: DnsScript,
    allow: &'static [&'static str],
    check: impl FnOnce(&Proxy, &Origin, &std::sync::Mutex<Vec<String>>) + Send + 'static,
) {
    let ran = in_new_netns(move || {
        let dir = tempfile::tempdir().unwrap();
        let asked = dns_server(script);
        let origin = Origin::start();
        let mut args: Vec<&str> = Vec::new();
        for entry in allow {
            args.extend(["--allow", entry]);
        }
        let proxy = Proxy::start_with(with_local_resolver(dir.path()), &args, &[]);
        check(&proxy, &origin, &asked);
    });
    if ran.is_none() {
        crate::common::host::host_has(
            "network namespaces",
            Err("cannot create one here (needs root)".into()),
        );
    }
}

#[test]
fn a_name_that_does_not_resolve_is_reported_as_a_dns_failure() {
    with_scripted_dns(vec![], &["gone.test"], |proxy, origin, asked| {
        let response = proxy_get(&proxy.http, "gone.test", origin.port(), "GET");
        assert_eq!(response.status, 403, "{response:?}");
        assert_eq!(response.json()["reason"], "dns_failed");
        assert_eq!(
            response.header("x-proxy-error").as_deref(),
            Some("blocked-by-dns-failure")
        );
        let (connect, _) = proxy_connect(&proxy.http, "gone.test:443");
        assert_eq!(
            (connect.status, connect.body.as_str()),
            (403, "Domain name could not be resolved.")
        );
        // Names the policy refuses are never looked up.
        assert_eq!(
            proxy_get(&proxy.http, "leak.test", 80, "GET").json()["reason"],
            "not_allowed"
        );
        assert!(!asked.lock().unwrap().iter().any(|n| n == "leak.test"));
    });
}

#[test]
fn a_name_re_resolving_to_loopback_never_reaches_it() {
    // First answer public, every later one 127.0.0.1: the address checked
    // is the one dialed (unreachable in this namespace), and the next
    // request sees the loopback answer and is refused.
    let public = Ipv4Addr::new(192, 88, 99, 1);
    let script = vec![("rebind.test".to_owned(), vec![public, Ipv4Addr::LOCALHOST])];
    with_scripted_dns(script, &["rebind.test"], move |proxy, origin, asked| {
        let first = proxy_get(&proxy.http, "rebind.test", origin.port(), "GET");
        assert_eq!(
            (first.status, first.body.as_str()),
            (502, "upstream failure"),
            "{first:?}"
        );
        assert_eq!(
            asked
                .lock()
                .unwrap()
                .iter()
                .filter(|n| *n == "rebind.test")
                .count(),
            1
        );
        let second = proxy_get(&proxy.http, "rebind.test", origin.port(), "GET");
        assert_eq!(second.status, 403);
        assert_eq!(second.json()["reason"], "not_allowed_local");
        let (connect, _) = proxy_connect(&proxy.http, &format!("rebind.test:{}", origin.port()));
        assert_eq!(connect.status, 403);
        assert_eq!(origin.connection_count(), 0);
    });
}
