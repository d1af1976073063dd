//! `process/start` with `networkProxy` through the real server: the child's
//! proxy variables, the proxy's policy, validation errors, the proxy's
//! lifetime, `environment/info`, and denials (in `process/read`, and as
//! `process/networkDenied` only for clients that asked). Origins are
//! servers this file starts on 127.0.0.1.

use std::time::{Duration, Instant};

use crate::common::client::{unb64, Raw, Server};
use crate::common::net::Origin;
use serde_json::{json, Value};

fn server() -> Server {
    Server::start_listen("ws://127.0.0.1:0", &[], &[("NO_PROXY", "*")])
}

fn proxy_settings(domains: Value) -> Value {
    json!({
        "proxy": {"enabled": true, "enableSocks5": true, "enableSocks5Udp": true,
            "allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false,
            "mode": "full", "domains": domains, "unixSockets": null, "allowLocalBinding": false},
        "auditMetadata": {"conversationId": "conversation-1"},
        "environmentId": "remote", "executionId": "execution-1"
    })
}

fn start(id: &str, script: &str, network_proxy: Value) -> Value {
    json!({"processId": id, "argv": ["sh", "-c", script], "cwd": "/",
        "env": {"PATH": "/usr/bin:/bin", "HTTP_PROXY": "http://127.0.0.1:9"},
        "tty": false, "networkProxy": network_proxy, "enforceManagedNetwork": true})
}

/// Output and the last read result of a process, once it is closed.
async fn finish(raw: &mut Raw, id: &str) -> (String, Value) {
    let result = raw
        .call(
            "process/read",
            json!({"processId": id, "afterSeq": 0, "waitMs": 20000}),
        )
        .await;
    let mut result = result;
    while result["closed"] != true {
        let next = result["nextSeq"].as_u64().unwrap() - 1;
        let more = raw
            .call(
                "process/read",
                json!({"processId": id, "afterSeq": next, "waitMs": 20000}),
            )
            .await;
        let mut chunks = result["chunks"].as_array().unwrap().clone();
        chunks.extend(more["chunks"].as_array().unwrap().iter().cloned());
        result = more;
        result["chunks"] = Value::Array(chunks);
    }
    let mut out = Vec::new();
    for chunk in result["chunks"].as_array().unwrap() {
        out.extend(unb64(chunk["chunk"].as_str().unwrap()));
    }
    (String::from_utf8_lossy(&out).into_owned(), result)
}

#[tokio::test]
async fn the_environment_reports_proxy_launch_support() {
    let server = server();
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    let info = raw.call("environment/info", json!({})).await;
    assert_eq!(info["capabilities"]["networkProxyLaunch"], true);
}

#[tokio::test]
async fn a_network_proxy_gets_the_child_proxy_env_and_enforces_its_policy() {
    let origin = Origin::start();
    let server = server();
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    let allowed = format!("127.0.0.1:{}", origin.port());
    let script = format!(
        "echo HTTP=$HTTP_PROXY; echo ALL=$ALL_PROXY; echo WS=$WSS_PROXY; echo NO=$NO_PROXY; \
         echo ACTIVE=$CODEX_NETWORK_PROXY_ACTIVE; \
         curl -s --noproxy '' -o /dev/null -w 'allowed=%{{http_code}}\\n' http://{allowed}/ok; \
         curl -s --noproxy '' -w '\\ndenied=%{{http_code}}\\n' http://evil.test/"
    );
    raw.call(
        "process/start",
        start(
            "p1",
            &script,
            proxy_settings(json!({allowed.clone(): "allow", "evil.test": "deny"})),
        ),
    )
    .await;
    let (out, result) = finish(&mut raw, "p1").await;
    let line = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} in {out}"))
            .to_owned()
    };
    let http = line("HTTP=");
    assert!(
        http.starts_with("http://127.0.0.1:") && http != "http://127.0.0.1:9",
        "{out}"
    );
    assert!(line("ALL=").starts_with("socks5h://127.0.0.1:"), "{out}");
    assert_eq!(line("WS="), http);
    assert_eq!(
        line("NO="),
        "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
    );
    assert_eq!(line("ACTIVE="), "1");
    assert_eq!(line("allowed="), "200", "{out}");
    assert_eq!(line("denied="), "403", "{out}");
    assert!(out.contains(r#""reason":"denied""#), "{out}");
    assert_eq!(origin.connection_count(), 1);
    assert_eq!(
        result["networkDenials"],
        json!([{"host": "evil.test", "port": 80, "protocol": "http", "reason": "denied"}])
    );
}

#[tokio::test]
async fn invalid_proxy_settings_are_refused_before_anything_runs() {
    let server = server();
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    let mut disabled = proxy_settings(json!({}));
    disabled["proxy"]["enabled"] = json!(false);
    let (code, message) = raw
        .call_err("process/start", start("d", "true", disabled))
        .await;
    assert_eq!(code, -32602);
    assert_eq!(message, "invalid network proxy config: executor-local network proxy launch requires an enabled proxy");
    let (code, message) = raw
        .call_err(
            "process/start",
            start("d", "true", proxy_settings(json!({"*": "deny"}))),
        )
        .await;
    assert_eq!(code, -32602);
    assert!(
        message.starts_with(
            "invalid network proxy config: invalid value for network.denied_domains: *"
        ),
        "{message}"
    );
    let mut missing = proxy_settings(json!({}));
    missing["proxy"].as_object_mut().unwrap().remove("mode");
    let (code, message) = raw
        .call_err("process/start", start("d", "true", missing))
        .await;
    assert_eq!(code, -32602);
    assert!(message.contains("missing field `mode`"), "{message}");
    let mut relative = proxy_settings(json!({}));
    relative["proxy"]["unixSockets"] = json!({"relative.sock": "allow"});
    let (_, message) = raw
        .call_err("process/start", start("d", "true", relative))
        .await;
    assert_eq!(
        message,
        "invalid network proxy config: invalid network.allow_unix_sockets[0]"
    );
    // Nothing was started under that id.
    raw.call(
        "process/start",
        start("d", "true", proxy_settings(json!({}))),
    )
    .await;
}

#[tokio::test]
async fn the_proxy_is_gone_after_process_closed() {
    let server = server();
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    raw.call(
        "process/start",
        start("p", "echo $HTTP_PROXY", proxy_settings(json!({}))),
    )
    .await;
    let (out, result) = finish(&mut raw, "p").await;
    assert_eq!(result["closed"], true);
    let addr = out.trim().strip_prefix("http://").unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match std::net::TcpStream::connect(&addr) {
            Err(err) => {
                assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
                break;
            }
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(_) => panic!("proxy {addr} still listening after process/closed"),
        }
    }
}

async fn denial_notifications(capabilities: Value) -> (Vec<Value>, Value) {
    let server = server();
    let mut raw = Raw::connect(&server.url).await;
    let init = raw
        .call(
            "initialize",
            json!({"clientName": "t", "capabilities": capabilities}),
        )
        .await;
    assert!(init["sessionId"].is_string());
    raw.send(json!({"method": "initialized", "params": {}}))
        .await;
    let script = "curl -s --noproxy '' -o /dev/null http://blocked.test:8080/";
    raw.call(
        "process/start",
        start("n", script, proxy_settings(json!({"ok.test": "allow"}))),
    )
    .await;
    let (_, result) = finish(&mut raw, "n").await;
    assert_eq!(
        result["networkDenials"],
        json!([{"host": "blocked.test", "port": 8080, "protocol": "http", "reason": "not_allowed"}])
    );
    if capabilities["networkDenials"] == true {
        // Recorded before it is sent: wait for it.
        while !raw
            .backlog
            .iter()
            .any(|m| m["method"] == "process/networkDenied")
        {
            let message = raw.recv_socket().await.expect("connection open");
            raw.backlog.push_back(message);
        }
    }
    raw.call("environment/status", json!({})).await;
    let notes: Vec<Value> = raw
        .backlog
        .iter()
        .filter(|m| m["method"] == "process/networkDenied")
        .cloned()
        .collect();
    (notes, result)
}

#[tokio::test]
async fn network_denied_notifications_go_only_to_clients_that_asked() {
    let (notes, _) = denial_notifications(json!({"networkDenials": true})).await;
    assert_eq!(
        notes,
        vec![
            json!({"method": "process/networkDenied", "params": {"processId": "n",
            "host": "blocked.test", "port": 8080, "protocol": "http", "reason": "not_allowed"}})
        ]
    );
    let (notes, _) = denial_notifications(json!({})).await;
    assert!(notes.is_empty(), "{notes:?}");
}

#[tokio::test]
async fn a_sandboxed_process_with_enforced_managed_network_reaches_only_its_proxy() {
    if !crate::common::sandbox::sandbox_available() {
        return;
    }
    let origin = Origin::start();
    let ws = crate::common::sandbox::Ws::new();
    let server = server();
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    let allowed = format!("127.0.0.1:{}", origin.port());
    let script = format!(
        "curl -s --noproxy '' -o /dev/null -w 'allowed=%{{http_code}}\\n' http://{allowed}/in; \
         curl -s -o /dev/null -w 'denied=%{{http_code}}\\n' http://evil.test/; \
         curl -s -o /dev/null --noproxy '*' -m 5 http://{allowed}/direct; echo direct_exit=$?"
    );
    let mut params = start(
        "s",
        &script,
        proxy_settings(json!({allowed.clone(): "allow"})),
    );
    params["cwd"] = json!(ws.ws);
    params["sandbox"] = json!({
        "permissions": {"type": "managed", "file_system": {"type": "restricted",
            "entries": [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]},
            "network": "restricted"},
        "cwd": ws.ws, "workspaceRoots": [ws.ws], "windowsSandboxLevel": "disabled"
    });
    raw.call("process/start", params).await;
    let (out, result) = finish(&mut raw, "s").await;
    let line = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(line("allowed="), "200", "{out}");
    assert_eq!(line("denied="), "403", "{out}");
    assert_ne!(line("direct_exit="), "0", "{out}");
    assert_eq!(origin.heads.lock().unwrap().len(), 1);
    assert_eq!(result["exitCode"], 0, "{result}");
    assert_eq!(result["networkDenials"][0]["host"], "evil.test");
}

#[tokio::test]
async fn proxy_decisions_are_counted_in_the_metrics() {
    use crate::common::metrics::scrape_until;
    let origin = Origin::start();
    let server = server();
    let addr: std::net::SocketAddr = server.addr().parse().expect("IP:PORT");
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    let allowed = format!("127.0.0.1:{}", origin.port());
    let script = format!(
        "curl -s --noproxy '' -o /dev/null http://{allowed}/in; \
         curl -s --noproxy '' -o /dev/null http://blocked.test:8080/"
    );
    raw.call(
        "process/start",
        start(
            "p",
            &script,
            proxy_settings(json!({allowed.clone(): "allow"})),
        ),
    )
    .await;
    let (_, result) = finish(&mut raw, "p").await;
    assert_eq!(result["networkDenials"][0]["host"], "blocked.test");
    assert_eq!(origin.heads.lock().unwrap().len(), 1);
    let name = "codexbox_exec_proxy_decisions_total";
    let page = scrape_until(addr, None, |page| {
        page.value(name, &[("decision", "allow")]) + page.value(name, &[("decision", "deny")])
            >= 2.0
    });
    assert_eq!(
        page.value(name, &[("decision", "allow")]),
        1.0,
        "{}",
        page.text()
    );
    assert_eq!(
        page.value(name, &[("decision", "deny")]),
        1.0,
        "{}",
        page.text()
    );
}
