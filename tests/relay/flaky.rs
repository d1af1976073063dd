//! A flaky path between the peers and the rendezvous, with the real
//! binaries: every relay connection (executor's and harness's alike) goes
//! through a proxy that cuts it after a byte budget, or after a random
//! lifetime drawn from the test's seed. The reliable relay must still make
//! progress (no livelock of resends into a stream whose peer is away) and
//! deliver output byte-exact, and new local connections through `connect`
//! must open their streams while the path flaps, or while the executor is
//! not connected yet.

use std::time::Duration;

use crate::common::client::{output_of, sh, Raw};
use crate::common::relay::{assert_seq_output, Bridge, Executor, Faults, Proxy, Rendezvous};

const KIB: usize = 1024;
/// More than the 4 MiB a reliable sender keeps unacknowledged.
const OUTPUT_BYTES: usize = 6_000_000;

/// Runs a command printing [`OUTPUT_BYTES`] through `connect` with every
/// relay connection going through a proxy with `faults`, and checks the
/// output arrives whole and exact; then opens a second local connection.
async fn output_is_exact_through(faults: Faults, seed: u64) {
    let proxy = Proxy::start(faults, seed);
    let rendezvous = Rendezvous::start(&["--public-url", &proxy.url()]);
    proxy.set_target(rendezvous.addr());
    let _executor = Executor::start(&rendezvous.url, "env-flaky", &[], &[]);
    let bridge = Bridge::start(&rendezvous.url, "env-flaky", &[], &[]);
    let mut client = bridge.client().await;
    client.handshake().await;
    client
        .call(
            "process/start",
            sh("big", &format!("seq 1 2000000 | head -c {OUTPUT_BYTES}")),
        )
        .await;
    assert_seq_output(&client.events_until_closed("big").await, OUTPUT_BYTES);

    // A new local connection opens its own stream while the path flaps.
    let mut second: Raw = bridge.client().await;
    second.handshake().await;
    second
        .call("process/start", sh("small", "echo second"))
        .await;
    let events = second.events_until_closed("small").await;
    assert_eq!(output_of(&events), "second\n");
    assert!(
        proxy.cuts() >= 4,
        "the proxy cut connections ({} cuts)",
        proxy.cuts()
    );
    eprintln!("{} cuts of {} connections", proxy.cuts(), proxy.accepted());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_exact_when_every_connection_is_cut_after_512_kib() {
    let faults = Faults {
        budget: Some(512 * KIB),
        ..Faults::default()
    };
    output_is_exact_through(faults, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_exact_when_every_connection_is_cut_after_3_mib() {
    let faults = Faults {
        budget: Some(3 * 1024 * KIB),
        ..Faults::default()
    };
    output_is_exact_through(faults, 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_is_exact_when_connections_live_20_to_200_ms() {
    let faults = Faults {
        lifetime: Some((Duration::from_millis(20), Duration::from_millis(200))),
        ..Faults::default()
    };
    output_is_exact_through(faults, 7).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_stream_waits_for_an_executor_that_is_not_there_yet() {
    let rendezvous = Rendezvous::start(&[]);
    let mut bridge = Bridge::start(&rendezvous.url, "env-late", &[], &[]);
    let (url, token) = (bridge.url.clone(), bridge.token());
    let client = tokio::spawn(async move {
        let mut client = Raw::connect_authorized(&url, token.as_deref()).await;
        client.handshake().await;
        client.call("process/start", sh("late", "echo here")).await;
        output_of(&client.events_until_closed("late").await)
    });
    // connect was answered 409 environment_offline and keeps trying...
    bridge.proc.wait_stderr("relay stream not open yet", 1);
    assert!(
        bridge.proc.stderr().contains("environment_offline"),
        "{}",
        bridge.proc.stderr()
    );
    // ...until the executor comes.
    let _executor = Executor::start(&rendezvous.url, "env-late", &[], &[]);
    assert_eq!(client.await.expect("client"), "here\n");
}
