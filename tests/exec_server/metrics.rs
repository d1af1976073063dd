//! `GET /metrics` of the real exec-server, on its WebSocket listener and on
//! the `--metrics-listen` side port of a `--remote` executor: the figures
//! move by exactly the processes started (plain and sandboxed, with their
//! exits and denials), the `fs/*` calls and the session resumes that
//! happened; the page follows the exposition grammar; a listener with a
//! token refuses a scrape without it; and a side port on a public address
//! without a token is refused at start.

use std::net::SocketAddr;

use crate::common::client::{sh, start_params, Raw, Server};
use crate::common::fs::{canonical, restricted, sandbox, sandbox_available, special, workdir};
use crate::common::metrics::{get, scrape, scrape_until, Exposition};
use crate::common::relay::{Executor, Rendezvous};
use crate::common::shell::run;
use serde_json::json;

const EXITED: &str = "codexbox_exec_processes_exited_total";
const STARTED: &str = "codexbox_exec_processes_started_total";
const RUNNING: &str = "codexbox_exec_processes_running";
const FS_CALLS: &str = "codexbox_exec_fs_calls_total";
const RESUMES: &str = "codexbox_exec_session_resumes_total";

fn addr_of(server: &Server) -> SocketAddr {
    server.addr().parse().expect("IP:PORT")
}

fn exited(page: &Exposition, result: &str) -> f64 {
    page.value(EXITED, &[("result", result)])
}

fn fs_calls(page: &Exposition, method: &str, result: &str) -> f64 {
    page.value(FS_CALLS, &[("method", method), ("result", result)])
}

#[tokio::test]
async fn processes_fs_calls_and_resumes_move_the_figures_by_what_happened() {
    let server = Server::start(&[]);
    let addr = addr_of(&server);
    let empty = scrape(addr, None);
    assert_eq!(empty.type_of(STARTED), Some("counter"));
    assert_eq!(empty.type_of(RUNNING), Some("gauge"));
    assert_eq!(
        empty.type_of("codexbox_exec_sandbox_start_seconds"),
        Some("histogram")
    );
    assert_eq!(exited(&empty, "success"), 0.0);

    let mut raw = Raw::connect(&server.url).await;
    let session = raw.handshake().await;
    let scripts = [
        ("ok", "exit 0"),
        ("fails", "exit 3"),
        ("killed", "kill -9 $$"),
        ("missing", "exec /nonexistent/codexbox-metrics"),
    ];
    for (id, script) in scripts {
        raw.call("process/start", sh(id, script)).await;
        raw.events_until_closed(id).await;
    }
    // A command that cannot be launched at all is not started.
    raw.call_err(
        "process/start",
        start_params("unlaunchable", &["/nonexistent/codexbox-metrics"]),
    )
    .await;
    // One still running while scraped.
    raw.call("process/start", sh("sleeper", "sleep 30")).await;
    let running = scrape_until(addr, None, |page| exited(page, "not_found") == 1.0);
    assert_eq!(running.value(RUNNING, &[]), 1.0);
    assert_eq!(running.value(STARTED, &[("sandboxed", "false")]), 5.0);
    assert_eq!(exited(&running, "success"), 1.0);
    assert_eq!(exited(&running, "failure"), 1.0);
    assert_eq!(exited(&running, "signal"), 1.0);
    raw.call("process/terminate", json!({"processId": "sleeper"}))
        .await;
    let settled = scrape_until(addr, None, |page| page.value(RUNNING, &[]) == 0.0);
    assert_eq!(exited(&settled, "signal"), 2.0);
    assert_eq!(exited(&settled, "failed_to_start"), 1.0);
    assert_eq!(settled.value(STARTED, &[("sandboxed", "false")]), 5.0);

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("f");
    raw.call("fs/writeFile", json!({"path": file, "dataBase64": "aGk="}))
        .await;
    raw.call("fs/readFile", json!({"path": file})).await;
    raw.call_err("fs/getMetadata", json!({"path": dir.path().join("absent")}))
        .await;
    let files = scrape(addr, None);
    assert_eq!(fs_calls(&files, "fs/writeFile", "ok"), 1.0);
    assert_eq!(fs_calls(&files, "fs/readFile", "ok"), 1.0);
    assert_eq!(fs_calls(&files, "fs/getMetadata", "error"), 1.0);
    assert_eq!(fs_calls(&files, "fs/getMetadata", "ok"), 0.0);

    raw.close().await;
    let mut again = Raw::connect(&server.url).await;
    again.handshake_resume(Some(&session)).await;
    let resumed = scrape(addr, None);
    assert_eq!(resumed.value(RESUMES, &[("result", "ok")]), 1.0);
    let refused_before = resumed.value(RESUMES, &[("result", "refused")]);
    let mut stranger = Raw::connect(&server.url).await;
    stranger
        .call_err(
            "initialize",
            json!({"clientName": "t", "resumeSessionId": "no-such-session"}),
        )
        .await;
    let refused = scrape(addr, None);
    assert_eq!(
        refused.value(RESUMES, &[("result", "refused")]),
        refused_before + 1.0
    );
    assert_eq!(refused.value(RESUMES, &[("result", "ok")]), 1.0);
}

#[tokio::test]
async fn sandboxed_starts_are_timed_and_denials_counted() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start(&[]);
    let addr = addr_of(&server);
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    let work_dir = workdir();
    let outside_dir = workdir();
    let work = canonical(&work_dir);
    let outside = canonical(&outside_dir);
    let policy = sandbox(
        restricted(&[(&work, "write")], &[special("root", "read")]),
        &work,
    );
    let scripts = [
        (
            "allowed",
            format!("echo ok > '{}'", work.join("a").display()),
        ),
        (
            "denied",
            format!("echo x > '{}'", outside.join("planted").display()),
        ),
    ];
    for (id, script) in scripts {
        let mut params = sh(id, &script);
        params["cwd"] = json!(work);
        params["sandbox"] = policy.clone();
        raw.call("process/start", params).await;
        raw.events_until_closed(id).await;
    }
    assert!(!outside.join("planted").exists());
    let page = scrape_until(addr, None, |page| page.value(RUNNING, &[]) == 0.0);
    assert_eq!(page.value(STARTED, &[("sandboxed", "true")]), 2.0);
    assert_eq!(page.value(STARTED, &[("sandboxed", "false")]), 0.0);
    assert_eq!(page.value("codexbox_exec_sandbox_denials_total", &[]), 1.0);
    assert_eq!(exited(&page, "success"), 1.0);
    assert_eq!(exited(&page, "failure"), 1.0);
    let histogram = "codexbox_exec_sandbox_start_seconds";
    assert_eq!(page.value(&format!("{histogram}_count"), &[]), 2.0);
    assert_eq!(
        page.value(&format!("{histogram}_bucket"), &[("le", "+Inf")]),
        2.0
    );
    let sum = page.value(&format!("{histogram}_sum"), &[]);
    assert!(sum > 0.0, "{}", page.text());
    // The buckets run from 0.5 ms to 1 s.
    for bound in ["0.0005", "1"] {
        assert!(
            page.text()
                .contains(&format!("{histogram}_bucket{{le=\"{bound}\"}}")),
            "no {bound} bucket in\n{}",
            page.text()
        );
    }
}

#[test]
fn a_token_on_the_listener_guards_the_metrics_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").expect("write token");
    let token_path = token_file.to_str().expect("utf-8");
    let server = Server::start(&["--auth-token-file", token_path]);
    let addr = addr_of(&server);
    assert_eq!(get(addr, "/metrics", None).0, 401);
    assert_eq!(get(addr, "/metrics", Some("wrong")).0, 401);
    assert_eq!(get(addr, "/readyz", None).0, 200);
    scrape(addr, Some("s3cret"));

    // The side port of an executor follows the same rule, and a public one
    // without a token is refused before anything is bound.
    let refused = Server::try_start("ws://127.0.0.1:0", &["--metrics-listen", "0.0.0.0:0"], &[])
        .err()
        .expect("a public metrics port without a token is refused");
    assert!(
        refused.contains("refusing to listen on non-loopback address 0.0.0.0:0"),
        "{refused}"
    );
}

/// The `http://IP:PORT` an executor logged for its side port.
fn metrics_address(executor: &mut Executor) -> SocketAddr {
    const LOGGED: &str = "serving metrics on http://";
    executor.proc.wait_stderr(LOGGED, 1);
    let stderr = executor.proc.stderr();
    let rest = stderr
        .split(LOGGED)
        .nth(1)
        .unwrap_or_else(|| panic!("no metrics address in {stderr}"));
    let end = rest.find('/').unwrap_or(rest.len());
    rest[..end].parse().expect("IP:PORT")
}

#[test]
fn a_remote_executor_serves_its_figures_on_a_side_port() {
    let rendezvous = Rendezvous::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "side-secret\n").expect("write token");
    let mut executor = Executor::start(
        &rendezvous.url,
        "env-side",
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--auth-token-file",
            token_file.to_str().expect("utf-8"),
        ],
        &[],
    );
    let side = metrics_address(&mut executor);
    assert_eq!(get(side, "/metrics", None).0, 401);
    // Only metrics here: no WebSocket, no JSON-RPC.
    assert_eq!(get(side, "/", Some("side-secret")).0, 404);
    let before = scrape(side, Some("side-secret"));
    assert_eq!(before.value(STARTED, &[("sandboxed", "false")]), 0.0);
    let through = run(
        &[
            "exec",
            "--registry",
            &rendezvous.url,
            "--environment-id",
            "env-side",
            "--",
            "sh",
            "-c",
            "exit 4",
        ],
        None,
    );
    assert_eq!(through.code, 4, "{through:?}");
    let after = scrape_until(side, Some("side-secret"), |page| {
        page.value(RUNNING, &[]) == 0.0
    });
    assert_eq!(after.value(STARTED, &[("sandboxed", "false")]), 1.0);
    assert_eq!(exited(&after, "failure"), 1.0);
}
