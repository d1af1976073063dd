//! How the server stops. SIGINT stops it at once; SIGTERM drains it first
//! when `--drain-grace-secs` is set: no new connection or relay stream is
//! taken and no new process started, running processes get up to the grace
//! period to finish, and clients get a moment to read how they ended.
//! Then (or on a second signal, or when the grace period is over) every
//! process tree is killed as on any shutdown. With no grace period SIGTERM
//! stops at once too.
//!
//! The transports decide what "no new connection" means for them (the
//! listener is dropped; the executor resets new streams); this module owns
//! the waiting (the signals are `startup::stop_signal`).

use std::future::Future;
use std::time::Duration;

use super::session::Registry;

/// How often the drain looks at what is still running.
const DRAIN_POLL: Duration = Duration::from_millis(50);
/// How long clients get to read the end of their processes after the last
/// one closed, while any session is still attached.
pub const DRAIN_FLUSH: Duration = Duration::from_secs(2);

pub use crate::startup::Stop;

/// Drains `registry` for up to `grace` (nothing when it is zero): refuses
/// new processes, waits for the running ones to close, then gives attached
/// clients [`DRAIN_FLUSH`] to take the last events and go. `interrupt`
/// (a second signal) ends the drain early.
pub async fn drain(registry: &Registry, grace: Duration, interrupt: impl Future<Output = ()>) {
    if grace.is_zero() {
        return;
    }
    registry.start_draining();
    let running = registry.live_processes();
    tracing::warn!(
        running,
        grace_secs = grace.as_secs(),
        "draining: new connections, streams and processes are refused; running processes may finish"
    );
    let deadline = tokio::time::Instant::now() + grace;
    tokio::pin!(interrupt);
    let finished = wait_until(|| registry.live_processes() == 0, deadline, &mut interrupt).await;
    if !finished {
        tracing::warn!(
            running = registry.live_processes(),
            "drain over before every process finished; killing the rest"
        );
        return;
    }
    let flush = (tokio::time::Instant::now() + DRAIN_FLUSH).min(deadline);
    wait_until(|| registry.attached_sessions() == 0, flush, &mut interrupt).await;
}

/// Polls `done` until it holds (true), `deadline` passes or `interrupt`
/// completes (false).
async fn wait_until<F: Future<Output = ()> + Unpin>(
    done: impl Fn() -> bool,
    deadline: tokio::time::Instant,
    interrupt: &mut F,
) -> bool {
    loop {
        if done() {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(DRAIN_POLL) => {}
            _ = tokio::time::sleep_until(deadline) => return done(),
            _ = &mut *interrupt => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_idle_registry_drains_at_once_and_refuses_new_processes_after() {
        let registry = Registry::new(Duration::from_secs(30));
        assert!(!registry.is_draining());
        drain(&registry, Duration::from_secs(60), std::future::pending()).await;
        assert!(registry.is_draining());
    }

    #[tokio::test(start_paused = true)]
    async fn zero_grace_does_not_drain() {
        let registry = Registry::new(Duration::from_secs(30));
        drain(&registry, Duration::ZERO, std::future::pending()).await;
        assert!(!registry.is_draining());
    }

    #[tokio::test(start_paused = true)]
    async fn an_attached_session_gets_the_flush_time_and_no_more() {
        let registry = Registry::new(Duration::from_secs(30));
        let (tx, _rx) = tokio::sync::mpsc::channel(1);
        let holder = crate::server::session::Holder {
            id: 1,
            liveness: crate::link::liveness::Liveness::new(false),
            wants_denials: false,
        };
        let _session = registry.create(holder, tx);
        let start = tokio::time::Instant::now();
        drain(&registry, Duration::from_secs(60), std::future::pending()).await;
        assert_eq!(start.elapsed(), DRAIN_FLUSH);
    }
}
