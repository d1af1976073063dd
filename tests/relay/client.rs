//! `RemoteExecServerClient` through a registry and rendezvous whose
//! connections are cut: one shared reconnect, the same session resumed,
//! tracked processes rebound with their events in order and nothing
//! duplicated, writes retried with the same `writeId`, a long-poll read
//! retried once, and an ambiguous non-replayable call reported as such.

use std::sync::Arc;
use std::time::Duration;

use crate::common::relay::{Executor, Faults, Proxy, Rendezvous, EXECUTOR_CONNECTED};
use codexbox::client::{
    ClientError, ConnectOptions, Notification, ProcessEvent, ReadParams, RemoteExecServerClient,
    StartParams,
};
use codexbox::relay::harness::HarnessConfig;
use codexbox::relay::noise::NoiseIdentity;
use codexbox::relay::registry_client::{AuthHeaders, RegistryClient};
use serde_json::json;
use tokio::sync::mpsc;

struct Setup {
    proxy: Proxy,
    _rendezvous: Rendezvous,
    executor: Executor,
    client: RemoteExecServerClient,
    events: mpsc::Receiver<Notification>,
}

async fn setup(env: &str) -> Setup {
    let proxy = Proxy::start(Faults::default(), 11);
    let rendezvous = Rendezvous::start(&["--public-url", &proxy.url()]);
    proxy.set_target(rendezvous.addr());
    let executor = Executor::start(&rendezvous.url, env, &[], &[]);
    let config = HarnessConfig::new(
        RegistryClient::new(&rendezvous.url, env, AuthHeaders::default()).expect("registry"),
        NoiseIdentity::generate().expect("identity"),
        // The reference dialect: a cut is visible and the client recovers.
        false,
    );
    let (client, events) =
        RemoteExecServerClient::connect(ConnectOptions::relay(config), "relay-client")
            .await
            .expect("connect");
    Setup {
        proxy,
        _rendezvous: rendezvous,
        executor,
        client,
        events,
    }
}

/// Output of `process_id` until closed, checking seqs are 1, 2, 3, ….
pub async fn collect(
    events: &mut mpsc::Receiver<Notification>,
    process_id: &str,
    until: Option<&str>,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut expected_seq = None::<u64>;
    loop {
        let notification = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("an event in time")
            .expect("events open");
        let Some(event) = ProcessEvent::from_notification(&notification) else {
            panic!("unexpected notification {notification:?}");
        };
        let (id, seq) = match &event {
            ProcessEvent::Output {
                process_id, seq, ..
            }
            | ProcessEvent::Exited {
                process_id, seq, ..
            }
            | ProcessEvent::Closed { process_id, seq } => (process_id.clone(), *seq),
        };
        if id != process_id {
            continue;
        }
        if let Some(expected) = expected_seq {
            assert_eq!(seq, expected, "events in order, none duplicated");
        }
        expected_seq = Some(seq + 1);
        match event {
            ProcessEvent::Output { chunk, .. } => {
                out.extend(chunk);
                if until.is_some_and(|u| String::from_utf8_lossy(&out).contains(u)) {
                    return out;
                }
            }
            ProcessEvent::Closed { .. } => return out,
            ProcessEvent::Exited { .. } => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_resumes_its_session_and_rebinds_processes() {
    let mut s = setup("env-client").await;
    let session = s.client.session_id().await.expect("session");
    let start =
        StartParams::new("p", ["sh", "-c", "echo ready; read x; seq 1 50000"]).pipe_stdin(true);
    s.client.process_start(&start).await.expect("start");
    let first = collect(&mut s.events, "p", Some("ready\n")).await;
    assert_eq!(first, b"ready\n");

    s.proxy.cut_all();
    // The write meets the dead connection, waits for the one reconnect and
    // is sent again with the same writeId.
    let written = s
        .client
        .process_write("p", b"go\n", false)
        .await
        .expect("write after reconnect");
    assert_eq!(written.status, codexbox::client::WriteStatus::Accepted);
    let rest = collect(&mut s.events, "p", None).await;
    let expected: String = (1..=50000).map(|n| format!("{n}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&rest), expected);
    assert!(s.client.reconnects() >= 1);
    assert_eq!(
        s.client.session_id().await.as_deref(),
        Some(session.as_str())
    );
    s.executor.proc.wait_stderr(EXECUTOR_CONNECTED, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_retried_once_and_ambiguous_calls_are_not_replayed() {
    let s = setup("env-client-2").await;
    let start = StartParams::new("sleeper", ["sleep", "30"]);
    s.client.process_start(&start).await.expect("start");
    let client = Arc::new(s.client.clone());
    // A long-poll read through the typed (replayable) path...
    let typed = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .process_read(&ReadParams {
                    process_id: "sleeper".into(),
                    after_seq: Some(0),
                    max_bytes: None,
                    wait_ms: Some(1500),
                })
                .await
        })
    };
    // ...and the same request through the generic (never replayed) path.
    let generic = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call(
                    "process/read",
                    json!({"processId": "sleeper", "afterSeq": 0, "waitMs": 20000}),
                )
                .await
        })
    };
    // Let both reach the server: a short status round trip goes after them.
    s.client
        .call("environment/status", json!({}))
        .await
        .expect("status");
    s.proxy.cut_all();
    let typed = typed.await.expect("task");
    assert!(typed.is_ok(), "the read was retried: {typed:?}");
    let generic = generic.await.expect("task");
    assert!(
        matches!(generic, Err(ClientError::Disconnected { .. })),
        "not replayed: {generic:?}"
    );
    assert_eq!(s.client.reconnects(), 1, "one shared reconnect");
    assert!(s
        .client
        .process_terminate("sleeper")
        .await
        .expect("terminate"));
}

#[tokio::test]
async fn a_closed_client_lets_go_of_its_stream_and_session_at_once() {
    // A stream whose harness vanished would be held for ten minutes.
    let rendezvous = Rendezvous::start(&["--resume-hold-secs", "600"]);
    let _executor = Executor::start(&rendezvous.url, "closing-env", &[], &[]);
    let config = || {
        HarnessConfig::new(
            RegistryClient::new(&rendezvous.url, "closing-env", AuthHeaders::default())
                .expect("registry"),
            NoiseIdentity::generate().expect("identity"),
            true,
        )
    };
    let (client, _events) =
        RemoteExecServerClient::connect(ConnectOptions::relay(config()), "first")
            .await
            .expect("connect");
    let session = client.session_id().await.expect("session");
    assert_eq!(rendezvous.streams(), 1);
    client.close().await;
    // The reset went out before `close` returned: the rendezvous drops the
    // stream now, not after its hold.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rendezvous.streams() != 0 {
        assert!(std::time::Instant::now() < deadline, "the stream is held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (again, _events) =
        RemoteExecServerClient::resume(ConnectOptions::relay(config()), "second", &session)
            .await
            .expect("resumed at once, not -32010");
    assert_eq!(again.session_id().await.as_deref(), Some(session.as_str()));
    again.close().await;
}
