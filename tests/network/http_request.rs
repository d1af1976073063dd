//! `http/request` and `http/request/bodyDelta` through the real server over
//! WebSocket, against origins this file starts on 127.0.0.1: buffered and
//! streamed bodies, redirects both ways, timeouts, every validation error,
//! concurrency on one connection, the buffered cap, and a 100 MiB stream
//! in bounded server memory.

use crate::common::client::{b64, error_of, unb64, Raw, Server};
use crate::common::net::{big_body_byte, Origin};
use serde_json::{json, Value};

fn server() -> Server {
    // NO_PROXY=* keeps any proxy of the test environment out of the way.
    Server::start_listen("ws://127.0.0.1:0", &[], &[("NO_PROXY", "*")])
}

async fn connected(server: &Server) -> Raw {
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    raw
}

fn request(url: &str, id: &str) -> Value {
    json!({"method": "GET", "url": url, "requestId": id})
}

/// Collects the body deltas of `request_id` (kept in order of arrival)
/// until the final one; returns the bytes and the final notification.
async fn deltas(raw: &mut Raw, request_id: &str, mut on_bytes: impl FnMut(&[u8])) -> (u64, Value) {
    let mut expected = 1;
    loop {
        let message = raw.recv().await;
        if message["method"] != "http/request/bodyDelta"
            || message["params"]["requestId"] != request_id
        {
            continue;
        }
        let params = &message["params"];
        assert_eq!(params["seq"], expected, "contiguous seqs: {params}");
        expected += 1;
        if params["done"] == true {
            assert_eq!(params["deltaBase64"], "");
            return (expected - 1, params.clone());
        }
        let bytes = unb64(params["deltaBase64"].as_str().unwrap());
        assert!(bytes.len() <= 1 << 20, "delta of {} bytes", bytes.len());
        on_bytes(&bytes);
    }
}

#[tokio::test]
async fn a_buffered_request_carries_method_headers_and_body() {
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let url = format!("http://127.0.0.1:{}/mcp?case=buffered", origin.port());
    let result = raw
        .call(
            "http/request",
            json!({"method": "POST", "url": url, "requestId": "buffered-request",
                   "headers": [{"name": "x-a", "value": "1"}, {"name": "x-a", "value": "2"}],
                   "bodyBase64": b64(b"request-body"), "timeoutMs": 20000}),
        )
        .await;
    assert_eq!(result["status"], 200);
    assert!(result["headers"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "x-origin", "value": "yes"})));
    let body = unb64(result["bodyBase64"].as_str().unwrap());
    assert_eq!(
        String::from_utf8(body).unwrap(),
        format!(
            "origin {} POST /mcp?case=buffered\nrequest-body",
            origin.port()
        )
    );
    let head = origin.heads.lock().unwrap()[0].clone();
    assert!(
        head.starts_with("POST /mcp?case=buffered HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains("x-a: 1\r\nx-a: 2\r\n"), "{head}");
}

#[tokio::test]
async fn redirects_are_followed_or_returned_as_asked() {
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let url = format!("http://127.0.0.1:{}/redirect?to=/final", origin.port());
    let followed = raw.call("http/request", request(&url, "r1")).await;
    assert_eq!(followed["status"], 200);
    assert_eq!(
        unb64(followed["bodyBase64"].as_str().unwrap()),
        format!("origin {} GET /final", origin.port()).into_bytes()
    );
    let stop_url = format!("http://127.0.0.1:{}/redirect?to=/never", origin.port());
    let stopped = raw
        .call(
            "http/request",
            json!({"method": "GET", "url": stop_url, "requestId": "r2", "redirectPolicy": "stop"}),
        )
        .await;
    assert_eq!(stopped["status"], 302);
    assert!(stopped["headers"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "location", "value": "/never"})));
    assert_eq!(unb64(stopped["bodyBase64"].as_str().unwrap()), b"moved");
    assert!(!origin
        .heads
        .lock()
        .unwrap()
        .iter()
        .any(|h| h.starts_with("GET /never")));
    // A redirect loop ends with an error after 10 hops.
    let looping = format!("http://127.0.0.1:{}/redirect", origin.port());
    let (code, message) = raw.call_err("http/request", request(&looping, "r3")).await;
    assert_eq!(code, -32603);
    assert!(
        message.starts_with("http/request failed: ") && message.contains("too many redirects"),
        "{message}"
    );
    let hops = origin
        .heads
        .lock()
        .unwrap()
        .iter()
        .filter(|h| h.starts_with("GET /redirect HTTP"))
        .count();
    assert_eq!(hops, 11);
}

#[tokio::test]
async fn a_streamed_body_arrives_as_ordered_deltas_after_the_response() {
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let url = format!("http://127.0.0.1:{}/hello", origin.port());
    raw.send(json!({"id": 1, "method": "http/request",
        "params": {"method": "GET", "url": url, "requestId": "stream-1", "streamResponse": true}}))
        .await;
    // The response must come before any delta of this request.
    let first = raw.recv().await;
    assert_eq!(first["id"], 1, "response first: {first}");
    assert_eq!(first["result"]["status"], 200);
    assert_eq!(first["result"]["bodyBase64"], "");
    let mut body = Vec::new();
    let (count, last) = deltas(&mut raw, "stream-1", |b| body.extend_from_slice(b)).await;
    assert!(count >= 2);
    assert_eq!(last["error"], Value::Null);
    assert_eq!(
        body,
        format!("origin {} GET /hello", origin.port()).into_bytes()
    );
}

#[tokio::test]
async fn an_active_stream_id_cannot_be_reused() {
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let url = format!("http://127.0.0.1:{}/hang", origin.port());
    let params = json!({"method": "GET", "url": url, "requestId": "dup", "streamResponse": true});
    raw.send(json!({"id": "a", "method": "http/request", "params": params}))
        .await;
    let (code, message) = raw.call_err("http/request", params).await;
    assert_eq!(
        (code, message.as_str()),
        (
            -32602,
            "http/request streamResponse requestId `dup` is already active"
        )
    );
    // A finished stream releases its id.
    let ok_url = format!("http://127.0.0.1:{}/ok", origin.port());
    let ok = json!({"method": "GET", "url": ok_url, "requestId": "again", "streamResponse": true});
    raw.call("http/request", ok.clone()).await;
    deltas(&mut raw, "again", |_| {}).await;
    raw.call("http/request", ok).await;
}

#[tokio::test]
async fn timeouts_end_the_request_with_an_internal_error() {
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let url = format!("http://127.0.0.1:{}/hang", origin.port());
    let (code, message) = raw
        .call_err(
            "http/request",
            json!({"method": "GET", "url": url, "requestId": "t", "timeoutMs": 50}),
        )
        .await;
    assert_eq!(code, -32603);
    assert!(message.starts_with("http/request failed: "), "{message}");
    // null is no timeout: the request is still pending while others finish.
    raw.send(json!({"id": "slow", "method": "http/request",
        "params": {"method": "GET", "url": url, "requestId": "n", "timeoutMs": null}}))
        .await;
    let quick = format!("http://127.0.0.1:{}/quick", origin.port());
    assert_eq!(
        raw.call("http/request", request(&quick, "q")).await["status"],
        200
    );
    assert!(!raw.backlog.iter().any(|m| m["id"] == "slow"));
}

#[tokio::test]
async fn concurrent_requests_on_one_connection_do_not_wait_for_each_other() {
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let hang = format!("http://127.0.0.1:{}/hang", origin.port());
    for i in 0..4 {
        raw.send(json!({"id": format!("hang{i}"), "method": "http/request",
            "params": {"method": "GET", "url": hang, "requestId": format!("h{i}")}}))
            .await;
    }
    let mut ids = Vec::new();
    for i in 0..8 {
        let url = format!("http://127.0.0.1:{}/n{i}", origin.port());
        raw.send(
            json!({"id": i, "method": "http/request", "params": request(&url, &format!("c{i}"))}),
        )
        .await;
        ids.push(i);
    }
    raw.call("environment/status", json!({})).await;
    for i in ids {
        let response = raw.response(&json!(i)).await;
        assert_eq!(response["result"]["status"], 200, "{response}");
    }
}

#[tokio::test]
async fn invalid_requests_get_the_reference_errors() {
    let origin = Origin::start();
    let server = server();
    let mut early = Raw::connect(&server.url).await;
    let url = format!("http://127.0.0.1:{}/", origin.port());
    let (code, message) = early.call_err("http/request", request(&url, "x")).await;
    assert_eq!(
        (code, message.as_str()),
        (
            -32600,
            "client must call initialize before using http methods"
        )
    );
    early
        .request("initialize", json!({"clientName": "t"}))
        .await;
    let (_, message) = early.call_err("http/request", request(&url, "x")).await;
    assert_eq!(
        message,
        "client must send initialized before using http methods"
    );

    let mut raw = connected(&server).await;
    let cases = [
        (
            json!({"method": "GE T", "url": url, "requestId": "1"}),
            -32602,
            "http/request method is invalid: ",
        ),
        (
            json!({"method": "GET", "url": "http://a b/", "requestId": "1"}),
            -32602,
            "http/request url is invalid: ",
        ),
        (
            json!({"method": "GET", "url": "ftp://127.0.0.1/", "requestId": "1"}),
            -32602,
            "http/request only supports http and https URLs, got ftp",
        ),
        (
            json!({"method": "GET", "url": url, "requestId": "1", "headers": [{"name": "a b", "value": "v"}]}),
            -32602,
            "http/request header name is invalid: ",
        ),
        (
            json!({"method": "GET", "url": url, "requestId": "1", "headers": [{"name": "x", "value": "a\nb"}]}),
            -32602,
            "http/request header value is invalid for x: ",
        ),
        (
            json!({"method": "GET", "url": url}),
            -32602,
            "missing field `requestId`",
        ),
    ];
    for (params, want_code, want) in cases {
        let (code, message) = raw.call_err("http/request", params.clone()).await;
        assert_eq!(code, want_code, "{params}");
        assert!(message.contains(want), "{params}: {message}");
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_url = format!("http://127.0.0.1:{}/", closed.local_addr().unwrap().port());
    drop(closed);
    let (code, message) = raw
        .call_err("http/request", request(&closed_url, "c"))
        .await;
    assert_eq!(code, -32603);
    assert!(message.starts_with("http/request failed: "), "{message}");
    // The server still serves.
    assert_eq!(
        raw.call("http/request", request(&url, "ok")).await["status"],
        200
    );
}

#[tokio::test]
async fn a_buffered_body_past_the_cap_is_refused_with_a_pointer_to_streaming() {
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let url = format!(
        "http://127.0.0.1:{}/big?bytes={}",
        origin.port(),
        32 * 1024 * 1024 + 1
    );
    let (code, message) = raw.call_err("http/request", request(&url, "big")).await;
    assert_eq!(code, -32603);
    assert!(message.contains("use streamResponse"), "{message}");
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn a_100_mib_stream_passes_in_bounded_server_memory() {
    const TOTAL: usize = 100 * 1024 * 1024;
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let before = peak_rss_kib(server.pid());
    let url = format!("http://127.0.0.1:{}/big?bytes={TOTAL}", origin.port());
    let result = raw
        .call(
            "http/request",
            json!({"method": "GET", "url": url, "requestId": "huge", "streamResponse": true}),
        )
        .await;
    assert_eq!(result["status"], 200);
    let mut received = 0usize;
    let mut mismatches = 0usize;
    let (_, last) = deltas(&mut raw, "huge", |bytes| {
        for (i, b) in bytes.iter().enumerate() {
            if *b != big_body_byte(received + i) {
                mismatches += 1;
            }
        }
        received += bytes.len();
    })
    .await;
    assert_eq!(last["error"], Value::Null);
    assert_eq!((received, mismatches), (TOTAL, 0));
    let grown_mib = peak_rss_kib(server.pid()).saturating_sub(before) / 1024;
    assert!(
        grown_mib < 64,
        "server peak RSS grew by {grown_mib} MiB for a {} MiB body",
        TOTAL >> 20
    );
}

#[tokio::test]
async fn errors_in_results_are_rpc_errors_not_results() {
    // A malformed base64 body is refused before anything is sent.
    let origin = Origin::start();
    let server = server();
    let mut raw = connected(&server).await;
    let url = format!("http://127.0.0.1:{}/", origin.port());
    let response = raw
        .request(
            "http/request",
            json!({"method": "POST", "url": url, "requestId": "b", "bodyBase64": "!!"}),
        )
        .await;
    assert_eq!(error_of(&response).map(|e| e.0), Some(-32602));
    assert_eq!(origin.connection_count(), 0);
}

#[tokio::test]
async fn https_uses_rustls_with_the_system_roots_and_codex_ca_certificate() {
    let tls = crate::common::net::TlsOrigin::start();
    let url = format!("https://127.0.0.1:{}/secure", tls.addr.port());
    let cert = tls.cert.to_str().unwrap();
    let trusting = Server::start_listen(
        "ws://127.0.0.1:0",
        &[],
        &[("NO_PROXY", "*"), ("CODEX_CA_CERTIFICATE", cert)],
    );
    let mut raw = connected(&trusting).await;
    let result = raw.call("http/request", request(&url, "tls")).await;
    assert_eq!(result["status"], 200);
    assert_eq!(unb64(result["bodyBase64"].as_str().unwrap()), b"tls origin");
    // Without that CA the self-signed origin is refused.
    let strict = server();
    let mut raw = connected(&strict).await;
    let (code, message) = raw.call_err("http/request", request(&url, "tls")).await;
    assert_eq!(code, -32603);
    assert!(message.starts_with("http/request failed: "), "{message}");
    assert!(message.to_lowercase().contains("certificate"), "{message}");
}

/// A Unicode host goes out in its IDNA ASCII form, as the reference's
/// client sends it (WHATWG URL rules: the path's non-ASCII is
/// percent-encoded, the fragment stays home). The origin is reached as
/// the server's HTTP proxy, so no name is ever resolved.
#[tokio::test]
async fn a_unicode_host_is_sent_in_its_idna_form() {
    let proxy = Origin::start();
    let proxy_url = format!("http://127.0.0.1:{}", proxy.port());
    let server = Server::start_listen(
        "ws://127.0.0.1:0",
        &[],
        &[("HTTP_PROXY", proxy_url.as_str()), ("NO_PROXY", "")],
    );
    let mut raw = connected(&server).await;
    let result = raw
        .call(
            "http/request",
            request("http://MÜNICH.invalid/caf\u{e9}?q=\u{e9}#frag", "idna"),
        )
        .await;
    assert_eq!(result["status"], 200, "{result}");
    let target = "http://xn--mnich-kva.invalid/caf%C3%A9?q=%C3%A9";
    assert_eq!(
        unb64(result["bodyBase64"].as_str().unwrap()),
        format!("origin {} GET {target}", proxy.port()).into_bytes()
    );
    let head = proxy.heads.lock().unwrap()[0].clone();
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\nhost: xn--mnich-kva.invalid\r\n"),
        "{head}"
    );
    // A host no IDNA form exists for is refused before anything is sent.
    let (code, message) = raw
        .call_err("http/request", request("http://a\u{3000}b.invalid/", "bad"))
        .await;
    assert_eq!(code, -32602, "{message}");
    assert!(
        message.starts_with("http/request url is invalid: "),
        "{message}"
    );
    assert_eq!(proxy.connection_count(), 1);
}

/// What a ChatGPT response of the reference's test sets: the affinity
/// cookie and a session cookie that must never be kept.
fn setting_cookies(affinity: &str, session: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\
         set-cookie: __cflb={affinity}; Path=/; Secure; HttpOnly\r\n\
         set-cookie: chatgpt_session={session}; Path=/; Secure; HttpOnly\r\n\r\nok"
    )
}

/// The Cloudflare affinity cookie is replayed as the reference replays
/// it: after `chatgpt.com` sets `__cflb` (and a session cookie), later
/// requests there, from any connection, carry `cookie: __cflb=…` only,
/// updated when the origin sets a new one; `api.openai.com` gets none.
/// `chatgpt.com` is reached through an intercepting HTTPS proxy on
/// 127.0.0.1 whose CA the server trusts.
#[tokio::test]
async fn only_the_chatgpt_cloudflare_cookie_is_replayed_and_only_to_chatgpt() {
    use crate::common::net::InterceptingProxy;
    let plain = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok".to_owned();
    let proxy = InterceptingProxy::start(
        &["chatgpt.com", "api.openai.com"],
        vec![
            setting_cookies("west", "secret"),
            setting_cookies("central", "still-secret"),
            plain,
        ],
    );
    let (proxy_url, ca) = (proxy.url(), proxy.ca.to_str().unwrap().to_owned());
    let server = Server::start_listen(
        "ws://127.0.0.1:0",
        &[],
        &[
            ("HTTPS_PROXY", proxy_url.as_str()),
            ("NO_PROXY", ""),
            ("CODEX_CA_CERTIFICATE", ca.as_str()),
        ],
    );
    let post = |url: &str, id: &str| json!({"method": "POST", "url": url, "requestId": id, "timeoutMs": 20000});
    let chatgpt = "https://chatgpt.com/backend-api/ps/mcp";
    let mut raw = connected(&server).await;
    let mut cookies_sent = Vec::new();
    for id in ["first", "west"] {
        let result = raw.call("http/request", post(chatgpt, id)).await;
        assert_eq!(result["status"], 200, "{result}");
        let seen = proxy.next_request();
        assert_eq!(seen.authority, "chatgpt.com:443");
        assert!(
            seen.head
                .starts_with("POST /backend-api/ps/mcp HTTP/1.1\r\n"),
            "{}",
            seen.head
        );
        cookies_sent.push(seen.header("cookie"));
    }
    // Another connection: the store belongs to the server.
    let mut other = connected(&server).await;
    other.call("http/request", post(chatgpt, "central")).await;
    cookies_sent.push(proxy.next_request().header("cookie"));
    other
        .call(
            "http/request",
            post("https://api.openai.com/backend-api/ps/mcp", "other"),
        )
        .await;
    let seen = proxy.next_request();
    assert_eq!(seen.authority, "api.openai.com:443");
    cookies_sent.push(seen.header("cookie"));
    assert_eq!(
        cookies_sent,
        vec![
            vec![],
            vec!["__cflb=west".to_owned()],
            vec!["__cflb=central".to_owned()],
            vec![],
        ]
    );
}
