//! Test utilities for the filesystem area: a real exec-server over a real
//! WebSocket with a minimal JSON-RPC client, the fs-helper run directly, and
//! sandbox contexts.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const BIN: &str = env!("CARGO_BIN_EXE_codexbox");

/// Largest message the test client accepts.
pub const CLIENT_MESSAGE_BYTES: usize = 512 * 1024 * 1024;

/// A running exec-server, killed on drop.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with_env(&[])
    }

    pub fn start_with_env(env: &[(&str, &str)]) -> Server {
        Self::start_with(&[], env)
    }

    /// A server with extra command-line flags and environment.
    pub fn start_with(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(BIN);
        command
            .args(["exec-server", "--listen", "ws://127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn exec-server");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read listen line");
        let url = line.trim().to_owned();
        assert!(url.starts_with("ws://"), "unexpected listen line {line:?}");
        Server { child, url }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn connect(&self) -> Client {
        Client::connect(&self.url).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON-RPC error as the test sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcErr {
    pub code: i64,
    pub message: String,
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A minimal client: one request at a time, notifications skipped.
pub struct Client {
    ws: tokio::sync::Mutex<Ws>,
    next_id: AtomicI64,
}

impl Client {
    pub async fn connect(url: &str) -> Client {
        // Large enough for a 64 MiB `fs/readFile` answer (≈ 90 MB of text).
        let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
            .max_message_size(Some(CLIENT_MESSAGE_BYTES))
            .max_frame_size(Some(CLIENT_MESSAGE_BYTES));
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), false)
            .await
            .expect("websocket connect");
        let client = Client {
            ws: tokio::sync::Mutex::new(ws),
            next_id: AtomicI64::new(1),
        };
        client
            .call("initialize", json!({"clientName": "fs-tests"}))
            .await
            .expect("initialize");
        client.notify("initialized").await;
        client
    }

    pub async fn notify(&self, method: &str) {
        let text = json!({"method": method}).to_string();
        self.ws
            .lock()
            .await
            .send(Message::text(text))
            .await
            .expect("send");
    }

    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcErr> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let text = json!({"id": id, "method": method, "params": params}).to_string();
        let answer = self.send_raw(text, &json!(id)).await;
        if let Some(error) = answer.get("error") {
            return Err(RpcErr {
                code: error["code"].as_i64().unwrap_or(0),
                message: error["message"].as_str().unwrap_or("").to_owned(),
            });
        }
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Sends `text` as one frame and returns the first message whose `id`
    /// is `id` (skipping notifications and other answers).
    pub async fn send_raw(&self, text: String, id: &Value) -> Value {
        let mut ws = self.ws.lock().await;
        ws.send(Message::text(text)).await.expect("send");
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(60), ws.next())
                .await
                .expect("no answer within 60 s")
                .expect("connection closed")
                .expect("websocket error");
            let text = match frame {
                Message::Text(text) => text.to_string(),
                Message::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                _ => continue,
            };
            let value: Value = serde_json::from_str(&text).expect("json");
            if value.get("id") == Some(id) {
                return value;
            }
        }
    }

    pub async fn ok(&self, method: &str, params: Value) -> Value {
        match self.call(method, params.clone()).await {
            Ok(value) => value,
            Err(err) => panic!("{method} {params} failed: {err:?}"),
        }
    }

    pub async fn err(&self, method: &str, params: Value) -> RpcErr {
        match self.call(method, params.clone()).await {
            Ok(value) => panic!("{method} {params} unexpectedly succeeded: {value}"),
            Err(err) => err,
        }
    }
}

/// The two path dialects of docs/protocol.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Native,
    Uri,
}

pub const DIALECTS: [Dialect; 2] = [Dialect::Native, Dialect::Uri];

impl Dialect {
    pub fn path(self, path: &Path) -> String {
        match self {
            Dialect::Native => path.to_string_lossy().into_owned(),
            Dialect::Uri => codexbox::wire_path::to_file_uri(path.as_os_str()),
        }
    }
}

pub fn b64(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(data)
}

pub fn unb64(text: &Value) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text.as_str().expect("base64 string"))
        .expect("valid base64")
}

/// Runs the fs-helper one-request form with `stdin`; returns (exit code, stdout, stderr).
pub fn helper_once(args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn helper");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A temporary directory outside `/tmp` and `$TMPDIR`, so that sandbox
/// profiles writing them do not cover it and its links are the user's.
pub fn workdir() -> tempfile::TempDir {
    super::host::dir_outside_tmp("fs-test-")
}

pub fn canonical(dir: &tempfile::TempDir) -> PathBuf {
    std::fs::canonicalize(dir.path()).expect("canonicalize")
}

/// A restricted profile from `(path, access)` pairs plus extra raw entries.
pub fn restricted(entries: &[(&Path, &str)], extra: &[Value]) -> Value {
    let mut list: Vec<Value> = entries
        .iter()
        .map(|(path, access)| {
            json!({"path": {"type": "path", "path": path.to_string_lossy()}, "access": access})
        })
        .collect();
    list.extend_from_slice(extra);
    json!({"type": "managed", "file_system": {"type": "restricted", "entries": list}, "network": "restricted"})
}

pub fn special(kind: &str, access: &str) -> Value {
    json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access})
}

/// A sandbox context with the given profile and cwd (= the only workspace root).
pub fn sandbox(permissions: Value, cwd: &Path) -> Value {
    json!({
        "permissions": permissions,
        "cwd": cwd.to_string_lossy(),
        "workspaceRoots": [cwd.to_string_lossy()],
        "windowsSandboxLevel": "disabled",
    })
}

/// Whether the Linux sandbox can run here (user namespaces, a working
/// `codex-linux-sandbox`), by the one skip rule of [`super::host`].
pub fn sandbox_available() -> bool {
    super::host::host_has("a working Linux sandbox", linux_sandbox_runs())
}

fn linux_sandbox_runs() -> Result<(), String> {
    let out = Command::new(BIN)
        .args([
            "linux-sandbox",
            "--sandbox-policy-cwd",
            "/",
            "--permission-profile",
            r#"{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"}"#,
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
        Err(err) => Err(format!("cannot run the sandbox: {err}")),
    }
}

/// Pids of live `fs-helper --serve` processes that descend from `ancestor`.
pub fn serving_helpers(ancestor: u32) -> Vec<u32> {
    descendants_where(ancestor, |args| {
        args.len() >= 3 && args[1] == b"--codex-run-as-fs-helper" && args[2] == b"--serve"
    })
}

/// Pids of live outer `codex-linux-sandbox` processes under `ancestor`.
pub fn sandbox_wrappers(ancestor: u32) -> Vec<u32> {
    descendants_where(ancestor, |args| {
        args.len() >= 2
            && args[0].ends_with(b"codex-linux-sandbox")
            && args[1] == b"--sandbox-policy-cwd"
    })
}

fn descendants_where(ancestor: u32, matches: impl Fn(&[&[u8]]) -> bool) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if matches(&args) && descends_from(pid, ancestor) {
            out.push(pid);
        }
    }
    out
}

fn descends_from(mut pid: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        if pid == ancestor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            return false;
        };
        let Some(ppid) = after.split(' ').nth(1).and_then(|s| s.parse::<u32>().ok()) else {
            return false;
        };
        if ppid <= 1 {
            return false;
        }
        pid = ppid;
    }
    false
}

/// Polls `check` every 20 ms for up to 30 s.
pub async fn eventually(mut check: impl FnMut() -> bool) -> bool {
    for _ in 0..1500 {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A recursive listing of `dir` (relative paths, sorted), to prove a denied
/// operation changed nothing. Entries that vanish while it walks are left out.
pub fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(base)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            // An entry gone since the listing (a sandbox helper's transient
            // mask) is simply not in the snapshot; a comparison still sees it
            // missing if it mattered.
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => panic!("lstat {}: {err}", path.display()),
            };
            if meta.file_type().is_symlink() {
                let Ok(target) = std::fs::read_link(&path) else {
                    continue;
                };
                out.push((format!("{rel} -> {}", target.display()), Vec::new()));
            } else if meta.is_dir() {
                out.push((format!("{rel}/"), Vec::new()));
                walk(base, &path, out);
            } else if meta.is_file() {
                out.push((rel, std::fs::read(&path).unwrap_or_default()));
            } else {
                out.push((format!("{rel} (special)"), Vec::new()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
