//! Checks the traffic of every test server against the shipped schemas.
//!
//! The servers the tests start log each message with the server's wire
//! trace (`RUST_LOG=codexbox::wire=trace`, JSON log lines on stderr). From
//! those lines [`mismatches`] checks, per connection: every response,
//! error and notification the server sent against its envelope and its
//! method's result or notification schema, and the params of every
//! request the server answered with a result against the method's params
//! schema (what the server accepts must be what the schemas describe).
//! Messages too large to be traced are skipped.
#![allow(dead_code)]

use std::collections::HashMap;

use serde_json::Value;

use super::schema::{is_serde_leniency, load, validate};

/// The environment and arguments that switch a server's wire trace on.
pub const TRACE_ENV: (&str, &str) = ("RUST_LOG", "warn,codexbox::wire=trace");
pub const TRACE_ARGS: [&str; 2] = ["--log-format", "json"];

/// One traced message.
struct Traced {
    connection: u64,
    inbound: bool,
    message: Value,
}

fn parse_line(line: &str) -> Option<Traced> {
    let record: Value = serde_json::from_str(line).ok()?;
    if record.get("target")?.as_str()? != "codexbox::wire" {
        return None;
    }
    let fields = record.get("fields")?;
    let message = serde_json::from_str(fields.get("frame")?.as_str()?).ok()?;
    Some(Traced {
        connection: fields.get("connection")?.as_u64()?,
        inbound: fields.get("direction")?.as_str()? == "in",
        message,
    })
}

/// A schema file, loaded once per check.
struct Schemas(HashMap<String, Option<Value>>);

impl Schemas {
    fn get(&mut self, name: &str) -> Option<&Value> {
        if !self.0.contains_key(name) {
            let path = super::schema::dir().join(name);
            let schema = path.exists().then(|| load(name));
            self.0.insert(name.to_owned(), schema);
        }
        self.0.get(name).and_then(Option::as_ref)
    }

    fn check(&mut self, name: &str, value: &Value, what: &str, out: &mut Vec<String>) {
        if let Some(schema) = self.get(name) {
            if let Err(err) = validate(schema, value) {
                if !is_serde_leniency(&err) {
                    out.push(format!("{what} does not match {name}: {err}\n  {value}"));
                }
            }
        }
    }
}

fn file(method: &str, part: &str) -> String {
    format!("{}.{part}.json", method.replace('/', "."))
}

/// Every schema mismatch in the wire trace of `stderr`.
pub fn mismatches(stderr: &str) -> Vec<String> {
    let mut schemas = Schemas(HashMap::new());
    let mut pending: HashMap<(u64, String), (String, Option<Value>)> = HashMap::new();
    let mut out = Vec::new();
    for traced in stderr.lines().filter_map(parse_line) {
        let message = &traced.message;
        let id = message.get("id").map(Value::to_string);
        let method = message.get("method").and_then(Value::as_str);
        if traced.inbound {
            if let (Some(id), Some(method)) = (id, method) {
                let params = message.get("params").cloned();
                pending.insert((traced.connection, id), (method.to_owned(), params));
            }
            continue;
        }
        if let Some(method) = method {
            schemas.check(
                "envelope.notification.json",
                message,
                "a notification",
                &mut out,
            );
            let params = message.get("params").cloned().unwrap_or(Value::Null);
            schemas.check(&file(method, "notification"), &params, method, &mut out);
            continue;
        }
        if message.get("error").is_some() {
            schemas.check("envelope.error.json", message, "an error", &mut out);
            if let Some(id) = id {
                pending.remove(&(traced.connection, id));
            }
            continue;
        }
        schemas.check("envelope.response.json", message, "a response", &mut out);
        let Some((method, params)) = id.and_then(|id| pending.remove(&(traced.connection, id)))
        else {
            continue;
        };
        let result = message.get("result").cloned().unwrap_or(Value::Null);
        schemas.check(
            &file(&method, "result"),
            &result,
            &format!("the result of {method}"),
            &mut out,
        );
        let params = params.unwrap_or(Value::Null);
        schemas.check(
            &file(&method, "params"),
            &params,
            &format!("accepted params of {method}"),
            &mut out,
        );
    }
    out
}
