//! JSON Schemas (draft 2020-12) of every wire message (docs/library.md), generated
//! from the types the server decodes and answers with (the method table,
//! [`super::method`]) so they cannot drift: [`files`] renders the
//! contents of `resources/schema/` (one file per method's params, result or
//! notification, per envelope shape and per sandbox type, plus `index.json`).
//! Params are described as the server accepts them, results and
//! notifications as it sends them. Also owns the schema-only envelope types
//! and the `JsonSchema` impls of the types whose serde is written by hand.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::generate::SchemaSettings;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::envelope::RequestId;
use super::method::{self, Method};
use super::{http, network, process as proc, sandbox};
use crate::policy;
use crate::wire_path::WirePath;

/// Where the schema files live, relative to the crate root.
pub const SCHEMA_DIR: &str = "resources/schema";

/// A request: `{"id","method","params"?}`. `"jsonrpc"` is ignored on input.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RequestMessage {
    pub id: RequestId,
    pub method: String,
    /// Absent, `null` and `{}` are equivalent for methods without params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

/// A notification: `{"method","params"?}`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct NotificationMessage {
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

/// A successful response: `{"id","result"}`, `id` echoed with its JSON type.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ResponseMessage {
    pub id: RequestId,
    pub result: Value,
}

/// The `error` member of an error response.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorObject {
    /// -32600 invalid request, -32601 unknown method, -32602 invalid params,
    /// -32603 internal error, -32004 not found, -32010 session already attached.
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// An error response: `{"error":{…},"id"}`; `id` is -1 when the message
/// could not be parsed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorMessage {
    pub error: ErrorObject,
    pub id: RequestId,
}

impl JsonSchema for super::NoParams {
    fn schema_name() -> Cow<'static, str> {
        "NoParams".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "No params: absent, null or {} (unknown keys are ignored).",
            "type": ["object", "null"]
        })
    }
}

/// Params the receiver ignores whatever they are (the `initialized`
/// notification).
#[derive(Debug, Clone, Copy)]
pub struct IgnoredParams;

impl JsonSchema for IgnoredParams {
    fn schema_name() -> Cow<'static, str> {
        "IgnoredParams".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Ignored: any value, or none."
        })
    }
}

impl JsonSchema for WirePath {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "WirePath".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An absolute native path (/home/u/x) or a file: URI (file:///home/u/x); results answer in the request's dialect.",
            "type": "string"
        })
    }
}

impl JsonSchema for RequestId {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "RequestId".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A string or a 64-bit integer, echoed with the same JSON type.",
            "type": ["string", "integer"]
        })
    }
}

impl JsonSchema for policy::FileSystemSpecialPath {
    fn schema_name() -> Cow<'static, str> {
        "FileSystemSpecialPath".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A symbolic location: kind root, minimal, project_roots (alias current_working_directory, with an optional relative subpath), tmpdir, slash_tmp or unknown (path = the unknown token). Unknown kinds are kept and ignored.",
            "type": "object",
            "properties": {
                "kind": {
                    "type": "string",
                    "examples": ["root", "minimal", "project_roots", "current_working_directory", "tmpdir", "slash_tmp"]
                },
                "path": { "type": ["string", "null"] },
                "subpath": { "type": ["string", "null"] }
            },
            "required": ["kind"]
        })
    }
}

fn settings() -> SchemaSettings {
    SchemaSettings::draft2020_12()
}

/// The schema of `T` as the server reads it.
fn inbound<T: JsonSchema>() -> Value {
    let mut schema = settings()
        .for_deserialize()
        .into_generator()
        .root_schema_for::<T>()
        .to_value();
    drop_mistyped_defaults(&mut schema);
    add_32_bit_bounds(&mut schema);
    add_input_aliases(&mut schema);
    schema
}

/// Input spellings serde accepts through `#[serde(alias)]`, which schemars
/// does not describe: (definition, canonical value, alias).
pub const INPUT_ALIASES: [(&str, &str, &str); 1] = [("FileSystemAccessMode", "deny", "none")];

/// Adds [`INPUT_ALIASES`] to the `$defs` of an inbound schema: next to the
/// canonical value of a string enum, or of a tag `const`.
fn add_input_aliases(schema: &mut Value) {
    for (name, canonical, alias) in INPUT_ALIASES {
        if let Some(def) = schema.pointer_mut(&format!("/$defs/{name}")) {
            add_alias(def, canonical, alias);
        }
    }
}

fn add_alias(schema: &mut Value, canonical: &str, alias: &str) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::Array(choices)) = object.get_mut("enum") {
                if choices.iter().any(|c| c == canonical) {
                    choices.push(alias.into());
                }
            }
            if object.get("const").is_some_and(|c| c == canonical) {
                object.remove("const");
                object.insert("enum".into(), json!([canonical, alias]));
            }
            object
                .values_mut()
                .for_each(|sub| add_alias(sub, canonical, alias));
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|sub| add_alias(sub, canonical, alias)),
        _ => {}
    }
}

/// The schema of `T` as the server writes it.
fn outbound<T: JsonSchema>() -> Value {
    let mut schema = settings()
        .for_serialize()
        .into_generator()
        .root_schema_for::<T>()
        .to_value();
    drop_mistyped_defaults(&mut schema);
    add_32_bit_bounds(&mut schema);
    schema
}

/// Removes a `default` that contradicts its schema's `type`: a field with
/// hand-written serde (a base64 chunk held as bytes) gets the default of its
/// Rust type, not of its wire type.
/// Adds the range of 32-bit integers (`format` `uint32`/`int32`), which the
/// generator leaves out while it writes it for 8- and 16-bit ones, so a
/// value the server refuses as out of range is outside the schema too.
fn add_32_bit_bounds(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            let bounds = match object.get("format").and_then(Value::as_str) {
                Some("uint32") => Some((0, i64::from(u32::MAX))),
                Some("int32") => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
                _ => None,
            };
            if let Some((min, max)) = bounds {
                object.entry("minimum").or_insert(min.into());
                object.entry("maximum").or_insert(max.into());
            }
            object.values_mut().for_each(add_32_bit_bounds);
        }
        Value::Array(items) => items.iter_mut().for_each(add_32_bit_bounds),
        _ => {}
    }
}

fn drop_mistyped_defaults(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            let types: Vec<&str> = match object.get("type") {
                Some(Value::String(ty)) => vec![ty.as_str()],
                Some(Value::Array(tys)) => tys.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let mistyped = match object.get("default") {
                Some(default) if !types.is_empty() => !types.iter().any(|ty| {
                    matches!(
                        (*ty, default),
                        ("string", Value::String(_))
                            | ("boolean", Value::Bool(_))
                            | ("integer" | "number", Value::Number(_))
                            | ("array", Value::Array(_))
                            | ("object", Value::Object(_))
                            | ("null", Value::Null)
                    )
                }),
                _ => false,
            };
            if mistyped {
                object.remove("default");
            }
            object.values_mut().for_each(drop_mistyped_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_mistyped_defaults),
        _ => {}
    }
}

/// The file name of `method`'s `part` (`params`, `result`, `notification`).
pub fn file_name(method: &str, part: &str) -> String {
    format!("{}.{part}.json", method.replace('/', "."))
}

/// Every schema file by name, `index.json` included.
pub fn files() -> BTreeMap<String, Value> {
    macro_rules! request_schemas {
        ($($ty:ident),*) => {
            vec![$((
                <method::$ty as Method>::NAME,
                inbound::<<method::$ty as Method>::Params>(),
                outbound::<<method::$ty as Method>::Result>(),
            )),*]
        };
    }
    let requests: Vec<(&str, Value, Value)> = method::for_each_method!(request_schemas);
    let notifications: Vec<(&str, Value)> = vec![
        (super::NOTIFY_INITIALIZED, inbound::<IgnoredParams>()),
        (proc::NOTIFY_OUTPUT, outbound::<proc::OutputNotification>()),
        (proc::NOTIFY_EXITED, outbound::<proc::ExitedNotification>()),
        (proc::NOTIFY_CLOSED, outbound::<proc::ClosedNotification>()),
        (
            network::NOTIFY_NETWORK_DENIED,
            outbound::<network::NetworkDeniedNotification>(),
        ),
        (
            http::NOTIFY_BODY_DELTA,
            outbound::<http::BodyDeltaNotification>(),
        ),
    ];
    let envelope: Vec<(&str, Value)> = vec![
        ("request", inbound::<RequestMessage>()),
        ("notification", inbound::<NotificationMessage>()),
        ("response", outbound::<ResponseMessage>()),
        ("error", outbound::<ErrorMessage>()),
    ];
    let types: Vec<(&str, Value)> = vec![
        (
            "FileSystemSandboxContext",
            inbound::<sandbox::FileSystemSandboxContext>(),
        ),
        ("PermissionProfile", inbound::<policy::PermissionProfile>()),
        ("SandboxPolicy", inbound::<policy::SandboxPolicy>()),
        (
            "FileSystemSandboxPolicy",
            inbound::<policy::FileSystemSandboxPolicy>(),
        ),
    ];

    let mut out = BTreeMap::new();
    let mut index_requests = Map::new();
    for (method, params, result) in requests {
        let (p, r) = (file_name(method, "params"), file_name(method, "result"));
        index_requests.insert(method.into(), json!({"params": p, "result": r}));
        out.insert(p, params);
        out.insert(r, result);
    }
    let mut index_notifications = Map::new();
    for (method, params) in notifications {
        let name = file_name(method, "notification");
        index_notifications.insert(method.into(), json!({ "params": name }));
        out.insert(name, params);
    }
    let mut index_envelope = Map::new();
    for (kind, schema) in envelope {
        let name = format!("envelope.{kind}.json");
        index_envelope.insert(kind.into(), Value::String(name.clone()));
        out.insert(name, schema);
    }
    let mut index_types = Map::new();
    for (kind, schema) in types {
        let name = format!("{kind}.json");
        index_types.insert(kind.into(), Value::String(name.clone()));
        out.insert(name, schema);
    }
    for (name, schema) in out.iter_mut() {
        if let Value::Object(object) = schema {
            object.insert("$id".into(), format!("codexbox/{name}").into());
        }
    }
    out.insert(
        "index.json".into(),
        json!({
            "description": "JSON Schemas (draft 2020-12) of the codexbox exec-server wire messages, generated from the Rust types. Params are described as the server accepts them; results and notifications as it sends them.",
            "envelope": index_envelope,
            "requests": index_requests,
            "notifications": index_notifications,
            "types": index_types,
        }),
    );
    out
}

/// The text of a schema file: pretty JSON and a final newline.
pub fn to_text(schema: &Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_notification_matches_the_hand_written_encoder() {
        let mut text = String::new();
        proc::encode_output_notification(&mut text, "p1", 2, proc::StreamKind::Pty, b"x");
        let message: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(message["method"], proc::NOTIFY_OUTPUT);
        let params: proc::OutputNotification =
            serde_json::from_value(message["params"].clone()).unwrap();
        assert_eq!((params.seq, params.chunk.as_str()), (2, "eA=="));
        // No key of the encoder is missing from the type.
        assert_eq!(serde_json::to_value(&params).unwrap(), message["params"]);
    }

    #[test]
    fn input_aliases_are_accepted_by_the_types_and_the_schemas() {
        let deny: policy::FileSystemAccessMode = serde_json::from_str(r#""none""#).unwrap();
        assert_eq!(deny, policy::FileSystemAccessMode::Deny);
        let cwd: policy::FileSystemSpecialPath =
            serde_json::from_str(r#"{"kind":"current_working_directory"}"#).unwrap();
        assert_eq!(
            cwd,
            policy::FileSystemSpecialPath::ProjectRoots { subpath: None }
        );
        let files = files();
        let context = serde_json::to_string(&files["FileSystemSandboxContext.json"]).unwrap();
        assert!(context.contains(r#""current_working_directory""#));
        assert!(context.contains(r#"["deny","none"]"#));
    }

    #[test]
    fn every_method_has_params_and_a_result() {
        let files = files();
        for method in ["process/start", "fs/walk", "environment/info", "initialize"] {
            assert!(files.contains_key(&file_name(method, "params")), "{method}");
            assert!(files.contains_key(&file_name(method, "result")), "{method}");
        }
        assert!(files.contains_key("process.output.notification.json"));
    }
}
