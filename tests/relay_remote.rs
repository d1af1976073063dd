//! Remote mode end to end on 127.0.0.1: the real `codexbox rendezvous`, a
//! remote executor and `codexbox connect`, driven by a plain WebSocket
//! client through the bridge: processes and files through the relay, the
//! relayed bytes never in plaintext, several executors and harnesses, the
//! executor's restart, and cuts of the rendezvous connections.

mod common;

use std::time::Duration;

use common::client::{assert_well_ordered, output_of, sh, start_params, Raw};
use common::relay::{seq_output, Bridge, Executor, Faults, Proxy, Rendezvous, EXECUTOR_CONNECTED};
use serde_json::json;
use sha2::{Digest, Sha256};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_and_files_work_through_the_relay() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-a", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-a", &[], &[]);
    let mut client = Raw::connect(&bridge.url).await;
    client.handshake().await;

    client
        .call("process/start", sh("p1", "echo out; echo err >&2; exit 3"))
        .await;
    let events = client.events_until_closed("p1").await;
    assert_well_ordered(&events);
    assert!(output_of(&events).contains("out\n"));
    assert!(output_of(&events).contains("err\n"));
    let exited = events.iter().find(|e| e.kind == "exited").expect("exited");
    assert_eq!(exited.params["exitCode"], 3);

    // stdin, then read back through process/read.
    let mut params = start_params("p2", &["cat"]);
    params["pipeStdin"] = json!(true);
    client.call("process/start", params).await;
    let written = client
        .call(
            "process/write",
            json!({"processId": "p2", "chunk": common::client::b64(b"via relay\n"), "closeStdin": true}),
        )
        .await;
    assert_eq!(written["status"], "accepted");
    let read = client.read_until_closed("p2", 0).await;
    let text: String = read["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| {
            String::from_utf8_lossy(&common::client::unb64(c["chunk"].as_str().unwrap_or("")))
                .into_owned()
        })
        .collect();
    assert_eq!(text, "via relay\n");

    // Files, including one larger than a relay record.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    client
        .call(
            "fs/writeFile",
            json!({"path": path, "dataBase64": common::client::b64(&data)}),
        )
        .await;
    let back = client.call("fs/readFile", json!({"path": path})).await;
    assert_eq!(
        common::client::unb64(back["dataBase64"].as_str().expect("data")),
        data
    );
    let meta = client.call("fs/getMetadata", json!({"path": path})).await;
    assert_eq!(meta["size"], 300_000);
    client
        .call(
            "fs/createDirectory",
            json!({"path": dir.path().join("sub")}),
        )
        .await;
    let listing = client
        .call("fs/readDirectory", json!({"path": dir.path()}))
        .await;
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["fileName"].as_str())
        .collect();
    assert_eq!(names, vec!["big.bin", "sub"]);
    client.call("fs/remove", json!({"path": path})).await;
    let (code, _) = client
        .call_err("fs/getMetadata", json!({"path": path}))
        .await;
    assert_eq!(code, -32004);
    let info = client.call("environment/info", json!({})).await;
    assert!(info["shell"]["path"].is_string(), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendezvous_never_relays_plaintext() {
    let proxy = Proxy::start(
        Faults {
            record: true,
            ..Faults::default()
        },
        7,
    );
    let rendezvous = Rendezvous::start(&["--public-url", &proxy.url()]);
    proxy.set_target(rendezvous.addr());
    let _executor = Executor::start(&rendezvous.url, "env-p", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-p", &[], &[]);
    let mut client = Raw::connect(&bridge.url).await;
    client.handshake().await;
    // The marker is built by the command, so only its output carries it whole.
    client
        .call(
            "process/start",
            sh(
                "p1",
                "m=SECRET; echo \"$m-MARKER-$m\"; printf 'x%.0s' $(seq 1 1000)",
            ),
        )
        .await;
    let events = client.events_until_closed("p1").await;
    assert!(output_of(&events).contains("SECRET-MARKER-SECRET"));
    let seen = proxy.seen();
    assert!(
        seen.len() > 3000,
        "the proxy relayed the streams ({} bytes)",
        seen.len()
    );
    for needle in [
        &b"SECRET-MARKER-SECRET"[..],
        b"U0VDUkVULU1BUktFUi",
        b"process/start",
        b"initialize",
        b"exec-server-tests",
    ] {
        assert!(
            !seen.windows(needle.len()).any(|w| w == needle),
            "{:?} crossed the rendezvous in the clear",
            String::from_utf8_lossy(needle)
        );
    }
}

fn sha(data: &[u8]) -> String {
    format!("{:x}", Sha256::digest(data))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_survives_connection_cuts_byte_exact_with_the_reliable_relay() {
    const BYTES: usize = 100_000_000;
    let proxy = Proxy::start(
        Faults {
            cut_every: Some(Duration::from_millis(700)),
            max_delay: Some(Duration::from_micros(300)),
            record: false,
        },
        42,
    );
    let rendezvous = Rendezvous::start(&["--public-url", &proxy.url()]);
    proxy.set_target(rendezvous.addr());
    let mut executor = Executor::start(&rendezvous.url, "env-cut", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-cut", &[], &[]);
    let mut client = Raw::connect(&bridge.url).await;
    client.handshake().await;

    client
        .call(
            "process/start",
            sh("big", &format!("seq 1 20000000 | head -c {BYTES}")),
        )
        .await;
    let events = client.events_until_closed("big").await;
    assert_well_ordered(&events);
    let mut output = Vec::with_capacity(BYTES);
    for event in events.iter().filter(|e| e.kind == "output") {
        output.extend_from_slice(&event.data);
    }
    let expected = seq_output(BYTES);
    assert_eq!(output.len(), expected.len(), "nothing lost or duplicated");
    assert_eq!(sha(&output), sha(&expected));

    // A PTY session through the same bridge connection.
    let mut params = start_params("tty", &["sh", "-c", "stty -echo; seq 1 100000"]);
    params["tty"] = json!(true);
    client.call("process/start", params).await;
    let events = client.events_until_closed("tty").await;
    assert_well_ordered(&events);
    let mut text = Vec::new();
    for event in events.iter().filter(|e| e.kind == "output") {
        text.extend_from_slice(&event.data);
    }
    let expected: Vec<u8> = seq_output(588_895)
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .flat_map(|l| l.iter().copied().chain(*b"\r\n"))
        .collect();
    assert_eq!(
        sha(&text),
        sha(&expected),
        "{} vs {} bytes",
        text.len(),
        expected.len()
    );

    assert!(
        proxy.cuts() >= 2,
        "the proxy cut connections ({} cuts)",
        proxy.cuts()
    );
    // Both sides lost their sockets and the stream resumed underneath.
    executor.proc.wait_stderr(EXECUTOR_CONNECTED, 2);
    let mut bridge = bridge;
    bridge.proc.wait_stderr("relay stream reconnected", 1);
    eprintln!(
        "{} cuts, {} bridge reconnects",
        proxy.cuts(),
        bridge
            .proc
            .stderr()
            .matches("relay stream reconnected")
            .count()
    );
}
