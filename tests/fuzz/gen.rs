//! Generators shared by the fuzz targets: arbitrary JSON, mutations of a
//! JSON value, and values generated from the shipped JSON Schemas.
//!
//! Safety rule: the servers and helpers these values reach run as root, so
//! no generated string is ever an absolute path or a `file:` URI unless it
//! comes from the caller's [`Pool`], whose paths all lie in a scratch
//! directory (or do not exist), and no generated `argv` names a program
//! other than the pool's harmless ones.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::strategy::Union;
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

/// One change to a JSON value, applied to its `at`-th node (pre-order,
/// modulo the node count).
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Drops the node from its parent (a member or an item).
    Remove { at: usize },
    /// Replaces the node with `null`.
    Null { at: usize },
    /// Replaces the node with arbitrary JSON.
    Replace { at: usize, with: Value },
    /// Adds a member to the node when it is an object.
    AddMember {
        at: usize,
        key: String,
        value: Value,
    },
    /// Wraps the node in an array.
    Wrap { at: usize },
    /// A number becomes its text, a string its length, a bool its negation.
    Retype { at: usize },
}

pub fn mutation() -> BoxedStrategy<Mutation> {
    let at = any::<usize>();
    prop_oneof![
        3 => at.prop_map(|at| Mutation::Remove { at }),
        2 => at.prop_map(|at| Mutation::Null { at }),
        2 => (at, json_value()).prop_map(|(at, with)| Mutation::Replace { at, with }),
        2 => (at, key(), json_leaf()).prop_map(|(at, key, value)| Mutation::AddMember { at, key, value }),
        1 => at.prop_map(|at| Mutation::Wrap { at }),
        2 => at.prop_map(|at| Mutation::Retype { at }),
    ]
    .boxed()
}

fn count_nodes(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count_nodes).sum(),
        Value::Object(members) => members.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Applies `mutation` to `value`; the root itself is only replaced, wrapped
/// or retyped (removing it would leave nothing).
pub fn apply(value: &mut Value, mutation: &Mutation) {
    let nodes = count_nodes(value);
    let target = match mutation {
        Mutation::Remove { at }
        | Mutation::Null { at }
        | Mutation::Replace { at, .. }
        | Mutation::AddMember { at, .. }
        | Mutation::Wrap { at }
        | Mutation::Retype { at } => at % nodes,
    };
    let mut index = 0;
    visit(value, target, &mut index, mutation);
}

/// Walks to node `target`; returns true when the node must be removed by
/// its parent.
fn visit(node: &mut Value, target: usize, index: &mut usize, mutation: &Mutation) -> bool {
    if *index == target {
        return change(node, mutation);
    }
    *index += 1;
    match node {
        Value::Array(items) => {
            let mut remove = None;
            for (i, item) in items.iter_mut().enumerate() {
                if visit(item, target, index, mutation) {
                    remove = Some(i);
                    break;
                }
                if *index > target {
                    break;
                }
            }
            if let Some(i) = remove {
                items.remove(i);
            }
        }
        Value::Object(members) => {
            let mut remove = None;
            for (key, member) in members.iter_mut() {
                if visit(member, target, index, mutation) {
                    remove = Some(key.clone());
                    break;
                }
                if *index > target {
                    break;
                }
            }
            if let Some(key) = remove {
                members.remove(&key);
            }
        }
        _ => {}
    }
    false
}

fn change(node: &mut Value, mutation: &Mutation) -> bool {
    match mutation {
        Mutation::Remove { .. } => return true,
        Mutation::Null { .. } => *node = Value::Null,
        Mutation::Replace { with, .. } => *node = with.clone(),
        Mutation::AddMember { key, value, .. } => {
            if let Value::Object(members) = node {
                members.insert(key.clone(), value.clone());
            }
        }
        Mutation::Wrap { .. } => *node = Value::Array(vec![node.take()]),
        Mutation::Retype { .. } => {
            *node = match node.take() {
                Value::Number(n) => Value::String(n.to_string()),
                Value::String(s) => Value::from(s.len()),
                Value::Bool(b) => Value::Bool(!b),
                Value::Null => json!({}),
                Value::Array(items) => Value::from(items.len()),
                Value::Object(members) => Value::Array(members.into_values().collect()),
            }
        }
    }
    false
}

/// The values the schema generator uses where a string names something
/// outside the message: paths (all inside a scratch directory, in both
/// dialects), ids of processes and handles, signals, programs.
#[derive(Debug, Clone, Default)]
pub struct Pool {
    pub paths: Vec<String>,
    pub process_ids: Vec<String>,
    pub handle_ids: Vec<String>,
    pub signals: Vec<String>,
    /// Whole argv vectors; every program harmless.
    pub argvs: Vec<Vec<String>>,
    /// Values for other properties by name, where a schema cannot say what
    /// the receiver accepts (a relative `subpath` without `..`).
    pub values: Vec<(&'static str, Vec<Value>)>,
}

/// Property names whose string values are paths.
const PATH_KEYS: &[&str] = &[
    "path",
    "sourcePath",
    "destinationPath",
    "cwd",
    "sandboxPolicyCwd",
    "workspaceRoots",
    "writable_roots",
    "readable_roots",
    "read",
    "write",
];

/// Generates values valid against `schema` (a node of the document `root`),
/// drawing paths, ids and programs from `pool`. `key` is the property the
/// value sits under. Optional members are present half of the time; a
/// `oneOf` picks a branch (the caller re-validates: branches may overlap).
pub fn from_schema(root: &Value, schema: &Value, key: &str, pool: &Pool) -> BoxedStrategy<Value> {
    let Some(object) = schema.as_object() else {
        return json_value();
    };
    if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
        let target = reference
            .strip_prefix('#')
            .and_then(|pointer| root.pointer(pointer))
            .unwrap_or_else(|| panic!("unresolvable $ref {reference}"));
        return from_schema(root, target, key, pool);
    }
    if let Some((_, values)) = pool.values.iter().find(|(name, _)| *name == key) {
        return prop::sample::select(values.clone()).boxed();
    }
    if let Some(value) = object.get("const") {
        return Just(value.clone()).boxed();
    }
    if let Some(Value::Array(choices)) = object.get("enum") {
        return prop::sample::select(choices.clone()).boxed();
    }
    for keyword in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = object.get(keyword) {
            let strategies: Vec<BoxedStrategy<Value>> = branches
                .iter()
                .map(|branch| from_schema(root, branch, key, pool))
                .collect();
            return Union::new(strategies).boxed();
        }
    }
    let types: Vec<&str> = match object.get("type") {
        Some(Value::String(ty)) => vec![ty.as_str()],
        Some(Value::Array(tys)) => tys.iter().filter_map(Value::as_str).collect(),
        _ => return json_value(),
    };
    let strategies: Vec<BoxedStrategy<Value>> = types
        .iter()
        .map(|ty| typed(root, object, ty, key, pool))
        .collect();
    Union::new(strategies).boxed()
}

fn typed(
    root: &Value,
    object: &Map<String, Value>,
    ty: &str,
    key: &str,
    pool: &Pool,
) -> BoxedStrategy<Value> {
    match ty {
        "null" => Just(Value::Null).boxed(),
        "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
        "integer" | "number" => {
            let min = object
                .get("minimum")
                .and_then(Value::as_i64)
                .unwrap_or(i64::MIN);
            let max = object
                .get("maximum")
                .and_then(Value::as_i64)
                .unwrap_or(i64::MAX);
            prop_oneof![
                3 => (min..=max).prop_map(Value::from),
                2 => (min.max(0)..=max.clamp(0, 100).max(min.max(0))).prop_map(Value::from),
            ]
            .boxed()
        }
        "string" => string_for(key, object, pool),
        "array" => {
            let items = object
                .get("items")
                .map(|items| from_schema(root, items, key, pool))
                .unwrap_or_else(json_value);
            let min = object
                .get("minItems")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0);
            if key == "argv" && !pool.argvs.is_empty() {
                return prop::sample::select(pool.argvs.clone())
                    .prop_map(|argv| json!(argv))
                    .boxed();
            }
            prop::collection::vec(items, min..min + 4)
                .prop_map(Value::Array)
                .boxed()
        }
        "object" => object_strategy(root, object, pool),
        other => panic!("the schema generator does not know the type {other}"),
    }
}

fn string_for(key: &str, object: &Map<String, Value>, pool: &Pool) -> BoxedStrategy<Value> {
    let from = |list: &Vec<String>| {
        prop::sample::select(list.clone())
            .prop_map(Value::String)
            .boxed()
    };
    let min_length = object
        .get("minLength")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    match key {
        _ if PATH_KEYS.contains(&key) && !pool.paths.is_empty() => from(&pool.paths),
        "processId" if !pool.process_ids.is_empty() => from(&pool.process_ids),
        "handleId" if !pool.handle_ids.is_empty() => from(&pool.handle_ids),
        "signal" if !pool.signals.is_empty() => from(&pool.signals),
        _ if object.get("contentEncoding").and_then(Value::as_str) == Some("base64") => {
            prop::collection::vec(any::<u8>(), 0..64)
                .prop_map(|bytes| Value::String(crate::common::client::b64(&bytes)))
                .boxed()
        }
        "arg0" => Just(Value::String("true".into())).boxed(),
        _ => safe_string()
            .prop_filter("shorter than minLength", move |s| {
                s.chars().count() >= min_length
            })
            .prop_map(Value::String)
            .boxed(),
    }
}

fn object_strategy(root: &Value, object: &Map<String, Value>, pool: &Pool) -> BoxedStrategy<Value> {
    let required: BTreeSet<String> = object
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let mut members: Vec<BoxedStrategy<Option<(String, Value)>>> = Vec::new();
    for (name, sub) in object
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let value = from_schema(root, sub, name, pool);
        let name = name.clone();
        members.push(if required.contains(&name) {
            value.prop_map(move |v| Some((name.clone(), v))).boxed()
        } else {
            proptest::option::of(value.prop_map(move |v| (name.clone(), v))).boxed()
        });
    }
    members
        .prop_map(|members| Value::Object(members.into_iter().flatten().collect()))
        .boxed()
}

/// Documents for the schema `root`, and whether each was changed after
/// generation: generated from the schema (drawing from `pool`), then
/// mutated (or not), or arbitrary JSON. Only an unchanged document is
/// known to be valid.
pub fn documents(root: &Value, pool: &Pool) -> BoxedStrategy<(Value, bool)> {
    let valid = from_schema(root, root, "", pool);
    prop_oneof![
        2 => valid.clone().prop_map(|value| (value, false)),
        4 => (valid, prop::collection::vec(mutation(), 1..4)).prop_map(|(mut value, mutations)| {
            for mutation in &mutations {
                apply(&mut value, mutation);
            }
            (value, true)
        }),
        1 => json_value().prop_map(|value| (value, true)),
    ]
    .boxed()
}
