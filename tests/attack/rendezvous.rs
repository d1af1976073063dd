//! Attacks on `codexbox rendezvous`, through the real binary while a real
//! executor serves. Who may use a rendezvous started without a token file
//! on loopback: another local user (uid 65534 through `setpriv`) and a
//! sandboxed command with network access (each launcher) can neither
//! register an environment (taking over its streams) nor run a command on
//! a registered executor, while the owner's codexbox peers find the
//! published tokens by themselves; browser origins are refused. Denial of
//! service: requests that never finish (a body that never comes, a head or
//! body trickled a byte at a time) against the connection slots; one
//! harness token claiming every stream or opening socket after socket; one
//! harness sending garbage handshakes next to another harness's stream;
//! and registrations with long ids, or never followed by an executor.
//! Request framing: two lengths, a length with chunked framing, an unknown
//! transfer coding and an oversize head are refused, never guessed. Each
//! attack is paired with the legitimate work that must still get through.

use std::io::Write;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::common::client::{BIN, WAIT};
use crate::common::net::trickle_until_closed;
use crate::common::redteam::{against, available, networked_workspace_sh, Launcher, Tree};
use crate::common::reference_relay::ReferenceHarness;
use crate::common::relay::{Executor, Rendezvous, EXECUTOR_CONNECTED};
use crate::common::shell::{finish, run, Run};
use codexbox::relay::frame::{Body, RelayMessageFrame};
use codexbox::relay::noise::NoiseIdentity;
use codexbox::relay::registry_api::ConnectResponse;
use codexbox::relay::registry_client::{AuthHeaders, RegistryClient, RegistryError};
use codexbox::relay::socket::{dial, DialError, RelaySocket};
use codexbox::relay::Dialect;

/// A token file with the given lines, kept while the test runs.
fn token_file(lines: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("token file");
    file.write_all(lines.as_bytes()).expect("write tokens");
    file
}

fn path_of(file: &tempfile::NamedTempFile) -> String {
    file.path().to_string_lossy().into_owned()
}

/// Opens a TCP connection to the rendezvous and writes `bytes` on it.
async fn send_raw(rendezvous: &Rendezvous, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(rendezvous.addr())
        .await
        .expect("connect");
    stream.write_all(bytes).await.expect("write");
    stream
}

/// What the rendezvous answered on `stream`: `Some(status)`, or `None` when
/// it closed the connection without an answer. Panics when nothing happens
/// within the bounded wait.
async fn answer_of(stream: &mut TcpStream) -> Option<u16> {
    let mut received = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let read = tokio::time::timeout(WAIT, stream.read(&mut chunk)).await;
        let n = match read {
            Ok(Ok(n)) => n,
            Ok(Err(_)) => 0,
            Err(_) => panic!(
                "no answer and no close within {WAIT:?}; received {:?}",
                String::from_utf8_lossy(&received)
            ),
        };
        if n == 0 || received.windows(4).any(|w| w == b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&received);
            return text
                .strip_prefix("HTTP/1.1 ")
                .and_then(|rest| rest.get(..3))
                .and_then(|code| code.parse().ok());
        }
        received.extend_from_slice(chunk.get(..n).unwrap_or_default());
    }
}

/// The whole answer to `GET /readyz`: status and JSON body.
async fn readyz(rendezvous: &Rendezvous) -> (u16, serde_json::Value) {
    let mut stream = send_raw(rendezvous, b"GET /readyz HTTP/1.1\r\nHost: r\r\n\r\n").await;
    let mut text = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut text))
        .await
        .expect("readyz answered in time")
        .expect("read readyz");
    let text = String::from_utf8_lossy(&text).into_owned();
    let status = text
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, serde_json::from_str(body).unwrap_or_default())
}

/// Polls `/readyz` until `figure` reaches `wanted` (bounded).
async fn wait_for_figure(rendezvous: &Rendezvous, figure: &str, wanted: u64) {
    let deadline = Instant::now() + WAIT * 3;
    loop {
        let (_, body) = readyz(rendezvous).await;
        if body[figure].as_u64() == Some(wanted) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz {figure} never reached {wanted}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn registry(rendezvous: &Rendezvous, env: &str, token: Option<&str>) -> RegistryClient {
    let auth = token.map(AuthHeaders::bearer).unwrap_or_default();
    RegistryClient::new(&rendezvous.url, env, auth).expect("registry client")
}

/// A fresh harness bundle for `token`.
async fn bundle(rendezvous: &Rendezvous, env: &str, token: Option<&str>) -> ConnectResponse {
    let identity = NoiseIdentity::generate().expect("identity");
    registry(rendezvous, env, token)
        .connect(&identity.public_key().encode())
        .await
        .expect("bundle")
}

async fn send_frame(ws: &mut RelaySocket, frame: RelayMessageFrame) {
    ws.send(Message::binary(frame.to_bytes()))
        .await
        .expect("send frame");
}

/// The stream and reason of the next reset on `ws` (other frames are
/// skipped), or `None` once the rendezvous closed the socket. Panics when
/// neither comes within the bounded wait.
async fn next_reset(ws: &mut RelaySocket) -> Option<(String, String)> {
    loop {
        let message = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("a frame or the close in time");
        let bytes = match message {
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return None,
            Some(Ok(Message::Binary(bytes))) => bytes,
            Some(Ok(_)) => continue,
        };
        let frame = RelayMessageFrame::parse(&bytes, Dialect::Reference).expect("a relay frame");
        if let Some(Body::Reset(reset)) = frame.body {
            return Some((frame.stream_id, reset.reason));
        }
    }
}

/// A harness with `token` opens a stream and gets an answer through it.
async fn harness_gets_through(rendezvous: &Rendezvous, env: &str, token: Option<&str>) {
    let auth = token.map(AuthHeaders::bearer).unwrap_or_default();
    let mut harness = ReferenceHarness::connect_with(&rendezvous.url, env, auth).await;
    let result = harness
        .call("initialize", serde_json::json!({"clientName": "legit"}))
        .await;
    assert!(result["sessionId"].is_string(), "{result}");
}

const SLOW_BODY_UNAUTHENTICATED: &[u8] =
    b"POST /cloud/environment/e1/register HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_never_finish_cannot_hold_the_connection_slots() {
    let tokens = token_file("exec-tok e1 executor\nharn-tok e1 harness\n");
    let rendezvous = Rendezvous::start(&["--max-connections", "8", "--tokens", &path_of(&tokens)]);

    // Without a token the body is never waited for: 401 right after the head.
    for _ in 0..8 {
        let mut stream = send_raw(&rendezvous, SLOW_BODY_UNAUTHENTICATED).await;
        assert_eq!(answer_of(&mut stream).await, Some(401));
    }

    // Holders of every slot: heads that never end, and bodies (with a valid
    // token) that never come. None of them is ever completed.
    let mut holders = Vec::new();
    for i in 0..16 {
        let bytes: &[u8] = if i % 2 == 0 {
            b"POST /cloud/environment/e1/register HTTP/1.1\r\nHost: r\r\nX-Slow: "
        } else {
            b"POST /cloud/environment/e1/register HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer exec-tok\r\nContent-Length: 100\r\n\r\n{"
        };
        holders.push(send_raw(&rendezvous, bytes).await);
    }

    // A real executor still registers and connects, /readyz answers, and a
    // harness gets its work done.
    let _executor = Executor::start(&rendezvous.url, "e1", &[], &[("CODEX_API_KEY", "exec-tok")]);
    let (status, body) = readyz(&rendezvous).await;
    assert_eq!(status, 200, "{body}");
    harness_gets_through(&rendezvous, "e1", Some("harn-tok")).await;
    // The held connections were closed to make room, without an answer.
    for stream in holders.iter_mut().take(8) {
        assert_eq!(answer_of(stream).await, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_trickled_a_byte_at_a_time_is_cut_at_the_deadline() {
    let rendezvous = Rendezvous::start(&["--request-timeout-secs", "2"]);
    let _executor = Executor::start(&rendezvous.url, "e-slow", &[], &[]);
    // Every byte arrives well within any per-read timeout; the whole request never does.
    assert!(
        trickle_until_closed(rendezvous.addr(), b"GET /readyz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa").await,
        "a trickled head is cut"
    );
    let mut body =
        b"POST /cloud/environment/e-slow/register HTTP/1.1\r\nContent-Length: 60000\r\n\r\n"
            .to_vec();
    body.extend(vec![b' '; 60000]);
    assert!(
        trickle_until_closed(rendezvous.addr(), &body).await,
        "a trickled body is cut"
    );
    assert_eq!(readyz(&rendezvous).await.0, 200);
    harness_gets_through(&rendezvous, "e-slow", None).await;
}

/// Claims `count` fresh streams on `ws` with `resume` alone.
async fn claim(ws: &mut RelaySocket, prefix: &str, count: usize) {
    for i in 0..count {
        send_frame(ws, RelayMessageFrame::resume(&format!("{prefix}-{i}"), 0)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_harness_token_cannot_claim_every_stream() {
    let tokens = token_file("exec-tok e2 executor\ngreedy-tok e2 harness\nother-tok e2 harness\n");
    // Claims outlive the test: nothing here races their expiry.
    let rendezvous = Rendezvous::start(&[
        "--tokens",
        &path_of(&tokens),
        "--max-streams",
        "8",
        "--max-streams-per-token",
        "4",
        "--claim-ttl-secs",
        "3600",
    ]);
    let _executor = Executor::start(&rendezvous.url, "e2", &[], &[("CODEX_API_KEY", "exec-tok")]);

    // One socket of the greedy token claims 16 streams with `resume` alone:
    // past its share every claim is refused.
    let greedy = bundle(&rendezvous, "e2", Some("greedy-tok")).await;
    let mut ws = dial(&greedy.url).await.expect("dial");
    claim(&mut ws, "claim", 16).await;
    for _ in 0..12 {
        let (stream, reason) = next_reset(&mut ws).await.expect("a reset");
        assert_eq!(reason, "stream_limit", "{stream}");
    }
    // More sockets of the same token are refused at the upgrade.
    let mut sockets = Vec::new();
    let refused_socket = loop {
        let url = bundle(&rendezvous, "e2", Some("greedy-tok")).await.url;
        match dial(&url).await {
            Ok(ws) => sockets.push(ws),
            Err(err) => break err,
        }
        assert!(sockets.len() < 8, "every socket of the token was accepted");
    };
    assert!(
        matches!(refused_socket, DialError::Rejected(429)),
        "{refused_socket}"
    );

    // Another harness still opens a stream and works through it.
    harness_gets_through(&rendezvous, "e2", Some("other-tok")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_claims_expire_and_give_the_token_its_share_back() {
    let tokens = token_file("exec-tok e5 executor\ngreedy-tok e5 harness\n");
    let rendezvous = Rendezvous::start(&[
        "--tokens",
        &path_of(&tokens),
        "--max-streams-per-token",
        "4",
        "--claim-ttl-secs",
        "1",
    ]);
    let _executor = Executor::start(&rendezvous.url, "e5", &[], &[("CODEX_API_KEY", "exec-tok")]);
    let greedy = bundle(&rendezvous, "e5", Some("greedy-tok")).await;
    let mut ws = dial(&greedy.url).await.expect("dial");
    // Four claims fill the token's share; the fifth is refused, unless the
    // first ones already expired when it came (either is right here: the
    // limit itself is the test above).
    claim(&mut ws, "claim", 5).await;
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 5 {
        let (stream, reason) = next_reset(&mut ws).await.expect("a reset per claim");
        answers.insert(stream, reason);
    }
    for i in 0..4 {
        assert_eq!(
            answers[&format!("claim-{i}")],
            "claim_expired",
            "an unused claim is reset once it expires: {answers:?}"
        );
    }
    assert!(
        ["stream_limit", "claim_expired"].contains(&answers["claim-4"].as_str()),
        "{answers:?}"
    );
    // The token has its share back: a real stream opens.
    harness_gets_through(&rendezvous, "e5", Some("greedy-tok")).await;
}

/// One socket sends garbage handshakes on fresh streams until it is closed;
/// returns how many resets it saw.
async fn garbage_handshakes(rendezvous: &Rendezvous, env: &str) -> usize {
    let attacker = bundle(rendezvous, env, None).await;
    let mut ws = dial(&attacker.url).await.expect("dial");
    let mut resets = 0;
    for i in 0..32 {
        let stream = format!("garbage-{i}-{}", uuid::Uuid::new_v4());
        let frames = [
            RelayMessageFrame::resume(&stream, 0),
            RelayMessageFrame::handshake(&stream, vec![7; 3600], 0),
        ];
        for frame in frames {
            if ws.send(Message::binary(frame.to_bytes())).await.is_err() {
                return resets;
            }
        }
        match next_reset(&mut ws).await {
            Some(_) => resets += 1,
            None => return resets,
        }
    }
    panic!("the socket was never closed after {resets} failed handshakes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_handshakes_from_one_harness_leave_other_streams_alone() {
    let rendezvous = Rendezvous::start(&[]);
    let mut executor = Executor::start(&rendezvous.url, "e3", &[], &[]);
    let mut victim = ReferenceHarness::connect(&rendezvous.url, "e3").await;
    victim
        .call("initialize", serde_json::json!({"clientName": "victim"}))
        .await;

    // Three sockets, each closed by the rendezvous at its own failure budget.
    for _ in 0..3 {
        let resets = garbage_handshakes(&rendezvous, "e3").await;
        assert!(
            (7..=8).contains(&resets),
            "{resets} resets before the close"
        );
    }

    // The victim's reference-dialect stream lives on, on the same executor socket.
    victim
        .send(serde_json::json!({"method": "initialized", "params": {}}))
        .await;
    let status = victim
        .call("environment/status", serde_json::json!({}))
        .await;
    assert_eq!(status["status"], "ready");
    assert_eq!(
        executor.proc.stderr().matches(EXECUTOR_CONNECTED).count(),
        1
    );
    executor.proc.wait_stderr("refused a relay handshake", 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_environment_ids_are_refused_and_idle_environments_forgotten() {
    let rendezvous = Rendezvous::start(&["--environment-ttl-secs", "1"]);
    let key = NoiseIdentity::generate()
        .expect("identity")
        .public_key()
        .encode();

    let long = "x".repeat(300);
    match registry(&rendezvous, &long, None).register(&key).await {
        Err(RegistryError::Http {
            status_code,
            message,
            ..
        }) => {
            assert_eq!(status_code, 400);
            assert!(message.contains("256 bytes"), "{message}");
        }
        other => panic!("a 300-byte id was not refused: {other:?}"),
    }

    let _executor = Executor::start(&rendezvous.url, "e-live", &[], &[]);
    for i in 0..50 {
        let id = format!("{i:0>256}");
        registry(&rendezvous, &id, None)
            .register(&key)
            .await
            .expect("a 256-byte id registers");
    }
    // No executor ever connects for them: they are forgotten; the live one stays.
    wait_for_figure(&rendezvous, "environments", 1).await;
    harness_gets_through(&rendezvous, "e-live", None).await;
    assert_eq!(readyz(&rendezvous).await.1["environments"], 1);
}

/// The unprivileged local user of these attacks.
const NOBODY: &str = "65534";

fn text(path: &std::path::Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Where a rendezvous at `url` publishes the token for `suffix`
/// (`rendezvous-executor` or `rendezvous-harness`).
fn published_token_file(url: &str, suffix: &str) -> std::path::PathBuf {
    let dir = codexbox::sandbox::state::state_dir().expect("runtime directory");
    let addr = url.trim_start_matches("http://");
    dir.join("listeners").join(format!("{addr}.{suffix}"))
}

/// `codexbox ARGS…` as uid 65534, with no credential and a home of nothing.
fn as_nobody(args: &[&str]) -> Run {
    let mut attack = std::process::Command::new("setpriv");
    attack
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", BIN])
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("CODEX_API_KEY")
        .env_remove("CODEX_ACCESS_TOKEN")
        .env_remove("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN")
        .env("HOME", "/nonexistent")
        .env("CODEX_HOME", "/nonexistent");
    finish(&mut attack, None, &format!("{args:?} as uid 65534"))
}

fn assert_unauthorized(run: &Run, what: &str) {
    assert_ne!(run.code, 0, "{what}: {}", run.stderr);
    assert!(
        run.stderr.contains("401 Unauthorized"),
        "{what}: the rendezvous was not reached and refused: {}",
        run.stderr
    );
}

#[test]
fn another_user_can_neither_register_nor_reach_environments_of_a_default_rendezvous() {
    use std::os::unix::fs::MetadataExt;
    let tree = Tree::new();
    let rendezvous = Rendezvous::start(&[]);
    let url = rendezvous.url.as_str();
    let _executor = Executor::start(url, "env-owned", &[], &[]);

    // Run a command on the owner's executor.
    let marker = tree.outside.join("by-nobody");
    let touch = [
        "exec",
        "--registry",
        url,
        "--environment-id",
        "env-owned",
        "--",
    ];
    let mut attack = touch.to_vec();
    attack.extend(["touch", text(&marker)]);
    assert_unauthorized(&as_nobody(&attack), "exec as uid 65534");
    assert!(!marker.exists(), "uid 65534 ran a command on the executor");
    // Register the owner's environment, which would take its streams over.
    let takeover = as_nobody(&[
        "exec-server",
        "--remote",
        url,
        "--environment-id",
        "env-owned",
    ]);
    assert_unauthorized(&takeover, "a registration as uid 65534");

    // The same command as the owner lands, with no token handed over.
    let by_owner = tree.outside.join("by-owner");
    let mut owned = touch.to_vec();
    owned.extend(["touch", text(&by_owner)]);
    let ran = run(&owned, None);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(by_owner.exists(), "the owner's environment was not reached");
    // Found in files only the owner may read.
    for suffix in ["rendezvous-executor", "rendezvous-harness"] {
        let file = published_token_file(url, suffix);
        let meta = std::fs::symlink_metadata(&file).expect("a published token");
        assert!(meta.file_type().is_file());
        assert_eq!(meta.mode() & 0o777, 0o600, "{}", file.display());
        assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw());
    }
}

/// From inside `codexbox sandbox -P workspace --network`, neither the
/// published tokens nor a registration or a command through the owner's
/// loopback rendezvous: the tokens are in the private runtime directory
/// the sandbox hides.
fn sandboxed_command_cannot_use_a_default_rendezvous(launcher: Launcher) {
    let tree = Tree::new();
    let rendezvous = Rendezvous::start(&[]);
    let url = rendezvous.url.as_str();
    let _executor = Executor::start(url, "env-sandboxed", &[], &[]);
    let marker = tree.outside.join("by-sandboxed-command");
    let tokens = ["rendezvous-executor", "rendezvous-harness"]
        .map(|suffix| published_token_file(url, suffix).display().to_string());
    let script = format!(
        "cat {tokens} 2>/dev/null && echo token-readable
timeout 20 \"$0\" exec-server --remote {url} --environment-id env-sandboxed
echo registered=$?
exec \"$0\" exec --registry {url} --environment-id env-sandboxed -- touch {marker}",
        tokens = tokens.join(" "),
        marker = text(&marker),
    );
    let attacked = networked_workspace_sh(&tree, launcher, &script, "a sandboxed command");
    let out = attacked.stdout_text();
    assert!(
        !out.contains("token-readable"),
        "{launcher:?}: the sandbox read a published token"
    );
    assert!(
        out.contains("registered=1"),
        "{launcher:?}: the registration was not refused: {out} {}",
        attacked.stderr
    );
    assert_unauthorized(&attacked, &format!("{launcher:?} sandbox"));
    assert_eq!(
        attacked.stderr.matches("401 Unauthorized").count(),
        2,
        "{launcher:?}: both calls refused: {}",
        attacked.stderr
    );
    assert!(
        !marker.exists(),
        "{launcher:?}: a sandboxed command ran a command on the executor"
    );
}

against!(sandboxed_command_cannot_use_a_default_rendezvous: system, builtin, landlock);

/// `GET /readyz` with `Origin: origin`; the status.
async fn readyz_from(rendezvous: &Rendezvous, origin: &str) -> Option<u16> {
    let request = format!("GET /readyz HTTP/1.1\r\nHost: r\r\nOrigin: {origin}\r\n\r\n");
    let mut stream = send_raw(rendezvous, request.as_bytes()).await;
    answer_of(&mut stream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_origins_are_refused_unless_allowed() {
    let rendezvous = Rendezvous::start(&["--allow-origin", "https://console.example"]);
    assert_eq!(
        readyz_from(&rendezvous, "https://evil.example").await,
        Some(403)
    );
    assert_eq!(readyz_from(&rendezvous, "null").await, Some(403));
    assert_eq!(
        readyz_from(&rendezvous, "https://console.example").await,
        Some(200)
    );
    assert_eq!(readyz(&rendezvous).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_only_when_told_and_it_says_so() {
    let key = NoiseIdentity::generate()
        .expect("identity")
        .public_key()
        .encode();
    // A default rendezvous refuses a caller without its token...
    let guarded = Rendezvous::start(&[]);
    let refused = registry(&guarded, "e-open", Some("guess"))
        .register(&key)
        .await;
    assert!(
        matches!(refused, Err(RegistryError::Authentication { .. })),
        "{refused:?}"
    );
    // ...and one told to serve everyone says so, and does.
    let mut open = Rendezvous::start(&["--insecure-no-auth"]);
    open.proc
        .wait_stderr("without tokens (--insecure-no-auth)", 1);
    assert!(!published_token_file(&open.url, "rendezvous-harness").exists());
    let stranger = RegistryClient::new(&open.url, "e-open", AuthHeaders::bearer("anything"))
        .expect("registry client");
    stranger.register(&key).await.expect("an open registry");
}

#[test]
fn the_published_tokens_go_with_the_rendezvous() {
    let mut rendezvous = Rendezvous::start(&[]);
    let files = ["rendezvous-executor", "rendezvous-harness"]
        .map(|suffix| published_token_file(&rendezvous.url, suffix));
    assert!(files.iter().all(|file| file.exists()), "{files:?}");
    // Stopped as soon as it printed its address: it ends cleanly.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(rendezvous.proc.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = rendezvous.proc.wait().expect("the rendezvous exits");
    assert!(status.success(), "{status}: {}", rendezvous.proc.stderr());
    for file in &files {
        assert!(!file.exists(), "{} outlived its rendezvous", file.display());
    }
}

/// A register call for `e1` with the executor token, with `framing`
/// (headers saying how long the body is) before a valid body.
fn register_request(framing: &str) -> Vec<u8> {
    let body = serde_json::to_string(&codexbox::relay::registry_api::RegisterRequest {
        security_profile: codexbox::relay::registry_api::SECURITY_PROFILE.into(),
        executor_public_key: NoiseIdentity::generate()
            .expect("identity")
            .public_key()
            .encode(),
    })
    .expect("register body");
    let framing = framing.replace("{len}", &body.len().to_string());
    format!(
        "POST /cloud/environment/e1/register HTTP/1.1\r\nHost: r\r\n\
         Authorization: Bearer exec-tok\r\n{framing}\r\n{body}"
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_requests_of_ambiguous_length_or_oversize_heads_are_refused() {
    let tokens = token_file("exec-tok e1 executor\n");
    let rendezvous = Rendezvous::start(&["--tokens", &path_of(&tokens)]);
    let status_of = |bytes: Vec<u8>| {
        let rendezvous = &rendezvous;
        async move { answer_of(&mut send_raw(rendezvous, &bytes).await).await }
    };
    // Two lengths: which one a front end believes decides where the next
    // request starts. Neither is taken.
    assert_eq!(
        status_of(register_request(
            "Content-Length: {len}\r\nContent-Length: 1\r\n"
        ))
        .await,
        Some(400)
    );
    // A length and chunked framing: the length is not believed, and a
    // registry call needs one.
    assert_eq!(
        status_of(register_request(
            "Content-Length: {len}\r\nTransfer-Encoding: chunked\r\n"
        ))
        .await,
        Some(411)
    );
    assert_eq!(
        status_of(register_request("Transfer-Encoding: gzip\r\n")).await,
        Some(400)
    );
    let huge = format!(
        "X-Pad: {}\r\nContent-Length: {{len}}\r\n",
        "a".repeat(20_000)
    );
    assert_eq!(status_of(register_request(&huge)).await, Some(431));
    // The same call, framed once, registers.
    assert_eq!(
        status_of(register_request("Content-Length: {len}\r\n")).await,
        Some(200)
    );
    assert_eq!(readyz(&rendezvous).await.0, 200);
}
