//! Incremental deny-glob index: which paths the `deny` glob patterns match
//! right now, kept current with inotify, so asking again costs the same on a
//! 1,000-file workspace as on a 200,000-file one.
//!
//! [`DenyIndex::build`] scans once with the built-in walker's rules of
//! [`crate::sandbox::glob`] and watches every directory that scan reads (the
//! search roots and every directory below them that no glob matches, down to
//! `max_depth`). [`DenyIndex::refresh`] reads the pending events without
//! blocking and looks again only at the names they mention, comparing each
//! with the disk as it is now (an event only says "look here"), and updates
//! the answer in place. The answer is the one `glob::expand(patterns,
//! max_depth, &Scanner::BuiltIn)` would give: same matches, same symlink
//! targets, same skipped patterns, same errors.
//!
//! Why draining is enough: inotify queues an event inside the system call
//! that changes the directory, before that call returns. A change that has
//! completed before `refresh` starts (by this process or any other, in any
//! mount namespace: watches are on inodes) is therefore already queued, and
//! `refresh` reads until the queue is empty. A directory is watched before it
//! is read, so an entry made while it is being scanned is either seen by the
//! read or reported by the watch. Changes racing with `refresh` itself show
//! in the next one, as they would race with a cold scan.
//!
//! What inotify does not say is checked on every refresh, at a cost that
//! does not depend on the workspace: each search root's identity (device and
//! inode, following symlinks, so a moved, replaced or re-pointed root or
//! ancestor is noticed), its canonical path and the targets of matched
//! symlinks (which may live outside the watched tree), and the mount table
//! (one `poll` of `/proc/thread-self/mountinfo`; a mount appearing or
//! disappearing on, under or above a root rescans that root).
//!
//! Fallbacks, never a stale answer: a queue overflow, a burst of more events
//! than [`IndexLimits::max_events_per_refresh`] or an unexpected answer from
//! the kernel rescans everything at once (with a fresh inotify instance).
//! When watches cannot be trusted at all (no inotify instance, the watch
//! limit of [`IndexLimits`] or the kernel's reached, a root on a filesystem
//! whose changes inotify may not see, no mount table) the index says so once
//! through `tracing` and every refresh is a full cold scan: correct, only
//! slower. A failed scan is returned as the cold path would return it, and
//! the next refresh starts over with a full rescan.
//!
//! Not here: when to refresh and what to do with the paths (the launcher's
//! business), and the one-shot scan (`glob::expand`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io::Read;
use std::ops::Bound;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

use crate::glob_pattern::glob_match;
use crate::sandbox::glob::{self, GlobError, GlobExpansion, Scanner, MAX_GLOB_MATCHES};

/// Default bound on the directories one index watches. Measured, each
/// costs about 0.3 KiB of this process and 0.1 KiB of unreclaimable kernel
/// memory, and keeps its directory's inode cached (about 1 KiB): 32,768
/// watches are about 13 MiB, and pin up to about 35 MiB of inode cache.
pub const DEFAULT_MAX_WATCHES: usize = 32_768;

/// Default bound on the events one refresh replays; a bigger burst is
/// answered by a full rescan, so a writer that never stops cannot keep a
/// refresh going.
pub const DEFAULT_MAX_EVENTS_PER_REFRESH: usize = 65_536;

/// Filesystems whose every change on this machine goes through its VFS, so
/// inotify reports it. Anything else (NFS, SMB, FUSE, 9p, virtiofs, ceph,
/// procfs…) can change behind the kernel's back: the index rescans instead.
const LOCAL_FILESYSTEMS: &[&str] = &[
    "bcachefs", "btrfs", "erofs", "exfat", "ext2", "ext3", "ext4", "f2fs", "hfsplus", "iso9660",
    "jfs", "msdos", "nilfs2", "ntfs3", "overlay", "ramfs", "reiserfs", "squashfs", "tmpfs", "udf",
    "vfat", "xfs", "zfs",
];

/// The calling thread's: a thread may have a mount namespace of its own.
const MOUNT_TABLE: &str = "/proc/thread-self/mountinfo";

/// Bounds of one index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLimits {
    /// Directories watched at most; beyond, every refresh rescans.
    pub max_watches: usize,
    /// Events one refresh replays at most; beyond, it rescans everything.
    pub max_events_per_refresh: usize,
}

impl Default for IndexLimits {
    fn default() -> Self {
        Self {
            max_watches: DEFAULT_MAX_WATCHES,
            max_events_per_refresh: DEFAULT_MAX_EVENTS_PER_REFRESH,
        }
    }
}

/// Why the index stopped trusting watches (every refresh then rescans).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RescanReason {
    #[error("cannot create an inotify instance: {0}")]
    Inotify(Errno),
    #[error("more than {limit} directories to watch")]
    WatchLimit { limit: usize },
    #[error("cannot watch {}: {errno}", .path.display())]
    AddWatch { path: PathBuf, errno: Errno },
    #[error("cannot read the mount table {MOUNT_TABLE}: {0}")]
    MountTable(Errno),
    #[error("{} is on {fstype}, whose changes inotify may not see", .mount_point.display())]
    Filesystem {
        mount_point: PathBuf,
        fstype: String,
    },
}

/// Counters for callers, tests and the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexStats {
    /// Directories watched now (kernel watches held).
    pub watches: usize,
    /// Full rescans since the index was built (overflow, bursts, scan
    /// errors), not counting the refreshes of rescan mode.
    pub full_rescans: u64,
}

/// The deny-glob matches of some patterns, kept current. Blocking (it reads
/// directories): call it where blocking is allowed.
#[derive(Debug)]
pub struct DenyIndex {
    patterns: Vec<String>,
    max_depth: Option<usize>,
    state: State,
    /// The answer when not watching (a watcher keeps its own).
    expansion: GlobExpansion,
    generation: u64,
    /// Refreshes that saw anything at all happen (see [`DenyIndex::disturbances`]).
    disturbances: u64,
}

#[derive(Debug)]
enum State {
    /// Nothing to scan (no search root, or `max_depth` 0): the answer never changes.
    Fixed,
    Watching(Box<Watcher>),
    Rescanning(RescanReason),
}

impl DenyIndex {
    /// Scans `patterns` (absolute, as for `glob::expand`) and starts
    /// watching, with [`IndexLimits::default`].
    pub fn build(patterns: &[String], max_depth: Option<usize>) -> Result<Self, GlobError> {
        Self::build_with(patterns, max_depth, IndexLimits::default())
    }

    /// [`DenyIndex::build`] with other bounds. Fails as `glob::expand`
    /// fails; a watch that cannot be set is no error (rescan mode).
    pub fn build_with(
        patterns: &[String],
        max_depth: Option<usize>,
        limits: IndexLimits,
    ) -> Result<Self, GlobError> {
        let (groups, skipped) = if max_depth == Some(0) {
            Default::default()
        } else {
            glob::group_by_root(patterns)
        };
        let mut index = Self {
            patterns: patterns.to_vec(),
            max_depth,
            state: State::Fixed,
            expansion: GlobExpansion {
                paths: BTreeSet::new(),
                skipped,
            },
            generation: 0,
            disturbances: 0,
        };
        if groups.is_empty() {
            return Ok(index);
        }
        match Watcher::start(groups, index.expansion.skipped.clone(), max_depth, limits) {
            Ok(watcher) => index.state = State::Watching(Box::new(watcher)),
            Err(Fatal::Failed(err)) => return Err(err),
            Err(Fatal::Untrusted(reason)) => {
                index.enter_rescan_mode(reason);
                index.expansion = glob::expand(patterns, max_depth, &Scanner::BuiltIn)?;
            }
        }
        Ok(index)
    }

    /// Applies every change made before this call and returns the current
    /// matches: equal to what a fresh `glob::expand` with the built-in
    /// scanner returns, error included. After an error the next refresh
    /// starts with a full rescan.
    pub fn refresh(&mut self) -> Result<&GlobExpansion, GlobError> {
        if let State::Watching(watcher) = &mut self.state {
            watcher.disturbed = false;
            let outcome = watcher.refresh();
            if watcher.disturbed || outcome.is_err() {
                self.disturbances += 1;
            }
            match outcome {
                Ok(()) => {
                    if std::mem::take(&mut watcher.answer.changed) {
                        self.generation += 1;
                    }
                }
                Err(Fatal::Failed(err)) => return Err(err),
                Err(Fatal::Untrusted(reason)) => {
                    // What the caller last saw may differ from what the
                    // rescan finds in ways no longer known: say it changed.
                    self.enter_rescan_mode(reason);
                    self.generation += 1;
                }
            }
        }
        if let State::Rescanning(_) = self.state {
            let fresh = glob::expand(&self.patterns, self.max_depth, &Scanner::BuiltIn)?;
            if fresh.paths != self.expansion.paths {
                self.generation += 1;
            }
            self.expansion = fresh;
        }
        Ok(match &self.state {
            State::Watching(watcher) => &watcher.answer.expansion,
            State::Fixed | State::Rescanning(_) => &self.expansion,
        })
    }

    /// Grows each time a refresh returns different paths than the refresh
    /// before it, so a caller that remembers it knows whether its masks are
    /// still right without comparing sets. It may also grow when a path
    /// came and went between two refreshes (never the other way round).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// While watching: a number that grows with every refresh that saw
    /// anything at all happen under the watched tree (an event of any kind
    /// in a watched directory, a mount change, a root or a matched link
    /// moved or re-pointed, a rescan, a failure). Two refreshes that
    /// return the same number saw no entry of a watched directory made,
    /// removed, renamed or changed in its attributes between them, so
    /// what `lstat` (and a file handle) said then of a name in a watched
    /// directory ([`DenyIndex::watches_dir`]) still holds at the second.
    /// `None` when not watching: nothing is vouched for.
    pub fn disturbances(&self) -> Option<u64> {
        match self.state {
            State::Watching(_) => Some(self.disturbances),
            State::Fixed | State::Rescanning(_) => None,
        }
    }

    /// Whether `dir` (spelled from a search root down) is a directory
    /// this index watches now.
    pub fn watches_dir(&self, dir: &Path) -> bool {
        let State::Watching(watcher) = &self.state else {
            return false;
        };
        watcher.roots.iter().any(|root| {
            dir.strip_prefix(&root.root)
                .is_ok_and(|rel| root.dirs.contains_key(rel))
        })
    }

    /// Why every refresh is a full scan, if it is.
    pub fn rescan_reason(&self) -> Option<&RescanReason> {
        match &self.state {
            State::Rescanning(reason) => Some(reason),
            State::Fixed | State::Watching(_) => None,
        }
    }

    /// Watches held and full rescans done.
    pub fn stats(&self) -> IndexStats {
        match &self.state {
            State::Watching(watcher) => IndexStats {
                watches: watcher.watches.len(),
                full_rescans: watcher.full_rescans,
            },
            State::Fixed | State::Rescanning(_) => IndexStats::default(),
        }
    }

    /// Drops every watch (closing the inotify instance) and says once why.
    fn enter_rescan_mode(&mut self, reason: RescanReason) {
        tracing::warn!("deny-glob index: {reason}; every refresh rescans the workspace");
        self.state = State::Rescanning(reason);
    }
}

/// The answer of a watcher, kept as matches come and go, in time that
/// depends on the change and not on the number of matches: each path with
/// how many matches put it there (a symlink target can be shared, or be a
/// match itself).
#[derive(Debug, Default)]
struct Answer {
    expansion: GlobExpansion,
    /// Only looked up, never iterated: its order leaks nowhere.
    uses: HashMap<PathBuf, u32>,
    /// The paths changed since a refresh last returned them.
    changed: bool,
}

impl Answer {
    fn add(&mut self, path: PathBuf) {
        let uses = self.uses.entry(path.clone()).or_insert(0);
        *uses += 1;
        if *uses == 1 {
            self.expansion.paths.insert(path);
            self.changed = true;
        }
    }

    fn remove(&mut self, path: &Path) {
        let Some(uses) = self.uses.get_mut(path) else {
            return;
        };
        *uses = uses.saturating_sub(1);
        if *uses == 0 {
            self.uses.remove(path);
            self.expansion.paths.remove(path);
            self.changed = true;
        }
    }

    /// Adds or removes what match `rel` of `root` puts in the answer: its
    /// path and, where different, its canonical path.
    fn count(&mut self, root: &RootState, rel: &Path, add: bool) {
        let path = root.path_of(rel);
        let target = match root.symlinks.get(rel) {
            Some(target) => target.clone(),
            None => root.canonical.as_ref().map(|c| c.join(rel)),
        };
        for path in target.filter(|t| *t != path).into_iter().chain([path]) {
            if add {
                self.add(path);
            } else {
                self.remove(&path);
            }
        }
    }
}

/// Why a scan stopped early.
enum ScanStop {
    /// The scan failed as a cold scan would.
    Failed(GlobError),
    /// Root `.0` went over [`MAX_GLOB_MATCHES`]: during a replay a full
    /// rescan decides, during a full rescan it is the cold scan's error.
    TooManyMatches(usize),
    /// Watches cannot be trusted any more.
    Untrusted(RescanReason),
}

/// Why replaying events stopped early.
enum Stop {
    Scan(ScanStop),
    /// The events cannot be replayed: rescan everything.
    Replay,
}

impl From<ScanStop> for Stop {
    fn from(stop: ScanStop) -> Self {
        Stop::Scan(stop)
    }
}

/// Why a full rescan stopped.
enum Fatal {
    Failed(GlobError),
    Untrusted(RescanReason),
}

/// Device and inode: which directory a path named when it was scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(meta: &Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// A directory the index has read and watches.
#[derive(Debug, Clone, Copy)]
struct TrackedDir {
    wd: WatchDescriptor,
    id: FileId,
}

/// One path a watch stands for: a directory of root `root`, relative to it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DirRef {
    root: usize,
    rel: PathBuf,
}

/// A mount that decides what the paths under a root are.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    id: u64,
    point: PathBuf,
    fstype: String,
}

/// One search root and what is known below it.
#[derive(Debug)]
struct RootState {
    root: PathBuf,
    globs: Vec<String>,
    /// The root as scanned (following symlinks, as the cold scan does);
    /// None: it was not a directory.
    identity: Option<FileId>,
    /// Its canonical path: what a match that is no symlink canonicalizes to
    /// is this joined with the match's relative path.
    canonical: Option<PathBuf>,
    /// The mount holding the root and every mount below it.
    mounts: Vec<Mount>,
    /// Directories read and watched, by path relative to the root ("" is
    /// the root).
    dirs: BTreeMap<PathBuf, TrackedDir>,
    /// Matches, relative to the root.
    matches: BTreeSet<PathBuf>,
    /// The matches that are symlinks, with their canonical targets.
    symlinks: BTreeMap<PathBuf, Option<PathBuf>>,
}

impl RootState {
    fn new(root: PathBuf, globs: Vec<String>) -> Self {
        Self {
            root,
            globs,
            identity: None,
            canonical: None,
            mounts: Vec::new(),
            dirs: BTreeMap::new(),
            matches: BTreeSet::new(),
            symlinks: BTreeMap::new(),
        }
    }

    /// The absolute path of `rel` (the root itself for "", as the cold
    /// scan names it).
    fn path_of(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    /// Whether the path of `rel`'s parent still names the directory this
    /// index read there.
    fn still_holds_parent_of(&self, rel: &Path) -> bool {
        let Some(parent) = rel.parent() else {
            return false;
        };
        let Some(dir) = self.dirs.get(parent) else {
            return false;
        };
        let meta = if parent.as_os_str().is_empty() {
            std::fs::metadata(&self.root)
        } else {
            std::fs::symlink_metadata(self.root.join(parent))
        };
        meta.is_ok_and(|meta| meta.is_dir() && FileId::of(&meta) == dir.id)
    }

    fn is_match(&self, rel: &Path) -> bool {
        let text = rel.to_string_lossy();
        self.globs.iter().any(|g| glob_match(g, &text))
    }
}

/// The watching state: one inotify instance for all roots.
#[derive(Debug)]
struct Watcher {
    inotify: Inotify,
    mount_table: File,
    roots: Vec<RootState>,
    /// Which directories each watch stands for: one directory can be
    /// reached by several paths (overlapping roots, a bind mount, a
    /// directory moved while it was being scanned). Only looked up, never
    /// iterated, so its order leaks nowhere.
    watches: HashMap<WatchDescriptor, Vec<DirRef>>,
    max_depth: Option<usize>,
    limits: IndexLimits,
    answer: Answer,
    /// The last refresh failed: the next one starts from scratch.
    needs_full_rescan: bool,
    full_rescans: u64,
    /// Something happened under the watched tree since the last refresh
    /// began: an event, a mount change, a root moved or re-pointed, a
    /// matched link re-pointed, a rescan.
    disturbed: bool,
}

fn watch_mask(follow: bool) -> AddWatchFlags {
    let mask = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_ONLYDIR;
    if follow {
        mask
    } else {
        mask | AddWatchFlags::IN_DONT_FOLLOW
    }
}

fn new_inotify() -> Result<Inotify, RescanReason> {
    Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(RescanReason::Inotify)
}

/// Whether `err` says the path is no longer there (its removal is queued
/// as an event of its parent, or noticed by the root check).
fn is_gone(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
    )
}

fn root_identity(root: &Path) -> Option<FileId> {
    std::fs::metadata(root)
        .ok()
        .filter(Metadata::is_dir)
        .map(|meta| FileId::of(&meta))
}

fn depth(rel: &Path) -> usize {
    rel.components().count()
}

impl Watcher {
    fn start(
        groups: BTreeMap<PathBuf, Vec<String>>,
        skipped: Vec<String>,
        max_depth: Option<usize>,
        limits: IndexLimits,
    ) -> Result<Self, Fatal> {
        let mount_table = File::open(MOUNT_TABLE).map_err(|err| {
            Fatal::Untrusted(RescanReason::MountTable(Errno::from_raw(
                err.raw_os_error().unwrap_or(libc::EIO),
            )))
        })?;
        let mut watcher = Self {
            inotify: new_inotify().map_err(Fatal::Untrusted)?,
            mount_table,
            roots: groups
                .into_iter()
                .map(|(root, globs)| RootState::new(root, globs))
                .collect(),
            watches: HashMap::new(),
            max_depth,
            limits,
            answer: Answer {
                expansion: GlobExpansion {
                    paths: BTreeSet::new(),
                    skipped,
                },
                ..Answer::default()
            },
            needs_full_rescan: false,
            full_rescans: 0,
            disturbed: false,
        };
        watcher.rescan_all()?;
        watcher.full_rescans = 0;
        watcher.answer.changed = false;
        Ok(watcher)
    }

    /// Brings the state and the answer up to date with the disk.
    fn refresh(&mut self) -> Result<(), Fatal> {
        if self.needs_full_rescan {
            return self.rescan_all();
        }
        match self.catch_up() {
            Ok(()) => Ok(()),
            Err(Stop::Replay | Stop::Scan(ScanStop::TooManyMatches(_))) => self.rescan_all(),
            Err(Stop::Scan(ScanStop::Failed(err))) => {
                self.needs_full_rescan = true;
                Err(Fatal::Failed(err))
            }
            Err(Stop::Scan(ScanStop::Untrusted(reason))) => Err(Fatal::Untrusted(reason)),
        }
    }

    /// Starts over: a fresh inotify instance (dropping every watch and every
    /// queued event) and a scan of every root.
    fn rescan_all(&mut self) -> Result<(), Fatal> {
        self.disturbed = true;
        self.needs_full_rescan = true;
        self.full_rescans += 1;
        // Unchanged since last returned, `before` is what the caller has.
        let before = std::mem::take(&mut self.answer.expansion.paths);
        let was_changed = std::mem::replace(&mut self.answer.changed, true);
        self.answer.uses.clear();
        self.inotify = new_inotify().map_err(Fatal::Untrusted)?;
        self.watches.clear();
        // Polling first consumes the pending mount change: one made during
        // the scan below is reported by the next poll.
        self.mounts_changed();
        let table = read_mount_table().map_err(Fatal::Untrusted)?;
        for root in &mut self.roots {
            root.dirs.clear();
            root.matches.clear();
            root.symlinks.clear();
        }
        for i in 0..self.roots.len() {
            self.rescan_root(i, &table).map_err(|stop| match stop {
                ScanStop::Failed(err) => Fatal::Failed(err),
                ScanStop::TooManyMatches(i) => Fatal::Failed(GlobError::TooManyMatches {
                    root: self
                        .roots
                        .get(i)
                        .map(|r| r.root.clone())
                        .unwrap_or_default(),
                }),
                ScanStop::Untrusted(reason) => Fatal::Untrusted(reason),
            })?;
        }
        self.update_targets();
        self.needs_full_rescan = false;
        self.answer.changed = was_changed || self.answer.expansion.paths != before;
        Ok(())
    }

    /// Replays the queued events, then checks what inotify does not report.
    fn catch_up(&mut self) -> Result<(), Stop> {
        self.drain_events()?;
        if self.mounts_changed() {
            self.disturbed = true;
            let table = read_mount_table().map_err(ScanStop::Untrusted)?;
            for i in 0..self.roots.len() {
                let Some(root) = self.roots.get(i) else { break };
                let canonical = root.root.canonicalize().ok();
                if relevant_mounts(&table, canonical.as_deref()) != root.mounts {
                    self.rescan_root(i, &table)?;
                }
            }
        }
        for i in 0..self.roots.len() {
            let Some(root) = self.roots.get(i) else { break };
            if root_identity(&root.root) != root.identity {
                let table = read_mount_table().map_err(ScanStop::Untrusted)?;
                self.rescan_root(i, &table)?;
            }
        }
        self.update_targets();
        Ok(())
    }

    /// Reads events until the queue is empty (or the burst is too big).
    fn drain_events(&mut self) -> Result<(), Stop> {
        let mut replayed = 0usize;
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) if events.is_empty() => return Ok(()),
                Ok(events) => events,
                Err(Errno::EAGAIN) => return Ok(()),
                Err(Errno::EINTR) => continue,
                Err(_) => return Err(Stop::Replay),
            };
            self.disturbed = true;
            for event in events {
                replayed += 1;
                if replayed > self.limits.max_events_per_refresh {
                    return Err(Stop::Replay);
                }
                self.apply(event)?;
            }
        }
    }

    fn apply(&mut self, event: InotifyEvent) -> Result<(), Stop> {
        if event
            .mask
            .intersects(AddWatchFlags::IN_Q_OVERFLOW | AddWatchFlags::IN_UNMOUNT)
        {
            return Err(Stop::Replay);
        }
        let Some(refs) = self.watches.get(&event.wd).cloned() else {
            // A watch this index removed: its paths were dealt with then.
            return Ok(());
        };
        if event.mask.contains(AddWatchFlags::IN_IGNORED) {
            // The kernel dropped a watch this index still used (its
            // directory was deleted, or replaced by a rename): look again.
            self.watches.remove(&event.wd);
            for dir in refs {
                self.recheck_dir(dir)?;
            }
            return Ok(());
        }
        let Some(name) = event.name else {
            if event.mask.contains(AddWatchFlags::IN_ATTRIB) {
                for dir in &refs {
                    self.check_readable(dir)?;
                }
            }
            return Ok(());
        };
        let entry_changed = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO;
        if !event.mask.intersects(entry_changed) {
            return Ok(());
        }
        for dir in refs {
            self.reconcile(dir.root, dir.rel.join(&name))?;
        }
        Ok(())
    }

    /// A watched directory lost its watch: scan it again if it is still there.
    fn recheck_dir(&mut self, dir: DirRef) -> Result<(), Stop> {
        if dir.rel.as_os_str().is_empty() {
            let table = read_mount_table().map_err(ScanStop::Untrusted)?;
            return Ok(self.rescan_root(dir.root, &table)?);
        }
        self.forget(dir.root, &dir.rel, true);
        self.reconcile(dir.root, dir.rel)
    }

    /// A watched directory's mode changed: the cold scan fails where it
    /// cannot read a directory, and so does this index.
    fn check_readable(&self, dir: &DirRef) -> Result<(), ScanStop> {
        let Some(root) = self.roots.get(dir.root) else {
            return Ok(());
        };
        let path = root.path_of(&dir.rel);
        match std::fs::read_dir(&path) {
            Ok(_) => Ok(()),
            Err(err) if is_gone(&err) => Ok(()),
            Err(source) => Err(ScanStop::Failed(GlobError::Walk { path, source })),
        }
    }

    /// Makes the state of `rel` (and below it) what the disk says now.
    fn reconcile(&mut self, i: usize, rel: PathBuf) -> Result<(), Stop> {
        if self.max_depth.is_some_and(|d| depth(&rel) > d) {
            return Ok(());
        }
        let Some(root) = self.roots.get(i) else {
            return Ok(());
        };
        if !root.still_holds_parent_of(&rel) {
            // The parent was moved, removed or replaced (say by a symlink to
            // elsewhere): its own parent's events, or the root check, bring
            // its new content; reading through the path now could read
            // another tree.
            return Ok(());
        }
        let meta = match std::fs::symlink_metadata(root.path_of(&rel)) {
            Ok(meta) => meta,
            Err(err) if is_gone(&err) => {
                self.forget(i, &rel, true);
                return Ok(());
            }
            Err(_) => return Err(Stop::Replay),
        };
        if root.is_match(&rel) {
            // A matched directory is masked whole: nothing below it is kept.
            self.forget(i, &rel, false);
            self.untrack(i, &rel);
            return Ok(self.add_match(i, rel, meta.file_type().is_symlink())?);
        }
        let descend = meta.is_dir() && self.max_depth.is_none_or(|d| depth(&rel) < d);
        let same_dir = root
            .dirs
            .get(&rel)
            .is_some_and(|dir| dir.id == FileId::of(&meta));
        if descend && same_dir {
            // The same directory: its own watch reports what changes inside.
            return Ok(());
        }
        self.forget(i, &rel, true);
        if descend {
            self.scan(i, rel)?;
        }
        Ok(())
    }

    /// Forgets the root's state and scans it again.
    fn rescan_root(&mut self, i: usize, table: &[Mount]) -> Result<(), ScanStop> {
        self.disturbed = true;
        self.forget(i, Path::new(""), true);
        let Some(root) = self.roots.get_mut(i) else {
            return Ok(());
        };
        // Taken before the root is watched: a root replaced after this is
        // noticed by the next refresh's identity check.
        root.identity = root_identity(&root.root);
        root.canonical = root.root.canonicalize().ok();
        root.mounts = relevant_mounts(table, root.canonical.as_deref());
        if let Some(mount) = root
            .mounts
            .iter()
            .find(|m| !LOCAL_FILESYSTEMS.contains(&m.fstype.as_str()))
        {
            return Err(ScanStop::Untrusted(RescanReason::Filesystem {
                mount_point: mount.point.clone(),
                fstype: mount.fstype.clone(),
            }));
        }
        if root.identity.is_some() {
            self.scan(i, PathBuf::new())?;
        }
        Ok(())
    }

    /// Watches and reads `start` (relative to root `i`) and every directory
    /// below it that the cold scan would read: each is watched before it is
    /// read, so nothing made meanwhile is missed.
    fn scan(&mut self, i: usize, start: PathBuf) -> Result<(), ScanStop> {
        let mut stack = vec![start];
        while let Some(rel) = stack.pop() {
            let Some(root) = self.roots.get(i) else {
                return Ok(());
            };
            let path = root.path_of(&rel);
            let follow = rel.as_os_str().is_empty();
            let meta = if follow {
                std::fs::metadata(&path)
            } else {
                std::fs::symlink_metadata(&path)
            };
            let id = match meta {
                Ok(meta) if meta.is_dir() => Some(FileId::of(&meta)),
                // Replaced or removed since its parent was read: the
                // parent's watch has queued that.
                Ok(_) => continue,
                Err(err) if is_gone(&err) => continue,
                // read_dir below fails as the cold scan would.
                Err(_) => None,
            };
            let entries = match self.inotify.add_watch(&path, watch_mask(follow)) {
                Ok(wd) => {
                    self.track(i, &rel, wd, id.unwrap_or(FileId { dev: 0, ino: 0 }))?;
                    std::fs::read_dir(&path)
                }
                Err(Errno::ENOENT | Errno::ENOTDIR) => continue,
                Err(errno) => match std::fs::read_dir(&path) {
                    // Unreadable: the cold scan's error.
                    Err(source) if errno == Errno::EACCES => {
                        return Err(ScanStop::Failed(GlobError::Walk { path, source }))
                    }
                    _ => return Err(ScanStop::Untrusted(RescanReason::AddWatch { path, errno })),
                },
            };
            let entries = match entries {
                Ok(entries) => entries,
                Err(err) if is_gone(&err) => continue,
                Err(source) => return Err(ScanStop::Failed(GlobError::Walk { path, source })),
            };
            for entry in entries {
                let entry = entry.map_err(|source| {
                    ScanStop::Failed(GlobError::Walk {
                        path: path.clone(),
                        source,
                    })
                })?;
                let file_type = entry.file_type().map_err(|source| {
                    ScanStop::Failed(GlobError::Walk {
                        path: entry.path(),
                        source,
                    })
                })?;
                let child = rel.join(entry.file_name());
                let matched = self.roots.get(i).is_some_and(|root| root.is_match(&child));
                if matched {
                    self.add_match(i, child, file_type.is_symlink())?;
                } else if file_type.is_dir() && self.max_depth.is_none_or(|d| depth(&child) < d) {
                    // Every directory waiting here needs a watch: the limit
                    // also bounds this list (a directory of a million
                    // directories stops here, not after reading them all).
                    if self.watches.len() + stack.len() >= self.limits.max_watches {
                        return Err(ScanStop::Untrusted(RescanReason::WatchLimit {
                            limit: self.limits.max_watches,
                        }));
                    }
                    stack.push(child);
                }
            }
        }
        Ok(())
    }

    /// Records that watch `wd` stands for directory `rel` of root `i`.
    fn track(
        &mut self,
        i: usize,
        rel: &Path,
        wd: WatchDescriptor,
        id: FileId,
    ) -> Result<(), ScanStop> {
        let Some(root) = self.roots.get_mut(i) else {
            return Ok(());
        };
        if let Some(old) = root.dirs.insert(rel.to_path_buf(), TrackedDir { wd, id }) {
            if old.wd != wd {
                self.release(old.wd, i, rel);
            }
        }
        let refs = self.watches.entry(wd).or_default();
        let dir = DirRef {
            root: i,
            rel: rel.to_path_buf(),
        };
        if !refs.contains(&dir) {
            refs.push(dir);
        }
        if self.watches.len() > self.limits.max_watches {
            return Err(ScanStop::Untrusted(RescanReason::WatchLimit {
                limit: self.limits.max_watches,
            }));
        }
        Ok(())
    }

    /// `wd` no longer stands for directory `rel` of root `i`; the watch is
    /// removed when it stands for nothing.
    fn release(&mut self, wd: WatchDescriptor, i: usize, rel: &Path) {
        let Some(refs) = self.watches.get_mut(&wd) else {
            return;
        };
        refs.retain(|dir| !(dir.root == i && dir.rel == rel));
        if refs.is_empty() {
            self.watches.remove(&wd);
            // EINVAL: the kernel dropped it already (the directory is gone).
            let _ = self.inotify.rm_watch(wd);
        }
    }

    /// Stops watching directory `rel` of root `i` (not what is below it).
    fn untrack(&mut self, i: usize, rel: &Path) {
        let Some(root) = self.roots.get_mut(i) else {
            return;
        };
        if let Some(dir) = root.dirs.remove(rel) {
            self.release(dir.wd, i, rel);
        }
    }

    fn add_match(&mut self, i: usize, rel: PathBuf, is_symlink: bool) -> Result<(), ScanStop> {
        let Self { roots, answer, .. } = self;
        let Some(root) = roots.get_mut(i) else {
            return Ok(());
        };
        let known = root.matches.contains(&rel);
        if known && root.symlinks.contains_key(&rel) == is_symlink {
            // A symlink's target is checked at the end of every refresh.
            return Ok(());
        }
        if known {
            answer.count(root, &rel, false);
        }
        if is_symlink {
            let target = root.path_of(&rel).canonicalize().ok();
            root.symlinks.insert(rel.clone(), target);
        } else {
            root.symlinks.remove(&rel);
        }
        answer.count(root, &rel, true);
        root.matches.insert(rel);
        if root.matches.len() > MAX_GLOB_MATCHES {
            return Err(ScanStop::TooManyMatches(i));
        }
        Ok(())
    }

    /// Forgets what is known at and below `rel` of root `i` (only below it
    /// when `inclusive` is false): matches, and directories with their watches.
    fn forget(&mut self, i: usize, rel: &Path, inclusive: bool) {
        let Self { roots, answer, .. } = self;
        let Some(root) = roots.get_mut(i) else {
            return;
        };
        let covered = |key: &Path| key.starts_with(rel) && (inclusive || key != rel);
        let from = (Bound::Included(rel), Bound::Unbounded);
        let dirs: Vec<(PathBuf, WatchDescriptor)> = root
            .dirs
            .range::<Path, _>(from)
            .take_while(|(key, _)| key.starts_with(rel))
            .filter(|(key, _)| covered(key))
            .map(|(key, dir)| (key.clone(), dir.wd))
            .collect();
        let matches: Vec<PathBuf> = root
            .matches
            .range::<Path, _>(from)
            .take_while(|key| key.starts_with(rel))
            .filter(|key| covered(key))
            .cloned()
            .collect();
        for key in &matches {
            answer.count(root, key, false);
            root.matches.remove(key);
            root.symlinks.remove(key);
        }
        for (key, _) in &dirs {
            root.dirs.remove(key);
        }
        for (key, wd) in dirs {
            self.release(wd, i, &key);
        }
    }

    /// Recomputes each root's canonical path and each matched symlink's
    /// target: they can change without an event in the watched tree.
    fn update_targets(&mut self) {
        let Self {
            roots,
            answer,
            disturbed,
            ..
        } = self;
        for root in roots.iter_mut() {
            let canonical = match root.identity {
                Some(_) => root.root.canonicalize().ok(),
                None => None,
            };
            if canonical != root.canonical {
                *disturbed = true;
                // Every match that is no symlink moves with the root.
                let plain: Vec<PathBuf> = root
                    .matches
                    .iter()
                    .filter(|rel| !root.symlinks.contains_key(*rel))
                    .cloned()
                    .collect();
                for rel in &plain {
                    answer.count(root, rel, false);
                }
                root.canonical = canonical;
                for rel in &plain {
                    answer.count(root, rel, true);
                }
            }
            if root.symlinks.is_empty() {
                continue;
            }
            let links: Vec<PathBuf> = root.symlinks.keys().cloned().collect();
            for rel in links {
                let now = root.path_of(&rel).canonicalize().ok();
                if root.symlinks.get(&rel) != Some(&now) {
                    *disturbed = true;
                    answer.count(root, &rel, false);
                    root.symlinks.insert(rel.clone(), now);
                    answer.count(root, &rel, true);
                }
            }
        }
    }

    /// Whether the mount table changed since the last call (the kernel
    /// reports a change once to each open file of it).
    fn mounts_changed(&self) -> bool {
        let mut fds = [PollFd::new(self.mount_table.as_fd(), PollFlags::POLLPRI)];
        match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
            Ok(0) => false,
            Ok(_) => fds[0]
                .revents()
                .is_none_or(|r| r.intersects(PollFlags::POLLPRI | PollFlags::POLLERR)),
            // Cannot tell: assume it did.
            Err(_) => true,
        }
    }
}

fn read_mount_table() -> Result<Vec<Mount>, RescanReason> {
    let mut text = Vec::new();
    File::open(MOUNT_TABLE)
        .and_then(|mut file| file.read_to_end(&mut text))
        .map_err(|err| {
            RescanReason::MountTable(Errno::from_raw(err.raw_os_error().unwrap_or(libc::EIO)))
        })?;
    Ok(parse_mount_table(&text))
}

/// The mounts of `/proc/self/mountinfo` text (lines it cannot read are
/// left out: they name no mount point this index could compare).
fn parse_mount_table(text: &[u8]) -> Vec<Mount> {
    text.split(|b| *b == b'\n')
        .filter_map(|line| {
            let mut fields = line.split(|b| *b == b' ');
            let id = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
            let point = unescape_mount_field(fields.nth(3)?);
            let fstype = fields.skip_while(|f| *f != b"-").nth(1)?;
            Some(Mount {
                id,
                point: PathBuf::from(OsString::from_vec(point)),
                fstype: String::from_utf8_lossy(fstype).into_owned(),
            })
        })
        .collect()
}

/// Undoes the kernel's octal escapes (`\040` for a space) in a mount point.
fn unescape_mount_field(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut rest = field;
    while let Some((&first, tail)) = rest.split_first() {
        let octal = tail
            .get(..3)
            .filter(|digits| first == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)))
            .map(|digits| {
                digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'))
            })
            .and_then(|value| u8::try_from(value).ok());
        match octal {
            Some(byte) => {
                out.push(byte);
                rest = tail.get(3..).unwrap_or_default();
            }
            None => {
                out.push(first);
                rest = tail;
            }
        }
    }
    out
}

/// The mounts that decide what is under `root`: the topmost mount holding
/// it and every mount below it. Empty when the root does not exist.
fn relevant_mounts(table: &[Mount], root: Option<&Path>) -> Vec<Mount> {
    let Some(root) = root else {
        return Vec::new();
    };
    let holder = table
        .iter()
        .filter(|m| root.starts_with(&m.point))
        .max_by_key(|m| depth(&m.point));
    let below = table
        .iter()
        .filter(|m| m.point.starts_with(root) && m.point != root);
    holder.into_iter().chain(below).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        (dir, root)
    }

    fn cold(patterns: &[String], max_depth: Option<usize>) -> GlobExpansion {
        glob::expand(patterns, max_depth, &Scanner::BuiltIn).unwrap()
    }

    #[test]
    fn an_index_can_move_to_another_thread() {
        fn is_send<T: Send>() {}
        is_send::<DenyIndex>();
    }

    #[test]
    fn mount_table_lines_are_parsed_with_escapes() {
        let text = b"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
            40 22 0:40 / /work/my\\040dir rw - nfs4 srv:/x rw\n\
            garbage\n";
        let mounts = parse_mount_table(text);
        assert_eq!(
            mounts,
            vec![
                Mount {
                    id: 22,
                    point: PathBuf::from("/"),
                    fstype: "ext4".into()
                },
                Mount {
                    id: 40,
                    point: PathBuf::from("/work/my dir"),
                    fstype: "nfs4".into()
                },
            ]
        );
    }

    #[test]
    fn relevant_mounts_are_the_holder_and_those_below() {
        let mount = |id, point: &str, fstype: &str| Mount {
            id,
            point: PathBuf::from(point),
            fstype: fstype.into(),
        };
        let table = vec![
            mount(1, "/", "ext4"),
            mount(2, "/work", "xfs"),
            mount(3, "/work/ws/cache", "nfs4"),
            mount(4, "/workshop", "9p"),
            mount(5, "/work", "tmpfs"),
        ];
        let relevant = relevant_mounts(&table, Some(Path::new("/work/ws")));
        // The later of two mounts on /work is on top.
        assert_eq!(
            relevant.iter().map(|m| m.id).collect::<Vec<_>>(),
            vec![5, 3]
        );
        assert!(relevant_mounts(&table, None).is_empty());
    }

    #[test]
    fn any_change_in_a_watched_directory_is_a_disturbance() {
        let (_dir, root) = tree();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("a/secret.env")).unwrap();
        std::fs::write(root.join("a/b/x.env"), "").unwrap();
        std::fs::write(root.join("a/b/plain"), "").unwrap();
        let patterns = vec![format!("{}/**/*.env", root.display())];
        let mut index = DenyIndex::build(&patterns, None).unwrap();
        index.refresh().unwrap();
        let quiet = index.disturbances().expect("watching");
        index.refresh().unwrap();
        assert_eq!(index.disturbances(), Some(quiet), "nothing happened");
        assert!(index.watches_dir(&root));
        assert!(index.watches_dir(&root.join("a/b")));
        assert!(!index.watches_dir(&root.join("a/secret.env")), "matched");
        assert!(!index.watches_dir(root.parent().unwrap()));
        assert!(!index.watches_dir(&root.join("a/b/plain")));
        // Changes that leave the matches as they were still count: a
        // replaced match, a name made and removed, a chmod, a directory on
        // the way swapped for a link.
        let mut last = quiet;
        let changes: Vec<Box<dyn Fn()>> = vec![
            Box::new(|| {
                std::fs::remove_file(root.join("a/b/x.env")).unwrap();
                std::fs::write(root.join("a/b/x.env"), "").unwrap();
            }),
            Box::new(|| {
                std::fs::write(root.join("a/b/tmp"), "").unwrap();
                std::fs::remove_file(root.join("a/b/tmp")).unwrap();
            }),
            Box::new(|| {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::Permissions::from_mode(0o600);
                std::fs::set_permissions(root.join("a/b/plain"), mode).unwrap();
            }),
            Box::new(|| {
                std::fs::rename(root.join("a/b"), root.join("a/c")).unwrap();
                std::os::unix::fs::symlink(root.join("a/c"), root.join("a/b")).unwrap();
            }),
        ];
        for (i, change) in changes.iter().enumerate() {
            change();
            let expansion = index.refresh().unwrap().clone();
            assert_eq!(expansion, cold(&patterns, None), "change {i}");
            let now = index.disturbances().expect("watching");
            assert!(now > last, "change {i} went unnoticed");
            index.refresh().unwrap();
            assert_eq!(index.disturbances(), Some(now), "after change {i}");
            last = now;
        }
    }

    #[test]
    fn steady_refresh_keeps_the_generation_and_a_change_bumps_it() {
        let (_dir, root) = tree();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/x.env"), "").unwrap();
        let patterns = vec![format!("{}/**/*.env", root.display())];
        let mut index = DenyIndex::build(&patterns, None).unwrap();
        assert_eq!(index.refresh().unwrap(), &cold(&patterns, None));
        assert_eq!(index.stats().watches, 3);
        let generation = index.generation();
        index.refresh().unwrap();
        std::fs::write(root.join("a/keep.txt"), "").unwrap();
        index.refresh().unwrap();
        assert_eq!(index.generation(), generation, "nothing matching changed");
        std::fs::write(root.join("a/y.env"), "").unwrap();
        assert_eq!(index.refresh().unwrap(), &cold(&patterns, None));
        assert_eq!(index.generation(), generation + 1);
    }

    #[test]
    fn depth_zero_and_root_scans_are_fixed_answers() {
        let mut index = DenyIndex::build(&["/tmp/**/*.env".to_owned()], Some(0)).unwrap();
        assert_eq!(index.refresh().unwrap(), &GlobExpansion::default());
        let mut index = DenyIndex::build(&["/**/*.env".to_owned()], None).unwrap();
        assert_eq!(
            index.refresh().unwrap().skipped,
            vec!["/**/*.env".to_owned()]
        );
        assert_eq!(
            index.refresh().unwrap().skipped,
            vec!["/**/*.env".to_owned()]
        );
        assert_eq!(index.stats().watches, 0);
    }

    #[test]
    fn a_directory_moved_within_the_tree_is_found_at_its_new_place() {
        let (_dir, root) = tree();
        std::fs::create_dir_all(root.join("a/deep/er")).unwrap();
        std::fs::write(root.join("a/deep/er/k.env"), "").unwrap();
        let patterns = vec![format!("{}/**/*.env", root.display())];
        let mut index = DenyIndex::build(&patterns, None).unwrap();
        std::fs::rename(root.join("a/deep"), root.join("moved")).unwrap();
        std::fs::write(root.join("moved/er/new.env"), "").unwrap();
        assert_eq!(index.refresh().unwrap(), &cold(&patterns, None));
        assert!(index
            .refresh()
            .unwrap()
            .paths
            .contains(&root.join("moved/er/new.env")));
        assert_eq!(index.stats().full_rescans, 0, "replayed, not rescanned");
        // The old watches were released, the new ones taken.
        assert_eq!(index.stats().watches, 4);
    }

    #[test]
    fn max_depth_bounds_watches_and_matches_as_the_cold_scan() {
        let (_dir, root) = tree();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::write(root.join("a/one.env"), "").unwrap();
        std::fs::write(root.join("a/b/two.env"), "").unwrap();
        let patterns = vec![format!("{}/**/*.env", root.display())];
        let mut index = DenyIndex::build(&patterns, Some(2)).unwrap();
        assert_eq!(index.stats().watches, 2, "the root and a");
        std::fs::write(root.join("a/b/c/three.env"), "").unwrap();
        std::fs::write(root.join("a/four.env"), "").unwrap();
        assert_eq!(index.refresh().unwrap(), &cold(&patterns, Some(2)));
    }
}
