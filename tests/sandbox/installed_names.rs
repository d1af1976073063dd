//! The binary installed under the reference's names — a copy or a hard
//! link named `codex-linux-sandbox`, `codex-exec-server` or `codex` —
//! still sandboxes: its re-execs of itself (the sandbox's inner stage, the
//! server's fs-helper) select their mode whatever the binary is called,
//! with the system bubblewrap (0.8 here, which cannot set argv[0]) and with
//! the built-in launcher.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::common::client::Server;
use crate::common::host::{host_has, runs};
use crate::common::sandbox::{require_sandbox, stderr, stdout, workspace_only, Ws, BIN};

#[derive(Debug, Clone, Copy)]
enum Install {
    Copy,
    HardLink,
}

/// `name` in `dir`: a copy of the binary or a hard link to it (`dir` is on
/// the binary's file system, under cargo's target directory). `cp` copies,
/// so the descriptor written through is never inherited by a process this
/// test binary forks meanwhile (which would make the exec fail with
/// ETXTBSY).
fn install(dir: &Path, name: &str, how: Install) -> PathBuf {
    let path = dir.join(format!("{how:?}")).join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    match how {
        Install::Copy => {
            let status = Command::new("cp").arg(BIN).arg(&path).status().unwrap();
            assert!(status.success(), "cp {BIN} {}: {status}", path.display());
        }
        Install::HardLink => std::fs::hard_link(BIN, &path).unwrap(),
    }
    path
}

/// The launchers to try: `CODEXBOX_BWRAP` values.
fn launchers() -> Vec<&'static str> {
    let mut launchers = vec!["builtin"];
    if host_has("bubblewrap on PATH", runs("bwrap", &["--version"])) {
        launchers.push("system");
    }
    launchers
}

/// The directory holding installed copies (the workspace profile must not
/// make them writable, so not under the workspace).
fn install_dir(w: &Ws) -> PathBuf {
    let dir = w.root.join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `EXE [linux-sandbox] --sandbox-policy-cwd WS --permission-profile P -- sh -c SCRIPT`.
fn sandboxed(exe: &Path, launcher: &str, w: &Ws, script: &str) -> Output {
    let mut cmd = Command::new(exe);
    if exe
        .file_name()
        .is_some_and(|name| name != "codex-linux-sandbox")
    {
        cmd.arg("linux-sandbox");
    }
    cmd.arg("--sandbox-policy-cwd")
        .arg(&w.ws)
        .arg("--permission-profile")
        .arg(workspace_only("restricted"))
        .args(["--backend", "bwrap", "--", "sh", "-c", script])
        .current_dir(&w.ws)
        .env("CODEXBOX_BWRAP", launcher)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_sandboxed_command_runs_whatever_name_the_binary_has() {
    require_sandbox!();
    let w = Ws::new();
    let dir = install_dir(&w);
    let outside = w.outside.join("escaped");
    let script = format!(
        "echo inside > made && cat made; echo x > {}",
        outside.display()
    );
    for how in [Install::Copy, Install::HardLink] {
        // `codex-exec-server` runs only the server: see the next test.
        for name in ["codex-linux-sandbox", "codex"] {
            let exe = install(&dir, name, how);
            for launcher in launchers() {
                let out = sandboxed(&exe, launcher, &w, &script);
                let what = format!("{how:?} {name} with the {launcher} launcher");
                assert_eq!(stdout(&out), "inside\n", "{what}: {}", stderr(&out));
                assert!(!out.status.success(), "{what}: the outside write fails");
                assert!(!outside.exists(), "{what}: wrote outside the workspace");
                std::fs::remove_file(w.ws.join("made")).unwrap();
            }
        }
    }
}

/// Starts the server through `exe` (`codex exec-server` or
/// `codex-exec-server`).
fn server(exe: &Path, launcher: &str) -> Server {
    let mut command = Command::new(exe);
    if exe.file_name().is_some_and(|name| name == "codex") {
        command.arg("exec-server");
    }
    command
        .args(["--listen", "ws://127.0.0.1:0"])
        .env("CODEXBOX_BWRAP", launcher)
        .env_remove("CODEXBOX_AUTH_TOKEN");
    Server::start_command(command, &exe.display().to_string())
}

/// The sandbox context granting writes to the workspace only.
fn workspace_sandbox(w: &Ws) -> Value {
    let permissions: Value = serde_json::from_str(&workspace_only("restricted")).unwrap();
    json!({"permissions": permissions, "cwd": w.ws, "workspaceRoots": [w.ws]})
}

#[tokio::test]
async fn the_server_sandboxes_whatever_name_the_binary_has() {
    require_sandbox!();
    let installed = Ws::new();
    let dir = install_dir(&installed);
    for how in [Install::Copy, Install::HardLink] {
        for name in ["codex-exec-server", "codex"] {
            let exe = install(&dir, name, how);
            for launcher in launchers() {
                let what = format!("{how:?} {name} with the {launcher} launcher");
                // A workspace per server: the warm fs-helper of the one
                // before may still be removing its mount points.
                let w = Ws::new();
                let sandbox = workspace_sandbox(&w);
                let server = server(&exe, launcher);
                let mut raw = server.raw().await;
                raw.handshake().await;
                raw.call(
                    "process/start",
                    json!({"processId": "p", "argv": ["sh", "-c", "echo sandboxed"],
                           "cwd": w.ws, "env": {"PATH": "/usr/bin:/bin"}, "tty": false,
                           "sandbox": sandbox}),
                )
                .await;
                let read = raw.read_until_closed("p", 0).await;
                assert_eq!(read["exitCode"], 0, "{what}: {read}");
                assert_eq!(
                    read["chunks"][0]["chunk"], "c2FuZGJveGVkCg==",
                    "{what}: {read}"
                );
                // A restricted profile runs in a sandboxed fs-helper.
                let inside = w.ws.join("helper.txt");
                raw.call(
                    "fs/writeFile",
                    json!({"path": inside, "dataBase64": "b2s=", "sandbox": sandbox}),
                )
                .await;
                assert_eq!(std::fs::read(&inside).unwrap(), b"ok", "{what}");
                std::fs::remove_file(&inside).unwrap();
                let (code, message) = raw
                    .call_err(
                        "fs/writeFile",
                        json!({"path": w.outside.join("helper.txt"), "dataBase64": "b2s=",
                               "sandbox": sandbox}),
                    )
                    .await;
                assert_ne!(code, -32602, "{what}: {message}");
                assert!(!w.outside.join("helper.txt").exists(), "{what}");
            }
        }
    }
}
