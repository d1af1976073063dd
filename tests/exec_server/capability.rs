//! `capabilityRoots/discoverV1` through the real server: the whole
//! capability bundle of a root in one request (plugin manifest by
//! priority, its declared MCP and apps files, namespace manifests, skills
//! with their metadata, sorted), inline MCP servers, the nearest
//! ancestor's manifest, and failures that stay with their root.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::client::{Raw, Server};

fn write(path: &Path, contents: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// Discovers the single root `path` (as given on the wire).
async fn discover_one(raw: &mut Raw, id: &str, path: &str) -> Value {
    let result = raw
        .call(
            "capabilityRoots/discoverV1",
            json!({"roots": [{"id": id, "path": path}]}),
        )
        .await;
    let roots = result["roots"].as_array().unwrap();
    assert_eq!(roots.len(), 1, "{result}");
    roots[0].clone()
}

fn paths(files: &Value) -> Vec<Value> {
    files
        .as_array()
        .unwrap()
        .iter()
        .map(|file| file["path"].clone())
        .collect()
}

#[tokio::test]
async fn a_complete_capability_bundle_is_discovered_in_one_request() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    write(
        &root.join(".codex-plugin/plugin.json"),
        r#"{"name": "demo", "interface": {"displayName": "Demo Plugin"},
            "mcpServers": "./config/mcp.json", "apps": "./config/apps.json"}"#,
    );
    write(
        &root.join(".claude-plugin/plugin.json"),
        r#"{"name":"lower-claude"}"#,
    );
    write(
        &root.join(".cursor-plugin/plugin.json"),
        r#"{"name":"lower-cursor"}"#,
    );
    write(&root.join("config/mcp.json"), r#"{"mcpServers":{}}"#);
    write(&root.join("config/apps.json"), r#"{"apps":{}}"#);
    write(&root.join(".mcp.json"), r#"{"not":"read"}"#);
    write(
        &root.join("skills/deploy/SKILL.md"),
        "---\nname: deploy\n---\n",
    );
    write(
        &root.join("skills/deploy/agents/openai.yaml"),
        "policy: {}\n",
    );
    write(
        &root.join("nested/.claude-plugin/plugin.json"),
        r#"{"name":"nested"}"#,
    );
    write(&root.join("nested/skills/audit/SKILL.md"), "audit\n");
    write(
        &root.join("nested-cursor/.cursor-plugin/plugin.json"),
        r#"{"name":"cursor-nested"}"#,
    );
    write(
        &root.join("nested-cursor/skills/review/SKILL.md"),
        "review\n",
    );

    let server = Server::start(&[]);
    let mut raw = server.raw().await;
    raw.handshake().await;
    let root_uri = uri(&root);
    let found = discover_one(&mut raw, "demo@1", &root_uri).await;
    let at = |relative: &str| json!(format!("{root_uri}/{relative}"));
    assert_eq!(found["id"], "demo@1");
    assert_eq!(found["path"], root_uri.as_str());
    assert_eq!(found["error"], Value::Null, "{found}");
    assert_eq!(found["warnings"], json!([]), "{found}");
    let plugin = &found["plugin"];
    assert_eq!(plugin["manifest"]["path"], at(".codex-plugin/plugin.json"));
    assert!(plugin["manifest"]["contents"]
        .as_str()
        .unwrap()
        .contains("Demo Plugin"));
    assert_eq!(plugin["mcpConfig"]["path"], at("config/mcp.json"));
    assert_eq!(plugin["mcpConfig"]["contents"], r#"{"mcpServers":{}}"#);
    assert_eq!(plugin["appsConfig"]["path"], at("config/apps.json"));
    assert_eq!(
        paths(&found["namespaceManifests"]),
        vec![
            at(".codex-plugin/plugin.json"),
            at("nested/.claude-plugin/plugin.json"),
            at("nested-cursor/.cursor-plugin/plugin.json"),
        ]
    );
    let skills: Vec<(Value, Value)> = found["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|skill| {
            (
                skill["instructions"]["path"].clone(),
                skill["metadata"]["path"].clone(),
            )
        })
        .collect();
    assert_eq!(
        skills,
        vec![
            (at("nested-cursor/skills/review/SKILL.md"), Value::Null),
            (at("nested/skills/audit/SKILL.md"), Value::Null),
            (
                at("skills/deploy/SKILL.md"),
                at("skills/deploy/agents/openai.yaml")
            ),
        ]
    );
    assert_eq!(
        found["skills"][2]["instructions"]["contents"],
        "---\nname: deploy\n---\n"
    );
    assert_eq!(
        found["skills"][0]["metadata"],
        Value::Null,
        "null, not absent"
    );

    // The native dialect answers in kind.
    let native = discover_one(&mut raw, "n", root.to_str().unwrap()).await;
    assert_eq!(
        native["plugin"]["manifest"]["path"],
        root.join(".codex-plugin/plugin.json").to_str().unwrap()
    );
}

#[tokio::test]
async fn inline_mcp_servers_suppress_the_default_file_and_bad_declarations_warn() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let cursor = root.join("cursor");
    write(
        &cursor.join(".cursor-plugin/plugin.json"),
        r#"{"name":"cursor-demo","mcpServers":{"inline":{"command":"inline"}}}"#,
    );
    write(&cursor.join(".mcp.json"), r#"{"mcpServers":{}}"#);
    let odd = root.join("odd");
    write(
        &odd.join(".codex-plugin/plugin.json"),
        r#"{"mcpServers":"config/mcp.json","apps":"./../outside.json"}"#,
    );
    write(&odd.join(".mcp.json"), "default\n");

    let server = Server::start(&[]);
    let mut raw = server.raw().await;
    raw.handshake().await;
    let found = discover_one(&mut raw, "cursor@1", cursor.to_str().unwrap()).await;
    assert_eq!(
        (&found["error"], &found["warnings"]),
        (&Value::Null, &json!([]))
    );
    assert_eq!(
        found["plugin"]["manifest"]["path"],
        cursor.join(".cursor-plugin/plugin.json").to_str().unwrap()
    );
    assert_eq!(found["plugin"]["mcpConfig"], Value::Null);
    assert_eq!(found["plugin"]["appsConfig"], Value::Null);

    let found = discover_one(&mut raw, "odd", odd.to_str().unwrap()).await;
    let manifest = odd.join(".codex-plugin/plugin.json");
    assert_eq!(
        found["warnings"],
        json!([
            format!(
                "ignoring mcpServers in {}: path must start with `./`",
                manifest.display()
            ),
            format!(
                "ignoring apps in {}: path must remain below the capability root",
                manifest.display()
            ),
        ])
    );
    assert_eq!(found["plugin"]["mcpConfig"]["contents"], "default\n");
    assert_eq!(found["plugin"]["appsConfig"], Value::Null);
}

#[tokio::test]
async fn a_root_inside_a_plugin_is_namespaced_by_the_nearest_ancestor_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().canonicalize().unwrap().join("plugin");
    write(
        &plugin.join(".claude-plugin/plugin.json"),
        r#"{"name":"outer"}"#,
    );
    write(&plugin.join("skills/a/SKILL.md"), "a\n");
    let server = Server::start(&[]);
    let mut raw = server.raw().await;
    raw.handshake().await;
    let skills = plugin.join("skills");
    let found = discover_one(&mut raw, "s", skills.to_str().unwrap()).await;
    assert_eq!(found["plugin"], Value::Null, "{found}");
    assert_eq!(
        paths(&found["namespaceManifests"]),
        vec![json!(plugin
            .join(".claude-plugin/plugin.json")
            .to_str()
            .unwrap())]
    );
    assert_eq!(
        found["skills"][0]["instructions"]["path"],
        skills.join("a/SKILL.md").to_str().unwrap()
    );
}

#[tokio::test]
async fn failures_stay_with_their_root_and_the_request_has_limits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    write(&root.join("file"), "x");
    write(&root.join("ok/skills/s/SKILL.md"), "s\n");
    write(
        &root.join("ok/skills/big/SKILL.md"),
        &"x".repeat(1024 * 1024 + 1),
    );
    std::fs::write(root.join("ok/skills/s/agents"), b"").unwrap();

    let server = Server::start(&[]);
    let mut early = server.raw().await;
    let (code, message) = early
        .call_err("capabilityRoots/discoverV1", json!({"roots": []}))
        .await;
    assert_eq!(
        (code, message.as_str()),
        (
            -32600,
            "client must call initialize before using capability discovery methods"
        )
    );

    let mut raw = server.raw().await;
    raw.handshake().await;
    let file = root.join("file");
    let missing = root.join("missing");
    let big = root.join("ok/skills/big/SKILL.md");
    let result = raw
        .call(
            "capabilityRoots/discoverV1",
            json!({"roots": [
                {"id": "file", "path": file},
                {"id": "missing", "path": missing},
                {"id": "foreign", "path": "file://server/share"},
                {"id": "ok", "path": root.join("ok")},
            ]}),
        )
        .await;
    let roots = result["roots"].as_array().unwrap();
    let ids: Vec<&Value> = roots.iter().map(|r| &r["id"]).collect();
    assert_eq!(ids, vec!["file", "missing", "foreign", "ok"]);
    assert_eq!(
        roots[0]["error"],
        format!("capability root {} is not a directory", file.display())
    );
    assert_eq!(
        roots[1]["error"],
        format!(
            "failed to inspect capability root {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert_eq!(
        roots[2]["error"],
        "failed to inspect capability root file://server/share: 'file://server/share' is invalid on 'linux'"
    );
    let ok = &roots[3];
    assert_eq!(ok["error"], Value::Null);
    // A metadata path through a file cannot be inspected: a warning too.
    let metadata = root.join("ok/skills/s/agents/openai.yaml");
    assert_eq!(
        ok["warnings"],
        json!([
            format!(
                "capability file {} exceeds the 1048576-byte limit",
                big.display()
            ),
            format!(
                "failed to inspect capability file {}: Not a directory (os error 20)",
                metadata.display()
            ),
        ])
    );
    assert_eq!(ok["skills"].as_array().unwrap().len(), 1, "{ok}");

    let too_many: Vec<Value> = (0..129)
        .map(|i| json!({"id": i.to_string(), "path": root}))
        .collect();
    let (code, message) = raw
        .call_err("capabilityRoots/discoverV1", json!({"roots": too_many}))
        .await;
    assert_eq!(
        (code, message.as_str()),
        (
            -32600,
            "capability root discovery accepts at most 128 roots"
        )
    );
    let (code, _) = raw
        .call_err("capabilityRoots/discoverV1", json!({"roots": [{"id": 1}]}))
        .await;
    assert_eq!(code, -32602);
}
