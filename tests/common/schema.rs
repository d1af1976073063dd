//! Test utilities for the shipped JSON Schemas (`tests/schema.rs`): loading
//! `resources/schema/*.json` and a small validator for the subset of JSON
//! Schema the generated files use (type, properties, required,
//! additionalProperties, items, enum, const, oneOf/anyOf/allOf/not, $ref into
//! the same document, minimum/maximum, minItems). A keyword outside that subset is a
//! test failure, so the validator never silently accepts what it cannot check.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;

/// Keywords that only annotate.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "contentEncoding",
    "$defs",
    "title",
    "description",
    "default",
    "format",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// `resources/schema/` of this checkout.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("resources/schema")
}

/// The shipped schema file `name`, parsed.
pub fn load(name: &str) -> Value {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("{} is not JSON: {err}", path.display()))
}

/// The shipped file for `method`'s `part` (`params`, `result`, `notification`).
pub fn load_method(method: &str, part: &str) -> Value {
    load(&format!("{}.{part}.json", method.replace('/', ".")))
}

/// Validates `instance` against the root schema `root`; the error names the
/// JSON pointer of the first mismatch.
pub fn validate(root: &Value, instance: &Value) -> Result<(), String> {
    check(root, root, instance, "")
}

/// Panics with the schema's title and the mismatch unless `instance` is valid.
pub fn assert_valid(root: &Value, instance: &Value) {
    if let Err(err) = validate(root, instance) {
        panic!(
            "{instance} does not match schema {}: {err}",
            root.get("title").unwrap_or(&Value::Null)
        );
    }
}

fn check(root: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let object = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(format!("{at}: nothing is allowed here")),
        Value::Object(object) => object,
        other => panic!("not a schema: {other}"),
    };
    for (keyword, arg) in object {
        match keyword.as_str() {
            "$ref" => {
                let target = arg
                    .as_str()
                    .and_then(|r| r.strip_prefix('#'))
                    .and_then(|pointer| root.pointer(pointer))
                    .unwrap_or_else(|| panic!("unresolvable $ref {arg}"));
                check(root, target, value, at)?;
            }
            "type" => {
                let types: Vec<&str> = match arg {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                    other => panic!("bad type {other}"),
                };
                if !types.iter().any(|t| has_type(value, t)) {
                    return Err(format!("{at}: {value} is not of type {arg}"));
                }
            }
            "properties" => {
                if let (Some(props), Some(fields)) = (arg.as_object(), value.as_object()) {
                    for (key, sub) in props {
                        if let Some(field) = fields.get(key) {
                            check(root, sub, field, &format!("{at}/{key}"))?;
                        }
                    }
                }
            }
            "required" => {
                if let Some(fields) = value.as_object() {
                    for key in arg
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                    {
                        if !fields.contains_key(key) {
                            return Err(format!("{at}: missing required `{key}`"));
                        }
                    }
                }
            }
            "additionalProperties" => {
                if let Some(fields) = value.as_object() {
                    let known = object.get("properties").and_then(Value::as_object);
                    for (key, field) in fields {
                        if !known.is_some_and(|k| k.contains_key(key)) {
                            check(root, arg, field, &format!("{at}/{key}"))?;
                        }
                    }
                }
            }
            "items" => {
                for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                    check(root, arg, item, &format!("{at}/{i}"))?;
                }
            }
            "enum" => {
                if !arg
                    .as_array()
                    .is_some_and(|choices| choices.contains(value))
                {
                    return Err(format!("{at}: {value} is not one of {arg}"));
                }
            }
            "const" => {
                if arg != value {
                    return Err(format!("{at}: {value} is not {arg}"));
                }
            }
            "oneOf" | "anyOf" => {
                let branches = arg.as_array().map(Vec::as_slice).unwrap_or_default();
                let errors: Vec<String> = branches
                    .iter()
                    .filter_map(|b| check(root, b, value, at).err())
                    .collect();
                let matched = branches.len() - errors.len();
                let ok = if keyword == "oneOf" {
                    matched == 1
                } else {
                    matched >= 1
                };
                if !ok {
                    return Err(format!(
                        "{at}: {matched} of the {keyword} branches match ({})",
                        errors.join("; ")
                    ));
                }
            }
            "not" => {
                if check(root, arg, value, at).is_ok() {
                    return Err(format!("{at}: {value} matches the `not` schema {arg}"));
                }
            }
            "allOf" => {
                for branch in arg.as_array().into_iter().flatten() {
                    check(root, branch, value, at)?;
                }
            }
            "minItems" => {
                let min = arg.as_u64().unwrap_or_else(|| panic!("bad minItems {arg}"));
                if value
                    .as_array()
                    .is_some_and(|items| (items.len() as u64) < min)
                {
                    return Err(format!("{at}: fewer than {min} items"));
                }
            }
            "minimum" | "maximum" => {
                if let (Some(bound), Some(n)) = (arg.as_f64(), value.as_f64()) {
                    let ok = if keyword == "minimum" {
                        n >= bound
                    } else {
                        n <= bound
                    };
                    if !ok {
                        return Err(format!("{at}: {value} is outside {keyword} {arg}"));
                    }
                }
            }
            k if ANNOTATIONS.contains(&k) => {}
            k => panic!("the test validator does not support the keyword `{k}`"),
        }
    }
    Ok(())
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        other => panic!("unknown type {other}"),
    }
}

/// Panics unless every keyword anywhere in `schema` is one the validator
/// checks or an annotation.
pub fn assert_supported(schema: &Value) {
    let Value::Object(object) = schema else {
        assert!(schema.is_boolean(), "not a schema: {schema}");
        return;
    };
    for (keyword, arg) in object {
        match keyword.as_str() {
            "properties" | "$defs" => arg
                .as_object()
                .into_iter()
                .flatten()
                .for_each(|(_, sub)| assert_supported(sub)),
            "items" | "additionalProperties" | "not" => assert_supported(arg),
            "oneOf" | "anyOf" | "allOf" => arg
                .as_array()
                .into_iter()
                .flatten()
                .for_each(assert_supported),
            "$ref" | "type" | "required" | "enum" | "const" | "minimum" | "maximum"
            | "minItems" => {}
            k if ANNOTATIONS.contains(&k) => {}
            k => panic!("the test validator does not support the keyword `{k}`"),
        }
    }
}

/// Whether a schema mismatch is one of the two leniencies of serde's
/// derived decoders, which the schemas do not describe and the server
/// does not rely on: a struct's fields given by position (`[1, 2]` for
/// `{"rows":1,"cols":2}`), and the tag of an internally tagged enum given
/// as the variant's index (`"type": 1`). The server refuses params that
/// are not an object; nested forms are a known leniency (README, Protocol
/// in short).
pub fn is_serde_leniency(err: &str) -> bool {
    let positional =
        err.contains("] is not of type \"object\"") || err.contains("] is not of type [\"object\"");
    let index_tag = err
        .split("/type: ")
        .skip(1)
        .any(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    positional || index_tag
}
