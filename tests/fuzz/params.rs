//! Every method's params, decoded in-process the way the router decodes
//! them: no panic; a refusal is ‑32602 (‑32600 for a bad wire path in an
//! fs request); accepted params match the method's shipped params schema,
//! and params generated from that schema are accepted. The same through a
//! real server is in `server.rs`.

use codexbox::fs::ops;
use codexbox::protocol::capability::DiscoverParams;
use codexbox::protocol::envelope::decode_params;
use codexbox::protocol::fs::{method, CloseParams, OpenParams, ReadBlockParams, WriteBlockParams};
use codexbox::protocol::http::HttpRequestParams;
use codexbox::protocol::process::{
    ReadParams, ResizeParams, SignalParams, StartParams, TerminateParams, WriteParams,
};
use codexbox::protocol::{InitializeParams, NoParams, RpcError};
use codexbox::server::fs_methods;
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::common::fuzz;
use crate::common::schema::{load_method, validate};
use crate::gen::{self, Pool};

/// ‑32600, ‑32602.
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// Every request method, from the server's method table.
pub fn methods() -> Vec<&'static str> {
    codexbox::protocol::method::REQUEST_METHODS.to_vec()
}

/// Values the generator draws where a schema cannot say what is accepted.
/// Nothing here acts on them.
pub fn pool(paths: Vec<String>) -> Pool {
    Pool {
        paths,
        process_ids: ["p1", "p2", "nope", ""].map(str::to_owned).to_vec(),
        handle_ids: ["h1", "h2", "unknown"].map(str::to_owned).to_vec(),
        signals: [
            "interrupt",
            "terminate",
            "kill",
            "hangup",
            "quit",
            "SIGUSR1",
            "usr2",
            "TERM",
        ]
        .map(str::to_owned)
        .to_vec(),
        argvs: vec![
            vec!["true".into()],
            vec!["sh".into(), "-c".into(), "exit 3".into()],
            vec!["/nonexistent/fuzz-program".into()],
        ],
        values: vec![
            ("subpath", [".git", "a/b", "./x"].map(Value::from).to_vec()),
            // Empty means "no id" to the server, which refuses it.
            ("writeId", ["w1", "w2"].map(Value::from).to_vec()),
            // http/request: only a closed port on loopback is ever dialled.
            (
                "url",
                [
                    "http://127.0.0.1:1/x",
                    "https://127.0.0.1:1/",
                    "http://[::1]:1/",
                ]
                .map(Value::from)
                .to_vec(),
            ),
            ("method", ["GET", "POST", "HEAD"].map(Value::from).to_vec()),
            ("name", ["Accept", "X-Fuzz"].map(Value::from).to_vec()),
            ("value", ["*/*", "1"].map(Value::from).to_vec()),
            ("requestId", ["r1", "r2"].map(Value::from).to_vec()),
            ("timeoutMs", [Value::Null, Value::from(1000)].to_vec()),
        ],
    }
}

/// Params for `method`, and whether they were changed after generation
/// (see [`gen::documents`]).
pub fn params(method: &str, pool: &Pool) -> BoxedStrategy<(Value, bool)> {
    gen::documents(&load_method(method, "params"), pool)
}

fn process<T: DeserializeOwned>(params: &Value) -> Result<T, RpcError> {
    decode_params::<T>(Some(params.clone()))
}

fn fs<T: DeserializeOwned>(params: &Value) -> Result<(), RpcError> {
    ops::decode_params::<T>(params.clone())
        .map(drop)
        .map_err(|err| RpcError::new(err.code(), err.to_string()))
}

/// Decodes `params` of `method` as the router and its handlers do, up to
/// the point where the request would act.
pub fn decode(method: &str, params: &Value) -> Result<(), RpcError> {
    match method {
        "initialize" => process::<InitializeParams>(params).map(drop),
        "environment/info" | "environment/status" | "session/list" => {
            process::<NoParams>(params).map(drop)
        }
        "process/start" => {
            let start = process::<StartParams>(params)?;
            if let Some(launch) = &start.network_proxy {
                codexbox::server::network_proxy::proxy_config(launch)?;
            }
            if let Some(sandbox) = start
                .sandbox
                .filter(|s| !s.is_null() && !start.argv.is_empty())
            {
                codexbox::server::process_sandbox::resolve(&sandbox)?;
            }
            Ok(())
        }
        "process/read" => process::<ReadParams>(params).map(drop),
        "process/write" => process::<WriteParams>(params).map(drop),
        "process/signal" => process::<SignalParams>(params).map(drop),
        "process/terminate" => process::<TerminateParams>(params).map(drop),
        "process/resize" => process::<ResizeParams>(params).map(drop),
        "capabilityRoots/discoverV1" => {
            let discover = process::<DiscoverParams>(params)?;
            codexbox::fs::discovery::discover(discover)
                .map(drop)
                .map_err(|err| RpcError::invalid_request(err.to_string()))
        }
        "http/request" => {
            let request = process::<HttpRequestParams>(params)?;
            codexbox::server::http_request::prepare(&request).map(drop)
        }
        method::OPEN => {
            let checked = ops::check_paths(params.clone())
                .map_err(|err| RpcError::new(err.code(), err.to_string()))?;
            fs_methods::resolve_sandbox(&checked)?;
            OpenParams::deserialize(&checked)
                .map(drop)
                .map_err(|err| RpcError::invalid_params(err.to_string()))
        }
        method::READ_BLOCK => fs::<ReadBlockParams>(params),
        method::WRITE_BLOCK => fs::<WriteBlockParams>(params),
        method::CLOSE => fs::<CloseParams>(params),
        one_shot => {
            let checked = ops::check_paths(params.clone())
                .map_err(|err| RpcError::new(err.code(), err.to_string()))?;
            fs_methods::resolve_sandbox(&checked)?;
            ops::validate(one_shot, &checked)
                .map_err(|err| RpcError::new(err.code(), err.to_string()))
        }
    }
}

/// The paths of the in-process pool: valid in one dialect or the other.
fn paths() -> Vec<String> {
    [
        "/tmp/fuzz",
        "/srv/a b",
        "file:///srv/a%20b",
        "file://localhost/tmp",
        "/C:/x",
    ]
    .map(str::to_owned)
    .to_vec()
}

#[test]
fn every_methods_params_decode_or_refuse_with_the_right_code_and_match_the_schema() {
    let pool = pool(paths());
    let methods = methods();
    let strategies: Vec<BoxedStrategy<(usize, (Value, bool))>> = methods
        .iter()
        .enumerate()
        .map(|(i, method)| params(method, &pool).prop_map(move |p| (i, p)).boxed())
        .collect();
    let schemas: Vec<Value> = methods.iter().map(|m| load_method(m, "params")).collect();
    fuzz::run(
        "params_decode",
        1536,
        proptest::strategy::Union::new(strategies),
        |(index, (params, mutated))| {
            let method = methods[index];
            let valid = validate(&schemas[index], &params);
            match decode(method, &params) {
                Ok(()) => {
                    if let Err(err) = valid {
                        prop_assert!(
                            crate::common::schema::is_serde_leniency(&err),
                            "{method} accepted {params} but its schema refuses it: {err}"
                        );
                    }
                }
                Err(err) => {
                    prop_assert!(
                        mutated || valid.is_err(),
                        "{method} refused schema-valid {params}: {err}"
                    );
                    let fs = method.starts_with("fs/");
                    prop_assert!(
                        err.code == INVALID_PARAMS || (fs && err.code == INVALID_REQUEST),
                        "{method} {params}: code {} ({})",
                        err.code,
                        err.message
                    );
                }
            }
            Ok(())
        },
    );
}

/// Params by position are refused for every method, as the schemas say.
#[test]
fn params_given_as_an_array_are_refused_as_invalid_params() {
    for method in methods() {
        let err = decode(method, &serde_json::json!(["p1", "/tmp"])).unwrap_err();
        assert_eq!(err.code, INVALID_PARAMS, "{method}: {}", err.message);
    }
}

/// `environment/*` take no params: anything but an object or null is refused.
#[test]
fn environment_params_that_are_not_an_object_are_refused() {
    for params in [
        serde_json::json!(5),
        serde_json::json!("x"),
        serde_json::json!(true),
    ] {
        assert!(decode("environment/info", &params).is_err(), "{params}");
    }
    for params in [
        serde_json::json!(null),
        serde_json::json!({}),
        serde_json::json!({"a": 1}),
    ] {
        assert!(decode("environment/status", &params).is_ok(), "{params}");
    }
}
