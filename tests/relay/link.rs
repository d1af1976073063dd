//! The WebSocket link on both relay servers: the rendezvous pings a relay
//! socket and closes it once it goes silent; `codexbox connect` does the
//! same to a silent local client, saying why, and refuses one local
//! connection more than `--max-connections` with 503 until one leaves.

use std::net::SocketAddr;

use crate::common::relay::{Bridge, Executor, Rendezvous};
use crate::common::silent::{
    assert_pinged_then_closed, silent_until_closed, upgrade, wait_until_upgraded,
};
use codexbox::relay::noise::NoiseIdentity;
use codexbox::relay::registry_client::{AuthHeaders, RegistryClient};

fn bridge_addr(bridge: &Bridge) -> SocketAddr {
    bridge
        .url
        .trim_start_matches("ws://")
        .trim_end_matches('/')
        .parse()
        .expect("bridge address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendezvous_pings_a_silent_relay_socket_then_closes_it() {
    let rendezvous = Rendezvous::start(&["--insecure-no-auth", "--peer-timeout-secs", "1"]);
    let registry = RegistryClient::new(&rendezvous.url, "env-silent", AuthHeaders::default())
        .expect("registry client");
    let identity = NoiseIdentity::generate().expect("identity");
    let registration = registry
        .register(&identity.public_key().encode())
        .await
        .expect("register");
    let base = format!("ws://{}", rendezvous.addr());
    let path = registration
        .url
        .strip_prefix(&base)
        .unwrap_or_else(|| panic!("socket URL {} not on {base}", registration.url));
    let frames = silent_until_closed(rendezvous.addr(), path, None).await;
    assert_pinged_then_closed(&frames, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_closes_a_silent_local_client_saying_why() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-quiet", &[], &[]);
    let bridge = Bridge::start(
        &rendezvous.url,
        "env-quiet",
        &["--peer-timeout-secs", "1"],
        &[],
    );
    let token = bridge.token();
    let frames = silent_until_closed(bridge_addr(&bridge), "/", token.as_deref()).await;
    assert_pinged_then_closed(&frames, Some((1001, "no frame from the peer within 1 s")));
    // The bridge goes on serving.
    let mut client = bridge.client().await;
    client.handshake().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_refuses_one_connection_too_many_until_one_leaves() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-full", &[], &[]);
    let bridge = Bridge::start(
        &rendezvous.url,
        "env-full",
        &["--max-connections", "1"],
        &[],
    );
    let token = bridge.token();
    let addr = bridge_addr(&bridge);
    let mut first = bridge.client().await;
    first.handshake().await;
    let (status, _) = upgrade(addr, "/", token.as_deref()).await;
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    first.close().await;
    wait_until_upgraded(addr, token.as_deref()).await;
}
