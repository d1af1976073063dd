//! Counts supervisors that have not been reaped yet, so shutdown can wait
//! (bounded) until every managed tree is gone and no zombie is left.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static RELEASED: Notify = Notify::const_new();

/// A supervisor was spawned.
pub fn track() {
    LIVE.fetch_add(1, Ordering::SeqCst);
}

/// A supervisor was reaped.
pub fn release() {
    LIVE.fetch_sub(1, Ordering::SeqCst);
    RELEASED.notify_waiters();
}

/// Supervisors not reaped yet.
pub fn live() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// Waits until every supervisor is reaped or `timeout` passes.
pub async fn wait_all(timeout: Duration) {
    let _ = tokio::time::timeout(timeout, async {
        loop {
            let released = RELEASED.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if live() == 0 {
                return;
            }
            released.await;
        }
    })
    .await;
}
