//! Client-only parts of the process messages: builders for the protocol's
//! [`StartParams`], base64 helpers and [`ProcessEvent`], a decoded
//! `process/*` notification. The message types themselves are the
//! protocol's (re-exported here), shared with the server.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

use super::Notification;
use crate::protocol::process::OutputNotification;
use crate::protocol::process::{
    ClosedNotification, ExitedNotification, StreamKind, NOTIFY_CLOSED, NOTIFY_EXITED, NOTIFY_OUTPUT,
};
use crate::wire_path::WirePath;

/// Standard padded base64, the encoding of every byte field on the wire.
pub(crate) fn b64() -> &'static base64::engine::Simd {
    crate::protocol::base64()
}

/// Decodes a base64 chunk; `None` when the server sent invalid base64.
pub fn decode_chunk(chunk: &str) -> Option<Vec<u8>> {
    b64().decode(chunk).ok()
}

pub use crate::protocol::environment::{EnvironmentInfo, ShellInfo};
pub use crate::protocol::process::{ReadChunk, ReadParams, ReadResult, StartParams, WriteResult};

/// Builders for the client side of `process/start`.
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
            cwd: WirePath::native("/"),
            env,
            tty: false,
            pipe_stdin: false,
            arg0: None,
            env_policy: None,
            sandbox: None,
            size: None,
            enforce_managed_network: false,
            managed_network: None,
            network_proxy: None,
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

    /// Sets the working directory (sent as a native path or `file:` URI,
    /// as `cwd` was parsed).
    pub fn cwd(mut self, cwd: WirePath) -> Self {
        self.cwd = cwd;
        self
    }
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

impl ProcessEvent {
    /// Decodes a process notification; `None` for other methods or a
    /// malformed payload.
    pub fn from_notification(notification: &Notification) -> Option<Self> {
        let params = &notification.params;
        match notification.method.as_str() {
            NOTIFY_OUTPUT => {
                let p = OutputNotification::deserialize(params).ok()?;
                Some(Self::Output {
                    process_id: p.process_id,
                    seq: p.seq,
                    stream: p.stream,
                    chunk: decode_chunk(&p.chunk)?,
                })
            }
            NOTIFY_EXITED => {
                let p = ExitedNotification::deserialize(params).ok()?;
                Some(Self::Exited {
                    process_id: p.process_id.to_owned(),
                    seq: p.seq,
                    exit_code: p.exit_code,
                    signal: p.signal.map(str::to_owned),
                    sandbox_denied: p.sandbox_denied,
                })
            }
            NOTIFY_CLOSED => {
                let p = ClosedNotification::deserialize(params).ok()?;
                Some(Self::Closed {
                    process_id: p.process_id.to_owned(),
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
