//! Stopping a server and knowing it has stopped, in the shape of
//! mini-redis: [`Shutdown`] broadcasts the stop to every [`Watcher`] (one
//! per connection task, and per task that task starts), and each watcher
//! holds a sender of a channel whose receiver [`Shutdown::stop`] reads until
//! the last sender is gone, so stopping returns only once every task has
//! ended. Nothing is aborted: each task closes what it owns (a close frame,
//! a reset) on its own terms.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::{broadcast, mpsc};

/// The stop signal of one server and the wait for its tasks.
#[derive(Debug)]
pub struct Shutdown {
    /// Tells every watcher to stop.
    notify: broadcast::Sender<()>,
    /// Cloned into every watcher; dropped by `stop` so the channel ends
    /// with the last watcher.
    done_tx: mpsc::Sender<()>,
    /// Ends once every watcher is gone.
    done_rx: mpsc::Receiver<()>,
}

/// A task's view of the server's [`Shutdown`]: it learns of the stop, and
/// its end is waited for.
#[derive(Debug)]
pub struct Watcher {
    notify: broadcast::Receiver<()>,
    stopped: bool,
    /// Never sent on: its drop tells [`Shutdown::stop`] this task ended.
    _done: mpsc::Sender<()>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A server that has not stopped.
    pub fn new() -> Self {
        let (done_tx, done_rx) = mpsc::channel(1);
        Self {
            notify: broadcast::channel(1).0,
            done_tx,
            done_rx,
        }
    }

    /// A watcher for a new task.
    pub fn watcher(&self) -> Watcher {
        Watcher {
            notify: self.notify.subscribe(),
            stopped: false,
            _done: self.done_tx.clone(),
        }
    }

    /// Tasks still running (watchers alive).
    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.done_tx.strong_count().saturating_sub(1)
    }

    /// Tells every task to stop and waits until all have ended.
    pub async fn stop(self) {
        let Self {
            notify,
            done_tx,
            mut done_rx,
        } = self;
        let _ = notify.send(());
        // Closed too, so a watcher made after the send (a task starting
        // one while it has not seen the stop yet) learns of it as well.
        drop(notify);
        drop(done_tx);
        let _ = done_rx.recv().await;
    }
}

/// A [`Shutdown`] that anything holding a shared reference can start
/// watched tasks under, for tasks that belong to the server rather than
/// to one connection (they outlive the connection that started them).
#[derive(Debug)]
pub struct SharedShutdown(Mutex<Option<Shutdown>>);

impl Default for SharedShutdown {
    fn default() -> Self {
        Self(Mutex::new(Some(Shutdown::new())))
    }
}

impl SharedShutdown {
    /// The slot (a panic elsewhere while holding it leaves it usable).
    fn slot(&self) -> MutexGuard<'_, Option<Shutdown>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A watcher for a new task, or `None` once [`Self::stop`] was called.
    pub fn watcher(&self) -> Option<Watcher> {
        self.slot().as_ref().map(Shutdown::watcher)
    }

    /// Tells every task to stop and waits until all have ended; later
    /// calls return at once.
    pub async fn stop(&self) {
        let shutdown = self.slot().take();
        if let Some(shutdown) = shutdown {
            shutdown.stop().await;
        }
    }
}

impl Watcher {
    /// Completes once the server stops (at once if it already has).
    pub async fn stopped(&mut self) {
        if self.stopped {
            return;
        }
        // A lagged or closed channel means the stop was sent too.
        let _ = self.notify.recv().await;
        self.stopped = true;
    }

    /// A watcher for a task this one starts.
    pub fn watcher(&self) -> Watcher {
        Watcher {
            notify: self.notify.resubscribe(),
            stopped: self.stopped,
            _done: self._done.clone(),
        }
    }

    /// Runs `task` in a task of its own, watched like one this one starts:
    /// when the server stops, `task` is dropped (closing what it owns) and
    /// the stop waits for that.
    pub fn spawn_until_stopped<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut watcher = self.watcher();
        tokio::spawn(async move {
            tokio::select! {
                () = task => {}
                () = watcher.stopped() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn stop_waits_for_every_task_to_end() {
        let shutdown = Shutdown::new();
        let ended = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for delay in [1, 5] {
            let mut watcher = shutdown.watcher();
            let ended = ended.clone();
            tokio::spawn(async move {
                watcher.stopped().await;
                // Cleaning up takes a while; its child ends with it.
                let child = watcher.watcher();
                tokio::time::sleep(Duration::from_secs(delay)).await;
                drop(child);
                ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        tokio::task::yield_now().await;
        assert_eq!(shutdown.running(), 2);
        let start = tokio::time::Instant::now();
        shutdown.stop().await;
        assert_eq!(ended.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shared_shutdown_waits_for_its_tasks_then_takes_no_more() {
        let shared = SharedShutdown::default();
        let mut watcher = shared.watcher().expect("not stopped yet");
        let (ended_tx, ended) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            watcher.stopped().await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let _ = ended_tx.send(());
        });
        shared.stop().await;
        assert!(ended.await.is_ok(), "stop returned before the task ended");
        assert!(shared.watcher().is_none());
        shared.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_watcher_made_after_the_stop_learns_of_it() {
        let shutdown = Shutdown::new();
        let watcher = shutdown.watcher();
        tokio::spawn(async move {
            // Busy while the stop is sent, then it starts a child task.
            tokio::time::sleep(Duration::from_secs(1)).await;
            watcher.spawn_until_stopped(std::future::pending());
        });
        let stopped = tokio::time::timeout(Duration::from_secs(60), shutdown.stop()).await;
        assert!(stopped.is_ok(), "the late child never heard of the stop");
    }

    #[tokio::test(start_paused = true)]
    async fn a_spawned_task_ends_on_its_own_or_with_the_stop() {
        let shutdown = Shutdown::new();
        let watcher = shutdown.watcher();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        watcher.spawn_until_stopped(async move {
            let _ = done_tx.send(());
        });
        watcher.spawn_until_stopped(std::future::pending());
        drop(watcher);
        assert!(done.await.is_ok());
        tokio::task::yield_now().await;
        assert_eq!(shutdown.running(), 1, "the pending one still runs");
        shutdown.stop().await;
    }
}
