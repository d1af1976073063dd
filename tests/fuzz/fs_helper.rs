//! The fs-helper request stream (`fs_helper`): the one-shot form (one JSON
//! document on stdin, one answer line) and the `--serve` form
//! (newline-delimited requests, one answer per request with its id). Every
//! request gets a well-formed answer whose error code is one of the fs
//! codes, a successful answer matches its method's result schema, and the
//! helper itself only fails (status 1, `fs sandbox helper failed: …`) on a
//! one-shot document that is not a request.
//!
//! Safety: every path in a generated request lies in a scratch directory
//! (see `gen`), and the operations run unsandboxed, as root.

use std::ffi::OsString;
use std::path::Path;

use codexbox::fs::FileStreams;
use codexbox::fs_helper::{self, HelperResponse, ServeResponse};
use codexbox::protocol::fs::method;
use codexbox::server::fs_methods;
use proptest::prelude::*;
use serde_json::{json, Value};

use crate::common::fuzz;
use crate::common::schema::{load_method, validate};
use crate::gen;
use crate::params::pool;

/// The fs codes: invalid request, invalid params, not found, internal.
const FS_CODES: [i64; 4] = [-32600, -32602, -32004, -32603];

/// A scratch tree: files and a directory at the top level only, so copies
/// cannot nest; its paths in both dialects.
fn scratch() -> (tempfile::TempDir, Vec<String>) {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => panic!("tempdir: {err}"),
    };
    let setup = || -> std::io::Result<()> {
        std::fs::write(dir.path().join("a"), "alpha\n")?;
        std::fs::create_dir(dir.path().join("d"))?;
        std::fs::write(dir.path().join("d/inner"), "x")
    };
    if let Err(err) = setup() {
        panic!("scratch: {err}");
    }
    let mut paths = Vec::new();
    for name in ["a", "d", "e", "missing"] {
        let path = dir.path().join(name);
        paths.push(path.to_string_lossy().into_owned());
        paths.push(codexbox::wire_path::to_file_uri(path.as_os_str()));
    }
    (dir, paths)
}

/// An operation (one of the helper's, or junk) and its params: generated
/// from the method's schema, maybe mutated, or arbitrary.
fn request(paths: Vec<String>) -> BoxedStrategy<(String, Value)> {
    let pool = pool(paths);
    let known: Vec<BoxedStrategy<(String, Value)>> = fs_methods::METHODS
        .iter()
        .map(|op| {
            crate::params::params(op, &pool)
                .prop_map(move |(params, _)| ((*op).to_owned(), params))
                .boxed()
        })
        .collect();
    prop_oneof![
        8 => proptest::strategy::Union::new(known),
        1 => (prop::sample::select(vec!["fs/nope", "", "process/start", "fs/readFile "]), gen::json_value())
            .prop_map(|(op, params)| (op.to_owned(), params)),
    ]
    .boxed()
}

fn check_answer(operation: &str, answer: &HelperResponse) -> Result<(), TestCaseError> {
    match answer {
        HelperResponse::Ok(ok) => {
            prop_assert_eq!(&ok.operation, operation);
            if let Err(err) = validate(&load_method(operation, "result"), &ok.response) {
                prop_assert!(false, "{operation} answered {}: {err}", ok.response);
            }
        }
        HelperResponse::Error(error) => {
            prop_assert!(FS_CODES.contains(&error.code), "{operation}: {error:?}");
            prop_assert!(!error.message.is_empty());
        }
    }
    Ok(())
}

#[test]
fn every_helper_request_gets_an_answer_in_process() {
    let (dir, paths) = scratch();
    let streams = FileStreams::new();
    fuzz::run(
        "fs_helper_execute",
        512,
        (request(paths), any::<bool>()),
        |((operation, params), serve)| {
            let answer = fs_helper::execute(&operation, params, serve.then_some(&streams));
            if !serve && method::STREAM_OPERATIONS.contains(&operation.as_str()) {
                prop_assert!(
                    matches!(&answer, HelperResponse::Error(e) if e.code == -32600),
                    "{answer:?}"
                );
            }
            check_answer(&operation, &answer)
        },
    );
    streams.close_all();
    drop(dir);
}

fn helper(args: &[&str], input: &[u8], dir: &Path) -> std::process::Output {
    let argv: Vec<OsString> = std::iter::once("fs-helper")
        .chain(args.iter().copied())
        .map(OsString::from)
        .collect();
    fuzz::run_binary(&argv, input, dir)
}

/// Stdin of the one-shot form: a request document, or its text damaged.
fn one_shot_input(paths: Vec<String>) -> BoxedStrategy<(Option<String>, Vec<u8>)> {
    prop_oneof![
        3 => request(paths).prop_map(|(op, params)| {
            let text = json!({"operation": op, "params": params}).to_string();
            (Some(op), text.into_bytes())
        }),
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(|bytes| (None, bytes)),
        1 => gen::json_value().prop_map(|v| (None, v.to_string().into_bytes())),
    ]
    .boxed()
}

#[test]
fn the_one_shot_helper_answers_one_line_or_fails_with_status_1() {
    let (dir, paths) = scratch();
    fuzz::run(
        "fs_helper_one_shot",
        32,
        one_shot_input(paths),
        |(operation, input)| {
            let output = helper(&[], &input, dir.path());
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            match output.status.code() {
                Some(0) => {
                    prop_assert_eq!(stdout.lines().count(), 1, "{}", stdout);
                    let answer: HelperResponse = serde_json::from_str(stdout.trim_end())
                        .map_err(|e| TestCaseError::fail(format!("{stdout}: {e}")))?;
                    if let Some(operation) = operation {
                        check_answer(&operation, &answer)?;
                    }
                }
                Some(1) => {
                    prop_assert!(operation.is_none(), "a request failed the helper: {stderr}");
                    prop_assert!(stderr.starts_with("fs sandbox helper failed: "), "{stderr}");
                    prop_assert!(stdout.is_empty());
                }
                other => prop_assert!(false, "status {other:?}: {stderr}"),
            }
            Ok(())
        },
    );
}

/// One `--serve` line: a request with an id, or junk.
fn serve_line(paths: Vec<String>) -> BoxedStrategy<(Option<(Value, String)>, String)> {
    let id = prop_oneof![
        gen::edge_integer(),
        gen::safe_string().prop_map(Value::String),
        Just(Value::Null)
    ];
    prop_oneof![
        4 => (id, request(paths)).prop_map(|(id, (op, params))| {
            let line = json!({"id": id, "operation": op, "params": params}).to_string();
            (Some((id, op)), line)
        }),
        1 => "[^\\n]{0,40}".prop_map(|junk| (None, junk)),
    ]
    .boxed()
}

#[test]
fn the_serving_helper_answers_every_line_with_its_id() {
    let (dir, paths) = scratch();
    let strategy = prop::collection::vec(serve_line(paths), 1..12);
    fuzz::run("fs_helper_serve", 32, strategy, |lines| {
        let mut input = String::new();
        for (_, line) in &lines {
            input.push_str(line);
            input.push('\n');
        }
        let output = helper(&["--serve"], input.as_bytes(), dir.path());
        let stdout = String::from_utf8_lossy(&output.stdout);
        prop_assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let expected: Vec<&(Option<(Value, String)>, String)> = lines
            .iter()
            .filter(|(_, line)| !line.bytes().all(|b| b.is_ascii_whitespace()))
            .collect();
        let answers: Vec<&str> = stdout.lines().collect();
        prop_assert_eq!(answers.len(), expected.len(), "{}", stdout);
        for ((request, _), answer) in expected.iter().zip(answers) {
            let answer: ServeResponse = serde_json::from_str(answer)
                .map_err(|e| TestCaseError::fail(format!("{answer}: {e}")))?;
            if let Some((id, operation)) = request {
                prop_assert_eq!(&answer.id, id);
                check_answer(operation, &answer.response)?;
            } else {
                prop_assert!(
                    matches!(answer.response, HelperResponse::Error(ref e) if e.code == -32600)
                );
            }
        }
        Ok(())
    });
}

/// Unexpected arguments are a usage error.
#[test]
fn the_helper_refuses_unknown_arguments_with_status_2() {
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("tempdir: {err}"));
    for args in [["--nope"], ["serve"]] {
        let output = helper(&args, b"", dir.path());
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
}
