//! Sessions of the exec-server (docs/protocol.md): resume after a
//! dropped connection with the output produced meanwhile, bounded retention
//! while detached, the grace period killing every process of an abandoned
//! session (and the one a client asks for), the peer deadline closing a
//! connection whose peer went silent, a resume taking a session over only
//! from a connection that does not answer, and `session/list`.

use std::time::{Duration, Instant};

use crate::common::client::*;
use crate::common::relay::{Faults, Proxy};
use serde_json::{json, Value};

/// Starts `script` (which prints `pid:N` lines) and waits for `count` pids.
async fn start_and_collect_pids(ws: &mut Raw, id: &str, script: &str, count: usize) -> Vec<u32> {
    ws.call("process/start", sh(id, script)).await;
    let mut text = String::new();
    while pids_in(&text).len() < count {
        let params = ws.notification("process/output", id).await;
        text.push_str(&String::from_utf8_lossy(&unb64(
            params["chunk"].as_str().unwrap_or_default(),
        )));
    }
    pids_in(&text)
}

#[tokio::test]
async fn resume_after_a_dropped_connection_returns_the_output_produced_meanwhile() {
    let server = Server::start(&[]);
    let (mut ws, session) = server.session().await;
    let fifo = Fifo::new();
    let script = format!(
        "echo pid:$$; read x < {}; echo after:$x; exit 4",
        fifo.path_str()
    );
    let pids = start_and_collect_pids(&mut ws, "r", &script, 1).await;
    ws.close().await;

    // The process finishes while nobody is attached.
    fifo.write(b"go\n").await;
    wait_gone(pids[0]).await;

    let mut ws = server.raw().await;
    assert_eq!(ws.handshake_resume(Some(&session)).await, session);
    let read = ws.read_until_closed("r", 1).await;
    let chunks = read["chunks"].as_array().cloned().unwrap_or_default();
    let text: Vec<u8> = chunks
        .iter()
        .flat_map(|c| unb64(c["chunk"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(text, b"after:go\n", "{read}");
    assert_eq!(chunks[0]["seq"], 2);
    assert_eq!(read["exited"], true);
    assert_eq!(read["exitCode"], 4);
    assert_eq!(read["closed"], true);
    assert_eq!(read["truncated"], false);
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn notifications_follow_the_session_to_the_new_connection() {
    let server = Server::start(&[]);
    let (mut ws, session) = server.session().await;
    let fifo = Fifo::new();
    let script = format!("echo pid:$$; read x < {}; echo after:$x", fifo.path_str());
    start_and_collect_pids(&mut ws, "n", &script, 1).await;
    ws.close().await;
    let mut ws = server.raw().await;
    ws.handshake_resume(Some(&session)).await;
    fifo.write(b"go\n").await;
    let events = ws.events_until_closed("n").await;
    assert_eq!(output_of(&events), "after:go\n");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [2, 3, 4], "{events:?}");
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn detached_output_is_bounded_by_retention_and_reported_truncated() {
    let server = Server::start(&["--retained-output-bytes", "4096"]);
    let (mut ws, session) = server.session().await;
    let fifo = Fifo::new();
    let script = format!(
        "echo pid:$$; read x < {}; head -c 2000000 /dev/zero; echo END",
        fifo.path_str()
    );
    let pids = start_and_collect_pids(&mut ws, "flood", &script, 1).await;
    ws.close().await;
    fifo.write(b"go\n").await;
    // A detached session never blocks the child: it runs to completion.
    wait_gone(pids[0]).await;

    let mut ws = server.raw().await;
    ws.handshake_resume(Some(&session)).await;
    let read = ws.read_until_closed("flood", 1).await;
    assert_eq!(read["truncated"], true, "{}", read["truncated"]);
    let retained: Vec<u8> = read["chunks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .flat_map(|c| unb64(c["chunk"].as_str().unwrap_or_default()))
        .collect();
    assert!(
        retained.len() < 2_000_000,
        "retention is bounded: {}",
        retained.len()
    );
    assert!(retained.ends_with(b"END\n"));
    assert_eq!(read["exited"], true);
    assert_eq!(read["exitCode"], 0);
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn the_grace_period_expiry_kills_every_process_of_the_session() {
    let server = Server::start(&["--session-grace-secs", "1"]);
    let (mut ws, session) = server.session().await;
    let script = "setsid sh -c 'echo pid:$$; exec sleep 1000' & echo pid:$$; exec sleep 1000";
    let mut pids = start_and_collect_pids(&mut ws, "a", script, 2).await;
    pids.extend(start_and_collect_pids(&mut ws, "b", "echo pid:$$; exec sleep 1000", 1).await);
    ws.close().await;
    for pid in &pids {
        wait_gone(*pid).await;
    }
    let mut ws = server.raw().await;
    let (code, message) = ws
        .call_err(
            "initialize",
            json!({"clientName": "late", "resumeSessionId": session}),
        )
        .await;
    assert_eq!(code, -32600, "{message}");
    assert!(message.contains(&session), "{message}");
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn a_zero_grace_period_kills_at_disconnect() {
    let server = Server::start(&["--session-grace-secs", "0"]);
    let (mut ws, _) = server.session().await;
    let pids = start_and_collect_pids(&mut ws, "z", "echo pid:$$; exec sleep 1000", 1).await;
    ws.close().await;
    wait_gone(pids[0]).await;
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn within_the_grace_period_processes_keep_running() {
    let server = Server::start(&[]);
    let (mut ws, session) = server.session().await;
    let pids = start_and_collect_pids(&mut ws, "k", "echo pid:$$; exec sleep 1000", 1).await;
    ws.close().await;
    let mut ws = server.raw().await;
    ws.handshake_resume(Some(&session)).await;
    assert!(!is_gone(pids[0]), "still running after detach");
    let read = ws
        .call("process/read", json!({"processId": "k", "afterSeq": 1}))
        .await;
    assert_eq!(read["exited"], false);
    assert_eq!(
        ws.call("process/terminate", json!({"processId": "k"}))
            .await,
        json!({"running": true})
    );
    ws.events_until_closed("k").await;
    wait_gone(pids[0]).await;
    assert_no_children(server.pid()).await;
}

/// The `session/list` entry of `session`, as `ws` sees it.
async fn listed(ws: &mut Raw, session: &str) -> Option<Value> {
    let list = ws.call("session/list", json!({})).await;
    list["sessions"]
        .as_array()
        .and_then(|sessions| sessions.iter().find(|s| s["sessionId"] == session))
        .cloned()
}

/// A proxy to `server`, to freeze the path of a connection.
fn proxy_to(server: &Server) -> Proxy {
    let proxy = Proxy::start(Faults::default(), 5);
    proxy.set_target(server.addr().parse().expect("server address"));
    proxy
}

#[tokio::test]
async fn a_peer_that_stops_answering_pings_is_closed_and_its_session_detached() {
    let server = Server::start(&["--peer-timeout-secs", "1"]);
    let proxy = proxy_to(&server);
    let mut far = Raw::connect(&format!("ws://{}", proxy.addr)).await;
    let session = far.handshake().await;
    let pids = start_and_collect_pids(&mut far, "f", "echo pid:$$; exec sleep 1000", 1).await;
    // It answers pings while its path works.
    let _far = far.answer_pings();
    let mut near = server.raw().await;
    near.handshake().await;
    let entry = listed(&mut near, &session).await.expect("listed");
    assert_eq!(entry["attached"], true, "{entry}");
    // Its host vanishes: the path stays open and carries nothing.
    proxy.freeze_all();
    let deadline = Instant::now() + WAIT * 3;
    loop {
        let entry = listed(&mut near, &session).await.expect("listed");
        if entry["attached"] == false {
            break;
        }
        assert!(Instant::now() < deadline, "still attached: {entry}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Detached, not killed: another connection resumes it at once.
    let mut again = server.raw().await;
    assert_eq!(again.handshake_resume(Some(&session)).await, session);
    assert!(!is_gone(pids[0]));
    again
        .call("process/terminate", json!({"processId": "f"}))
        .await;
    wait_gone(pids[0]).await;
}

#[tokio::test]
async fn a_resume_takes_a_session_over_only_from_a_holder_that_does_not_answer() {
    let server = Server::start(&["--takeover-probe-ms", "300"]);
    // A holder that answers keeps its session: -32010.
    let (live, kept) = server.session().await;
    let _live = live.answer_pings();
    let mut other = server.raw().await;
    let (code, message) = other
        .call_err(
            "initialize",
            json!({"clientName": "t", "resumeSessionId": kept}),
        )
        .await;
    assert_eq!(code, -32010, "{message}");
    // A holder whose path went silent loses it to the resume.
    let proxy = proxy_to(&server);
    let mut far = Raw::connect(&format!("ws://{}", proxy.addr)).await;
    let session = far.handshake().await;
    let fifo = Fifo::new();
    let script = format!("echo pid:$$; read x < {}; echo after:$x", fifo.path_str());
    let pids = start_and_collect_pids(&mut far, "t", &script, 1).await;
    let _far = far.answer_pings();
    proxy.freeze_all();
    let mut taker = server.raw().await;
    let response = taker
        .request(
            "initialize",
            json!({"clientName": "t", "resumeSessionId": session}),
        )
        .await;
    assert_eq!(response["result"]["sessionId"], session, "{response}");
    taker
        .send(json!({"method": "initialized", "params": {}}))
        .await;
    // The process's events come to the new holder.
    fifo.write(b"go\n").await;
    let events = taker.events_until_closed("t").await;
    assert_eq!(output_of(&events), "after:go\n");
    let entry = listed(&mut taker, &session).await.expect("listed");
    assert_eq!(
        (&entry["attached"], &entry["current"]),
        (&json!(true), &json!(true))
    );
    wait_gone(pids[0]).await;
}

#[tokio::test]
async fn a_session_keeps_the_grace_period_its_client_asks_for_up_to_the_maximum() {
    let server = Server::start(&[
        "--session-grace-secs",
        "0",
        "--max-session-grace-secs",
        "100",
    ]);
    let mut ws = server.raw().await;
    let result = ws
        .call(
            "initialize",
            json!({"clientName": "t", "sessionGraceSecs": 3600}),
        )
        .await;
    assert_eq!(result["sessionGraceSecs"], 100, "bounded: {result}");
    let session = result["sessionId"].as_str().expect("sessionId").to_owned();
    ws.send(json!({"method": "initialized", "params": {}}))
        .await;
    let pids = start_and_collect_pids(&mut ws, "g", "echo pid:$$; exec sleep 1000", 1).await;
    ws.close().await;
    // The server's own grace period (0) would have killed it at once.
    let mut ws = server.raw().await;
    assert_eq!(ws.handshake_resume(Some(&session)).await, session);
    assert!(!is_gone(pids[0]));
    let entry = listed(&mut ws, &session).await.expect("listed");
    assert_eq!(entry["sessionGraceSecs"], 100, "{entry}");
    let process = &entry["processes"][0];
    assert_eq!(
        (
            &process["processId"],
            &process["state"],
            &process["argv"][0]
        ),
        (&json!("g"), &json!("running"), &json!("sh")),
        "{entry}"
    );
    ws.call("process/terminate", json!({"processId": "g"}))
        .await;
    wait_gone(pids[0]).await;
    // A client that asks nothing gets the reference's answer, byte for byte.
    let mut plain = server.raw().await;
    let result = plain.call("initialize", json!({"clientName": "t"})).await;
    let keys: Vec<&String> = result.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["sessionId"], "{result}");
}
