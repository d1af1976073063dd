//! Interop with the reference's relay dialect, both ways, through the real
//! rendezvous: a reference harness double against the codexbox executor,
//! and `codexbox connect` (which offers the reliable dialect) against a
//! reference executor double in front of a codexbox exec-server. Neither
//! double knows the reliable dialect; each checks every frame it gets has
//! the reference's shape.

use crate::common::client::{output_of, sh, Server};
use crate::common::reference_relay::{assert_reference_shape, ReferenceExecutor, ReferenceHarness};
use crate::common::relay::{Bridge, Executor, Rendezvous};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_harness_uses_the_codexbox_executor() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-ref", &[], &[]);
    let mut harness = ReferenceHarness::connect(&rendezvous.url, "env-ref").await;
    assert_eq!(
        harness.msg2_ack_bits, 0,
        "no reliable acceptance without an offer"
    );
    let init = harness
        .call(
            "initialize",
            json!({"clientName": "codex-environment", "resumeSessionId": null}),
        )
        .await;
    assert!(init["sessionId"].is_string());
    harness
        .send(json!({"method": "initialized", "params": {}}))
        .await;
    // More than one record each way: a 200 KB reply and a 100 KB request.
    harness
        .call(
            "process/start",
            sh("p1", "head -c 200000 /dev/zero | tr '\\0' z"),
        )
        .await;
    let out = harness.output_until_closed("p1").await;
    assert_eq!(out, vec![b'z'; 200_000]);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f");
    let data = vec![7u8; 100_000];
    harness
        .call(
            "fs/writeFile",
            json!({"path": path, "dataBase64": crate::common::client::b64(&data)}),
        )
        .await;
    assert_eq!(std::fs::read(&path).expect("written"), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codexbox_connect_falls_back_to_the_reference_dialect() {
    let local = Server::start(&[]);
    let rendezvous = Rendezvous::start(&[]);
    let executor = ReferenceExecutor::start(&rendezvous.url, "env-old", &local.url).await;
    let bridge = Bridge::start(&rendezvous.url, "env-old", &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;
    client.call("process/start", sh("p1", "seq 1 30000")).await;
    let events = client.events_until_closed("p1").await;
    let expected: String = (1..=30000).map(|i| format!("{i}\n")).collect();
    assert_eq!(output_of(&events), expected);
    let frames = executor.frames.lock().expect("lock").clone();
    assert!(frames.len() > 3, "the double saw the stream");
    for frame in &frames {
        assert_reference_shape_after_handshake(frame);
    }
}

/// The harness's handshake frame may carry the (ignored) offer; everything
/// after it must be the reference's shape.
fn assert_reference_shape_after_handshake(frame: &codexbox::relay::frame::RelayMessageFrame) {
    if frame.kind() != "handshake" {
        assert_reference_shape(frame);
    }
}
