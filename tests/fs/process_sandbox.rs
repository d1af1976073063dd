//! Sandboxed `process/start` (docs/protocol.md): the command runs under
//! `codex-linux-sandbox` with the materialized profile, and `sandboxDenied`
//! follows the reference heuristic.

use std::path::Path;

use crate::common::fs::{
    canonical, restricted, sandbox, sandbox_available, special, workdir, Client, Server,
};
use serde_json::{json, Value};

/// Starts `argv` in `cwd` under `sandbox` and polls `process/read` until it
/// has exited; returns (exitCode, sandboxDenied, combined output).
async fn run(
    client: &Client,
    id: &str,
    argv: &[&str],
    cwd: &Path,
    sandbox: Value,
) -> (i64, bool, String) {
    let params = json!({"processId": id, "argv": argv, "cwd": cwd,
                        "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": sandbox});
    run_start(client, params).await
}

/// Starts a process with `params` and polls `process/read` until it has
/// exited; returns (exitCode, sandboxDenied, combined output).
async fn run_start(client: &Client, params: Value) -> (i64, bool, String) {
    let id = params["processId"].as_str().unwrap_or_default().to_owned();
    client.ok("process/start", params).await;
    let mut output = String::new();
    let mut after: Option<u64> = None;
    loop {
        let read = client
            .ok(
                "process/read",
                json!({"processId": &id, "afterSeq": after, "waitMs": 1000}),
            )
            .await;
        for chunk in read["chunks"].as_array().into_iter().flatten() {
            output.push_str(&String::from_utf8_lossy(&crate::common::fs::unb64(
                &chunk["chunk"],
            )));
        }
        after = read["nextSeq"].as_u64().map(|next| next.saturating_sub(1));
        if read["closed"] == true {
            return (
                read["exitCode"].as_i64().unwrap_or(-1),
                read["sandboxDenied"].as_bool().unwrap_or(false),
                output,
            );
        }
    }
}

#[tokio::test]
async fn a_denied_write_reports_sandbox_denied_and_changes_nothing() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let work_dir = workdir();
    let outside_dir = workdir();
    let work = canonical(&work_dir);
    let outside = canonical(&outside_dir);
    let ctx = sandbox(
        restricted(&[(&work, "write")], &[special("root", "read")]),
        &work,
    );
    let target = outside.join("planted");
    let script = format!("echo x > '{}'", target.display());
    let (code, denied, output) =
        run(&client, "deny", &["sh", "-c", &script], &work, ctx.clone()).await;
    assert_ne!(code, 0, "{output}");
    assert!(denied, "sandboxDenied false for: {output}");
    assert!(!target.exists());

    let script = format!("echo ok > '{}'", work.join("allowed").display());
    let (code, denied, output) =
        run(&client, "allow", &["sh", "-c", &script], &work, ctx.clone()).await;
    assert_eq!((code, denied), (0, false), "{output}");
    assert_eq!(std::fs::read(work.join("allowed")).unwrap(), b"ok\n");

    let (code, denied, _) = run(
        &client,
        "exit1",
        &["sh", "-c", "exit 1"],
        &work,
        ctx.clone(),
    )
    .await;
    assert_eq!((code, denied), (1, false));
}

/// The request's `arg0` is what a sandboxed command sees as its argv[0],
/// as it is unsandboxed (pipes and a terminal), with the system bubblewrap
/// (which cannot set argv[0] itself) and the built-in launcher.
#[tokio::test]
async fn arg0_reaches_a_sandboxed_command_with_either_launcher() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let work_dir = workdir();
    let work = canonical(&work_dir);
    let ctx = sandbox(restricted(&[], &[special("root", "read")]), &work);
    let mut launchers = vec!["builtin"];
    if crate::common::host::host_has(
        "bubblewrap on PATH",
        crate::common::host::runs("bwrap", &["--version"]),
    ) {
        launchers.push("system");
    }
    let mut cases = vec![("unsandboxed", "builtin", Value::Null)];
    cases.extend(
        launchers
            .iter()
            .map(|launcher| ("sandboxed", *launcher, ctx.clone())),
    );
    for (what, launcher, sandbox) in cases {
        for tty in [false, true] {
            let id = format!("{what}-{launcher}-{tty}");
            let params = json!({"processId": id, "argv": ["/bin/sh", "-c", "echo \"$0\""],
                                "cwd": work, "arg0": "custom-arg0", "tty": tty,
                                "env": {"PATH": "/usr/bin:/bin", "CODEXBOX_BWRAP": launcher},
                                "sandbox": sandbox});
            let (code, _, output) = run_start(&client, params).await;
            assert_eq!(code, 0, "{id}: {output}");
            assert_eq!(output.trim_end(), "custom-arg0", "{id}");
        }
    }
}

#[tokio::test]
async fn empty_workspace_roots_grant_nothing_to_a_process() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let work_dir = workdir();
    let work = canonical(&work_dir);
    std::fs::write(work.join("f"), b"content").unwrap();
    let profile = restricted(
        &[],
        &[
            special("minimal", "read"),
            json!({"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "read"}),
        ],
    );
    let with_root = json!({"permissions": profile, "cwd": work, "workspaceRoots": [work], "windowsSandboxLevel": "disabled"});
    let (code, _, output) = run(&client, "with", &["/bin/cat", "f"], &work, with_root).await;
    assert_eq!(code, 0, "{output}");
    assert_eq!(output, "content");
    let without = json!({"permissions": profile, "cwd": work, "workspaceRoots": [], "windowsSandboxLevel": "disabled"});
    let (code, _, output) = run(
        &client,
        "without",
        &["/bin/cat", &work.join("f").to_string_lossy()],
        &work,
        without,
    )
    .await;
    assert_ne!(code, 0, "read allowed without workspace roots: {output}");
}

#[tokio::test]
async fn bad_sandbox_objects_are_invalid_params() {
    let server = Server::start();
    let client = server.connect().await;
    let start = |sandbox: Value| json!({"processId": "p", "argv": ["true"], "cwd": "/", "env": {}, "tty": false, "sandbox": sandbox});
    let err = client
        .err(
            "process/start",
            start(json!({"permissions": {"type": "disabled"}, "cwd": "file://host/x"})),
        )
        .await;
    assert_eq!(err.code, -32602);
    assert_eq!(
        err.message,
        "sandbox cwd URI `file://host/x` is not valid on this exec-server host: 'file://host/x' is invalid on 'linux'"
    );
    let err = client
        .err(
            "process/start",
            start(json!({"permissions": {"type": "bogus"}})),
        )
        .await;
    assert_eq!(err.code, -32602);
}

#[tokio::test]
async fn the_legacy_sandbox_policy_shape_wraps_processes_too() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let work_dir = workdir();
    let outside_dir = workdir();
    let work = canonical(&work_dir);
    let outside = canonical(&outside_dir);
    let legacy = json!({
        "sandboxPolicy": {"type": "workspace-write", "network_access": false,
                          "exclude_slash_tmp": true, "exclude_tmpdir_env_var": true},
        "sandboxPolicyCwd": work,
    });
    let script = format!(
        "echo in > '{}' && echo out > '{}'",
        work.join("in").display(),
        outside.join("out").display()
    );
    let (code, denied, output) =
        run(&client, "legacy", &["sh", "-c", &script], &work, legacy).await;
    assert_ne!(code, 0, "{output}");
    assert!(denied, "{output}");
    assert_eq!(std::fs::read(work.join("in")).unwrap(), b"in\n");
    assert!(!outside.join("out").exists());
}
