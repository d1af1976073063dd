//! Where decisions go: subscribers (a bounded broadcast: the exec-server's
//! `process/networkDenied`, tests), the JSON-lines audit log
//! (`--audit-log FILE|-`), and the blocked-destination record behind the
//! summary `codexbox sandbox` prints at exit (the last 200 denials and the
//! distinct denied destinations, both bounded).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::sync::{broadcast, mpsc};

use super::decision::{Decision, DenyReason, Protocol};
use crate::sync::lock;

/// Recent denials kept for [`AuditLog::recent_blocked`].
pub const RECENT_BLOCKED: usize = 200;
/// Distinct denied destinations kept for [`AuditLog::blocked_destinations`].
pub const MAX_BLOCKED_DESTINATIONS: usize = 1024;
/// Decisions a slow subscriber may lag behind before it loses the oldest.
pub const SUBSCRIBER_QUEUE: usize = 1024;
/// Audit lines waiting for the writer before the proxy waits for it.
const AUDIT_QUEUE: usize = 1024;

/// Where the JSON-lines audit log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditSink {
    Stdout,
    File(PathBuf),
}

impl AuditSink {
    /// `-` is stdout; anything else a file (appended to).
    pub fn parse(arg: &str) -> Self {
        if arg == "-" {
            AuditSink::Stdout
        } else {
            AuditSink::File(PathBuf::from(arg))
        }
    }
}

/// One denied destination in the summary (`port` 0: a name lookup).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockedDestination {
    pub host: String,
    pub port: u16,
    pub reason: DenyReason,
}

impl std::fmt::Display for BlockedDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.port == 0 {
            write!(f, "{} (name lookup; {})", self.host, self.reason.summary())
        } else if self.host.contains(':') && !self.host.starts_with('[') {
            write!(
                f,
                "[{}]:{} ({})",
                self.host,
                self.port,
                self.reason.summary()
            )
        } else {
            write!(f, "{}:{} ({})", self.host, self.port, self.reason.summary())
        }
    }
}

#[derive(Debug, Default)]
struct Blocked {
    recent: VecDeque<Arc<Decision>>,
    total: u64,
    /// First reason seen per destination, in name order.
    destinations: BTreeMap<(String, u16), DenyReason>,
}

/// The decision hub of one proxy.
#[derive(Debug)]
pub struct AuditLog {
    subscribers: broadcast::Sender<Arc<Decision>>,
    blocked: Mutex<Blocked>,
    /// The writer's queue, until [`AuditLog::close_sink`].
    sink: Mutex<Option<mpsc::Sender<String>>>,
}

impl AuditLog {
    /// A hub without a log file, and the writer task for `sink` if any.
    pub async fn open(
        sink: Option<&AuditSink>,
    ) -> std::io::Result<(Arc<Self>, Option<tokio::task::JoinHandle<()>>)> {
        let (subscribers, _) = broadcast::channel(SUBSCRIBER_QUEUE);
        let (sink_tx, writer) = match sink {
            None => (None, None),
            Some(sink) => {
                let mut out: Box<dyn tokio::io::AsyncWrite + Send + Unpin> = match sink {
                    AuditSink::Stdout => Box::new(tokio::io::stdout()),
                    AuditSink::File(path) => Box::new(
                        tokio::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(path)
                            .await?,
                    ),
                };
                let (tx, mut rx) = mpsc::channel::<String>(AUDIT_QUEUE);
                let writer = tokio::spawn(async move {
                    while let Some(line) = rx.recv().await {
                        if out.write_all(line.as_bytes()).await.is_err() {
                            break;
                        }
                        if rx.is_empty() && out.flush().await.is_err() {
                            break;
                        }
                    }
                    let _ = out.flush().await;
                });
                (Some(tx), Some(writer))
            }
        };
        Ok((
            Arc::new(Self {
                subscribers,
                blocked: Mutex::new(Blocked::default()),
                sink: Mutex::new(sink_tx),
            }),
            writer,
        ))
    }

    /// Records one decision: log line, subscribers, blocked record.
    pub async fn record(&self, decision: Decision) {
        let decision = Arc::new(decision);
        if let Some(reason) = decision.deny_reason() {
            tracing::info!(
                host = %decision.host, port = decision.port, reason = reason.as_str(),
                protocol = decision.protocol.as_str(), client = %decision.client,
                "network request blocked"
            );
            let mut blocked = lock(&self.blocked);
            blocked.total += 1;
            if blocked.recent.len() == RECENT_BLOCKED {
                blocked.recent.pop_front();
            }
            blocked.recent.push_back(decision.clone());
            let port = if decision.protocol == Protocol::Dns {
                0
            } else {
                decision.port
            };
            let key = (decision.host.clone(), port);
            if blocked.destinations.len() < MAX_BLOCKED_DESTINATIONS
                || blocked.destinations.contains_key(&key)
            {
                blocked.destinations.entry(key).or_insert(reason);
            }
        }
        let _ = self.subscribers.send(decision.clone());
        let sink = lock(&self.sink).clone();
        if let Some(sink) = sink {
            if let Ok(mut line) = serde_json::to_string(&*decision) {
                line.push('\n');
                let _ = sink.send(line).await;
            }
        }
    }

    /// Ends the log file: the writer task writes what is queued, flushes
    /// and ends; later decisions still reach subscribers and the summary.
    pub fn close_sink(&self) {
        lock(&self.sink).take();
    }

    /// A new subscription to every later decision.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Decision>> {
        self.subscribers.subscribe()
    }

    /// The last [`RECENT_BLOCKED`] denials, oldest first, and the total count.
    pub fn recent_blocked(&self) -> (Vec<Arc<Decision>>, u64) {
        let blocked = lock(&self.blocked);
        (blocked.recent.iter().cloned().collect(), blocked.total)
    }

    /// Distinct denied destinations, sorted by host and port.
    pub fn blocked_destinations(&self) -> Vec<BlockedDestination> {
        lock(&self.blocked)
            .destinations
            .iter()
            .map(|((host, port), reason)| BlockedDestination {
                host: host.clone(),
                port: *port,
                reason: *reason,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_recent_window_keeps_the_last_200_and_counts_all() {
        let (log, _) = AuditLog::open(None).await.unwrap();
        let mut sub = log.subscribe();
        for i in 0..205 {
            let host = format!("example{i}.com");
            log.record(Decision::new(
                Some(DenyReason::NotAllowed),
                &host,
                443,
                Protocol::HttpsConnect,
                "CONNECT",
                "c",
            ))
            .await;
        }
        log.record(Decision::new(
            None,
            "ok.com",
            443,
            Protocol::HttpsConnect,
            "CONNECT",
            "c",
        ))
        .await;
        let (recent, total) = log.recent_blocked();
        assert_eq!((recent.len(), total), (200, 205));
        assert_eq!(recent[0].host, "example5.com");
        assert_eq!(log.blocked_destinations().len(), 205);
        assert_eq!(sub.recv().await.unwrap().host, "example0.com");
        let line = BlockedDestination {
            host: "evil.example".into(),
            port: 443,
            reason: DenyReason::NotAllowed,
        };
        assert_eq!(line.to_string(), "evil.example:443 (not in allowlist)");
    }
}
