//! The library surface of docs/library.md: a server embedded in this test process
//! with `codexbox::server::bind` + `Server::run`, driven with `ExecServerClient`, using
//! the `protocol` and `sandbox::policy` types.

use std::path::PathBuf;
use std::time::Duration;

use codexbox::client::{ConnectOptions, ExecServerClient, ReadParams, StartParams};
use codexbox::runtime_paths::ExecServerRuntimePaths;
use codexbox::sandbox::policy::{PermissionProfile, SandboxPolicy};
use codexbox::server::{bind, ListenUrl, ServerConfig};

/// Failure guard for every wait; only reached when something is broken.
const WAIT: Duration = Duration::from_secs(10);

async fn connect(url: &str) -> ExecServerClient {
    match ExecServerClient::connect_and_initialize(ConnectOptions::new(url), "library-test").await {
        Ok(client) => client,
        Err(err) => panic!("cannot connect to the embedded server: {err}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_server_runs_a_process_and_touches_files() {
    let dir = tempfile::tempdir().unwrap();
    let paths = ExecServerRuntimePaths {
        // Helper modes re-execute the real binary, not this test.
        codex_self_exe: PathBuf::from(env!("CARGO_BIN_EXE_codexbox")),
        codex_linux_sandbox_exe: None,
    };
    // Bound before it serves: the real address is known up front.
    let server = bind(paths, ServerConfig::new(ListenUrl::default()))
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
    let uri = codexbox::protocol::path::to_file_uri(std::ffi::OsStr::new(file));
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
