//! The shipped JSON Schemas (`resources/schema/`): they must equal what the
//! Rust types generate, and real messages of the real server must validate
//! against them.

use std::collections::BTreeSet;

use codexbox::protocol::sandbox::FileSystemSandboxContext;
use codexbox::protocol::schema;
use codexbox::sandbox::policy::PermissionProfile;
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
         refresh it with: CODEXBOX_BLESS_SCHEMAS=1 cargo test --test schema"
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

/// A request whose params must match the shipped params schema, answered
/// with a response matching the envelope and the result schema.
async fn call(raw: &mut Raw, method: &str, params: Value) -> Value {
    assert_valid(&load_method(method, "params"), &params);
    let response = raw.request(method, params).await;
    assert_valid(&load("envelope.response.json"), &response);
    assert_valid(&load_method(method, "result"), &response["result"]);
    response["result"].clone()
}

/// A notification of `method` about `process_id`, checked against the
/// envelope and its params schema.
async fn notification(raw: &mut Raw, method: &str, process_id: &str) -> Value {
    let params = raw.notification(method, process_id).await;
    let message = json!({"method": method, "params": params});
    assert_valid(&load("envelope.notification.json"), &message);
    assert_valid(&load_method(method, "notification"), &params);
    params
}

#[tokio::test]
async fn real_server_messages_match_the_schemas() {
    let server = Server::start(&[]);
    let mut raw = server.raw().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap().to_owned();
    let uri = format!("file://{root}");

    // The reference client's shapes (reference notes §16).
    call(
        &mut raw,
        "initialize",
        json!({"clientName": "codex-environment", "resumeSessionId": null}),
    )
    .await;
    let initialized = json!({"method": "initialized", "params": {}});
    assert_valid(&load("envelope.notification.json"), &initialized);
    assert_valid(
        &load_method("initialized", "notification"),
        &initialized["params"],
    );
    raw.send(initialized).await;
    call(&mut raw, "environment/info", Value::Null).await;
    call(&mut raw, "environment/status", json!({})).await;

    call(
        &mut raw,
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
    notification(&mut raw, "process/output", "p1").await;
    notification(&mut raw, "process/exited", "p1").await;
    notification(&mut raw, "process/closed", "p1").await;
    let write = call(
        &mut raw,
        "process/write",
        json!({"processId": "nope", "chunk": "aGk=", "writeId": "w1"}),
    )
    .await;
    assert_eq!(write["status"], "unknownProcess");

    call(
        &mut raw,
        "process/start",
        json!({"processId": "p2", "argv": ["sleep", "30"], "cwd": root,
               "env": {"PATH": "/usr/bin:/bin"}, "tty": true, "size": {"rows": 10, "cols": 40}}),
    )
    .await;
    call(
        &mut raw,
        "process/resize",
        json!({"processId": "p2", "rows": 20, "cols": 60}),
    )
    .await;
    call(
        &mut raw,
        "process/signal",
        json!({"processId": "p2", "signal": "kill"}),
    )
    .await;
    call(&mut raw, "process/terminate", json!({"processId": "p2"})).await;

    let file = format!("{root}/a.txt");
    let sub = format!("{uri}/d");
    call(
        &mut raw,
        "fs/writeFile",
        json!({"path": file, "dataBase64": "aGVsbG8=", "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        "fs/readFile",
        json!({"path": file, "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        "fs/getMetadata",
        json!({"path": file, "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        "fs/createDirectory",
        json!({"path": sub, "recursive": null, "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        "fs/copy",
        json!({"sourcePath": file, "destinationPath": format!("{sub}/b.txt"),
               "recursive": false, "sandbox": null}),
    )
    .await;
    let listing = call(
        &mut raw,
        "fs/readDirectory",
        json!({"path": uri, "sandbox": null}),
    )
    .await;
    assert_eq!(listing["entries"].as_array().unwrap().len(), 2, "{listing}");
    let walk = call(
        &mut raw,
        "fs/walk",
        json!({"path": uri, "sandbox": null, "options": {"maxDepth": 4, "maxDirectories": 10,
               "maxEntries": 100, "followDirectorySymlinks": false}}),
    )
    .await;
    assert_eq!(walk["entries"].as_array().unwrap().len(), 3, "{walk}");
    call(
        &mut raw,
        "fs/canonicalize",
        json!({"path": format!("{sub}/../a.txt"), "sandbox": null}),
    )
    .await;
    call(
        &mut raw,
        "fs/open",
        json!({"handleId": "h1", "path": file, "sandbox": null}),
    )
    .await;
    let block = call(
        &mut raw,
        "fs/readBlock",
        json!({"handleId": "h1", "offset": 1, "len": 3}),
    )
    .await;
    assert_eq!(block["chunk"], "ZWxs", "{block}");
    call(&mut raw, "fs/close", json!({"handleId": "h1"})).await;
    call(
        &mut raw,
        "fs/remove",
        json!({"path": sub, "recursive": true, "force": true, "sandbox": null}),
    )
    .await;

    let error = raw.request("process/nope", json!({})).await;
    assert_valid(&load("envelope.error.json"), &error);
    raw.send_text("not json").await;
    let malformed = raw.response(&json!(-1)).await;
    assert_valid(&load("envelope.error.json"), &malformed);
    for message in std::mem::take(&mut raw.backlog) {
        assert_valid(&load("envelope.notification.json"), &message);
        let method = message["method"].as_str().unwrap();
        assert_valid(&load_method(method, "notification"), &message["params"]);
    }
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
        .cwd(codexbox::protocol::path::WirePath::parse("file:///tmp").unwrap());
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
