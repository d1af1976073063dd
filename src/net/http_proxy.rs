//! The HTTP listener of the proxy, on hyper: absolute-form forwarding of
//! plain HTTP and CONNECT tunnels (docs/network.md), with the
//! reference's statuses, `x-proxy-error` headers and 403 bodies.
//!
//! Unlike the reference, a CONNECT destination is dialed before the `200`
//! is sent, so a client learns of a failed dial as `502` instead of a tunnel
//! that closes at once. The target's host is parsed once into its
//! canonical form (`net::destination`): a host that is none is refused
//! like a host no entry allows, a port that is not 1–65535 is a `400`, a
//! request with more than one `Host` header is a `400` (RFC 9112 §3.2), and
//! what goes on — to the origin or an upstream proxy — names the canonical
//! host.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE, HOST};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::decision::{BlockedBody, DenyReason, Protocol};
use super::destination::{shown_parsed, split_authority, DnsName, Host, HostError};
use super::dial::dial;
use super::dns::{ResolveAnswer, RESOLVE_PATH};
use super::policy::Mode;
use super::proxy::DNS_PORT;
use super::proxy::{Admission, Destination, ProxyState};
use crate::shutdown::Watcher;

/// How long a client may take to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The header carrying the reason of a refusal.
pub const PROXY_ERROR_HEADER: &str = "x-proxy-error";
const UNIX_SOCKET_HEADER: &str = "x-unix-socket";

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves HTTP/1.1 proxy requests on one client connection until it ends
/// or the proxy stops (`watcher`: the connection is then closed). A tunnel
/// or an upstream connection a request starts runs in a task of its own,
/// watched too.
pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<ProxyState>,
    mut watcher: Watcher,
) {
    let client = peer.to_string();
    let requests = watcher.watcher();
    let service = hyper::service::service_fn(move |request| {
        let state = state.clone();
        let client = client.clone();
        let watcher = requests.watcher();
        async move { Ok::<_, Infallible>(handle(request, &client, &state, &watcher).await) }
    });
    let connection = super::http_server::builder(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::select! {
        served = connection => {
            if let Err(err) = served {
                tracing::debug!(%peer, "proxy connection ended: {err}");
            }
        }
        () = watcher.stopped() => {}
    }
}

async fn handle(
    request: Request<Incoming>,
    client: &str,
    state: &ProxyState,
    watcher: &Watcher,
) -> Response<Body> {
    if request.method() == Method::CONNECT {
        connect(request, client, state, watcher).await
    } else {
        forward(request, client, state, watcher).await
    }
}

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into())
        .map_err(|never| match never {})
        .boxed()
}

fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut response = Response::new(full(body.to_owned()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

/// A CONNECT refusal: `403`, text body, `x-proxy-error`.
fn blocked_text(reason: DenyReason) -> Response<Body> {
    let mut response = text(StatusCode::FORBIDDEN, reason.message());
    response.headers_mut().insert(
        PROXY_ERROR_HEADER,
        HeaderValue::from_static(reason.header()),
    );
    response
}

/// A plain-HTTP refusal: `403`, JSON body, `x-proxy-error`.
fn blocked_json(reason: DenyReason, host: &str, port: u16, protocol: Protocol) -> Response<Body> {
    let body =
        serde_json::to_string(&BlockedBody::new(reason, host, port, protocol)).unwrap_or_default();
    json_refusal(body, reason)
}

/// The short JSON form of a unix-socket refusal.
fn blocked_unix_socket(reason: DenyReason) -> Response<Body> {
    let body =
        serde_json::json!({"status": "blocked", "host": "unix-socket", "reason": reason.as_str()});
    json_refusal(body.to_string(), reason)
}

/// `403` with a JSON `body` and the reason's `x-proxy-error`.
fn json_refusal(body: String, reason: DenyReason) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = StatusCode::FORBIDDEN;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        PROXY_ERROR_HEADER,
        HeaderValue::from_static(reason.header()),
    );
    response
}

/// The host text and port of a request target's authority; `Err` is the
/// message of the `400` to answer.
fn target_of(
    authority: &http::uri::Authority,
    default_port: u16,
    empty: &'static str,
) -> Result<(Result<Host, HostError>, u16), String> {
    let (host, port) = split_authority(authority.as_str()).map_err(|err| err.to_string())?;
    if host.is_empty() {
        return Err(empty.to_owned());
    }
    Ok((Host::parse(host), port.unwrap_or(default_port)))
}

async fn connect(
    request: Request<Incoming>,
    client: &str,
    state: &ProxyState,
    watcher: &Watcher,
) -> Response<Body> {
    let Some(authority) = request.uri().authority().cloned() else {
        return text(StatusCode::BAD_REQUEST, "missing authority");
    };
    let (host, port) = match target_of(&authority, 443, "invalid host") {
        Ok(target) => target,
        Err(message) => return text(StatusCode::BAD_REQUEST, &message),
    };
    let upstream = host
        .as_ref()
        .ok()
        .and_then(|host| state.upstream.for_tunnel(&host.to_string(), port));
    let dest = Destination {
        host,
        port,
        protocol: Protocol::HttpsConnect,
        method: "CONNECT",
        client,
    };
    // Limited mode would need TLS interception for HTTPS; there is none.
    let mode_denial = (state.policy.mode == Mode::Limited).then_some(DenyReason::MitmRequired);
    let admission = match state.admit(&dest, mode_denial, upstream).await {
        Ok(admission) => admission,
        Err(reason) => return blocked_text(reason),
    };
    let shown = dest.shown();
    let (target, prefix) = match (admission, &dest.host) {
        (Admission::Direct(targets), _) => match dial(&targets).await {
            Ok(stream) => (stream, Bytes::new()),
            Err(err) => {
                tracing::info!(host = %shown, port, "CONNECT dial failed: {err}");
                return text(StatusCode::BAD_GATEWAY, "upstream failure");
            }
        },
        (Admission::Upstream(endpoint), Ok(host)) => {
            match endpoint.tunnel(&host.with_port(port)).await {
                Ok(tunnel) => tunnel,
                Err(err) => {
                    tracing::info!(host = %shown, port, "CONNECT through upstream failed: {err}");
                    return text(StatusCode::BAD_GATEWAY, "upstream failure");
                }
            }
        }
        (Admission::Upstream(_), Err(_)) => return blocked_text(DenyReason::NotAllowed),
    };
    // The tunnel outlives this connection's task; it is closed when the
    // proxy stops.
    watcher.spawn_until_stopped(async move {
        match hyper::upgrade::on(request).await {
            Ok(upgraded) => splice(upgraded, target, prefix).await,
            Err(err) => tracing::debug!("CONNECT upgrade failed: {err}"),
        }
    });
    Response::new(full(Bytes::new()))
}

/// Copies both ways between the client's upgraded connection and the
/// target until both sides are done. `prefix` is what the target side sent
/// before the tunnel was handed over.
async fn splice(upgraded: hyper::upgrade::Upgraded, mut target: TcpStream, prefix: Bytes) {
    match upgraded.downcast::<TokioIo<TcpStream>>() {
        Ok(parts) => {
            let mut client = parts.io.into_inner();
            if !parts.read_buf.is_empty() && target.write_all(&parts.read_buf).await.is_err() {
                return;
            }
            if !prefix.is_empty() && client.write_all(&prefix).await.is_err() {
                return;
            }
            super::relay::relay(client, target).await;
        }
        Err(upgraded) => {
            let mut client = TokioIo::new(upgraded);
            if !prefix.is_empty() && client.write_all(&prefix).await.is_err() {
                return;
            }
            let _ = tokio::io::copy_bidirectional(&mut client, &mut target).await;
        }
    }
}

async fn forward(
    mut request: Request<Incoming>,
    client: &str,
    state: &ProxyState,
    watcher: &Watcher,
) -> Response<Body> {
    let method = request.method().as_str().to_owned();
    let method_allowed = state.policy.mode.allows_method(&method);
    if let Some(value) = request.headers().get(UNIX_SOCKET_HEADER) {
        if value.to_str().is_err() {
            return text(StatusCode::BAD_REQUEST, "invalid x-unix-socket header");
        }
        if !method_allowed {
            return blocked_unix_socket(DenyReason::MethodNotAllowed);
        }
        return text(StatusCode::NOT_IMPLEMENTED, "unix sockets unsupported");
    }
    let uri = request.uri().clone();
    let Some(authority) = uri.authority().cloned() else {
        if uri.path() == RESOLVE_PATH && request.method() == Method::GET {
            return resolve_for_stub(&uri, client, state).await;
        }
        return text(StatusCode::BAD_REQUEST, "missing host");
    };
    let (host, port) = match target_of(&authority, 80, "missing host") {
        Ok(target) => target,
        Err(message) => return text(StatusCode::BAD_REQUEST, &message),
    };
    if uri.scheme_str() != Some("http") {
        return text(
            StatusCode::BAD_REQUEST,
            "only http:// targets can be forwarded; use CONNECT for https",
        );
    }
    if let Err(message) = check_host_header(&host, port, request.headers()) {
        return text(StatusCode::BAD_REQUEST, message);
    }
    let upstream = host
        .as_ref()
        .ok()
        .and_then(|host| state.upstream.for_plain(&host.to_string(), port));
    let dest = Destination {
        host,
        port,
        protocol: Protocol::Http,
        method: &method,
        client,
    };
    let mode_denial = (!method_allowed).then_some(DenyReason::MethodNotAllowed);
    let admission = state.admit(&dest, mode_denial, upstream).await;
    let shown = dest.shown();
    let (admission, host) = match (admission, dest.host) {
        (Ok(admission), Ok(host)) => (admission, host),
        (Err(reason), _) => return blocked_json(reason, &shown, port, Protocol::Http),
        (Ok(_), Err(_)) => {
            return blocked_json(DenyReason::NotAllowed, &shown, port, Protocol::Http)
        }
    };
    remove_hop_by_hop(request.headers_mut());
    // The canonical target, which is what was decided.
    let authority = if port == 80 {
        host.to_string()
    } else {
        host.with_port(port)
    };
    // One Host header, naming the destination as it was decided.
    if let Ok(value) = HeaderValue::from_str(&authority) {
        request.headers_mut().insert(HOST, value);
    }
    let path_and_query = uri.path_and_query().map_or("/", |pq| pq.as_str());
    let stream = match admission {
        Admission::Direct(targets) => {
            // Origin-form towards the origin itself.
            *request.uri_mut() = path_and_query
                .parse::<Uri>()
                .unwrap_or_else(|_| Uri::from_static("/"));
            dial(&targets).await.map_err(|err| err.to_string())
        }
        Admission::Upstream(endpoint) => {
            match format!("http://{authority}{path_and_query}").parse::<Uri>() {
                Ok(absolute) => *request.uri_mut() = absolute,
                Err(_) => return text(StatusCode::BAD_REQUEST, "invalid request target"),
            }
            if let Some(auth) = endpoint
                .authorization
                .as_deref()
                .and_then(|a| HeaderValue::from_str(a).ok())
            {
                request
                    .headers_mut()
                    .insert(http::header::PROXY_AUTHORIZATION, auth);
            }
            endpoint.connect().await.map_err(|err| err.to_string())
        }
    };
    let stream = match stream {
        Ok(stream) => stream,
        Err(err) => {
            tracing::info!(host = %shown, port, "forward dial failed: {err}");
            return text(StatusCode::BAD_GATEWAY, "upstream failure");
        }
    };
    match send(stream, request, watcher).await {
        Ok(mut response) => {
            remove_hop_by_hop(response.headers_mut());
            response.map(|body| body.boxed())
        }
        Err(err) => {
            tracing::info!(host = %shown, port, "forward failed: {err}");
            text(StatusCode::BAD_GATEWAY, "upstream failure")
        }
    }
}

/// The DNS stub's question: `GET /.well-known/codexbox/resolve?name=N`.
/// Answers the addresses of an allowed name, or a JSON refusal (a text
/// that is no DNS name is refused as not allowed).
async fn resolve_for_stub(uri: &Uri, client: &str, state: &ProxyState) -> Response<Body> {
    let name = uri
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("name=")))
        .unwrap_or("");
    if name.is_empty() {
        return text(StatusCode::BAD_REQUEST, "invalid name");
    }
    let name = DnsName::parse(name);
    let shown = shown_parsed(&name);
    match state.resolve_name(name, client).await {
        Ok(addresses) => {
            let body = serde_json::to_string(&ResolveAnswer { addresses }).unwrap_or_default();
            let mut response = Response::new(full(body));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(reason) => blocked_json(reason, &shown, DNS_PORT, Protocol::Dns),
    }
}

/// Sends one request on a fresh connection and returns the response head;
/// the body streams from the connection's task, which ends with the
/// response or when the proxy stops.
async fn send(
    stream: TcpStream,
    request: Request<Incoming>,
    watcher: &Watcher,
) -> Result<Response<Incoming>, hyper::Error> {
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    watcher.spawn_until_stopped(async move {
        if let Err(err) = connection.await {
            tracing::debug!("upstream connection ended: {err}");
        }
    });
    sender.send_request(request).await
}

/// The absolute-form Host check: at most one `Host` header, and when
/// there is one it names the target's host (canonically compared) and
/// port (80 when it has none). A target that names no host is left to the
/// policy, which refuses it.
fn check_host_header(
    target: &Result<Host, HostError>,
    port: u16,
    headers: &HeaderMap,
) -> Result<(), &'static str> {
    let mut values = headers.get_all(HOST).iter();
    let Some(value) = values.next() else {
        return Ok(());
    };
    if values.next().is_some() {
        return Err("multiple Host headers");
    }
    let Ok(target) = target else {
        return Ok(());
    };
    let (header_host, header_port) = value
        .to_str()
        .ok()
        .and_then(|v| split_authority(v).ok())
        .and_then(|(host, port)| Some((Host::parse(host).ok()?, port.unwrap_or(80))))
        .ok_or("invalid Host header")?;
    if *target == header_host && port == header_port {
        Ok(())
    } else {
        Err("Host header does not match request target")
    }
}

/// Removes `Connection` and what it names, and the other hop-by-hop
/// headers; `Host` and `X-Forwarded-For` stay.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "te",
    ] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn host_header_must_match_the_absolute_target() {
        let check = |target: &str, port: u16, pairs: &[(&str, &str)]| {
            check_host_header(&Host::parse(target), port, &headers(pairs))
        };
        assert!(check("example.com", 80, &[("host", "EXAMPLE.com")]).is_ok());
        assert!(check("example.com", 80, &[("host", "example.com.:80")]).is_ok());
        assert!(check("127.0.0.1", 80, &[("host", "0x7f.1")]).is_ok());
        assert!(check("example.com", 80, &[]).is_ok());
        assert_eq!(
            check("example.com", 80, &[("host", "evil.com")]),
            Err("Host header does not match request target")
        );
        assert!(check("example.com", 8080, &[("host", "example.com")]).is_err());
        assert!(check("example.com", 8080, &[("host", "example.com:8080")]).is_ok());
        for bad in ["a b", "example.com:73616", "[::1%25x]", "x@example.com", ""] {
            assert_eq!(
                check("example.com", 80, &[("host", bad)]),
                Err("invalid Host header"),
                "{bad}"
            );
        }
        assert_eq!(
            check(
                "example.com",
                80,
                &[("host", "example.com"), ("host", "example.com")]
            ),
            Err("multiple Host headers")
        );
        assert_eq!(
            check(
                "example.com",
                80,
                &[("host", "example.com"), ("host", "evil.com")]
            ),
            Err("multiple Host headers")
        );
    }

    #[test]
    fn hop_by_hop_headers_go_and_forwarding_headers_stay() {
        let mut map = headers(&[
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "5"),
            ("proxy-authorization", "Basic x"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("host", "example.com"),
            ("x-forwarded-for", "1.2.3.4"),
        ]);
        remove_hop_by_hop(&mut map);
        let mut names: Vec<&str> = map.keys().map(|k| k.as_str()).collect();
        names.sort();
        assert_eq!(names, vec!["host", "x-forwarded-for"]);
    }
}
