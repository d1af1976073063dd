//! The `fs-helper` mode (docs/filesystem.md): performs the
//! filesystem operations of [`crate::fs`] for the server, usually inside the
//! Linux sandbox, over stdin/stdout. It is a thin loop: every operation is
//! the same function the server calls on its direct path.
//!
//! - Compatible form: stdin is one JSON document `{"operation","params"}`;
//!   stdout one line `{"status":"ok","payload":{"operation","response"}}` or
//!   `{"status":"error","payload":{"code","message"}}`; exit 0 either way.
//!   A failure of the helper itself prints `fs sandbox helper failed: {err}`
//!   on stderr and exits 1.
//! - Persistent form (`--serve`): newline-delimited `{"id","operation",
//!   "params"}` requests, one answer line per request carrying the same `id`,
//!   until stdin closes. This form also serves the streaming operations
//!   (`fs/open`, `fs/readBlock`, `fs/writeBlock`, `fs/close`): the handles
//!   it opens stay open between requests, in its sandbox.
//!
//! The helper is single-threaded; apart from open handles it keeps no state
//! between requests.

use std::ffi::OsString;
use std::io::{self, BufRead, Read, Write};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fs::error::INVALID_REQUEST;
use crate::fs::{FileStreams, FsError};
use crate::protocol::fs::method;

/// Why the helper itself failed.
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    #[error("failed to read the request: {0}")]
    ReadRequest(io::Error),
    #[error("failed to decode the request: {0}")]
    DecodeRequest(serde_json::Error),
    #[error("failed to write the response: {0}")]
    WriteResponse(io::Error),
    #[error("failed to encode the response: {0}")]
    EncodeResponse(serde_json::Error),
}

/// A one-request-form request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelperRequest {
    pub operation: String,
    #[serde(default)]
    pub params: Value,
}

/// A `--serve` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeRequest {
    pub id: Value,
    pub operation: String,
    #[serde(default)]
    pub params: Value,
}

/// The payload of a successful answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OkPayload {
    pub operation: String,
    pub response: Value,
}

/// The payload of a failed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorPayload {
    pub code: i64,
    pub message: String,
}

/// An answer, tagged by `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "payload", rename_all = "lowercase")]
pub enum HelperResponse {
    Ok(OkPayload),
    Error(ErrorPayload),
}

/// A `--serve` answer: the request's id plus the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeResponse {
    pub id: Value,
    #[serde(flatten)]
    pub response: HelperResponse,
}

/// Runs one operation and shapes the answer. `streams` is the handle table
/// of the persistent form; without it the streaming operations are refused
/// (a handle would not outlive the one-request process).
pub fn execute(operation: &str, params: Value, streams: Option<&FileStreams>) -> HelperResponse {
    let result = if method::STREAM_OPERATIONS.contains(&operation) {
        match streams {
            Some(streams) => crate::fs::stream::run(streams, operation, params),
            None => Err(FsError::InvalidRequest(format!(
                "`{operation}` needs the persistent form of the fs helper (--serve)"
            ))),
        }
    } else {
        crate::fs::ops::run(operation, params)
    };
    match result {
        Ok(response) => HelperResponse::Ok(OkPayload {
            operation: operation.to_owned(),
            response,
        }),
        Err(err) => HelperResponse::Error(ErrorPayload {
            code: err.helper_code(),
            message: err.to_string(),
        }),
    }
}

/// Command line of the `fs-helper` mode.
#[derive(Debug, clap::Parser)]
#[command(
    name = "codex-fs-helper",
    about = "Sandboxed filesystem worker for the exec-server, over stdin and stdout",
    long_about = "Performs filesystem operations for the exec-server. Without arguments it reads \
one JSON request {\"operation\",\"params\"} from stdin and writes one JSON line answering it."
)]
struct Args {
    /// Read newline-delimited {"id","operation","params"} requests until
    /// stdin closes, answering each with one line carrying the same id.
    #[arg(long)]
    serve: bool,
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Entry point of the `fs-helper` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let name = crate::cli::mode_name(&argv, crate::mode::FS_HELPER_ARG0);
    let Args { serve } = match crate::cli::parse(&argv, &name) {
        Ok(args) => args,
        Err(exit) => return exit.report(),
    };
    let result = if serve { serve_loop() } else { run_once() };
    match result {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("fs sandbox helper failed: {err}");
            1
        }
    }
}

fn write_line<T: Serialize>(out: &mut impl Write, value: &T) -> Result<(), HelperError> {
    let mut line = serde_json::to_vec(value).map_err(HelperError::EncodeResponse)?;
    line.push(b'\n');
    out.write_all(&line).map_err(HelperError::WriteResponse)?;
    out.flush().map_err(HelperError::WriteResponse)
}

fn run_once() -> Result<(), HelperError> {
    let mut input = Vec::new();
    io::stdin()
        .lock()
        .read_to_end(&mut input)
        .map_err(HelperError::ReadRequest)?;
    let request: HelperRequest =
        serde_json::from_slice(&input).map_err(HelperError::DecodeRequest)?;
    let response = execute(&request.operation, request.params, None);
    write_line(&mut io::stdout().lock(), &response)
}

fn serve_loop() -> Result<(), HelperError> {
    let stdin = io::stdin();
    let mut input = stdin.lock();
    let mut out = io::BufWriter::new(io::stdout().lock());
    let mut line = Vec::new();
    // Handles opened here live until closed or until stdin closes.
    let streams = FileStreams::new();
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(HelperError::ReadRequest)?;
        if n == 0 {
            return Ok(());
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let answer = match serde_json::from_slice::<ServeRequest>(&line) {
            Ok(request) => ServeResponse {
                id: request.id,
                response: execute(&request.operation, request.params, Some(&streams)),
            },
            Err(err) => ServeResponse {
                id: serde_json::from_slice::<Value>(&line)
                    .ok()
                    .and_then(|value| value.get("id").cloned())
                    .unwrap_or(Value::Null),
                response: HelperResponse::Error(ErrorPayload {
                    code: INVALID_REQUEST,
                    message: format!("failed to decode fs helper request: {err}"),
                }),
            },
        };
        write_line(&mut out, &answer)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_use_the_reference_shapes() {
        let ok = HelperResponse::Ok(OkPayload {
            operation: "fs/getMetadata".into(),
            response: json!({"isFile": true}),
        });
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            json!({"status":"ok","payload":{"operation":"fs/getMetadata","response":{"isFile":true}}})
        );
        let err = ServeResponse {
            id: json!(7),
            response: HelperResponse::Error(ErrorPayload {
                code: -32004,
                message: "gone".into(),
            }),
        };
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            json!({"id":7,"status":"error","payload":{"code":-32004,"message":"gone"}})
        );
        let back: ServeResponse = serde_json::from_value(json!(
            {"id":"a","status":"ok","payload":{"operation":"fs/remove","response":{}}}
        ))
        .unwrap();
        assert_eq!(back.id, json!("a"));
    }
}
