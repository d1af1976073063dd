//! The JSON-RPC envelope (`protocol::envelope`): decoding of raw frames with
//! the size, value-count and depth limits and duplicate-key refusal, the id
//! an error about a refused frame carries, and the id scan of oversize
//! requests. In-process; the same frames through a real server are in
//! `server.rs`.

use codexbox::protocol::envelope::{self, EnvelopeError, Incoming, MAX_JSON_VALUES};
use codexbox::protocol::RequestId;
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::common::fuzz;
use crate::gen;

/// One generated envelope: its top-level members in order (a key may
/// repeat) and how deep its `params` are nested.
#[derive(Debug, Clone)]
pub struct Frame {
    pub members: Vec<(String, Value)>,
}

impl Frame {
    pub fn text(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|(key, value)| format!("{}:{value}", Value::String(key.clone())))
            .collect();
        format!("{{{}}}", members.join(","))
    }

    fn all(&self, key: &str) -> Vec<&Value> {
        self.members
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .collect()
    }

    fn has_duplicates(&self) -> bool {
        let mut keys: Vec<&str> = self.members.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys.windows(2).any(|pair| pair[0] == pair[1])
    }

    /// What the decoder must make of the frame, read independently.
    pub fn expected(&self) -> Expected {
        if self.has_duplicates() || depth(self) > MAX_DEPTH {
            return Expected::Malformed;
        }
        let id = self.all("id").first().map(|id| valid_id(id));
        let method = self.all("method").first().copied().cloned();
        match (id, method) {
            (Some(None), _) => Expected::Malformed,
            (Some(Some(id)), Some(Value::String(method))) => Expected::Request(id, method),
            (None, Some(Value::String(method))) => Expected::Notification(method),
            (_, Some(_)) => Expected::Malformed,
            (_, None) if !self.all("result").is_empty() || !self.all("error").is_empty() => {
                Expected::Response
            }
            (_, None) => Expected::Malformed,
        }
    }

    /// The id the oversize scan must find.
    pub fn scanned_id(&self) -> Option<RequestId> {
        let ids = self.all("id");
        let methods = self.all("method");
        if ids.len() != 1 || methods.is_empty() || !methods.iter().all(|m| m.is_string()) {
            return None;
        }
        // The scan skips values without building them, at any depth.
        valid_id(ids[0])
    }
}

/// serde_json's nesting limit: arrays and objects inside one another.
const MAX_DEPTH: usize = 127;

/// How deeply the frame's arrays and objects nest, the frame included.
fn depth(frame: &Frame) -> usize {
    fn of(value: &Value) -> usize {
        match value {
            Value::Array(items) => 1 + items.iter().map(of).max().unwrap_or(0),
            Value::Object(members) => 1 + members.values().map(of).max().unwrap_or(0),
            _ => 0,
        }
    }
    1 + frame.members.iter().map(|(_, v)| of(v)).max().unwrap_or(0)
}

/// A string or an integer that fits i64.
pub fn valid_id(value: &Value) -> Option<RequestId> {
    match value {
        Value::String(s) => Some(RequestId::Str(s.clone())),
        Value::Number(n) => n.as_i64().map(RequestId::Int),
        _ => None,
    }
}

/// What a frame is.
#[derive(Debug, Clone, PartialEq)]
pub enum Expected {
    Request(RequestId, String),
    Notification(String),
    Response,
    Malformed,
}

fn id_value() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => gen::edge_integer(),
        3 => gen::safe_string().prop_map(Value::String),
        1 => gen::json_leaf(),
        1 => Just(json!({"id": 1})),
    ]
    .boxed()
}

fn method_value() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "environment/status", "initialize", "initialized", "fs/unknown", "", "process/nope",
        ])
        .prop_map(Value::from),
        1 => gen::json_leaf(),
    ]
    .boxed()
}

/// `value` nested `depth` levels deep in arrays and objects.
fn nest(value: Value, depth: usize) -> Value {
    (0..depth).fold(value, |inner, level| {
        if level % 2 == 0 {
            json!([inner])
        } else {
            json!({ "d": inner })
        }
    })
}

pub fn frame() -> BoxedStrategy<Frame> {
    let member = prop_oneof![
        3 => id_value().prop_map(|v| ("id".to_owned(), v)),
        3 => method_value().prop_map(|v| ("method".to_owned(), v)),
        2 => (gen::json_value(), prop_oneof![4 => Just(0usize), 1 => 100usize..140])
            .prop_map(|(v, d)| ("params".to_owned(), nest(v, d))),
        1 => gen::json_value().prop_map(|v| ("result".to_owned(), v)),
        1 => gen::json_value().prop_map(|v| ("error".to_owned(), v)),
        1 => (gen::key(), gen::json_value()).prop_map(|(k, v)| (k, v)),
        1 => Just(("jsonrpc".to_owned(), json!("2.0"))),
    ];
    prop::collection::vec(member, 0..6)
        .prop_map(|members| Frame { members })
        .boxed()
}

fn check_decoded(frame: &Frame, text: &str) -> Result<(), TestCaseError> {
    let decoded = envelope::decode(text.as_bytes(), usize::MAX);
    match (frame.expected(), decoded) {
        (
            Expected::Request(id, method),
            Ok(Incoming::Request {
                id: got, method: m, ..
            }),
        ) => {
            prop_assert_eq!((id, method), (got, m));
        }
        (Expected::Notification(method), Ok(Incoming::Notification { method: m, .. })) => {
            prop_assert_eq!(method, m);
        }
        (Expected::Response, Ok(Incoming::Response)) => {}
        (Expected::Malformed, Err(err)) => {
            let too_large = matches!(err, EnvelopeError::TooLarge { .. });
            prop_assert!(!too_large, "{text}: {err}");
            prop_assert_eq!(
                envelope::error_id(text.as_bytes(), &err),
                RequestId::MALFORMED
            );
        }
        (expected, got) => {
            prop_assert!(false, "{text}: expected {expected:?}, decoded {got:?}");
        }
    }
    Ok(())
}

#[test]
fn envelope_classifies_generated_frames_like_an_independent_reading() {
    fuzz::run("envelope_classify", 512, frame(), |frame| {
        check_decoded(&frame, &frame.text())
    });
}

#[test]
fn oversize_frames_carry_the_scanned_id_or_minus_one() {
    fuzz::run(
        "envelope_oversize",
        384,
        (frame(), 0usize..64),
        |(frame, under)| {
            let text = frame.text();
            let limit = text.len().saturating_sub(1 + under);
            let err = match envelope::decode(text.as_bytes(), limit) {
                Err(err @ EnvelopeError::TooLarge { .. }) => err,
                other => return Err(TestCaseError::fail(format!("{text}: {other:?}"))),
            };
            let id = envelope::error_id(text.as_bytes(), &err);
            let want = frame.scanned_id().unwrap_or(RequestId::MALFORMED);
            prop_assert_eq!(id, want, "{}", text);
            Ok(())
        },
    );
}

/// Bytes a frame can become: arbitrary bytes, or the text of a generated
/// frame cut short, spliced or with a byte changed.
fn raw_bytes() -> BoxedStrategy<gen::Bytes> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        (frame(), any::<usize>(), any::<u8>(), 0u8..3).prop_map(|(frame, at, byte, how)| {
            let mut bytes = frame.text().into_bytes();
            let at = at % (bytes.len() + 1);
            match how {
                0 => bytes.truncate(at),
                1 => bytes.insert(at, byte),
                _ => {
                    if let Some(slot) = bytes.get_mut(at) {
                        *slot = byte;
                    }
                }
            }
            bytes
        }),
        (0usize..4000, prop::bool::ANY).prop_map(|(depth, arrays)| {
            let open = if arrays { "[" } else { "{\"a\":" };
            open.repeat(depth).into_bytes()
        }),
    ]
    .prop_map(gen::Bytes)
    .boxed()
}

#[test]
fn arbitrary_bytes_never_panic_and_errors_carry_minus_one() {
    fuzz::run(
        "envelope_bytes",
        768,
        (raw_bytes(), any::<bool>()),
        |(gen::Bytes(bytes), tight)| {
            let limit = if tight { bytes.len() / 2 } else { usize::MAX };
            match envelope::decode(&bytes, limit) {
                Ok(incoming) => {
                    // An accepted frame is one JSON object.
                    let value: Value = serde_json::from_slice(&bytes)
                        .map_err(|err| TestCaseError::fail(format!("accepted non-JSON: {err}")))?;
                    prop_assert!(value.is_object());
                    if let Incoming::Request { id, .. } = incoming {
                        prop_assert_eq!(valid_id(&value["id"]), Some(id));
                    }
                }
                Err(err @ EnvelopeError::TooLarge { .. }) => {
                    prop_assert!(bytes.len() > limit);
                    let id = envelope::error_id(&bytes, &err);
                    // Whatever the scan finds is the frame's one top-level id
                    // (it skips values at any depth without checking them:
                    // the UTF-8 of strings, the range of numbers).
                    if id != RequestId::MALFORMED {
                        match serde_json::from_str::<Value>(&String::from_utf8_lossy(&bytes)) {
                            Ok(value) => prop_assert_eq!(valid_id(&value["id"]), Some(id)),
                            Err(err)
                                if err.to_string().contains("recursion limit")
                                    || err.to_string().contains("number out of range") => {}
                            Err(err) => prop_assert!(false, "scanned non-JSON: {}", err),
                        }
                    }
                }
                Err(err) => {
                    prop_assert!(bytes.len() <= limit);
                    prop_assert_eq!(envelope::error_id(&bytes, &err), RequestId::MALFORMED);
                }
            }
            Ok(())
        },
    );
}

/// The value-count limit is exact: a frame of `MAX_JSON_VALUES` values
/// decodes, one more is refused, whatever holds them.
#[test]
fn the_value_limit_holds_at_its_edge() {
    fuzz::run(
        "envelope_value_limit",
        8,
        (0usize..3, any::<bool>()),
        |(extra, objects)| {
            // `{"id":1,"method":"m","params":[…]}` holds 4 values besides the items.
            let items = MAX_JSON_VALUES - 4 + extra;
            let item = if objects { "{}" } else { "0" };
            let mut text = String::from(r#"{"id":1,"method":"m","params":["#);
            text.push_str(&vec![item; items].join(","));
            text.push_str("]}");
            let decoded = envelope::decode(text.as_bytes(), usize::MAX);
            prop_assert_eq!(decoded.is_ok(), extra == 0, "{} extra", extra);
            Ok(())
        },
    );
}

/// The id scan skips what it does not keep without checking it: a number
/// out of f64's range elsewhere in an oversize request still leaves its id.
#[test]
fn the_id_scan_skips_numbers_out_of_range() {
    let text = br#"{"method":"m","params":{"x":-4.1e1154},"id":"req"}"#;
    let err = envelope::decode(text, 8).unwrap_err();
    assert_eq!(envelope::error_id(text, &err), RequestId::Str("req".into()));
}
