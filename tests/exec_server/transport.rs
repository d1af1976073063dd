//! Transports and HTTP-level protection of the exec-server (docs/protocol.md):
//! `/readyz`, the Origin refusal, bearer-token auth, the non-loopback bind
//! rule, the Unix socket transport and the stdio transport, plus shutdown on
//! SIGTERM and stdin EOF killing every process.

use std::os::unix::fs::PermissionsExt;

use crate::common::client::*;
use codexbox::client::{ConnectOptions, ExecServerClient, ProcessEvent, StartParams};
use serde_json::json;

fn token_file(token: &str) -> (tempfile::TempDir, String) {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => panic!("tempdir: {err}"),
    };
    let path = dir.path().join("token");
    if let Err(err) = std::fs::write(&path, token) {
        panic!("write token: {err}");
    }
    let path = path.to_string_lossy().into_owned();
    (dir, path)
}

#[tokio::test]
async fn readyz_answers_200_and_any_origin_is_refused_with_403() {
    let server = Server::start(&[]);
    let addr = server.addr().to_owned();
    let ready = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    assert_eq!(
        blocking({
            let a = addr.clone();
            move || http_status(&a, &ready)
        })
        .await,
        200
    );
    let ready_origin = format!(
        "GET /readyz HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://evil.example\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(
        blocking({
            let a = addr.clone();
            move || http_status(&a, &ready_origin)
        })
        .await,
        403
    );
    let upgrade = upgrade_request(&addr, "Origin: http://evil.example\r\n");
    assert_eq!(
        blocking({
            let a = addr.clone();
            move || http_status(&a, &upgrade)
        })
        .await,
        403
    );
    let plain = upgrade_request(&addr, "");
    assert_eq!(blocking(move || http_status(&addr, &plain)).await, 101);
}

#[tokio::test]
async fn allowed_origins_may_connect() {
    let server = Server::start(&["--allow-origin", "http://ok.example"]);
    let addr = server.addr().to_owned();
    let ok = upgrade_request(&addr, "Origin: http://ok.example\r\n");
    assert_eq!(
        blocking({
            let a = addr.clone();
            move || http_status(&a, &ok)
        })
        .await,
        101
    );
    let other = upgrade_request(&addr, "Origin: http://other.example\r\n");
    assert_eq!(blocking(move || http_status(&addr, &other)).await, 403);
}

#[tokio::test]
async fn a_token_is_required_when_configured() {
    let (_dir, path) = token_file("s3cret-token");
    let server = Server::start(&["--auth-token-file", &path]);
    let addr = server.addr().to_owned();
    for headers in [
        "",
        "Authorization: Bearer wrong\r\n",
        "Authorization: s3cret-token\r\n",
    ] {
        let request = upgrade_request(&addr, headers);
        let a = addr.clone();
        assert_eq!(
            blocking(move || http_status(&a, &request)).await,
            401,
            "{headers:?}"
        );
    }
    let good = upgrade_request(&addr, "Authorization: Bearer s3cret-token\r\n");
    assert_eq!(blocking(move || http_status(&addr, &good)).await, 101);

    let mut client = match ExecServerClient::connect_with(
        ConnectOptions::new(&server.url)
            .auth_token("s3cret-token")
            .request_timeout(WAIT),
    )
    .await
    {
        Ok(client) => client,
        Err(err) => panic!("connect with token: {err}"),
    };
    assert!(client.initialize("auth", None).await.is_ok());
    assert_eq!(
        client.environment_status().await.ok().as_deref(),
        Some("ready")
    );
    assert!(
        ExecServerClient::connect(&server.url).await.is_err(),
        "no token → refused"
    );
}

#[tokio::test]
async fn the_token_can_come_from_the_environment() {
    let server = Server::start_listen(
        "ws://127.0.0.1:0",
        &[],
        &[("CODEXBOX_AUTH_TOKEN", "env-token")],
    );
    let addr = server.addr().to_owned();
    let bad = upgrade_request(&addr, "");
    assert_eq!(
        blocking({
            let a = addr.clone();
            move || http_status(&a, &bad)
        })
        .await,
        401
    );
    let good = upgrade_request(&addr, "Authorization: Bearer env-token\r\n");
    assert_eq!(blocking(move || http_status(&addr, &good)).await, 101);
}

#[tokio::test]
async fn a_non_loopback_bind_needs_a_token_or_an_explicit_opt_out() {
    let refused = Server::try_start("ws://0.0.0.0:0", &[], &[]);
    if let Ok(server) = refused {
        panic!("bound {} without a token", server.url);
    }
    let open = Server::start_listen("ws://0.0.0.0:0", &["--insecure-no-auth"], &[]);
    assert!(open.url.starts_with("ws://0.0.0.0:"), "{}", open.url);
    let (_dir, path) = token_file("tok");
    let tokened = Server::start_listen("ws://0.0.0.0:0", &["--auth-token-file", &path], &[]);
    assert!(tokened.url.starts_with("ws://0.0.0.0:"), "{}", tokened.url);
}

#[tokio::test]
async fn the_unix_socket_transport_is_private_and_serves() {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => panic!("tempdir: {err}"),
    };
    let socket = dir.path().join("exec.sock");
    let server = Server::start_unix(&socket, &[]);
    let mode = std::fs::metadata(&socket)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0);
    assert_eq!(mode, 0o600, "socket mode {mode:o}");

    let options = ConnectOptions::new(&server.url).request_timeout(WAIT);
    let mut client = match ExecServerClient::connect_with(options).await {
        Ok(client) => client,
        Err(err) => panic!("connect {}: {err}", server.url),
    };
    let mut events = client
        .take_notifications()
        .unwrap_or_else(|| panic!("no receiver"));
    assert!(client.initialize("unix", None).await.is_ok());
    let id = client
        .process_start(&StartParams::new("hi", ["sh", "-c", "echo hi"]))
        .await;
    assert_eq!(id.ok().as_deref(), Some("hi"));
    let mut output = Vec::new();
    loop {
        let notification = match tokio::time::timeout(WAIT, events.recv()).await {
            Ok(Some(notification)) => notification,
            other => panic!("no notification: {other:?}"),
        };
        match ProcessEvent::from_notification(&notification) {
            Some(ProcessEvent::Output { chunk, .. }) => output.extend(chunk),
            Some(ProcessEvent::Closed { .. }) => break,
            _ => {}
        }
    }
    assert_eq!(output, b"hi\n");
}

#[tokio::test]
async fn stdio_transport_serves_and_stdin_eof_kills_everything() {
    let mut server = StdioServer::start(&[]);
    server.send(json!({"id": 1, "method": "initialize", "params": {"clientName": "stdio"}}));
    let response = server.recv_matching(|m| m["id"] == 1);
    assert!(response["result"]["sessionId"].is_string(), "{response}");
    server.send(json!({"method": "initialized", "params": {}}));

    // Malformed input is answered and the server keeps serving.
    if let Some(stdin) = server.stdin.as_mut() {
        use std::io::Write;
        let _ = stdin.write_all(b"not-json\n");
    }
    let error = server.recv_matching(|m| m["id"] == -1);
    assert_eq!(error["error"]["code"], -32600, "{error}");

    let script = "setsid sh -c 'echo pid:$$; exec sleep 1000' & echo pid:$$; exec sleep 1000";
    server.send(json!({"id": 2, "method": "process/start", "params": sh("tree", script)}));
    let response = server.recv_matching(|m| m["id"] == 2);
    assert_eq!(response["result"], json!({"processId": "tree"}));
    let mut text = String::new();
    while pids_in(&text).len() < 2 {
        let message = server.recv_matching(|m| m["method"] == "process/output");
        text.push_str(&String::from_utf8_lossy(&unb64(
            message["params"]["chunk"].as_str().unwrap_or_default(),
        )));
    }
    let pids = pids_in(&text);
    server.close_stdin();
    let status = wait_exit(&mut server.child);
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "server exits 0 on EOF"
    );
    for pid in pids {
        wait_gone(pid).await;
    }
}

#[test]
fn the_stdio_url_form_is_accepted() {
    let mut server = StdioServer::start_listen("stdio://");
    server.send(json!({"id": 1, "method": "initialize", "params": {"clientName": "stdio"}}));
    let response = server.recv_matching(|m| m["id"] == 1);
    assert!(response["result"]["sessionId"].is_string(), "{response}");
    server.close_stdin();
    let status = wait_exit(&mut server.child);
    assert_eq!(status.and_then(|s| s.code()), Some(0));
}

#[tokio::test]
async fn sigterm_shuts_the_server_down_and_kills_every_process() {
    shutdown_kills_every_process(nix::sys::signal::Signal::SIGTERM).await;
}

#[tokio::test]
async fn sigint_shuts_the_server_down_and_kills_every_process() {
    shutdown_kills_every_process(nix::sys::signal::Signal::SIGINT).await;
}

async fn shutdown_kills_every_process(signal: nix::sys::signal::Signal) {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let script = "setsid sh -c 'echo pid:$$; exec sleep 1000' & echo pid:$$; exec sleep 1000";
    ws.call("process/start", sh("tree", script)).await;
    let mut text = String::new();
    while pids_in(&text).len() < 2 {
        let params = ws.notification("process/output", "tree").await;
        text.push_str(&String::from_utf8_lossy(&unb64(
            params["chunk"].as_str().unwrap_or_default(),
        )));
    }
    let pid = nix::unistd::Pid::from_raw(server.pid() as i32);
    assert!(nix::sys::signal::kill(pid, signal).is_ok());
    wait_gone(server.pid()).await;
    for pid in pids_in(&text) {
        wait_gone(pid).await;
    }
}

#[tokio::test]
async fn children_die_with_a_killed_server() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.call(
        "process/start",
        sh("orphan", "echo pid:$$; exec sleep 1000"),
    )
    .await;
    let params = ws.notification("process/output", "orphan").await;
    let pids = pids_in(&String::from_utf8_lossy(&unb64(
        params["chunk"].as_str().unwrap_or_default(),
    )));
    assert_eq!(pids.len(), 1);
    let pid = nix::unistd::Pid::from_raw(server.pid() as i32);
    assert!(nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok());
    wait_gone(pids[0]).await;
}
