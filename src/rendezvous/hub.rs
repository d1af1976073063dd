//! The rendezvous's routing state: per environment its registration, its
//! executor socket, its harness sockets and the streams they have claimed,
//! and the decisions for each frame (forward, answer with a reset, drop),
//! for each lost socket and for what waited too long (unused claims, idle
//! harness sockets). Streams and sockets are bounded per environment, per
//! harness socket and per harness token. Pure bookkeeping under one lock:
//! it never awaits and never looks inside a frame beyond `stream_id`, the
//! body kind and the handshake feature bits, so it never sees plaintext.
//! The sockets themselves are served by [`super::socket`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, Notify};
use tokio_tungstenite::tungstenite::Bytes;

use crate::metrics::rendezvous::{Census, HandshakeFailure, RendezvousMetrics};
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
/// Reset reason for a claimed stream whose handshake was not answered in time.
pub const RESET_CLAIM_EXPIRED: &str = "claim_expired";
/// Every reason the rendezvous resets a stream for.
const RESET_REASONS: [&str; 7] = [
    RESET_HARNESS_GONE,
    RESET_EXECUTOR_GONE,
    RESET_STREAM_IN_USE,
    RESET_OFFLINE,
    RESET_STREAM_LIMIT,
    RESET_UNKNOWN_STREAM,
    RESET_CLAIM_EXPIRED,
];
/// Handshakes of one harness socket the executor may refuse before the
/// socket is closed (the reference executor's budget, kept per harness
/// socket here so that one harness cannot spend it for the others).
pub const MAX_FAILED_HANDSHAKES: u32 = 8;

/// Limits the hub enforces.
#[derive(Debug, Clone, Copy)]
pub struct HubLimits {
    /// Streams one environment may have at once.
    pub streams_per_environment: usize,
    /// Streams one harness socket may claim at once.
    pub streams_per_harness_socket: usize,
    /// Streams, and harness sockets, one harness token may hold in one
    /// environment at once (without a token file nobody has a token, and
    /// this limit does not apply).
    pub streams_per_token: usize,
    /// How long a reliable stream waits for a lost side to come back.
    pub resume_hold: Duration,
    /// How long a claimed stream may wait for the executor's answer to its
    /// handshake, and a harness socket may hold no stream.
    pub claim_ttl: Duration,
    /// How long an environment without an executor socket (and without
    /// streams or harness sockets) is remembered.
    pub environment_ttl: Duration,
}

impl HubLimits {
    /// How often [`Hub::sweep`] should run: a quarter of the shortest
    /// expiry time, between 100 ms and 1 s.
    pub fn sweep_interval(&self) -> Duration {
        let shortest = self.claim_ttl.min(self.environment_ttl);
        (shortest / 4).clamp(Duration::from_millis(100), Duration::from_secs(1))
    }
}

/// Who a harness socket is, from its signed URL.
#[derive(Debug, Clone)]
pub struct HarnessId {
    /// Fingerprint of the harness key.
    pub key: String,
    /// The caller id of the token that asked for the URL; `None` without a
    /// token file.
    pub caller: Option<String>,
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
    /// The token that claimed it (see [`HarnessId::caller`]).
    caller: Option<String>,
    /// The harness offered the reliable dialect on its handshake.
    offered: bool,
    /// The executor accepted it: the stream survives a lost socket.
    reliable: bool,
    /// The executor answered the handshake: the claim was used.
    confirmed: bool,
    /// When it was claimed; an unconfirmed claim expires after the claim TTL.
    claimed_at: Instant,
    /// Bumped whenever the harness side is lost, so a stale expiry does nothing.
    hold_epoch: u64,
}

/// A connected harness socket.
#[derive(Debug)]
struct HarnessSocket {
    link: Link,
    caller: Option<String>,
    /// Since when it holds no stream (`None` while it holds one).
    idle_since: Option<Instant>,
    /// Its handshakes the executor refused (answered with a reset).
    failed_handshakes: u32,
}

#[derive(Debug, Default)]
struct Environment {
    registration: Option<Registration>,
    executor: Option<Link>,
    /// Bumped on every executor connect.
    executor_epoch: u64,
    streams: HashMap<String, Route>,
    harness_sockets: HashMap<u64, HarnessSocket>,
    /// Since when no executor socket is connected (`None` while one is).
    offline_since: Option<Instant>,
    /// Resets for the executor decided while its socket was away (a held
    /// stream whose harness did not come back), sent when it is back.
    undelivered: Vec<Bytes>,
}

impl Environment {
    /// The executor refused a handshake of `harness`: one failure more for
    /// that socket, which is closed once it has used up its budget.
    fn handshake_refused(&mut self, harness: &Link) {
        let Some(socket) = self.harness_sockets.get_mut(&harness.socket) else {
            return;
        };
        socket.failed_handshakes = socket.failed_handshakes.saturating_add(1);
        if socket.failed_handshakes >= MAX_FAILED_HANDSHAKES {
            tracing::warn!(
                socket = harness.socket,
                "closing a harness socket whose handshakes keep failing"
            );
            harness.closer.notify_one();
        }
    }

    /// Whether harness socket `socket` used up its handshake budget.
    fn out_of_handshakes(&self, socket: u64) -> bool {
        self.harness_sockets
            .get(&socket)
            .is_some_and(|s| s.failed_handshakes >= MAX_FAILED_HANDSHAKES)
    }

    /// Whether `caller` may hold one more stream (`sockets`: one more
    /// socket). Without a caller (no token file) there is no such limit.
    fn caller_has_room(&self, caller: Option<&str>, limit: usize, sockets: bool) -> bool {
        let Some(caller) = caller else {
            return true;
        };
        let held = if sockets {
            self.harness_sockets
                .values()
                .filter(|s| s.caller.as_deref() == Some(caller))
                .count()
        } else {
            self.streams
                .values()
                .filter(|r| r.caller.as_deref() == Some(caller))
                .count()
        };
        held < limit
    }
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
    /// Where resets and refused handshakes are counted.
    metrics: Arc<RendezvousMetrics>,
}

impl Hub {
    /// An empty hub counting into `metrics`.
    pub fn new(limits: HubLimits, metrics: Arc<RendezvousMetrics>) -> Arc<Self> {
        metrics.declare_reset_reasons(&RESET_REASONS);
        Arc::new(Self {
            environments: Mutex::new(HashMap::new()),
            limits,
            next_socket: AtomicU64::new(1),
            next_epoch: AtomicU64::new(1),
            metrics,
        })
    }

    /// The metrics of this rendezvous.
    pub fn metrics(&self) -> &RendezvousMetrics {
        &self.metrics
    }

    /// A reset frame the rendezvous sends, counted by reason.
    fn reset(&self, stream_id: &str, reason: &'static str) -> Bytes {
        self.metrics.reset_sent(reason);
        Bytes::from(RelayMessageFrame::reset(stream_id, reason).to_bytes())
    }

    /// Environments, connected executors and streams by state, for `/metrics`.
    pub fn census(&self) -> Census {
        let environments = lock(&self.environments);
        let mut census = Census {
            environments: environments.len(),
            ..Census::default()
        };
        for env in environments.values() {
            census.executors += usize::from(env.executor.is_some());
            for route in env.streams.values() {
                if route.harness.is_some() && env.executor.is_some() {
                    census.active_streams += 1;
                } else {
                    census.held_streams += 1;
                }
            }
        }
        census
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

    /// Records a registration of `executor_key` and returns its id. The
    /// same key registering again (the executor's periodic re-registration)
    /// keeps its id, so its socket, streams and handed-out bundles stay
    /// valid; another key replaces it under an id from `new_id`. Until its
    /// executor connects, the environment counts as offline from now.
    pub fn register(
        &self,
        environment_id: &str,
        executor_key: NoisePublicKey,
        new_id: impl FnOnce() -> String,
    ) -> String {
        let mut environments = lock(&self.environments);
        let env = environments.entry(environment_id.to_owned()).or_default();
        if let Some(current) = env
            .registration
            .as_ref()
            .filter(|current| current.executor_key == executor_key)
        {
            return current.id.clone();
        }
        let id = new_id();
        env.registration = Some(Registration {
            id: id.clone(),
            executor_key,
        });
        if env.executor.is_none() {
            env.offline_since = Some(Instant::now());
        }
        id
    }

    /// The current registration of an environment.
    pub fn registration(&self, environment_id: &str) -> Option<Registration> {
        lock(&self.environments)
            .get(environment_id)
            .and_then(|env| env.registration.clone())
    }

    /// Whether an executor socket is connected for the environment.
    #[cfg(test)]
    pub fn is_online(&self, environment_id: &str) -> bool {
        lock(&self.environments)
            .get(environment_id)
            .is_some_and(|env| env.executor.is_some())
    }

    /// Whether harnesses should get a bundle: the executor's socket is
    /// connected, or it is momentarily away while reliable streams wait
    /// for it (a harness of such a stream must be able to come back, so
    /// that the stream resumes as soon as the executor does).
    pub fn admits_harnesses(&self, environment_id: &str) -> bool {
        lock(&self.environments)
            .get(environment_id)
            .is_some_and(|env| env.executor.is_some() || !env.streams.is_empty())
    }

    /// Whether a harness socket of `caller` may open on the environment
    /// (checked before the upgrade is accepted).
    pub fn harness_may_connect(&self, environment_id: &str, caller: Option<&str>) -> bool {
        lock(&self.environments)
            .get(environment_id)
            .is_some_and(|env| env.caller_has_room(caller, self.limits.streams_per_token, true))
    }

    /// A harness socket connected. False when the environment is gone or
    /// its token already holds as many sockets as it may: the socket closes.
    pub fn harness_connected(&self, environment_id: &str, link: Link, who: &HarnessId) -> bool {
        let mut environments = lock(&self.environments);
        let Some(env) = environments.get_mut(environment_id) else {
            return false;
        };
        let caller = who.caller.as_deref();
        if !env.caller_has_room(caller, self.limits.streams_per_token, true) {
            return false;
        }
        env.harness_sockets.insert(
            link.socket,
            HarnessSocket {
                link,
                caller: who.caller.clone(),
                idle_since: Some(Instant::now()),
                failed_handshakes: 0,
            },
        );
        true
    }

    /// Environments known (registered and not yet forgotten), for `/readyz`.
    pub fn environment_count(&self) -> usize {
        lock(&self.environments).len()
    }

    /// Streams currently routed (all environments), for `/readyz`-style stats.
    pub fn stream_count(&self) -> usize {
        lock(&self.environments)
            .values()
            .map(|env| env.streams.len())
            .sum()
    }

    /// An executor socket connected; a previous one is told to close.
    /// Returns the resets decided while no executor socket was there.
    pub fn executor_connected(&self, environment_id: &str, link: Link) -> Vec<Delivery> {
        let epoch = self.epoch();
        let mut environments = lock(&self.environments);
        let env = environments.entry(environment_id.to_owned()).or_default();
        env.executor_epoch = epoch;
        env.offline_since = None;
        if let Some(old) = env.executor.replace(link.clone()) {
            old.closer.notify_one();
        }
        std::mem::take(&mut env.undelivered)
            .into_iter()
            .map(|bytes| Delivery {
                to: link.clone(),
                bytes,
            })
            .collect()
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
        env.offline_since = Some(Instant::now());
        let mut deliveries = Vec::new();
        env.streams.retain(|stream_id, route| {
            if route.reliable {
                return true;
            }
            if let Some(harness) = &route.harness {
                deliveries.push(Delivery {
                    to: harness.clone(),
                    bytes: self.reset(stream_id, RESET_EXECUTOR_GONE),
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
                    bytes: self.reset(&stream_id, RESET_EXECUTOR_GONE),
                });
            }
        }
        deliveries
    }

    /// A frame from the executor socket `socket`.
    pub fn on_executor_frame(
        &self,
        environment_id: &str,
        socket: u64,
        frame: &FrameHeader,
    ) -> Action {
        let mut environments = lock(&self.environments);
        let Some(env) = environments.get_mut(environment_id) else {
            return Action::Drop;
        };
        if env.executor.as_ref().map(|l| l.socket) != Some(socket) {
            return Action::Drop;
        }
        let Some(route) = env.streams.get_mut(&frame.stream_id) else {
            // A stream the executor resumes after a reconnect but that is
            // gone here (its hold expired, the rendezvous restarted): it
            // will not come back, say so.
            return match frame.body {
                Some(BodyKind::Resume) => {
                    Action::Reply(self.reset(&frame.stream_id, RESET_UNKNOWN_STREAM))
                }
                _ => Action::Drop,
            };
        };
        match frame.body {
            Some(BodyKind::Handshake) => {
                route.confirmed = true;
                route.reliable = route.offered && frame.ack_bits & FEATURE_RELIABLE != 0;
            }
            Some(BodyKind::Reset) => {
                let harness = route.harness.clone();
                let refused_handshake = !route.confirmed;
                env.streams.remove(&frame.stream_id);
                if let (true, Some(harness)) = (refused_handshake, &harness) {
                    self.metrics
                        .handshake_failed(HandshakeFailure::ExecutorRefused);
                    env.handshake_refused(harness);
                }
                return harness.map_or(Action::Drop, Action::Forward);
            }
            _ => {}
        }
        route.harness.clone().map_or(Action::Drop, Action::Forward)
    }

    /// A frame from harness socket `link`, whose URL names `who`.
    pub fn on_harness_frame(
        &self,
        environment_id: &str,
        link: &Link,
        who: &HarnessId,
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
            return Action::Reply(self.reset(stream_id, code));
        };
        // A socket closing for its failed handshakes sends nothing more.
        if env.out_of_handshakes(link.socket) {
            return Action::Drop;
        }
        // Counted only where a stream is claimed, not for every frame.
        let claimed_here = |streams: &HashMap<String, Route>| {
            streams
                .values()
                .filter(|r| r.harness.as_ref().is_some_and(|h| h.socket == link.socket))
                .count()
        };
        let holder = env.streams.get(stream_id).map(|route| {
            let held_here = route.harness.as_ref().map(|h| h.socket == link.socket);
            // A reliable stream's harness that comes back on a new socket
            // before its old one's loss was noticed here takes it over.
            let taken_over = route.reliable && held_here == Some(false);
            (
                held_here.filter(|_| !taken_over),
                route.harness_key == who.key,
            )
        });
        match holder {
            Some((Some(true), _)) => {}
            Some((Some(false), _) | (None, false)) => {
                return Action::Reply(self.reset(stream_id, RESET_STREAM_IN_USE))
            }
            Some((None, true)) => {
                if claimed_here(&env.streams) >= limits.streams_per_harness_socket {
                    return Action::Reply(self.reset(stream_id, RESET_STREAM_LIMIT));
                }
                // The harness came back: the stream is routed to it again.
                if let Some(route) = env.streams.get_mut(stream_id) {
                    route.harness = Some(link.clone());
                }
            }
            None => {
                if !opens {
                    return Action::Reply(self.reset(stream_id, RESET_UNKNOWN_STREAM));
                }
                if env.executor.is_none() {
                    return Action::Reply(self.reset(stream_id, RESET_OFFLINE));
                }
                let caller = who.caller.as_deref();
                if env.streams.len() >= limits.streams_per_environment
                    || claimed_here(&env.streams) >= limits.streams_per_harness_socket
                    || !env.caller_has_room(caller, limits.streams_per_token, false)
                {
                    return Action::Reply(self.reset(stream_id, RESET_STREAM_LIMIT));
                }
                env.streams.insert(
                    stream_id.to_owned(),
                    Route {
                        harness: Some(link.clone()),
                        harness_key: who.key.clone(),
                        caller: who.caller.clone(),
                        offered: false,
                        reliable: false,
                        confirmed: false,
                        claimed_at: Instant::now(),
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
        env.harness_sockets.remove(&socket);
        let mut deliveries = Vec::new();
        let mut holds = Vec::new();
        let executor = env.executor.clone();
        let epoch = self.epoch();
        env.streams.retain(|stream_id, route| {
            if route.harness.as_ref().is_none_or(|h| h.socket != socket) {
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
                    bytes: self.reset(stream_id, RESET_HARNESS_GONE),
                });
            }
            false
        });
        (deliveries, holds)
    }

    /// Expires what waited too long: claimed streams whose handshake the
    /// executor never answered are reset towards both sides, harness
    /// sockets without a stream are told to close (both after
    /// [`HubLimits::claim_ttl`]), and environments left with nothing
    /// connected are forgotten (after [`HubLimits::environment_ttl`]).
    pub fn sweep(&self, now: Instant) -> Vec<Delivery> {
        let ttl = self.limits.claim_ttl;
        let waited_too_long = |since: Instant| now.saturating_duration_since(since) >= ttl;
        let mut deliveries = Vec::new();
        let mut environments = lock(&self.environments);
        for env in environments.values_mut() {
            let executor = env.executor.clone();
            env.streams.retain(|stream_id, route| {
                let unused = !route.confirmed && waited_too_long(route.claimed_at);
                if unused {
                    let bytes = self.reset(stream_id, RESET_CLAIM_EXPIRED);
                    for to in route.harness.iter().chain(executor.iter()) {
                        deliveries.push(Delivery {
                            to: to.clone(),
                            bytes: bytes.clone(),
                        });
                    }
                }
                !unused
            });
            let busy: HashSet<u64> = env
                .streams
                .values()
                .filter_map(|route| route.harness.as_ref().map(|h| h.socket))
                .collect();
            for (id, socket) in &mut env.harness_sockets {
                if busy.contains(id) {
                    socket.idle_since = None;
                } else if waited_too_long(*socket.idle_since.get_or_insert(now)) {
                    socket.link.closer.notify_one();
                }
            }
        }
        let forgotten = |env: &Environment| {
            env.executor.is_none()
                && env.streams.is_empty()
                && env.harness_sockets.is_empty()
                && env.offline_since.is_some_and(|since| {
                    now.saturating_duration_since(since) >= self.limits.environment_ttl
                })
        };
        environments.retain(|_, env| !forgotten(env));
        deliveries
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
        let gone = self.reset(&hold.stream_id, RESET_HARNESS_GONE);
        match &env.executor {
            Some(executor) => vec![Delivery {
                to: executor.clone(),
                bytes: gone,
            }],
            // The executor's socket is momentarily away too: it gets the
            // reset when it is back (see `executor_connected`).
            None => {
                env.undelivered.push(gone);
                Vec::new()
            }
        }
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
        Hub::new(
            HubLimits {
                streams_per_environment: 3,
                streams_per_harness_socket: 2,
                streams_per_token: 2,
                resume_hold: Duration::from_secs(1),
                claim_ttl: Duration::from_secs(5),
                environment_ttl: Duration::from_secs(60),
            },
            RendezvousMetrics::new(),
        )
    }

    fn who(key: &str) -> HarnessId {
        HarnessId {
            key: key.into(),
            caller: None,
        }
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
        let a = hub.on_harness_frame(
            "e",
            &harn,
            &who("k"),
            &h(RelayMessageFrame::resume("s1", 0)),
        );
        assert_eq!(socket_of(&a), Some(exec.socket));
        let back = hub.on_executor_frame("e", exec.socket, &h(RelayMessageFrame::heartbeat("s1")));
        assert_eq!(socket_of(&back), Some(harn.socket));
        // Unknown streams from the executor are dropped.
        let none = hub.on_executor_frame("e", exec.socket, &h(RelayMessageFrame::heartbeat("zz")));
        assert!(matches!(none, Action::Drop));
        // Data for a stream nobody claimed is refused.
        let data = RelayMessageFrame::data("s9", 0, 0, 1, vec![1]);
        assert_eq!(
            reply_reason(&hub.on_harness_frame("e", &harn, &who("k"), &h(data))).as_deref(),
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
        hub.on_harness_frame(
            "e",
            &first,
            &who("k"),
            &h(RelayMessageFrame::resume("s1", 0)),
        );
        let stolen = hub.on_harness_frame(
            "e",
            &second,
            &who("k"),
            &h(RelayMessageFrame::resume("s1", 0)),
        );
        assert_eq!(reply_reason(&stolen).as_deref(), Some(RESET_STREAM_IN_USE));
    }

    #[test]
    fn offline_environment_and_limits_answer_with_resets() {
        let hub = hub();
        let (harn, _) = link(&hub);
        let offline = hub.on_harness_frame(
            "e",
            &harn,
            &who("k"),
            &h(RelayMessageFrame::resume("s1", 0)),
        );
        assert_eq!(reply_reason(&offline).as_deref(), Some(RESET_OFFLINE));
        let (exec, _) = link(&hub);
        hub.executor_connected("e", exec);
        for s in ["a", "b"] {
            assert!(socket_of(&hub.on_harness_frame(
                "e",
                &harn,
                &who("k"),
                &h(RelayMessageFrame::resume(s, 0))
            ))
            .is_some());
        }
        let third =
            hub.on_harness_frame("e", &harn, &who("k"), &h(RelayMessageFrame::resume("c", 0)));
        assert_eq!(reply_reason(&third).as_deref(), Some(RESET_STREAM_LIMIT));
    }

    #[test]
    fn reference_streams_reset_on_loss_and_reliable_ones_are_held() {
        let hub = hub();
        let (exec, _) = link(&hub);
        let (harn, _) = link(&hub);
        hub.executor_connected("e", exec.clone());
        // s-ref: plain handshake; s-rel: offered and accepted.
        hub.on_harness_frame(
            "e",
            &harn,
            &who("k"),
            &h(RelayMessageFrame::handshake("s-ref", vec![1], 0)),
        );
        hub.on_harness_frame(
            "e",
            &harn,
            &who("k"),
            &h(RelayMessageFrame::handshake(
                "s-rel",
                vec![1],
                FEATURE_RELIABLE,
            )),
        );
        hub.on_executor_frame(
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
        let wrong_key = hub.on_harness_frame(
            "e",
            &again,
            &who("other"),
            &h(RelayMessageFrame::resume("s-rel", 3)),
        );
        assert_eq!(
            reply_reason(&wrong_key).as_deref(),
            Some(RESET_STREAM_IN_USE)
        );
        let resumed = hub.on_harness_frame(
            "e",
            &again,
            &who("k"),
            &h(RelayMessageFrame::resume("s-rel", 3)),
        );
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
    fn a_token_holds_its_share_and_its_unused_claims_expire() {
        use futures_util::FutureExt;
        let hub = hub();
        let (exec, _) = link(&hub);
        hub.executor_connected("e", exec.clone());
        let greedy = HarnessId {
            key: "k".into(),
            caller: Some("greedy".into()),
        };
        let other = HarnessId {
            key: "k2".into(),
            caller: Some("other".into()),
        };
        let (a, _) = link(&hub);
        let (b, _) = link(&hub);
        let (c, _) = link(&hub);
        assert!(hub.harness_connected("e", a.clone(), &greedy));
        assert!(hub.harness_connected("e", b.clone(), &greedy));
        assert!(!hub.harness_may_connect("e", Some("greedy")));
        assert!(
            !hub.harness_connected("e", c.clone(), &greedy),
            "a third socket"
        );
        assert!(hub.harness_connected("e", c.clone(), &other));
        for s in ["s1", "s2"] {
            let claim = hub.on_harness_frame("e", &a, &greedy, &h(RelayMessageFrame::resume(s, 0)));
            assert_eq!(socket_of(&claim), Some(exec.socket));
        }
        let third = hub.on_harness_frame("e", &b, &greedy, &h(RelayMessageFrame::resume("s3", 0)));
        assert_eq!(reply_reason(&third).as_deref(), Some(RESET_STREAM_LIMIT));
        let others = hub.on_harness_frame("e", &c, &other, &h(RelayMessageFrame::resume("o1", 0)));
        assert_eq!(socket_of(&others), Some(exec.socket));

        // s1's handshake is answered: the claim was used. s2 and o1 expire.
        hub.on_executor_frame(
            "e",
            exec.socket,
            &h(RelayMessageFrame::handshake("s1", vec![2], 0)),
        );
        assert!(hub.sweep(Instant::now()).is_empty());
        let resets = hub.sweep(Instant::now() + Duration::from_secs(5));
        let mut to: Vec<u64> = resets.iter().map(|d| d.to.socket).collect();
        to.sort_unstable();
        assert_eq!(to, vec![exec.socket, exec.socket, a.socket, c.socket]);
        assert_eq!(hub.stream_count(), 1);
        // b never held a stream: it is told to close; a still holds s1.
        assert!(b.closer.notified().now_or_never().is_some());
        assert!(a.closer.notified().now_or_never().is_none());
    }

    #[test]
    fn refused_handshakes_close_only_the_harness_socket_that_sent_them() {
        use futures_util::FutureExt;
        let limits = HubLimits {
            streams_per_harness_socket: 100,
            streams_per_environment: 100,
            ..hub().limits()
        };
        let hub = Hub::new(limits, RendezvousMetrics::new());
        let (exec, _) = link(&hub);
        hub.executor_connected("e", exec.clone());
        let (good, _) = link(&hub);
        let (bad, _) = link(&hub);
        assert!(hub.harness_connected("e", good.clone(), &who("k")));
        assert!(hub.harness_connected("e", bad.clone(), &who("k2")));
        for i in 0..MAX_FAILED_HANDSHAKES {
            let stream = format!("bad-{i}");
            let sent = hub.on_harness_frame(
                "e",
                &bad,
                &who("k2"),
                &h(RelayMessageFrame::handshake(&stream, vec![1], 0)),
            );
            assert_eq!(socket_of(&sent), Some(exec.socket));
            assert!(bad.closer.notified().now_or_never().is_none());
            let refused = hub.on_executor_frame(
                "e",
                exec.socket,
                &h(RelayMessageFrame::reset(
                    &stream,
                    "noise_relay_protocol_error",
                )),
            );
            assert_eq!(socket_of(&refused), Some(bad.socket));
        }
        assert!(bad.closer.notified().now_or_never().is_some());
        let more = hub.on_harness_frame(
            "e",
            &bad,
            &who("k2"),
            &h(RelayMessageFrame::handshake("bad-9", vec![1], 0)),
        );
        assert!(
            matches!(more, Action::Drop),
            "nothing more reaches the executor"
        );
        // Resets of streams whose handshake was answered are no failures.
        for i in 0..MAX_FAILED_HANDSHAKES {
            let stream = format!("ok-{i}");
            let handshake = |body| h(RelayMessageFrame::handshake(&stream, body, 0));
            hub.on_harness_frame("e", &good, &who("k"), &handshake(vec![1]));
            hub.on_executor_frame("e", exec.socket, &handshake(vec![2]));
            let reset = RelayMessageFrame::reset(&stream, "noise_relay_protocol_error");
            hub.on_executor_frame("e", exec.socket, &h(reset));
        }
        assert!(good.closer.notified().now_or_never().is_none());
        assert!(hub.is_online("e"));
    }

    #[test]
    fn environments_without_an_executor_are_forgotten() {
        let hub = hub();
        let key = |x: &str| NoisePublicKey {
            suite: String::new(),
            x25519_public_key: x.into(),
            mlkem768_public_key: String::new(),
        };
        for env in ["never", "live", "gone"] {
            hub.register(env, key("a"), || "reg".into());
        }
        // The same key again keeps its registration; another key replaces it.
        assert_eq!(hub.register("live", key("a"), || "reg-2".into()), "reg");
        assert_eq!(hub.register("never", key("b"), || "reg-3".into()), "reg-3");
        assert_eq!(
            hub.registration("never").map(|r| r.id).as_deref(),
            Some("reg-3")
        );
        let (live, _) = link(&hub);
        let (gone, _) = link(&hub);
        hub.executor_connected("live", live);
        hub.executor_connected("gone", gone.clone());
        assert_eq!(hub.environment_count(), 3);
        let minute = Instant::now() + Duration::from_secs(60);
        hub.sweep(minute);
        assert_eq!(hub.environment_count(), 2, "the one never connected");
        hub.executor_gone("gone", gone.socket);
        hub.sweep(minute);
        assert_eq!(hub.environment_count(), 2, "not yet");
        hub.sweep(minute + Duration::from_secs(60));
        assert_eq!(hub.environment_count(), 1);
        assert!(hub.is_online("live"));
    }

    #[test]
    fn a_held_stream_outlives_a_momentary_executor_loss_and_its_expiry_reaches_it_later() {
        let hub = hub();
        let (exec, _) = link(&hub);
        let (harn, _) = link(&hub);
        hub.executor_connected("e", exec.clone());
        assert!(hub.admits_harnesses("e"));
        let offer = RelayMessageFrame::handshake("s", vec![1], FEATURE_RELIABLE);
        hub.on_harness_frame("e", &harn, &who("k"), &h(offer));
        let accept = RelayMessageFrame::handshake("s", vec![2], FEATURE_RELIABLE);
        hub.on_executor_frame("e", exec.socket, &h(accept));

        // Both sockets are cut; the stream is held for both.
        let (_, held) = hub.executor_gone("e", exec.socket);
        assert!(held.is_some());
        let (_, holds) = hub.harness_gone("e", harn.socket);
        assert!(!hub.is_online("e"));
        assert!(
            hub.admits_harnesses("e"),
            "a harness may fetch a bundle to come back to its held stream"
        );
        // The harness does not return in time, while the executor is away.
        assert!(hub.expire_harness_hold(&holds[0]).is_empty());
        assert!(!hub.admits_harnesses("e"), "nothing is held any more");
        // The executor comes back: it learns at once.
        let (again, _) = link(&hub);
        let resets = hub.executor_connected("e", again.clone());
        assert_eq!(resets.len(), 1);
        assert_eq!(resets[0].to.socket, again.socket);
        let frame = RelayMessageFrame::from_bytes(&resets[0].bytes).unwrap();
        assert!(matches!(frame.body, Some(Body::Reset(r)) if r.reason == RESET_HARNESS_GONE));
        assert!(hub.executor_connected("e", again).is_empty(), "only once");
    }

    #[test]
    fn a_reliable_streams_harness_back_on_a_new_socket_takes_it_over() {
        let hub = hub();
        let (exec, _) = link(&hub);
        hub.executor_connected("e", exec.clone());
        let (old, _) = link(&hub);
        for (stream, features) in [("rel", FEATURE_RELIABLE), ("ref", 0)] {
            let offer = RelayMessageFrame::handshake(stream, vec![1], features);
            hub.on_harness_frame("e", &old, &who("k"), &h(offer));
            let accept = RelayMessageFrame::handshake(stream, vec![2], features);
            hub.on_executor_frame("e", exec.socket, &h(accept));
        }
        // The old socket is dead but its close was not seen yet; the
        // harness resumes on a new one.
        let (new, _) = link(&hub);
        let resume = |stream| h(RelayMessageFrame::resume(stream, 4));
        let stranger = hub.on_harness_frame("e", &new, &who("other"), &resume("rel"));
        assert_eq!(
            reply_reason(&stranger).as_deref(),
            Some(RESET_STREAM_IN_USE)
        );
        let reference = hub.on_harness_frame("e", &new, &who("k"), &resume("ref"));
        assert_eq!(
            reply_reason(&reference).as_deref(),
            Some(RESET_STREAM_IN_USE)
        );
        let back = hub.on_harness_frame("e", &new, &who("k"), &resume("rel"));
        assert_eq!(socket_of(&back), Some(exec.socket));
        let to_harness =
            hub.on_executor_frame("e", exec.socket, &h(RelayMessageFrame::heartbeat("rel")));
        assert_eq!(socket_of(&to_harness), Some(new.socket));
        // The old socket's close, seen late, leaves the stream alone.
        let (resets, holds) = hub.harness_gone("e", old.socket);
        assert_eq!(resets.len(), 1, "only the reference stream is reset");
        assert!(holds.is_empty());
        assert_eq!(hub.stream_count(), 1);
    }

    #[test]
    fn an_executor_resuming_a_stream_that_is_gone_gets_a_reset() {
        let hub = hub();
        let (exec, _) = link(&hub);
        hub.executor_connected("e", exec.clone());
        let resume =
            hub.on_executor_frame("e", exec.socket, &h(RelayMessageFrame::resume("old", 9)));
        assert_eq!(reply_reason(&resume).as_deref(), Some(RESET_UNKNOWN_STREAM));
        // Other frames of unknown streams are still dropped silently.
        let data = RelayMessageFrame::data("old", 9, 0, 1, vec![1]);
        assert!(matches!(
            hub.on_executor_frame("e", exec.socket, &h(data)),
            Action::Drop
        ));
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
