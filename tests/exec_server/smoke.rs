//! End-to-end smoke tests of the exec-server through the real binary and a
//! real WebSocket: handshake, a process's events, malformed input, tree-wide
//! termination and session resume.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Safety net for a test that would otherwise hang; never a way to synchronise.
const SAFETY: Duration = Duration::from_secs(30);

struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_codexbox"))
            .args(["exec-server", "--listen", "ws://127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn codexbox");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("listen line");
        assert!(line.starts_with("ws://"), "unexpected first line {line:?}");
        Server {
            child,
            url: line.trim_end().to_owned(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: i64,
}

impl Client {
    async fn connect(url: &str) -> Client {
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("connect");
        Client { ws, next_id: 1 }
    }

    async fn send_raw(&mut self, text: String) {
        self.ws
            .send(Message::Text(text.into()))
            .await
            .expect("send");
    }

    async fn recv(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(SAFETY, self.ws.next())
                .await
                .expect("message before the safety deadline")
                .expect("connection open")
                .expect("frame");
            match message {
                Message::Text(text) => return serde_json::from_str(&text).expect("json"),
                Message::Binary(_) => panic!("server sent a binary frame"),
                _ => continue,
            }
        }
    }

    /// Sends a request and returns its answer; notifications that arrive
    /// meanwhile are appended to `events`.
    async fn call(&mut self, method: &str, params: Value, events: &mut Vec<Value>) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send_raw(json!({"id": id, "method": method, "params": params}).to_string())
            .await;
        loop {
            let message = self.recv().await;
            if message.get("id") == Some(&json!(id)) {
                return message;
            }
            events.push(message);
        }
    }

    async fn handshake(&mut self) -> String {
        let answer = self
            .call(
                "initialize",
                json!({"clientName": "smoke"}),
                &mut Vec::new(),
            )
            .await;
        self.send_raw(json!({"method": "initialized", "params": {}}).to_string())
            .await;
        answer["result"]["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned()
    }

    /// Collects notifications for `process_id` until its `process/closed`.
    async fn until_closed(&mut self, process_id: &str, events: &mut Vec<Value>) {
        loop {
            if events
                .iter()
                .any(|e| e["method"] == "process/closed" && e["params"]["processId"] == process_id)
            {
                return;
            }
            let message = self.recv().await;
            events.push(message);
        }
    }
}

fn start_params(id: &str, argv: &[&str]) -> Value {
    json!({"processId": id, "argv": argv, "cwd": "/tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": false})
}

fn events_of<'a>(events: &'a [Value], id: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["params"]["processId"] == id)
        .collect()
}

fn output_of(events: &[&Value]) -> String {
    use base64::Engine;
    let mut out = Vec::new();
    for e in events.iter().filter(|e| e["method"] == "process/output") {
        let chunk = e["params"]["chunk"].as_str().expect("chunk");
        out.extend(
            base64::engine::general_purpose::STANDARD
                .decode(chunk)
                .expect("base64"),
        );
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn true_exits_then_closes_with_contiguous_seqs() {
    let server = Server::start(&[]);
    let mut client = Client::connect(&server.url).await;
    client.handshake().await;
    let mut events = Vec::new();
    let answer = client
        .call("process/start", start_params("p1", &["true"]), &mut events)
        .await;
    assert_eq!(answer, json!({"id": 2, "result": {"processId": "p1"}}));
    client.until_closed("p1", &mut events).await;
    let events = events_of(&events, "p1");
    assert_eq!(
        events,
        [
            &json!({"method":"process/exited","params":{"processId":"p1","seq":1,"exitCode":0,"sandboxDenied":false}}),
            &json!({"method":"process/closed","params":{"processId":"p1","seq":2}}),
        ]
    );
}

#[tokio::test]
async fn output_precedes_exit_in_seq_order() {
    let server = Server::start(&[]);
    let mut client = Client::connect(&server.url).await;
    client.handshake().await;
    let mut events = Vec::new();
    client
        .call(
            "process/start",
            start_params("p", &["sh", "-c", "printf out; printf err >&2; exit 7"]),
            &mut events,
        )
        .await;
    client.until_closed("p", &mut events).await;
    let events = events_of(&events, "p");
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["params"]["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(events[2]["method"], "process/exited");
    assert_eq!(events[2]["params"]["exitCode"], 7);
    assert_eq!(events[3]["method"], "process/closed");
    let read = client
        .call("process/read", json!({"processId": "p"}), &mut Vec::new())
        .await;
    assert_eq!(read["result"]["nextSeq"], 5);
    assert_eq!(read["result"]["chunks"].as_array().map(Vec::len), Some(2));
    assert_eq!(read["result"]["truncated"], false);
}

#[tokio::test]
async fn malformed_input_gets_the_minus_one_error_and_the_connection_keeps_serving() {
    let server = Server::start(&[]);
    let mut client = Client::connect(&server.url).await;
    let nested = "[".repeat(200_000);
    // Over the 128 MiB default and without an id to answer with.
    let big = format!(r#"{{"method":"x","params":"{}"}}"#, "a".repeat(129 << 20));
    for bad in [
        "not-json".to_owned(),
        r#"{"id":1,"method":"a","method":"b"}"#.to_owned(),
        nested,
        r#"{"method":"bogus"}"#.to_owned(),
        big,
    ] {
        client.send_raw(bad).await;
        let answer = client.recv().await;
        assert_eq!(answer["id"], -1, "{answer}");
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
    }
    client.handshake().await;
    let status = client
        .call("environment/status", Value::Null, &mut Vec::new())
        .await;
    assert_eq!(status["result"], json!({"status": "ready"}));
}

#[tokio::test]
async fn terminate_kills_descendants_that_left_the_group() {
    let server = Server::start(&[]);
    let mut client = Client::connect(&server.url).await;
    client.handshake().await;
    let mut events = Vec::new();
    // A setsid'd child and a double-forked daemon, both printing their pid.
    let script = "setsid sleep 1000 & echo $!; (setsid sh -c 'sleep 1000 & echo $!' &); wait";
    client
        .call(
            "process/start",
            start_params("t", &["sh", "-c", script]),
            &mut events,
        )
        .await;
    let pids = loop {
        let text = output_of(&events_of(&events, "t"));
        let pids: Vec<i32> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        if pids.len() == 2 {
            break pids;
        }
        events.push(client.recv().await);
    };
    assert!(pids.iter().all(|&pid| is_alive(pid)));
    let answer = client
        .call("process/terminate", json!({"processId": "t"}), &mut events)
        .await;
    assert_eq!(answer["result"], json!({"running": true}));
    client.until_closed("t", &mut events).await;
    let exited = events
        .iter()
        .find(|e| e["method"] == "process/exited")
        .expect("exited");
    assert_eq!(exited["params"]["exitCode"], 137);
    assert_eq!(exited["params"]["signal"], "SIGKILL");
    // `closed` means every holder of the output pipes is dead.
    for pid in pids {
        assert!(!is_alive(pid), "descendant {pid} survived terminate");
    }
}

#[tokio::test]
async fn a_detached_session_resumes_with_the_output_produced_meanwhile() {
    let server = Server::start(&[]);
    let mut first = Client::connect(&server.url).await;
    let session = first.handshake().await;
    let mut events = Vec::new();
    first
        .call(
            "process/start",
            json!({"processId":"r","argv":["cat"],"cwd":"file:///tmp","env":{},"tty":false,"pipeStdin":true}),
            &mut events,
        )
        .await;
    drop(first);
    let mut second = Client::connect(&server.url).await;
    // The server may not have seen the first connection close yet (-32010).
    let answer = loop {
        let answer = second
            .call(
                "initialize",
                json!({"clientName":"smoke","resumeSessionId": session}),
                &mut Vec::new(),
            )
            .await;
        if answer["error"]["code"] != -32010 {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(answer["result"]["sessionId"], json!(session));
    second
        .send_raw(json!({"method":"initialized","params":{}}).to_string())
        .await;
    let write = second
        .call(
            "process/write",
            json!({"processId":"r","chunk":"aGVsbG8K","writeId":"1","closeStdin":true}),
            &mut events,
        )
        .await;
    assert_eq!(write["result"], json!({"status":"accepted"}));
    second.until_closed("r", &mut events).await;
    let read = second
        .call(
            "process/read",
            json!({"processId":"r","afterSeq":0}),
            &mut Vec::new(),
        )
        .await;
    assert_eq!(read["result"]["chunks"][0]["chunk"], "aGVsbG8K");
    assert_eq!(read["result"]["exitCode"], 0);
}

async fn read_pid(client: &mut Client, id: &str, events: &mut Vec<Value>) -> i32 {
    loop {
        let text = output_of(&events_of(events, id));
        if let Some(pid) = text.lines().next().and_then(|l| l.trim().parse().ok()) {
            return pid;
        }
        events.push(client.recv().await);
    }
}

/// Waits (bounded by the safety net) until `pid` is gone.
async fn wait_gone(pid: i32) {
    tokio::time::timeout(SAFETY, async {
        while is_alive(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("process {pid} survived"));
}

#[tokio::test]
async fn zero_grace_kills_the_processes_of_a_dropped_connection() {
    let server = Server::start(&["--session-grace-secs", "0"]);
    let mut client = Client::connect(&server.url).await;
    client.handshake().await;
    let mut events = Vec::new();
    client
        .call(
            "process/start",
            start_params("g", &["sh", "-c", "echo $$; exec sleep 1000"]),
            &mut events,
        )
        .await;
    let pid = read_pid(&mut client, "g", &mut events).await;
    drop(client);
    wait_gone(pid).await;
}

#[tokio::test]
async fn readyz_origin_and_token_rules_hold_on_the_listening_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").expect("token");
    let server = Server::start(&["--auth-token-file", token_file.to_str().expect("utf8")]);
    let addr = server.url.trim_start_matches("ws://").to_owned();
    let status_of = |request: String| {
        let addr = addr.clone();
        async move {
            let mut stream = TcpStream::connect(&addr).await.expect("connect");
            stream.write_all(request.as_bytes()).await.expect("write");
            let mut response = vec![0u8; 256];
            let n = stream.read(&mut response).await.expect("read");
            String::from_utf8_lossy(&response[..n])
                .split(' ')
                .nth(1)
                .unwrap_or_default()
                .to_owned()
        }
    };
    let upgrade = "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    assert_eq!(
        status_of("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n".into()).await,
        "200"
    );
    assert_eq!(
        status_of("GET /readyz HTTP/1.1\r\nOrigin: http://evil\r\n\r\n".into()).await,
        "403"
    );
    assert_eq!(status_of(format!("{upgrade}\r\n")).await, "401");
    assert_eq!(
        status_of(format!("{upgrade}Authorization: Bearer wrong\r\n\r\n")).await,
        "401"
    );
    assert_eq!(
        status_of(format!("{upgrade}Authorization: Bearer s3cret\r\n\r\n")).await,
        "101"
    );
}

#[test]
fn a_public_bind_without_a_token_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_codexbox"))
        .args(["exec-server", "--listen", "ws://0.0.0.0:0"])
        .env_remove("CODEXBOX_AUTH_TOKEN")
        .output()
        .expect("run");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    assert!(String::from_utf8_lossy(&output.stderr).contains("non-loopback"));
}

#[test]
fn stdio_eof_kills_every_process_and_exits_zero() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_codexbox"))
        .args(["exec-server", "--listen", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let script = "(setsid sleep 1000 & echo $!); echo $$; exec sleep 1000";
    for line in [
        json!({"id":1,"method":"initialize","params":{"clientName":"smoke"}}),
        json!({"method":"initialized"}),
        json!({"id":2,"method":"process/start","params":start_params("s", &["sh", "-c", script])}),
    ] {
        writeln!(stdin, "{line}").expect("write");
    }
    let mut text = String::new();
    let mut line = String::new();
    let pids = loop {
        let pids: Vec<i32> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        if pids.len() == 2 {
            break pids;
        }
        line.clear();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "stdout ended"
        );
        let message: Value = serde_json::from_str(&line).expect("json");
        if message["method"] == "process/output" {
            text.push_str(&output_of(&[&message]));
        }
    };
    drop(stdin);
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}");
    for pid in pids {
        assert!(!is_alive(pid), "{pid} survived stdin EOF");
    }
}

#[tokio::test]
async fn five_hundred_concurrent_processes_lose_no_event() {
    let server = Server::start(&[]);
    let mut client = Client::connect(&server.url).await;
    client.handshake().await;
    let count = 500;
    for i in 0..count {
        let params = start_params(&format!("c{i}"), &["sh", "-c", "read x; echo out-$x"]);
        let mut params = params;
        params["pipeStdin"] = json!(true);
        client
            .send_raw(
                json!({"id": 1000 + i, "method": "process/start", "params": params}).to_string(),
            )
            .await;
    }
    // Every process is alive and blocked on stdin now; release them all.
    for i in 0..count {
        client
            .send_raw(
                json!({"id": 5000 + i, "method": "process/write",
                       "params": {"processId": format!("c{i}"), "chunk": "MQo=", "closeStdin": true}})
                .to_string(),
            )
            .await;
    }
    let mut events: Vec<Value> = Vec::new();
    let mut closed = 0;
    while closed < count {
        let message = client.recv().await;
        if message["method"] == "process/closed" {
            closed += 1;
        }
        if let Some(error) = message.get("error") {
            panic!("unexpected error {error}");
        }
        events.push(message);
    }
    for i in 0..count {
        let id = format!("c{i}");
        let mine = events_of(&events, &id);
        let seqs: Vec<u64> = mine
            .iter()
            .filter_map(|e| e["params"]["seq"].as_u64())
            .collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{id}");
        assert_eq!(output_of(&mine), "out-1\n", "{id}");
        assert_eq!(
            mine.last().map(|e| &e["method"]),
            Some(&json!("process/closed"))
        );
    }
}

#[tokio::test]
async fn unix_socket_listener_is_private_and_serves_websocket() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("exec.sock");
    let url = format!("unix://{}", socket.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_codexbox"))
        .args(["exec-server", "--listen", &url])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("line");
    assert_eq!(line.trim_end(), url);
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let stream = tokio::net::UnixStream::connect(&socket)
        .await
        .expect("connect");
    let (mut ws, _) = tokio_tungstenite::client_async("ws://localhost/", stream)
        .await
        .expect("upgrade");
    ws.send(Message::Binary(
        json!({"id":"a","method":"initialize","params":{"clientName":"unix"}})
            .to_string()
            .into_bytes()
            .into(),
    ))
    .await
    .expect("send");
    let answer = loop {
        match ws.next().await.expect("open").expect("frame") {
            Message::Text(text) => break serde_json::from_str::<Value>(&text).expect("json"),
            _ => continue,
        }
    };
    assert_eq!(answer["id"], "a");
    assert!(answer["result"]["sessionId"].is_string());
    // SIGTERM: graceful exit 0, socket removed.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("kill");
    assert!(child.wait().expect("wait").success());
    assert!(!socket.exists());
}

fn children_of(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                        s.rsplit(')')
                            .next()
                            .and_then(|r| r.split_whitespace().nth(1))
                            .is_some_and(|ppid| ppid == pid.to_string())
                    })
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn an_idle_server_keeps_no_helper_and_starts_again_on_demand() {
    let server = Server::start(&[]);
    let server_pid = server.child.id();
    let mut client = Client::connect(&server.url).await;
    client.handshake().await;
    for round in 0..2 {
        let id = format!("idle{round}");
        let mut events = Vec::new();
        client
            .call("process/start", start_params(&id, &["true"]), &mut events)
            .await;
        client.until_closed(&id, &mut events).await;
        tokio::time::timeout(SAFETY, async {
            while children_of(server_pid) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the server keeps no child process once idle");
    }
}
