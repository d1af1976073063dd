//! The real server over a real WebSocket: generated frames get exactly the
//! answers their class calls for (‑32600 with id ‑1 or the recovered id,
//! one reply per request, nothing for a response) and the server keeps
//! serving; generated params for every method are accepted when their
//! schema says so, whatever is accepted matches the schema, and every
//! message the server sends matches its own.

use std::cell::RefCell;
use std::path::Path;

use codexbox::protocol::envelope;
use codexbox::protocol::RequestId;
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::common::client::{error_of, Raw, Server};
use crate::common::fuzz;
use crate::common::schema::{load, load_method, validate};
use crate::envelope::{frame, valid_id, Expected, Frame};
use crate::params::{methods, pool};

/// The server's message cap in these tests: small, so that oversize frames
/// are cheap to make.
const MAX_MESSAGE_BYTES: usize = 4096;

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => panic!("tokio runtime: {err}"),
    }
}

/// A frame, maybe padded past the cap, sent as text or binary.
#[derive(Debug, Clone)]
struct Sent {
    frame: Frame,
    padding: Option<usize>,
    binary: bool,
}

impl Sent {
    fn bytes(&self) -> Vec<u8> {
        let mut frame = self.frame.clone();
        if let Some(at) = self.padding {
            let at = at % (frame.members.len() + 1);
            let pad = "p".repeat(MAX_MESSAGE_BYTES);
            frame
                .members
                .insert(at, ("pad".to_owned(), Value::String(pad)));
        }
        frame.text().into_bytes()
    }
}

/// Collects what the server sent before the answer to the barrier request
/// `id`; the barrier's own answer is dropped.
async fn until_barrier(raw: &mut Raw, id: &str) -> Vec<Value> {
    raw.send(json!({"id": id, "method": "environment/status"}))
        .await;
    let mut before = Vec::new();
    loop {
        let message = raw.recv().await;
        if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
            return before;
        }
        before.push(message);
    }
}

#[test]
fn every_frame_gets_the_answer_its_class_calls_for() {
    let server = Server::start(&["--max-message-bytes", &MAX_MESSAGE_BYTES.to_string()]);
    let rt = runtime();
    let raw = RefCell::new(rt.block_on(server.raw()));
    let initialized = RefCell::new(false);
    let counter = RefCell::new(0u64);
    let error_schema = load("envelope.error.json");
    let strategy = (
        frame(),
        proptest::option::weighted(0.2, any::<usize>()),
        any::<bool>(),
    )
        .prop_map(|(frame, padding, binary)| Sent {
            frame,
            padding,
            binary,
        });
    fuzz::run("server_frames", 192, strategy, |sent| {
        let bytes = sent.bytes();
        let barrier = {
            let mut n = counter.borrow_mut();
            *n += 1;
            format!("~barrier-{n}")
        };
        let expected = match envelope::decode(&bytes, MAX_MESSAGE_BYTES) {
            Err(err) => Err(envelope::error_id(&bytes, &err)),
            Ok(_) if bytes.len() > MAX_MESSAGE_BYTES => unreachable!(),
            Ok(_) => Ok(sent.frame.expected()),
        };
        let mut raw = raw.borrow_mut();
        let answers = rt.block_on(async {
            if sent.binary {
                raw.send_binary(bytes.clone()).await;
            } else {
                raw.send_text(String::from_utf8_lossy(&bytes).into_owned())
                    .await;
            }
            until_barrier(&mut raw, &barrier).await
        });
        for answer in &answers {
            if answer.get("error").is_some() {
                if let Err(err) = validate(&error_schema, answer) {
                    prop_assert!(false, "{answer} does not match envelope.error.json: {err}");
                }
            }
        }
        match expected {
            Err(id) => {
                prop_assert_eq!(answers.len(), 1, "{:?}", answers);
                prop_assert_eq!(error_of(&answers[0]).map(|(code, _)| code), Some(-32600));
                prop_assert_eq!(valid_id(&answers[0]["id"]), Some(id));
            }
            Ok(Expected::Request(id, method)) => {
                let mine: Vec<&Value> = answers
                    .iter()
                    .filter(|a| valid_id(&a["id"]).as_ref() == Some(&id))
                    .collect();
                prop_assert_eq!(mine.len(), 1, "{} {:?}", method, answers);
                if method == "initialize" && mine[0].get("result").is_some() {
                    *initialized.borrow_mut() = true;
                }
            }
            Ok(Expected::Notification(method)) => {
                let silent = method == "initialized" && *initialized.borrow();
                prop_assert_eq!(answers.len(), usize::from(!silent), "{:?}", answers);
                if let Some(answer) = answers.first() {
                    prop_assert_eq!(valid_id(&answer["id"]), Some(RequestId::MALFORMED));
                }
            }
            Ok(Expected::Response) => prop_assert!(answers.is_empty(), "{:?}", answers),
            Ok(Expected::Malformed) => {
                prop_assert!(false, "decoded but expected malformed: {:?}", sent)
            }
        }
        Ok(())
    });
    // Still serving.
    let mut raw = raw.into_inner();
    let status = rt.block_on(raw.request("environment/status", json!(null)));
    assert!(
        status.get("error").is_some() || status["result"]["status"] == "ready",
        "{status}"
    );
}

/// A scratch tree the generated requests may touch: two files and a
/// directory at the top level only (so copies cannot nest and grow), in
/// both dialects, plus a name that does not exist.
fn scratch(root: &Path) -> Vec<String> {
    let write = |name: &str, data: &str| {
        if let Err(err) = std::fs::write(root.join(name), data) {
            panic!("{name}: {err}");
        }
    };
    write("a", "alpha\n");
    write("b", "");
    if let Err(err) = std::fs::create_dir(root.join("d")) {
        panic!("d: {err}");
    }
    write("d/inner", "x");
    let mut paths = Vec::new();
    for name in ["a", "b", "d", "e", "missing"] {
        let path = root.join(name);
        paths.push(path.to_string_lossy().into_owned());
        paths.push(codexbox::wire_path::to_file_uri(path.as_os_str()));
    }
    paths
}

/// Codes that prove the params were decoded (the request went on to act).
fn decoded(response: &Value) -> bool {
    response.get("result").is_some() || matches!(error_of(response), Some((-32004 | -32603, _)))
}

#[test]
fn the_server_accepts_what_the_schemas_allow_and_sends_what_they_describe() {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => panic!("tempdir: {err}"),
    };
    let mut pool = pool(scratch(dir.path()));
    // Long polls stay short; the scratch directory is the sandbox's cwd.
    pool.values
        .push(("waitMs", [0, 1, 50].map(Value::from).to_vec()));
    pool.values
        .push(("maxBytes", [0, 1, 65536].map(Value::from).to_vec()));
    let server = Server::start_in(dir.path());
    let rt = runtime();
    let raw = RefCell::new(rt.block_on(async {
        let (raw, _) = server.session().await;
        raw
    }));
    let response_schema = load("envelope.response.json");
    let error_schema = load("envelope.error.json");
    let methods = methods();
    let params_schemas: Vec<Value> = methods.iter().map(|m| load_method(m, "params")).collect();
    let result_schemas: Vec<Value> = methods.iter().map(|m| load_method(m, "result")).collect();
    let strategies: Vec<BoxedStrategy<(usize, (Value, bool))>> = methods
        .iter()
        .enumerate()
        // A second initialize is refused whatever its params; skip it.
        .filter(|(_, method)| **method != "initialize")
        .map(|(i, method)| {
            crate::params::params(method, &pool)
                .prop_map(move |p| (i, p))
                .boxed()
        })
        .collect();
    fuzz::run(
        "server_schemas",
        160,
        proptest::strategy::Union::new(strategies),
        |(index, (params, mutated))| {
            let method = methods[index];
            let mut raw = raw.borrow_mut();
            let response = rt.block_on(raw.request(method, params.clone()));
            let notifications: Vec<Value> = raw.backlog.drain(..).collect();
            drop(raw);
            let valid = validate(&params_schemas[index], &params);
            if let Some((code, message)) = error_of(&response) {
                if let Err(err) = validate(&error_schema, &response) {
                    prop_assert!(false, "{response}: {err}");
                }
                prop_assert!(
                    mutated || valid.is_err() || code != -32602,
                    "{method} refused schema-valid {params}: {message}"
                );
            } else {
                for (schema, value) in [
                    (&response_schema, &response),
                    (&result_schemas[index], &response["result"]),
                ] {
                    if let Err(err) = validate(schema, value) {
                        prop_assert!(false, "{method} answered {response}: {err}");
                    }
                }
            }
            if decoded(&response) {
                if let Err(err) = valid {
                    prop_assert!(
                        crate::common::schema::is_serde_leniency(&err),
                        "{method} accepted {params} ({response}) but its schema refuses it: {err}"
                    );
                }
            }
            for notification in &notifications {
                check_notification(notification)?;
            }
            Ok(())
        },
    );
}

fn check_notification(message: &Value) -> Result<(), TestCaseError> {
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return Err(TestCaseError::fail(format!("stray message {message}")));
    };
    for (schema, value) in [
        (load("envelope.notification.json"), message),
        (load_method(method, "notification"), &message["params"]),
    ] {
        if let Err(err) = validate(&schema, value) {
            return Err(TestCaseError::fail(format!("{message}: {err}")));
        }
    }
    Ok(())
}

/// The largest `waitMs` is a long poll like any other: it is answered as
/// soon as the process changes.
#[test]
fn a_read_with_the_largest_wait_is_answered_when_the_process_ends() {
    let server = Server::start(&[]);
    let rt = runtime();
    rt.block_on(async {
        let (mut raw, _) = server.session().await;
        raw.call("process/start", json!({"processId":"slow","argv":["sh","-c","read x"],"cwd":"/","pipeStdin":true}))
            .await;
        raw.send(json!({"id":"long","method":"process/read","params":{"processId":"slow","afterSeq":99,"waitMs":u64::MAX}}))
            .await;
        raw.call("process/write", json!({"processId":"slow","chunk":"","closeStdin":true})).await;
        let read = raw.response(&json!("long")).await;
        assert_eq!(read["result"]["closed"], true, "{read}");
    });
}

/// The check every test server gets on drop (`common::wire`) sees the
/// server's traffic and would flag a message its schema refuses.
#[test]
fn the_traffic_check_reads_the_servers_trace_and_flags_a_mismatch() {
    let server = Server::start(&[]);
    let rt = runtime();
    rt.block_on(async {
        let (mut raw, _) = server.session().await;
        raw.call("environment/status", json!(null)).await;
    });
    let traced = |text: &str| {
        text.lines()
            .filter(|l| l.contains("\"codexbox::wire\""))
            .count()
    };
    let deadline = std::time::Instant::now() + crate::common::client::WAIT;
    // initialize, its result, initialized, environment/status, its result.
    while traced(&server.stderr()) < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "no wire trace: {}",
            server.stderr()
        );
        std::thread::yield_now();
    }
    assert!(crate::common::wire::mismatches(&server.stderr()).is_empty());
    let line = |direction: &str, frame: Value| {
        json!({"target": "codexbox::wire", "fields": {"connection": 1, "direction": direction, "frame": frame.to_string()}})
            .to_string()
    };
    let bad = [
        line("in", json!({"id": 7, "method": "environment/status"})),
        line("out", json!({"id": 7, "result": {"status": 5}})),
        line(
            "in",
            json!({"id": 8, "method": "process/terminate", "params": {"processId": 3}}),
        ),
        line("out", json!({"id": 8, "result": {"running": false}})),
    ]
    .join("\n");
    assert_eq!(crate::common::wire::mismatches(&bad).len(), 2, "{bad}");
}
