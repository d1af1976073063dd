//! Remote mode end to end on 127.0.0.1: the real `codexbox rendezvous`, a
//! remote executor and `codexbox connect`, driven by a plain WebSocket
//! client through the bridge: processes and files through the relay, the
//! relayed bytes never in plaintext, several executors and harnesses, the
//! executor's restart, and cuts of the rendezvous connections.

use std::time::Duration;

use crate::common::client::{assert_well_ordered, output_of, sh, start_params, Raw};
use crate::common::relay::{
    assert_seq_output, seq_output, sha, Bridge, Executor, Faults, Proxy, Rendezvous,
    EXECUTOR_CONNECTED,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_and_files_work_through_the_relay() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-a", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-a", &[], &[]);
    let mut client = bridge.client().await;
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
            json!({"processId": "p2", "chunk": crate::common::client::b64(b"via relay\n"), "closeStdin": true}),
        )
        .await;
    assert_eq!(written["status"], "accepted");
    let read = client.read_until_closed("p2", 0).await;
    let text: String = read["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| {
            String::from_utf8_lossy(&crate::common::client::unb64(
                c["chunk"].as_str().unwrap_or(""),
            ))
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
            json!({"path": path, "dataBase64": crate::common::client::b64(&data)}),
        )
        .await;
    let back = client.call("fs/readFile", json!({"path": path})).await;
    assert_eq!(
        crate::common::client::unb64(back["dataBase64"].as_str().expect("data")),
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
    let mut client = bridge.client().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_survives_connection_cuts_byte_exact_with_the_reliable_relay() {
    const BYTES: usize = 100_000_000;
    let proxy = Proxy::start(
        Faults {
            cut_every: Some(Duration::from_millis(700)),
            max_delay: Some(Duration::from_micros(300)),
            ..Faults::default()
        },
        42,
    );
    let rendezvous = Rendezvous::start(&["--public-url", &proxy.url()]);
    proxy.set_target(rendezvous.addr());
    let mut executor = Executor::start(&rendezvous.url, "env-cut", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-cut", &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;

    client
        .call(
            "process/start",
            sh("big", &format!("seq 1 20000000 | head -c {BYTES}")),
        )
        .await;
    assert_seq_output(&client.events_until_closed("big").await, BYTES);

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_executors_serve_several_harnesses_at_once() {
    let rendezvous = Rendezvous::start(&[]);
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let _a = Executor::start_in(dir_a.path(), &rendezvous.url, "env-a");
    let _b = Executor::start_in(dir_b.path(), &rendezvous.url, "env-b");
    let bridge_a = Bridge::start(&rendezvous.url, "env-a", &[], &[]);
    let bridge_b = Bridge::start(&rendezvous.url, "env-b", &[], &[]);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (bridge, dir) = if i % 2 == 0 {
            (&bridge_a, dir_a.path().to_owned())
        } else {
            (&bridge_b, dir_b.path().to_owned())
        };
        let (url, token) = (bridge.url.clone(), bridge.token());
        tasks.push(tokio::spawn(async move {
            let mut client = Raw::connect_authorized(&url, token.as_deref()).await;
            client.handshake().await;
            let info = client.call("environment/info", json!({})).await;
            let cwd = info["cwd"].as_str().unwrap_or("");
            let cwd = std::path::PathBuf::from(cwd.strip_prefix("file://").unwrap_or(cwd));
            assert_eq!(
                cwd.canonicalize().ok(),
                dir.canonicalize().ok(),
                "routed to its own executor"
            );
            let id = format!("p{i}");
            client
                .call(
                    "process/start",
                    sh(&id, &format!("seq 1 {}", 10_000 * (i + 1))),
                )
                .await;
            let events = client.events_until_closed(&id).await;
            let expected: String = (1..=10_000 * (i + 1)).map(|n| format!("{n}\n")).collect();
            assert_eq!(output_of(&events), expected);
        }));
    }
    for task in tasks {
        task.await.expect("client task");
    }
}

/// A free loopback address (bound and released).
fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_register_again_after_a_restart_of_either_side() {
    let addr = free_addr();
    let mut rendezvous = Rendezvous::start_on(&addr, &[]);
    let mut executor = Executor::start(&rendezvous.url, "env-r", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-r", &[], &[]);
    let run = |bridge: &Bridge, id: &'static str| {
        let (url, token) = (bridge.url.clone(), bridge.token());
        async move {
            let mut client = Raw::connect_authorized(&url, token.as_deref()).await;
            client.handshake().await;
            client.call("process/start", sh(id, "echo up")).await;
            let events = client.events_until_closed(id).await;
            assert_eq!(output_of(&events), "up\n");
        }
    };
    run(&bridge, "first").await;

    // The executor restarts: a new key, a new registration, same environment.
    executor.proc.kill();
    let executor = Executor::start(&rendezvous.url, "env-r", &[], &[]);
    run(&bridge, "second").await;

    // The rendezvous restarts on the same address: it forgot everything and
    // its new signing key refuses the executor's URL (401), so the executor
    // registers again and harnesses get bundles once it is back.
    rendezvous.proc.kill();
    let rendezvous = Rendezvous::start_on(&addr, &[]);
    let mut executor = executor;
    executor.proc.wait_stderr("registering again", 1);
    executor.proc.wait_stderr(EXECUTOR_CONNECTED, 2);
    run(&bridge, "third").await;
    drop(rendezvous);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_dialect_recovers_through_session_resume_and_reports_truncation() {
    let proxy = Proxy::start(Faults::default(), 3);
    let rendezvous = Rendezvous::start(&["--public-url", &proxy.url()]);
    proxy.set_target(rendezvous.addr());
    let mut executor = Executor::start(
        &rendezvous.url,
        "env-s",
        &["--retained-output-bytes", "100000"],
        &[],
    );
    let bridge = Bridge::start(
        &rendezvous.url,
        "env-s",
        &["--relay-dialect", "reference"],
        &[],
    );
    let dir = tempfile::tempdir().expect("dir");
    let go = dir.path().join("go");
    let gate = format!(
        "echo ready; while [ ! -e {go} ]; do sleep 0.01; done",
        go = go.display()
    );
    let mut client = bridge.client().await;
    let session = client.handshake().await;
    let small = dir.path().join("small-done");
    let big = dir.path().join("big-done");
    client
        .call(
            "process/start",
            sh(
                "small",
                &format!("{gate}; seq 1 10000; touch {}", small.display()),
            ),
        )
        .await;
    client
        .call(
            "process/start",
            sh(
                "big",
                &format!("{gate}; seq 1 400000; touch {}", big.display()),
            ),
        )
        .await;
    for id in ["small", "big"] {
        client.output_until(id, "ready").await;
    }
    // The rendezvous connections drop; without same-stream resume the local
    // client sees its connection close.
    proxy.cut_all();
    while client.recv_socket().await.is_some() {}
    // Output is produced while the session is detached.
    std::fs::write(&go, b"").expect("go");
    for done in [&small, &big] {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !done.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} never finished",
                done.display()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // The executor is back on the rendezvous before the client reconnects.
    executor.proc.wait_stderr(EXECUTOR_CONNECTED, 2);
    let mut client = bridge.client().await;
    assert_eq!(client.handshake_resume(Some(&session)).await, session);
    for (id, count, truncated) in [("small", 10_000, false), ("big", 400_000, true)] {
        let read = client.read_until_closed(id, 1).await;
        assert_eq!(read["truncated"], truncated, "{id}: {read:#}");
        let mut bytes = Vec::new();
        let mut last = 1;
        for chunk in read["chunks"].as_array().expect("chunks") {
            let seq = chunk["seq"].as_u64().expect("seq");
            assert!(seq > last, "seqs increase");
            last = seq;
            bytes.extend(crate::common::client::unb64(
                chunk["chunk"].as_str().unwrap_or(""),
            ));
        }
        let expected: Vec<u8> = (1..=count)
            .flat_map(|n| format!("{n}\n").into_bytes())
            .collect();
        if truncated {
            assert!(
                bytes.len() < expected.len() && expected.ends_with(&bytes),
                "{id}: an exact suffix"
            );
        } else {
            assert_eq!(bytes, expected, "{id}: exact");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_remaining_methods_work_through_the_relay() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-m", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-m", &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;
    let status = client.call("environment/status", json!({})).await;
    assert_eq!(status["status"], "ready");

    // signal, resize, terminate.
    client
        .call(
            "process/start",
            sh(
                "sig",
                "trap 'echo got-int; exit 7' INT; echo armed; while :; do sleep 0.05; done",
            ),
        )
        .await;
    client.output_until("sig", "armed").await;
    client
        .call(
            "process/signal",
            json!({"processId": "sig", "signal": "interrupt"}),
        )
        .await;
    let events = client.events_until_closed("sig").await;
    assert!(output_of(&events).contains("got-int"));
    let mut tty = start_params("tty", &["sh", "-c", "echo ready; read x; stty size"]);
    tty["tty"] = json!(true);
    client.call("process/start", tty).await;
    client.output_until("tty", "ready").await;
    client
        .call(
            "process/resize",
            json!({"processId": "tty", "rows": 33, "cols": 101}),
        )
        .await;
    client
        .call(
            "process/write",
            json!({"processId": "tty", "chunk": crate::common::client::b64(b"\n")}),
        )
        .await;
    client.output_until("tty", "33 101").await;
    client
        .call("process/start", start_params("long", &["sleep", "30"]))
        .await;
    let terminated = client
        .call("process/terminate", json!({"processId": "long"}))
        .await;
    assert_eq!(terminated["running"], true);
    let events = client.events_until_closed("long").await;
    assert_eq!(
        events
            .iter()
            .find(|e| e.kind == "exited")
            .and_then(|e| e.exit_code),
        Some(137)
    );

    // canonicalize, walk, copy, and a streamed read.
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir(root.join("a")).expect("mkdir");
    std::fs::write(root.join("a/f"), vec![b'q'; 200_000]).expect("write");
    let canonical = client
        .call("fs/canonicalize", json!({"path": root.join("a/../a/f")}))
        .await;
    assert_eq!(canonical["path"], json!(root.join("a/f")));
    let walk = client
        .call(
            "fs/walk",
            json!({"path": root, "options": {"maxDepth": 4, "maxDirectories": 10, "maxEntries": 10, "followDirectorySymlinks": false}}),
        )
        .await;
    assert_eq!(walk["entries"].as_array().map(Vec::len), Some(2), "{walk}");
    client
        .call(
            "fs/copy",
            json!({"sourcePath": root.join("a"), "destinationPath": root.join("b"), "recursive": true}),
        )
        .await;
    assert_eq!(
        std::fs::read(root.join("b/f")).expect("copied").len(),
        200_000
    );
    client
        .call(
            "fs/open",
            json!({"handleId": "h", "path": root.join("b/f")}),
        )
        .await;
    let block = client
        .call(
            "fs/readBlock",
            json!({"handleId": "h", "offset": 100_000, "len": 150_000}),
        )
        .await;
    assert_eq!(
        crate::common::client::unb64(block["chunk"].as_str().unwrap_or("")).len(),
        100_000
    );
    client.call("fs/close", json!({"handleId": "h"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendezvous_logs_json_lines_without_secrets() {
    let rendezvous = Rendezvous::start(&["--log-format", "json"]);
    let mut executor = Executor::start(&rendezvous.url, "env-j", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-j", &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;
    executor.proc.wait_stderr("relay stream opened", 1);
    let log = rendezvous.proc.stderr();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 3, "{log}");
    for line in &lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert!(value["fields"]["message"].is_string(), "{line}");
    }
    assert!(log.contains("\"call\":\"register\""), "{log}");
    assert!(!log.contains("sig="), "no signed URL in the log: {log}");
    assert!(!log.contains("hka1."), "no authorization in the log: {log}");
}
