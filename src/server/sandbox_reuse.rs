//! Reused sandboxes, the server's side (`sandbox::warm` is the helper's):
//! which prepared sandbox a sandboxed `process/start` may use, preparing
//! it when there is none, and dropping it when it may no longer be used.
//!
//! A prepared sandbox belongs to one session and one shape ([`Key`]: the
//! helper's flags but the command and its directory, the environment the
//! helper's decision reads, and whether the command runs on a terminal).
//! The first command of a shape waits while a keeper prepares it (about
//! the cost of a one-shot sandbox); later ones run in it, each after the
//! server checked, while the helper starts, that a one-shot run of the
//! helper would build the same sandbox now (`sandbox::warm::decide_ahead`;
//! the helper checks itself when the server has no deny-glob matches to
//! give it).
//!
//! Standbys: a prepared sandbox keeps [`STANDBYS`] of the next commands'
//! pids 1 made ahead (`sandbox::warm::standby`), made one after another
//! once a command was decided. A command takes one that is ready (it never
//! waits for one) and is started in it with the setup the decision is
//! expected to give, while the server decides on the same thread; the
//! command execs only on the go-ahead the server sends when the decision
//! agrees, and is started the helper's way otherwise.
//!
//! It is dropped (its keeper then removes what it left on the host and
//! exits, its namespaces vanish with the last descriptor): when a helper
//! found it outdated (its stale pipe), when its keeper is gone, when the
//! server's mount table changed since it was prepared (`/proc/self/
//! mountinfo` signals every change), after [`ReuseConfig::idle`] unused,
//! with its session, and at shutdown. Bounds: [`MAX_PER_SESSION`] per
//! session (the least recently used goes first), [`MAX_PREPARED`] in the
//! whole server (beyond that, commands get one-shot sandboxes).
//!
//! Deny globs: the matches are kept current per shape by an inotify index
//! (`sandbox::deny_index`: one scan for the first command, then only what
//! changed, with a full rescan whenever events were lost) and sent with
//! every command, so a file made under a deny glob (by an earlier command
//! or the host) is masked for the next one, at a cost that does not grow
//! with the workspace. What a decision found of names in the directories
//! the index watches is kept for the next one while the index saw nothing
//! happen there (`DenyIndex::disturbances`), so the per-command decision
//! does not ask the kernel again about every matched path.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;

use crate::policy::{PermissionProfile, ResolveContext};
use crate::process::fd::register;
use crate::process::launch::{
    GoAhead, Handoff, HelperJob, HelperKind, LaunchSpec, Standby, StandbyLaunch,
};
use crate::sandbox::bwrap_args::FileTypes;
use crate::sandbox::deny_index::DenyIndex;
use crate::sandbox::glob::GlobExpansion;
use crate::sandbox::seccomp::SeccompMode;
use crate::sandbox::warm::launch::CommandSetup;
use crate::sandbox::warm::plan::{DecisionEnv, KnownHost};
use crate::sandbox::warm::request::{
    Decided, DenyMatches, Go, LaunchRequest, PrepareAnswer, PrepareRequest, StandbyRequest,
    STANDING_BY,
};
use crate::sandbox::warm::{self, Verdict};
use crate::sync::lock;

/// Prepared sandboxes one session keeps.
pub const MAX_PER_SESSION: usize = 4;
/// Prepared sandboxes the whole server keeps.
pub const MAX_PREPARED: usize = 16;
/// Default time a prepared sandbox stays unused before it is dropped.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30);
/// How long a shape that could not be prepared runs one-shot before the
/// next try.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// How long preparing may take.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest deny-glob match list sent with a command (larger: the helper
/// scans, as a one-shot run does).
const MAX_EXPANSION_BYTES: usize = 64 * 1024;
/// Standbys a prepared sandbox keeps ready or on their way: two, so that
/// the next command finds one ready while the one after it is made.
const STANDBYS: usize = 2;
/// Standbys in a row that may fail to start before a prepared sandbox
/// stops making them.
const MAX_STANDBY_FAILURES: u32 = 3;

/// Whether and how the server reuses sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReuseConfig {
    /// `--sandbox-reuse on|off`.
    pub enabled: bool,
    /// `--sandbox-reuse-idle-secs`.
    pub idle: Duration,
}

impl Default for ReuseConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            idle: DEFAULT_IDLE,
        }
    }
}

/// What the sandbox layer decided for one sandboxed start, in the parts
/// reuse needs (the helper's argv holds the same).
#[derive(Debug, Clone)]
pub struct SandboxRequest {
    pub profile: PermissionProfile,
    pub profile_json: String,
    pub policy_cwd: PathBuf,
    pub plantable: Vec<PathBuf>,
    /// Landlock or managed routing: one-shot sandboxes only.
    pub one_shot_only: bool,
}

/// The shape of a prepared sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    profile_json: String,
    policy_cwd: PathBuf,
    plantable: Vec<PathBuf>,
    env: DecisionEnv,
    console: bool,
}

impl Key {
    fn of(request: &SandboxRequest, spec: &LaunchSpec) -> Key {
        let env = DecisionEnv::of_pairs(&spec.env);
        Key {
            profile_json: request.profile_json.clone(),
            policy_cwd: request.policy_cwd.clone(),
            plantable: request.plantable.clone(),
            env,
            console: spec.tty.is_some(),
        }
    }
}

/// The server-wide part: the configuration, the count, the mount table.
#[derive(Debug)]
pub struct Reuse {
    config: ReuseConfig,
    exe: PathBuf,
    live: Arc<AtomicUsize>,
    mounts: MountWatch,
}

impl Reuse {
    pub fn new(config: ReuseConfig, exe: PathBuf) -> Reuse {
        Reuse {
            config,
            exe,
            live: Arc::new(AtomicUsize::new(0)),
            mounts: MountWatch::open(),
        }
    }

    /// Prepared sandboxes alive in the server (for tests and diagnostics).
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Marks `spec` (the sandbox helper's launch) to run in a prepared
    /// sandbox of `session`, preparing one first when there is none.
    /// Leaves it alone (a one-shot sandbox) when reuse is off, not
    /// possible for this request, or preparing failed.
    pub async fn attach(
        &self,
        session: &SessionSandboxes,
        request: &SandboxRequest,
        spec: &mut LaunchSpec,
    ) {
        if !self.config.enabled || request.one_shot_only {
            return;
        }
        if !self.mounts.watchable() {
            return;
        }
        let key = Key::of(request, spec);
        let generation = self.mounts.generation();
        for _ in 0..2 {
            let slot = session.slot(&key, self.config.idle);
            let (expansion, vouched) = slot.expansion(request).await;
            let prepared = slot
                .cell
                .get_or_init(|| self.prepare(spec, key.console, expansion.clone(), generation))
                .await;
            match prepared {
                Outcome::Ready(sandbox) if sandbox.usable(generation) => {
                    slot.touch();
                    let Some(matches) = expansion else {
                        // The helper scans and decides.
                        spec.helper = Some(sandbox.launch_job(None, None));
                        return;
                    };
                    let Ok((verdict_read, verdict_write)) =
                        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                    else {
                        spec.helper = Some(sandbox.launch_job(Some(matches), None));
                        return;
                    };
                    let ahead = Ahead {
                        expected: sandbox.digest,
                        matches,
                        env: key.env.clone(),
                        console: key.console,
                        stale: sandbox.stale_write.clone(),
                    };
                    let decision = Decision {
                        ahead,
                        index: slot.deny_index.clone(),
                        vouched,
                    };
                    let standby = sandbox.ready_standby();
                    let verdict = (verdict_read, verdict_write);
                    self.launch_decided(sandbox, standby, decision, spec, verdict)
                        .await;
                    return;
                }
                Outcome::Unavailable { since } if since.elapsed() < RETRY_AFTER => return,
                _ => session.remove(&key, &slot),
            }
        }
    }

    /// Launches the command of `spec` in the prepared `sandbox` while its
    /// sandbox is decided ([`decide`]), whose verdict the helper's launch
    /// reads on `verdict` before it launches anything. With a `standby`,
    /// the command is handed to it instead, and the decision made once the
    /// standby has it: the command takes every step but its exec with the
    /// setup the decision is expected to give it
    /// ([`warm::expected_setup`]), and runs only if the decision found the
    /// prepared sandbox and that setup; else the launch falls back to the
    /// helper's, which then gets the verdict (a fallback after the
    /// go-ahead finds none and runs the command on a one-shot sandbox).
    /// Without an expected setup (no earlier command named this cwd) the
    /// decision comes first. Each decision that finds the prepared sandbox
    /// leaves its directories for the next command and has the sandbox's
    /// standbys made up.
    async fn launch_decided(
        &self,
        sandbox: &Arc<PreparedSandbox>,
        standby: Option<Standby>,
        decision: Decision,
        spec: &mut LaunchSpec,
        (verdict_read, verdict_write): (OwnedFd, OwnedFd),
    ) {
        let next = StandbyNext {
            sandbox: sandbox.clone(),
            spec: spec.clone(),
            exe: self.exe.clone(),
        };
        spec.helper = Some(sandbox.launch_job(None, Some(verdict_read)));
        let mode = sandbox.standby_mode;
        let decide = move || {
            let decided = decide(&next.spec.argv, decision);
            if let Some(decided) = &decided {
                *lock(&next.sandbox.dirs) = warm::CommandDirs::of(&next.spec.argv, &decided.setup);
                next.sandbox.stand_by(&next.spec, &next.exe);
            }
            decided
        };
        let Some(standby) = standby else {
            tokio::task::spawn_blocking(move || write_verdict(&verdict_write, decide().as_deref()));
            return;
        };
        let expected = lock(&sandbox.dirs)
            .as_ref()
            .zip(mode)
            .and_then(|(dirs, mode)| warm::expected_setup(&spec.argv, mode, dirs));
        let (setup, go_ahead): (CommandSetup, GoAhead) = match expected {
            Some(setup) => {
                let expected = setup.clone();
                let go_ahead = move || {
                    let decided = decide();
                    let said = go_ahead_for(decided.as_deref(), &expected);
                    if said.is_none() {
                        write_verdict_later(verdict_write, decided);
                    }
                    said
                };
                (setup, Box::new(go_ahead))
            }
            None => {
                let decided = tokio::task::spawn_blocking(decide).await.ok().flatten();
                let said = decided
                    .as_deref()
                    .filter(|d| mode == Some(d.setup.seccomp) && !d.setup.console)
                    .and_then(|d| go_ahead_for(Some(d), &d.setup));
                match (decided, said) {
                    (Some(decided), Some(said)) => (decided.setup, Box::new(move || Some(said))),
                    (decided, _) => {
                        write_verdict_later(verdict_write, decided);
                        return;
                    }
                }
            }
        };
        let message = Go {
            setup,
            env: spec.env.clone(),
        }
        .encode();
        if message.len() <= warm::standby::MAX_GO_BYTES {
            spec.standby = Some(StandbyLaunch::new(Handoff {
                standby,
                message,
                go_ahead,
            }));
        } else {
            // Undecided: the helper's launch finds no verdict and runs the
            // command on a one-shot sandbox.
            drop(go_ahead);
        }
    }

    async fn prepare(
        &self,
        spec: &LaunchSpec,
        console: bool,
        expansion: Option<DenyMatches>,
        generation: u64,
    ) -> Outcome {
        let unavailable = |why: &str| {
            tracing::debug!("sandbox not prepared: {why}");
            Outcome::Unavailable {
                since: Instant::now(),
            }
        };
        if self.live.load(Ordering::Relaxed) >= MAX_PREPARED {
            return unavailable("the server keeps the most prepared sandboxes it may");
        }
        match tokio::time::timeout(
            PREPARE_TIMEOUT,
            self.start_keeper(spec, console, expansion, generation),
        )
        .await
        {
            Ok(Ok(sandbox)) => Outcome::Ready(Arc::new(sandbox)),
            Ok(Err(why)) => unavailable(&why),
            Err(_) => unavailable("preparing took too long"),
        }
    }

    /// Starts a keeper for `spec`'s command line and waits for its answer.
    async fn start_keeper(
        &self,
        spec: &LaunchSpec,
        console: bool,
        expansion: Option<DenyMatches>,
        generation: u64,
    ) -> Result<PreparedSandbox, String> {
        let (ours, theirs) = seqpacket_pair().map_err(|e| e.to_string())?;
        let (in_use_read, in_use_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| e.to_string())?;
        let request = PrepareRequest { console, expansion };
        let keeper = role_job(
            spec,
            spec.argv.clone(),
            HelperJob {
                kind: HelperKind::Prepare,
                data: request.encode(),
                fds: vec![Arc::new(theirs), Arc::new(in_use_read)],
            },
        );
        let spawned = crate::process::spawn::spawn_helper_job(&keeper, &self.exe)
            .await
            .map_err(|e| format!("cannot start a keeper: {e}"))?;
        drop(keeper);
        log_helper_stderr("sandbox keeper", spawned.stderr);
        let control = register(ours).map_err(|e| e.to_string())?;
        let (answer, fds) = receive_answer(&control).await?;
        let mut fds = fds.into_iter();
        match answer {
            PrepareAnswer::Ready { digest, net } => {
                let (Some(user), Some(mnt)) = (fds.next(), fds.next()) else {
                    return Err("the keeper sent no namespaces".into());
                };
                let net = if net {
                    Some(fds.next().ok_or("the keeper sent no network namespace")?)
                } else {
                    None
                };
                let (stale_read, stale_write) = nix::unistd::pipe2(
                    nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK,
                )
                .map_err(|e| e.to_string())?;
                self.live.fetch_add(1, Ordering::Relaxed);
                // Commands on a terminal bind it in pid 1's first steps:
                // they get no standby.
                let standby_mode = match (console, net.is_some()) {
                    (true, _) => None,
                    (false, true) => Some(SeccompMode::Restricted),
                    (false, false) => Some(SeccompMode::NetworkEnabled),
                };
                Ok(PreparedSandbox {
                    standbys: Mutex::default(),
                    standby_mode,
                    standby_failures: Arc::default(),
                    dirs: Mutex::default(),
                    user: Arc::new(user),
                    mnt: Arc::new(mnt),
                    net: net.map(Arc::new),
                    digest,
                    stale_read,
                    stale_write: Arc::new(stale_write),
                    in_use: Arc::new(in_use_write),
                    control: control.into_inner(),
                    generation,
                    live: self.live.clone(),
                })
            }
            PrepareAnswer::NotReusable(why) => Err(format!("one-shot only: {why}")),
            PrepareAnswer::Failed(why) => Err(why),
        }
    }
}

/// What the next command's standby is made from, once the current one is
/// decided.
struct StandbyNext {
    sandbox: Arc<PreparedSandbox>,
    spec: LaunchSpec,
    exe: PathBuf,
}

/// What a command's sandbox is decided with ([`decide`]).
struct Decision {
    ahead: Ahead,
    index: Arc<Mutex<Option<ShapeIndex>>>,
    vouched: Vouched,
}

/// What a command's sandbox is checked against.
struct Ahead {
    /// The prepared sandbox's digest.
    expected: [u8; 32],
    matches: DenyMatches,
    /// The helper's environment, as far as the decision reads it.
    env: DecisionEnv,
    console: bool,
    /// Where it is reported outdated.
    stale: Arc<OwnedFd>,
}

/// Decides, on the calling thread, whether a one-shot run of the helper
/// command line `argv` would build the prepared sandbox now
/// ([`warm::decide_ahead`]): the command as decided when the prepared
/// sandbox may take it. An outdated sandbox is also reported on its stale
/// pipe, so the next command prepares a new one. With vouched facts the
/// decision takes them as the host's; without, it leaves what it found of
/// paths in directories the shape's deny-glob index watches for the next
/// command, valid until the index sees anything happen.
fn decide(
    argv: &[std::ffi::OsString],
    Decision {
        ahead,
        index,
        vouched,
    }: Decision,
) -> Option<Box<Decided>> {
    let known = vouched.known.as_deref();
    let found = warm::decide_ahead(
        argv,
        &ahead.env,
        ahead.expected,
        &ahead.matches,
        ahead.console,
        known,
    );
    match found {
        Verdict::Launch(decided, looked_at) => {
            if let (None, Some(token)) = (known, vouched.token) {
                if let Some(shape) = lock(&index).as_mut() {
                    shape.remember(token, &looked_at);
                }
            }
            Some(decided)
        }
        Verdict::Outdated => {
            tracing::debug!("prepared sandbox outdated");
            let _ = crate::sys::fds::write_all(ahead.stale.as_raw_fd(), &[1]);
            None
        }
        Verdict::OneShot => None,
    }
}

/// Tells the helper's launch the verdict on `decided` (a helper gone
/// meanwhile closed the read end: nothing to tell).
fn write_verdict(verdict: &OwnedFd, decided: Option<&Decided>) {
    let said = warm::request::encode_verdict(decided);
    let _ = crate::sys::fds::write_all(verdict.as_raw_fd(), &said);
}

/// [`write_verdict`] on a blocking thread: a verdict longer than the
/// pipe's buffer waits there for the helper, which starts only later.
fn write_verdict_later(verdict: OwnedFd, decided: Option<Box<Decided>>) {
    tokio::task::spawn_blocking(move || write_verdict(&verdict, decided.as_deref()));
}

/// The go-ahead for a standby's command started with the setup
/// `expected`, when the decision found the prepared sandbox and that setup.
fn go_ahead_for(decided: Option<&Decided>, expected: &CommandSetup) -> Option<Vec<u8>> {
    decided
        .filter(|decided| decided.setup == *expected)
        .and_then(|decided| warm::request::go_ahead(&decided.warnings))
}

/// Logs what a keeper or a standby (`who`) says on stderr (bubblewrap's
/// or pid 1's setup errors).
fn log_helper_stderr(who: &'static str, stderr: Option<OwnedFd>) {
    let Some(stderr) = stderr else { return };
    tokio::spawn(async move {
        let Ok(fd) = register(stderr) else { return };
        let mut text = Vec::new();
        loop {
            let Ok(mut ready) = fd.readable().await else {
                break;
            };
            let mut buf = [0u8; 1024];
            match ready.try_io(|fd| nix::unistd::read(fd.get_ref(), &mut buf).map_err(Into::into)) {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => text.extend_from_slice(buf.get(..n).unwrap_or_default()),
                Err(_would_block) => continue,
            }
        }
        if !text.is_empty() {
            tracing::debug!("{who}: {}", String::from_utf8_lossy(&text).trim());
        }
    });
}

async fn receive_answer(
    control: &AsyncFd<OwnedFd>,
) -> Result<(PrepareAnswer, Vec<OwnedFd>), String> {
    loop {
        let mut ready = control.readable().await.map_err(|e| e.to_string())?;
        let mut buf = [0u8; 512];
        match ready.try_io(|fd| crate::sys::scm::recv_with_fds(fd.get_ref().as_raw_fd(), &mut buf))
        {
            Ok(Ok(Some((len, fds)))) => {
                let answer = buf
                    .get(..len)
                    .and_then(PrepareAnswer::decode)
                    .ok_or("the keeper's answer is malformed")?;
                return Ok((answer, fds));
            }
            Ok(Ok(None)) => return Err("the keeper ended without an answer".into()),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_would_block) => continue,
        }
    }
}

/// A socket pair whose first end (the server's) is non-blocking and the
/// second (the keeper's, which blocks on it) is not.
fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    crate::process::pty::set_nonblocking(&ours)?;
    Ok((ours, theirs))
}

/// What a slot holds once its preparation ended.
#[derive(Debug)]
enum Outcome {
    Ready(Arc<PreparedSandbox>),
    Unavailable { since: Instant },
}

/// One shape's place in a session.
#[derive(Debug)]
struct Slot {
    cell: tokio::sync::OnceCell<Outcome>,
    last_used: Mutex<Instant>,
    /// The shape's deny globs (and depth) and their index.
    deny_index: Arc<Mutex<Option<ShapeIndex>>>,
}

/// A shape's deny-glob index, the patterns and depth it was built for,
/// and what the last decision found of the paths in the directories it
/// watches.
#[derive(Debug)]
struct ShapeIndex {
    built_for: (Vec<String>, Option<usize>),
    index: DenyIndex,
    /// Valid while the index's disturbances are this number.
    known: Option<(u64, Arc<KnownHost>)>,
}

impl ShapeIndex {
    /// Keeps what a decision made after the refresh that returned `token`
    /// found of names in watched directories, if the index still says
    /// `token`. Types of entries in any case; identities only of what
    /// exists and is no symlink (a link's target may be anywhere).
    fn remember(&mut self, token: u64, looked_at: &KnownHost) {
        if self.index.disturbances() != Some(token) {
            return;
        }
        let index = &self.index;
        let watched =
            |path: &std::path::Path| path.parent().is_some_and(|dir| index.watches_dir(dir));
        let file_types: FileTypes = looked_at
            .file_types
            .iter()
            .filter(|(path, _)| watched(path))
            .map(|(path, kind)| (path.clone(), *kind))
            .collect();
        let identities = looked_at
            .identities
            .iter()
            .filter(
                |(path, _)| matches!(file_types.get(*path), Some(Some(kind)) if !kind.is_symlink()),
            )
            .map(|(path, identity)| (path.clone(), identity.clone()))
            .collect();
        self.known = Some((
            token,
            Arc::new(KnownHost {
                file_types,
                identities,
            }),
        ));
    }
}

/// What the shape's index vouches for, for one command: the index's
/// disturbances at its refresh (`None`: no index watching), and what the
/// last decision found then, if nothing happened since.
#[derive(Debug, Default)]
struct Vouched {
    token: Option<u64>,
    known: Option<Arc<KnownHost>>,
}

impl Slot {
    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }

    /// The deny-glob matches now, from the shape's index (`None`: none to
    /// send, the helper scans), and what the index vouches for. The index
    /// is built (one full scan) for the first command of the shape; later
    /// ones only replay what changed.
    async fn expansion(&self, request: &SandboxRequest) -> (Option<DenyMatches>, Vouched) {
        let (patterns, max_depth) = deny_globs(request);
        if patterns.is_empty() {
            let none = DenyMatches {
                patterns,
                max_depth,
                expansion: GlobExpansion::default(),
            };
            return (Some(none), Vouched::default());
        }
        let index = self.deny_index.clone();
        let refreshed = tokio::task::spawn_blocking(move || {
            let mut index = lock(&index);
            let built_for = (patterns.clone(), max_depth);
            if index
                .as_ref()
                .is_none_or(|shape| shape.built_for != built_for)
            {
                *index = DenyIndex::build(&patterns, max_depth)
                    .ok()
                    .map(|built| ShapeIndex {
                        built_for,
                        index: built,
                        known: None,
                    });
            }
            let shape = index.as_mut()?;
            let expansion = shape.index.refresh().ok()?.clone();
            let token = shape.index.disturbances();
            let known = match (&shape.known, token) {
                (Some((at, known)), Some(now)) if *at == now => Some(known.clone()),
                _ => None,
            };
            let matches = DenyMatches {
                patterns,
                max_depth,
                expansion,
            };
            Some((matches, Vouched { token, known }))
        })
        .await
        .ok()
        .flatten();
        let Some((matches, vouched)) = refreshed else {
            return (None, Vouched::default());
        };
        let size: usize = matches
            .expansion
            .paths
            .iter()
            .map(|p| p.as_os_str().len() + 4)
            .sum();
        if size > MAX_EXPANSION_BYTES {
            return (None, Vouched::default());
        }
        (Some(matches), vouched)
    }
}

/// The deny globs of `request` as the helper resolves them, and the depth.
fn deny_globs(request: &SandboxRequest) -> (Vec<String>, Option<usize>) {
    let (fs, _) = request.profile.to_runtime();
    let resolved = fs.resolve_with(&ResolveContext {
        cwd: request.policy_cwd.clone(),
        ..ResolveContext::default()
    });
    (
        resolved.unreadable_globs().to_vec(),
        resolved.glob_scan_max_depth.map(|d| d.get()),
    )
}

/// The prepared sandboxes of one session.
#[derive(Debug, Default)]
pub struct SessionSandboxes {
    slots: Arc<Mutex<HashMap<Key, Arc<Slot>>>>,
}

impl SessionSandboxes {
    /// The slot for `key`, made (and the least recently used one dropped
    /// beyond [`MAX_PER_SESSION`]) when there is none.
    fn slot(&self, key: &Key, idle: Duration) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        if let Some(slot) = slots.get(key) {
            return slot.clone();
        }
        if slots.len() >= MAX_PER_SESSION {
            let oldest = slots
                .iter()
                .max_by_key(|(_, slot)| slot.idle_for())
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                slots.remove(&oldest);
            }
        }
        let slot = Arc::new(Slot {
            cell: tokio::sync::OnceCell::new(),
            last_used: Mutex::new(Instant::now()),
            deny_index: Arc::default(),
        });
        slots.insert(key.clone(), slot.clone());
        drop(slots);
        expire_when_idle(Arc::downgrade(&self.slots), key.clone(), &slot, idle);
        slot
    }

    /// Drops `slot` if it is still the one for `key`.
    fn remove(&self, key: &Key, slot: &Arc<Slot>) {
        let mut slots = lock(&self.slots);
        if slots
            .get(key)
            .is_some_and(|current| Arc::ptr_eq(current, slot))
        {
            slots.remove(key);
        }
    }

    /// Drops every prepared sandbox of the session.
    pub fn clear(&self) {
        let drained: Vec<Arc<Slot>> = lock(&self.slots).drain().map(|(_, slot)| slot).collect();
        drop(drained);
    }

    /// Prepared sandboxes ready in this session (for tests and diagnostics).
    pub fn ready(&self) -> usize {
        lock(&self.slots)
            .values()
            .filter(|slot| matches!(slot.cell.get(), Some(Outcome::Ready(_))))
            .count()
    }
}

/// Drops the slot once it has been unused for `idle`.
fn expire_when_idle(
    slots: Weak<Mutex<HashMap<Key, Arc<Slot>>>>,
    key: Key,
    slot: &Arc<Slot>,
    idle: Duration,
) {
    let weak_slot = Arc::downgrade(slot);
    tokio::spawn(async move {
        let mut wait = idle;
        loop {
            tokio::time::sleep(wait).await;
            let (Some(slots), Some(slot)) = (slots.upgrade(), weak_slot.upgrade()) else {
                return;
            };
            let unused = slot.idle_for();
            if unused >= idle {
                let mut slots = lock(&slots);
                if slots
                    .get(&key)
                    .is_some_and(|current| Arc::ptr_eq(current, &slot))
                {
                    slots.remove(&key);
                }
                return;
            }
            wait = idle.saturating_sub(unused).max(Duration::from_millis(10));
        }
    });
}

/// A sandbox a keeper prepared: its namespaces, the digest it was built
/// for, the pipe helpers report it outdated on, the keeper's control
/// socket (closing it lets the keeper go).
#[derive(Debug)]
struct PreparedSandbox {
    user: Arc<OwnedFd>,
    mnt: Arc<OwnedFd>,
    net: Option<Arc<OwnedFd>>,
    digest: [u8; 32],
    stale_read: OwnedFd,
    stale_write: Arc<OwnedFd>,
    /// Held by every command's helper: the keeper keeps its mount points
    /// on the host until the last one is gone.
    in_use: Arc<OwnedFd>,
    control: OwnedFd,
    /// The mount table's generation when preparing began.
    generation: u64,
    live: Arc<AtomicUsize>,
    /// The next commands' pids 1 ([`STANDBYS`]), standing by or on their
    /// way, oldest first.
    standbys: Mutex<std::collections::VecDeque<PendingStandby>>,
    /// The seccomp filter of the commands a standby may take (`None`:
    /// none may).
    standby_mode: Option<SeccompMode>,
    /// Standbys in a row that failed to start.
    standby_failures: Arc<AtomicU32>,
    /// The directories the last decision gave a command.
    dirs: Mutex<Option<warm::CommandDirs>>,
}

/// A standby on its way: `None` once it failed to start.
type PendingStandby = tokio::sync::oneshot::Receiver<Option<Standby>>;

impl PreparedSandbox {
    /// Whether commands may still run in it: nobody reported it outdated,
    /// its keeper is there, and the server's mounts did not change since
    /// it was prepared.
    fn usable(&self, generation: u64) -> bool {
        let mut byte = [0u8; 1];
        let reported = matches!(nix::unistd::read(&self.stale_read, &mut byte), Ok(n) if n > 0);
        let mut poll = libc::pollfd {
            fd: self.control.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, zero timeout.
        let keeper_gone = unsafe { libc::poll(&mut poll, 1, 0) } != 0;
        let usable = !reported && !keeper_gone && generation == self.generation;
        if !usable {
            tracing::debug!(
                reported,
                keeper_gone,
                prepared_at = self.generation,
                now = generation,
                "prepared sandbox dropped"
            );
        }
        usable
    }

    /// The job that runs a command in it: the server's verdict comes on
    /// `verdict` when given, else the helper decides.
    fn launch_job(&self, expansion: Option<DenyMatches>, verdict: Option<OwnedFd>) -> HelperJob {
        let request = LaunchRequest {
            expected: self.digest,
            expansion,
            verdict_piped: verdict.is_some(),
        };
        let mut fds = vec![
            self.stale_write.clone(),
            self.in_use.clone(),
            self.user.clone(),
            self.mnt.clone(),
        ];
        fds.extend(verdict.map(Arc::new));
        fds.extend(self.net.clone());
        HelperJob {
            kind: HelperKind::Launch,
            data: request.encode(),
            fds,
        }
    }

    /// A standby ready now, the oldest first; those that failed to start
    /// are dropped on the way, those still on their way stay (a command
    /// never waits for one: the helper's launch is as quick).
    fn ready_standby(&self) -> Option<Standby> {
        use tokio::sync::oneshot::error::TryRecvError;
        let mut standbys = lock(&self.standbys);
        let mut i = 0;
        while let Some(pending) = standbys.get_mut(i) {
            match pending.try_recv() {
                Ok(Some(standby)) => {
                    standbys.remove(i);
                    return Some(standby);
                }
                Ok(None) | Err(TryRecvError::Closed) => {
                    standbys.remove(i);
                }
                Err(TryRecvError::Empty) => i += 1,
            }
        }
        None
    }

    /// Makes standbys (`sandbox::warm::standby`) from the helper launch
    /// `spec` until [`STANDBYS`] are ready or on their way, unless the
    /// commands may take none or too many failed in a row.
    fn stand_by(&self, spec: &LaunchSpec, exe: &std::path::Path) {
        if self.standby_failures.load(Ordering::Relaxed) >= MAX_STANDBY_FAILURES {
            return;
        }
        let mut standbys = lock(&self.standbys);
        let missing = STANDBYS.saturating_sub(standbys.len());
        let jobs: Vec<_> = (0..missing)
            .map_while(|_| self.standby_job(spec))
            .map(|(job, control)| {
                let (ready, pending) = tokio::sync::oneshot::channel();
                standbys.push_back(pending);
                (job, control, ready)
            })
            .collect();
        drop(standbys);
        if jobs.is_empty() {
            return;
        }
        let failures = self.standby_failures.clone();
        let exe = exe.to_owned();
        // One after another: making standbys takes at most one CPU from
        // the commands running meanwhile.
        tokio::spawn(async move {
            for (job, control, ready) in jobs {
                let started =
                    tokio::time::timeout(PREPARE_TIMEOUT, start_standby(job, &exe, control));
                let standby = match started.await {
                    Ok(Ok(standby)) => {
                        failures.store(0, Ordering::Relaxed);
                        Some(standby)
                    }
                    Ok(Err(why)) => {
                        tracing::debug!("no standby: {why}");
                        failures.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    Err(_) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                };
                // Nobody waits any more (the sandbox went): the standby goes.
                let _ = ready.send(standby);
            }
        });
    }

    /// The spawn job of a standby made from the helper launch `spec`, and
    /// the server's end of its control socket; `None` when its commands
    /// may take none.
    fn standby_job(&self, spec: &LaunchSpec) -> Option<(LaunchSpec, OwnedFd)> {
        let seccomp = self.standby_mode?;
        let (ours, theirs) = seqpacket_pair().ok()?;
        let mut fds = vec![
            Arc::new(theirs),
            self.in_use.clone(),
            self.user.clone(),
            self.mnt.clone(),
        ];
        if seccomp == SeccompMode::Restricted {
            fds.extend(self.net.clone());
        }
        // The helper's flags only: the command comes later.
        let flags = spec.argv.iter().take_while(|arg| *arg != "--").cloned();
        let job = role_job(
            spec,
            flags.collect(),
            HelperJob {
                kind: HelperKind::Standby,
                data: StandbyRequest { seccomp }.encode(),
                fds,
            },
        );
        Some((job, ours))
    }
}

/// The spawn job of one of the helper's reuse roles (`helper`), started
/// as the helper launch `spec` is (the same program, directory and
/// environment) with the command line `argv`, on no terminal.
fn role_job(spec: &LaunchSpec, argv: Vec<std::ffi::OsString>, helper: HelperJob) -> LaunchSpec {
    LaunchSpec {
        argv,
        arg0: spec.arg0.clone(),
        cwd: spec.cwd.clone(),
        env: spec.env.clone(),
        tty: None,
        pipe_stdin: false,
        sandboxed: false,
        helper: Some(helper),
        standby: None,
    }
}

/// Starts the standby `job` and waits until its pid 1 stands by (or ends:
/// the job's own copies of the descriptors it sent are closed first).
async fn start_standby(
    job: LaunchSpec,
    exe: &std::path::Path,
    control: OwnedFd,
) -> Result<Standby, String> {
    let spawned = crate::process::spawn::spawn_helper_job(&job, exe)
        .await
        .map_err(|e| format!("cannot start a standby: {e}"))?;
    drop(job);
    log_helper_stderr("sandbox standby", spawned.stderr);
    let control = register(control).map_err(|e| e.to_string())?;
    loop {
        let mut ready = control.readable().await.map_err(|e| e.to_string())?;
        let mut word = [0u8; 1];
        match ready.try_io(|fd| nix::unistd::read(fd.get_ref(), &mut word).map_err(Into::into)) {
            Ok(Ok(1)) if word[0] == STANDING_BY => break,
            Ok(Ok(_)) => return Err("the standby ended before it stood by".into()),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_would_block) => continue,
        }
    }
    Ok(Standby {
        supervisor_pid: spawned.supervisor_pid.as_raw(),
        command_pid: spawned.command_pid.as_raw(),
        status: spawned.status,
        control: control.into_inner(),
    })
}

impl Drop for PreparedSandbox {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Changes of the server's mount table: `/proc/self/mountinfo` polls
/// readable with `POLLPRI` once after every change.
#[derive(Debug)]
struct MountWatch {
    file: Option<Arc<std::fs::File>>,
    generation: Arc<AtomicU64>,
}

impl MountWatch {
    fn open() -> MountWatch {
        MountWatch {
            file: std::fs::File::open("/proc/self/mountinfo")
                .ok()
                .map(Arc::new),
            generation: Arc::default(),
        }
    }

    /// Whether changes can be seen (without, nothing is reused).
    fn watchable(&self) -> bool {
        self.file.is_some()
    }

    /// A number that changes whenever the mount table did.
    fn generation(&self) -> u64 {
        let Some(file) = &self.file else {
            return self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        };
        let mut poll = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        // SAFETY: one live pollfd, zero timeout.
        let changed = unsafe { libc::poll(&mut poll, 1, 0) } > 0
            && poll.revents & (libc::POLLPRI | libc::POLLERR) != 0;
        if changed {
            self.generation.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.generation.load(Ordering::Relaxed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only names in directories the index watches are kept, and only the
    /// identities of what exists and is no symlink; nothing once the index
    /// moved on.
    #[test]
    fn a_shape_remembers_only_what_its_index_vouches_for() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::write(root.join("a/x.env"), "").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("a/link")).unwrap();
        let patterns = vec![format!("{}/**/*.env", root.display())];
        let mut index = DenyIndex::build(&patterns, None).unwrap();
        index.refresh().unwrap();
        let token = index.disturbances().unwrap();
        let mut shape = ShapeIndex {
            built_for: (patterns, None),
            index,
            known: None,
        };
        let kind = |p: &std::path::Path| p.symlink_metadata().ok().map(|m| m.file_type());
        let paths = [
            root.clone(),
            root.join("a"),
            root.join("a/x.env"),
            root.join("a/link"),
            root.join("a/missing"),
        ];
        let looked_at = KnownHost {
            file_types: paths.iter().map(|p| (p.clone(), kind(p))).collect(),
            identities: paths
                .iter()
                .map(|p| (p.clone(), warm::plan::identity(p)))
                .collect(),
        };
        shape.remember(token + 1, &looked_at);
        assert!(shape.known.is_none(), "the index moved on");
        shape.remember(token, &looked_at);
        let (at, known) = shape.known.clone().unwrap();
        assert_eq!(at, token);
        let mut types: Vec<_> = known.file_types.keys().cloned().collect();
        types.sort();
        // The root's parent is not watched.
        let mut expected = paths[1..].to_vec();
        expected.sort();
        assert_eq!(types, expected);
        let mut identities: Vec<_> = known.identities.keys().cloned().collect();
        identities.sort();
        assert_eq!(identities, [root.join("a"), root.join("a/x.env")]);
    }
}
