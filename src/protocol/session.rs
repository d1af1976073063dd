//! `session/list`, an extension of the Codex dialect: every session of the
//! server with its processes, for a client that wants to re-attach to one
//! whose ids it no longer has (`codexbox ps`). The reference's clients
//! never call it; a reference server answers it with -32601.

use serde::{Deserialize, Serialize};

/// Lists the server's sessions.
pub const METHOD_LIST: &str = "session/list";

/// Where a listed process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ProcessState {
    /// Not exited yet.
    Running,
    /// Exited, but something it started still holds its output open.
    Exited,
    /// Exited and its output closed: only its retained events are left.
    Closed,
}

/// One process of a listed session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ProcessSummary {
    pub process_id: String,
    /// The command as `process/start` gave it.
    pub argv: Vec<String>,
    /// Started on a terminal.
    pub tty: bool,
    pub state: ProcessState,
    /// The exit code once it exited (`null` before).
    pub exit_code: Option<i32>,
    /// The seq its next event will get (`process/read {afterSeq}` with one
    /// less starts at the newest).
    pub next_seq: u64,
    /// When it was started, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
}

/// One session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub session_id: String,
    /// Attached to a connection right now (a resume gets -32010 unless that
    /// connection is gone).
    pub attached: bool,
    /// The session of the connection that asked.
    pub current: bool,
    /// How long the session survives without a connection.
    pub session_grace_secs: u64,
    /// Detached: milliseconds left before it expires and its processes are
    /// killed (`null` while attached).
    pub expires_in_ms: Option<u64>,
    /// Oldest first.
    pub processes: Vec<ProcessSummary>,
}

/// `session/list` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SessionListResult {
    /// Every session of the server, ordered by id.
    pub sessions: Vec<SessionSummary>,
}
