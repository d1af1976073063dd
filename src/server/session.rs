//! Sessions (SPEC §2.3): a session owns managed processes and outlives its
//! connection. A closed connection detaches it; `initialize` with
//! `resumeSessionId` from any connection re-attaches it within the grace
//! period; when the grace period ends every process of the session is killed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::process::{EventRoute, ManagedProcess};
use crate::protocol::RpcError;
use crate::sync::lock;

/// Identifies a connection within the server.
pub type ConnectionId = u64;

#[derive(Debug, Default)]
struct Attachment {
    /// The connection the session is attached to, if any.
    connection: Option<ConnectionId>,
    /// Bumped on every attach; a connection whose epoch is stale was taken over.
    epoch: u64,
    /// The pending expiry of a detached session.
    expiry: Option<tokio::task::AbortHandle>,
}

/// One session.
#[derive(Debug)]
pub struct Session {
    id: String,
    route: EventRoute,
    processes: Mutex<HashMap<String, Arc<ManagedProcess>>>,
    attachment: Mutex<Attachment>,
    /// Woken when another connection resumes the session.
    taken_over: Notify,
}

impl Session {
    /// The session id (a UUID v4).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Where the session's notifications go.
    pub fn route(&self) -> &EventRoute {
        &self.route
    }

    /// The current attach epoch.
    pub fn epoch(&self) -> u64 {
        lock(&self.attachment).epoch
    }

    /// Completes when a connection other than the holder of `epoch` attaches.
    pub async fn taken_over(&self, epoch: u64) {
        loop {
            let notified = self.taken_over.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.epoch() != epoch {
                return;
            }
            notified.await;
        }
    }

    /// A process by id.
    pub fn process(&self, id: &str) -> Option<Arc<ManagedProcess>> {
        lock(&self.processes).get(id).cloned()
    }

    /// Processes not closed yet.
    pub fn live_processes(&self) -> usize {
        lock(&self.processes)
            .values()
            .filter(|p| !p.is_closed())
            .count()
    }

    /// Whether an entry (live or closed but not evicted) has this id.
    pub fn contains(&self, id: &str) -> bool {
        lock(&self.processes).contains_key(id)
    }

    /// Records a started process.
    pub fn insert(&self, process: Arc<ManagedProcess>) {
        lock(&self.processes).insert(process.id().to_owned(), process);
    }

    /// Forgets a closed process.
    pub fn evict(&self, id: &str) {
        let mut processes = lock(&self.processes);
        if processes.get(id).is_some_and(|p| p.is_closed()) {
            processes.remove(id);
        }
    }

    /// Kills every process tree of the session (blocking /proc walks).
    pub fn kill_all_blocking(&self) {
        let processes: Vec<_> = lock(&self.processes).values().cloned().collect();
        let processes: Vec<&ManagedProcess> = processes.iter().map(|p| p.as_ref()).collect();
        ManagedProcess::kill_trees_blocking(&processes);
    }
}

/// Every session of the server, shared by all connections.
#[derive(Debug)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    grace: Duration,
    next_connection: AtomicU64,
    /// Set by a drain: no new process may start.
    draining: AtomicBool,
}

impl Registry {
    /// An empty registry whose detached sessions expire after `grace`.
    pub fn new(grace: Duration) -> Arc<Self> {
        Arc::new(Self {
            sessions: Mutex::new(HashMap::new()),
            grace,
            next_connection: AtomicU64::new(1),
            draining: AtomicBool::new(false),
        })
    }

    /// From now on no new process starts (the server is draining).
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether the server is draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Processes not closed yet, in every session.
    pub fn live_processes(&self) -> usize {
        let sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        sessions
            .iter()
            .map(|session| session.live_processes())
            .sum()
    }

    /// Sessions attached to a connection right now.
    pub fn attached_sessions(&self) -> usize {
        let sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        sessions
            .iter()
            .filter(|session| lock(&session.attachment).connection.is_some())
            .count()
    }

    /// A fresh connection id.
    pub fn connection_id(&self) -> ConnectionId {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// Creates a session attached to `connection`. Returns it and its epoch.
    pub fn create(
        &self,
        connection: ConnectionId,
        sender: mpsc::Sender<String>,
    ) -> (Arc<Session>, u64) {
        let session = Arc::new(Session {
            id: uuid::Uuid::new_v4().to_string(),
            route: EventRoute::default(),
            processes: Mutex::new(HashMap::new()),
            attachment: Mutex::new(Attachment {
                connection: Some(connection),
                epoch: 1,
                expiry: None,
            }),
            taken_over: Notify::new(),
        });
        session.route.set(Some(sender));
        lock(&self.sessions).insert(session.id.clone(), session.clone());
        (session, 1)
    }

    /// Re-attaches a detached session to `connection`.
    pub fn resume(
        &self,
        id: &str,
        connection: ConnectionId,
        sender: mpsc::Sender<String>,
    ) -> Result<(Arc<Session>, u64), RpcError> {
        let session = lock(&self.sessions)
            .get(id)
            .cloned()
            .ok_or_else(|| RpcError::invalid_request(format!("unknown session id {id}")))?;
        let epoch = {
            let mut attachment = lock(&session.attachment);
            if attachment.connection.is_some() {
                return Err(RpcError::session_already_attached(format!(
                    "session {id} is already attached to another connection"
                )));
            }
            if let Some(expiry) = attachment.expiry.take() {
                expiry.abort();
            }
            attachment.connection = Some(connection);
            attachment.epoch += 1;
            session.route.set(Some(sender));
            attachment.epoch
        };
        session.taken_over.notify_waiters();
        Ok((session, epoch))
    }

    /// Detaches `session` from `connection` (if still attached there) and
    /// schedules its expiry.
    pub fn detach(self: &Arc<Self>, session: &Arc<Session>, connection: ConnectionId) {
        let mut attachment = lock(&session.attachment);
        if attachment.connection != Some(connection) {
            return;
        }
        attachment.connection = None;
        session.route.set(None);
        let epoch = attachment.epoch;
        if self.grace.is_zero() {
            drop(attachment);
            self.expire(session, epoch);
            return;
        }
        let registry = Arc::downgrade(self);
        let weak = Arc::downgrade(session);
        let grace = self.grace;
        let task = tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if let (Some(registry), Some(session)) = (registry.upgrade(), weak.upgrade()) {
                registry.expire(&session, epoch);
            }
        });
        attachment.expiry = Some(task.abort_handle());
    }

    /// Removes a still-detached session and kills its processes.
    fn expire(&self, session: &Arc<Session>, epoch: u64) {
        {
            let attachment = lock(&session.attachment);
            if attachment.connection.is_some() || attachment.epoch != epoch {
                return;
            }
        }
        lock(&self.sessions).remove(&session.id);
        tracing::info!(session = %session.id, "detached session expired; killing its processes");
        let session = session.clone();
        tokio::task::spawn_blocking(move || session.kill_all_blocking());
    }

    /// Kills every process of every session (server shutdown, stdio EOF).
    pub fn kill_everything_blocking(&self) {
        let sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        let processes: Vec<_> = sessions
            .iter()
            .flat_map(|session| {
                lock(&session.processes)
                    .values()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        let processes: Vec<&ManagedProcess> = processes.iter().map(|p| p.as_ref()).collect();
        ManagedProcess::kill_trees_blocking(&processes);
    }

    /// A weak handle for eviction callbacks.
    pub fn weak_session(session: &Arc<Session>) -> Weak<Session> {
        Arc::downgrade(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resume_rules_follow_the_attachment() {
        let registry = Registry::new(Duration::from_secs(30));
        let (tx, _rx) = mpsc::channel(1);
        let (session, epoch) = registry.create(1, tx.clone());
        let id = session.id().to_owned();
        let attached = registry.resume(&id, 2, tx.clone()).unwrap_err();
        assert_eq!(
            attached.code,
            crate::protocol::envelope::code::SESSION_ALREADY_ATTACHED
        );
        assert_eq!(
            attached.message,
            format!("session {id} is already attached to another connection")
        );
        let unknown = registry.resume("nope", 2, tx.clone()).unwrap_err();
        assert_eq!(unknown.message, "unknown session id nope");
        registry.detach(&session, 1);
        let (resumed, new_epoch) = registry.resume(&id, 2, tx).unwrap();
        assert!(Arc::ptr_eq(&resumed, &session));
        assert_ne!(new_epoch, epoch);
        // The old holder sees the takeover.
        session.taken_over(epoch).await;
    }

    #[tokio::test]
    async fn zero_grace_expires_at_detach() {
        let registry = Registry::new(Duration::ZERO);
        let (tx, _rx) = mpsc::channel(1);
        let (session, _) = registry.create(1, tx.clone());
        let id = session.id().to_owned();
        registry.detach(&session, 1);
        assert!(registry.resume(&id, 2, tx).is_err());
    }
}
