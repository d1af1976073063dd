//! The JSON Schemas shipped in `resources/schema/` describe what
//! the server really sends and accepts: a session in both dialects is
//! recorded and every message checked against its schema.

use crate::common::client::*;
use crate::common::schema::{load, validate};
use serde_json::{json, Value};

/// Checks `value` against `resources/schema/<name>.json`.
fn conforms(name: &str, value: &Value, failures: &mut Vec<String>) {
    if let Err(violation) = validate(&load(&format!("{name}.json")), value) {
        failures.push(format!("{name}: {violation} in {value}"));
    }
}

/// Sends a request after checking its params against `<schema>`; checks the
/// response envelope and result.
async fn checked_call(
    ws: &mut Raw,
    method: &str,
    params: Value,
    params_schema: Option<&str>,
    result_schema: Option<&str>,
    failures: &mut Vec<String>,
) -> Value {
    if let Some(name) = params_schema {
        conforms(name, &params, failures);
    }
    let response = ws.request(method, params).await;
    if response.get("error").is_some() {
        conforms("envelope.error", &response, failures);
        return response;
    }
    conforms("envelope.response", &response, failures);
    if let Some(name) = result_schema {
        conforms(name, &response["result"], failures);
    }
    response["result"].clone()
}

fn check_notifications(events: &[Event], failures: &mut Vec<String>) {
    for event in events {
        let message = json!({"method": format!("process/{}", event.kind), "params": event.params});
        conforms("envelope.notification", &message, failures);
        conforms(
            &format!("process.{}.notification", event.kind),
            &event.params,
            failures,
        );
    }
}

#[tokio::test]
async fn every_message_of_a_session_matches_the_shipped_schemas() {
    let server = Server::start(&[]);
    let mut ws = server.raw().await;
    let mut failures = Vec::new();
    let f = &mut failures;

    checked_call(
        &mut ws,
        "initialize",
        json!({"clientName": "codex-environment", "resumeSessionId": null}),
        Some("initialize.params"),
        Some("initialize.result"),
        f,
    )
    .await;
    ws.send(json!({"method": "initialized", "params": {}}))
        .await;
    checked_call(
        &mut ws,
        "environment/info",
        Value::Null,
        None,
        Some("environment.info.result"),
        f,
    )
    .await;
    checked_call(
        &mut ws,
        "environment/status",
        Value::Null,
        None,
        Some("environment.status.result"),
        f,
    )
    .await;

    // Reference dialect: every key present, nulls for the unset ones.
    let reference = json!({
        "processId": "ref", "argv": ["sh", "-c", "echo out; echo err >&2; read x; exit 3"],
        "cwd": "file:///tmp", "envPolicy": null, "env": {"PATH": "/usr/bin:/bin"},
        "tty": false, "pipeStdin": true, "arg0": null, "sandbox": null,
        "enforceManagedNetwork": false, "managedNetwork": null
    });
    checked_call(
        &mut ws,
        "process/start",
        reference,
        Some("process.start.params"),
        Some("process.start.result"),
        f,
    )
    .await;
    let write = json!({"processId": "ref", "chunk": b64(b"go\n"), "writeId": "1"});
    checked_call(
        &mut ws,
        "process/write",
        write,
        Some("process.write.params"),
        Some("process.write.result"),
        f,
    )
    .await;
    let events = ws.events_until_closed("ref").await;
    check_notifications(&events, f);
    let read = json!({"processId": "ref", "afterSeq": 0, "maxBytes": null, "waitMs": 0});
    checked_call(
        &mut ws,
        "process/read",
        read,
        Some("process.read.params"),
        Some("process.read.result"),
        f,
    )
    .await;

    // Seed dialect, PTY, resize, signal, terminate.
    let seed = json!({"processId": "tty", "argv": ["sh", "-c", "echo ready; exec sleep 1000"],
                      "cwd": "/tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": true,
                      "pipeStdin": false, "arg0": null, "size": {"rows": 30, "cols": 90}});
    checked_call(
        &mut ws,
        "process/start",
        seed,
        Some("process.start.params"),
        Some("process.start.result"),
        f,
    )
    .await;
    let mut events = ws.output_until("tty", "ready").await;
    let resize = json!({"processId": "tty", "rows": 40, "cols": 100});
    checked_call(
        &mut ws,
        "process/resize",
        resize,
        Some("process.resize.params"),
        None,
        f,
    )
    .await;
    let write = json!({"processId": "tty", "chunk": b64(b"x")});
    checked_call(
        &mut ws,
        "process/write",
        write,
        Some("process.write.params"),
        Some("process.write.result"),
        f,
    )
    .await;
    let signal = json!({"processId": "nobody", "signal": "interrupt"});
    checked_call(
        &mut ws,
        "process/signal",
        signal,
        Some("process.signal.params"),
        None,
        f,
    )
    .await;
    let terminate = json!({"processId": "tty"});
    checked_call(
        &mut ws,
        "process/terminate",
        terminate,
        Some("process.terminate.params"),
        Some("process.terminate.result"),
        f,
    )
    .await;
    events.extend(ws.events_until_closed("tty").await);
    check_notifications(&events, f);

    // Errors, including the id -1 one.
    checked_call(
        &mut ws,
        "process/read",
        json!({"processId": "nope"}),
        Some("process.read.params"),
        None,
        f,
    )
    .await;
    ws.send_text("not-json").await;
    let malformed = ws.recv().await;
    conforms("envelope.error", &malformed, f);

    assert!(
        failures.is_empty(),
        "schema mismatches:\n{}",
        failures.join("\n")
    );
    assert_no_children(server.pid()).await;
}

#[test]
fn the_schema_checker_is_not_vacuous() {
    let exited = load("process.exited.notification.json");
    let valid = json!({"processId": "p", "seq": 1, "exitCode": 0, "sandboxDenied": false});
    assert!(validate(&exited, &valid).is_ok());
    assert!(
        validate(&exited, &json!({"processId": "p", "seq": 1})).is_err(),
        "exitCode and sandboxDenied are required"
    );
    assert!(
        validate(
            &exited,
            &json!({"processId": 1, "seq": 0, "exitCode": "0", "sandboxDenied": false})
        )
        .is_err(),
        "processId and exitCode have types"
    );
    let output = load("process.output.notification.json");
    let chunk = json!({"processId": "p", "seq": 1, "stream": "stdout", "chunk": ""});
    assert!(validate(&output, &chunk).is_ok());
    let mut wrong_stream = chunk.clone();
    wrong_stream["stream"] = json!("tty");
    assert!(
        validate(&output, &wrong_stream).is_err(),
        "stream is an enum (through its $ref)"
    );
    let mut negative_seq = chunk;
    negative_seq["seq"] = json!(-1);
    assert!(validate(&output, &negative_seq).is_err(), "seq is unsigned");
}
