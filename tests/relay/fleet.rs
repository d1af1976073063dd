//! Rendezvous replicas as a fleet behind HAProxy (`balance uri depth 3`,
//! `hash-type consistent`), all on 127.0.0.1: replicas sharing a signing
//! key accept each other's URLs and others refuse them; a replica killed
//! during a stream loses no process and no byte; a rolling restart of
//! every replica fails no harness call; a replica added takes over the
//! environments the hash ring gives it; registrations beyond the admission
//! rate are told to come back and executors do.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::client::collect;
use crate::common::client::{BIN, WAIT};
use crate::common::fleet::{haproxy_available, Fleet};
use crate::common::relay::{Executor, Rendezvous, EXECUTOR_CONNECTED};
use codexbox::client::{ConnectOptions, Notification, RemoteExecServerClient, StartParams};
use codexbox::relay::harness::HarnessConfig;
use codexbox::relay::noise::NoiseIdentity;
use codexbox::relay::registry_client::{AuthHeaders, RegistryClient, RegistryError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// A library client of `environment` through the fleet (reliable dialect).
async fn harness(
    fleet: &Fleet,
    environment: &str,
) -> (RemoteExecServerClient, mpsc::Receiver<Notification>) {
    let registry =
        RegistryClient::new(&fleet.url(), environment, AuthHeaders::bearer(&fleet.token))
            .expect("registry");
    let config = HarnessConfig::new(registry, NoiseIdentity::generate().expect("identity"), true);
    RemoteExecServerClient::connect(ConnectOptions::relay(config), "fleet-harness")
        .await
        .expect("connect through the fleet")
}

/// Runs `echo environment` on `environment` through a new client.
async fn echo_through(fleet: &Fleet, environment: &str) {
    let (client, mut events) = harness(fleet, environment).await;
    let start = StartParams::new("echo", ["echo", environment]);
    client.process_start(&start).await.expect("start echo");
    let out = collect(&mut events, "echo", None).await;
    assert_eq!(String::from_utf8_lossy(&out), format!("{environment}\n"));
    client.close().await;
}

/// The status line and body of a WebSocket upgrade to `url`'s path at `addr`.
fn upgrade_answer(addr: SocketAddr, url: &str) -> String {
    let path = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|at| &rest[at..]))
        .expect("a path");
    let mut socket = std::net::TcpStream::connect(addr).expect("connect");
    socket.set_read_timeout(Some(WAIT)).expect("timeout");
    write!(
        socket,
        "GET {path} HTTP/1.1\r\nHost: r\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .expect("write");
    let mut answer = String::new();
    let _ = socket.read_to_string(&mut answer);
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_a_key_file_accept_each_others_urls_and_others_refuse() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("dir");
    let write_key = |name: &str, byte: u8| {
        let path = dir.path().join(name);
        std::fs::write(&path, [byte; 32]).expect("key");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        path.to_string_lossy().into_owned()
    };
    let (shared, other) = (write_key("shared", 1), write_key("other", 2));
    let a = Rendezvous::start(&["--signing-key-file", &shared, "--insecure-no-auth"]);
    let b = Rendezvous::start(&["--signing-key-file", &shared, "--insecure-no-auth"]);
    let c = Rendezvous::start(&["--signing-key-file", &other, "--insecure-no-auth"]);
    let key = NoiseIdentity::generate()
        .expect("identity")
        .public_key()
        .encode();
    let registration = RegistryClient::new(&a.url, "env-key", AuthHeaders::default())
        .expect("registry")
        .register(&key)
        .await
        .expect("register at a");
    assert!(
        registration
            .url
            .contains("/cloud/environment/env-key/relay?"),
        "{}",
        registration.url
    );
    // b verifies a's signature: the URL is refused only because b does not
    // hold that registration (the executor then registers there).
    let at_b = upgrade_answer(b.addr(), &registration.url);
    assert!(at_b.starts_with("HTTP/1.1 401"), "{at_b}");
    assert!(at_b.contains("stale_registration"), "{at_b}");
    // c, with another key, finds the signature forged.
    let at_c = upgrade_answer(c.addr(), &registration.url);
    assert!(at_c.starts_with("HTTP/1.1 401"), "{at_c}");
    assert!(at_c.contains("invalid_url"), "{at_c}");

    // A world-readable key file and a short key are refused at start.
    let open = dir.path().join("open");
    std::fs::write(&open, [3u8; 32]).expect("key");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let short = write_key("short", 4);
    std::fs::write(&short, [4u8; 16]).expect("short key");
    for (path, expected) in [
        (open.to_string_lossy().into_owned(), "other users"),
        (short, "at least 32"),
    ] {
        let out = std::process::Command::new(BIN)
            .args([
                "rendezvous",
                "--insecure-no-auth",
                "--signing-key-file",
                &path,
            ])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run rendezvous");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(out.stdout.is_empty(), "nothing served");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_during_a_stream_loses_no_process_and_no_byte() {
    if !haproxy_available() {
        return;
    }
    let mut fleet = Fleet::new(3, 3);
    let environments = ["env-k0", "env-k1", "env-k2", "env-k3"];
    let mut executors: Vec<Executor> = environments.iter().map(|e| fleet.executor(e, 2)).collect();
    let (client, mut events) = harness(&fleet, "env-k0").await;
    let holder = fleet.holder("env-k0").expect("a replica holds env-k0");

    let script = "echo ready; read x; seq 1 100000; echo mid; read y; seq 100001 150000";
    let start = StartParams::new("p", ["sh", "-c", script]).pipe_stdin(true);
    client.process_start(&start).await.expect("start");
    let mut out = collect(&mut events, "p", Some("ready\n")).await;
    client
        .process_write("p", b"go\n", false)
        .await
        .expect("write");
    out.extend(collect(&mut events, "p", Some("5000\n")).await);

    // The replica holding the environment dies while output streams.
    fleet.kill(holder);
    out.extend(collect(&mut events, "p", Some("mid\n")).await);
    // The write reaches the same process through another replica.
    client
        .process_write("p", b"go\n", false)
        .await
        .expect("write after the kill");
    out.extend(collect(&mut events, "p", None).await);

    let mut expected: String = (1..=100_000).map(|n| format!("{n}\n")).collect();
    expected.insert_str(0, "ready\n");
    expected.push_str("mid\n");
    expected.extend((100_001..=150_000).map(|n| format!("{n}\n")));
    assert!(
        out == expected.as_bytes(),
        "byte-exact output ({} vs {} bytes)",
        out.len(),
        expected.len()
    );
    assert!(
        client.reconnects() >= 1,
        "the client came back through another replica"
    );

    // The executor registered with another replica, and every environment
    // is reachable again through the fleet.
    executors[0].proc.wait_stderr("registering again", 1);
    let now = fleet
        .holder("env-k0")
        .expect("a replica holds env-k0 again");
    assert_ne!(now, holder);
    for environment in environments {
        echo_through(&fleet, environment).await;
    }
    client.close().await;
    executors.clear();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_replica_fails_no_harness_call() {
    if !haproxy_available() {
        return;
    }
    let mut fleet = Fleet::new(3, 3);
    let environments = ["env-r0", "env-r1", "env-r2", "env-r3", "env-r4"];
    let _executors: Vec<Executor> = environments.iter().map(|e| fleet.executor(e, 2)).collect();
    let mut clients = Vec::new();
    for environment in environments {
        clients.push(harness(&fleet, environment).await);
    }
    // One process per environment stays alive across the whole restart.
    for (client, _) in &clients {
        let start = StartParams::new("cat", ["cat"]).pipe_stdin(true);
        client.process_start(&start).await.expect("start cat");
    }
    for replica in 0..3 {
        fleet.kill(replica);
        fleet.start(replica);
        for (round, (client, events)) in clients.iter_mut().enumerate() {
            let line = format!("replica {replica} round {round}\n");
            client
                .process_write("cat", line.as_bytes(), false)
                .await
                .unwrap_or_else(|err| panic!("write after restarting replica {replica}: {err}"));
            let echoed = collect(events, "cat", Some(&line)).await;
            assert!(
                String::from_utf8_lossy(&echoed).ends_with(&line),
                "{:?}",
                String::from_utf8_lossy(&echoed)
            );
        }
    }
    for environment in environments {
        echo_through(&fleet, environment).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_added_takes_over_the_environments_the_ring_gives_it() {
    if !haproxy_available() {
        return;
    }
    // Three servers in the balancer, the third not running yet: the ring
    // spreads the environments over the first two.
    let mut fleet = Fleet::new(3, 2);
    let environments: Vec<String> = (0..8).map(|i| format!("env-s{i}")).collect();
    let _executors: Vec<Executor> = environments.iter().map(|e| fleet.executor(e, 2)).collect();
    for environment in &environments {
        echo_through(&fleet, environment).await;
    }
    assert_eq!(fleet.replicas[2].as_ref().map(|_| ()), None);

    fleet.start(2);
    // Executors whose environment the ring moved register with the new
    // replica at their next periodic registration...
    let moved = wait_for_registrations(&fleet, 2, &environments);
    assert!(!moved.is_empty());
    // ...and every environment, moved or not, is reachable.
    for environment in &environments {
        echo_through(&fleet, environment).await;
    }
}

/// Waits (bounded) until replica `i` has registered some of `environments`;
/// returns them.
fn wait_for_registrations(fleet: &Fleet, i: usize, environments: &[String]) -> Vec<String> {
    let deadline = std::time::Instant::now() + WAIT * 3;
    loop {
        let moved: Vec<String> = environments
            .iter()
            .filter(|e| fleet.registrations(i, e) > 0)
            .cloned()
            .collect();
        if !moved.is_empty() {
            return moved;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no environment moved to replica {i}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_beyond_the_rate_get_429_and_executors_come_back() {
    let rendezvous = Rendezvous::start(&["--insecure-no-auth", "--max-registrations-per-sec", "1"]);
    let key = NoiseIdentity::generate()
        .expect("identity")
        .public_key()
        .encode();
    let registry =
        RegistryClient::new(&rendezvous.url, "env-rate", AuthHeaders::default()).expect("registry");
    let mut refused = None;
    for _ in 0..50 {
        if let Err(err) = registry.register(&key).await {
            refused = Some(err);
            break;
        }
    }
    match refused {
        Some(
            err @ RegistryError::Http {
                status_code: 429, ..
            },
        ) => {
            let wait = err.retry_after().expect("Retry-After");
            assert!(wait.as_secs() >= 1, "{wait:?}");
            assert!(err.to_string().contains("rate_limited"), "{err}");
        }
        other => panic!("no 429 beyond the rate: {other:?}"),
    }

    // An executor told to come back (by a balancer in front answering its
    // first registrations with 429) waits and registers.
    let front = RefuseFirst::start(rendezvous.addr(), 2).await;
    let mut executor = Executor::spawn(&front.url(), "env-rate", &[], &[]);
    executor.proc.wait_stderr(EXECUTOR_CONNECTED, 1);
    assert_eq!(
        executor
            .proc
            .stderr()
            .matches("registration refused for now")
            .count(),
        2
    );
    assert_eq!(front.refused.load(Ordering::SeqCst), 2);
}

/// A TCP front that answers the first `count` registrations with `429
/// Retry-After: 1` and forwards everything else to `target`.
struct RefuseFirst {
    addr: SocketAddr,
    refused: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RefuseFirst {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RefuseFirst {
    async fn start(target: SocketAddr, count: usize) -> RefuseFirst {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let refused = Arc::new(AtomicUsize::new(0));
        let counter = refused.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut head = vec![0u8; 16 * 1024];
                    let Ok(n) = inbound.read(&mut head).await else {
                        return;
                    };
                    head.truncate(n);
                    let text = String::from_utf8_lossy(&head);
                    let register = text.starts_with("POST ") && text.contains("/register ");
                    if register && counter.fetch_add(1, Ordering::SeqCst) < count {
                        let _ = inbound
                            .write_all(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                            .await;
                        return;
                    }
                    if register {
                        counter.fetch_sub(1, Ordering::SeqCst);
                    }
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    if outbound.write_all(&head).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                });
            }
        });
        RefuseFirst {
            addr,
            refused,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}
