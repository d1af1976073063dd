//! The library surface of docs/library.md: a server embedded in this test process
//! with `codexbox::server::bind` + `Server::run`, driven with `ExecServerClient`, using
//! the `protocol` and `policy` types; stopping it closes its
//! connections and leaves no task behind (its processes' network proxies
//! included), and two embedded servers share no fs-helper.

use std::path::PathBuf;
use std::time::Duration;

use codexbox::client::{ConnectOptions, ExecServerClient, ReadParams, StartParams};
use codexbox::policy::{PermissionProfile, SandboxPolicy};
use codexbox::protocol::sandbox::FileSystemSandboxContext;
use codexbox::runtime_paths::ExecServerRuntimePaths;
use codexbox::server::{bind, ListenUrl, ServerConfig};

/// Failure guard for every wait; only reached when something is broken.
const WAIT: Duration = Duration::from_secs(10);

async fn connect(url: &str) -> ExecServerClient {
    match ExecServerClient::connect_and_initialize(ConnectOptions::new(url), "library-test").await {
        Ok(client) => client,
        Err(err) => panic!("cannot connect to the embedded server: {err}"),
    }
}

/// Runtime paths for an embedded server: helper modes re-execute the real
/// binary, not this test.
fn paths() -> ExecServerRuntimePaths {
    ExecServerRuntimePaths {
        codex_self_exe: PathBuf::from(env!("CARGO_BIN_EXE_codexbox")),
        codex_linux_sandbox_exe: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_server_runs_a_process_and_touches_files() {
    let dir = tempfile::tempdir().unwrap();
    // Bound before it serves: the real address is known up front.
    let server = bind(paths(), ServerConfig::new(ListenUrl::default()))
        .await
        .unwrap();
    let addr = server.local_addr().expect("a TCP listener");
    assert!(addr.ip().is_loopback() && addr.port() != 0);
    let url = server.url();
    assert_eq!(url, format!("ws://{addr}"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    let client = connect(&url).await;
    assert!(client.session_id().is_some());
    assert_eq!(client.environment_status().await.unwrap(), "ready");

    let id = client
        .process_start(&StartParams::new(
            "p1",
            ["/bin/sh", "-c", "printf embedded; exit 7"],
        ))
        .await
        .unwrap();
    let mut output = Vec::new();
    let mut after_seq = 0;
    let result = loop {
        let read = tokio::time::timeout(
            WAIT,
            client.process_read(&ReadParams {
                process_id: id.clone(),
                after_seq: Some(after_seq),
                max_bytes: None,
                wait_ms: Some(2_000),
            }),
        )
        .await
        .expect("process/read did not answer")
        .unwrap();
        for chunk in &read.chunks {
            output.extend_from_slice(&chunk.chunk);
        }
        after_seq = read.next_seq.saturating_sub(1);
        if read.closed {
            break read;
        }
    };
    assert_eq!(output, b"embedded");
    assert_eq!(result.exit_code, Some(7));

    let file = dir.path().join("note.txt");
    let file = file.to_str().unwrap();
    client.fs_write_file(file, b"hi", None).await.unwrap();
    assert_eq!(client.fs_read_file(file, None).await.unwrap(), b"hi");
    // The file: URI dialect reaches the same file.
    let uri = codexbox::wire_path::to_file_uri(std::ffi::OsStr::new(file));
    assert_eq!(client.fs_read_file(&uri, None).await.unwrap(), b"hi");

    // The shutdown future stops it cleanly.
    let _ = stop.send(());
    let outcome = tokio::time::timeout(WAIT, server).await;
    assert!(matches!(outcome, Ok(Ok(Ok(())))), "{outcome:?}");
}

#[test]
fn sandbox_policy_types_round_trip_the_reference_json() {
    let policy: SandboxPolicy = serde_json::from_value(serde_json::json!({
        "type": "workspace-write", "writable_roots": ["file:///tmp/w"], "network_access": false
    }))
    .unwrap();
    assert!(!policy.network().is_enabled());
    let profile: PermissionProfile = serde_json::from_value(serde_json::json!({
        "type": "managed",
        "file_system": {"type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}
        ]},
        "network": "restricted"
    }))
    .unwrap();
    let back = serde_json::to_value(&profile).unwrap();
    assert_eq!(back["file_system"]["entries"][0]["access"], "read");
}

/// The task of an embedded server's `run`.
type Serving = tokio::task::JoinHandle<Result<(), codexbox::server::ServerError>>;

/// A server with default settings serving on this runtime: its URL, what
/// stops it, and its task.
async fn serve_default() -> (String, tokio::sync::oneshot::Sender<()>, Serving) {
    let server = bind(paths(), ServerConfig::new(ListenUrl::default()))
        .await
        .unwrap();
    let url = server.url();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    (url, stop, serving)
}

/// Runs `work` to completion on a current-thread runtime of its own.
fn on_own_runtime<F: std::future::Future>(work: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(work)
}

/// A client on its own thread and runtime: connects, handshakes, says so
/// on `connected`, then reads (answering pings) until the server closes;
/// returns the close code.
fn client_until_closed(url: String, connected: std::sync::mpsc::Sender<()>) -> Option<u16> {
    on_own_runtime(async move {
        let mut raw = crate::common::client::Raw::connect(&url).await;
        raw.handshake().await;
        let _ = connected.send(());
        raw.close_code().await
    })
}

/// Serves an embedded server on a runtime of its own, runs `client` on a
/// thread against it until the client says it is ready, checks `serving`
/// with `busy`, stops the server and asserts that no task is left on the
/// runtime; returns what the client returned.
fn stop_with_a_client<T: Send + 'static>(
    client: fn(String, std::sync::mpsc::Sender<()>) -> T,
    busy: fn(usize) -> bool,
) -> T {
    on_own_runtime(async move {
        let (url, stop, serving) = serve_default().await;
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let client = std::thread::spawn(move || client(url, ready_tx));
        tokio::task::spawn_blocking(move || ready.recv_timeout(WAIT))
            .await
            .unwrap()
            .expect("the client is ready");
        let metrics = tokio::runtime::Handle::current().metrics();
        assert!(busy(metrics.num_alive_tasks()), "the server is busy");
        let _ = stop.send(());
        let outcome = tokio::time::timeout(WAIT, serving).await;
        assert!(matches!(outcome, Ok(Ok(Ok(())))), "{outcome:?}");
        // Every connection task, and every task they started, has ended.
        assert_eq!(metrics.num_alive_tasks(), 0);
        tokio::task::spawn_blocking(move || client.join())
            .await
            .unwrap()
            .expect("client thread")
    })
}

#[test]
fn a_stopped_embedded_server_closes_its_connections_and_leaves_no_task_behind() {
    // More than the server's own task: a connection is being served.
    let code = stop_with_a_client(client_until_closed, |alive| alive > 1);
    assert_eq!(code, Some(1001), "closed as going away");
}

/// A client on its own thread and runtime: starts `sleep` behind a
/// network proxy (whose tasks run on the server's runtime), says so on
/// `started`, then reads until the server closes.
fn client_with_a_proxied_process(url: String, started: std::sync::mpsc::Sender<()>) {
    on_own_runtime(async move {
        let mut raw = crate::common::client::Raw::connect(&url).await;
        raw.handshake().await;
        let proxy = serde_json::json!({
            "proxy": {"enabled": true, "enableSocks5": true, "enableSocks5Udp": false,
                "allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false,
                "mode": "full", "domains": {"127.0.0.1": "allow"}, "unixSockets": null,
                "allowLocalBinding": false},
            "environmentId": "local", "executionId": "execution-1"
        });
        let started_process = raw
            .call(
                "process/start",
                serde_json::json!({"processId": "p1", "argv": ["sleep", "60"], "cwd": "/",
                    "env": {"PATH": "/usr/bin:/bin"}, "tty": false,
                    "networkProxy": proxy, "enforceManagedNetwork": true}),
            )
            .await;
        assert_eq!(started_process["processId"], "p1", "{started_process}");
        let _ = started.send(());
        raw.close_code().await;
    });
}

#[test]
fn a_stopped_embedded_server_stops_the_network_proxies_of_its_processes() {
    // The process's pump and the proxy's reporter and listeners run here.
    stop_with_a_client(client_with_a_proxied_process, |alive| alive > 3);
}

/// Pids of the fs-helper sandboxes under this process whose policy cwd is
/// `dir` (each embedded server below gets a directory of its own).
fn helpers_in(dir: &std::path::Path) -> Vec<u32> {
    let wanted = dir.as_os_str().as_encoded_bytes();
    crate::common::fs::sandbox_wrappers(std::process::id())
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.get(2) == Some(&wanted)
                && args.iter().any(|arg| *arg == b"--codex-run-as-fs-helper")
        })
        .collect()
}

/// An embedded server serving on this runtime, with a directory of its own
/// that a client reads through a sandboxed fs-helper.
struct Embedded {
    client: ExecServerClient,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: Serving,
    dir: tempfile::TempDir,
    root: PathBuf,
}

impl Embedded {
    async fn start(content: &str) -> Self {
        let (url, stop, serving) = serve_default().await;
        let dir = crate::common::fs::workdir();
        let root = crate::common::fs::canonical(&dir);
        std::fs::write(root.join("f"), content).unwrap();
        let client = connect(&url).await;
        Self {
            client,
            stop,
            serving,
            dir,
            root,
        }
    }

    /// Reads the file in a sandbox that only grants its directory, which
    /// runs in a helper of this server's pool (kept warm afterwards).
    async fn read(&self) -> Vec<u8> {
        use crate::common::fs::{restricted, sandbox};
        let ctx: FileSystemSandboxContext = serde_json::from_value(sandbox(
            restricted(&[(&self.root, "read")], &[]),
            &self.root,
        ))
        .unwrap();
        let file = self.root.join("f");
        let file = file.to_str().unwrap();
        self.client.fs_read_file(file, Some(&ctx)).await.unwrap()
    }

    fn helpers(&self) -> usize {
        helpers_in(&self.root).len()
    }

    /// Stops the server and waits for `run` to return; what is left of it
    /// (its directory) is handed back.
    async fn stop(self) -> (tempfile::TempDir, PathBuf) {
        drop(self.client);
        let _ = self.stop.send(());
        let outcome = tokio::time::timeout(WAIT, self.serving).await;
        assert!(matches!(outcome, Ok(Ok(Ok(())))), "{outcome:?}");
        (self.dir, self.root)
    }
}

#[test]
fn two_embedded_servers_share_no_fs_helpers_and_a_stopped_one_leaves_none() {
    if !crate::common::fs::sandbox_available() {
        return;
    }
    on_own_runtime(async {
        let a = Embedded::start("a").await;
        let b = Embedded::start("b").await;
        assert_eq!(a.read().await, b"a");
        assert_eq!(b.read().await, b"b");
        assert_eq!(a.helpers(), 1, "server A keeps its helper warm");
        assert_eq!(b.helpers(), 1, "server B keeps its helper warm");

        // Stopping A closes A's helpers and nothing of B's.
        let (_dir_a, root_a) = a.stop().await;
        assert_eq!(helpers_in(&root_a).len(), 0, "A's helper outlived A");
        assert_eq!(b.helpers(), 1, "B's helper went with A");
        assert_eq!(b.read().await, b"b");

        let (_dir_b, root_b) = b.stop().await;
        assert_eq!(helpers_in(&root_b).len(), 0, "B's helper outlived B");
        // No pool reaper, helper reaper or connection task is left.
        let metrics = tokio::runtime::Handle::current().metrics();
        assert_eq!(metrics.num_alive_tasks(), 0);
    });
}
