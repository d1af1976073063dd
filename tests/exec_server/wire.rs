//! Wire-level tests of the exec-server (docs/protocol.md), in raw JSON over a real
//! WebSocket: the seed README session in both dialects, the envelope, the
//! handshake, every error case with its code and message, and malformed input
//! after which the server must keep serving.

use crate::common::client::*;
use serde_json::{json, Value};

fn assert_uuid_v4(text: &str) {
    let parts: Vec<&str> = text.split('-').collect();
    let lens: Vec<usize> = parts.iter().map(|p| p.len()).collect();
    assert_eq!(lens, [8, 4, 4, 4, 12], "not a hyphenated uuid: {text}");
    assert!(
        text.chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
        "not lowercase hex: {text}"
    );
    assert!(parts[2].starts_with('4'), "not a v4 uuid: {text}");
}

fn assert_killed(exited: &Event) {
    assert_eq!(
        exited.exit_code,
        Some(137),
        "terminate gives 128+SIGKILL: {exited:?}"
    );
    let signal = exited.params["signal"].as_str().unwrap_or_default();
    assert!(
        signal.to_ascii_uppercase().contains("KILL"),
        "signal field names SIGKILL: {exited:?}"
    );
}

/// After each malformed message the same connection must still serve.
async fn assert_still_serving(ws: &mut Raw) {
    let result = ws.call("environment/status", json!({})).await;
    assert_eq!(result, json!({"status": "ready"}));
}

/// The next message must be the `id: -1`, ‑32600 error; returns its message.
async fn expect_malformed_error(ws: &mut Raw) -> String {
    let message = ws.recv().await;
    assert_eq!(
        message["id"],
        json!(-1),
        "malformed input answers id -1: {message}"
    );
    let (code, text) = error_of(&message).unwrap_or_else(|| panic!("not an error: {message}"));
    assert_eq!(code, -32600, "{message}");
    assert!(!text.is_empty());
    text
}

#[tokio::test]
async fn seed_example_session_replays_in_the_seed_dialect() {
    let server = Server::start(&[]);
    let mut ws = server.raw().await;

    ws.send_text(r#"{"id":1,"method":"initialize","params":{"clientName":"example-client"}}"#)
        .await;
    let response = ws.response(&json!(1)).await;
    assert_eq!(response.as_object().map(|o| o.len()), Some(2), "{response}");
    let session = response["result"]["sessionId"].as_str().unwrap_or_default();
    assert_uuid_v4(session);
    ws.send_text(r#"{"method":"initialized","params":{}}"#)
        .await;

    ws.send_text(r#"{"id":2,"method":"process/start","params":{"processId":"proc-1","argv":["bash","-lc","printf 'ready\\n'; while IFS= read -r line; do printf 'echo:%s\\n' \"$line\"; done"],"cwd":"/tmp","env":{"PATH":"/usr/bin:/bin"},"tty":true,"pipeStdin":false,"arg0":null}}"#).await;
    assert_eq!(
        ws.response(&json!(2)).await,
        json!({"id": 2, "result": {"processId": "proc-1"}})
    );
    let mut events = ws.output_until("proc-1", "ready").await;
    assert_eq!(events[0].seq, 1);

    ws.send_text(
        r#"{"id":3,"method":"process/write","params":{"processId":"proc-1","chunk":"aGVsbG8K"}}"#,
    )
    .await;
    assert_eq!(
        ws.response(&json!(3)).await,
        json!({"id": 3, "result": {"status": "accepted"}})
    );
    events.extend(ws.output_until("proc-1", "echo:hello").await);
    assert!(
        events.iter().all(|e| e.stream == "pty"),
        "tty output is stream pty: {events:?}"
    );

    ws.send_text(r#"{"id":4,"method":"process/terminate","params":{"processId":"proc-1"}}"#)
        .await;
    assert_eq!(
        ws.response(&json!(4)).await,
        json!({"id": 4, "result": {"running": true}})
    );
    events.extend(ws.events_until_closed("proc-1").await);
    assert_well_ordered(&events);
    assert_killed(exited_of(&events));
    let closed = &events[events.len() - 1];
    assert_eq!(closed.seq, exited_of(&events).seq + 1);
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn seed_example_session_replays_in_the_reference_client_dialect() {
    let server = Server::start(&[]);
    let mut ws = server.raw().await;

    ws.send_text(r#"{"id":1,"method":"initialize","params":{"clientName":"codex-environment","resumeSessionId":null}}"#).await;
    let session = ws.response(&json!(1)).await["result"]["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_uuid_v4(&session);
    ws.send_text(r#"{"method":"initialized","params":{}}"#)
        .await;
    ws.send_text(r#"{"id":2,"method":"environment/info","params":null}"#)
        .await;
    let info = ws.response(&json!(2)).await;
    assert!(info["result"]["shell"]["path"].is_string(), "{info}");

    ws.send(json!({"id": 3, "method": "process/start", "params": {
        "processId": "proc-1",
        "argv": ["bash", "-lc", "printf 'ready\\n'; while IFS= read -r line; do printf 'echo:%s\\n' \"$line\"; done"],
        "cwd": "file:///tmp",
        "envPolicy": null,
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": true,
        "pipeStdin": false,
        "arg0": null,
        "sandbox": null,
        "enforceManagedNetwork": false,
        "managedNetwork": null
    }}))
    .await;
    assert_eq!(
        ws.response(&json!(3)).await,
        json!({"id": 3, "result": {"processId": "proc-1"}})
    );
    let mut events = ws.output_until("proc-1", "ready").await;

    let write = |id: i64, chunk: &str, write_id: &str| {
        json!({"id": id, "method": "process/write",
               "params": {"processId": "proc-1", "chunk": chunk, "writeId": write_id}})
    };
    ws.send(write(4, "aGVsbG8K", "1")).await;
    assert_eq!(
        ws.response(&json!(4)).await,
        json!({"id": 4, "result": {"status": "accepted"}})
    );
    events.extend(ws.output_until("proc-1", "echo:hello").await);
    // A retried writeId is acknowledged but not written twice.
    ws.send(write(5, "aGVsbG8K", "1")).await;
    assert_eq!(
        ws.response(&json!(5)).await,
        json!({"id": 5, "result": {"status": "accepted"}})
    );
    ws.send(write(6, &b64(b"world\n"), "2")).await;
    assert_eq!(ws.response(&json!(6)).await["result"]["status"], "accepted");
    events.extend(ws.output_until("proc-1", "echo:world").await);
    assert_eq!(
        output_of(&events).matches("echo:hello").count(),
        1,
        "writeId 1 written once: {:?}",
        output_of(&events)
    );
    let last_seq = events[events.len() - 1].seq;

    ws.send(json!({"id": 7, "method": "process/read",
                   "params": {"processId": "proc-1", "afterSeq": 0, "maxBytes": null, "waitMs": 0}}))
        .await;
    let read = ws.response(&json!(7)).await["result"].clone();
    assert_eq!(read["exited"], false, "{read}");
    assert_eq!(read["closed"], false);
    assert_eq!(read["sandboxDenied"], false);
    assert_eq!(read["truncated"], false);
    assert_eq!(read["nextSeq"], json!(last_seq + 1));
    let replayed: Vec<u8> = read["chunks"]
        .as_array()
        .map(|chunks| {
            chunks
                .iter()
                .flat_map(|c| unb64(c["chunk"].as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(String::from_utf8_lossy(&replayed), output_of(&events));

    // Drop the connection, resume from a new one: same session, process alive.
    ws.close().await;
    let mut ws = server.raw().await;
    ws.send(json!({"id": 1, "method": "initialize",
                   "params": {"clientName": "codex-environment", "resumeSessionId": session}}))
        .await;
    assert_eq!(
        ws.response(&json!(1)).await,
        json!({"id": 1, "result": {"sessionId": session}})
    );
    ws.send_text(r#"{"method":"initialized","params":{}}"#)
        .await;
    ws.send(json!({"id": 2, "method": "process/read",
                   "params": {"processId": "proc-1", "afterSeq": last_seq, "maxBytes": null, "waitMs": 0}}))
        .await;
    let read = ws.response(&json!(2)).await["result"].clone();
    assert_eq!(read["exited"], false, "{read}");
    assert_eq!(read["chunks"], json!([]));
    ws.send(json!({"id": 3, "method": "process/terminate", "params": {"processId": "proc-1"}}))
        .await;
    assert_eq!(
        ws.response(&json!(3)).await,
        json!({"id": 3, "result": {"running": true}})
    );
    events.extend(ws.events_until_closed("proc-1").await);
    assert_well_ordered(&events);
    assert_killed(exited_of(&events));
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn ids_are_echoed_with_their_json_type_and_jsonrpc_is_never_sent() {
    let server = Server::start(&[]);
    let mut ws = server.raw().await;
    ws.send(
        json!({"jsonrpc": "2.0", "id": "init-a", "method": "initialize",
                   "params": {"clientName": "t"}}),
    )
    .await;
    let response = ws.response(&json!("init-a")).await;
    assert!(response["result"]["sessionId"].is_string(), "{response}");
    assert!(response.get("jsonrpc").is_none(), "{response}");
    ws.send(json!({"jsonrpc": "2.0", "method": "initialized"}))
        .await;
    for id in [
        json!(0),
        json!(42),
        json!(i64::MAX),
        json!(-7),
        json!("x"),
        json!(""),
    ] {
        ws.send(json!({"id": id, "method": "environment/status"}))
            .await;
        let response = ws.response(&id).await;
        assert_eq!(response, json!({"id": id, "result": {"status": "ready"}}));
    }
}

#[tokio::test]
async fn absent_null_and_empty_params_are_equivalent_and_unknown_keys_ignored() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.send_text(r#"{"id":1,"method":"environment/status"}"#)
        .await;
    ws.send_text(r#"{"id":2,"method":"environment/status","params":null}"#)
        .await;
    ws.send_text(r#"{"id":3,"method":"environment/status","params":{}}"#)
        .await;
    ws.send_text(r#"{"id":4,"method":"environment/status","params":{"extra":1}}"#)
        .await;
    for id in 1..=4 {
        assert_eq!(
            ws.response(&json!(id)).await["result"],
            json!({"status": "ready"})
        );
    }
    let mut params = start_params("extra", &["true"]);
    params["someFutureKey"] = json!({"nested": true});
    let result = ws.call("process/start", params).await;
    assert_eq!(result, json!({"processId": "extra"}));
    let events = ws.events_until_closed("extra").await;
    assert_eq!(exited_of(&events).exit_code, Some(0));
}

#[tokio::test]
async fn unknown_method_is_method_not_found_before_and_after_the_handshake() {
    let server = Server::start(&[]);
    let mut ws = server.raw().await;
    let (code, message) = ws.call_err("process/list", json!({})).await;
    assert_eq!(code, -32601);
    assert!(message.contains("process/list"), "{message}");
    ws.handshake().await;
    let (code, _) = ws.call_err("no/such", json!(null)).await;
    assert_eq!(code, -32601);
    // A request named like the notification is not a method either.
    let (code, _) = ws.call_err("initialized", json!({})).await;
    assert_eq!(code, -32601);
}

#[tokio::test]
async fn methods_before_initialize_or_initialized_are_invalid_requests() {
    let server = Server::start(&[]);
    let mut ws = server.raw().await;
    for method in [
        "process/start",
        "process/read",
        "environment/status",
        "environment/info",
    ] {
        let (code, message) = ws.call_err(method, start_params("p", &["true"])).await;
        assert_eq!(code, -32600, "{method}: {message}");
        assert!(message.contains("initialize"), "{method}: {message}");
    }
    let result = ws.call("initialize", json!({"clientName": "t"})).await;
    assert!(result["sessionId"].is_string());
    let (code, message) = ws.call_err("environment/status", json!({})).await;
    assert_eq!(code, -32600);
    assert!(message.contains("initialized"), "{message}");
    ws.send(json!({"method": "initialized", "params": {}}))
        .await;
    assert_still_serving(&mut ws).await;
}

#[tokio::test]
async fn second_initialize_is_an_invalid_request_and_a_failed_one_can_be_retried() {
    let server = Server::start(&[]);
    let mut ws = server.raw().await;
    let (code, message) = ws.call_err("initialize", json!({})).await;
    assert_eq!(code, -32602, "missing clientName: {message}");
    assert!(message.contains("clientName"), "{message}");
    let (code, _) = ws.call_err("initialize", json!("x")).await;
    assert_eq!(code, -32602);
    ws.handshake().await;
    let (code, message) = ws
        .call_err("initialize", json!({"clientName": "again"}))
        .await;
    assert_eq!(code, -32600);
    assert!(message.contains("initialize"), "{message}");
    assert_still_serving(&mut ws).await;
}

#[tokio::test]
async fn client_sent_responses_and_errors_are_ignored() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.send_text(r#"{"id":5,"result":{}}"#).await;
    ws.send_text(r#"{"id":6,"error":{"code":-32000,"message":"client side"}}"#)
        .await;
    ws.send_text(r#"{"id":7,"method":"environment/status"}"#)
        .await;
    let next = ws.recv().await;
    assert_eq!(next, json!({"id": 7, "result": {"status": "ready"}}));
}

#[tokio::test]
async fn process_start_errors_have_spec_codes_and_messages() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;

    let (code, message) = ws.call_err("process/start", start_params("e1", &[])).await;
    assert_eq!((code, message.as_str()), (-32602, "argv must not be empty"));

    let (code, message) = ws
        .call_err(
            "process/start",
            start_params("e2", &["/nonexistent/program"]),
        )
        .await;
    assert_eq!(code, -32603, "{message}");
    assert!(
        message.contains("No such file or directory (os error 2)"),
        "{message}"
    );

    ws.call("process/start", start_params("dup", &["sleep", "1000"]))
        .await;
    let (code, message) = ws
        .call_err("process/start", start_params("dup", &["true"]))
        .await;
    assert_eq!(
        (code, message.as_str()),
        (-32600, "process dup already exists")
    );

    for cwd in [
        "tmp",
        "./tmp",
        "http://host/tmp",
        "file://server/share/x",
        "file:///C:/x",
    ] {
        let mut params = start_params("cwd", &["true"]);
        params["cwd"] = json!(cwd);
        let (code, message) = ws.call_err("process/start", params).await;
        assert_eq!(code, -32602, "cwd {cwd}: {message}");
        assert!(
            message.contains(cwd),
            "message names the path {cwd}: {message}"
        );
    }

    for (params, what) in [
        (
            json!({"processId": "t", "argv": "true", "cwd": "/tmp", "env": {}, "tty": false}),
            "argv as string",
        ),
        (
            json!({"processId": "t", "argv": ["true"], "cwd": "/tmp", "env": {}, "tty": "no"}),
            "tty as string",
        ),
        (
            json!({"processId": 5, "argv": ["true"], "cwd": "/tmp", "env": {}, "tty": false}),
            "numeric processId",
        ),
        (
            json!({"processId": "t", "cwd": "/tmp", "env": {}, "tty": false}),
            "missing argv",
        ),
        (
            json!({"processId": "t", "argv": ["true"], "cwd": "/tmp", "env": {"A": 1}, "tty": false}),
            "env value number",
        ),
    ] {
        let (code, message) = ws.call_err("process/start", params).await;
        assert_eq!(code, -32602, "{what}: {message}");
    }

    assert!(
        ws.call("process/terminate", json!({"processId": "dup"}))
            .await["running"]
            == true
    );
    ws.events_until_closed("dup").await;
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn process_method_errors_have_spec_codes_and_messages() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.call(
        "process/start",
        start_params("closed-stdin", &["sleep", "1000"]),
    )
    .await;

    let (code, message) = ws
        .call_err("process/read", json!({"processId": "nope"}))
        .await;
    assert_eq!(
        (code, message.as_str()),
        (-32600, "unknown process id nope")
    );

    // Seed dialect (no writeId): errors.
    let (code, _) = ws
        .call_err(
            "process/write",
            json!({"processId": "nope", "chunk": "eA=="}),
        )
        .await;
    assert_eq!(code, -32600);
    let (code, _) = ws
        .call_err(
            "process/write",
            json!({"processId": "closed-stdin", "chunk": "eA=="}),
        )
        .await;
    assert_eq!(code, -32600);
    // Reference dialect (writeId): statuses.
    let result = ws
        .call(
            "process/write",
            json!({"processId": "nope", "chunk": "eA==", "writeId": "1"}),
        )
        .await;
    assert_eq!(result, json!({"status": "unknownProcess"}));
    let result = ws
        .call(
            "process/write",
            json!({"processId": "closed-stdin", "chunk": "eA==", "writeId": "1"}),
        )
        .await;
    assert_eq!(result, json!({"status": "stdinClosed"}));
    let (code, message) = ws
        .call_err(
            "process/write",
            json!({"processId": "closed-stdin", "chunk": "eA==", "writeId": ""}),
        )
        .await;
    assert_eq!(
        (code, message.as_str()),
        (-32602, "writeId must not be empty")
    );
    let (code, _) = ws
        .call_err(
            "process/write",
            json!({"processId": "closed-stdin", "chunk": "not base64!", "writeId": "2"}),
        )
        .await;
    assert_eq!(code, -32602, "invalid base64 chunk");

    let result = ws
        .call(
            "process/signal",
            json!({"processId": "nope", "signal": "interrupt"}),
        )
        .await;
    assert_eq!(result, json!({}));
    let (code, _) = ws
        .call_err(
            "process/resize",
            json!({"processId": "closed-stdin", "rows": 10, "cols": 10}),
        )
        .await;
    assert_eq!(code, -32600, "resize of a non-tty process");
    let result = ws
        .call("process/terminate", json!({"processId": "nope"}))
        .await;
    assert_eq!(result, json!({"running": false}));
    let (code, _) = ws.call_err("process/read", json!({})).await;
    assert_eq!(code, -32602, "missing processId");

    assert_eq!(
        ws.call("process/terminate", json!({"processId": "closed-stdin"}))
            .await,
        json!({"running": true})
    );
    let events = ws.events_until_closed("closed-stdin").await;
    assert_well_ordered(&events);
    // Exit already recorded: terminate reports false.
    assert_eq!(
        ws.call("process/terminate", json!({"processId": "closed-stdin"}))
            .await,
        json!({"running": false})
    );
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn session_resume_errors_have_spec_codes_and_messages() {
    let server = Server::start(&[]);
    let (attached, session) = server.session().await;
    // A live holder: it answers the ping a resume sends it.
    let _holder = attached.answer_pings();
    let mut ws = server.raw().await;
    let (code, message) = ws
        .call_err(
            "initialize",
            json!({"clientName": "t", "resumeSessionId": session}),
        )
        .await;
    assert_eq!(code, -32010, "{message}");
    assert!(
        message.contains(&session) && message.contains("already attached"),
        "{message}"
    );
    let unknown = "00000000-0000-4000-8000-000000000000";
    let (code, message) = ws
        .call_err(
            "initialize",
            json!({"clientName": "t", "resumeSessionId": unknown}),
        )
        .await;
    assert_eq!(code, -32600, "{message}");
    assert!(message.contains(unknown), "{message}");
    // Failed initializes do not use up the connection's one initialize.
    ws.handshake().await;
    assert_still_serving(&mut ws).await;
}

#[tokio::test]
async fn invalid_json_is_answered_with_id_minus_one_and_the_connection_stays_open() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    for text in ["not-json", "{", "", "[1,2]", "42", "\"str\"", "{\"id\":1,"] {
        ws.send_text(text).await;
        expect_malformed_error(&mut ws).await;
        assert_still_serving(&mut ws).await;
    }
}

#[tokio::test]
async fn duplicate_keys_are_malformed() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.send_text(r#"{"id":1,"method":"environment/status","method":"environment/info"}"#)
        .await;
    let message = expect_malformed_error(&mut ws).await;
    assert!(message.contains("duplicate"), "{message}");
    ws.send_text(r#"{"id":2,"method":"process/start","params":{"processId":"a","processId":"b","argv":["true"],"cwd":"/tmp","env":{},"tty":false}}"#).await;
    let message = expect_malformed_error(&mut ws).await;
    assert!(message.contains("duplicate"), "{message}");
    assert_still_serving(&mut ws).await;
}

#[tokio::test]
async fn envelope_members_of_the_wrong_type_are_malformed() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    for text in [
        r#"{"id":1.5,"method":"environment/status"}"#,
        r#"{"id":null,"method":"environment/status"}"#,
        r#"{"id":[1],"method":"environment/status"}"#,
        r#"{"id":1,"method":7}"#,
        r#"{"id":18446744073709551616,"method":"environment/status"}"#,
    ] {
        ws.send_text(text).await;
        expect_malformed_error(&mut ws).await;
        assert_still_serving(&mut ws).await;
    }
}

#[tokio::test]
async fn a_message_over_the_default_128_mib_limit_is_refused_and_the_connection_stays_open() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let pad = "a".repeat(129 << 20);
    ws.send_text(format!(
        r#"{{"id":9,"method":"environment/status","params":{{"pad":"{pad}"}}}}"#
    ))
    .await;
    drop(pad);
    expect_oversize_error(&mut ws, json!(9), 128 << 20).await;
    assert_still_serving(&mut ws).await;
}

#[tokio::test]
async fn deeply_nested_and_value_heavy_messages_are_malformed() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let depth = 100_000;
    let nested = format!(
        r#"{{"id":1,"method":"environment/status","params":{{"x":{}{}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    ws.send_text(nested).await;
    expect_malformed_error(&mut ws).await;
    assert_still_serving(&mut ws).await;

    let values = vec!["0"; 300_000].join(",");
    ws.send_text(format!(
        r#"{{"id":2,"method":"environment/status","params":{{"x":[{values}]}}}}"#
    ))
    .await;
    expect_malformed_error(&mut ws).await;
    assert_still_serving(&mut ws).await;
}

#[tokio::test]
async fn unknown_notifications_are_invalid_requests_and_the_connection_stays_open() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.send(json!({"method": "process/kill", "params": {"processId": "x"}}))
        .await;
    expect_malformed_error(&mut ws).await;
    ws.send(json!({"method": "initialized", "params": {}}))
        .await;
    assert_still_serving(&mut ws).await;
}

#[tokio::test]
async fn binary_frames_carrying_json_are_accepted() {
    let server = Server::start(&[]);
    let mut ws = server.raw().await;
    ws.send_binary(br#"{"id":1,"method":"initialize","params":{"clientName":"bin"}}"#.to_vec())
        .await;
    let response = ws.response(&json!(1)).await;
    assert!(response["result"]["sessionId"].is_string(), "{response}");
    ws.send_binary(br#"{"method":"initialized"}"#.to_vec())
        .await;
    ws.send_binary(br#"{"id":2,"method":"environment/status"}"#.to_vec())
        .await;
    assert_eq!(
        ws.response(&json!(2)).await["result"],
        json!({"status": "ready"})
    );
}

#[tokio::test]
async fn environment_info_and_status_describe_the_server() {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => panic!("tempdir: {err}"),
    };
    let canonical = std::fs::canonicalize(dir.path()).unwrap_or_else(|_| dir.path().to_owned());
    let server = Server::start_in(&canonical);
    let (mut ws, _) = server.session().await;
    let info = ws.call("environment/info", Value::Null).await;
    let name = info["shell"]["name"].as_str().unwrap_or_default();
    assert!(
        ["zsh", "bash", "powershell", "sh", "cmd"].contains(&name),
        "{info}"
    );
    let path = info["shell"]["path"].as_str().unwrap_or_default();
    assert!(path.starts_with('/'), "shell path is native: {info}");
    let cwd = info["cwd"].as_str().unwrap_or_default();
    let expected = canonical.to_string_lossy();
    assert!(
        cwd == expected || cwd == format!("file://{expected}"),
        "cwd {cwd} is the server's cwd {expected}"
    );
    assert!(info["capabilities"].is_object(), "{info}");
    assert_eq!(
        ws.call("environment/status", json!(null)).await,
        json!({"status": "ready"})
    );
}

#[tokio::test]
async fn the_live_process_limit_is_a_clear_error_and_frees_up() {
    let server = Server::start(&["--max-processes", "2"]);
    let (mut ws, _) = server.session().await;
    ws.call("process/start", start_params("a", &["sleep", "1000"]))
        .await;
    ws.call("process/start", start_params("b", &["sleep", "1000"]))
        .await;
    let (code, message) = ws
        .call_err("process/start", start_params("c", &["true"]))
        .await;
    assert_eq!(code, -32600, "{message}");
    assert!(
        message.contains('2'),
        "the message names the limit: {message}"
    );
    ws.call("process/terminate", json!({"processId": "a"}))
        .await;
    ws.events_until_closed("a").await;
    ws.call("process/start", start_params("c", &["true"])).await;
    ws.events_until_closed("c").await;
    ws.call("process/terminate", json!({"processId": "b"}))
        .await;
    ws.events_until_closed("b").await;
    assert_no_children(server.pid()).await;
}

/// An oversize request is answered with its own id (found by a scan of
/// the message), so a client waiting on that id gets its answer.
async fn expect_oversize_error(ws: &mut Raw, id: Value, limit: usize) {
    let message = ws.recv().await;
    assert_eq!(
        message["id"], id,
        "oversize request answers its id: {message}"
    );
    let (code, text) = error_of(&message).unwrap_or_else(|| panic!("not an error: {message}"));
    assert_eq!(code, -32600, "{message}");
    let limit = format!("exceeds the limit of {limit} bytes");
    assert!(text.contains(&limit), "{text}");
}

#[tokio::test]
async fn the_message_size_limit_is_configurable_and_answered_with_the_request_id() {
    let server = Server::start(&["--max-message-bytes", "4096"]);
    let (mut ws, _) = server.session().await;
    let pad = "b".repeat(6000);
    ws.send_text(format!(
        r#"{{"id":3,"method":"environment/status","params":{{"pad":"{pad}"}}}}"#
    ))
    .await;
    expect_oversize_error(&mut ws, json!(3), 4096).await;
    ws.send_text(format!(
        r#"{{"params":{{"pad":"{pad}"}},"method":"environment/status","id":"s-3"}}"#
    ))
    .await;
    expect_oversize_error(&mut ws, json!("s-3"), 4096).await;
    // No id to recover (a notification, broken JSON): the `-1` error.
    ws.send_text(format!(
        r#"{{"method":"environment/status","params":{{"pad":"{pad}"}}}}"#
    ))
    .await;
    expect_malformed_error(&mut ws).await;
    ws.send_text(format!(r#"{{"id":5,"method":"m","params":"{pad}"#))
        .await;
    expect_malformed_error(&mut ws).await;
    assert_still_serving(&mut ws).await;
}

/// Any message over the size limit gets an error and the connection stays
/// open, however large it is.
#[tokio::test]
async fn a_message_far_above_the_limit_is_answered_and_the_connection_stays_open() {
    let server = Server::start(&["--max-message-bytes", "4096"]);
    let (mut ws, _) = server.session().await;
    let pad = "b".repeat(64 * 1024);
    ws.send_text(format!(
        r#"{{"id":3,"method":"environment/status","params":{{"pad":"{pad}"}}}}"#
    ))
    .await;
    expect_oversize_error(&mut ws, json!(3), 4096).await;
    assert_still_serving(&mut ws).await;
}

/// A frame above the transport cap (max(2 × `--max-message-bytes`, 128 MiB))
/// cannot be received without unbounded buffering: that one connection is
/// closed with 1009 (Message Too Big) and the server keeps serving new ones.
#[tokio::test]
async fn a_message_above_the_transport_cap_closes_that_connection_with_1009() {
    let server = Server::start(&["--max-message-bytes", "4096"]);
    let (mut ws, _) = server.session().await;
    let pad = "c".repeat(130 << 20);
    // The server may close before it has read the whole frame, so the send
    // itself may fail; the close frame is what counts.
    ws.try_send_text(format!(
        r#"{{"id":4,"method":"environment/status","params":{{"pad":"{pad}"}}}}"#
    ))
    .await;
    drop(pad);
    assert_eq!(ws.close_code().await, Some(1009), "Message Too Big");

    let (mut fresh, _) = server.session().await;
    assert_still_serving(&mut fresh).await;
}
