//! Client-side views of the process messages: what the typed helpers of
//! [`super::ExecServerClient`] send and decode, and [`ProcessEvent`], a
//! decoded `process/*` notification.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Notification;
use crate::protocol::process::{PtySize, StreamKind, NOTIFY_CLOSED, NOTIFY_EXITED, NOTIFY_OUTPUT};

/// Standard padded base64, the encoding of every byte field on the wire.
pub(crate) fn b64() -> &'static base64::engine::GeneralPurpose {
    &base64::engine::general_purpose::STANDARD
}

/// Decodes a base64 chunk; `None` when the server sent invalid base64.
pub fn decode_chunk(chunk: &str) -> Option<Vec<u8>> {
    b64().decode(chunk).ok()
}

/// `process/start` params.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartParams {
    pub process_id: String,
    pub argv: Vec<String>,
    /// Absolute path or `file:` URI.
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub tty: bool,
    pub pipe_stdin: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arg0: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_policy: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<PtySize>,
}

impl StartParams {
    /// A pipe process running `argv` in `/` with `PATH=/usr/bin:/bin`.
    pub fn new<I, S>(process_id: impl Into<String>, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_owned(), "/usr/bin:/bin".to_owned());
        Self {
            process_id: process_id.into(),
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: "/".to_owned(),
            env,
            tty: false,
            pipe_stdin: false,
            arg0: None,
            env_policy: None,
            sandbox: None,
            size: None,
        }
    }

    /// Runs the process on a PTY.
    pub fn tty(mut self, tty: bool) -> Self {
        self.tty = tty;
        self
    }

    /// Keeps the stdin of a pipe process writable.
    pub fn pipe_stdin(mut self, pipe_stdin: bool) -> Self {
        self.pipe_stdin = pipe_stdin;
        self
    }

    /// Sets the working directory (absolute path or `file:` URI).
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = cwd.into();
        self
    }
}

/// `process/read` params; `None` members are omitted.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadParams {
    pub process_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// One retained output chunk in a `process/read` result.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ReadChunk {
    pub seq: u64,
    pub stream: StreamKind,
    /// Base64 as sent; see [`decode_chunk`].
    pub chunk: String,
}

/// `process/read` result.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadResult {
    pub chunks: Vec<ReadChunk>,
    pub next_seq: u64,
    pub exited: bool,
    pub exit_code: Option<i32>,
    pub closed: bool,
    #[serde(default)]
    pub failure: Option<String>,
    #[serde(default)]
    pub sandbox_denied: bool,
    #[serde(default)]
    pub truncated: bool,
}

/// A decoded `process/output`, `process/exited` or `process/closed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    Output {
        process_id: String,
        seq: u64,
        stream: StreamKind,
        chunk: Vec<u8>,
    },
    Exited {
        process_id: String,
        seq: u64,
        exit_code: i32,
        signal: Option<String>,
        sandbox_denied: bool,
    },
    Closed {
        process_id: String,
        seq: u64,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OutputParams<'a> {
    process_id: String,
    seq: u64,
    stream: StreamKind,
    /// Borrowed from the notification: decoded without an extra copy.
    chunk: &'a str,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExitedParams {
    process_id: String,
    seq: u64,
    exit_code: i32,
    #[serde(default)]
    signal: Option<String>,
    #[serde(default)]
    sandbox_denied: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClosedParams {
    process_id: String,
    #[serde(default)]
    seq: u64,
}

impl ProcessEvent {
    /// Decodes a process notification; `None` for other methods or a
    /// malformed payload.
    pub fn from_notification(notification: &Notification) -> Option<Self> {
        let params = &notification.params;
        match notification.method.as_str() {
            NOTIFY_OUTPUT => {
                let p = OutputParams::deserialize(params).ok()?;
                Some(Self::Output {
                    process_id: p.process_id,
                    seq: p.seq,
                    stream: p.stream,
                    chunk: decode_chunk(p.chunk)?,
                })
            }
            NOTIFY_EXITED => {
                let p = ExitedParams::deserialize(params).ok()?;
                Some(Self::Exited {
                    process_id: p.process_id,
                    seq: p.seq,
                    exit_code: p.exit_code,
                    signal: p.signal,
                    sandbox_denied: p.sandbox_denied,
                })
            }
            NOTIFY_CLOSED => {
                let p = ClosedParams::deserialize(params).ok()?;
                Some(Self::Closed {
                    process_id: p.process_id,
                    seq: p.seq,
                })
            }
            _ => None,
        }
    }

    /// The process this event belongs to.
    pub fn process_id(&self) -> &str {
        match self {
            Self::Output { process_id, .. }
            | Self::Exited { process_id, .. }
            | Self::Closed { process_id, .. } => process_id,
        }
    }

    /// The event's per-process sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            Self::Output { seq, .. } | Self::Exited { seq, .. } | Self::Closed { seq, .. } => *seq,
        }
    }
}

/// `environment/info` result.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentInfo {
    pub shell: ShellInfo,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub capabilities: Value,
}

/// The server's default shell.
#[derive(Debug, Clone, Deserialize)]
pub struct ShellInfo {
    pub name: String,
    pub path: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn output_notification_decodes_its_chunk() {
        let n = Notification {
            method: "process/output".into(),
            params: json!({"processId":"p","seq":1,"stream":"stdout","chunk":"aGVsbG8K"}),
        };
        assert_eq!(
            ProcessEvent::from_notification(&n),
            Some(ProcessEvent::Output {
                process_id: "p".into(),
                seq: 1,
                stream: StreamKind::Stdout,
                chunk: b"hello\n".to_vec()
            })
        );
    }

    #[test]
    fn exited_notification_accepts_missing_optional_fields() {
        let n = Notification {
            method: "process/exited".into(),
            params: json!({"processId":"p","seq":3,"exitCode":7}),
        };
        let event = ProcessEvent::from_notification(&n);
        assert!(matches!(
            event,
            Some(ProcessEvent::Exited {
                exit_code: 7,
                seq: 3,
                sandbox_denied: false,
                ..
            })
        ));
    }

    #[test]
    fn start_params_omit_unset_options() {
        let value = serde_json::to_value(StartParams::new("p", ["true"])).unwrap_or_default();
        assert_eq!(
            value,
            json!({"processId":"p","argv":["true"],"cwd":"/","env":{"PATH":"/usr/bin:/bin"},"tty":false,"pipeStdin":false})
        );
    }
}
