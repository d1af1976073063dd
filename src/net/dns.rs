//! Name resolution for sandboxed commands under managed routing: a small
//! DNS stub on a socket bound in the sandbox's network namespace (UDP
//! 127.0.0.1:53), served by the sandbox helper from outside the sandbox,
//! that answers `A`/`AAAA` only for names the proxy's policy allows,
//! resolved by the proxy through its resolve endpoint. Other names get
//! `NXDOMAIN` — a final answer, where `REFUSED` would make resolvers retry
//! and report a temporary failure — and the proxy records each as a `dns`
//! decision with its reason (`not_allowed`, `dns_failed`, …). A question
//! that names no DNS name the proxy would accept (`net::destination`: a
//! label other than letters, digits, `-`, `_`; over 253 bytes; an IPv4
//! spelling such as `1686110210`) gets `NXDOMAIN` at once, without asking
//! the proxy. `SERVFAIL` only when the proxy cannot be asked.
//!
//! The DNS wire format handled here is the minimum a stub resolver sends:
//! one question, no compression in queries; answers use a pointer to the
//! question name.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use super::destination::{shown, DnsName, HostError};
use super::exchange::on_connection;
use crate::sync::lock;

/// The proxy's resolve endpoint (origin-form request on its HTTP listener).
pub const RESOLVE_PATH: &str = "/.well-known/codexbox/resolve";
/// TTL of a stub answer, seconds.
const ANSWER_TTL_SECS: u32 = 30;
/// Largest query handled.
const MAX_QUERY_BYTES: usize = 512;

/// The resolve endpoint's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolveAnswer {
    pub addresses: Vec<IpAddr>,
}

/// `A` or `AAAA`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryType {
    A,
    Aaaa,
    Other(u16),
}

/// The question of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub id: u16,
    /// The canonical name asked for, or why the question names none (it is
    /// answered `NXDOMAIN`).
    pub name: Result<DnsName, HostError>,
    pub qtype: QueryType,
    /// Offset of the end of the question section.
    end: usize,
    /// The RD bit of the query.
    recursion_desired: bool,
}

/// Response codes the stub sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rcode {
    NoError = 0,
    FormErr = 1,
    ServFail = 2,
    NxDomain = 3,
}

/// Parses a standard query with one question. `None` for anything else.
pub fn parse_query(query: &[u8]) -> Option<Question> {
    let header = query.get(..12)?;
    let id = u16::from_be_bytes([header[0], header[1]]);
    let flags = header[2];
    // QR must be 0 (a query) and OPCODE 0 (standard).
    if flags & 0x80 != 0 || (flags >> 3) & 0x0f != 0 {
        return None;
    }
    if u16::from_be_bytes([header[4], header[5]]) != 1 {
        return None;
    }
    let mut i = 12;
    let mut labels: Vec<&[u8]> = Vec::new();
    loop {
        let len = usize::from(*query.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        // Compression pointers and extended labels are not valid here.
        if len > 63 {
            return None;
        }
        labels.push(query.get(i..i + len)?);
        i += len;
    }
    let qtype = u16::from_be_bytes([*query.get(i)?, *query.get(i + 1)?]);
    let qclass = u16::from_be_bytes([*query.get(i + 2)?, *query.get(i + 3)?]);
    if qclass != 1 || labels.is_empty() {
        return None;
    }
    Some(Question {
        id,
        name: question_name(&labels),
        qtype: match qtype {
            1 => QueryType::A,
            28 => QueryType::Aaaa,
            other => QueryType::Other(other),
        },
        end: i + 4,
        recursion_desired: flags & 0x01 != 0,
    })
}

/// The canonical name of the labels of a question. A label holding a dot
/// (or any byte a DNS name may not hold) would let the joined text mean
/// other labels: such a question names nothing.
fn question_name(labels: &[&[u8]]) -> Result<DnsName, HostError> {
    let valid_bytes = labels.iter().all(|label| {
        label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
    });
    let text = labels
        .iter()
        .map(|label| String::from_utf8_lossy(label))
        .collect::<Vec<_>>()
        .join(".");
    if !valid_bytes {
        return Err(HostError::Name(shown(&text)));
    }
    DnsName::parse(&text)
}

/// A response to `question` (echoing it) with `rcode` and the addresses of
/// the asked family.
pub fn build_response(
    query: &[u8],
    question: &Question,
    rcode: Rcode,
    addresses: &[IpAddr],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(question.end + 16 * addresses.len());
    out.extend_from_slice(&question.id.to_be_bytes());
    // QR=1, RD copied, RA=1.
    out.push(0x80 | u8::from(question.recursion_desired));
    out.push(0x80 | rcode as u8);
    let answers: Vec<&IpAddr> = addresses
        .iter()
        .filter(|ip| match question.qtype {
            QueryType::A => ip.is_ipv4(),
            QueryType::Aaaa => ip.is_ipv6(),
            QueryType::Other(_) => false,
        })
        .collect();
    let count = u16::try_from(answers.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(query.get(12..question.end).unwrap_or_default());
    for ip in answers.into_iter().take(usize::from(count)) {
        // Name: pointer to offset 12.
        out.extend_from_slice(&[0xc0, 12]);
        let (rtype, data): (u16, Vec<u8>) = match ip {
            IpAddr::V4(v4) => (1, v4.octets().to_vec()),
            IpAddr::V6(v6) => (28, v6.octets().to_vec()),
        };
        out.extend_from_slice(&rtype.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&ANSWER_TTL_SECS.to_be_bytes());
        out.extend_from_slice(&u16::try_from(data.len()).unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

/// A bare error response when the question could not be parsed.
fn format_error(query: &[u8]) -> Option<Vec<u8>> {
    let id = query.get(..2)?;
    let mut out = id.to_vec();
    out.extend_from_slice(&[0x80, 0x80 | Rcode::FormErr as u8, 0, 0, 0, 0, 0, 0, 0, 0]);
    Some(out)
}

/// What the proxy said about a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Addresses(Vec<IpAddr>),
    /// Refused by policy.
    Refused,
    /// The name does not resolve.
    NoSuchName,
    /// The proxy could not be asked.
    Failed,
}

/// Asks the resolve endpoint of the proxy's HTTP listener at `proxy`.
pub async fn ask_proxy(proxy: SocketAddr, name: &str) -> Lookup {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::TokioIo;
    let Ok(stream) = tokio::net::TcpStream::connect(proxy).await else {
        return Lookup::Failed;
    };
    let Ok((mut sender, connection)) =
        hyper::client::conn::http1::handshake::<_, Empty<bytes::Bytes>>(TokioIo::new(stream)).await
    else {
        return Lookup::Failed;
    };
    let Ok(request) = http::Request::get(format!("{RESOLVE_PATH}?name={name}"))
        .header(http::header::HOST, "codexbox-proxy")
        .body(Empty::new())
    else {
        return Lookup::Failed;
    };
    let exchange = async {
        let response = sender.send_request(request).await.ok()?;
        let status = response.status();
        let body = response.into_body().collect().await.ok()?;
        Some((status, body.to_bytes()))
    };
    let Some((status, body)) = on_connection(connection, exchange).await else {
        return Lookup::Failed;
    };
    if status == http::StatusCode::OK {
        return match serde_json::from_slice::<ResolveAnswer>(&body) {
            Ok(answer) => Lookup::Addresses(answer.addresses),
            Err(_) => Lookup::Failed,
        };
    }
    let reason = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("reason").and_then(|r| r.as_str().map(str::to_owned)));
    match reason.as_deref() {
        Some("dns_failed") => Lookup::NoSuchName,
        Some(_) => Lookup::Refused,
        None => Lookup::Failed,
    }
}

/// What the proxy said about each name in the last `ANSWER_TTL_SECS`,
/// shared with the queries in flight: the A and AAAA queries a resolver
/// sends together for one name ask the proxy (and are logged) once.
#[derive(Debug, Default)]
pub struct Answers(Mutex<HashMap<String, Arc<Asked>>>);

/// One name's answer, once the proxy has given it, and when it was asked.
type Asked = OnceCell<(Lookup, Instant)>;

/// Names remembered at once; beyond that the expired ones go, then all.
const MAX_REMEMBERED_NAMES: usize = 256;

impl Answers {
    /// What the proxy says about `name`, asked at most once per TTL.
    pub async fn lookup(&self, proxy: SocketAddr, name: &str) -> Lookup {
        let ttl = Duration::from_secs(u64::from(ANSWER_TTL_SECS));
        let fresh = |cell: &Arc<Asked>| cell.get().is_none_or(|(_, asked)| asked.elapsed() < ttl);
        let cell = {
            let mut names = lock(&self.0);
            match names.get(name) {
                Some(cell) if fresh(cell) => cell.clone(),
                _ => {
                    if names.len() >= MAX_REMEMBERED_NAMES {
                        names.retain(|_, cell| fresh(cell));
                        if names.len() >= MAX_REMEMBERED_NAMES {
                            names.clear();
                        }
                    }
                    let cell = Arc::new(OnceCell::new());
                    names.insert(name.to_owned(), cell.clone());
                    cell
                }
            }
        };
        let (lookup, _) = cell
            .get_or_init(|| async { (ask_proxy(proxy, name).await, Instant::now()) })
            .await;
        if *lookup == Lookup::Failed {
            // Not remembered: the next query asks again.
            let mut names = lock(&self.0);
            if names.get(name).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                names.remove(name);
            }
        }
        lookup.clone()
    }
}

/// Answers one query.
pub async fn answer(query: &[u8], proxy: SocketAddr, answers: &Answers) -> Option<Vec<u8>> {
    let Some(question) = parse_query(query) else {
        return format_error(query);
    };
    let Ok(name) = &question.name else {
        return Some(build_response(query, &question, Rcode::NxDomain, &[]));
    };
    let (rcode, addresses) = match answers.lookup(proxy, name.as_str()).await {
        Lookup::Addresses(addresses) => (Rcode::NoError, addresses),
        Lookup::Refused | Lookup::NoSuchName => (Rcode::NxDomain, Vec::new()),
        Lookup::Failed => (Rcode::ServFail, Vec::new()),
    };
    Some(build_response(query, &question, rcode, &addresses))
}

/// Queries answered at once; more wait to be read.
const MAX_QUERIES_IN_FLIGHT: usize = 64;

/// Serves the stub on `socket`, asking the proxy at `proxy`, until the
/// process ends. The queries in flight are tasks of this one's set: they
/// end when it is dropped.
pub async fn serve(socket: tokio::net::UdpSocket, proxy: SocketAddr) {
    let socket = Arc::new(socket);
    let answers = Arc::new(Answers::default());
    let mut in_flight = tokio::task::JoinSet::new();
    let mut buf = vec![0u8; MAX_QUERY_BYTES];
    loop {
        while in_flight.try_join_next().is_some() {}
        if in_flight.len() >= MAX_QUERIES_IN_FLIGHT {
            in_flight.join_next().await;
            continue;
        }
        let Ok((n, from)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Some(query) = buf.get(..n).map(<[u8]>::to_vec) else {
            continue;
        };
        let (socket, answers) = (socket.clone(), answers.clone());
        in_flight.spawn(async move {
            if let Some(response) = answer(&query, proxy, &answers).await {
                let _ = socket.send_to(&response, from).await;
            }
        });
    }
}

/// Where the stub listens inside the namespace.
pub fn stub_address() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 53))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resolve endpoint on 127.0.0.1 that answers `addresses` for every
    /// name and counts the requests it gets.
    async fn resolve_endpoint() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 512];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    // Slow enough that the second query arrives meanwhile.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let body = r#"{"addresses":["127.0.0.1"]}"#;
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                });
            }
        });
        (address, asked)
    }

    #[tokio::test]
    async fn queries_for_one_name_ask_the_proxy_once() {
        let (proxy, asked) = resolve_endpoint().await;
        let answers = Answers::default();
        let (a, aaaa) = tokio::join!(
            answers.lookup(proxy, "pypi.test"),
            answers.lookup(proxy, "pypi.test")
        );
        let expected = Lookup::Addresses(vec!["127.0.0.1".parse().unwrap()]);
        assert_eq!((a, aaaa), (expected.clone(), expected.clone()));
        assert_eq!(answers.lookup(proxy, "pypi.test").await, expected);
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
        answers.lookup(proxy, "other.test").await;
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
        // A proxy that cannot be reached is asked again next time.
        let gone = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .unwrap();
        assert_eq!(answers.lookup(gone, "x.test").await, Lookup::Failed);
        assert!(!lock(&answers.0).contains_key("x.test"));
    }

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(label.len() as u8);
            q.extend_from_slice(label.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&[0, 1]);
        q
    }

    #[test]
    fn queries_parse_and_answers_carry_only_the_asked_family() {
        let q = query("PyPI.org", 1);
        let question = parse_query(&q).unwrap();
        assert_eq!(
            (question.id, question.name.clone(), question.qtype),
            (0x1234, DnsName::parse("pypi.org"), QueryType::A)
        );
        let ips: Vec<IpAddr> = vec!["1.2.3.4".parse().unwrap(), "::1".parse().unwrap()];
        let r = build_response(&q, &question, Rcode::NoError, &ips);
        assert_eq!(&r[..4], &[0x12, 0x34, 0x81, 0x80]);
        assert_eq!(&r[6..8], &[0, 1], "one answer");
        assert_eq!(&r[r.len() - 4..], &[1, 2, 3, 4]);
        let refused = build_response(&q, &question, Rcode::NxDomain, &[]);
        assert_eq!((refused[3] & 0x0f, refused[7]), (3, 0));
    }

    #[test]
    fn malformed_queries_are_rejected() {
        assert!(parse_query(&[0; 5]).is_none());
        let mut response = query("a.b", 1);
        response[2] |= 0x80;
        assert!(parse_query(&response).is_none());
        let mut pointer = query("a.b", 1);
        pointer[12] = 0xc0;
        assert!(parse_query(&pointer).is_none());
        assert_eq!(format_error(&[1, 2, 3]).unwrap()[3] & 0x0f, 1);
    }

    /// A query whose labels are given as raw bytes.
    fn query_labels(labels: &[&[u8]]) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in labels {
            q.push(label.len() as u8);
            q.extend_from_slice(label);
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        q
    }

    #[test]
    fn questions_naming_no_dns_name_are_parsed_but_name_nothing() {
        let long = "a".repeat(63);
        let too_long: Vec<&[u8]> = vec![long.as_bytes(); 4];
        for labels in [
            too_long,
            vec![b"a/b".as_slice(), b"c"],
            vec![b"100.128.0.2%".as_slice(), b"allowed", b"test"],
            vec![b"a.b".as_slice(), b"test"],
            vec![b"1686110210".as_slice()],
            vec![b"\xff".as_slice(), b"test"],
            vec![b"-a".as_slice(), b"test"],
        ] {
            let question = parse_query(&query_labels(&labels)).unwrap();
            assert!(question.name.is_err(), "{labels:?}");
        }
        let question = parse_query(&query_labels(&[b"Allowed", b"TEST"])).unwrap();
        assert_eq!(question.name, DnsName::parse("allowed.test"));
    }

    #[tokio::test]
    async fn names_no_policy_can_allow_get_nxdomain_without_asking_the_proxy() {
        // Nothing listens here: asking would be SERVFAIL.
        let proxy = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let answers = Answers::default();
        let long = "a".repeat(63);
        for labels in [
            vec![long.as_bytes(); 4],
            vec![b"x%".as_slice(), b"test"],
            vec![b"1686110210".as_slice()],
        ] {
            let q = query_labels(&labels);
            let response = answer(&q, proxy, &answers).await.unwrap();
            assert_eq!(response[3] & 0x0f, Rcode::NxDomain as u8, "{labels:?}");
        }
        let q = query("allowed.test", 1);
        let response = answer(&q, proxy, &answers).await.unwrap();
        assert_eq!(response[3] & 0x0f, Rcode::ServFail as u8);
    }
}
