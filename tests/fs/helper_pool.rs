//! The pool of warm sandboxed fs-helpers: concurrency across distinct
//! sandboxes, reuse, a helper killed mid-request, idle expiry.

use std::sync::Arc;

use crate::common::fs::{
    b64, canonical, eventually, restricted, sandbox, sandbox_available, sandbox_wrappers,
    serving_helpers, unb64, workdir, Server,
};
use serde_json::json;

#[tokio::test]
async fn many_concurrent_calls_with_different_sandboxes_all_succeed() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let dirs: Vec<_> = (0..5).map(|_| workdir()).collect();
    for (i, dir) in dirs.iter().enumerate() {
        std::fs::write(dir.path().join("f"), format!("file {i}")).unwrap();
    }
    let mut tasks = Vec::new();
    for conn in 0..3 {
        let client = Arc::new(server.connect().await);
        for (i, dir) in dirs.iter().enumerate() {
            let root = canonical(dir);
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let ctx = sandbox(restricted(&[(&root, "write")], &[]), &root);
                for round in 0..3 {
                    let name = root.join(format!("w-{conn}-{round}"));
                    client
                        .ok(
                            "fs/writeFile",
                            json!({"path": name, "dataBase64": b64(b"w"), "sandbox": ctx}),
                        )
                        .await;
                    let read = client
                        .ok(
                            "fs/readFile",
                            json!({"path": root.join("f"), "sandbox": ctx}),
                        )
                        .await;
                    assert_eq!(unb64(&read["dataBase64"]), format!("file {i}").into_bytes());
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(
        serving_helpers(server.pid()).len() <= 5 * 4,
        "more helpers than the pool bound"
    );
    for dir in &dirs {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            // The sandbox's masks of missing metadata dirs, present while helpers run.
            .filter(|name| ![".git", ".codex", ".agents"].contains(&name.as_str()))
            .collect();
        names.sort();
        let mut expected = vec!["f".to_owned()];
        for conn in 0..3 {
            for round in 0..3 {
                expected.push(format!("w-{conn}-{round}"));
            }
        }
        expected.sort();
        assert_eq!(names, expected);
    }
}

#[tokio::test]
async fn warm_helpers_are_reused_and_expire_when_idle() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start_with_env(&[
        ("CODEXBOX_FS_HELPER_IDLE_MS", "1500"),
        ("FS_TEST_SERVER_ONLY", "must-not-reach-the-helper"),
    ]);
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let ctx = sandbox(restricted(&[(&root, "read")], &[]), &root);
    client
        .ok("fs/getMetadata", json!({"path": root, "sandbox": ctx}))
        .await;
    let first = serving_helpers(server.pid());
    assert_eq!(first.len(), 1, "one warm helper expected: {first:?}");
    // The helper's environment keeps only PATH, TMPDIR, TMP and TEMP
    // (bubblewrap adds PWD for its --chdir).
    let environ = std::fs::read(format!("/proc/{}/environ", first[0])).unwrap();
    let names: Vec<String> = environ
        .split(|b| *b == 0)
        .filter(|var| !var.is_empty())
        .map(|var| String::from_utf8_lossy(var.split(|b| *b == b'=').next().unwrap()).into_owned())
        .collect();
    assert!(names.iter().any(|name| name == "PATH"), "{names:?}");
    assert!(
        names
            .iter()
            .all(|name| ["PATH", "TMPDIR", "TMP", "TEMP", "PWD"].contains(&name.as_str())),
        "helper environment: {names:?}"
    );
    client
        .ok("fs/getMetadata", json!({"path": root, "sandbox": ctx}))
        .await;
    assert_eq!(
        serving_helpers(server.pid()),
        first,
        "the warm helper was not reused"
    );
    assert!(
        eventually(|| serving_helpers(server.pid()).is_empty()).await,
        "idle helper still running"
    );
    // After expiry a fresh helper serves the next call.
    client
        .ok("fs/getMetadata", json!({"path": root, "sandbox": ctx}))
        .await;
}

#[tokio::test]
async fn a_helper_killed_mid_request_fails_that_request_only() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = Arc::new(server.connect().await);
    let dir = workdir();
    let root = canonical(&dir);
    let fifo = root.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let ctx = sandbox(restricted(&[(&root, "write")], &[]), &root);
    // Writing a FIFO without a reader blocks the helper.
    let pending = {
        let client = client.clone();
        let ctx = ctx.clone();
        let fifo = fifo.clone();
        tokio::spawn(async move {
            client
                .call(
                    "fs/writeFile",
                    json!({"path": fifo, "dataBase64": b64(b"x"), "sandbox": ctx}),
                )
                .await
        })
    };
    assert!(
        eventually(|| serving_helpers(server.pid()).len() == 1).await,
        "no helper started"
    );
    for pid in serving_helpers(server.pid()) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    let err = pending.await.unwrap().unwrap_err();
    assert_eq!(err.code, -32603);
    assert!(
        err.message
            .starts_with("fs sandbox helper failed with status"),
        "{}",
        err.message
    );
    std::fs::write(root.join("after"), b"fine").unwrap();
    let read = client
        .ok(
            "fs/readFile",
            json!({"path": root.join("after"), "sandbox": ctx}),
        )
        .await;
    assert_eq!(unb64(&read["dataBase64"]), b"fine");
}

#[tokio::test]
async fn an_idle_helper_that_died_is_replaced() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let ctx = sandbox(restricted(&[(&root, "read")], &[]), &root);
    client
        .ok("fs/getMetadata", json!({"path": root, "sandbox": ctx}))
        .await;
    let helpers = serving_helpers(server.pid());
    assert_eq!(helpers.len(), 1, "{helpers:?}");
    assert_eq!(sandbox_wrappers(server.pid()).len(), 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(helpers[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        eventually(|| sandbox_wrappers(server.pid()).is_empty()).await,
        "the sandbox wrapper did not exit"
    );
    let meta = client
        .ok("fs/getMetadata", json!({"path": root, "sandbox": ctx}))
        .await;
    assert_eq!(meta["isDirectory"], true);
}
