//! The rendezvous's routing state: per environment its registration, its
//! executor socket and the streams harness sockets have claimed, and the
//! decisions for each frame (forward, answer with a reset, drop) and for
//! each lost socket. Pure bookkeeping under one lock: it never awaits and
//! never looks inside a frame beyond `stream_id`, the body kind and the
//! handshake feature bits, so it never sees plaintext. The sockets
//! themselves are served by [`super::socket`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio_tungstenite::tungstenite::Bytes;

use crate::relay::frame::{BodyKind, FrameHeader, RelayMessageFrame, FEATURE_RELIABLE};
use crate::relay::noise::NoisePublicKey;
use crate::sync::lock;

/// Reset reason when the harness socket of a stream went away.
pub const RESET_HARNESS_GONE: &str = "harness_disconnected";
/// Reset reason when the executor socket went away.
pub const RESET_EXECUTOR_GONE: &str = "executor_disconnected";
/// Reset reason for a stream id another harness holds.
pub const RESET_STREAM_IN_USE: &str = "stream_in_use";
/// Reset reason for a new stream while no executor is connected.
pub const RESET_OFFLINE: &str = "environment_offline";
/// Reset reason when a limit on streams was reached.
pub const RESET_STREAM_LIMIT: &str = "stream_limit";
/// Reset reason for a frame of a stream this socket never claimed.
pub const RESET_UNKNOWN_STREAM: &str = "unknown_stream";

/// Limits the hub enforces.
#[derive(Debug, Clone, Copy)]
pub struct HubLimits {
    /// Streams one environment may have at once.
    pub streams_per_environment: usize,
    /// Streams one harness socket may claim at once.
    pub streams_per_harness_socket: usize,
    /// How long a reliable stream waits for a lost side to come back.
    pub resume_hold: Duration,
}

/// Where a socket's writer takes its messages from.
pub type Outbox = mpsc::Sender<Bytes>;

/// One connected socket, as others see it.
#[derive(Debug, Clone)]
pub struct Link {
    pub socket: u64,
    pub outbox: Outbox,
    /// Notified to make the socket close (replaced, or too slow).
    pub closer: Arc<Notify>,
}

/// The executor's current registration.
#[derive(Debug, Clone)]
pub struct Registration {
    pub id: String,
    pub executor_key: NoisePublicKey,
}

#[derive(Debug)]
struct Route {
    /// `None` while a reliable stream waits for its harness to come back.
    harness: Option<Link>,
    /// Fingerprint of the harness key (from its signed URL).
    harness_key: String,
    /// The harness offered the reliable dialect on its handshake.
    offered: bool,
    /// The executor accepted it: the stream survives a lost socket.
    reliable: bool,
    /// Bumped whenever the harness side is lost, so a stale expiry does nothing.
    hold_epoch: u64,
}

#[derive(Debug, Default)]
struct Environment {
    registration: Option<Registration>,
    executor: Option<Link>,
    /// Bumped on every executor connect.
    executor_epoch: u64,
    streams: HashMap<String, Route>,
}

/// A message to put on a socket, decided under the lock, sent after it.
#[derive(Debug)]
pub struct Delivery {
    pub to: Link,
    pub bytes: Bytes,
}

/// What to do with a frame that arrived.
#[derive(Debug)]
pub enum Action {
    /// Forward the frame's bytes unchanged.
    Forward(Link),
    /// Answer the sender with this reset.
    Reply(Bytes),
    /// Ignore it.
    Drop,
}

/// A hold to expire later (see [`Hub::expire_harness_hold`]).
#[derive(Debug, Clone)]
pub struct HarnessHold {
    pub environment_id: String,
    pub stream_id: String,
    pub epoch: u64,
}

/// Every environment.
#[derive(Debug)]
pub struct Hub {
    environments: Mutex<HashMap<String, Environment>>,
    limits: HubLimits,
    next_socket: AtomicU64,
    next_epoch: AtomicU64,
}

fn reset(stream_id: &str, reason: &str) -> Bytes {
    Bytes::from(RelayMessageFrame::reset(stream_id, reason).to_bytes())
}

impl Hub {
    /// An empty hub.
    pub fn new(limits: HubLimits) -> Arc<Self> {
        Arc::new(Self {
            environments: Mutex::new(HashMap::new()),
            limits,
            next_socket: AtomicU64::new(1),
            next_epoch: AtomicU64::new(1),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> HubLimits {
        self.limits
    }

    /// A fresh socket id.
    pub fn socket_id(&self) -> u64 {
        self.next_socket.fetch_add(1, Ordering::Relaxed)
    }

    fn epoch(&self) -> u64 {
        self.next_epoch.fetch_add(1, Ordering::Relaxed)
    }

    /// Records a registration (replacing the previous one).
    pub fn register(&self, environment_id: &str, registration: Registration) {
        lock(&self.environments)
            .entry(environment_id.to_owned())
            .or_default()
            .registration = Some(registration);
    }

    /// The current registration of an environment.
    pub fn registration(&self, environment_id: &str) -> Option<Registration> {
        lock(&self.environments)
            .get(environment_id)
            .and_then(|env| env.registration.clone())
    }

    /// Whether an executor socket is connected for the environment.
    pub fn is_online(&self, environment_id: &str) -> bool {
        lock(&self.environments)
            .get(environment_id)
            .is_some_and(|env| env.executor.is_some())
    }

    /// Streams currently routed (all environments), for `/readyz`-style stats.
    pub fn stream_count(&self) -> usize {
        lock(&self.environments)
            .values()
            .map(|env| env.streams.len())
            .sum()
    }

    /// An executor socket connected; a previous one is told to close.
    pub fn executor_connected(&self, environment_id: &str, link: Link) {
        let epoch = self.epoch();
        let mut environments = lock(&self.environments);
        let env = environments.entry(environment_id.to_owned()).or_default();
        env.executor_epoch = epoch;
        if let Some(old) = env.executor.replace(link) {
            old.closer.notify_one();
        }
    }

    /// The executor socket `socket` ended. Reference-dialect streams are
    /// reset at once; reliable ones wait (the returned epoch is for
    /// [`expire_executor_hold`](Self::expire_executor_hold)).
    pub fn executor_gone(&self, environment_id: &str, socket: u64) -> (Vec<Delivery>, Option<u64>) {
        let mut environments = lock(&self.environments);
        let Some(env) = environments.get_mut(environment_id) else {
            return (Vec::new(), None);
        };
        if env.executor.as_ref().map(|l| l.socket) != Some(socket) {
            return (Vec::new(), None);
        }
        env.executor = None;
        let mut deliveries = Vec::new();
        env.streams.retain(|stream_id, route| {
            if route.reliable {
                return true;
            }
            if let Some(harness) = &route.harness {
                deliveries.push(Delivery {
                    to: harness.clone(),
                    bytes: reset(stream_id, RESET_EXECUTOR_GONE),
                });
            }
            false
        });
        let held = (!env.streams.is_empty()).then_some(env.executor_epoch);
        (deliveries, held)
    }

    /// The executor did not come back in time: reset what waited for it.
    pub fn expire_executor_hold(&self, environment_id: &str, epoch: u64) -> Vec<Delivery> {
        let mut environments = lock(&self.environments);
        let Some(env) = environments.get_mut(environment_id) else {
            return Vec::new();
        };
        if env.executor.is_some() || env.executor_epoch != epoch {
            return Vec::new();
        }
        let mut deliveries = Vec::new();
        for (stream_id, route) in env.streams.drain() {
            if let Some(harness) = route.harness {
                deliveries.push(Delivery {
                    to: harness,
                    bytes: reset(&stream_id, RESET_EXECUTOR_GONE),
                });
            }
        }
        deliveries
    }

    /// A frame from the executor socket `socket`.
    pub fn from_executor(&self, environment_id: &str, socket: u64, frame: &FrameHeader) -> Action {
        let mut environments = lock(&self.environments);
        let Some(env) = environments.get_mut(environment_id) else {
            return Action::Drop;
        };
        if env.executor.as_ref().map(|l| l.socket) != Some(socket) {
            return Action::Drop;
        }
        let Some(route) = env.streams.get_mut(&frame.stream_id) else {
            return Action::Drop;
        };
        match frame.body {
            Some(BodyKind::Handshake) => {
                route.reliable = route.offered && frame.ack_bits & FEATURE_RELIABLE != 0;
            }
            Some(BodyKind::Reset) => {
                let harness = route.harness.clone();
                env.streams.remove(&frame.stream_id);
                return harness.map_or(Action::Drop, Action::Forward);
            }
            _ => {}
        }
        route.harness.clone().map_or(Action::Drop, Action::Forward)
    }

    /// A frame from harness socket `link` holding a URL for `harness_key`.
    pub fn from_harness(
        &self,
        environment_id: &str,
        link: &Link,
        harness_key: &str,
        frame: &FrameHeader,
    ) -> Action {
        let limits = self.limits;
        let stream_id = frame.stream_id.as_str();
        let opens = matches!(frame.body, Some(BodyKind::Resume | BodyKind::Handshake));
        let mut environments = lock(&self.environments);
        // An environment nobody registered has no stream and no executor.
        let Some(env) = environments.get_mut(environment_id) else {
            let code = if opens {
                RESET_OFFLINE
            } else {
                RESET_UNKNOWN_STREAM
            };
            return Action::Reply(reset(stream_id, code));
        };
        // Counted only where a stream is claimed, not for every frame.
        let claimed_here = |streams: &HashMap<String, Route>| {
            streams
                .values()
                .filter(|r| r.harness.as_ref().is_some_and(|h| h.socket == link.socket))
                .count()
        };
        let holder = env.streams.get(stream_id).map(|route| {
            let held_here = route.harness.as_ref().map(|h| h.socket == link.socket);
            (held_here, route.harness_key == harness_key)
        });
        match holder {
            Some((Some(true), _)) => {}
            Some((Some(false), _) | (None, false)) => {
                return Action::Reply(reset(stream_id, RESET_STREAM_IN_USE))
            }
            Some((None, true)) => {
                if claimed_here(&env.streams) >= limits.streams_per_harness_socket {
                    return Action::Reply(reset(stream_id, RESET_STREAM_LIMIT));
                }
                // The harness came back: the stream is routed to it again.
                if let Some(route) = env.streams.get_mut(stream_id) {
                    route.harness = Some(link.clone());
                }
            }
            None => {
                if !opens {
                    return Action::Reply(reset(stream_id, RESET_UNKNOWN_STREAM));
                }
                if env.executor.is_none() {
                    return Action::Reply(reset(stream_id, RESET_OFFLINE));
                }
                if env.streams.len() >= limits.streams_per_environment
                    || claimed_here(&env.streams) >= limits.streams_per_harness_socket
                {
                    return Action::Reply(reset(stream_id, RESET_STREAM_LIMIT));
                }
                env.streams.insert(
                    stream_id.to_owned(),
                    Route {
                        harness: Some(link.clone()),
                        harness_key: harness_key.to_owned(),
                        offered: false,
                        reliable: false,
                        hold_epoch: 0,
                    },
                );
            }
        }
        let Some(route) = env.streams.get_mut(stream_id) else {
            return Action::Drop;
        };
        match frame.body {
            Some(BodyKind::Handshake) => {
                route.offered = frame.ack_bits & FEATURE_RELIABLE != 0;
                route.reliable = false;
            }
            // The harness closed the stream itself: nothing to hold.
            Some(BodyKind::Reset) => {
                env.streams.remove(stream_id);
            }
            _ => {}
        }
        match &env.executor {
            Some(executor) => Action::Forward(executor.clone()),
            // A reliable stream's executor is away: its frames are
            // retransmitted once it is back.
            None => Action::Drop,
        }
    }

    /// Harness socket `socket` ended: reference-dialect streams are reset
    /// towards the executor; reliable ones are held for the harness to
    /// return (see [`expire_harness_hold`](Self::expire_harness_hold)).
    pub fn harness_gone(
        &self,
        environment_id: &str,
        socket: u64,
    ) -> (Vec<Delivery>, Vec<HarnessHold>) {
        let mut environments = lock(&self.environments);
        let Some(env) = environments.get_mut(environment_id) else {
            return (Vec::new(), Vec::new());
        };
        let mut deliveries = Vec::new();
        let mut holds = Vec::new();
        let executor = env.executor.clone();
        let epoch = self.epoch();
        env.streams.retain(|stream_id, route| {
            if !route.harness.as_ref().is_some_and(|h| h.socket == socket) {
                return true;
            }
            if route.reliable {
                route.harness = None;
                route.hold_epoch = epoch;
                holds.push(HarnessHold {
                    environment_id: environment_id.to_owned(),
                    stream_id: stream_id.clone(),
                    epoch,
                });
                return true;
            }
            if let Some(executor) = &executor {
                deliveries.push(Delivery {
                    to: executor.clone(),
                    bytes: reset(stream_id, RESET_HARNESS_GONE),
                });
            }
            false
        });
        (deliveries, holds)
    }

    /// A held stream's harness did not return in time.
    pub fn expire_harness_hold(&self, hold: &HarnessHold) -> Vec<Delivery> {
        let mut environments = lock(&self.environments);
        let Some(env) = environments.get_mut(&hold.environment_id) else {
            return Vec::new();
        };
        let expired = env
            .streams
            .get(&hold.stream_id)
            .is_some_and(|r| r.harness.is_none() && r.hold_epoch == hold.epoch);
        if !expired {
            return Vec::new();
        }
        env.streams.remove(&hold.stream_id);
        env.executor
            .iter()
            .map(|executor| Delivery {
                to: executor.clone(),
                bytes: reset(&hold.stream_id, RESET_HARNESS_GONE),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::frame::Body;

    fn h(frame: RelayMessageFrame) -> FrameHeader {
        FrameHeader::peek(&frame.to_bytes()).unwrap()
    }

    fn hub() -> Arc<Hub> {
        Hub::new(HubLimits {
            streams_per_environment: 3,
            streams_per_harness_socket: 2,
            resume_hold: Duration::from_secs(1),
        })
    }

    fn link(hub: &Hub) -> (Link, mpsc::Receiver<Bytes>) {
        let (outbox, rx) = mpsc::channel(8);
        (
            Link {
                socket: hub.socket_id(),
                outbox,
                closer: Arc::new(Notify::new()),
            },
            rx,
        )
    }

    fn socket_of(action: &Action) -> Option<u64> {
        match action {
            Action::Forward(link) => Some(link.socket),
            _ => None,
        }
    }

    fn reply_reason(action: &Action) -> Option<String> {
        match action {
            Action::Reply(bytes) => match RelayMessageFrame::from_bytes(bytes).ok()?.body {
                Some(Body::Reset(r)) => Some(r.reason),
                _ => None,
            },
            _ => None,
        }
    }

    #[test]
    fn streams_are_claimed_by_resume_and_routed_both_ways() {
        let hub = hub();
        let (exec, _) = link(&hub);
        let (harn, _) = link(&hub);
        hub.executor_connected("e", exec.clone());
        let a = hub.from_harness("e", &harn, "k", &h(RelayMessageFrame::resume("s1", 0)));
        assert_eq!(socket_of(&a), Some(exec.socket));
        let back = hub.from_executor("e", exec.socket, &h(RelayMessageFrame::heartbeat("s1")));
        assert_eq!(socket_of(&back), Some(harn.socket));
        // Unknown streams from the executor are dropped.
        let none = hub.from_executor("e", exec.socket, &h(RelayMessageFrame::heartbeat("zz")));
        assert!(matches!(none, Action::Drop));
        // Data for a stream nobody claimed is refused.
        let data = RelayMessageFrame::data("s9", 0, 0, 1, vec![1]);
        assert_eq!(
            reply_reason(&hub.from_harness("e", &harn, "k", &h(data))).as_deref(),
            Some(RESET_UNKNOWN_STREAM)
        );
    }

    #[test]
    fn a_second_harness_cannot_claim_a_live_stream() {
        let hub = hub();
        let (exec, _) = link(&hub);
        let (first, _) = link(&hub);
        let (second, _) = link(&hub);
        hub.executor_connected("e", exec);
        hub.from_harness("e", &first, "k", &h(RelayMessageFrame::resume("s1", 0)));
        let stolen = hub.from_harness("e", &second, "k", &h(RelayMessageFrame::resume("s1", 0)));
        assert_eq!(reply_reason(&stolen).as_deref(), Some(RESET_STREAM_IN_USE));
    }

    #[test]
    fn offline_environment_and_limits_answer_with_resets() {
        let hub = hub();
        let (harn, _) = link(&hub);
        let offline = hub.from_harness("e", &harn, "k", &h(RelayMessageFrame::resume("s1", 0)));
        assert_eq!(reply_reason(&offline).as_deref(), Some(RESET_OFFLINE));
        let (exec, _) = link(&hub);
        hub.executor_connected("e", exec);
        for s in ["a", "b"] {
            assert!(socket_of(&hub.from_harness(
                "e",
                &harn,
                "k",
                &h(RelayMessageFrame::resume(s, 0))
            ))
            .is_some());
        }
        let third = hub.from_harness("e", &harn, "k", &h(RelayMessageFrame::resume("c", 0)));
        assert_eq!(reply_reason(&third).as_deref(), Some(RESET_STREAM_LIMIT));
    }

    #[test]
    fn reference_streams_reset_on_loss_and_reliable_ones_are_held() {
        let hub = hub();
        let (exec, _) = link(&hub);
        let (harn, _) = link(&hub);
        hub.executor_connected("e", exec.clone());
        // s-ref: plain handshake; s-rel: offered and accepted.
        hub.from_harness(
            "e",
            &harn,
            "k",
            &h(RelayMessageFrame::handshake("s-ref", vec![1], 0)),
        );
        hub.from_harness(
            "e",
            &harn,
            "k",
            &h(RelayMessageFrame::handshake(
                "s-rel",
                vec![1],
                FEATURE_RELIABLE,
            )),
        );
        hub.from_executor(
            "e",
            exec.socket,
            &h(RelayMessageFrame::handshake(
                "s-rel",
                vec![2],
                FEATURE_RELIABLE,
            )),
        );
        let (resets, holds) = hub.harness_gone("e", harn.socket);
        assert_eq!(resets.len(), 1);
        assert_eq!(resets[0].to.socket, exec.socket);
        assert_eq!(holds.len(), 1);
        // The harness comes back with the same key on a new socket.
        let (again, _) = link(&hub);
        let wrong_key = hub.from_harness(
            "e",
            &again,
            "other",
            &h(RelayMessageFrame::resume("s-rel", 3)),
        );
        assert_eq!(
            reply_reason(&wrong_key).as_deref(),
            Some(RESET_STREAM_IN_USE)
        );
        let resumed = hub.from_harness("e", &again, "k", &h(RelayMessageFrame::resume("s-rel", 3)));
        assert_eq!(socket_of(&resumed), Some(exec.socket));
        assert!(hub.expire_harness_hold(&holds[0]).is_empty(), "stale hold");
        // The executor goes: the reliable stream waits for it.
        let (resets, held) = hub.executor_gone("e", exec.socket);
        assert!(resets.is_empty());
        let epoch = held.unwrap();
        let resets = hub.expire_executor_hold("e", epoch);
        assert_eq!(resets.len(), 1);
        assert_eq!(resets[0].to.socket, again.socket);
        assert_eq!(hub.stream_count(), 0);
    }

    #[test]
    fn a_new_executor_socket_replaces_the_old_one() {
        let hub = hub();
        let (old, _) = link(&hub);
        let (new, _) = link(&hub);
        hub.executor_connected("e", old.clone());
        hub.executor_connected("e", new.clone());
        let (resets, held) = hub.executor_gone("e", old.socket);
        assert!(
            resets.is_empty() && held.is_none(),
            "the old socket's end changes nothing"
        );
        assert!(hub.is_online("e"));
    }
}
