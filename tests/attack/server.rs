//! Escape attempts through the exec-server (`codexbox exec-server`), as
//! root: sandboxed `process/start` and sandboxed `fs/*` requests trying to
//! read denied files, write protected metadata, leave traces on the host,
//! read the server's own environment, or widen their policy with the older
//! `sandboxPolicy` shape. Every attack is paired with an allowed request
//! that must succeed.

use std::path::Path;

use crate::common::fs::{b64, unb64, Client, RpcErr, Server};
use crate::common::redteam::request::{ctx, path_entry as entry, special, workspace};
use crate::common::redteam::{available, reused_and_one_shot, Launcher, Reuse, Tree};
use serde_json::{json, Value};

fn p(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn denied(result: Result<Value, RpcErr>, what: &str) {
    if let Ok(value) = result {
        panic!("{what}: expected a denial, got {value}");
    }
}

fn ready() -> bool {
    available(Launcher::System)
}

/// Runs `argv` under `sandbox` and returns (exit code, output).
async fn run(
    client: &Client,
    id: &str,
    argv: &[&str],
    cwd: &Path,
    sandbox: Value,
) -> (i64, String) {
    client
        .ok(
            "process/start",
            json!({"processId": id, "argv": argv, "cwd": cwd, "env": {"PATH": "/usr/bin:/bin"},
                   "tty": false, "sandbox": sandbox}),
        )
        .await;
    let mut output = String::new();
    let mut after: Option<u64> = None;
    loop {
        let read = client
            .ok(
                "process/read",
                json!({"processId": id, "afterSeq": after, "waitMs": 1000}),
            )
            .await;
        for chunk in read["chunks"].as_array().into_iter().flatten() {
            output.push_str(&String::from_utf8_lossy(&unb64(&chunk["chunk"])));
        }
        after = read["nextSeq"].as_u64().map(|next| next.saturating_sub(1));
        if read["closed"] == true {
            return (read["exitCode"].as_i64().unwrap_or(-1), output);
        }
    }
}

/// Sandboxed fs requests against deny entries, protected metadata and
/// `..` paths: each denied, nothing changed on disk; the allowed
/// neighbours work.
#[tokio::test]
async fn sandboxed_fs_requests_respect_denies_and_metadata() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/.git/config", "[core]\n");
    t.put("ws/secret.txt", "S3CRET");
    t.put("ws/vault/key", "K3Y");
    t.put("ws/sub/public", "public");
    t.put("outside/o.txt", "outside");
    let ws = &t.ws;
    let sandbox = ctx(
        workspace(vec![
            entry(&ws.join("secret.txt"), "deny"),
            entry(&ws.join("vault"), "deny"),
        ]),
        ws,
    );
    let server = Server::start();
    let c = server.connect().await;
    let call = |method: &'static str, mut params: Value| {
        params["sandbox"] = sandbox.clone();
        let c = &c;
        async move { c.call(method, params).await }
    };

    // Controls.
    let r = call("fs/readFile", json!({"path": p(&ws.join("sub/public"))}))
        .await
        .expect("read allowed file");
    assert_eq!(unb64(&r["dataBase64"]), b"public");
    call(
        "fs/writeFile",
        json!({"path": p(&ws.join("sub/new")), "dataBase64": b64(b"new")}),
    )
    .await
    .expect("write allowed file");

    // Reads of denied paths, directly and through copy/open/walk.
    denied(
        call("fs/readFile", json!({"path": p(&ws.join("secret.txt"))})).await,
        "readFile secret",
    );
    denied(
        call(
            "fs/readFile",
            json!({"path": format!("{}/sub/../secret.txt", ws.display())}),
        )
        .await,
        "readFile ../secret",
    );
    denied(
        call("fs/readFile", json!({"path": p(&ws.join("vault/key"))})).await,
        "readFile vault/key",
    );
    denied(
        call("fs/readDirectory", json!({"path": p(&ws.join("vault"))})).await,
        "readDirectory vault",
    );
    denied(
        call("fs/open", json!({"path": p(&ws.join("secret.txt"))})).await,
        "open secret",
    );
    let copied = call(
        "fs/copy",
        json!({"sourcePath": p(&ws.join("secret.txt")), "destinationPath": p(&ws.join("sub/stolen")), "recursive": false}),
    )
    .await;
    let stolen = std::fs::read(ws.join("sub/stolen")).unwrap_or_default();
    assert!(
        copied.is_err() || !String::from_utf8_lossy(&stolen).contains("S3CRET"),
        "fs/copy leaked a denied file"
    );
    let _ = call(
        "fs/copy",
        json!({"sourcePath": p(&ws.join("vault")), "destinationPath": p(&ws.join("sub/vault2")), "recursive": true}),
    )
    .await;
    assert!(
        !String::from_utf8_lossy(&std::fs::read(ws.join("sub/vault2/key")).unwrap_or_default())
            .contains("K3Y"),
        "fs/copy leaked a denied directory"
    );
    let _ = call(
        "fs/copy",
        json!({"sourcePath": p(ws), "destinationPath": p(&t.root.join("ws-copy")), "recursive": true}),
    )
    .await;
    assert!(
        !t.root.join("ws-copy").exists(),
        "copied out of the writable root"
    );
    if let Ok(walk) = call(
        "fs/walk",
        json!({"path": p(ws), "options": {"maxDepth": 4, "maxDirectories": 100, "maxEntries": 1000, "followDirectorySymlinks": false}}),
    )
    .await
    {
        let text = walk.to_string();
        assert!(!text.contains("vault/key"), "walk listed a denied directory: {text}");
    }

    // Writes to denied and protected paths and out of the root via `..`.
    denied(
        call(
            "fs/writeFile",
            json!({"path": p(&ws.join("secret.txt")), "dataBase64": b64(b"x")}),
        )
        .await,
        "overwrite secret",
    );
    denied(
        call(
            "fs/writeFile",
            json!({"path": p(&ws.join(".git/config")), "dataBase64": b64(b"x")}),
        )
        .await,
        "write .git/config",
    );
    denied(
        call(
            "fs/createDirectory",
            json!({"path": p(&ws.join(".codex/skills")), "recursive": true}),
        )
        .await,
        "create .codex",
    );
    denied(
        call(
            "fs/remove",
            json!({"path": p(&ws.join(".git")), "recursive": true, "force": true}),
        )
        .await,
        "remove .git",
    );
    denied(
        call("fs/writeFile", json!({"path": format!("{}/../outside/planted", ws.display()), "dataBase64": b64(b"x")})).await,
        "write ../outside",
    );
    denied(
        call(
            "fs/copy",
            json!({"sourcePath": p(&ws.join("sub/public")), "destinationPath": format!("{}/sub/../../outside/c", ws.display()), "recursive": false}),
        )
        .await,
        "copy to ../../outside",
    );
    denied(
        call(
            "fs/remove",
            json!({"path": p(&t.outside.join("o.txt")), "force": true}),
        )
        .await,
        "remove outside",
    );

    assert_eq!(t.read("ws/secret.txt").as_deref(), Some("S3CRET"));
    assert_eq!(t.read("ws/vault/key").as_deref(), Some("K3Y"));
    assert_eq!(t.read("ws/.git/config").as_deref(), Some("[core]\n"));
    assert_eq!(t.names("outside"), ["o.txt"]);
    drop(c);
    drop(server);
}

/// A full-disk-write profile narrowed by a deny entry or glob is not "full
/// write": the deny must still hold for fs requests.
async fn full_write_with_denies_still_denies(reuse: Reuse) {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/secret.txt", "S3CRET");
    t.put("ws/a/.env", "TOKEN=1");
    t.put("ws/public", "public");
    let ws = &t.ws;
    let profile = json!({"type": "managed", "file_system": {"type": "restricted", "entries": [
        special("root", "write"),
        entry(&ws.join("secret.txt"), "deny"),
        {"path": {"type": "glob_pattern", "pattern": format!("{}/**/.env", ws.display())}, "access": "deny"},
    ]}, "network": "restricted"});
    let sandbox = ctx(profile, ws);
    let server = Server::start_with(&reuse.flags(), &[]);
    let c = server.connect().await;
    let r = c
        .ok(
            "fs/readFile",
            json!({"path": p(&ws.join("public")), "sandbox": sandbox}),
        )
        .await;
    assert_eq!(unb64(&r["dataBase64"]), b"public");
    denied(
        c.call(
            "fs/readFile",
            json!({"path": p(&ws.join("secret.txt")), "sandbox": sandbox}),
        )
        .await,
        "readFile denied path under full write",
    );
    denied(
        c.call(
            "fs/readFile",
            json!({"path": p(&ws.join("a/.env")), "sandbox": sandbox}),
        )
        .await,
        "readFile glob-denied path under full write",
    );
    let (code, out) = run(
        &c,
        "fullw",
        &["sh", "-c", "cat secret.txt a/.env; echo done"],
        ws,
        sandbox.clone(),
    )
    .await;
    assert!(out.contains("done"), "{code} {out}");
    assert!(!out.contains("S3CRET") && !out.contains("TOKEN"), "{out}");
}

/// The older `sandboxPolicy` shape must not grant more than it says.
async fn legacy_sandbox_policy_grants_no_more_than_asked(reuse: Reuse) {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("outside/private", "PRIVATE");
    let server = Server::start_with(&reuse.flags(), &[]);
    let c = server.connect().await;
    let plain = json!({"sandboxPolicy": {"type": "read-only"}, "sandboxPolicyCwd": p(&t.ws), "windowsSandboxLevel": "disabled"});
    let r = c
        .ok(
            "fs/readFile",
            json!({"path": p(&t.outside.join("private")), "sandbox": plain}),
        )
        .await;
    assert_eq!(unb64(&r["dataBase64"]), b"PRIVATE", "control");
    let narrowed = json!({"sandboxPolicy": {"type": "read-only", "access": {"type": "restricted", "include_platform_defaults": true, "readable_roots": [p(&t.ws)]}},
                          "sandboxPolicyCwd": p(&t.ws), "windowsSandboxLevel": "disabled"});
    let r = c
        .call(
            "fs/readFile",
            json!({"path": p(&t.outside.join("private")), "sandbox": narrowed}),
        )
        .await;
    assert!(r.is_err(), "read outside readable_roots allowed: {r:?}");
}

/// Neither a sandboxed process nor a sandboxed fs request can read the
/// server's environment (where a token would live) or see its process.
async fn server_environment_is_out_of_reach(reuse: Reuse) {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let server = Server::start_with(&reuse.flags(), &[("CODEXBOX_ATTACK_TOKEN", "T0KEN-4f3a")]);
    let pid = server.pid();
    let c = server.connect().await;
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let script = format!(
        "cat /proc/{pid}/environ; cat /proc/*/environ; env; kill -0 {pid} && echo SIGNALLED; echo done"
    );
    let (_, out) = run(&c, "env", &["sh", "-c", &script], &t.ws, sandbox.clone()).await;
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains("T0KEN-4f3a"), "{out}");
    assert!(!out.contains("SIGNALLED"), "{out}");
    denied(
        c.call(
            "fs/readFile",
            json!({"path": format!("/proc/{pid}/environ"), "sandbox": sandbox}),
        )
        .await
        .and_then(|v| {
            if String::from_utf8_lossy(&unb64(&v["dataBase64"])).contains("T0KEN-4f3a") {
                Ok(v)
            } else {
                Err(RpcErr {
                    code: 0,
                    message: "no token".into(),
                })
            }
        }),
        "fs/readFile of the server's environ",
    );
    // Control: the server really has it.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    assert!(String::from_utf8_lossy(&environ).contains("T0KEN-4f3a"));
}

/// Starts `echo started; exec sleep 60` as process `long` in `sandbox` (cwd
/// `ws`) through `call` (method, params -> result), and reads its output
/// until `started` shows: from then on its mount points exist. Returns the
/// `afterSeq` to read on from.
async fn start_sleeper_in_sandbox(
    mut call: impl AsyncFnMut(&'static str, Value) -> Value,
    sandbox: Value,
    ws: &Path,
) -> Option<u64> {
    call(
        "process/start",
        json!({"processId": "long", "argv": ["sh", "-c", "echo started; exec sleep 60"], "cwd": ws,
               "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": sandbox}),
    )
    .await;
    let mut after: Option<u64> = None;
    let mut output = String::new();
    while !output.contains("started") {
        let read = call(
            "process/read",
            json!({"processId": "long", "afterSeq": after, "waitMs": 1000}),
        )
        .await;
        for chunk in read["chunks"].as_array().into_iter().flatten() {
            output.push_str(&String::from_utf8_lossy(&unb64(&chunk["chunk"])));
        }
        after = read["nextSeq"].as_u64().map(|next| next.saturating_sub(1));
        assert!(read["closed"] != true, "exited early: {output}");
    }
    after
}

/// Mount-point cleanup through the server: `process/terminate` of a sandboxed
/// command leaves no mount points in the workspace: at once with one-shot
/// sandboxes; with a reused one, only the mount points the prepared
/// sandbox keeps, gone with its session.
async fn terminate_leaves_nothing_in_the_workspace(reuse: Reuse) {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/src/main.rs", "fn main() {}\n");
    let server = Server::start_with(&reuse.with(&["--session-grace-secs", "0"]), &[]);
    let c = server.connect().await;
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut after = start_sleeper_in_sandbox(
        async |method, params| c.ok(method, params).await,
        sandbox,
        &t.ws,
    )
    .await;
    assert!(
        t.names("ws").len() > 1,
        "mount points expected while running"
    );
    c.ok("process/terminate", json!({"processId": "long"}))
        .await;
    loop {
        let read = c
            .ok(
                "process/read",
                json!({"processId": "long", "afterSeq": after, "waitMs": 1000}),
            )
            .await;
        after = read["nextSeq"].as_u64().map(|next| next.saturating_sub(1));
        if read["closed"] == true {
            break;
        }
    }
    if reuse == Reuse::Off {
        assert_eq!(t.names("ws"), ["src"], "leftovers after terminate");
        return;
    }
    let kept = [".agents", ".codex", ".git", "src"];
    assert!(
        t.names("ws").iter().all(|n| kept.contains(&n.as_str())),
        "leftovers after terminate: {:?}",
        t.names("ws")
    );
    drop(c);
    assert!(
        crate::common::fs::eventually(|| t.names("ws") == ["src"]).await,
        "leftovers after the session: {:?}",
        t.names("ws")
    );
}

/// Warm fs-helpers are pooled per sandbox context: two contexts that differ
/// only in their workspace roots (or cwd) must never share a helper, or
/// the second request would get the first one's writable roots.
#[tokio::test]
async fn pooled_helpers_never_cross_contexts() {
    if !ready() {
        return;
    }
    let a = Tree::new();
    let b = Tree::new();
    let server = Server::start();
    let c = server.connect().await;
    let profile = workspace(vec![]);
    let ctx_a = ctx(profile.clone(), &a.ws);
    let ctx_b = ctx(profile.clone(), &b.ws);
    // Warm a helper for A (control: A is writable in its own context).
    c.ok(
        "fs/writeFile",
        json!({"path": p(&a.ws.join("mine")), "dataBase64": b64(b"a"), "sandbox": ctx_a}),
    )
    .await;
    c.ok(
        "fs/writeFile",
        json!({"path": p(&b.ws.join("mine")), "dataBase64": b64(b"b"), "sandbox": ctx_b}),
    )
    .await;
    // Context B writing into A, and A into B, right after each other.
    for _ in 0..3 {
        denied(
            c.call(
                "fs/writeFile",
                json!({"path": p(&a.ws.join("from-b")), "dataBase64": b64(b"x"), "sandbox": ctx_b}),
            )
            .await,
            "B wrote into A",
        );
        denied(
            c.call(
                "fs/writeFile",
                json!({"path": p(&b.ws.join("from-a")), "dataBase64": b64(b"x"), "sandbox": ctx_a}),
            )
            .await,
            "A wrote into B",
        );
    }
    // Same roots, different cwd with a cwd-relative profile.
    let mut ctx_cwd = ctx(profile, &a.ws);
    ctx_cwd["cwd"] = json!(p(&b.ws));
    ctx_cwd["workspaceRoots"] = json!([p(&b.ws)]);
    denied(
        c.call(
            "fs/writeFile",
            json!({"path": p(&a.ws.join("from-cwd")), "dataBase64": b64(b"x"), "sandbox": ctx_cwd}),
        )
        .await,
        "cwd-B context wrote into A",
    );
    // Empty .git/.codex/.agents are the live helpers' mount points.
    let real = |t: &Tree| -> Vec<String> {
        t.names("ws")
            .into_iter()
            .filter(|n| {
                ![".git", ".codex", ".agents"].contains(&n.as_str())
                    || !t.names(&format!("ws/{n}")).is_empty()
            })
            .collect()
    };
    assert_eq!(real(&a), ["mine"]);
    assert_eq!(real(&b), ["mine"]);
}

/// A minimal WebSocket JSON-RPC client in Python (no libraries): connects
/// to HOST PORT (HOST `/path`: that Unix socket) (with the bearer token
/// read from TOKEN_FILE unless `-`), then either starts SCRIPT unsandboxed
/// (`direct`), reads a file through a sandbox (`fsread PATH SANDBOX_JSON`)
/// or starts the sandboxed command given as JSON (`sandboxed ARGV_JSON
/// SANDBOX_JSON`) and waits for it to exit.
const WS_CLIENT: &str = r#"
import socket, os, sys, json, base64, struct
host, port, token_file, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
token = open(token_file).read().strip() if token_file != "-" else None
if host.startswith("/"):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(host)
else:
    s = socket.create_connection((host, port), timeout=30)
req = "GET / HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n" % (host, port, base64.b64encode(os.urandom(16)).decode())
if token:
    req += "Authorization: Bearer %s\r\n" % token
s.sendall((req + "\r\n").encode())
resp = b""
while b"\r\n\r\n" not in resp:
    d = s.recv(4096)
    if not d:
        break
    resp += d
print("upgrade:", resp.split(b"\r\n")[0].decode(), flush=True)
def send(obj):
    data = json.dumps(obj).encode(); mask = os.urandom(4)
    n = len(data)
    hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
    s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))
def exact(n):
    d = b""
    while len(d) < n:
        c = s.recv(n - len(d))
        if not c:
            raise EOFError
        d += c
    return d
def recv():
    h = exact(2); n = h[1] & 0x7f
    if n == 126: n = struct.unpack(">H", exact(2))[0]
    elif n == 127: n = struct.unpack(">Q", exact(8))[0]
    return json.loads(exact(n).decode())
def call(i, method, params):
    send({"id": i, "method": method, "params": params})
    while True:
        m = recv()
        if m.get("id") == i:
            return m
call(1, "initialize", {"clientName": "attack"})
send({"method": "initialized"})
if mode == "direct":
    r = call(2, "process/start", {"processId": "esc", "argv": ["sh", "-c", sys.argv[5]], "cwd": "/", "env": {"PATH": "/usr/bin:/bin"}, "tty": False})
    print("start:", json.dumps(r), flush=True)
    while "result" in r:
        r = call(3, "process/read", {"processId": "esc", "waitMs": 1000})
        if r.get("result", {}).get("closed"):
            print("exit:", r["result"].get("exitCode"), flush=True)
            break
elif mode == "fsread":
    r = call(2, "fs/readFile", {"path": sys.argv[5], "sandbox": json.loads(sys.argv[6])})
    print("fsread:", json.dumps(r), flush=True)
else:
    argv, sandbox = json.loads(sys.argv[5]), json.loads(sys.argv[6])
    call(2, "process/start", {"processId": "p", "argv": argv, "cwd": sandbox["cwd"], "env": {"PATH": "/usr/bin:/bin"}, "tty": False, "sandbox": sandbox})
    after = None
    while True:
        r = call(3, "process/read", {"processId": "p", "afterSeq": after, "waitMs": 1000})["result"]
        for c in r.get("chunks", []):
            sys.stdout.write(base64.b64decode(c["chunk"]).decode(errors="replace"))
        if r.get("nextSeq"):
            after = r["nextSeq"] - 1
        if r.get("closed"):
            print("exit:", r.get("exitCode"), flush=True)
            break
"#;

fn port_of(url: &str) -> String {
    url.rsplit(':')
        .next()
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_owned()
}

fn network_enabled_read_only() -> Value {
    json!({"type": "managed", "file_system": {"type": "restricted", "entries": [special("root", "read")]}, "network": "enabled"})
}

/// A process the server sandboxes with network enabled connects back to
/// the server's own loopback listener (no token: the default) and starts
/// an unsandboxed command. Control: the same client from outside works.
async fn sandboxed_process_cannot_drive_its_own_server(reuse: Reuse) {
    if !ready() || !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let server = Server::start_with(&reuse.flags(), &[]);
    let port = port_of(&server.url);
    // Control: from outside, the client drives the server.
    let control = t.outside.join("control");
    let out = std::process::Command::new("python3")
        .args(["-c", WS_CLIENT, "127.0.0.1", &port, "-", "direct"])
        .arg(format!("echo ok > {}", control.display()))
        .output()
        .expect("python3");
    let control_output = String::from_utf8_lossy(&out.stdout);
    assert!(control.exists(), "control client failed: {control_output}");
    assert!(control_output.contains("exit: 0"), "{control_output}");
    let c = server.connect().await;
    let target = t.outside.join("escaped");
    let argv = [
        "python3".to_owned(),
        "-c".to_owned(),
        WS_CLIENT.to_owned(),
        "127.0.0.1".to_owned(),
        port.clone(),
        "-".to_owned(),
        "direct".to_owned(),
        format!("echo ESCAPED > {}", target.display()),
    ];
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let (_, output) = run(
        &c,
        "reach",
        &argv,
        &t.ws,
        ctx(network_enabled_read_only(), &t.ws),
    )
    .await;
    // The client waits for a command it starts to close (the control
    // shows it): had the server started one, it would have run by now.
    assert!(
        !output.contains("exit:"),
        "escaped through the server: {output}"
    );
    assert!(!target.exists(), "escaped through the server: {output}");
}

/// With a token file, the sandboxes the server builds must not be able to
/// read it (a read-everything profile would), or the previous attack works
/// again.
async fn sandboxed_process_cannot_read_the_servers_token(reuse: Reuse) {
    if !ready() || !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let token_file = t.put("outside/token", "s3cr3t-token-0123456789");
    let server =
        crate::common::client::Server::start(&reuse.with(&["--auth-token-file", &p(&token_file)]));
    let port = port_of(&server.url);
    let target = t.outside.join("escaped");
    let inner = vec![
        "python3".to_owned(),
        "-c".to_owned(),
        WS_CLIENT.to_owned(),
        "127.0.0.1".to_owned(),
        port.clone(),
        p(&token_file),
        "direct".to_owned(),
        format!("echo ESCAPED > {}", target.display()),
    ];
    // The test drives the server with the token (control) and asks for the
    // sandboxed attacker.
    let out = std::process::Command::new("python3")
        .args(["-c", WS_CLIENT, "127.0.0.1", &port])
        .arg(&token_file)
        .arg("sandboxed")
        .arg(serde_json::to_string(&inner).expect("json"))
        .arg(ctx(network_enabled_read_only(), &t.ws).to_string())
        .output()
        .expect("python3");
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        s.contains("upgrade: HTTP/1.1 101"),
        "control: the token works: {s}"
    );
    assert!(
        s.contains("exit:"),
        "control: the sandboxed process ran: {s}"
    );
    assert!(!target.exists(), "escaped with the server's token: {s}");
}

/// With the network restricted the same reach-back fails (network
/// namespace and seccomp), while the sandboxed process itself runs.
async fn restricted_network_cannot_drive_the_server(reuse: Reuse) {
    if !ready() || !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let server = Server::start_with(&reuse.flags(), &[]);
    let port = port_of(&server.url);
    let c = server.connect().await;
    let target = t.outside.join("escaped");
    let script = format!(
        "python3 -c \"$0\" 127.0.0.1 {port} - direct 'echo ESCAPED > {}' 2>&1 | tail -1; echo ran",
        target.display()
    );
    let (_, output) = run(
        &c,
        "reach",
        &["sh", "-c", &script, WS_CLIENT],
        &t.ws,
        ctx(workspace(vec![]), &t.ws),
    )
    .await;
    assert!(output.contains("ran"), "{output}");
    assert!(!output.contains("upgrade: HTTP/1.1 101"), "{output}");
    assert!(!target.exists(), "{output}");
}

/// The sandboxes the server builds deny its token file (processes and
/// fs-helpers), even under a read-everything profile; the neighbouring
/// file stays readable (control).
async fn the_token_file_is_denied_in_every_sandbox(reuse: Reuse) {
    if !ready() || !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let token_file = t.put("outside/token", "s3cr3t-token-0123456789");
    t.put("outside/neighbour", "NEIGHBOUR");
    let server =
        crate::common::client::Server::start(&reuse.with(&["--auth-token-file", &p(&token_file)]));
    let port = port_of(&server.url);
    let script = format!(
        "cat {} {}; echo done",
        t.outside.join("neighbour").display(),
        token_file.display()
    );
    let inner = ["sh", "-c", &script];
    let out = std::process::Command::new("python3")
        .args(["-c", WS_CLIENT, "127.0.0.1", &port])
        .arg(&token_file)
        .arg("sandboxed")
        .arg(serde_json::to_string(&inner).expect("json"))
        .arg(ctx(network_enabled_read_only(), &t.ws).to_string())
        .output()
        .expect("python3");
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(s.contains("NEIGHBOUR") && s.contains("done"), "{s}");
    assert!(
        !s.contains("s3cr3t-token"),
        "token read in the sandbox: {s}"
    );
    // The same through a sandboxed fs-helper (a profile without full-disk
    // write runs in one).
    let fsread = |path: &Path| {
        let out = std::process::Command::new("python3")
            .args(["-c", WS_CLIENT, "127.0.0.1", &port])
            .arg(&token_file)
            .arg("fsread")
            .arg(path)
            .arg(ctx(workspace(vec![]), &t.ws).to_string())
            .output()
            .expect("python3");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let neighbour = fsread(&t.outside.join("neighbour"));
    assert!(
        neighbour.contains(&b64(b"NEIGHBOUR")),
        "control: {neighbour}"
    );
    let token = fsread(&token_file);
    assert!(token.contains("\"error\""), "{token}");
    assert!(!token.contains(&b64(b"s3cr3t-token-0123456789")), "{token}");
}

/// On a Unix socket the server denies the socket's path in its sandboxes
/// (behind that, it would refuse a peer whose `SO_PEERCRED` pid is one of
/// its sandboxed processes), with or without network; the same client from
/// outside is served (control).
async fn sandboxed_process_cannot_drive_its_server_over_the_unix_socket(reuse: Reuse) {
    if !ready() || !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let socket = t.outside.join("exec.sock");
    let _server = crate::common::client::Server::start_unix(&socket, &reuse.flags());
    let target = t.outside.join("escaped");
    let inner = vec![
        "python3".to_owned(),
        "-c".to_owned(),
        WS_CLIENT.to_owned(),
        p(&socket),
        "0".to_owned(),
        "-".to_owned(),
        "direct".to_owned(),
        format!("echo ESCAPED > {}", target.display()),
    ];
    for network in ["restricted", "enabled"] {
        let mut profile = workspace(vec![]);
        profile["network"] = json!(network);
        let out = std::process::Command::new("python3")
            .args(["-c", WS_CLIENT])
            .arg(&socket)
            .args(["0", "-", "sandboxed"])
            .arg(serde_json::to_string(&inner).expect("json"))
            .arg(ctx(profile, &t.ws).to_string())
            .output()
            .expect("python3");
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(s.starts_with("upgrade: HTTP/1.1 101"), "control: {s}");
        assert!(
            s.contains("exit:"),
            "control: the sandboxed process ran: {s}"
        );
        assert!(
            !s.contains("start:"),
            "the sandboxed process was served: {s}"
        );
        assert!(!target.exists(), "escaped over the unix socket: {s}");
    }
}

/// `tmpdir` means the server's `$TMPDIR`, never the request's: a request
/// whose `env` says `TMPDIR=<elsewhere>` gets no write access there, while
/// the server's own temporary directory is writable (control).
async fn tmpdir_comes_from_the_server_not_the_request(reuse: Reuse) {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let server_tmp = t.root.join("server-tmp");
    std::fs::create_dir_all(&server_tmp).expect("mkdir");
    let server = Server::start_with(&reuse.flags(), &[("TMPDIR", &p(&server_tmp))]);
    let c = server.connect().await;
    let profile = json!({"type": "managed", "file_system": {"type": "restricted",
        "entries": [special("root", "read"), special("tmpdir", "write")]}, "network": "restricted"});
    for (id, request_tmp) in [("outside", p(&t.outside)), ("slash", "/".to_owned())] {
        let target =
            Path::new(&request_tmp).join(format!("codexbox-tmpdir-{id}-{}", std::process::id()));
        let script = format!(
            "echo x > {}; echo x > {}/ok; echo done",
            target.display(),
            server_tmp.display()
        );
        c.ok(
            "process/start",
            json!({"processId": id, "argv": ["sh", "-c", script], "cwd": t.ws,
                   "env": {"PATH": "/usr/bin:/bin", "TMPDIR": request_tmp}, "tty": false,
                   "sandbox": ctx(profile.clone(), &t.ws)}),
        )
        .await;
        let mut after: Option<u64> = None;
        let mut output = String::new();
        loop {
            let read = c
                .ok(
                    "process/read",
                    json!({"processId": id, "afterSeq": after, "waitMs": 1000}),
                )
                .await;
            for chunk in read["chunks"].as_array().into_iter().flatten() {
                output.push_str(&String::from_utf8_lossy(&unb64(&chunk["chunk"])));
            }
            after = read["nextSeq"].as_u64().map(|next| next.saturating_sub(1));
            if read["closed"] == true {
                break;
            }
        }
        let escaped = target.exists();
        let _ = std::fs::remove_file(&target);
        assert!(output.contains("done"), "{output}");
        assert!(
            !escaped,
            "request TMPDIR {request_tmp} was writable: {output}"
        );
        assert!(server_tmp.join("ok").exists(), "control: {output}");
        let _ = std::fs::remove_file(server_tmp.join("ok"));
    }
}

/// Mount-point cleanup through session expiry: a detached session's sandboxed
/// process is killed, and its helper still removes its mount points.
async fn session_expiry_leaves_nothing_in_the_workspace(reuse: Reuse) {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/src/main.rs", "fn main() {}\n");
    let server = crate::common::client::Server::start(&reuse.with(&["--session-grace-secs", "0"]));
    let (mut raw, _) = server.session().await;
    let sandbox = ctx(workspace(vec![]), &t.ws);
    start_sleeper_in_sandbox(
        async |method, params| raw.call(method, params).await,
        sandbox,
        &t.ws,
    )
    .await;
    assert!(
        t.names("ws").len() > 1,
        "mount points expected while running"
    );
    drop(raw);
    let pid = server.pid();
    assert!(
        crate::common::fs::eventually(|| crate::common::fs::sandbox_wrappers(pid).is_empty()).await,
        "the expired session's sandbox survived"
    );
    if reuse == Reuse::Off {
        assert_eq!(t.names("ws"), ["src"], "leftovers after expiry");
        return;
    }
    // The prepared sandbox's keeper removes its mount points once the last
    // command that used it is gone.
    assert!(
        crate::common::fs::eventually(|| t.names("ws") == ["src"]).await,
        "leftovers after expiry: {:?}",
        t.names("ws")
    );
}

reused_and_one_shot!(
    full_write_with_denies_still_denies,
    legacy_sandbox_policy_grants_no_more_than_asked,
    server_environment_is_out_of_reach,
    terminate_leaves_nothing_in_the_workspace,
    sandboxed_process_cannot_drive_its_own_server,
    sandboxed_process_cannot_read_the_servers_token,
    restricted_network_cannot_drive_the_server,
    the_token_file_is_denied_in_every_sandbox,
    sandboxed_process_cannot_drive_its_server_over_the_unix_socket,
    tmpdir_comes_from_the_server_not_the_request,
    session_expiry_leaves_nothing_in_the_workspace,
);
