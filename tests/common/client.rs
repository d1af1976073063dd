//! Test utilities for the exec-server tests (`tests/exec_server_*.rs`): start
//! the real binary, speak raw JSON over a real WebSocket, wait for events with
//! bounded waits (failure guards, never a way to synchronise), and inspect
//! `/proc` for leftover processes.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream as StdTcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_codexbox");
/// Upper bound for any single wait; only reached when something is broken.
pub const WAIT: Duration = Duration::from_secs(10);

/// Standard padded base64.
pub fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Decodes standard padded base64, panicking with the text on failure.
pub fn unb64(text: &str) -> Vec<u8> {
    match base64::engine::general_purpose::STANDARD.decode(text) {
        Ok(bytes) => bytes,
        Err(err) => panic!("invalid base64 {text:?}: {err}"),
    }
}

/// `len` deterministic bytes from `seed` that do not compress into a
/// pattern a bug could hide in.
pub fn pseudo_random_bytes(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// A running `codexbox exec-server`, killed on drop. Its wire trace is on:
/// when it is dropped, every message it sent, and the params of every
/// request it accepted, must match the shipped schemas (`common::wire`).
pub struct Server {
    child: Child,
    /// `ws://IP:PORT` as printed by the server.
    pub url: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Signalled when the server's stderr reaches EOF.
    stderr_done: std::sync::mpsc::Receiver<()>,
}

impl Server {
    /// Starts `exec-server --listen ws://127.0.0.1:0 EXTRA…`.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_listen("ws://127.0.0.1:0", extra, &[])
    }

    /// Starts the server with `--listen LISTEN`, extra arguments and
    /// environment variables, and waits for its `ws://` line.
    pub fn start_listen(listen: &str, extra: &[&str], envs: &[(&str, &str)]) -> Server {
        match Self::try_start(listen, extra, envs) {
            Ok(server) => server,
            Err(failure) => panic!("exec-server did not start: {failure}"),
        }
    }

    /// Like [`start_listen`](Self::start_listen) but returns the exit status
    /// and stderr when the server exits instead of printing its URL.
    pub fn try_start(
        listen: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Server, String> {
        Self::try_start_in(listen, extra, envs, None)
    }

    /// Starts a ws server whose working directory is `dir`.
    pub fn start_in(dir: &Path) -> Server {
        match Self::try_start_in("ws://127.0.0.1:0", &[], &[], Some(dir)) {
            Ok(server) => server,
            Err(failure) => panic!("exec-server did not start: {failure}"),
        }
    }

    fn try_start_in(
        listen: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
        cwd: Option<&Path>,
    ) -> Result<Server, String> {
        let mut command = Command::new(BIN);
        if let Some(dir) = cwd {
            command.current_dir(dir);
        }
        command
            .args(["exec-server", "--listen", listen])
            .args(extra)
            .args(super::wire::TRACE_ARGS)
            .env(super::wire::TRACE_ENV.0, super::wire::TRACE_ENV.1)
            .env_remove("CODEXBOX_AUTH_TOKEN")
            .envs(envs.iter().copied());
        Self::launch(command, &format!("{listen} {extra:?}"))
    }

    /// Starts `exec-server` the way `nohup codexbox … &` in a script does:
    /// with SIGHUP, SIGINT and SIGQUIT ignored, and `envs` set.
    pub fn start_with_ignored_signals(envs: &[(&str, &str)]) -> Server {
        let mut command = Command::new("sh");
        command
            .args([
                "-c",
                "trap '' HUP INT QUIT; exec \"$0\" exec-server --listen ws://127.0.0.1:0 \"$@\"",
                BIN,
            ])
            .args(super::wire::TRACE_ARGS)
            .env(super::wire::TRACE_ENV.0, super::wire::TRACE_ENV.1)
            .env_remove("CODEXBOX_AUTH_TOKEN")
            .envs(envs.iter().copied());
        match Self::launch(command, "under sh with ignored signals") {
            Ok(server) => server,
            Err(failure) => panic!("exec-server did not start: {failure}"),
        }
    }

    /// Starts `command` (which must exec the server, e.g. through
    /// `setpriv`) and waits for its `ws://` line.
    pub fn start_command(command: Command, what: &str) -> Server {
        match Self::launch(command, what) {
            Ok(server) => server,
            Err(failure) => panic!("exec-server did not start: {failure}"),
        }
    }

    /// Runs `command` (which execs the server) and waits for its `ws://` line.
    fn launch(mut command: Command, what: &str) -> Result<Server, String> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|err| format!("spawn {BIN}: {err}"))?;
        let (stderr, stderr_done) = collect_stderr(&mut child);
        let stdout = child.stdout.take().ok_or("no stdout")?;
        // Read the first line on a helper thread so a silent server cannot
        // hang the test.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send((read.map_err(|e| e.to_string()), line));
        });
        let (read, line) = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| (Err("no line within the guard time".into()), String::new()));
        if matches!(read, Ok(n) if n > 0) && line.starts_with("ws://") {
            return Ok(Server {
                child,
                url: line.trim_end().to_owned(),
                stderr,
                stderr_done,
            });
        }
        let status = wait_exit(&mut child);
        // The server is gone, but its stderr may still be on its way to
        // the reader: wait for the end of it before quoting it.
        let _ = stderr_done.recv_timeout(WAIT);
        Err(format!(
            "argv {what}: first stdout line {line:?}, status {status:?}, stderr:\n{}",
            stderr_text(&stderr)
        ))
    }

    /// Starts a server on a Unix socket and waits for the socket to appear.
    pub fn start_unix(socket: &Path, extra: &[&str]) -> Server {
        let listen = format!("unix://{}", socket.display());
        let mut child = match Command::new(BIN)
            .args(["exec-server", "--listen", &listen])
            .args(extra)
            .args(super::wire::TRACE_ARGS)
            .env(super::wire::TRACE_ENV.0, super::wire::TRACE_ENV.1)
            .env_remove("CODEXBOX_AUTH_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(err) => panic!("spawn {BIN}: {err}"),
        };
        let (stderr, stderr_done) = collect_stderr(&mut child);
        let deadline = Instant::now() + WAIT;
        while !socket.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "unix server exited with {status}; stderr:\n{}",
                    stderr_text(&stderr)
                );
            }
            assert!(
                Instant::now() < deadline,
                "socket {socket:?} never appeared"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Server {
            child,
            url: listen,
            stderr,
            stderr_done,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `IP:PORT` of a ws server.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("ws://").trim_end_matches('/')
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        stderr_text(&self.stderr)
    }

    /// Opens a raw WebSocket connection.
    pub async fn raw(&self) -> Raw {
        Raw::connect(&self.url).await
    }

    /// Opens a raw connection and completes the handshake.
    pub async fn session(&self) -> (Raw, String) {
        let mut raw = self.raw().await;
        let session = raw.handshake().await;
        (raw, session)
    }

    /// SIGKILLs the server (no shutdown of any kind) and reaps it.
    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits (bounded) for the server to exit.
    pub fn wait(&mut self) -> Option<std::process::ExitStatus> {
        wait_exit(&mut self.child)
    }

    /// Fails when the server has exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("server exited with {status}; stderr:\n{}", self.stderr());
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            return;
        }
        // Helpers that outlive the server briefly may hold stderr open:
        // check what arrived by then.
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(2));
        let problems = super::wire::mismatches(&self.stderr());
        assert!(
            problems.is_empty(),
            "the server's traffic does not match resources/schema/:\n{}",
            problems.join("\n")
        );
    }
}

/// Collects a child's stderr on a thread; the buffer grows as it writes,
/// and the receiver is signalled at EOF.
pub fn collect_stderr(child: &mut Child) -> (Arc<Mutex<Vec<u8>>>, std::sync::mpsc::Receiver<()>) {
    let buffer = Arc::new(Mutex::new(Vec::new()));
    let (done_tx, done) = std::sync::mpsc::channel();
    if let Some(mut stderr) = child.stderr.take() {
        let sink = Arc::clone(&buffer);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 65536];
            while let Ok(n) = stderr.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                if let Ok(mut bytes) = sink.lock() {
                    bytes.extend_from_slice(&chunk[..n]);
                }
            }
            let _ = done_tx.send(());
        });
    }
    (buffer, done)
}

/// What a [`collect_stderr`] buffer holds so far, as text.
pub fn stderr_text(buffer: &Arc<Mutex<Vec<u8>>>) -> String {
    buffer
        .lock()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Waits (bounded) for a child to exit; kills it when the guard expires.
pub fn wait_exit(child: &mut Child) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + WAIT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// A raw JSON-over-WebSocket connection that keeps notifications that arrive
/// while waiting for a response.
pub struct Raw {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Messages received but not yet consumed.
    pub backlog: VecDeque<Value>,
    next_id: i64,
}

impl Raw {
    pub async fn connect(url: &str) -> Raw {
        Self::connect_authorized(url, None).await
    }

    /// Connects sending `Authorization: Bearer TOKEN` when `token` is set.
    pub async fn connect_authorized(url: &str, token: Option<&str>) -> Raw {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let config = WebSocketConfig::default()
            .max_message_size(Some(512 << 20))
            .max_frame_size(Some(512 << 20));
        let mut request = match url.into_client_request() {
            Ok(request) => request,
            Err(err) => panic!("invalid URL {url}: {err}"),
        };
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().expect("header value");
            request.headers_mut().insert("authorization", value);
        }
        let connect = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
        let (ws, _) = match tokio::time::timeout(WAIT, connect).await {
            Ok(Ok(ws)) => ws,
            Ok(Err(err)) => panic!("connect {url}: {err}"),
            Err(_) => panic!("connect {url}: timed out"),
        };
        Raw {
            ws,
            backlog: VecDeque::new(),
            next_id: 1000,
        }
    }

    /// Sends a JSON value as a text frame.
    pub async fn send(&mut self, value: Value) {
        self.send_text(value.to_string()).await;
    }

    /// Sends a text frame exactly as given.
    pub async fn send_text(&mut self, text: impl Into<String>) {
        let text: String = text.into();
        if let Err(err) = self.ws.send(Message::text(text)).await {
            panic!("send failed: {err}");
        }
    }

    /// Sends a binary frame.
    pub async fn send_binary(&mut self, bytes: Vec<u8>) {
        if let Err(err) = self.ws.send(Message::binary(bytes)).await {
            panic!("send failed: {err}");
        }
    }

    /// The next message from the socket (not the backlog); `None` when the
    /// connection closed.
    pub async fn recv_socket(&mut self) -> Option<Value> {
        self.recv_socket_within(WAIT).await
    }

    /// Like [`recv_socket`](Self::recv_socket), waiting up to `limit`.
    pub async fn recv_socket_within(&mut self, limit: Duration) -> Option<Value> {
        loop {
            let frame = match tokio::time::timeout(limit, self.ws.next()).await {
                Ok(frame) => frame,
                Err(_) => panic!("no message within {limit:?}; backlog {:?}", self.backlog),
            };
            match frame {
                Some(Ok(Message::Text(text))) => match serde_json::from_str(&text) {
                    Ok(value) => return Some(value),
                    Err(err) => panic!("server sent invalid JSON {text:?}: {err}"),
                },
                Some(Ok(Message::Binary(_))) => panic!("server sent a binary frame"),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => continue,
            }
        }
    }

    /// Keeps reading (and so answering the server's pings) in the
    /// background until the connection closes, as a live client does.
    pub fn answer_pings(mut self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move { while let Some(Ok(_)) = self.ws.next().await {} })
    }

    /// The next message, backlog first; panics when the connection closed.
    pub async fn recv(&mut self) -> Value {
        if let Some(value) = self.backlog.pop_front() {
            return value;
        }
        match self.recv_socket().await {
            Some(value) => value,
            None => panic!("connection closed"),
        }
    }

    /// Waits for the response (or error) with `id`, keeping everything else
    /// in the backlog.
    pub async fn response(&mut self, id: &Value) -> Value {
        self.response_within(id, WAIT).await
    }

    /// Like [`response`](Self::response), waiting up to `limit` for each
    /// message (for answers that take long to build, e.g. huge files).
    pub async fn response_within(&mut self, id: &Value, limit: Duration) -> Value {
        if let Some(pos) = self
            .backlog
            .iter()
            .position(|m| m.get("id") == Some(id) && m.get("method").is_none())
        {
            if let Some(value) = self.backlog.remove(pos) {
                return value;
            }
        }
        loop {
            let Some(message) = self.recv_socket_within(limit).await else {
                panic!("connection closed while waiting for response {id}");
            };
            if message.get("id") == Some(id) && message.get("method").is_none() {
                return message;
            }
            self.backlog.push_back(message);
        }
    }

    /// Sends a request with a fresh integer id and returns the whole
    /// response message.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(json!({"id": id, "method": method, "params": params}))
            .await;
        self.response(&id).await
    }

    /// Like [`request`](Self::request), panicking unless it succeeds;
    /// returns the `result`.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let response = self.request(method, params.clone()).await;
        match response.get("result") {
            Some(result) if response.get("error").is_none() => result.clone(),
            _ => panic!("{method} {params} failed: {response}"),
        }
    }

    /// Sends a request expected to fail; returns `(code, message)`.
    pub async fn call_err(&mut self, method: &str, params: Value) -> (i64, String) {
        let response = self.request(method, params.clone()).await;
        error_of(&response).unwrap_or_else(|| panic!("{method} {params} did not fail: {response}"))
    }

    /// `initialize` + `initialized`; returns the session id.
    pub async fn handshake(&mut self) -> String {
        self.handshake_resume(None).await
    }

    /// `initialize` with `resumeSessionId` + `initialized`.
    pub async fn handshake_resume(&mut self, resume: Option<&str>) -> String {
        let params = json!({"clientName": "exec-server-tests", "resumeSessionId": resume});
        let deadline = Instant::now() + WAIT;
        let result = loop {
            let response = self.request("initialize", params.clone()).await;
            match error_of(&response) {
                None => break response["result"].clone(),
                // The server may still be detaching the closed connection.
                Some((-32010, _)) if resume.is_some() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Some(_) => panic!("initialize {params} failed: {response}"),
            }
        };
        self.send(json!({"method": "initialized", "params": {}}))
            .await;
        match result.get("sessionId").and_then(Value::as_str) {
            Some(session) => session.to_owned(),
            None => panic!("initialize result without sessionId: {result}"),
        }
    }

    /// The next notification with `method` about `process_id`, skipping
    /// (and keeping) everything else.
    pub async fn notification(&mut self, method: &str, process_id: &str) -> Value {
        let matches = |m: &Value| {
            m.get("method").and_then(Value::as_str) == Some(method)
                && m["params"]["processId"].as_str() == Some(process_id)
        };
        if let Some(pos) = self.backlog.iter().position(matches) {
            if let Some(value) = self.backlog.remove(pos) {
                return value["params"].clone();
            }
        }
        loop {
            let Some(message) = self.recv_socket().await else {
                panic!("connection closed while waiting for {method} of {process_id}");
            };
            if matches(&message) {
                return message["params"].clone();
            }
            self.backlog.push_back(message);
        }
    }

    /// Every `process/*` notification of `process_id` up to and including
    /// `process/closed`, in arrival order. Other messages stay in the
    /// backlog.
    pub async fn events_until_closed(&mut self, process_id: &str) -> Vec<Event> {
        let mut events = Vec::new();
        let mut kept = VecDeque::new();
        let mut pending: VecDeque<Value> = std::mem::take(&mut self.backlog);
        loop {
            let message = match pending.pop_front() {
                Some(message) => message,
                None => match self.recv_socket().await {
                    Some(message) => message,
                    None => panic!(
                        "connection closed before process/closed of {process_id}; events {events:?}"
                    ),
                },
            };
            match Event::parse(&message) {
                Some(event) if event.process_id == process_id => {
                    let closed = event.kind == "closed";
                    events.push(event);
                    if closed {
                        kept.extend(pending);
                        self.backlog = kept;
                        return events;
                    }
                }
                _ => kept.push_back(message),
            }
        }
    }

    /// Accumulates the output of `process_id` until it contains `needle`;
    /// returns everything gathered.
    pub async fn output_until(&mut self, process_id: &str, needle: &str) -> Vec<Event> {
        let mut events = Vec::new();
        let mut text = String::new();
        while !text.contains(needle) {
            let params = self.notification("process/output", process_id).await;
            let event = Event::from_params("output", &params);
            text.push_str(&String::from_utf8_lossy(&event.data));
            events.push(event);
        }
        events
    }

    /// Long-polls `process/read` until the process is closed, then returns
    /// a full read of everything after `after_seq`.
    pub async fn read_until_closed(&mut self, process_id: &str, after_seq: u64) -> Value {
        let mut cursor = after_seq;
        for round in 0.. {
            assert!(round < 1000, "{process_id} never closed");
            let read = self
                .call(
                    "process/read",
                    json!({"processId": process_id, "afterSeq": cursor, "waitMs": 10000}),
                )
                .await;
            if read["closed"] == true {
                break;
            }
            let next = read["nextSeq"].as_u64().unwrap_or(cursor + 1);
            assert!(
                next > cursor || read["chunks"] == json!([]),
                "nextSeq went back: {read}"
            );
            cursor = next.saturating_sub(1).max(cursor);
        }
        self.call(
            "process/read",
            json!({"processId": process_id, "afterSeq": after_seq}),
        )
        .await
    }

    /// Sends a text frame; `false` when the connection failed while sending
    /// (the server may close before it has read a large frame).
    pub async fn try_send_text(&mut self, text: impl Into<String>) -> bool {
        self.ws.send(Message::text(text.into())).await.is_ok()
    }

    /// Reads until the server closes the connection and returns the close
    /// code it sent (`None` when it closed without a close frame); panics on
    /// any data message.
    pub async fn close_code(&mut self) -> Option<u16> {
        loop {
            let frame = match tokio::time::timeout(WAIT, self.ws.next()).await {
                Ok(frame) => frame,
                Err(_) => panic!("the connection was not closed within {WAIT:?}"),
            };
            match frame {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(Message::Text(text))) => panic!("expected a close, got {text}"),
                Some(Ok(Message::Binary(_))) => panic!("server sent a binary frame"),
                Some(Ok(_)) => continue,
                None | Some(Err(_)) => return None,
            }
        }
    }

    /// Closes the WebSocket.
    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
        // Wait for the server's close so the detach has happened.
        let _ = tokio::time::timeout(WAIT, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
    }
}

/// `(code, message)` of an error response.
pub fn error_of(response: &Value) -> Option<(i64, String)> {
    let error = response.get("error")?;
    Some((
        error.get("code")?.as_i64()?,
        error.get("message")?.as_str()?.to_owned(),
    ))
}

/// A decoded process notification.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `output`, `exited` or `closed`.
    pub kind: String,
    pub process_id: String,
    pub seq: u64,
    pub stream: String,
    pub data: Vec<u8>,
    pub exit_code: Option<i64>,
    pub params: Value,
}

impl Event {
    pub fn parse(message: &Value) -> Option<Event> {
        let kind = message.get("method")?.as_str()?.strip_prefix("process/")?;
        if message.get("id").is_some() {
            return None;
        }
        Some(Self::from_params(kind, &message["params"]))
    }

    pub fn from_params(kind: &str, params: &Value) -> Event {
        Event {
            kind: kind.to_owned(),
            process_id: params["processId"].as_str().unwrap_or_default().to_owned(),
            seq: params["seq"].as_u64().unwrap_or(0),
            stream: params["stream"].as_str().unwrap_or_default().to_owned(),
            data: params["chunk"].as_str().map(unb64).unwrap_or_default(),
            exit_code: params["exitCode"].as_i64(),
            params: params.clone(),
        }
    }
}

/// Concatenated output bytes of `events` (all streams).
pub fn output_of(events: &[Event]) -> String {
    let bytes: Vec<u8> = events
        .iter()
        .filter(|e| e.kind == "output")
        .flat_map(|e| e.data.iter().copied())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Checks the invariants of docs/protocol.md on one process's notifications: seqs
/// strictly increasing and contiguous from 1, one exited, closed last.
pub fn assert_well_ordered(events: &[Event]) {
    for (index, event) in events.iter().enumerate() {
        assert_eq!(
            event.seq,
            index as u64 + 1,
            "seq gap or reorder: {events:#?}"
        );
    }
    assert_eq!(
        events.iter().filter(|e| e.kind == "exited").count(),
        1,
        "exactly one exited: {events:#?}"
    );
    assert_eq!(
        events.last().map(|e| e.kind.as_str()),
        Some("closed"),
        "closed last: {events:#?}"
    );
}

/// The exit event among `events`.
pub fn exited_of(events: &[Event]) -> &Event {
    match events.iter().find(|e| e.kind == "exited") {
        Some(event) => event,
        None => panic!("no exited event in {events:#?}"),
    }
}

/// `process/start` params for a pipe process in `/tmp` with a usual PATH.
pub fn start_params(process_id: &str, argv: &[&str]) -> Value {
    json!({
        "processId": process_id,
        "argv": argv,
        "cwd": "/tmp",
        "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
        "tty": false,
    })
}

/// `process/start` params running `sh -c SCRIPT`.
pub fn sh(process_id: &str, script: &str) -> Value {
    start_params(process_id, &["sh", "-c", script])
}

// ----- /proc inspection --------------------------------------------------

/// `(state, ppid)` of a live (or zombie) process, `None` when gone.
pub fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Pids of `sleep MARKER` processes anywhere on the host.
pub fn sleepers(marker: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
                args.first().is_some_and(|a| a.ends_with(b"sleep"))
                    && args.get(1) == Some(&marker.as_bytes())
            })
        })
        .filter(|&pid| !is_gone(pid))
        .collect()
}

/// Whether `pid` no longer runs (absent, or a zombie awaiting its reaper).
pub fn is_gone(pid: u32) -> bool {
    !matches!(proc_state(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

/// Waits (bounded) until `pid` no longer runs.
pub async fn wait_gone(pid: u32) {
    let deadline = Instant::now() + WAIT;
    while !is_gone(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} still running: {:?}",
            proc_state(pid)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Pids whose parent is `pid`, with their state.
pub fn children_of(pid: u32) -> Vec<(u32, char)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|child| {
            let (state, ppid) = proc_state(child)?;
            (ppid == pid).then_some((child, state))
        })
        .collect()
}

/// argv of a process (`None` when it is gone).
fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter(|part| !part.is_empty())
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect(),
    )
}

/// Whether `pid` is the server's long-lived spawn helper, which may stay.
fn is_spawn_helper(pid: u32) -> bool {
    cmdline(pid).is_some_and(|argv| {
        argv.get(1).map(String::as_str) == Some(codexbox::process::zygote::ZYGOTE_ARG1)
    })
}

/// Every descendant of `root` with its state and argv, except the server's
/// own spawn helpers (the zygote and its forks; what they run is included).
pub fn leftover_descendants(root: u32) -> Vec<(u32, char, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let table: Vec<(u32, char, u32)> = dir
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let (state, ppid) = proc_state(pid)?;
            Some((pid, state, ppid))
        })
        .collect();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, state, ppid) in &table {
            if ppid != parent {
                continue;
            }
            frontier.push(pid);
            // The zygote and its idle (warm) supervisors are the server's own
            // machinery; what runs below them is still reported.
            let helper = state != 'Z' && is_spawn_helper(pid);
            if !helper {
                found.push((pid, state, cmdline(pid).unwrap_or_default()));
            }
        }
    }
    found
}

/// Waits (bounded) until nothing the server started is left: no running
/// process and no unreaped zombie anywhere below the server, apart from its
/// spawn helpers.
pub async fn assert_no_children(server_pid: u32) {
    let deadline = Instant::now() + WAIT;
    loop {
        let leftovers = leftover_descendants(server_pid);
        if leftovers.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "server {server_pid} still has descendants (pid, state, argv): {leftovers:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Pids listed one per line (`echo $$`) in `text`.
pub fn pids_in(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("pid:")?.parse().ok())
        .collect()
}

// ----- FIFOs ---------------------------------------------------------------

/// A named pipe in a temporary directory, used to release a child at a
/// chosen moment.
pub struct Fifo {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Fifo {
    pub fn new() -> Fifo {
        let dir = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(err) => panic!("tempdir: {err}"),
        };
        let path = dir.path().join("fifo");
        if let Err(err) =
            nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        {
            panic!("mkfifo {path:?}: {err}");
        }
        Fifo { _dir: dir, path }
    }

    pub fn path_str(&self) -> &str {
        self.path.to_str().unwrap_or_default()
    }

    /// Opens the FIFO for writing (waits for the reader) and writes `data`.
    pub async fn write(&self, data: &[u8]) {
        let path = self.path.clone();
        let data = data.to_vec();
        let task = tokio::task::spawn_blocking(move || {
            let mut file = std::fs::OpenOptions::new().write(true).open(&path)?;
            file.write_all(&data)
        });
        match tokio::time::timeout(WAIT, task).await {
            Ok(Ok(Ok(()))) => {}
            other => panic!("writing the fifo failed: {other:?}"),
        }
    }
}

// ----- raw HTTP -------------------------------------------------------------

/// Sends a raw HTTP/1.1 request to `addr` and returns the status code.
pub fn http_status(addr: &str, request: &str) -> u16 {
    let mut stream = match StdTcpStream::connect(addr) {
        Ok(stream) => stream,
        Err(err) => panic!("connect {addr}: {err}"),
    };
    let _ = stream.set_read_timeout(Some(WAIT));
    if let Err(err) = stream.write_all(request.as_bytes()) {
        panic!("write to {addr}: {err}");
    }
    let mut line = String::new();
    if let Err(err) = BufReader::new(stream).read_line(&mut line) {
        panic!("read from {addr}: {err}");
    }
    match line.split_whitespace().nth(1).and_then(|c| c.parse().ok()) {
        Some(code) => code,
        None => panic!("no HTTP status line: {line:?}"),
    }
}

/// A WebSocket upgrade request for `/` with extra header lines.
pub fn upgrade_request(addr: &str, extra_headers: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra_headers}\r\n"
    )
}

// ----- stdio transport -------------------------------------------------------

/// `exec-server --listen stdio`, speaking newline-delimited JSON. A reader
/// thread turns stdout lines into messages so every wait is bounded.
pub struct StdioServer {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
    pub backlog: VecDeque<Value>,
}

impl StdioServer {
    pub fn start(extra: &[&str]) -> StdioServer {
        Self::start_with("stdio", extra)
    }

    /// Starts with another spelling of the stdio listen URL.
    pub fn start_listen(listen: &str) -> StdioServer {
        Self::start_with(listen, &[])
    }

    fn start_with(listen: &str, extra: &[&str]) -> StdioServer {
        let mut child = match Command::new(BIN)
            .args(["exec-server", "--listen", listen])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
        {
            Ok(child) => child,
            Err(err) => panic!("spawn {BIN}: {err}"),
        };
        let stdin = child.stdin.take();
        let stdout: ChildStdout = match child.stdout.take() {
            Some(stdout) => stdout,
            None => panic!("no stdout"),
        };
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.trim().is_empty() {
                    continue;
                }
                let value = match serde_json::from_str::<Value>(&line) {
                    Ok(value) => value,
                    Err(err) => json!({"nonJsonLine": line, "error": err.to_string()}),
                };
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        StdioServer {
            child,
            stdin,
            lines,
            backlog: VecDeque::new(),
        }
    }

    pub fn send(&mut self, value: Value) {
        let Some(stdin) = self.stdin.as_mut() else {
            panic!("stdin already closed");
        };
        if let Err(err) = writeln!(stdin, "{value}").and_then(|()| stdin.flush()) {
            panic!("write to server stdin: {err}");
        }
    }

    /// The next message; `None` when stdout closed.
    pub fn recv(&mut self) -> Option<Value> {
        if let Some(value) = self.backlog.pop_front() {
            return Some(value);
        }
        match self.lines.recv_timeout(WAIT) {
            Ok(value) => Some(value),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("no stdio message within {WAIT:?}")
            }
        }
    }

    /// Waits for the message matching `pred`, keeping others.
    pub fn recv_matching(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(pos) = self.backlog.iter().position(&pred) {
            if let Some(value) = self.backlog.remove(pos) {
                return value;
            }
        }
        loop {
            let value = match self.lines.recv_timeout(WAIT) {
                Ok(value) => value,
                Err(err) => panic!(
                    "stdio server: no matching message ({err}); backlog {:?}",
                    self.backlog
                ),
            };
            if pred(&value) {
                return value;
            }
            self.backlog.push_back(value);
        }
    }

    /// Closes the server's stdin (EOF).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a blocking closure with the bounded guard, off the async threads.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::time::timeout(WAIT, tokio::task::spawn_blocking(f)).await {
        Ok(Ok(value)) => value,
        Ok(Err(err)) => panic!("blocking task failed: {err}"),
        Err(_) => panic!("blocking task did not finish within {WAIT:?}"),
    }
}
