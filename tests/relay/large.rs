//! Large messages through the relay, with the real binaries: whole-file
//! methods of 90 MiB both ways through `codexbox connect` in the reliable
//! dialect (which carries what the executor accepts), and in the reference
//! dialect (whose messages stop at 64 MiB) an oversize request or answer
//! turned into an error for its own id while another request in flight on
//! the same stream still completes.

use std::time::Duration;

use crate::common::client::{b64, error_of, pseudo_random_bytes, sh, unb64, Raw, Server};
use crate::common::reference_relay::{ReferenceExecutor, ReferenceHarness};
use crate::common::relay::{sha, Bridge, Executor, Rendezvous};
use serde_json::{json, Value};

const MIB: usize = 1024 * 1024;
/// Time a message of a hundred megabytes may take through every hop of a
/// debug build (bounds a wait; nothing depends on it being short).
const HUGE_WAIT: Duration = Duration::from_secs(120);

fn data(len: usize) -> Vec<u8> {
    pseudo_random_bytes(len, 9)
}

/// Sends `method` with a string id and returns the whole answer (bounded by
/// [`HUGE_WAIT`]).
async fn huge_request(client: &mut Raw, id: &str, method: &str, params: Value) -> Value {
    client
        .send(json!({"id": id, "method": method, "params": params}))
        .await;
    client.response_within(&json!(id), HUGE_WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ninety_mib_files_go_both_ways_through_connect_in_the_reliable_dialect() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-big", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-big", &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.bin");
    let bytes = data(90 * MIB);

    let params = json!({"path": path, "dataBase64": b64(&bytes)});
    let written = huge_request(&mut client, "write", "fs/writeFile", params).await;
    assert_eq!(written["result"], json!({}), "{:.300}", written.to_string());
    assert_eq!(sha(&std::fs::read(&path).expect("written")), sha(&bytes));

    let read = huge_request(&mut client, "read", "fs/readFile", json!({"path": path})).await;
    let back = unb64(read["result"]["dataBase64"].as_str().unwrap_or_else(|| {
        panic!("no data: {:.300}", read.to_string());
    }));
    assert_eq!(back.len(), bytes.len());
    assert_eq!(sha(&back), sha(&bytes));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_answers_a_request_over_what_the_reliable_executor_accepts() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(
        &rendezvous.url,
        "env-cap",
        &["--max-message-bytes", "1048576"],
        &[],
    );
    let bridge = Bridge::start(&rendezvous.url, "env-cap", &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f");
    let params = json!({"path": path, "dataBase64": b64(&data(2 * MIB))});
    let answer = huge_request(&mut client, "w-1", "fs/writeFile", params).await;
    let (code, message) = error_of(&answer).expect("an error");
    assert_eq!(code, -32600);
    assert!(
        message.contains("the relay stream cannot carry this message")
            && message.contains("exceeds the limit of 1048576 bytes"),
        "refused by connect, as the executor said it accepts 1 MiB: {message}"
    );
    assert!(!path.exists(), "the request never reached the executor");
    client.call("environment/status", json!({})).await;
}

/// `sh` script of a process that prints `released` once `go` exists.
fn gated(go: &std::path::Path) -> String {
    format!(
        "while [ ! -e {go} ]; do sleep 0.01; done; echo released",
        go = go.display()
    )
}

/// The chunks of a `process/read` result, as text.
fn read_text(result: &Value) -> String {
    result["chunks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| String::from_utf8_lossy(&unb64(c["chunk"].as_str().unwrap_or(""))).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_answers_an_oversize_request_in_the_reference_dialect_and_the_stream_goes_on() {
    let local = Server::start(&[]);
    let rendezvous = Rendezvous::start(&[]);
    let _executor = ReferenceExecutor::start(&rendezvous.url, "env-ref-big", &local.url).await;
    let bridge = Bridge::start(&rendezvous.url, "env-ref-big", &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    client.call("process/start", sh("gate", &gated(&go))).await;

    // A read that waits for the gate is in flight on the stream...
    client
        .send(json!({"id": "waiting", "method": "process/read",
            "params": {"processId": "gate", "afterSeq": 0, "waitMs": 60000}}))
        .await;
    // ...when a request over the reference's 64 MiB comes.
    let path = dir.path().join("big.bin");
    let params = json!({"path": path, "dataBase64": b64(&data(50 * MIB))});
    let refused = huge_request(&mut client, "too-big", "fs/writeFile", params).await;
    let (code, message) = error_of(&refused).expect("an error for its id");
    assert_eq!(code, -32600, "{message}");
    assert!(
        message.contains("exceeds the limit of 67108864 bytes"),
        "{message}"
    );
    assert!(!path.exists());

    std::fs::write(&go, b"").expect("release the gate");
    let waiting = client.response(&json!("waiting")).await;
    assert_eq!(read_text(&waiting["result"]), "released\n", "{waiting}");
    let status = client.call("environment/status", json!({})).await;
    assert_eq!(status["status"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_replaces_an_oversize_answer_in_the_reference_dialect_and_the_stream_goes_on()
{
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-ref-answer", &[], &[]);
    let mut harness = ReferenceHarness::connect(&rendezvous.url, "env-ref-answer").await;
    harness
        .call("initialize", json!({"clientName": "codex-environment"}))
        .await;
    harness
        .send(json!({"method": "initialized", "params": {}}))
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    harness.call("process/start", sh("gate", &gated(&go))).await;
    // 50 MiB of file is about 70 MB of answer: over the reference's 64 MiB.
    let path = dir.path().join("big.bin");
    std::fs::write(&path, data(50 * MIB)).expect("write");

    harness
        .send(json!({"id": 900, "method": "process/read",
            "params": {"processId": "gate", "afterSeq": 0, "waitMs": 60000}}))
        .await;
    harness
        .send(json!({"id": 901, "method": "fs/readFile", "params": {"path": path}}))
        .await;
    let replaced = loop {
        let message = harness.recv_within(HUGE_WAIT).await;
        assert_ne!(message["id"], 900, "the gate is still closed: {message}");
        if message["id"] == 901 {
            break message;
        }
    };
    let (code, message) = error_of(&replaced).expect("an error for its id");
    assert_eq!(code, -32603, "{message}");
    assert!(
        message.contains("exceeds the limit of 67108864 bytes"),
        "{message}"
    );

    std::fs::write(&go, b"").expect("release the gate");
    let waiting = loop {
        let message = harness.recv().await;
        if message["id"] == 900 {
            break message;
        }
    };
    assert_eq!(read_text(&waiting["result"]), "released\n", "{waiting}");
    let small = dir.path().join("small");
    std::fs::write(&small, b"still here").expect("write");
    let read = harness.call("fs/readFile", json!({"path": small})).await;
    assert_eq!(
        unb64(read["dataBase64"].as_str().unwrap_or("")),
        b"still here"
    );
}
