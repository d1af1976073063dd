//! One managed process as the server sees it: the `process/*` operations on
//! it (write, signal, resize, terminate, tree kills) and its start, which
//! spawns it and sets its output pump going. What the pump records lives in
//! `record.rs`, the pump in `output.rs`, the launch in `spawn.rs`.

use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use super::fd::register;
use super::kill;
use super::launch::LaunchSpec;
use super::output::{self, Streams};
use super::pty;
use super::record::{EventRoute, Record};
use super::spawn::{self, SpawnError};
use crate::protocol::process::{PtySize, ReadResult, WriteStatus};
use crate::shutdown::{SharedShutdown, Watcher};
use crate::sync::lock;

/// How many `writeId`s per process are remembered for de-duplication.
pub const WRITE_ID_MEMORY: usize = 4096;
/// Bytes queued for a child's stdin before `process/write` waits.
pub const STDIN_QUEUE_BYTES: usize = 8 * 1024 * 1024;

struct StdinOp {
    data: Vec<u8>,
    close: bool,
    _permit: Option<OwnedSemaphorePermit>,
}

#[derive(Default)]
struct WriteIds {
    seen: HashSet<String>,
    order: VecDeque<String>,
}

impl WriteIds {
    fn contains(&self, id: &str) -> bool {
        self.seen.contains(id)
    }
    fn insert(&mut self, id: String) {
        if self.seen.insert(id.clone()) {
            self.order.push_back(id);
            while self.order.len() > WRITE_ID_MEMORY {
                if let Some(old) = self.order.pop_front() {
                    self.seen.remove(&old);
                }
            }
        }
    }
}

struct StdinState {
    tx: Option<mpsc::Sender<StdinOp>>,
    write_ids: WriteIds,
}

/// Options that come from the server configuration.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// Retained output bytes.
    pub retained_bytes: usize,
    /// The codexbox binary supervisors re-execute as reapers (`None`: they
    /// reap in the forked copy of the server).
    pub reaper_exe: Option<std::path::PathBuf>,
    /// Where a sandboxed process registers its supervisor while it lives.
    pub sandboxed_roots: SandboxedRoots,
    /// The server's tasks for its processes: the process's own (stdin
    /// writer, output pump, supervisor wait) run under it, so a stopping
    /// server ends them and waits for them.
    pub tasks: Arc<SharedShutdown>,
}

/// A managed process.
pub struct ManagedProcess {
    /// What the pump records; shared with it.
    record: Arc<Record>,
    supervisor_pid: Pid,
    command_pid: Pid,
    /// The PTY master, for resize; released when the process closes.
    pty_master: Mutex<Option<Arc<AsyncFd<OwnedFd>>>>,
    tty: bool,
    stdin: Mutex<StdinState>,
    stdin_budget: Arc<Semaphore>,
    terminated: AtomicBool,
    /// Its entry in the server's sandboxed roots (sandboxed only).
    _sandboxed_root: Option<RootGuard>,
}

/// Counts one tree kill as under way until dropped.
struct TreeKillGuard(Arc<watch::Sender<usize>>);

impl TreeKillGuard {
    fn new(kills: &Arc<watch::Sender<usize>>) -> Self {
        kills.send_modify(|n| *n += 1);
        Self(kills.clone())
    }
}

impl Drop for TreeKillGuard {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Supervisor pids of one server's live sandboxed processes: the roots of
/// the subtrees whose connections that server refuses. Owned by the server
/// and handed to every process it starts, which is in it while it lives.
#[derive(Debug, Clone, Default)]
pub struct SandboxedRoots(Arc<Mutex<Vec<i32>>>);

impl SandboxedRoots {
    /// The supervisor pids of the sandboxed processes the server still holds
    /// (each the root of a subtree that a sandboxed command cannot leave).
    pub fn pids(&self) -> Vec<i32> {
        lock(&self.0).clone()
    }

    /// Adds `root` until the returned guard is dropped.
    fn register(&self, root: i32) -> RootGuard {
        lock(&self.0).push(root);
        RootGuard {
            roots: self.clone(),
            root,
        }
    }
}

/// Keeps one supervisor pid in its [`SandboxedRoots`] while it lives.
struct RootGuard {
    roots: SandboxedRoots,
    root: i32,
}

impl Drop for RootGuard {
    fn drop(&mut self) {
        let mut roots = lock(&self.roots.0);
        if let Some(at) = roots.iter().position(|&pid| pid == self.root) {
            roots.swap_remove(at);
        }
    }
}

impl std::fmt::Debug for ManagedProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedProcess")
            .field("id", &self.id())
            .field("command_pid", &self.command_pid)
            .finish_non_exhaustive()
    }
}

/// What `process/write` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Accepted,
    StdinClosed,
}

impl From<WriteOutcome> for WriteStatus {
    fn from(outcome: WriteOutcome) -> Self {
        match outcome {
            WriteOutcome::Accepted => WriteStatus::Accepted,
            WriteOutcome::StdinClosed => WriteStatus::StdinClosed,
        }
    }
}

impl ManagedProcess {
    /// Spawns `spec` and starts its output pump. `on_evict` runs when the
    /// closed process should be forgotten.
    pub async fn start(
        id: String,
        spec: &LaunchSpec,
        options: &ProcessOptions,
        route: EventRoute,
        on_evict: Box<dyn FnOnce() + Send>,
    ) -> Result<Arc<Self>, SpawnError> {
        let spawned = spawn::spawn_async(spec, options.reaper_exe.as_deref()).await?;
        // Registered before anything else can yield; unregistered when the
        // guard drops: on an early return, or with the process.
        let sandboxed_root = spec.sandboxed.then(|| {
            options
                .sandboxed_roots
                .register(spawned.supervisor_pid.as_raw())
        });
        let pty_master = spawned.pty_master.map(register).transpose()?.map(Arc::new);
        let stdout = spawned.stdout.map(register).transpose()?;
        let stderr = spawned.stderr.map(register).transpose()?;
        let status = spawned.status;
        let (tx, writer) = match (spawned.stdin, &pty_master) {
            (Some(fd), _) => {
                let (tx, rx) = mpsc::channel(256);
                (Some(tx), Some(StdinWriter::Pipe(register(fd)?, rx)))
            }
            (None, Some(master)) => {
                let (tx, rx) = mpsc::channel(256);
                (Some(tx), Some(StdinWriter::Pty(master.clone(), rx)))
            }
            (None, None) => (None, None),
        };
        let record = Arc::new(Record::new(id, spec.sandboxed, options.retained_bytes));
        let process = Arc::new(Self {
            record: record.clone(),
            supervisor_pid: spawned.supervisor_pid,
            command_pid: spawned.command_pid,
            tty: pty_master.is_some(),
            pty_master: Mutex::new(pty_master.clone()),
            stdin: Mutex::new(StdinState {
                tx,
                write_ids: WriteIds::default(),
            }),
            stdin_budget: Arc::new(Semaphore::new(STDIN_QUEUE_BYTES)),
            terminated: AtomicBool::new(false),
            _sandboxed_root: sandboxed_root,
        });
        // One watcher for the process; each of its tasks gets a child.
        let tasks = options.tasks.watcher();
        let tasks = tasks.as_ref();
        if let Some(writer) = writer {
            spawn_watched(tasks, writer.run());
        }
        super::reaper::track();
        let reaped_by_pump = match spawned.supervisor {
            Some(mut supervisor) => {
                // Released when the supervisor is reaped, or when the
                // server stops waiting (after its own bounded wait).
                let reaped = ReleaseOnDrop;
                spawn_watched(tasks, async move {
                    let _ = supervisor.wait().await;
                    drop(reaped);
                });
                false
            }
            // The zygote reaps this supervisor; count it live until closed.
            None => true,
        };
        let streams = Streams {
            stdout,
            stderr,
            pty: pty_master,
            status: Some(status),
        };
        let closing = process.clone();
        spawn_watched(
            tasks,
            output::pump(
                record,
                streams,
                route,
                Box::new(move || closing.release_io()),
                on_evict,
                reaped_by_pump,
            ),
        );
        Ok(process)
    }

    /// What the output pump records about this process.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The caller-chosen id.
    pub fn id(&self) -> &str {
        self.record.id()
    }

    /// Whether the process was started sandboxed.
    pub fn is_sandboxed(&self) -> bool {
        self.record.is_sandboxed()
    }

    /// Whether `closed` was recorded.
    pub fn is_closed(&self) -> bool {
        self.record.is_closed()
    }

    /// Whether the exit was recorded.
    pub fn has_exited(&self) -> bool {
        self.record.has_exited()
    }

    /// The `process/read` answer for the current state, and whether a long
    /// poll may return now.
    pub fn snapshot(&self, after_seq: u64, max_bytes: Option<u64>) -> (ReadResult, bool) {
        self.record.snapshot(after_seq, max_bytes)
    }

    /// Whether `process/terminate` (or a session kill) hit this process.
    pub fn was_terminated(&self) -> bool {
        self.terminated.load(Ordering::Relaxed)
    }

    /// Whether stdin accepts writes (a PTY, or `pipeStdin` and not closed).
    pub fn is_writable(&self) -> bool {
        lock(&self.stdin).tx.is_some()
    }

    /// `process/write`: queues `data` (then EOF when `close`), de-duplicating
    /// on `write_id`. Waits while the stdin queue is full.
    pub async fn write(
        &self,
        data: Vec<u8>,
        write_id: Option<String>,
        close: bool,
    ) -> WriteOutcome {
        let tx = {
            let stdin = lock(&self.stdin);
            if let Some(id) = &write_id {
                if stdin.write_ids.contains(id) {
                    return WriteOutcome::Accepted;
                }
            }
            match &stdin.tx {
                Some(tx) => tx.clone(),
                None => return WriteOutcome::StdinClosed,
            }
        };
        let wanted = data.len().clamp(1, STDIN_QUEUE_BYTES) as u32;
        let permit = self
            .stdin_budget
            .clone()
            .acquire_many_owned(wanted)
            .await
            .ok();
        {
            let mut stdin = lock(&self.stdin);
            if let Some(id) = write_id {
                stdin.write_ids.insert(id);
            }
            // A PTY stays writable after its EOF character; a pipe is closed.
            if close && !self.tty {
                stdin.tx = None;
            }
        }
        // A writer that already stopped (the child exited) discards the bytes.
        let _ = tx
            .send(StdinOp {
                data,
                close,
                _permit: permit,
            })
            .await;
        WriteOutcome::Accepted
    }

    /// `process/signal`: to the command's process group while it runs.
    pub fn signal(&self, signal: Signal) {
        if self.has_exited() {
            return;
        }
        let _ = kill::signal_group(self.command_pid, signal);
    }

    /// `process/resize`; `false` for a process without a PTY.
    pub fn resize(&self, size: PtySize) -> bool {
        if let Some(master) = lock(&self.pty_master).as_ref() {
            let _ = pty::resize(master.get_ref().as_fd(), size);
        }
        self.tty
    }

    /// Drops the server's stdin and PTY descriptors once the process is
    /// closed, so a closed process holds no descriptor while it stays readable.
    fn release_io(&self) {
        lock(&self.stdin).tx = None;
        lock(&self.pty_master).take();
    }

    /// Kills the whole tree: the command, or once it has exited what it
    /// left running (which holds its output open: it is not closed yet).
    /// Returns whether the command itself was still running.
    pub fn terminate(&self) -> bool {
        if self.is_closed() {
            return false;
        }
        let running = !self.has_exited();
        self.terminated.store(true, Ordering::Relaxed);
        self.kill_tree_now();
        running
    }

    /// Kills the process group and every descendant, exited or not (a
    /// descendant may outlive the command).
    /// A sandboxed command's helper first gets SIGTERM and a short bounded
    /// grace to remove its mount points ([`kill::terminate_sandboxed_tree`]).
    pub fn kill_tree_now(&self) {
        let (supervisor, group, sandboxed) =
            (self.supervisor_pid, self.command_pid, self.is_sandboxed());
        if !sandboxed {
            let _ = kill::signal_group(group, Signal::SIGKILL);
        }
        let guard = TreeKillGuard::new(&self.record.tree_kills);
        let work = move || {
            let _guard = guard;
            if sandboxed {
                kill::terminate_sandboxed_tree(supervisor, group);
            } else {
                kill::kill_tree(supervisor, group);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(work);
            }
            Err(_) => work(),
        }
    }

    /// Synchronous variant for shutdown and session expiry.
    pub fn kill_tree_blocking(&self) {
        Self::kill_trees_blocking(std::slice::from_ref(&self));
    }

    /// Kills the trees of `processes` together: the sandboxed ones' helpers
    /// share one cleanup grace ([`kill::kill_trees`]). Blocking.
    pub fn kill_trees_blocking(processes: &[&Self]) {
        let _guards: Vec<TreeKillGuard> = processes
            .iter()
            .map(|process| TreeKillGuard::new(&process.record.tree_kills))
            .collect();
        let trees: Vec<_> = processes
            .iter()
            .map(|process| {
                process.terminated.store(true, Ordering::Relaxed);
                (
                    process.supervisor_pid,
                    process.command_pid,
                    process.is_sandboxed(),
                )
            })
            .collect();
        kill::kill_trees(&trees);
    }
}

/// Runs `task` under the server's process tasks (`tasks`): a stopping
/// server drops it and waits for that; run plainly once the server has
/// stopped (`None`).
fn spawn_watched<F>(tasks: Option<&Watcher>, task: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    match tasks {
        Some(watcher) => watcher.spawn_until_stopped(task),
        None => {
            tokio::spawn(task);
        }
    }
}

/// A supervisor counted as live ([`super::reaper::track`]) until dropped.
struct ReleaseOnDrop;

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        super::reaper::release();
    }
}

enum StdinWriter {
    Pipe(AsyncFd<OwnedFd>, mpsc::Receiver<StdinOp>),
    Pty(Arc<AsyncFd<OwnedFd>>, mpsc::Receiver<StdinOp>),
}

impl StdinWriter {
    async fn run(self) {
        match self {
            StdinWriter::Pipe(fd, mut rx) => {
                while let Some(op) = rx.recv().await {
                    if write_all(&fd, &op.data).await.is_err() || op.close {
                        break;
                    }
                }
                // Dropping the descriptor closes the pipe: the child sees EOF.
            }
            StdinWriter::Pty(master, mut rx) => {
                while let Some(op) = rx.recv().await {
                    if write_all(&master, &op.data).await.is_err() {
                        break;
                    }
                    if op.close {
                        let eof = pty::eof_char(master.get_ref().as_fd());
                        // A pending partial line needs one EOF to flush it
                        // and another to signal end of input.
                        let eofs = if op.data.last().is_some_and(|&b| b != b'\n') {
                            vec![eof, eof]
                        } else {
                            vec![eof]
                        };
                        let _ = write_all(&master, &eofs).await;
                    }
                }
            }
        }
    }
}

async fn write_all(fd: &AsyncFd<OwnedFd>, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let mut guard = fd.writable().await?;
        match guard
            .try_io(|inner| nix::unistd::write(inner.get_ref(), data).map_err(std::io::Error::from))
        {
            Ok(Ok(n)) => data = &data[n..],
            Ok(Err(err)) => return Err(err),
            Err(_would_block) => continue,
        }
    }
    Ok(())
}
