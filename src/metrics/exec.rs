//! The figures of the exec-server: processes started, running and exited
//! by result, how long a sandboxed start takes, sandbox denials, session
//! resumes, `fs/*` calls by method and result, and the network proxy's
//! allow/deny decisions. Each is bumped where it happens; the server's
//! shared state holds the one instance.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// Bucket bounds of the sandbox start histogram, in seconds: 0.5 ms to 1 s.
pub const START_BUCKETS: [f64; 11] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StartLabels {
    sandboxed: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FsLabels {
    method: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    decision: &'static str,
}

/// Every result label of an ended process.
const EXIT_RESULTS: [&str; 6] = [
    "success",
    "failure",
    "not_executable",
    "not_found",
    "signal",
    FAILED_TO_START,
];
/// The result label of a process that could not be launched.
const FAILED_TO_START: &str = "failed_to_start";

/// The result label of an exit with `code`, or by `signal`.
fn exit_result(code: i32, signal: Option<i32>) -> &'static str {
    match (signal, code) {
        (Some(_), _) => "signal",
        (None, 0) => "success",
        (None, 126) => "not_executable",
        (None, 127) => "not_found",
        (None, _) => "failure",
    }
}

fn ok_or_error(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "error"
    }
}

/// The metrics of one exec-server.
#[derive(Debug)]
pub struct ExecMetrics {
    registry: Registry,
    started: Family<StartLabels, Counter>,
    running: Gauge,
    exited: Family<ResultLabels, Counter>,
    sandbox_start: Histogram,
    sandbox_denials: Counter,
    resumes: Family<ResultLabels, Counter>,
    fs_calls: Family<FsLabels, Counter>,
    proxy_decisions: Family<DecisionLabels, Counter>,
}

impl ExecMetrics {
    /// Every figure at zero, registered under `codexbox_exec_`;
    /// `fs_methods` are the `fs/*` methods the server answers.
    pub fn new(fs_methods: &[&'static str]) -> Arc<Self> {
        let mut registry = Registry::with_prefix("codexbox_exec");
        let started = Family::<StartLabels, Counter>::default();
        registry.register(
            "processes_started",
            "Processes started by process/start, by whether they run sandboxed",
            started.clone(),
        );
        let running = Gauge::default();
        registry.register(
            "processes_running",
            "Processes started whose exit is not known yet",
            running.clone(),
        );
        let exited = Family::<ResultLabels, Counter>::default();
        registry.register(
            "processes_exited",
            "Processes that ended, by result (success, failure, not_executable, not_found, signal, failed_to_start)",
            exited.clone(),
        );
        let sandbox_start = Histogram::new(START_BUCKETS);
        registry.register_with_unit(
            "sandbox_start",
            "Time process/start took to prepare and launch a sandboxed command",
            Unit::Seconds,
            sandbox_start.clone(),
        );
        let sandbox_denials = Counter::default();
        registry.register(
            "sandbox_denials",
            "Sandboxed processes whose exit was reported as a sandbox denial",
            sandbox_denials.clone(),
        );
        let resumes = Family::<ResultLabels, Counter>::default();
        registry.register(
            "session_resumes",
            "Sessions resumed by initialize, by result (ok, refused)",
            resumes.clone(),
        );
        let fs_calls = Family::<FsLabels, Counter>::default();
        registry.register(
            "fs_calls",
            "fs/* calls answered, by method and result (ok, error)",
            fs_calls.clone(),
        );
        let proxy_decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "proxy_decisions",
            "Destinations the managed network proxy allowed or denied",
            proxy_decisions.clone(),
        );
        for sandboxed in ["true", "false"] {
            super::declare(&started, StartLabels { sandboxed });
        }
        for result in EXIT_RESULTS {
            super::declare(&exited, ResultLabels { result });
        }
        for result in ["ok", "refused"] {
            super::declare(&resumes, ResultLabels { result });
        }
        for &method in fs_methods {
            for result in ["ok", "error"] {
                super::declare(&fs_calls, FsLabels { method, result });
            }
        }
        for decision in ["allow", "deny"] {
            super::declare(&proxy_decisions, DecisionLabels { decision });
        }
        Arc::new(Self {
            registry,
            started,
            running,
            exited,
            sandbox_start,
            sandbox_denials,
            resumes,
            fs_calls,
            proxy_decisions,
        })
    }

    /// A process started; `sandbox_start` is how long a sandboxed one took.
    pub fn process_started(&self, sandbox_start: Option<Duration>) {
        let sandboxed = if sandbox_start.is_some() {
            "true"
        } else {
            "false"
        };
        self.started.get_or_create(&StartLabels { sandboxed }).inc();
        self.running.inc();
        if let Some(took) = sandbox_start {
            self.sandbox_start.observe(took.as_secs_f64());
        }
    }

    /// A started process exited with `code` or by `signal`; `denied`: the
    /// sandbox denied it.
    pub fn process_exited(&self, code: i32, signal: Option<i32>, denied: bool) {
        self.running.dec();
        let result = exit_result(code, signal);
        self.exited.get_or_create(&ResultLabels { result }).inc();
        if denied {
            self.sandbox_denials.inc();
        }
    }

    /// A process could not be launched.
    pub fn process_failed_to_start(&self) {
        let result = FAILED_TO_START;
        self.exited.get_or_create(&ResultLabels { result }).inc();
    }

    /// An `initialize` asked to resume a session.
    pub fn session_resume(&self, ok: bool) {
        let result = if ok { "ok" } else { "refused" };
        self.resumes.get_or_create(&ResultLabels { result }).inc();
    }

    /// An `fs/*` call (`method`, one of the server's method names) was answered.
    pub fn fs_call(&self, method: &'static str, ok: bool) {
        let result = ok_or_error(ok);
        self.fs_calls
            .get_or_create(&FsLabels { method, result })
            .inc();
    }

    /// The managed network proxy decided on a destination.
    pub fn proxy_decision(&self, allowed: bool) {
        let decision = if allowed { "allow" } else { "deny" };
        self.proxy_decisions
            .get_or_create(&DecisionLabels { decision })
            .inc();
    }

    /// The exposition.
    pub fn render(&self) -> String {
        super::render(&self.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_are_classed_by_code_and_signal() {
        assert_eq!(exit_result(0, None), "success");
        assert_eq!(exit_result(1, None), "failure");
        assert_eq!(exit_result(127, None), "not_found");
        assert_eq!(exit_result(126, None), "not_executable");
        assert_eq!(exit_result(137, Some(9)), "signal");
    }

    #[test]
    fn figures_render_with_prometheus_names() {
        let metrics = ExecMetrics::new(&["fs/readFile", "fs/remove"]);
        metrics.process_started(Some(Duration::from_millis(3)));
        metrics.process_started(None);
        metrics.process_exited(0, None, false);
        metrics.process_exited(1, None, true);
        metrics.process_failed_to_start();
        metrics.session_resume(true);
        metrics.session_resume(false);
        metrics.fs_call("fs/readFile", true);
        metrics.proxy_decision(false);
        let text = metrics.render();
        for line in [
            "codexbox_exec_processes_started_total{sandboxed=\"true\"} 1",
            "codexbox_exec_processes_started_total{sandboxed=\"false\"} 1",
            "codexbox_exec_processes_running 0",
            "codexbox_exec_processes_exited_total{result=\"failure\"} 1",
            "codexbox_exec_processes_exited_total{result=\"failed_to_start\"} 1",
            "codexbox_exec_sandbox_denials_total 1",
            "# TYPE codexbox_exec_sandbox_start_seconds histogram",
            "codexbox_exec_sandbox_start_seconds_bucket{le=\"0.0025\"} 0",
            "codexbox_exec_sandbox_start_seconds_bucket{le=\"0.005\"} 1",
            "codexbox_exec_sandbox_start_seconds_count 1",
            "codexbox_exec_session_resumes_total{result=\"ok\"} 1",
            "codexbox_exec_session_resumes_total{result=\"refused\"} 1",
            "codexbox_exec_fs_calls_total{method=\"fs/readFile\",result=\"ok\"} 1",
            "codexbox_exec_fs_calls_total{method=\"fs/remove\",result=\"error\"} 0",
            "codexbox_exec_processes_exited_total{result=\"signal\"} 0",
            "codexbox_exec_proxy_decisions_total{decision=\"deny\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
