//! The shipped JSON Schemas (`resources/schema/`): they must equal what the
//! Rust types generate, and real messages of the real server must validate
//! against them.

use std::collections::BTreeSet;

use codexbox::policy::PermissionProfile;
use codexbox::protocol::sandbox::FileSystemSandboxContext;
use codexbox::protocol::schema;
use serde_json::{json, Value};

use crate::common::client::{Raw, Server};
use crate::common::schema::{assert_supported, assert_valid, dir, load, load_method, validate};

/// Regenerates every schema; with `CODEXBOX_BLESS_SCHEMAS=1` rewrites the
/// shipped files instead of failing.
#[test]
fn shipped_schemas_match_the_rust_types() {
    let bless = std::env::var_os("CODEXBOX_BLESS_SCHEMAS").is_some();
    let files = schema::files();
    let mut stale = Vec::new();
    if bless {
        std::fs::create_dir_all(dir()).unwrap();
    }
    for (name, value) in &files {
        let path = dir().join(name);
        let text = schema::to_text(value);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            if bless {
                std::fs::write(&path, text).unwrap();
            } else {
                stale.push(name.clone());
            }
        }
    }
    let expected: BTreeSet<&String> = files.keys().collect();
    for entry in std::fs::read_dir(dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !expected.contains(&name) {
            if bless {
                std::fs::remove_file(dir().join(&name)).unwrap();
            } else {
                stale.push(format!("{name} (no longer generated)"));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "resources/schema/ is out of date with the protocol types: {stale:?}\n\
         refresh it with: CODEXBOX_BLESS_SCHEMAS=1 cargo test --features schema --test exec_server schema::"
    );
}

/// Every generated schema only uses keywords the test validator checks, and
/// the index names every file.
#[test]
fn schemas_use_only_checked_keywords_and_are_indexed() {
    let files = schema::files();
    let index = serde_json::to_string(&files["index.json"]).unwrap();
    for (name, root) in &files {
        if name != "index.json" {
            assert_supported(root);
            assert!(
                index.contains(&format!("\"{name}\"")),
                "{name} not in index.json"
            );
        }
    }
}

/// The methods and notifications a session has checked against their
/// schemas.
#[derive(Default)]
struct Covered {
    requests: BTreeSet<String>,
    notifications: BTreeSet<String>,
}

impl Covered {
    /// Checks `message` (a notification) against the envelope and its
    /// params schema.
    fn notification(&mut self, message: &Value) {
        assert_valid(&load("envelope.notification.json"), message);
        let method = message["method"].as_str().unwrap();
        assert_valid(&load_method(method, "notification"), &message["params"]);
        self.notifications.insert(method.to_owned());
    }
}

/// A request whose params must match the shipped params schema, answered
/// with a response matching the envelope and the result schema.
async fn call(raw: &mut Raw, covered: &mut Covered, method: &str, params: Value) -> Value {
    assert_valid(&load_method(method, "params"), &params);
    let response = raw.request(method, params).await;
    assert_valid(&load("envelope.response.json"), &response);
    assert_valid(&load_method(method, "result"), &response["result"]);
    covered.requests.insert(method.to_owned());
    response["result"].clone()
}

/// A notification of `method` about `process_id`, checked against the
/// envelope and its params schema.
async fn notification(
    raw: &mut Raw,
    covered: &mut Covered,
    method: &str,
    process_id: &str,
) -> Value {
    let params = raw.notification(method, process_id).await;
    covered.notification(&json!({"method": method, "params": params}));
    params
}

/// A live session of every method and notification the shipped index
/// names, through the real server: each request's params, its answer and
/// every notification are checked against their schemas, and the methods
/// checked must be exactly those of `index.json`.
#[tokio::test]
async fn real_server_messages_match_the_schemas() {
    let server = Server::start_listen("ws://127.0.0.1:0", &[], &[("NO_PROXY", "*")]);
    let mut raw = server.raw().await;
    let mut covered = Covered::default();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    let uri = format!("file://{root}");

    // The reference client's shapes, asking for
    // denial notifications.
    call(
        &mut raw,
        &mut covered,
        "initialize",
        json!({"clientName": "codex-environment", "resumeSessionId": null,
               "capabilities": {"networkDenials": true}}),
    )
    .await;
    let initialized = json!({"method": "initialized", "params": {}});
    assert_valid(&load("envelope.notification.json"), &initialized);
    assert_valid(
        &load_method("initialized", "notification"),
        &initialized["params"],
    );
    raw.send(initialized).await;
    call(&mut raw, &mut covered, "environment/info", Value::Null).await;
    call(&mut raw, &mut covered, "environment/status", json!({})).await;
    let listed = call(&mut raw, &mut covered, "session/list", json!({})).await;
    assert_eq!(listed["sessions"][0]["current"], true, "{listed}");

    call(
        &mut raw,
        &mut covered,
        "process/start",
        json!({"processId": "p1", "argv": ["/bin/sh", "-c", "printf out; printf err >&2; exit 3"],
               "cwd": uri, "envPolicy": null, "env": {"PATH": "/usr/bin:/bin"}, "tty": false,
               "pipeStdin": false, "arg0": null, "sandbox": null, "managedNetwork": null}),
    )
    .await;
    let (mut read, mut after_seq, mut chunks) = (Value::Null, 0, 0);
    for _ in 0..20 {
        read = call(
            &mut raw,
            &mut covered,
            "process/read",
            json!({"processId": "p1", "afterSeq": after_seq, "waitMs": 1000}),
        )
        .await;
        chunks += read["chunks"].as_array().map_or(0, Vec::len);
        after_seq = read["nextSeq"].as_u64().unwrap() - 1;
        if read["closed"] == true {
            break;
        }
    }
    assert_eq!(read["closed"], true, "{read}");
    assert_eq!(read["exitCode"], 3, "{read}");
    assert!(chunks >= 2, "stdout and stderr chunks: {chunks}");
    notification(&mut raw, &mut covered, "process/output", "p1").await;
    notification(&mut raw, &mut covered, "process/exited", "p1").await;
    notification(&mut raw, &mut covered, "process/closed", "p1").await;
    let write = call(
        &mut raw,
        &mut covered,
        "process/write",
        json!({"processId": "nope", "chunk": "aGk=", "writeId": "w1"}),
    )
    .await;
    assert_eq!(write["status"], "unknownProcess");

    call(
        &mut raw,
        &mut covered,
        "process/start",
        json!({"processId": "p2", "argv": ["sleep", "30"], "cwd": root,
               "env": {"PATH": "/usr/bin:/bin"}, "tty": true, "size": {"rows": 10, "cols": 40}}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "process/resize",
        json!({"processId": "p2", "rows": 20, "cols": 60}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "process/signal",
        json!({"processId": "p2", "signal": "kill"}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "process/terminate",
        json!({"processId": "p2"}),
    )
    .await;

    let file = format!("{root}/a.txt");
    let sub = format!("{uri}/d");
    call(
        &mut raw,
        &mut covered,
        "fs/writeFile",
        json!({"path": file, "dataBase64": "aGVsbG8=", "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/readFile",
        json!({"path": file, "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/getMetadata",
        json!({"path": file, "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/createDirectory",
        json!({"path": sub, "recursive": null, "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/copy",
        json!({"sourcePath": file, "destinationPath": format!("{sub}/b.txt"),
               "recursive": false, "sandbox": null}),
    )
    .await;
    let listing = call(
        &mut raw,
        &mut covered,
        "fs/readDirectory",
        json!({"path": uri, "sandbox": null}),
    )
    .await;
    assert_eq!(listing["entries"].as_array().unwrap().len(), 2, "{listing}");
    let walk = call(
        &mut raw,
        &mut covered,
        "fs/walk",
        json!({"path": uri, "sandbox": null, "options": {"maxDepth": 4, "maxDirectories": 10,
               "maxEntries": 100, "followDirectorySymlinks": false}}),
    )
    .await;
    assert_eq!(walk["entries"].as_array().unwrap().len(), 3, "{walk}");
    call(
        &mut raw,
        &mut covered,
        "fs/canonicalize",
        json!({"path": format!("{sub}/../a.txt"), "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/open",
        json!({"handleId": "h1", "path": file, "sandbox": null}),
    )
    .await;
    let block = call(
        &mut raw,
        &mut covered,
        "fs/readBlock",
        json!({"handleId": "h1", "offset": 1, "len": 3}),
    )
    .await;
    assert_eq!(block["chunk"], "ZWxs", "{block}");
    call(
        &mut raw,
        &mut covered,
        "fs/close",
        json!({"handleId": "h1"}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/remove",
        json!({"path": sub, "recursive": true, "force": true, "sandbox": null}),
    )
    .await;

    // Writes through a handle, modes and symlinks (codexbox's own methods).
    let written = format!("{root}/w.bin");
    call(
        &mut raw,
        &mut covered,
        "fs/open",
        json!({"handleId": "w1", "path": written, "mode": "create", "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/writeBlock",
        json!({"handleId": "w1", "offset": 0, "dataBase64": "AAEC"}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/close",
        json!({"handleId": "w1"}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/setPermissions",
        json!({"path": written, "mode": 0o640, "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "fs/createSymlink",
        json!({"path": format!("{uri}/link"), "target": "w.bin", "sandbox": null}),
    )
    .await;

    // Capability discovery of a small plugin.
    std::fs::create_dir_all(format!("{root}/plugin/.codex-plugin")).unwrap();
    std::fs::write(format!("{root}/plugin/.codex-plugin/plugin.json"), "{}").unwrap();
    std::fs::create_dir_all(format!("{root}/plugin/skills/s")).unwrap();
    std::fs::write(format!("{root}/plugin/skills/s/SKILL.md"), "s\n").unwrap();
    let discovered = call(
        &mut raw,
        &mut covered,
        "capabilityRoots/discoverV1",
        json!({"roots": [{"id": "p", "path": format!("{uri}/plugin")},
                         {"id": "gone", "path": format!("{uri}/gone")}]}),
    )
    .await;
    assert_eq!(
        discovered["roots"][0]["skills"].as_array().unwrap().len(),
        1
    );

    // http/request, buffered and streamed (http/request/bodyDelta).
    let origin = crate::common::net::Origin::start();
    let url = format!("http://127.0.0.1:{}/x", origin.port());
    call(
        &mut raw,
        &mut covered,
        "http/request",
        json!({"method": "GET", "url": url, "headers": [], "bodyBase64": null,
               "timeoutMs": 20000, "redirectPolicy": "follow", "requestId": "h1",
               "streamResponse": false}),
    )
    .await;
    call(
        &mut raw,
        &mut covered,
        "http/request",
        json!({"method": "GET", "url": format!("http://127.0.0.1:{}/big?bytes=300000", origin.port()),
               "requestId": "h2", "streamResponse": true}),
    )
    .await;
    // Every delta up to the last, leaving other messages in the backlog.
    let mut pending: std::collections::VecDeque<Value> = std::mem::take(&mut raw.backlog);
    let mut kept = std::collections::VecDeque::new();
    let mut done = false;
    while !done {
        let message = match pending.pop_front() {
            Some(message) => message,
            None => raw.recv_socket().await.expect("connection open"),
        };
        if message["method"] == "http/request/bodyDelta" {
            covered.notification(&message);
            done = message["params"]["done"] == true;
        } else {
            kept.push_back(message);
        }
    }
    kept.extend(pending);
    raw.backlog = kept;

    // A process whose proxy refuses a destination: process/networkDenied.
    let proxy = json!({
        "proxy": {"enabled": true, "enableSocks5": false, "enableSocks5Udp": false,
            "allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false,
            "mode": "full", "domains": {"ok.test": "allow"}, "unixSockets": null,
            "allowLocalBinding": false},
        "auditMetadata": {}, "environmentId": "e", "executionId": "x"});
    call(
        &mut raw,
        &mut covered,
        "process/start",
        json!({"processId": "denied", "cwd": "/", "tty": false,
               "argv": ["sh", "-c", "curl -s --noproxy '' -o /dev/null http://blocked.test:8080/"],
               "env": {"PATH": "/usr/bin:/bin"}, "networkProxy": proxy,
               "enforceManagedNetwork": true}),
    )
    .await;
    notification(&mut raw, &mut covered, "process/networkDenied", "denied").await;
    notification(&mut raw, &mut covered, "process/closed", "denied").await;

    let error = raw.request("process/nope", json!({})).await;
    assert_valid(&load("envelope.error.json"), &error);
    raw.send_text("not json").await;
    let malformed = raw.response(&json!(-1)).await;
    assert_valid(&load("envelope.error.json"), &malformed);
    for message in std::mem::take(&mut raw.backlog) {
        covered.notification(&message);
    }
    // `initialized` is the client's: checked above, sent by the test.
    covered.notifications.insert("initialized".to_owned());

    let index = load("index.json");
    let names = |part: &str| -> BTreeSet<String> {
        index[part].as_object().unwrap().keys().cloned().collect()
    };
    assert_eq!(
        covered.requests,
        names("requests"),
        "requests not exercised"
    );
    assert_eq!(
        covered.notifications,
        names("notifications"),
        "notifications not exercised"
    );
}

/// Both shapes of the sandbox context validate, and the library type reads
/// them.
#[test]
fn sandbox_contexts_match_the_schema_and_the_type() {
    let current = json!({
        "permissions": {"type": "managed", "network": "restricted", "file_system": {
            "type": "restricted", "entries": [
                {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                {"path": {"type": "path", "path": "file:///tmp/w"}, "access": "write"},
                {"path": {"type": "glob_pattern", "pattern": "**/.env"}, "access": "deny"}]}},
        "cwd": "file:///tmp/w", "workspaceRoots": ["file:///tmp/w"],
        "windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": false,
        "useLegacyLandlock": false});
    let legacy = json!({
        "sandboxPolicy": {"type": "workspace-write", "writable_roots": ["/tmp/w"],
                          "network_access": false},
        "sandboxPolicyCwd": "/tmp/w"});
    let schema = load("FileSystemSandboxContext.json");
    for context in [current, legacy] {
        assert_valid(&schema, &context);
        assert_valid(
            &load_method("fs/readFile", "params"),
            &json!({"path": "/tmp/w/x", "sandbox": context}),
        );
        serde_json::from_value::<FileSystemSandboxContext>(context).unwrap();
    }
    let profile = json!({"type": "managed", "network": "enabled", "file_system": {
        "type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "project_roots", "subpath": "src"}},
             "access": "write"}]}});
    assert_valid(&load("PermissionProfile.json"), &profile);
    serde_json::from_value::<PermissionProfile>(profile).unwrap();
}

/// The validator is not vacuous: wrong shapes are refused.
#[test]
fn wrong_messages_are_refused() {
    let start = load_method("process/start", "params");
    for (bad, why) in [
        (
            json!({"processId": "p", "cwd": "/"}),
            "missing required `argv`",
        ),
        (json!({"processId": "p", "argv": "ls", "cwd": "/"}), "/argv"),
        (
            json!({"processId": "p", "argv": [], "cwd": "/"}),
            "fewer than 1 items",
        ),
        (
            json!({"processId": "p", "argv": ["true"], "cwd": "/", "sandbox": {"permissions": {"type": "nope"}}}),
            "/sandbox",
        ),
    ] {
        let err = validate(&start, &bad).unwrap_err();
        assert!(err.contains(why), "{bad}: {err}");
    }
    let read = load_method("process/read", "result");
    let bad = json!({"chunks": [{"seq": 1, "stream": "tty", "chunk": "eA=="}], "nextSeq": 2,
        "exited": false, "exitCode": null, "closed": false, "failure": null,
        "sandboxDenied": false, "truncated": false});
    let err = validate(&read, &bad).unwrap_err();
    assert!(err.contains("/chunks/0/stream"), "{err}");
    assert!(validate(
        &load("envelope.error.json"),
        &json!({"id": 1.5, "error": {}})
    )
    .is_err());
}

/// What `ExecServerClient` sends matches the params schemas too.
#[test]
fn client_params_match_the_schemas() {
    use codexbox::client::{ReadParams, StartParams};
    let start = StartParams::new("p1", ["echo", "hi"])
        .tty(true)
        .cwd(codexbox::wire_path::WirePath::parse("file:///tmp").unwrap());
    let sent = serde_json::to_value(&start).unwrap();
    assert_eq!(sent["cwd"], "file:///tmp", "the cwd keeps its dialect");
    assert_valid(&load_method("process/start", "params"), &sent);
    let read = ReadParams {
        process_id: "p1".into(),
        after_seq: Some(3),
        max_bytes: None,
        wait_ms: Some(100),
    };
    assert_valid(
        &load_method("process/read", "params"),
        &serde_json::to_value(&read).unwrap(),
    );
}
