//! Attacks on codexbox's local listeners, as root. `codexbox connect`
//! serves a remote executor with its caller's registry credentials, so
//! another local user (uid 65534 through `setpriv`) and a sandboxed command
//! with network access (each launcher) must not get a command run through
//! it: before the listener required a token, `codexbox exec --url
//! ws://127.0.0.1:PORT` from either ran a command on the executor that
//! wrote outside the sandbox. The owner's `exec`, `cp` and `attach` keep
//! working without being handed the token; the token file is private, and
//! goes with the listener. The HTTP gate in front refuses oversize heads
//! and cuts trickled ones.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::client::{Raw, BIN};
use crate::common::redteam::{against, available, networked_workspace_sh, Launcher, Tree};
use crate::common::relay::{Bridge, Executor, Rendezvous};
use crate::common::shell::{finish, run, Run};

/// The unprivileged local user of these attacks.
const NOBODY: &str = "65534";

/// A rendezvous, an executor (unsandboxed, as root) and `codexbox connect`.
struct Remote {
    _rendezvous: Rendezvous,
    _executor: Executor,
    bridge: Bridge,
}

impl Remote {
    fn start(environment: &str, connect_flags: &[&str]) -> Remote {
        let rendezvous = Rendezvous::start(&[]);
        let executor = Executor::start(&rendezvous.url, environment, &[], &[]);
        let bridge = Bridge::start(&rendezvous.url, environment, connect_flags, &[]);
        Remote {
            _rendezvous: rendezvous,
            _executor: executor,
            bridge,
        }
    }

    fn url(&self) -> &str {
        &self.bridge.url
    }
}

/// `exec --url URL -- touch MARKER`: what an attacker runs.
fn touch_through<'a>(url: &'a str, marker: &'a str) -> Vec<&'a str> {
    vec!["exec", "--url", url, "--", "touch", marker]
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The HTTP status the listener answers a WebSocket upgrade with (101 when
/// it upgrades), sending `token` as a bearer token when set.
async fn upgrade_status(url: &str, token: Option<&str>) -> u16 {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Error;
    let mut request = url.into_client_request().expect("request");
    if let Some(token) = token {
        let value = format!("Bearer {token}").parse().expect("header");
        request.headers_mut().insert("authorization", value);
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok(_) => 101,
        Err(Error::Http(response)) => response.status().as_u16(),
        Err(err) => panic!("upgrade to {url}: {err}"),
    }
}

/// Where `codexbox connect` publishes the token of the listener at `url`.
fn token_file(url: &str) -> PathBuf {
    let dir = codexbox::sandbox::state::state_dir().expect("runtime directory");
    dir.join("listeners").join(url.trim_start_matches("ws://"))
}

fn assert_refused(run: &Run, what: &str) {
    assert_eq!(run.code, 255, "{what}: {}", run.stderr);
    assert!(
        run.stderr.contains("401 Unauthorized"),
        "{what}: the listener was not reached and refused: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("the server wants a bearer token"),
        "{what}: no hint: {}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_cannot_run_commands_through_connect() {
    let tree = Tree::new();
    let remote = Remote::start("env-other-user", &[]);
    let marker = tree.outside.join("by-nobody");
    let mut attack = Command::new("setpriv");
    attack
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", BIN])
        .args(touch_through(remote.url(), text(&marker)))
        .env_remove("XDG_RUNTIME_DIR")
        .env("HOME", "/nonexistent");
    let attacked = finish(&mut attack, None, "exec as uid 65534");
    assert_refused(&attacked, "uid 65534");
    assert!(!marker.exists(), "uid 65534 ran a command on the executor");

    // Bare upgrades: no token, a wrong one, the right one.
    assert_eq!(upgrade_status(remote.url(), None).await, 401);
    assert_eq!(upgrade_status(remote.url(), Some("guess")).await, 401);
    let token = remote.bridge.token().expect("a published token");
    assert_eq!(upgrade_status(remote.url(), Some(&token)).await, 101);

    // The same command as the owner does land: the attack was real.
    let by_owner = tree.outside.join("by-owner");
    let owned = run(&touch_through(remote.url(), text(&by_owner)), None);
    assert_eq!(owned.code, 0, "{}", owned.stderr);
    assert!(by_owner.exists());
}

/// From inside `codexbox sandbox -P workspace --network`, `exec --url`
/// against the owner's `connect` reaches the listener and is refused:
/// the token file is in the private runtime directory the sandbox hides.
fn sandboxed_command_cannot_run_commands_through_connect(launcher: Launcher) {
    let tree = Tree::new();
    let remote = Remote::start("env-sandboxed", &[]);
    let marker = tree.outside.join("by-sandboxed-command");
    let token = token_file(remote.url());
    let script = format!(
        "cat {} 2>/dev/null && echo token-readable; exec \"$0\" {}",
        token.display(),
        touch_through(remote.url(), text(&marker)).join(" ")
    );
    let attacked = networked_workspace_sh(&tree, launcher, &script, "exec from a sandbox");
    assert!(
        !attacked.stdout_text().contains("token-readable"),
        "{launcher:?}: the sandbox read {}",
        token.display()
    );
    assert_refused(&attacked, &format!("{launcher:?} sandbox"));
    assert!(
        !marker.exists(),
        "{launcher:?}: a sandboxed command ran a command on the executor"
    );
}

against!(sandboxed_command_cannot_run_commands_through_connect: system, builtin, landlock);

#[test]
fn the_owner_uses_connect_without_copying_a_token() {
    let tree = Tree::new();
    let remote = Remote::start("env-owner", &[]);
    let url = remote.url();

    let ran = run(
        &["exec", "--url", url, "--", "sh", "-c", "echo ran-$((6*7))"],
        None,
    );
    assert_eq!(
        (ran.code, ran.stdout_text()),
        (0, "ran-42\n".into()),
        "{}",
        ran.stderr
    );

    // cp both ways.
    let local = tree.ws.join("up.txt");
    std::fs::write(&local, "through connect\n").expect("write");
    let there = tree.outside.join("there.txt");
    let up = run(
        &[
            "cp",
            "--url",
            url,
            text(&local),
            &format!("remote:{}", text(&there)),
        ],
        None,
    );
    assert_eq!(up.code, 0, "{}", up.stderr);
    let back = tree.ws.join("back.txt");
    let down = run(
        &[
            "cp",
            "--url",
            url,
            &format!("remote:{}", text(&there)),
            text(&back),
        ],
        None,
    );
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert_eq!(
        std::fs::read_to_string(&back).ok().as_deref(),
        Some("through connect\n")
    );

    // A detached command, then attach to it.
    let detached = run(
        &[
            "exec",
            "--url",
            url,
            "--detach",
            "--",
            "sh",
            "-c",
            "echo later; exit 3",
        ],
        None,
    );
    assert_eq!(detached.code, 0, "{}", detached.stderr);
    // `codexbox attach --url URL --session S --process P --after-seq 0`.
    let line = detached.stdout_text();
    assert!(
        line.starts_with(&format!("codexbox attach --url {url} ")),
        "{line}"
    );
    let mut args = vec!["--from-start"];
    let flags: Vec<&str> = line
        .split_whitespace()
        .skip(1)
        .filter(|word| *word != "--after-seq" && *word != "0")
        .collect();
    args.splice(0..0, flags);
    let attached = run(&args, None);
    assert_eq!(attached.code, 3, "{line}: {}", attached.stderr);
    assert_eq!(attached.stdout_text(), "later\n");
}

#[test]
fn the_token_is_private_and_goes_with_the_listener() {
    use std::os::unix::fs::MetadataExt;
    let rendezvous = Rendezvous::start(&[]);
    let mut bridge = Bridge::start(&rendezvous.url, "env-token", &[], &[]);
    let file = token_file(&bridge.url);
    let meta = std::fs::symlink_metadata(&file).expect("token file");
    assert!(meta.file_type().is_file());
    assert_eq!(meta.mode() & 0o777, 0o600, "{}", file.display());
    let dir = std::fs::symlink_metadata(file.parent().expect("dir")).expect("dir");
    assert_eq!(dir.mode() & 0o777, 0o700);
    let token = bridge.token().expect("a live token");
    assert_eq!(
        std::fs::read_to_string(&file)
            .ok()
            .map(|t| t.trim().to_owned()),
        Some(token.clone())
    );
    // Published, never printed or logged (its path is logged at info).
    bridge.proc.wait_stderr(&file.display().to_string(), 1);
    assert!(!bridge.proc.stderr().contains(&token));

    // A clean stop removes it.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(bridge.proc.child.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = bridge.proc.wait().expect("connect exits");
    assert!(status.success(), "{status}: {}", bridge.proc.stderr());
    assert!(!file.exists(), "{} outlived its listener", file.display());

    // A killed one leaves a file that no client uses, removed by the next
    // listener that publishes.
    let mut killed = Bridge::start(&rendezvous.url, "env-token", &[], &[]);
    let left = token_file(&killed.url);
    killed.proc.kill();
    assert!(left.exists());
    assert_eq!(killed.token(), None, "a dead listener's token is used");
    let _next = Bridge::start(&rendezvous.url, "env-token", &[], &[]);
    assert!(!left.exists(), "{} was not pruned", left.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_no_auth_serves_any_local_process_and_says_so() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "env-open", &[], &[]);
    let mut bridge = Bridge::start(&rendezvous.url, "env-open", &["--insecure-no-auth"], &[]);
    bridge
        .proc
        .wait_stderr("without a token (--insecure-no-auth)", 1);
    assert_eq!(bridge.token(), None);
    assert!(!token_file(&bridge.url).exists());
    let mut client = Raw::connect(&bridge.url).await;
    client.handshake().await;
    let info = client.call("environment/info", serde_json::json!({})).await;
    assert!(info["shell"]["path"].is_string(), "{info}");
}

/// The exec-server's HTTP gate (the one `connect` has too): an oversize
/// head is refused and a head trickled a byte at a time is cut at the
/// head deadline; a well-formed upgrade still gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_refuses_oversize_heads_and_cuts_trickled_ones() {
    use crate::common::client::{blocking, http_status, upgrade_request, Server};
    let server = Server::start(&[]);
    let addr = server.addr().to_owned();
    let oversize = upgrade_request(&addr, &format!("X-Pad: {}\r\n", "a".repeat(20_000)));
    let to = addr.clone();
    assert_eq!(blocking(move || http_status(&to, &oversize)).await, 431);
    let socket: std::net::SocketAddr = addr.parse().expect("server address");
    let trickled = format!("GET / HTTP/1.1\r\nX-Slow: {}", "a".repeat(400));
    assert!(
        crate::common::net::trickle_until_closed(socket, trickled.as_bytes()).await,
        "a trickled head is cut"
    );
    let upgrade = upgrade_request(&addr, "");
    assert_eq!(blocking(move || http_status(&addr, &upgrade)).await, 101);
}
