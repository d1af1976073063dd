//! Sessions (docs/protocol.md): a session owns managed processes and outlives its
//! connection. A closed connection detaches it; `initialize` with
//! `resumeSessionId` from any connection re-attaches it within its grace
//! period (the server's, or the one its client asked for), taking it over
//! from a connection that is provably gone (`crate::link::liveness`); when
//! the grace period ends every process of the session is killed. The registry
//! also describes every session for `session/list`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use super::sandbox_reuse::SessionSandboxes;
use crate::link::liveness::{Liveness, Probe};
use crate::net::audit::AuditLog;
use crate::process::{EventRoute, ManagedProcess};
use crate::protocol::session::{ProcessState, ProcessSummary, SessionSummary};
use crate::protocol::RpcError;
use crate::sync::lock;

/// Identifies a connection within the server.
pub type ConnectionId = u64;

/// A connection as a session holder: its id and what tells whether it lives.
#[derive(Debug, Clone)]
pub struct Holder {
    pub id: ConnectionId,
    pub liveness: Arc<Liveness>,
    /// The connection asked for `process/networkDenied` in `initialize`.
    pub wants_denials: bool,
}

#[derive(Debug, Default)]
struct Attachment {
    /// The connection the session is attached to, if any.
    holder: Option<Holder>,
    /// Bumped on every attach; a connection whose epoch is stale was taken over.
    epoch: u64,
    /// The pending expiry of a detached session.
    expiry: Option<tokio::task::AbortHandle>,
    /// When the session was last detached (while it is).
    detached_at: Option<Instant>,
    /// The grace period its client asked for (`None`: the server's).
    grace: Option<Duration>,
    /// Expired: its processes were killed and it can no longer be resumed.
    expired: bool,
}

/// What is shown of a process in `session/list`, recorded at its start.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    pub argv: Vec<String>,
    pub tty: bool,
    pub started_at: SystemTime,
}

#[derive(Debug)]
struct Entry {
    process: Arc<ManagedProcess>,
    info: ProcessInfo,
    /// The decisions of the process's own network proxy, if it has one;
    /// kept after `process/closed` for `process/read`.
    network: Option<Arc<AuditLog>>,
}

/// One session.
#[derive(Debug)]
pub struct Session {
    id: String,
    route: EventRoute,
    processes: Mutex<HashMap<String, Entry>>,
    attachment: Mutex<Attachment>,
    /// Woken when another connection resumes the session.
    taken_over: Notify,
    /// The sandboxes prepared for this session's sandboxed commands.
    sandboxes: SessionSandboxes,
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

    /// The sandboxes prepared for this session's commands.
    pub fn sandboxes(&self) -> &SessionSandboxes {
        &self.sandboxes
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
        lock(&self.processes).get(id).map(|e| e.process.clone())
    }

    /// A process by id, with the decisions of its network proxy if it has one.
    pub fn process_with_network(
        &self,
        id: &str,
    ) -> Option<(Arc<ManagedProcess>, Option<Arc<AuditLog>>)> {
        lock(&self.processes)
            .get(id)
            .map(|e| (e.process.clone(), e.network.clone()))
    }

    /// Where `process/networkDenied` goes: the attached connection's queue
    /// when that connection asked for denials.
    pub fn denial_route(&self) -> Option<mpsc::Sender<String>> {
        let attachment = lock(&self.attachment);
        attachment
            .holder
            .as_ref()
            .filter(|holder| holder.wants_denials)
            .and_then(|_| self.route.current())
    }

    fn all_processes(&self) -> Vec<Arc<ManagedProcess>> {
        lock(&self.processes)
            .values()
            .map(|e| e.process.clone())
            .collect()
    }

    /// Processes not closed yet.
    pub fn live_processes(&self) -> usize {
        lock(&self.processes)
            .values()
            .filter(|e| !e.process.is_closed())
            .count()
    }

    /// Whether an entry (live or closed but not evicted) has this id.
    pub fn contains(&self, id: &str) -> bool {
        lock(&self.processes).contains_key(id)
    }

    /// Records a started process and the decision log of its network
    /// proxy, if it has one.
    pub fn insert(
        &self,
        process: Arc<ManagedProcess>,
        info: ProcessInfo,
        network: Option<Arc<AuditLog>>,
    ) {
        let entry = Entry {
            process,
            info,
            network,
        };
        lock(&self.processes).insert(entry.process.id().to_owned(), entry);
    }

    /// Forgets a closed process.
    pub fn evict(&self, id: &str) {
        let mut processes = lock(&self.processes);
        if processes.get(id).is_some_and(|e| e.process.is_closed()) {
            processes.remove(id);
        }
    }

    /// Kills every process tree of the session (blocking /proc walks).
    pub fn kill_all_blocking(&self) {
        let processes = self.all_processes();
        let processes: Vec<&ManagedProcess> = processes.iter().map(|p| p.as_ref()).collect();
        ManagedProcess::kill_trees_blocking(&processes);
    }

    /// Sets the grace period a client asked for.
    pub fn set_grace(&self, grace: Duration) {
        lock(&self.attachment).grace = Some(grace);
    }

    /// The `session/list` entry of this session as `viewer` sees it.
    fn summary(&self, viewer: ConnectionId, default_grace: Duration) -> SessionSummary {
        let (attached, current, expires_in, grace) = {
            let attachment = lock(&self.attachment);
            let grace = attachment.grace.unwrap_or(default_grace);
            let expires_in = attachment
                .detached_at
                .filter(|_| attachment.holder.is_none())
                .map(|at| grace.saturating_sub(at.elapsed()));
            let holder = attachment.holder.as_ref().map(|h| h.id);
            (holder.is_some(), holder == Some(viewer), expires_in, grace)
        };
        let mut processes: Vec<ProcessSummary> = lock(&self.processes)
            .values()
            .map(|entry| process_summary(&entry.process, &entry.info))
            .collect();
        processes.sort_by(|a, b| {
            (a.started_at_ms, &a.process_id).cmp(&(b.started_at_ms, &b.process_id))
        });
        SessionSummary {
            session_id: self.id.clone(),
            attached,
            current,
            session_grace_secs: grace.as_secs(),
            expires_in_ms: expires_in.map(millis),
            processes,
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn process_summary(process: &ManagedProcess, info: &ProcessInfo) -> ProcessSummary {
    let (now, _) = process.snapshot(u64::MAX, Some(0));
    let state = if now.closed {
        ProcessState::Closed
    } else if now.exited {
        ProcessState::Exited
    } else {
        ProcessState::Running
    };
    let started = info
        .started_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    ProcessSummary {
        process_id: process.id().to_owned(),
        argv: info.argv.clone(),
        tty: info.tty,
        state,
        exit_code: now.exit_code,
        next_seq: now.next_seq,
        started_at_ms: millis(started),
    }
}

/// Every session of the server, shared by all connections.
#[derive(Debug)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The grace period of a session whose client asked for none.
    grace: Duration,
    next_connection: AtomicU64,
    /// Set by a drain: no new process may start.
    draining: AtomicBool,
}

impl Registry {
    /// An empty registry whose detached sessions expire after `grace`
    /// (unless their client asked for another grace period).
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

    fn all(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().cloned().collect()
    }

    /// Processes not closed yet, in every session.
    pub fn live_processes(&self) -> usize {
        self.all()
            .iter()
            .map(|session| session.live_processes())
            .sum()
    }

    /// Sessions attached to a connection right now.
    pub fn attached_sessions(&self) -> usize {
        self.all()
            .iter()
            .filter(|session| lock(&session.attachment).holder.is_some())
            .count()
    }

    /// Every session as the connection `viewer` sees it (its own marked
    /// `current`), oldest process first within a session.
    pub fn list(&self, viewer: ConnectionId) -> Vec<SessionSummary> {
        let mut sessions: Vec<SessionSummary> = self
            .all()
            .iter()
            .map(|session| session.summary(viewer, self.grace))
            .collect();
        sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        sessions
    }

    /// A fresh connection id.
    pub fn connection_id(&self) -> ConnectionId {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// Creates a session attached to `holder`. Returns it and its epoch.
    pub fn create(&self, holder: Holder, sender: mpsc::Sender<String>) -> (Arc<Session>, u64) {
        let session = Arc::new(Session {
            id: uuid::Uuid::new_v4().to_string(),
            route: EventRoute::default(),
            processes: Mutex::new(HashMap::new()),
            attachment: Mutex::new(Attachment {
                holder: Some(holder),
                epoch: 1,
                ..Attachment::default()
            }),
            taken_over: Notify::new(),
            sandboxes: SessionSandboxes::default(),
        });
        session.route.set(Some(sender));
        lock(&self.sessions).insert(session.id.clone(), session.clone());
        (session, 1)
    }

    /// Re-attaches session `id` to `holder`: a detached session at once; one
    /// attached elsewhere only when that connection is provably gone (probed
    /// for up to `probe_wait`), which is then closed. Otherwise -32010.
    pub async fn resume(
        &self,
        id: &str,
        holder: Holder,
        sender: mpsc::Sender<String>,
        probe_wait: Duration,
    ) -> Result<(Arc<Session>, u64), RpcError> {
        let unknown = || RpcError::invalid_request(format!("unknown session id {id}"));
        let session = lock(&self.sessions).get(id).cloned().ok_or_else(unknown)?;
        // The holder may change while it is probed (it detaches, or another
        // resume wins): look again, a bounded number of times.
        for _ in 0..3 {
            let current = {
                let mut attachment = lock(&session.attachment);
                if attachment.expired {
                    return Err(unknown());
                }
                match &attachment.holder {
                    None => return Ok(Self::attach(&session, &mut attachment, holder, sender)),
                    Some(current) => current.clone(),
                }
            };
            let Probe::Gone(why) = current.liveness.probe(probe_wait).await else {
                break;
            };
            let mut attachment = lock(&session.attachment);
            if attachment.holder.as_ref().map(|h| h.id) != Some(current.id) {
                continue;
            }
            tracing::info!(
                session = %id,
                from = current.id,
                to = holder.id,
                "session taken over: its connection is gone ({why})"
            );
            current.liveness.kill(format!(
                "session resumed elsewhere: this connection is gone ({why})"
            ));
            return Ok(Self::attach(&session, &mut attachment, holder, sender));
        }
        Err(RpcError::session_already_attached(format!(
            "session {id} is already attached to another connection"
        )))
    }

    fn attach(
        session: &Arc<Session>,
        attachment: &mut Attachment,
        holder: Holder,
        sender: mpsc::Sender<String>,
    ) -> (Arc<Session>, u64) {
        if let Some(expiry) = attachment.expiry.take() {
            expiry.abort();
        }
        attachment.holder = Some(holder);
        attachment.detached_at = None;
        attachment.epoch += 1;
        session.route.set(Some(sender));
        session.taken_over.notify_waiters();
        (session.clone(), attachment.epoch)
    }

    /// Detaches `session` from `connection` (if still attached there) and
    /// schedules its expiry.
    pub fn detach(self: &Arc<Self>, session: &Arc<Session>, connection: ConnectionId) {
        let mut attachment = lock(&session.attachment);
        if attachment.holder.as_ref().map(|h| h.id) != Some(connection) {
            return;
        }
        attachment.holder = None;
        attachment.detached_at = Some(Instant::now());
        session.route.set(None);
        let epoch = attachment.epoch;
        let grace = attachment.grace.unwrap_or(self.grace);
        if grace.is_zero() {
            drop(attachment);
            self.expire(session, epoch);
            return;
        }
        let registry = Arc::downgrade(self);
        let weak = Arc::downgrade(session);
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
            let mut attachment = lock(&session.attachment);
            if attachment.holder.is_some() || attachment.epoch != epoch {
                return;
            }
            attachment.expired = true;
        }
        lock(&self.sessions).remove(&session.id);
        tracing::info!(session = %session.id, "detached session expired; killing its processes");
        session.sandboxes.clear();
        let session = session.clone();
        tokio::task::spawn_blocking(move || session.kill_all_blocking());
    }

    /// Kills every process of every session (server shutdown, stdio EOF),
    /// drops every prepared sandbox, and stops the expiry timers of the
    /// detached ones: nothing is left to expire.
    pub fn kill_everything_blocking(&self) {
        let sessions = self.all();
        for session in &sessions {
            session.sandboxes.clear();
            if let Some(expiry) = lock(&session.attachment).expiry.take() {
                expiry.abort();
            }
        }
        let processes: Vec<_> = sessions
            .iter()
            .flat_map(|session| session.all_processes())
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

    fn holder(id: ConnectionId) -> Holder {
        Holder {
            id,
            liveness: Liveness::new(true),
            wants_denials: false,
        }
    }

    const PROBE: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn denials_go_to_the_holder_only_when_it_asked() {
        let registry = Registry::new(Duration::from_secs(30));
        let (asked_tx, _asked_rx) = mpsc::channel(1);
        let asking = Holder {
            wants_denials: true,
            ..holder(1)
        };
        let (session, _) = registry.create(asking, asked_tx.clone());
        let route = session.denial_route().expect("the holder asked");
        assert!(route.same_channel(&asked_tx));
        // Detached: nobody hears; resumed by a connection that did not ask:
        // still nobody.
        registry.detach(&session, 1);
        assert!(session.denial_route().is_none());
        let (other_tx, _other_rx) = mpsc::channel(1);
        let id = session.id().to_owned();
        let (session, _) = registry
            .resume(&id, holder(2), other_tx, PROBE)
            .await
            .unwrap();
        assert!(session.denial_route().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn resume_rules_follow_the_attachment() {
        let registry = Registry::new(Duration::from_secs(30));
        let (tx, _rx) = mpsc::channel(1);
        let first = holder(1);
        let (session, epoch) = registry.create(first.clone(), tx.clone());
        let id = session.id().to_owned();
        // The holder answers the probe: it stays.
        let answering = first.liveness.clone();
        let peer = tokio::spawn(async move {
            answering.probe_requested().await;
            answering.heard();
        });
        let attached = registry
            .resume(&id, holder(2), tx.clone(), PROBE)
            .await
            .unwrap_err();
        peer.await.unwrap();
        assert_eq!(
            attached.code,
            crate::protocol::envelope::code::SESSION_ALREADY_ATTACHED
        );
        assert_eq!(
            attached.message,
            format!("session {id} is already attached to another connection")
        );
        let unknown = registry
            .resume("nope", holder(2), tx.clone(), PROBE)
            .await
            .unwrap_err();
        assert_eq!(unknown.message, "unknown session id nope");
        registry.detach(&session, 1);
        let (resumed, new_epoch) = registry.resume(&id, holder(2), tx, PROBE).await.unwrap();
        assert!(Arc::ptr_eq(&resumed, &session));
        assert_ne!(new_epoch, epoch);
        // The old holder sees the takeover.
        session.taken_over(epoch).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_holder_loses_the_session_and_is_closed() {
        let registry = Registry::new(Duration::from_secs(30));
        let (tx, _rx) = mpsc::channel(1);
        let silent = holder(1);
        let (session, epoch) = registry.create(silent.clone(), tx.clone());
        let id = session.id().to_owned();
        let (_, new_epoch) = registry
            .resume(&id, holder(2), tx.clone(), PROBE)
            .await
            .unwrap();
        assert_ne!(new_epoch, epoch);
        assert!(silent.liveness.killed().await.contains("is gone"));
        // Its late close changes nothing.
        registry.detach(&session, 1);
        assert_eq!(registry.attached_sessions(), 1);
        // An ended transport is gone without a probe.
        let ended = holder(3);
        let (other, _) = registry.create(ended.clone(), tx.clone());
        ended.liveness.transport_closed();
        assert!(registry
            .resume(other.id(), holder(4), tx, PROBE)
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn zero_grace_expires_at_detach() {
        let registry = Registry::new(Duration::ZERO);
        let (tx, _rx) = mpsc::channel(1);
        let (session, _) = registry.create(holder(1), tx.clone());
        let id = session.id().to_owned();
        registry.detach(&session, 1);
        assert!(registry.resume(&id, holder(2), tx, PROBE).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_keeps_the_grace_its_client_asked_for() {
        let registry = Registry::new(Duration::from_secs(30));
        let (tx, _rx) = mpsc::channel(1);
        let (session, _) = registry.create(holder(1), tx.clone());
        session.set_grace(Duration::from_secs(3600));
        registry.detach(&session, 1);
        let listed = registry.list(9);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].session_grace_secs, 3600);
        assert_eq!(listed[0].expires_in_ms, Some(3_600_000));
        assert!(!listed[0].attached && !listed[0].current);
        tokio::time::sleep(Duration::from_secs(60)).await;
        let id = session.id().to_owned();
        assert!(registry.resume(&id, holder(2), tx, PROBE).await.is_ok());
        let listed = registry.list(2);
        assert!(listed[0].attached && listed[0].current);
        assert_eq!(listed[0].expires_in_ms, None);
    }
}
