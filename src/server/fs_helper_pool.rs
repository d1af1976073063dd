//! A bounded pool of warm `fs-helper --serve` processes (docs/filesystem.md), one set
//! per distinct sandbox (profile JSON, policy cwd, Landlock choice). Each
//! helper runs under `codex-linux-sandbox … -- <self> --codex-run-as-fs-helper
//! --serve` and answers one request at a time.
//!
//! Bounds: at most [`MAX_HELPERS_PER_KEY`] helpers busy per sandbox, at most
//! [`MAX_IDLE_HELPERS`] idle helpers kept in total (the oldest idle helper is
//! closed first), and idle helpers are closed after the idle timeout
//! (`CODEXBOX_FS_HELPER_IDLE_MS`, default 5 s). A helper that dies or
//! answers garbage is discarded: the request it was serving fails with
//! ‑32603 and the next request gets a fresh helper.
//!
//! A connection with open file handles in a sandbox holds a helper of its
//! own ([`HelperPool::lease`]), taken from the idle set or started, and
//! hands it back when its last handle there is closed.
//!
//! A helper whose sandbox drops a grant for a planted symlink says so on a
//! stderr nobody reads: its failed answers carry the same warning lines.
//!
//! Each server owns its pool ([`super::connection::Shared`]): two servers
//! in one process share no helper. Helpers go with the server: a stopping
//! server closes the idle ones and waits for them ([`HelperPool::close`]);
//! a server that dies takes them along with its runtime thread
//! (parent-death signal) as well as at the end of their stdin.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Semaphore;

use crate::fs_helper::{HelperResponse, ServeResponse};
use crate::mode::FS_HELPER_ARG1;
use crate::protocol::fs::method;
use crate::protocol::RpcError;
use crate::runtime_paths::ExecServerRuntimePaths;
use crate::sandbox::cli::{helper_args, plantable_args};
use crate::sandbox::orchestrate::planted_link_warnings;

/// Busy helpers per distinct sandbox.
pub const MAX_HELPERS_PER_KEY: usize = 4;
/// Idle helpers kept across all sandboxes.
pub const MAX_IDLE_HELPERS: usize = 16;
/// Default idle timeout. Short on purpose: while a helper runs, the
/// sandbox's read-only masks of missing `.git`/`.codex`/`.agents` in its
/// writable roots exist on the host as empty directories (removed when the
/// helper exits).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Environment variable overriding the idle timeout, in milliseconds.
pub const IDLE_TIMEOUT_ENV: &str = "CODEXBOX_FS_HELPER_IDLE_MS";
/// Variables the helper keeps from the server's environment.
pub const HELPER_ENV_ALLOWLIST: [&str; 4] = ["PATH", "TMPDIR", "TMP", "TEMP"];
/// Bytes of helper stderr kept for error messages.
const STDERR_KEEP: usize = 4096;

/// What makes two helpers interchangeable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HelperKey {
    /// The `--permission-profile` JSON (native paths).
    pub profile_json: String,
    /// `--sandbox-policy-cwd`. The helper itself always runs in `/` (it
    /// only takes absolute paths), so it starts even when the policy cwd is
    /// not visible inside the sandbox.
    pub cwd: PathBuf,
    /// `--use-legacy-landlock`.
    pub use_legacy_landlock: bool,
    /// `--plantable-root`s.
    pub plantable: Vec<PathBuf>,
}

/// One live helper process.
struct Helper {
    /// `None` only once the helper is being torn down.
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_task: tokio::task::JoinHandle<()>,
    /// What the sandbox warned about dropped grants, added to every error
    /// answer (empty: nothing to add).
    warnings: String,
    next_id: u64,
    idle_since: Instant,
}

#[derive(Default)]
struct PoolState {
    idle: HashMap<HelperKey, Vec<Helper>>,
    busy_limits: HashMap<HelperKey, Arc<Semaphore>>,
    /// The task closing expired idle helpers, once one is needed.
    reaper: Option<tokio::task::JoinHandle<()>>,
    /// The server stopped: no helper starts or waits idle any more.
    closed: bool,
}

/// The pool of one server ([`HelperPool::from_env`]).
pub struct HelperPool {
    state: Mutex<PoolState>,
    idle_timeout: Duration,
}

impl std::fmt::Debug for HelperPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelperPool")
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

fn idle_timeout_from_env() -> Duration {
    std::env::var(IDLE_TIMEOUT_ENV)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_IDLE_TIMEOUT)
}

impl HelperPool {
    /// A pool with the given idle timeout.
    pub fn new(idle_timeout: Duration) -> Self {
        Self {
            state: Mutex::new(PoolState::default()),
            idle_timeout,
        }
    }

    /// A server's pool, with the idle timeout of [`IDLE_TIMEOUT_ENV`].
    pub fn from_env() -> Arc<HelperPool> {
        Arc::new(HelperPool::new(idle_timeout_from_env()))
    }

    /// Stops the pool with its server: no helper starts from now on, the
    /// reaper ends, and every idle helper is closed and waited for. Leased
    /// helpers end when their connection lets go of them.
    pub async fn close(&self) {
        let (reaper, idle) = {
            let mut state = self.lock();
            state.closed = true;
            state.busy_limits.clear();
            (state.reaper.take(), std::mem::take(&mut state.idle))
        };
        if let Some(reaper) = reaper {
            reaper.abort();
            let _ = reaper.await;
        }
        let helpers = idle.into_values().flatten().map(Helper::close);
        futures_util::future::join_all(helpers).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `operation` with `params` in a helper for `key`.
    pub async fn call(
        self: &Arc<Self>,
        paths: &ExecServerRuntimePaths,
        key: &HelperKey,
        operation: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        self.start_reaper();
        let limit = self
            .lock()
            .busy_limits
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(MAX_HELPERS_PER_KEY)))
            .clone();
        let _permit = limit
            .acquire_owned()
            .await
            .map_err(|err| RpcError::internal(format!("fs sandbox helper pool closed: {err}")))?;
        let (mut helper, reused) = self.take(paths, key)?;
        let mut outcome = helper.request(operation, params.clone()).await;
        // An idle helper can die (or be killed) just as it is taken: then the
        // request never reached it, or it was only reading. Such a failure is
        // retried once in a fresh helper when repeating cannot do anything
        // twice: the request was never delivered, or the operation only reads.
        if let Err(err) = &outcome {
            if reused && (err.never_delivered() || method::is_read_only(operation)) {
                tracing::debug!("retrying {operation} in a fresh fs helper: {err}");
                helper.failure_message(ExchangeError::Closed).await;
                helper = spawn_helper(paths, key)?;
                outcome = helper.request(operation, params).await;
            }
        }
        match outcome {
            Ok(answer) => {
                self.put_idle(key, helper);
                answer
            }
            Err(err) => {
                let message = helper.failure_message(err).await;
                Err(RpcError::internal(message))
            }
        }
    }

    /// An idle helper for `key` (and `true`), or a new one (and `false`).
    fn take(
        &self,
        paths: &ExecServerRuntimePaths,
        key: &HelperKey,
    ) -> Result<(Helper, bool), RpcError> {
        loop {
            let idle = {
                let mut state = self.lock();
                if state.closed {
                    return Err(RpcError::internal(
                        "fs sandbox helper pool closed: the server is stopping",
                    ));
                }
                state.idle.get_mut(key).and_then(Vec::pop)
            };
            let Some(mut helper) = idle else {
                return Ok((spawn_helper(paths, key)?, false));
            };
            // An idle helper that died meanwhile is replaced, not used.
            if helper.is_alive() {
                return Ok((helper, true));
            }
        }
    }

    /// A helper for `key` that only the caller uses until it hands it back
    /// with [`HelperPool::give_back`] (a connection's open file handles live
    /// in it). It does not count against the busy limit: the caller bounds
    /// how many it leases.
    pub fn lease(
        self: &Arc<Self>,
        paths: &ExecServerRuntimePaths,
        key: &HelperKey,
    ) -> Result<LeasedHelper, RpcError> {
        self.start_reaper();
        Ok(LeasedHelper {
            helper: Some(self.take(paths, key)?.0),
        })
    }

    /// Returns a leased helper to the idle set. The caller must have closed
    /// every handle it opened there; a helper that failed is just dropped.
    pub fn give_back(&self, key: &HelperKey, leased: LeasedHelper) {
        if let Some(helper) = leased.helper {
            self.put_idle(key, helper);
        }
    }

    fn put_idle(&self, key: &HelperKey, mut helper: Helper) {
        helper.idle_since = Instant::now();
        let mut evicted = Vec::new();
        {
            let mut state = self.lock();
            if state.closed {
                drop(state);
                close_helper(helper);
                return;
            }
            state.idle.entry(key.clone()).or_default().push(helper);
            let total: usize = state.idle.values().map(Vec::len).sum();
            if total > MAX_IDLE_HELPERS {
                let oldest = state
                    .idle
                    .iter()
                    .flat_map(|(k, helpers)| {
                        helpers
                            .iter()
                            .enumerate()
                            .map(move |(i, h)| (h.idle_since, k.clone(), i))
                    })
                    .min_by_key(|(since, _, _)| *since);
                if let Some((_, k, i)) = oldest {
                    if let Some(helpers) = state.idle.get_mut(&k) {
                        evicted.push(helpers.remove(i));
                    }
                }
            }
        }
        evicted.into_iter().for_each(close_helper);
    }

    /// Number of idle helpers (for tests and diagnostics).
    pub fn idle_count(&self) -> usize {
        self.lock().idle.values().map(Vec::len).sum()
    }

    fn start_reaper(self: &Arc<Self>) {
        let mut state = self.lock();
        if state.closed || state.reaper.is_some() {
            return;
        }
        let pool = Arc::downgrade(self);
        let period = (self.idle_timeout / 2).max(Duration::from_millis(10));
        state.reaper = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(pool) = pool.upgrade() else {
                    return;
                };
                pool.reap();
            }
        }));
    }

    /// Closes helpers idle for longer than the timeout.
    fn reap(&self) {
        let now = Instant::now();
        let mut expired = Vec::new();
        {
            let mut state = self.lock();
            for helpers in state.idle.values_mut() {
                let (old, keep): (Vec<_>, Vec<_>) = helpers
                    .drain(..)
                    .partition(|h| now.duration_since(h.idle_since) >= self.idle_timeout);
                *helpers = keep;
                expired.extend(old);
            }
            state.idle.retain(|_, helpers| !helpers.is_empty());
            // Forget the limits of sandboxes nobody is using.
            let PoolState {
                idle, busy_limits, ..
            } = &mut *state;
            busy_limits.retain(|key, limit| {
                idle.contains_key(key) || limit.available_permits() < MAX_HELPERS_PER_KEY
            });
        }
        expired.into_iter().for_each(close_helper);
    }
}

/// A helper leased from the pool for one caller's exclusive use.
pub struct LeasedHelper {
    /// `None` once the helper failed and was torn down.
    helper: Option<Helper>,
}

impl std::fmt::Debug for LeasedHelper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedHelper")
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl LeasedHelper {
    /// Runs `operation` in the helper. When the helper itself fails (dies,
    /// answers garbage), the error says so and [`LeasedHelper::is_alive`]
    /// is false from then on.
    pub async fn call(&mut self, operation: &str, params: Value) -> Result<Value, RpcError> {
        let Some(helper) = self.helper.as_mut() else {
            return Err(RpcError::internal("fs sandbox helper is gone"));
        };
        match helper.request(operation, params).await {
            Ok(answer) => answer,
            Err(err) => {
                let message = match self.helper.take() {
                    Some(helper) => helper.failure_message(err).await,
                    None => err.to_string(),
                };
                Err(RpcError::internal(message))
            }
        }
    }

    /// Whether the helper still serves requests.
    pub fn is_alive(&self) -> bool {
        self.helper.is_some()
    }
}

/// Closes a helper: dropping it closes its stdin and reaps it gracefully.
fn close_helper(helper: Helper) {
    drop(helper);
}

impl Drop for Helper {
    /// Closes stdin (the helper exits at EOF, and the sandbox then removes
    /// what it mounted) and reaps the process in the background (see
    /// [`end_gracefully`]). Never SIGKILLs first, so the sandbox gets to
    /// clean up: without a runtime to wait on, it only asks with SIGTERM.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let Some(child) = self.child.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(end_gracefully(child));
            }
            Err(_) => ask_to_end(&child),
        }
    }
}

/// How long a helper whose stdin is closed gets to exit, then again after
/// SIGTERM, before it is killed.
const HELPER_EXIT_GRACE: Duration = Duration::from_secs(1);
const HELPER_TERM_GRACE: Duration = Duration::from_secs(5);

/// SIGTERM to the helper's wrapper, which passes it on to its sandbox,
/// waits for it and removes the mount points it made on the host (a
/// SIGKILL leaves them behind).
fn ask_to_end(child: &Child) {
    if let Some(pid) = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()) {
        // SAFETY: kill takes a pid and a signal number; the child is not
        // reaped yet, so the pid is still ours.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

/// Waits for a helper whose stdin is closed to exit, asks it with SIGTERM
/// when it is slow (a loaded machine), and kills it only when that is not
/// heeded either; either way it is reaped.
async fn end_gracefully(mut child: Child) {
    if tokio::time::timeout(HELPER_EXIT_GRACE, child.wait())
        .await
        .is_ok()
    {
        return;
    }
    ask_to_end(&child);
    if tokio::time::timeout(HELPER_TERM_GRACE, child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// Why a helper exchange failed.
#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("fs sandbox helper closed its output")]
    Closed,
    #[error("failed to encode or decode fs sandbox helper message: {0}")]
    Codec(#[from] serde_json::Error),
    #[error("unexpected fs sandbox helper response: expected {expected}, got {got}")]
    Mismatch { expected: String, got: String },
}

impl ExchangeError {
    /// Whether the helper cannot have received the request: writing it found
    /// the pipe without a reader.
    fn never_delivered(&self) -> bool {
        matches!(self, Self::Io(err) if err.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

impl Helper {
    /// Closes the helper as dropping it does, but waits until it is reaped
    /// and its stderr reader has ended.
    async fn close(mut self) {
        drop(self.stdin.take());
        if let Some(child) = self.child.take() {
            end_gracefully(child).await;
        }
        // Whatever still holds the pipe is gone with the sandbox; a stray
        // holder does not keep the reader alive.
        if tokio::time::timeout(Duration::from_secs(1), &mut self.stderr_task)
            .await
            .is_err()
        {
            self.stderr_task.abort();
        }
    }

    /// Whether the helper process is still running.
    fn is_alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// One request/answer exchange. The outer `Err` means the helper is
    /// unusable; the inner result is the operation's own outcome.
    async fn request(
        &mut self,
        operation: &str,
        params: Value,
    ) -> Result<Result<Value, RpcError>, ExchangeError> {
        self.next_id += 1;
        let id = self.next_id;
        let mut line = serde_json::to_vec(&serde_json::json!({
            "id": id,
            "operation": operation,
            "params": params,
        }))?;
        line.push(b'\n');
        let stdin = self.stdin.as_mut().ok_or(ExchangeError::Closed)?;
        stdin.write_all(&line).await?;
        stdin.flush().await?;
        let mut answer = Vec::new();
        if self.stdout.read_until(b'\n', &mut answer).await? == 0 {
            return Err(ExchangeError::Closed);
        }
        let answer: ServeResponse = serde_json::from_slice(&answer)?;
        if answer.id != serde_json::json!(id) {
            return Err(ExchangeError::Mismatch {
                expected: format!("id {id}"),
                got: format!("id {}", answer.id),
            });
        }
        Ok(match answer.response {
            HelperResponse::Ok(ok) if ok.operation == operation => Ok(ok.response),
            HelperResponse::Ok(ok) => {
                return Err(ExchangeError::Mismatch {
                    expected: operation.to_owned(),
                    got: ok.operation,
                })
            }
            HelperResponse::Error(err) => Err(RpcError::new(
                crate::fs::FsError::from_code(err.code, String::new()).helper_code(),
                if self.warnings.is_empty() {
                    err.message
                } else {
                    format!("{} ({})", err.message, self.warnings)
                },
            )),
        })
    }

    /// The message for a helper that failed mid-exchange: its exit status and
    /// stderr when it died, the exchange error otherwise. The helper is gone
    /// afterwards.
    async fn failure_message(mut self, err: ExchangeError) -> String {
        drop(self.stdin.take());
        let Some(child) = self.child.as_mut() else {
            return err.to_string();
        };
        let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        // Let the stderr reader catch the last bytes.
        if status.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(1), &mut self.stderr_task).await;
        }
        let stderr = String::from_utf8_lossy(
            &self
                .stderr
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .trim()
        .to_owned();
        match (status, &err) {
            (Ok(Ok(status)), ExchangeError::Closed | ExchangeError::Io(_)) => {
                format!("fs sandbox helper failed with status {status}: {stderr}")
            }
            _ => {
                if let Some(child) = self.child.as_mut() {
                    let _ = child.kill().await;
                }
                err.to_string()
            }
        }
    }
}

/// A helper never outlives the server, SIGKILL of the server included: it
/// gets SIGTERM when the thread that started it ends (the server's runtime
/// thread; it then takes its sandbox down and removes its mount points),
/// besides the end of its stdin.
fn die_with_the_server(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let server = std::process::id();
    // SAFETY: the hook only makes async-signal-safe calls (prctl, getppid).
    unsafe {
        command.pre_exec(move || {
            crate::sys::confine::set_parent_death_signal(libc::SIGTERM)?;
            if u32::try_from(libc::getppid()).ok() != Some(server) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

fn spawn_helper(paths: &ExecServerRuntimePaths, key: &HelperKey) -> Result<Helper, RpcError> {
    let mut command = paths.linux_sandbox_command();
    command.args(helper_args(
        &key.cwd,
        Path::new("/"),
        &key.profile_json,
        key.use_legacy_landlock,
    ));
    command.args(plantable_args(&key.plantable));
    command
        .arg("--")
        .arg(&paths.codex_self_exe)
        .arg(FS_HELPER_ARG1)
        .arg("--serve");
    command.env_clear();
    for name in HELPER_ENV_ALLOWLIST {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    die_with_the_server(&mut command);
    // What the helper is about to find (and print where nobody reads it).
    let warnings = planted_link_warnings(&key.cwd, &key.profile_json, &key.plantable).join("; ");
    let mut command = tokio::process::Command::from(command);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|err| RpcError::internal(format!("failed to start fs sandbox helper: {err}")))?;
    let (Some(stdin), Some(stdout), Some(mut stderr_pipe)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(RpcError::internal(
            "failed to start fs sandbox helper: missing stdio pipe",
        ));
    };
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let sink = stderr.clone();
    let stderr_task = tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = stderr_pipe.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let mut kept = sink
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            kept.extend_from_slice(&buf[..n]);
            let excess = kept.len().saturating_sub(STDERR_KEEP);
            kept.drain(..excess);
        }
    });
    Ok(Helper {
        warnings,
        child: Some(child),
        stdin: Some(stdin),
        stdout: BufReader::new(stdout),
        stderr,
        stderr_task,
        next_id: 0,
        idle_since: Instant::now(),
    })
}
