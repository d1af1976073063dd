//! The helper's private state: the launcher capability cache and the
//! registry of mount points bubblewrap creates on the host.
//!
//! Location: the private runtime directory
//! ([`crate::runtime_paths::private_dir`]: owned by the caller, mode 0700,
//! never followed through a symlink); every file in it is opened with
//! `O_NOFOLLOW`. The sandbox hides it (it is added to the deny masks), so a
//! sandboxed command can neither read nor plant state.
//!
//! Registry: a mount point bwrap creates for a mask (an empty `.codex`
//! directory, an empty file) is registered here before bwrap runs, one
//! marker per helper pid, under an exclusive `flock`. After the run the
//! helper removes it from the host, unless another live helper still uses
//! it (removing it would detach that sandbox's mask), and only while it is
//! still an empty directory or empty file. Markers of dead pids are pruned;
//! what they created is removed by the next run, before it decides what
//! exists on the host ([`tidy`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::runtime_paths;
use crate::sandbox::bwrap_args::{LauncherCaps, SyntheticTarget};

/// Errors of the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    NoPrivateDir(#[from] runtime_paths::NoPrivateDir),
    #[error("no usable private state directory ({0})")]
    Unusable(String),
    #[error("cannot update the mount registry in {}: {source}", .path.display())]
    Registry {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The private state directory ([`runtime_paths::private_dir`]) with the
/// mount registry in it, created on first use. A registry that is not
/// private (a directory of ours, mode 0700) is refused, never replaced by
/// another place: the sandbox hides this one directory.
pub fn state_dir() -> Result<PathBuf, StateError> {
    state_dir_in(&runtime_paths::PrivateDirEnv::of_process())
}

/// [`state_dir`] of a process whose environment is `env`.
pub fn state_dir_in(env: &runtime_paths::PrivateDirEnv) -> Result<PathBuf, StateError> {
    let dir = runtime_paths::private_dir_in(env)?;
    let mounts = dir.join("mounts");
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&mounts);
    if runtime_paths::is_private_dir(&mounts) {
        Ok(dir)
    } else {
        Err(StateError::Unusable(format!(
            "{} must be a directory owned by uid {} with mode 0700",
            mounts.display(),
            nix::unistd::geteuid().as_raw()
        )))
    }
}

fn open_nofollow(path: &Path, write: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.custom_flags(libc::O_NOFOLLOW);
    if write {
        o.write(true).create(true).truncate(true).mode(0o600);
    } else {
        o.read(true);
    }
    o.open(path)
}

/// Cached capabilities for `key` (launcher path + identity).
pub fn read_cache(dir: &Path, key: &str) -> Option<LauncherCaps> {
    let mut text = String::new();
    open_nofollow(&dir.join("launchers"), false)
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    for line in text.lines() {
        let Some((k, v)) = line.rsplit_once('\t') else {
            continue;
        };
        if k == key {
            let b: Vec<bool> = v.bytes().map(|c| c == b'1').collect();
            if let [argv0, perms, cap_drop, disable_userns] = b[..] {
                return Some(LauncherCaps {
                    argv0,
                    perms,
                    cap_drop,
                    disable_userns,
                });
            }
        }
    }
    None
}

/// Records capabilities for `key` (atomic replace; best effort).
pub fn write_cache(dir: &Path, key: &str, caps: LauncherCaps) {
    let mut text = String::new();
    if let Ok(mut f) = open_nofollow(&dir.join("launchers"), false) {
        let _ = f.read_to_string(&mut text);
    }
    let path_part = key.split('\t').next().unwrap_or_default();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| l.split('\t').next() != Some(path_part))
        .take(32)
        .map(str::to_owned)
        .collect();
    let bit = |b: bool| if b { '1' } else { '0' };
    lines.push(format!(
        "{key}\t{}{}{}{}",
        bit(caps.argv0),
        bit(caps.perms),
        bit(caps.cap_drop),
        bit(caps.disable_userns)
    ));
    let tmp = dir.join(format!("launchers.{}", std::process::id()));
    let ok = open_nofollow(&tmp, true)
        .and_then(|mut f| f.write_all((lines.join("\n") + "\n").as_bytes()))
        .is_ok();
    if ok {
        let _ = std::fs::rename(&tmp, dir.join("launchers"));
    } else {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// FNV-1a 64 of the path bytes: the registry entry name.
fn entry_name(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.as_os_str().as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Holds the registry flock until dropped (closing the fd releases it).
struct Lock(#[allow(dead_code, reason = "held for its Drop: closing the fd unlocks")] File);

impl Lock {
    fn take(mounts: &Path) -> Result<Lock, StateError> {
        let path = mounts.join("lock");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| StateError::Registry {
                path: path.clone(),
                source,
            })?;
        loop {
            // SAFETY: flock on an fd we own; no pointers.
            let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(Lock(f));
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(StateError::Registry { path, source: err });
            }
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Markers of other processes for one entry: (pid, synthetic, alive).
fn markers(entry: &Path) -> Vec<(i32, bool, bool)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(entry) else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let mut text = String::new();
        if let Ok(mut f) = open_nofollow(&e.path(), false) {
            let _ = f.read_to_string(&mut text);
        }
        out.push((pid, text.starts_with("synthetic"), pid_alive(pid)));
    }
    out
}

/// Is `path` an empty directory or an empty regular file?
fn is_empty_node(path: &Path) -> bool {
    match path.symlink_metadata() {
        Ok(m) if m.file_type().is_dir() => std::fs::read_dir(path)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false),
        Ok(m) if m.file_type().is_file() => m.len() == 0,
        _ => false,
    }
}

/// Most stale registry entries one run tidies up.
const JANITOR_BATCH: usize = 64;

/// Removes what helpers that died without cleaning up (SIGKILL) left: the
/// mount point, when still an empty node reached without any symlink, and
/// the registry entry. Entries with a live marker are left alone.
fn janitor(mounts: &Path) {
    let Ok(rd) = std::fs::read_dir(mounts) else {
        return;
    };
    let me = std::process::id().to_string();
    for e in rd.flatten().take(JANITOR_BATCH * 4) {
        let name = e.file_name();
        let Some(name) = name.to_str().filter(|n| n.len() == 16) else {
            continue;
        };
        let entry = e.path();
        let Ok(markers_rd) = std::fs::read_dir(&entry) else {
            continue;
        };
        let mut stale_synthetic: Option<(PathBuf, bool)> = None;
        let mut alive = false;
        for m in markers_rd.flatten() {
            let fname = m.file_name();
            let Some(pid) = fname.to_str().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            if fname.to_str() == Some(me.as_str()) || pid_alive(pid) {
                alive = true;
                break;
            }
            let mut bytes = Vec::new();
            if let Ok(mut f) = open_nofollow(&m.path(), false) {
                let _ = f.read_to_end(&mut bytes);
            }
            let mut parts = bytes.splitn(3, |b| *b == b'\n');
            if let (Some(b"synthetic"), Some(node), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            {
                let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
                stale_synthetic = Some((path, node == b"dir"));
            }
        }
        if alive {
            continue;
        }
        if let Some((path, is_dir)) = stale_synthetic {
            let parent_is_real = path
                .parent()
                .is_some_and(|p| p.canonicalize().ok().as_deref() == Some(p));
            if entry_name(&path) == name && parent_is_real && is_empty_node(&path) {
                let _ = if is_dir {
                    std::fs::remove_dir(&path)
                } else {
                    std::fs::remove_file(&path)
                };
            }
        }
        let _ = std::fs::remove_dir_all(&entry);
    }
}

/// Removes what killed helpers left (see `janitor`). Called before a run
/// looks at the host, so a leftover empty `.git` is not taken for an
/// existing one and kept.
pub fn tidy(dir: &Path) {
    let mounts = dir.join("mounts");
    if !mounts.is_dir() {
        return;
    }
    if let Ok(_lock) = Lock::take(&mounts) {
        janitor(&mounts);
    }
}

/// This run's registered mount points.
#[derive(Debug)]
pub struct Registration {
    mounts: PathBuf,
    /// (target, created by a sandbox run: ours or a dead/live peer's,
    /// canonical parent directory at registration)
    targets: Vec<(SyntheticTarget, bool, Option<PathBuf>)>,
}

/// Registers `targets` before bwrap runs, and with them every path of
/// `bound` (protected paths the sandbox binds as they are) that is an
/// empty node: it may be another sandbox's mount point, which must stay
/// on the host while this sandbox binds it. When it is (a live peer
/// registered it as created), this run shares it: whichever run ends last
/// removes it.
pub fn register(
    dir: &Path,
    targets: &[SyntheticTarget],
    bound: &[PathBuf],
) -> Result<Registration, StateError> {
    let mounts = dir.join("mounts");
    let mut reg = Registration {
        mounts: mounts.clone(),
        targets: Vec::new(),
    };
    let shared = bound.iter().filter_map(|path| {
        let meta = path.symlink_metadata().ok()?;
        let taken = targets.iter().any(|t| t.path == *path);
        (!taken && is_empty_node(path)).then(|| SyntheticTarget {
            path: path.clone(),
            is_dir: meta.is_dir(),
        })
    });
    let targets: Vec<SyntheticTarget> = targets.iter().cloned().chain(shared).collect();
    if targets.is_empty() {
        return Ok(reg);
    }
    let _lock = Lock::take(&mounts)?;
    let me = std::process::id();
    for t in &targets {
        let entry = mounts.join(entry_name(&t.path));
        let io = |source| StateError::Registry {
            path: entry.clone(),
            source,
        };
        match std::fs::DirBuilder::new().mode(0o700).create(&entry) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
        let peers = markers(&entry);
        let synthetic = t.path.symlink_metadata().is_err()
            || (is_empty_node(&t.path) && peers.iter().any(|(_, s, _)| *s));
        for (pid, _, alive) in &peers {
            if !alive {
                let _ = std::fs::remove_file(entry.join(pid.to_string()));
            }
        }
        let mut f = open_nofollow(&entry.join(me.to_string()), true).map_err(io)?;
        let kind = if synthetic { "synthetic" } else { "existing" };
        let node = if t.is_dir { "dir" } else { "file" };
        let mut text = format!("{kind}\n{node}\n").into_bytes();
        text.extend_from_slice(t.path.as_os_str().as_bytes());
        f.write_all(&text).map_err(io)?;
        let parent = t.path.parent().and_then(|p| p.canonicalize().ok());
        reg.targets.push((t.clone(), synthetic, parent));
    }
    Ok(reg)
}

impl Registration {
    /// Removes this run's markers and the mount points nobody else uses.
    /// Returns the paths removed from the host.
    pub fn cleanup(self) -> Vec<PathBuf> {
        let mut removed = Vec::new();
        if self.targets.is_empty() {
            return removed;
        }
        let Ok(_lock) = Lock::take(&self.mounts) else {
            return removed;
        };
        let me = std::process::id().to_string();
        janitor(&self.mounts);
        for (t, synthetic, parent) in &self.targets {
            let entry = self.mounts.join(entry_name(&t.path));
            let _ = std::fs::remove_file(entry.join(&me));
            let others_alive = markers(&entry).iter().any(|(_, _, alive)| *alive);
            if others_alive {
                continue;
            }
            // The sandboxed command may have swapped a parent directory for
            // a symlink: only remove where the parent still resolves to the
            // directory it was at registration.
            let same_parent =
                parent.is_some() && t.path.parent().and_then(|p| p.canonicalize().ok()) == *parent;
            if *synthetic && same_parent && is_empty_node(&t.path) {
                let gone = if t.is_dir {
                    std::fs::remove_dir(&t.path)
                } else {
                    std::fs::remove_file(&t.path)
                };
                if gone.is_ok() {
                    removed.push(t.path.clone());
                }
            }
            let _ = std::fs::remove_dir_all(&entry);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_round_trip_and_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let caps = LauncherCaps {
            argv0: false,
            perms: true,
            cap_drop: true,
            disable_userns: false,
        };
        assert_eq!(read_cache(dir.path(), "/usr/bin/bwrap\t1\t2\t3\t4.5"), None);
        write_cache(dir.path(), "/usr/bin/bwrap\t1\t2\t3\t4.5", caps);
        assert_eq!(
            read_cache(dir.path(), "/usr/bin/bwrap\t1\t2\t3\t4.5"),
            Some(caps)
        );
        assert_eq!(read_cache(dir.path(), "/usr/bin/bwrap\t1\t2\t3\t9.9"), None);
        write_cache(
            dir.path(),
            "/usr/bin/bwrap\t1\t2\t3\t9.9",
            LauncherCaps::ALL,
        );
        let text = std::fs::read_to_string(dir.path().join("launchers")).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[test]
    fn registry_removes_only_created_empty_targets_without_live_peers() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("mounts")).unwrap();
        let ws = tempfile::tempdir().unwrap();
        let created = SyntheticTarget {
            path: ws.path().join(".codex"),
            is_dir: true,
        };
        let existing = SyntheticTarget {
            path: ws.path().join(".agents"),
            is_dir: true,
        };
        std::fs::create_dir(&existing.path).unwrap();
        let reg = register(state.path(), &[created.clone(), existing.clone()], &[]).unwrap();
        std::fs::create_dir(&created.path).unwrap(); // what bwrap does
                                                     // A live peer (our parent) holds the created target: kept.
        let entry = state.path().join("mounts").join(entry_name(&created.path));
        let parent = std::os::unix::process::parent_id();
        std::fs::write(entry.join(parent.to_string()), "synthetic\n").unwrap();
        assert!(reg.cleanup().is_empty());
        assert!(created.path.exists());
        std::fs::remove_file(entry.join(parent.to_string())).unwrap();
        // A crashed creator left a dead marker: the next run inherits
        // "synthetic" and removes the mount point afterwards.
        std::fs::write(entry.join("2147483000"), "synthetic\n").unwrap();
        let reg = register(state.path(), &[created.clone(), existing.clone()], &[]).unwrap();
        assert_eq!(reg.cleanup(), vec![created.path.clone()]);
        assert!(!created.path.exists());
        assert!(existing.path.exists(), "pre-existing dirs stay");
        assert_eq!(
            std::fs::read_dir(state.path().join("mounts"))
                .unwrap()
                .count(),
            1
        );
    }

    #[test]
    fn a_mount_point_another_run_binds_stays_until_the_last_run_ends() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("mounts")).unwrap();
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        let codex = root.join(".codex");
        // A live peer (our parent) made it as its mount point.
        std::fs::create_dir(&codex).unwrap();
        let entry = state.path().join("mounts").join(entry_name(&codex));
        std::fs::create_dir(&entry).unwrap();
        let parent = std::os::unix::process::parent_id().to_string();
        std::fs::write(entry.join(&parent), "synthetic\ndir\n").unwrap();
        // This run binds it as it is: it shares it, so the peer's cleanup
        // finds a live marker besides its own and leaves it.
        let reg = register(state.path(), &[], &[codex.clone(), root.join(".git")]).unwrap();
        let me = std::process::id().to_string();
        assert!(entry.join(&me).exists(), "this run holds it too");
        assert!(!root.join(".git").exists(), "missing ones are not made");
        // The peer is gone: this run, ending last, removes it.
        std::fs::remove_file(entry.join(&parent)).unwrap();
        assert_eq!(reg.cleanup(), vec![codex.clone()]);
        assert!(!codex.exists());
        // A user's own empty `.codex` (nobody made it) stays.
        std::fs::create_dir(&codex).unwrap();
        let reg = register(state.path(), &[], std::slice::from_ref(&codex)).unwrap();
        assert!(reg.cleanup().is_empty());
        assert!(codex.exists());
    }

    #[test]
    fn cleanup_never_follows_a_swapped_parent() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("mounts")).unwrap();
        let ws = tempfile::tempdir().unwrap();
        let d = ws.path().join("d");
        std::fs::create_dir(&d).unwrap();
        let t = SyntheticTarget {
            path: d.join(".codex"),
            is_dir: true,
        };
        let reg = register(state.path(), std::slice::from_ref(&t), &[]).unwrap();
        // The command moved the directory away and left a symlink to a
        // host directory holding an empty `.codex`.
        let host = ws.path().join("host");
        std::fs::create_dir_all(host.join(".codex")).unwrap();
        std::fs::remove_dir(&d).unwrap();
        std::os::unix::fs::symlink(&host, &d).unwrap();
        assert!(reg.cleanup().is_empty());
        assert!(host.join(".codex").exists());
    }

    #[test]
    fn janitor_removes_what_a_killed_helper_left() {
        let state = tempfile::tempdir().unwrap();
        let mounts = state.path().join("mounts");
        std::fs::create_dir(&mounts).unwrap();
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        let left = root.join(".codex");
        std::fs::create_dir(&left).unwrap();
        let entry = mounts.join(entry_name(&left));
        std::fs::create_dir(&entry).unwrap();
        let mut text = b"synthetic\ndir\n".to_vec();
        text.extend_from_slice(left.as_os_str().as_bytes());
        std::fs::write(entry.join("2147483000"), text).unwrap();
        // Another run (any target) tidies up on its way out.
        let other = SyntheticTarget {
            path: root.join("other"),
            is_dir: false,
        };
        register(state.path(), &[other], &[]).unwrap().cleanup();
        assert!(!left.exists());
        assert!(!entry.exists());
    }
}
