//! The fs-helper mode run directly: the one-request form and the persistent
//! `--serve` form, under each of its three names.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use crate::common::fs::{b64, helper_once, workdir, BIN};
use serde_json::{json, Value};

#[test]
fn one_request_form_answers_ok_and_error_and_exits_zero() {
    let dir = workdir();
    let file = dir.path().join("a.txt");
    std::fs::write(&file, b"hello").unwrap();
    let request = json!({"operation": "fs/readFile", "params": {"path": file, "sandbox": null}});
    let (code, stdout, _) = helper_once(&["fs-helper"], &request.to_string());
    assert_eq!(code, 0);
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        answer,
        json!({"status": "ok", "payload": {"operation": "fs/readFile", "response": {"dataBase64": b64(b"hello")}}})
    );
    assert!(stdout.ends_with('\n') && stdout.trim().lines().count() == 1);

    let missing = dir.path().join("missing");
    let request = json!({"operation": "fs/getMetadata", "params": {"path": missing}});
    let (code, stdout, _) = helper_once(&["--codex-run-as-fs-helper"], &request.to_string());
    assert_eq!(code, 0);
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        answer,
        json!({"status": "error", "payload": {"code": -32004, "message": "No such file or directory (os error 2)"}})
    );
}

#[test]
fn one_request_form_accepts_file_uris_and_answers_in_kind() {
    let dir = workdir();
    let real = std::fs::canonicalize(dir.path()).unwrap();
    std::os::unix::fs::symlink(&real, real.join("alias")).unwrap();
    let uri = codexbox::wire_path::to_file_uri(real.join("alias").as_os_str());
    let request = json!({"operation": "fs/canonicalize", "params": {"path": uri}});
    let (code, stdout, _) = helper_once(&["fs-helper"], &request.to_string());
    assert_eq!(code, 0);
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        answer["payload"]["response"]["path"],
        json!(codexbox::wire_path::to_file_uri(real.as_os_str()))
    );
}

#[test]
fn one_request_form_reports_its_own_failure_on_stderr_with_exit_one() {
    let (code, stdout, stderr) = helper_once(&["fs-helper"], "not json");
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("fs sandbox helper failed: "),
        "stderr: {stderr}"
    );
}

#[test]
fn argv0_codex_fs_helper_selects_the_mode() {
    use std::os::unix::process::CommandExt;
    let dir = workdir();
    let mut child = Command::new(BIN)
        .arg0("codex-fs-helper")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let request =
        json!({"operation": "fs/createDirectory", "params": {"path": dir.path().join("x/y")}});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["status"], "ok");
    assert!(dir.path().join("x/y").is_dir());
}

/// `fs-helper --serve` with its stdin and (buffered) stdout.
fn spawn_serve() -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut child = Command::new(BIN)
        .args(["fs-helper", "--serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdin, stdout)
}

#[test]
fn serve_form_answers_each_request_with_its_id_until_eof() {
    let dir = workdir();
    std::fs::write(dir.path().join("f"), b"data").unwrap();
    let (mut child, mut stdin, mut stdout) = spawn_serve();
    let mut ask = |request: Value| -> Value {
        writeln!(stdin, "{request}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let a = ask(
        json!({"id": 1, "operation": "fs/getMetadata", "params": {"path": dir.path().join("f")}}),
    );
    assert_eq!(a["id"], 1);
    assert_eq!(a["status"], "ok");
    assert_eq!(a["payload"]["operation"], "fs/getMetadata");
    assert_eq!(a["payload"]["response"]["size"], 4);
    let b = ask(json!({"id": "two", "operation": "fs/readFile", "params": {"path": dir.path()}}));
    assert_eq!(b["id"], "two");
    assert_eq!(
        b["payload"],
        json!({"code": -32600, "message": format!("path `{}` is not a file", dir.path().display())})
    );
    let c = ask(json!({"id": 3, "operation": "fs/open", "params": {}}));
    assert_eq!(c["id"], 3);
    assert_eq!(c["status"], "error");
    let d = ask(
        json!({"id": 4, "operation": "fs/writeFile", "params": {"path": dir.path().join("g"), "dataBase64": b64(b"xyz")}}),
    );
    assert_eq!(d["status"], "ok");
    assert_eq!(std::fs::read(dir.path().join("g")).unwrap(), b"xyz");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn serve_form_keeps_stream_handles_between_requests() {
    let dir = workdir();
    let path = dir.path().join("streamed");
    let (mut child, mut stdin, mut stdout) = spawn_serve();
    let mut ask = |operation: &str, params: Value| -> Value {
        writeln!(
            stdin,
            "{}",
            json!({"id": 1, "operation": operation, "params": params})
        )
        .unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["status"], "ok", "{operation}: {answer}");
        answer["payload"]["response"].clone()
    };
    ask(
        "fs/open",
        json!({"handleId": "w", "path": path, "mode": "create"}),
    );
    ask(
        "fs/writeBlock",
        json!({"handleId": "w", "offset": 3, "dataBase64": b64(b"def")}),
    );
    ask(
        "fs/writeBlock",
        json!({"handleId": "w", "offset": 0, "dataBase64": b64(b"abc")}),
    );
    ask("fs/close", json!({"handleId": "w"}));
    assert_eq!(std::fs::read(&path).unwrap(), b"abcdef");
    ask("fs/open", json!({"handleId": "r", "path": path}));
    let block = ask(
        "fs/readBlock",
        json!({"handleId": "r", "offset": 2, "len": 3}),
    );
    assert_eq!(block["chunk"], b64(b"cde"));
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn one_request_form_refuses_streaming_operations() {
    let dir = workdir();
    let request = json!({"operation": "fs/open", "params": {"handleId": "w", "path": dir.path().join("x"), "mode": "create"}});
    let (code, stdout, _) = helper_once(&["fs-helper"], &request.to_string());
    assert_eq!(code, 0);
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        answer,
        json!({"status": "error", "payload": {"code": -32600,
            "message": "`fs/open` needs the persistent form of the fs helper (--serve)"}})
    );
    assert!(!dir.path().join("x").exists());
}
