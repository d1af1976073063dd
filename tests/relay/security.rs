//! Attacks on remote mode, each answered as specified while the rendezvous
//! and the executor keep serving: wrong and reloaded tokens, forged and
//! expired URLs, a harness key without (or with someone else's)
//! authorization, a second harness claiming a live stream, a replayed
//! handshake, oversized and malformed frames, and the 128-stream limit.

use std::io::Write;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::common::client::{sh, WAIT};
use crate::common::reference_relay::{next_frame, ReferenceHarness};
use crate::common::relay::{Bridge, Executor, Rendezvous, EXECUTOR_CONNECTED};
use codexbox::relay::frame::{Body, RelayMessageFrame};
use codexbox::relay::noise::{prologue, Initiator, NoiseIdentity};
use codexbox::relay::registry_api::ConnectResponse;
use codexbox::relay::registry_client::{AuthHeaders, RegistryClient, RegistryError};
use codexbox::relay::socket::{dial, DialError};

fn registry(rendezvous: &Rendezvous, env: &str, token: Option<&str>) -> RegistryClient {
    let auth = token.map(AuthHeaders::bearer).unwrap_or_default();
    RegistryClient::new(&rendezvous.url, env, auth).expect("registry client")
}

/// Opens a socket from a fresh bundle and sends `resume` + a handshake whose
/// msg1 carries `authorization` (the bundle's when `None`). Returns the
/// stream id and what came back: `Ok(msg2)` or `Err(reset reason)`.
async fn handshake(
    bundle: &ConnectResponse,
    identity: &NoiseIdentity,
    authorization: Option<&str>,
) -> (String, Result<Vec<u8>, String>) {
    let mut ws = dial(&bundle.url).await.expect("dial");
    let stream_id = uuid::Uuid::new_v4().to_string();
    let p = prologue(
        &bundle.environment_id,
        &bundle.executor_registration_id,
        &stream_id,
    );
    let key = bundle.executor_public_key.decode().expect("key");
    let auth = authorization.unwrap_or(&bundle.harness_key_authorization);
    let (_, msg1) = Initiator::start(identity, &key, &p, auth.as_bytes()).expect("msg1");
    for frame in [
        RelayMessageFrame::resume(&stream_id, 0),
        RelayMessageFrame::handshake(&stream_id, msg1, 0),
    ] {
        ws.send(Message::binary(frame.to_bytes()))
            .await
            .expect("send");
    }
    loop {
        let frame = next_frame(&mut ws).await.expect("an answer");
        match frame.body {
            Some(Body::Handshake(h)) => return (stream_id, Ok(h.payload)),
            Some(Body::Reset(r)) => return (stream_id, Err(r.reason)),
            _ => {}
        }
    }
}

/// A bridge client still gets work done: the services kept serving.
async fn still_serving(rendezvous: &Rendezvous, env: &str) {
    let bridge = Bridge::start(&rendezvous.url, env, &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;
    client.call("process/start", sh("ok", "echo alive")).await;
    let events = client.events_until_closed("ok").await;
    assert!(crate::common::client::output_of(&events).contains("alive"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_decide_who_may_register_and_connect_and_reload_on_sighup() {
    let mut file = tempfile::NamedTempFile::new().expect("token file");
    writeln!(
        file,
        "# test tokens\nexec-tok env-t executor\nharn-tok env-t harness"
    )
    .expect("write");
    let path = file.path().to_string_lossy().into_owned();
    let mut rendezvous = Rendezvous::start(&["--tokens", &path]);

    let mut wrong = Executor::spawn(&rendezvous.url, "env-t", &[], &[("CODEX_API_KEY", "nope")]);
    let status = wrong.proc.wait().expect("the executor exits");
    assert!(!status.success());
    assert!(
        wrong.proc.stderr().contains("environment registry authentication error: environment registry authentication failed (401 Unauthorized)"),
        "{}",
        wrong.proc.stderr()
    );
    let _executor = Executor::start(
        &rendezvous.url,
        "env-t",
        &[],
        &[("CODEX_API_KEY", "exec-tok")],
    );

    let key = NoiseIdentity::generate()
        .expect("identity")
        .public_key()
        .encode();
    let status_of = |err: RegistryError| match err {
        RegistryError::Authentication { status, .. } => status,
        other => panic!("unexpected {other}"),
    };
    let refused = registry(&rendezvous, "env-t", None)
        .connect(&key)
        .await
        .unwrap_err();
    assert_eq!(status_of(refused), "401 Unauthorized");
    let refused = registry(&rendezvous, "env-t", Some("exec-tok"))
        .connect(&key)
        .await
        .unwrap_err();
    assert_eq!(
        status_of(refused),
        "403 Forbidden",
        "an executor token cannot connect"
    );
    let refused = registry(&rendezvous, "env-other", Some("harn-tok"))
        .connect(&key)
        .await
        .unwrap_err();
    assert_eq!(
        status_of(refused),
        "403 Forbidden",
        "tokens are per environment"
    );
    registry(&rendezvous, "env-t", Some("harn-tok"))
        .connect(&key)
        .await
        .expect("harness token");

    // A new token works once the file is reloaded.
    writeln!(file, "late-tok * harness").expect("append");
    let refused = registry(&rendezvous, "env-t", Some("late-tok"))
        .connect(&key)
        .await;
    assert!(refused.is_err());
    let pid = nix::unistd::Pid::from_raw(rendezvous.proc.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    rendezvous.proc.wait_stderr("token file reloaded", 1);
    registry(&rendezvous, "env-t", Some("late-tok"))
        .connect(&key)
        .await
        .expect("reloaded token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_expired_urls_are_refused_at_the_upgrade() {
    let rendezvous = Rendezvous::start(&["--url-ttl-secs", "1"]);
    let _executor = Executor::start(&rendezvous.url, "env-u", &[], &[]);
    let identity = NoiseIdentity::generate().expect("identity");
    let bundle = registry(&rendezvous, "env-u", None)
        .connect(&identity.public_key().encode())
        .await
        .expect("bundle");
    let forged = bundle.url.replace("role=harness", "role=environment");
    assert!(matches!(dial(&forged).await, Err(DialError::Rejected(401))));
    let (head, _) = bundle.url.rsplit_once("&sig=").expect("signed URL");
    assert!(matches!(
        dial(&format!("{head}&sig=AAAA")).await,
        Err(DialError::Rejected(401))
    ));
    assert!(matches!(dial(head).await, Err(DialError::Rejected(400))));
    // The same URL stops working once it expires (bounded wait for the clock).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match dial(&bundle.url).await {
            Err(DialError::Rejected(401)) => break,
            Ok(_) => assert!(Instant::now() < deadline, "the URL never expired"),
            Err(other) => panic!("unexpected {other}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    still_serving(&rendezvous, "env-u").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_key_needs_its_own_authorization() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-k", &[], &[]);
    let alice = NoiseIdentity::generate().expect("identity");
    let mallory = NoiseIdentity::generate().expect("identity");
    let client = registry(&rendezvous, "env-k", None);
    let alice_bundle = client
        .connect(&alice.public_key().encode())
        .await
        .expect("bundle");
    let mallory_bundle = client
        .connect(&mallory.public_key().encode())
        .await
        .expect("bundle");

    let (_, forged) = handshake(&mallory_bundle, &mallory, Some("hka1.9999999999.AAAA")).await;
    assert_eq!(forged.unwrap_err(), "noise_relay_protocol_error");
    // Alice's authorization is bound to Alice's key.
    let (_, stolen) = handshake(
        &mallory_bundle,
        &mallory,
        Some(&alice_bundle.harness_key_authorization),
    )
    .await;
    assert_eq!(stolen.unwrap_err(), "noise_relay_protocol_error");
    let (_, fine) = handshake(&alice_bundle, &alice, None).await;
    assert_eq!(fine.expect("msg2").len(), 3424);
    // An authorization above 4096 bytes is refused before the registry is asked.
    let validations = rendezvous
        .proc
        .stderr()
        .matches("harness key validated")
        .count();
    let huge = "a".repeat(4097);
    let (_, oversized) = handshake(&alice_bundle, &alice, Some(&huge)).await;
    assert_eq!(oversized.unwrap_err(), "noise_relay_protocol_error");
    assert_eq!(
        rendezvous
            .proc
            .stderr()
            .matches("harness key validated")
            .count(),
        validations,
        "validate was not called"
    );
    still_serving(&rendezvous, "env-k").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_streams_cannot_be_claimed_or_replayed() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-c", &[], &[]);
    let mut owner = ReferenceHarness::connect(&rendezvous.url, "env-c").await;
    owner
        .call("initialize", serde_json::json!({"clientName": "owner"}))
        .await;

    // Another harness (with its own valid URL) claims the live stream id.
    let intruder = NoiseIdentity::generate().expect("identity");
    let bundle = registry(&rendezvous, "env-c", None)
        .connect(&intruder.public_key().encode())
        .await
        .expect("bundle");
    let mut ws = dial(&bundle.url).await.expect("dial");
    ws.send(Message::binary(
        RelayMessageFrame::resume(&owner.stream_id, 0).to_bytes(),
    ))
    .await
    .expect("send");
    let answer = next_frame(&mut ws).await.expect("answer");
    assert!(
        matches!(answer.body, Some(Body::Reset(ref r)) if r.reason == "stream_in_use"),
        "{answer:?}"
    );
    // A replayed handshake for the live stream is refused the same way.
    let p = prologue(
        &bundle.environment_id,
        &bundle.executor_registration_id,
        &owner.stream_id,
    );
    let key = bundle.executor_public_key.decode().expect("key");
    let (_, msg1) = Initiator::start(&intruder, &key, &p, b"x").expect("msg1");
    ws.send(Message::binary(
        RelayMessageFrame::handshake(&owner.stream_id, msg1, 0).to_bytes(),
    ))
    .await
    .expect("send");
    let answer = next_frame(&mut ws).await.expect("answer");
    assert!(matches!(answer.body, Some(Body::Reset(ref r)) if r.reason == "stream_in_use"));
    // The owner is undisturbed.
    owner
        .send(serde_json::json!({"method": "initialized", "params": {}}))
        .await;
    let status = owner
        .call("environment/status", serde_json::json!({}))
        .await;
    assert_eq!(status["status"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_malformed_frames_are_refused_and_service_goes_on() {
    let rendezvous = Rendezvous::start(&[]);
    let mut executor = Executor::start(&rendezvous.url, "env-m", &[], &[]);
    let identity = NoiseIdentity::generate().expect("identity");
    let client = registry(&rendezvous, "env-m", None);

    // Larger than the 256 KiB frame limit: the rendezvous drops the socket.
    let bundle = client
        .connect(&identity.public_key().encode())
        .await
        .expect("bundle");
    let mut ws = dial(&bundle.url).await.expect("dial");
    let _ = ws.send(Message::binary(vec![0u8; 300 * 1024])).await;
    assert!(next_frame(&mut ws).await.is_none(), "the socket is closed");

    // Garbage that is not a frame: dropped, then the socket is closed.
    let bundle = client
        .connect(&identity.public_key().encode())
        .await
        .expect("bundle");
    let mut ws = dial(&bundle.url).await.expect("dial");
    for _ in 0..8 {
        let _ = ws.send(Message::binary(vec![0xff; 64])).await;
    }
    assert!(next_frame(&mut ws).await.is_none(), "the socket is closed");

    // Malformed handshakes reach the executor: each is reset, and the eighth
    // failure makes the rendezvous close that harness socket. The executor
    // keeps its own socket.
    let bundle = client
        .connect(&identity.public_key().encode())
        .await
        .expect("bundle");
    let mut ws = dial(&bundle.url).await.expect("dial");
    for i in 0..7 {
        let stream = format!("bad-{i}");
        ws.send(Message::binary(
            RelayMessageFrame::resume(&stream, 0).to_bytes(),
        ))
        .await
        .expect("send");
        ws.send(Message::binary(
            RelayMessageFrame::handshake(&stream, vec![1; 4000], 0).to_bytes(),
        ))
        .await
        .expect("send");
        let answer = next_frame(&mut ws).await.expect("answer");
        assert!(matches!(answer.body, Some(Body::Reset(_))), "{answer:?}");
    }
    let last = "bad-7";
    ws.send(Message::binary(
        RelayMessageFrame::handshake(last, vec![1; 4000], 0).to_bytes(),
    ))
    .await
    .expect("send");
    let closed = tokio::time::timeout(WAIT, async {
        while let Some(Ok(message)) = ws.next().await {
            if message.is_close() {
                break;
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the rendezvous closes the harness socket");
    executor.proc.wait_stderr("refused a relay handshake", 8);
    assert_eq!(
        executor.proc.stderr().matches(EXECUTOR_CONNECTED).count(),
        1
    );
    // Data for a stream the executor does not know is reset too.
    let bundle = client
        .connect(&identity.public_key().encode())
        .await
        .expect("bundle");
    let mut ws = dial(&bundle.url).await.expect("dial");
    ws.send(Message::binary(
        RelayMessageFrame::resume("early", 0).to_bytes(),
    ))
    .await
    .expect("send");
    ws.send(Message::binary(
        RelayMessageFrame::data("early", 0, 0, 1, vec![1; 40]).to_bytes(),
    ))
    .await
    .expect("send");
    let answer = next_frame(&mut ws).await.expect("answer");
    assert!(matches!(answer.body, Some(Body::Reset(_))), "{answer:?}");
    still_serving(&rendezvous, "env-m").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_serves_at_most_128_streams() {
    let rendezvous = Rendezvous::start(&["--max-streams-per-socket", "1"]);
    let _executor = Executor::start(&rendezvous.url, "env-128", &[], &[]);
    let mut open = Vec::new();
    for _ in 0..128 {
        open.push(ReferenceHarness::connect(&rendezvous.url, "env-128").await);
    }
    let refused = ReferenceHarness::try_connect(&rendezvous.url, "env-128").await;
    assert_eq!(refused.err().as_deref(), Some("noise_relay_protocol_error"));
    // Closing one makes room (the rendezvous resets it towards the executor).
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ReferenceHarness::try_connect(&rendezvous.url, "env-128").await {
            Ok(_) => break,
            Err(_) => assert!(Instant::now() < deadline, "no room after a stream closed"),
        }
    }
}
