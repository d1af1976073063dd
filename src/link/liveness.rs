//! Whether the peer of one exec-server connection is still there, for the
//! **takeover probe** ([`Liveness::probe`]): a resume of a session attached
//! to this connection first asks the connection for a sign of life and
//! takes the session over only from a connection that is provably gone: its
//! transport has ended, or it was sent a ping after the resume arrived and
//! nothing at all came back within the probe time while the server was
//! reading from it. Its transport reports what it hears (every inbound
//! frame), the time its reader spends on the peer's own requests, and its
//! end.
//!
//! The peer deadline, pings and write timeout of a WebSocket are the
//! link's (`crate::link`); a server can also close a connection itself
//! ([`Liveness::kill`]), saying why.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::sync::lock;

/// Default time a resume waits for the holder of a session to show it
/// lives, in milliseconds.
pub const TAKEOVER_PROBE_MS: u64 = 5000;
/// [`TAKEOVER_PROBE_MS`] as a duration.
pub const TAKEOVER_PROBE: Duration = Duration::from_millis(TAKEOVER_PROBE_MS);

/// The answer of a takeover probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The connection showed a sign of life, or cannot be probed.
    Alive,
    /// The connection is gone, for this reason.
    Gone(&'static str),
}

#[derive(Debug, Default)]
struct State {
    /// Requests of the peer the server is working on right now.
    busy: usize,
}

/// The liveness of one connection, shared by its transport and the
/// session registry.
#[derive(Debug)]
pub struct Liveness {
    state: Mutex<State>,
    /// Frames heard from the peer so far.
    heard: watch::Sender<u64>,
    /// Set once the transport has ended.
    closed: watch::Sender<bool>,
    /// Asks the transport for a ping now; `None` when it cannot send one
    /// the peer must answer.
    probes: Option<Notify>,
    /// Why the server closes the connection, once it decided to.
    kill: watch::Sender<Option<String>>,
}

impl Liveness {
    /// The liveness of a new connection; `probeable` when its transport can
    /// send something the peer answers (a WebSocket ping, a reliable relay
    /// stream's resume).
    pub fn new(probeable: bool) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            heard: watch::channel(0).0,
            closed: watch::channel(false).0,
            probes: probeable.then(Notify::new),
            kill: watch::channel(None).0,
        })
    }

    /// A frame came from the peer.
    pub fn heard(&self) {
        self.heard
            .send_modify(|count| *count = count.wrapping_add(1));
    }

    /// Marks the server busy with a request of the peer until the guard is
    /// dropped: the peer's answers wait unread meanwhile, so that time does
    /// not count against it.
    pub fn busy(self: &Arc<Self>) -> Busy {
        lock(&self.state).busy += 1;
        Busy(self.clone())
    }

    fn is_busy(&self) -> bool {
        lock(&self.state).busy > 0
    }

    /// The transport has ended.
    pub fn transport_closed(&self) {
        self.closed.send_replace(true);
    }

    /// Completes when someone asks for a ping now (never, for a transport
    /// that cannot be probed).
    pub async fn probe_requested(&self) {
        match &self.probes {
            Some(probes) => probes.notified().await,
            None => std::future::pending().await,
        }
    }

    /// Asks the transport to close the connection, saying `reason`.
    pub fn kill(&self, reason: impl Into<String>) {
        let reason = reason.into();
        self.kill.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        });
    }

    /// Completes with the reason once [`kill`](Self::kill) was called.
    pub async fn killed(&self) -> String {
        let mut kill = self.kill.subscribe();
        let reason = match kill.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            // The sender lives in `self`: it cannot be gone.
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }

    /// Whether the connection is provably gone: its transport has ended, or
    /// a ping sent now gets nothing back within `wait` while the server is
    /// free to read the answer. A connection that cannot be probed, or that
    /// the server is busy serving, counts as alive.
    pub async fn probe(&self, wait: Duration) -> Probe {
        const CLOSED: &str = "its transport had ended";
        let mut closed = self.closed.subscribe();
        if *closed.borrow_and_update() {
            return Probe::Gone(CLOSED);
        }
        let Some(probes) = &self.probes else {
            return Probe::Alive;
        };
        let mut heard = self.heard.subscribe();
        heard.borrow_and_update();
        probes.notify_one();
        let answer = tokio::time::timeout(wait, async {
            tokio::select! {
                _ = heard.changed() => Probe::Alive,
                _ = closed.wait_for(|closed| *closed) => Probe::Gone(CLOSED),
            }
        })
        .await;
        match answer {
            Ok(probe) => probe,
            Err(_) if self.is_busy() => Probe::Alive,
            Err(_) => Probe::Gone("it did not answer a ping"),
        }
    }
}

/// The server works on a request of the peer while this lives.
#[derive(Debug)]
pub struct Busy(Arc<Liveness>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.busy = state.busy.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_probe_tells_a_live_peer_from_a_gone_one() {
        let wait = Duration::from_secs(5);
        // A peer that answers the ping.
        let liveness = Liveness::new(true);
        let answering = liveness.clone();
        let peer = tokio::spawn(async move {
            answering.probe_requested().await;
            answering.heard();
        });
        assert_eq!(liveness.probe(wait).await, Probe::Alive);
        peer.await.unwrap();
        // Silence.
        assert!(matches!(liveness.probe(wait).await, Probe::Gone(_)));
        // Busy with the peer's request: cannot tell.
        let busy = liveness.busy();
        assert_eq!(liveness.probe(wait).await, Probe::Alive);
        drop(busy);
        // Ended.
        liveness.transport_closed();
        assert!(matches!(liveness.probe(wait).await, Probe::Gone(_)));
        // A transport that cannot be probed is taken for alive.
        assert_eq!(Liveness::new(false).probe(wait).await, Probe::Alive);
    }

    #[tokio::test]
    async fn kill_keeps_the_first_reason() {
        let liveness = Liveness::new(true);
        liveness.kill("first");
        liveness.kill("second");
        assert_eq!(liveness.killed().await, "first");
    }
}
