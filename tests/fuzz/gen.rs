//! Generators shared by the fuzz targets: arbitrary JSON, mutations of a
//! JSON value, and values generated from the shipped JSON Schemas.
//!
//! Safety rule: the servers and helpers these values reach run as root, so
//! no generated string is ever an absolute path or a `file:` URI unless it
//! comes from the caller's [`Pool`], whose paths all lie in a scratch
//! directory (or do not exist), and no generated `argv` names a program
//! other than the pool's harmless ones.


use proptest::prelude::*;
use serde_json::{json, Map, Number, Value};

/// Bytes shown as an escaped byte string in failure reports.
#[derive(Clone, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

/// Object keys that collide often, plus the envelope's and the params' own.
const KEYS: &[&str] = &[
    "id",
    "method",
    "params",
    "result",
    "error",
    "path",
    "processId",
    "type",
    "sandbox",
    "a",
    "",
];

/// A string that is never absolute and never a URI: arbitrary text after a
/// letter other than `f`.
pub fn safe_string() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[a-eg-z][a-z0-9_./-]{0,12}",
        2 => "[a-eg-z]\\PC{0,16}",
        1 => Just(String::new()),
        1 => "x[\\x00-\\x1f\"\\\\%:?#]{0,6}",
    ]
    .boxed()
}

/// Integers at the edges serde and the schemas care about.
pub fn edge_integer() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(vec![
            json!(0),
            json!(-1),
            json!(1),
            json!(65535),
            json!(65536),
            json!(i64::MAX),
            json!(i64::MIN),
            json!(u64::MAX),
            json!(u32::MAX),
            json!(i32::MAX),
            json!(1_048_576),
            json!(1_048_577),
        ]),
    ]
    .boxed()
}

/// A JSON leaf: null, booleans, edge numbers, floats, short strings.
pub fn json_leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        edge_integer(),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        Just(json!(1.0)),
        safe_string().prop_map(Value::String),
    ]
    .boxed()
}

/// Arbitrary JSON, at most four levels deep and six wide.
pub fn json_value() -> BoxedStrategy<Value> {
    json_leaf()
        .prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key(), inner), 0..6)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
            ]
        })
        .boxed()
}

/// An object key: a colliding one or arbitrary text.
pub fn key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => safe_string(),
    ]
    .boxed()
}
