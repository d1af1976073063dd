//! The figures of `codexbox rendezvous`: registry calls by call and result,
//! relayed bytes by direction, the resets it sends by reason, refused relay
//! handshakes by reason (counters, bumped where each happens), and the
//! environments, connected executors and active and held streams (gauges,
//! taken from the hub's state at each scrape so they can never drift).

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// Labels of a registry call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    /// `register`, `connect` or `validate`.
    call: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    state: &'static str,
}

/// Which way relayed bytes went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From a harness socket to the executor's.
    ToExecutor,
    /// From the executor socket to a harness's.
    ToHarness,
}

/// Why a relay socket was refused before it carried anything, or a stream's
/// Noise handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The relay URL lacks its signature or a parameter.
    UrlMissing,
    /// The relay URL's signature does not match.
    UrlForged,
    /// The relay URL has expired.
    UrlExpired,
    /// The relay URL belongs to a previous registration.
    StaleRegistration,
    /// The token already holds as many harness sockets as it may.
    TooManySockets,
    /// The request was not a WebSocket upgrade.
    NotWebSocket,
    /// The executor answered a stream's handshake with a reset.
    ExecutorRefused,
}

impl HandshakeFailure {
    const ALL: [Self; 7] = [
        Self::UrlMissing,
        Self::UrlForged,
        Self::UrlExpired,
        Self::StaleRegistration,
        Self::TooManySockets,
        Self::NotWebSocket,
        Self::ExecutorRefused,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::UrlMissing => "url_missing",
            Self::UrlForged => "url_forged",
            Self::UrlExpired => "url_expired",
            Self::StaleRegistration => "stale_registration",
            Self::TooManySockets => "too_many_sockets",
            Self::NotWebSocket => "not_websocket",
            Self::ExecutorRefused => "executor_refused",
        }
    }
}

/// The hub's state at one instant (see `Hub::census`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    /// Environments remembered (registered and not yet forgotten).
    pub environments: usize,
    /// Environments whose executor socket is connected.
    pub executors: usize,
    /// Streams routed between two connected sockets.
    pub active_streams: usize,
    /// Reliable streams waiting for a lost side to come back.
    pub held_streams: usize,
}

/// The registry calls, by their path segment.
const CALLS: [&str; 3] = ["register", "connect", "validate"];
/// Every result label of a registry call (see [`call_result`]).
const CALL_RESULTS: [&str; 8] = [
    "ok",
    "invalid_request",
    "unauthorized",
    "forbidden",
    "timeout",
    "offline",
    "rate_limited",
    "error",
];

/// The result label of a registry call answered with `status`.
fn call_result(status: u16) -> &'static str {
    match status {
        200..=299 => "ok",
        400 | 405 | 411 | 413 => "invalid_request",
        401 => "unauthorized",
        403 => "forbidden",
        408 => "timeout",
        409 => "offline",
        429 => "rate_limited",
        _ => "error",
    }
}

/// The metrics of one rendezvous.
#[derive(Debug)]
pub struct RendezvousMetrics {
    registry: Registry,
    registry_calls: Family<CallLabels, Counter>,
    relay_bytes: Family<DirectionLabels, Counter>,
    resets: Family<ReasonLabels, Counter>,
    handshake_failures: Family<ReasonLabels, Counter>,
    environments: Gauge,
    executors: Gauge,
    streams: Family<StreamLabels, Gauge>,
}

impl RendezvousMetrics {
    /// Every figure at zero, registered under `codexbox_rendezvous_`.
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("codexbox_rendezvous");
        let registry_calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "registry_calls",
            "Registry API calls answered, by call (register, connect, validate) and result",
            registry_calls.clone(),
        );
        let relay_bytes = Family::<DirectionLabels, Counter>::default();
        registry.register_with_unit(
            "relay",
            "Bytes of relay frames forwarded between sockets, by direction (to_executor, to_harness)",
            Unit::Bytes,
            relay_bytes.clone(),
        );
        let resets = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "stream_resets",
            "Stream resets the rendezvous itself sent, by reason",
            resets.clone(),
        );
        let handshake_failures = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "handshake_failures",
            "Relay sockets refused at the upgrade and stream handshakes the executor refused, by reason",
            handshake_failures.clone(),
        );
        let environments = Gauge::default();
        registry.register(
            "environments",
            "Environments remembered (registered and not yet forgotten)",
            environments.clone(),
        );
        let executors = Gauge::default();
        registry.register(
            "executors_connected",
            "Environments whose executor socket is connected",
            executors.clone(),
        );
        let streams = Family::<StreamLabels, Gauge>::default();
        registry.register(
            "streams",
            "Streams by state: active (both sides connected) or held (a reliable stream waiting for a lost side)",
            streams.clone(),
        );
        for call in CALLS {
            for result in CALL_RESULTS {
                super::declare(&registry_calls, CallLabels { call, result });
            }
        }
        for direction in ["to_executor", "to_harness"] {
            super::declare(&relay_bytes, DirectionLabels { direction });
        }
        for failure in HandshakeFailure::ALL {
            let reason = failure.label();
            super::declare(&handshake_failures, ReasonLabels { reason });
        }
        Arc::new(Self {
            registry,
            registry_calls,
            relay_bytes,
            resets,
            handshake_failures,
            environments,
            executors,
            streams,
        })
    }

    /// A registry call `call` was answered with `status`.
    pub fn registry_call(&self, call: &'static str, status: u16) {
        let result = call_result(status);
        self.registry_calls
            .get_or_create(&CallLabels { call, result })
            .inc();
    }

    /// A frame of `bytes` bytes was forwarded.
    pub fn relayed(&self, direction: Direction, bytes: usize) {
        let direction = match direction {
            Direction::ToExecutor => "to_executor",
            Direction::ToHarness => "to_harness",
        };
        self.relay_bytes
            .get_or_create(&DirectionLabels { direction })
            .inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// Makes the reset series of `reasons` exist (at zero) before any is sent.
    pub fn declare_reset_reasons(&self, reasons: &[&'static str]) {
        for &reason in reasons {
            super::declare(&self.resets, ReasonLabels { reason });
        }
    }

    /// The rendezvous sent a reset with `reason` (one of the hub's
    /// `RESET_*` reasons).
    pub fn reset_sent(&self, reason: &'static str) {
        self.resets.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// A relay socket or a stream handshake failed.
    pub fn handshake_failed(&self, failure: HandshakeFailure) {
        let reason = failure.label();
        self.handshake_failures
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// The exposition, with the gauges taken from `census`.
    pub fn render(&self, census: Census) -> String {
        let set = |gauge: &Gauge, value: usize| {
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set(&self.environments, census.environments);
        set(&self.executors, census.executors);
        let streams = |state| self.streams.get_or_create(&StreamLabels { state }).clone();
        set(&streams("active"), census.active_streams);
        set(&streams("held"), census.held_streams);
        super::render(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_render_with_prometheus_names() {
        let metrics = RendezvousMetrics::new();
        metrics.registry_call("register", 200);
        metrics.registry_call("connect", 409);
        metrics.relayed(Direction::ToHarness, 40);
        metrics.reset_sent("environment_offline");
        metrics.handshake_failed(HandshakeFailure::UrlForged);
        let text = metrics.render(Census {
            environments: 2,
            executors: 1,
            active_streams: 3,
            held_streams: 1,
        });
        for line in [
            "# TYPE codexbox_rendezvous_registry_calls_total counter",
            "codexbox_rendezvous_registry_calls_total{call=\"register\",result=\"ok\"} 1",
            "codexbox_rendezvous_registry_calls_total{call=\"connect\",result=\"offline\"} 1",
            "codexbox_rendezvous_relay_bytes_total{direction=\"to_harness\"} 40",
            "codexbox_rendezvous_stream_resets_total{reason=\"environment_offline\"} 1",
            "codexbox_rendezvous_handshake_failures_total{reason=\"url_forged\"} 1",
            "codexbox_rendezvous_handshake_failures_total{reason=\"url_expired\"} 0",
            "codexbox_rendezvous_registry_calls_total{call=\"validate\",result=\"ok\"} 0",
            "codexbox_rendezvous_environments 2",
            "codexbox_rendezvous_executors_connected 1",
            "codexbox_rendezvous_streams{state=\"active\"} 3",
            "codexbox_rendezvous_streams{state=\"held\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }

    #[test]
    fn statuses_map_to_few_results() {
        assert_eq!(call_result(200), "ok");
        assert_eq!(call_result(413), "invalid_request");
        assert_eq!(call_result(429), "rate_limited");
        assert_eq!(call_result(503), "error");
    }
}
