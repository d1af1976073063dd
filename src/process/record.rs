//! What is known about one managed process, shared by its output pump
//! (which records) and the request handlers (which read): sequence numbers,
//! retained output, exit and close, and where its notifications go
//! ([`EventRoute`]). No I/O here; the pump is `output.rs`, the operations on
//! the process `managed.rs`.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch, Notify};

use super::retention::{Retention, RETAINED_CHUNKS};
use crate::protocol::process::{ReadChunk, ReadResult};
use crate::sync::lock;

/// Where a session's notifications go: the attached connection's bounded
/// outbound queue, or nowhere while the session is detached.
#[derive(Debug, Clone, Default)]
pub struct EventRoute(Arc<Mutex<Option<mpsc::Sender<String>>>>);

impl EventRoute {
    /// The queue of the attached connection, if any.
    pub fn current(&self) -> Option<mpsc::Sender<String>> {
        lock(&self.0).clone()
    }
    /// Attaches a connection's queue (or detaches with `None`).
    pub fn set(&self, sender: Option<mpsc::Sender<String>>) {
        *lock(&self.0) = sender;
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: i32,
    pub signal: Option<i32>,
    pub seq: u64,
}

/// Mutable state shared by the pump and the request handlers.
#[derive(Debug)]
pub(crate) struct State {
    pub retention: Retention,
    /// The seq the next event gets.
    pub next_seq: u64,
    pub exit: Option<ExitInfo>,
    pub closed: bool,
    pub sandbox_denied: bool,
}

/// The record of one process.
#[derive(Debug)]
pub struct Record {
    id: String,
    sandboxed: bool,
    pub(crate) state: Mutex<State>,
    /// Woken on every event (output, exit, close).
    pub(crate) changed: Notify,
    /// Tree kills under way; `closed` waits until none is, so a client that
    /// sees `closed` after a terminate never sees a descendant still dying.
    pub(crate) tree_kills: Arc<watch::Sender<usize>>,
}

impl Record {
    /// A fresh record: nothing emitted yet, the next event is seq 1.
    pub fn new(id: String, sandboxed: bool, retained_bytes: usize) -> Self {
        Self {
            id,
            sandboxed,
            state: Mutex::new(State {
                retention: Retention::new(retained_bytes, RETAINED_CHUNKS),
                next_seq: 1,
                exit: None,
                closed: false,
                sandbox_denied: false,
            }),
            changed: Notify::new(),
            tree_kills: Arc::new(watch::Sender::new(0)),
        }
    }

    /// The caller-chosen id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the process was started sandboxed.
    pub fn is_sandboxed(&self) -> bool {
        self.sandboxed
    }

    /// Whether `closed` was recorded.
    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// Whether the exit was recorded.
    pub fn has_exited(&self) -> bool {
        lock(&self.state).exit.is_some()
    }

    /// Waits until the exit is recorded: how the process ended, and whether
    /// the sandbox denied it.
    pub async fn exited(&self) -> (ExitInfo, bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let state = lock(&self.state);
                if let Some(exit) = state.exit {
                    return (exit, state.sandbox_denied);
                }
            }
            changed.await;
        }
    }

    /// Waits (bounded) until no tree kill of this process is under way, so
    /// every descendant it found has finished dying.
    pub async fn tree_kills_settled(&self) {
        let mut kills = self.tree_kills.subscribe();
        let _ = tokio::time::timeout(TREE_KILL_SETTLE_LIMIT, kills.wait_for(|n| *n == 0)).await;
    }

    /// The `process/read` answer for the current state, and whether a long
    /// poll may return now.
    pub fn snapshot(&self, after_seq: u64, max_bytes: Option<u64>) -> (ReadResult, bool) {
        let state = lock(&self.state);
        let selection = state.retention.select(after_seq, max_bytes);
        let next_seq = match (max_bytes, selection.chunks.last()) {
            (Some(_), Some(last)) => last.seq + 1,
            _ => state.next_seq,
        };
        let ready = !selection.chunks.is_empty()
            || state.closed
            || state.exit.is_some_and(|e| after_seq < e.seq);
        let result = ReadResult {
            chunks: selection
                .chunks
                .into_iter()
                .map(|c| ReadChunk {
                    seq: c.seq,
                    stream: c.stream,
                    chunk: c.data,
                })
                .collect(),
            next_seq,
            exited: state.exit.is_some(),
            exit_code: state.exit.map(|e| e.code),
            closed: state.closed,
            failure: None,
            sandbox_denied: state.sandbox_denied,
            truncated: selection.truncated,
            network_denials: Vec::new(),
        };
        (result, ready)
    }
}

/// The longest `closed` waits for a tree kill to finish (a descendant stuck
/// in uninterruptible sleep must not hold the process open forever).
pub(crate) const TREE_KILL_SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);
