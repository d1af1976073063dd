//! Remote mode behind an HTTP proxy: registry calls and relay dials go
//! through the proxy the process's `HTTP_PROXY`/`HTTPS_PROXY` name (plain
//! HTTP forwarded, WebSocket tunnelled with CONNECT, even to `ws://`),
//! unless `NO_PROXY` covers the host; and the registry client reads HTTP
//! as HTTP/1.1 says (1xx interim answers skipped, ambiguous lengths
//! refused).

use crate::common::client::{output_of, sh};
use crate::common::net::RecordingProxy;
use crate::common::relay::{Bridge, Executor, Rendezvous};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_calls_and_relay_dials_use_the_proxy_unless_no_proxy_covers_the_host() {
    let rendezvous = Rendezvous::start(&[]);
    let addr = rendezvous.addr();
    let proxy = RecordingProxy::start();
    let proxy_url = proxy.url();
    // Loopback is not special: the executor goes through the proxy.
    let _executor = Executor::start(
        &rendezvous.url,
        "env-proxied",
        &[],
        &[("http_proxy", proxy_url.as_str())],
    );
    let lines = proxy.lines();
    assert!(
        lines.contains(&format!(
            "POST http://{addr}/cloud/environment/env-proxied/register HTTP/1.1"
        )),
        "{lines:?}"
    );
    assert!(
        lines.contains(&format!("CONNECT {addr} HTTP/1.1")),
        "{lines:?}"
    );

    // The bridge is told to go direct to this address, port included.
    let no_proxy = format!("example.invalid, {}:{}", addr.ip(), addr.port());
    let bridge = Bridge::start(
        &rendezvous.url,
        "env-proxied",
        &[],
        &[
            ("HTTP_PROXY", proxy_url.as_str()),
            ("NO_PROXY", no_proxy.as_str()),
        ],
    );
    let mut client = bridge.client().await;
    client.handshake().await;
    client.call("process/start", sh("p", "echo proxied")).await;
    let events = client.events_until_closed("p").await;
    assert_eq!(output_of(&events), "proxied\n");
    // The bridge went direct: no `connect` call, no new tunnel.
    let after = proxy.lines();
    let tunnels = |lines: &[String]| lines.iter().filter(|l| l.starts_with("CONNECT ")).count();
    assert_eq!(tunnels(&after), tunnels(&lines), "{after:?}");
    assert!(!after.iter().any(|l| l.contains("/connect ")), "{after:?}");
}

/// A registry double on 127.0.0.1 answering every request with `answer`
/// and closing; returns its `http://` URL.
fn registry_answering(answer: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && head.len() < 65536 {
                match stream.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    url
}

/// What an executor registering with a registry that answers `answer`
/// says on stderr before it exits (it must fail).
fn executor_refused_by(answer: &'static str, environment: &str) -> String {
    let registry = registry_answering(answer);
    let mut executor = Executor::spawn(&registry, environment, &[], &[]);
    let status = executor.proc.wait().expect("the executor exits");
    assert!(!status.success());
    executor.proc.stderr()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interim_answer_is_not_taken_for_the_registry_answer() {
    let stderr = executor_refused_by(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n\
         HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: 48\r\n\r\n\
         {\"error\":{\"code\":\"nope\",\"message\":\"final word\"}}",
        "env-1xx",
    );
    assert!(
        stderr.contains("authentication failed (401 Unauthorized): final word"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_answer_with_conflicting_lengths_is_refused() {
    let stderr = executor_refused_by(
        "HTTP/1.1 401 Unauthorized\r\ncontent-length: 2\r\ncontent-length: 48\r\n\r\n\
         {\"error\":{\"code\":\"nope\",\"message\":\"final word\"}}",
        "env-cl",
    );
    assert!(
        stderr.contains("environment registry request failed: error sending request"),
        "{stderr}"
    );
    assert!(!stderr.contains("final word"), "{stderr}");
}
