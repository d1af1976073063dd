//! `GET /metrics` from a test: a plain HTTP/1.0 request, and the text
//! exposition read strictly — every line matches the Prometheus text format
//! (0.0.4) grammar, each family's `# TYPE` comes before its samples, names
//! carry the `codexbox_` prefix and counters end in `_total` — into a table
//! of sample values.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::SocketAddr;

use super::client::WAIT;

/// A plain `GET path` to `addr`: the status code and the whole answer.
pub fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    request(addr, "GET", path, token, "")
}

/// A plain HTTP/1.0 request with `body` (none when empty): the status
/// code and the whole answer (head and body).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut socket = std::net::TcpStream::connect(addr).expect("connect");
    socket.set_read_timeout(Some(WAIT)).expect("read timeout");
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let length = if body.is_empty() {
        String::new()
    } else {
        format!("Content-Length: {}\r\n", body.len())
    };
    socket
        .write_all(
            format!("{method} {path} HTTP/1.0\r\nHost: test\r\n{authorization}{length}\r\n{body}")
                .as_bytes(),
        )
        .expect("write request");
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    let answer = String::from_utf8(answer).expect("a UTF-8 answer");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    (status, format!("{head}\r\n\r\n{body}"))
}

/// Scrapes `addr` (which must answer 200) and parses the exposition.
pub fn scrape(addr: SocketAddr, token: Option<&str>) -> Exposition {
    let (status, answer) = get(addr, "/metrics", token);
    assert_eq!(status, 200, "GET /metrics: {answer}");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_default();
    assert!(
        head.lines()
            .any(|l| l
                .eq_ignore_ascii_case("content-type: text/plain; version=0.0.4; charset=utf-8")),
        "not the text exposition format: {head}"
    );
    Exposition::parse(body)
}

/// Scrapes `addr` until `done` holds for the page (bounded by [`WAIT`]):
/// figures some task updates after the event a test waited for.
pub fn scrape_until(
    addr: SocketAddr,
    token: Option<&str>,
    done: impl Fn(&Exposition) -> bool,
) -> Exposition {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let page = scrape(addr, token);
        if done(&page) {
            return page;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the figures never settled:\n{}",
            page.text()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A parsed exposition.
#[derive(Debug)]
pub struct Exposition {
    /// Family name (as its `# TYPE` names it) → type.
    types: BTreeMap<String, String>,
    /// `name{sorted labels}` → value.
    samples: BTreeMap<String, f64>,
    text: String,
}

fn is_name(name: &str, colons: bool) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colons && c == ':'))
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => text.parse().ok(),
    }
}

/// `{a="x",b="y"}` (after the name) → the labels and the rest of the line.
fn parse_labels(line: &str) -> (Vec<(String, String)>, &str) {
    let mut labels = Vec::new();
    let Some(mut rest) = line.strip_prefix('{') else {
        return (labels, line);
    };
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return (labels, after);
        }
        let (name, after) = rest
            .split_once("=\"")
            .unwrap_or_else(|| panic!("bad label in {line:?}"));
        assert!(is_name(name, false), "bad label name {name:?} in {line:?}");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => panic!("bad escape {other:?} in {line:?}"),
                },
                Some((at, '"')) => break at,
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value in {line:?}"),
            }
        };
        labels.push((name.to_owned(), value));
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// The family a sample named `name` belongs to, given the types seen.
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> Option<&'a str> {
    if types.contains_key(name) {
        return Some(name);
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|suffix| name.strip_suffix(suffix))
        .find(|base| {
            types
                .get(*base)
                .is_some_and(|t| t == "histogram" || t == "summary")
        })
}

fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let sorted: BTreeSet<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!(
        "{name}{{{}}}",
        sorted.into_iter().collect::<Vec<_>>().join(",")
    )
}

impl Exposition {
    /// Parses `text`, panicking on any line outside the grammar.
    pub fn parse(text: &str) -> Exposition {
        let mut types = BTreeMap::new();
        let mut samples = BTreeMap::new();
        for line in text.lines() {
            if let Some(comment) = line.strip_prefix('#') {
                let words: Vec<&str> = comment.trim_start().splitn(3, ' ').collect();
                match words.as_slice() {
                    ["TYPE", name, kind] => {
                        assert!(is_name(name, true), "bad name in {line:?}");
                        assert!(
                            ["counter", "gauge", "histogram", "summary", "untyped"].contains(kind),
                            "bad type in {line:?}"
                        );
                        assert!(name.starts_with("codexbox_"), "unprefixed {line:?}");
                        if *kind == "counter" {
                            assert!(name.ends_with("_total"), "counter without _total: {line:?}");
                        }
                        let previous = types.insert((*name).to_owned(), (*kind).to_owned());
                        assert!(previous.is_none(), "second TYPE for {name}");
                    }
                    ["HELP", name, ..] => assert!(is_name(name, true), "bad name in {line:?}"),
                    _ => {}
                }
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let name_end = line.find(['{', ' ']).unwrap_or(line.len());
            let name = &line[..name_end];
            assert!(is_name(name, true), "bad metric name in {line:?}");
            let family = family_of(name, &types)
                .unwrap_or_else(|| panic!("sample before its # TYPE: {line:?}"));
            let (labels, rest) = parse_labels(&line[name_end..]);
            let fields: Vec<&str> = rest.split(' ').filter(|f| !f.is_empty()).collect();
            assert!(
                (1..=2).contains(&fields.len()) && rest.starts_with(' '),
                "bad sample {line:?}"
            );
            let value = parse_value(fields[0]).unwrap_or_else(|| panic!("bad value in {line:?}"));
            if let Some(timestamp) = fields.get(1) {
                assert!(
                    timestamp.parse::<i64>().is_ok(),
                    "bad timestamp in {line:?}"
                );
            }
            if types[family] == "histogram" && name.ends_with("_bucket") {
                assert!(
                    labels.iter().any(|(k, _)| k == "le"),
                    "bucket without le: {line:?}"
                );
            }
            let labels: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let previous = samples.insert(key(name, &labels), value);
            assert!(previous.is_none(), "duplicate sample {line:?}");
        }
        Exposition {
            types,
            samples,
            text: text.to_owned(),
        }
    }

    /// The value of sample `name{labels}`; 0 when its family exists but has
    /// no such sample yet (a counter never bumped).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        assert!(
            family_of(name, &self.types).is_some(),
            "no family for {name} in\n{}",
            self.text
        );
        self.samples.get(&key(name, labels)).copied().unwrap_or(0.0)
    }

    /// The type `# TYPE` gives family `name`.
    pub fn type_of(&self, name: &str) -> Option<&str> {
        self.types.get(name).map(String::as_str)
    }

    /// The raw text.
    pub fn text(&self) -> &str {
        &self.text
    }
}
