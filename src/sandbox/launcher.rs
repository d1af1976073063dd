//! Which bubblewrap runs the sandbox, and what it supports (docs/sandbox.md).
//!
//! Order: the system `bwrap` on PATH (never one under the current
//! directory, and only if it knows `--perms`) → the bundled
//! `resources/bwrap` next to the executable, verified against the SHA-256
//! compiled in from `CODEXBOX_BWRAP_SHA256` and executed through
//! `/proc/self/fd/N` (no window between hashing and exec) → the built-in
//! mode (this binary with `argv[0]` `bwrap`). `CODEXBOX_BWRAP=system|bundled|
//! builtin` forces one. The choice carries its reason for `doctor`.
//!
//! Capabilities come from `bwrap --help`, probed once per launcher binary and
//! cached in the helper's private state directory (`sandbox::state`), keyed
//! by path, device, inode, size and mtime: a cache entry cannot be reused
//! for a replaced binary, and the directory is hidden inside every sandbox.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::sandbox::bwrap_args::LauncherCaps;
use crate::sys::program::{self, is_executable_file, under_any};

/// The digest of the bundled bwrap, fixed at build time.
pub const BUNDLED_SHA256: Option<&str> = option_env!("CODEXBOX_BWRAP_SHA256");

/// Environment variable forcing a launcher.
pub const FORCE_ENV: &str = "CODEXBOX_BWRAP";

/// The name the system bubblewrap is looked up by on `PATH`
/// (`crate::sys::program::find_on_path`).
pub const SYSTEM_BWRAP: &str = "bwrap";

/// Errors selecting a launcher.
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error("bundled bubblewrap digest mismatch for {}: expected sha256:{expected}, got sha256:{actual}", .path.display())]
    DigestMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error(
        "invalid CODEXBOX_BWRAP_SHA256 value compiled in: expected 64 hex characters, got {0}"
    )]
    BadDigest(usize),
    #[error("cannot read bundled bubblewrap {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{FORCE_ENV}={wanted} but {reason}")]
    Forced { wanted: String, reason: String },
    #[error("invalid {FORCE_ENV} value `{0}` (expected system, bundled or builtin)")]
    BadForce(String),
    #[error("cannot locate this executable: {0}")]
    CurrentExe(#[source] std::io::Error),
}

/// Which kind of launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherKind {
    System,
    Bundled,
    Builtin,
}

impl LauncherKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LauncherKind::System => "system",
            LauncherKind::Bundled => "bundled",
            LauncherKind::Builtin => "builtin",
        }
    }
}

/// The chosen launcher, how to run it, and why it was chosen.
#[derive(Debug)]
pub struct LauncherChoice {
    pub kind: LauncherKind,
    /// The file that runs (system: canonical path; bundled: the resource;
    /// builtin: this executable).
    pub path: PathBuf,
    pub caps: LauncherCaps,
    /// Human-readable reason (what was skipped and why).
    pub reason: String,
    /// For the bundled launcher: the verified open file, exec'ed by fd.
    pub verified_fd: Option<File>,
}

impl LauncherChoice {
    /// A command running this launcher with `argv[0]` `bwrap`.
    pub fn command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let program = match &self.verified_fd {
            Some(file) => PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
            None => self.path.clone(),
        };
        // The built-in mode is this binary dispatched on argv[0] `bwrap`.
        let mut cmd = Command::new(program);
        cmd.arg0("bwrap");
        cmd
    }
}

/// Selects the launcher for a run whose process cwd is `cwd`.
pub fn select(cwd: &Path, cache_dir: Option<&Path>) -> Result<LauncherChoice, LauncherError> {
    select_excluding(cwd, &[], cache_dir)
}

/// [`select`], also skipping a system bwrap under any of `untrusted` (the
/// run's writable roots and the places earlier sandboxed commands could
/// write: a sandboxed command could have planted it there, and the
/// launcher runs outside the sandbox).
pub fn select_excluding(
    cwd: &Path,
    untrusted: &[PathBuf],
    cache_dir: Option<&Path>,
) -> Result<LauncherChoice, LauncherError> {
    let forced = std::env::var(FORCE_ENV).ok().filter(|v| !v.is_empty());
    let exe = crate::runtime_paths::self_exe().map_err(LauncherError::CurrentExe)?;
    let mut skipped = Vec::new();
    let want = |k: &str| forced.as_deref().is_none_or(|f| f == k);
    if let Some(f) = forced.as_deref() {
        if !matches!(f, "system" | "bundled" | "builtin") {
            return Err(LauncherError::BadForce(f.to_owned()));
        }
    }
    if want("system") {
        match program::find_on_path(SYSTEM_BWRAP, cwd, untrusted) {
            Some(path) => match probe(&path, cache_dir) {
                Some(caps) if caps.perms => {
                    return Ok(LauncherChoice {
                        kind: LauncherKind::System,
                        reason: format!(
                            "system bubblewrap {} found on PATH{}",
                            path.display(),
                            if caps.argv0 {
                                ""
                            } else {
                                " (no --argv0: the inner stage uses the subcommand form)"
                            }
                        ),
                        path,
                        caps,
                        verified_fd: None,
                    })
                }
                Some(_) => skipped.push(format!("system {} lacks --perms", path.display())),
                None => skipped.push(format!("system {} does not run", path.display())),
            },
            None => skipped.push(
                "no bwrap on PATH outside the current directory and the writable roots".to_owned(),
            ),
        }
        if forced.is_some() {
            return Err(LauncherError::Forced {
                wanted: "system".into(),
                reason: skipped.join("; "),
            });
        }
    }
    if want("bundled") {
        let path = bundled_path(exe);
        // Without a digest to check, a bundled bwrap in a writable root may
        // have been planted by a sandboxed command: not trusted then.
        let planted_risk = expected_digest()?.is_none()
            && is_executable_file(&path)
            && under_any(&path, untrusted);
        if planted_risk {
            skipped.push(format!(
                "bundled {} lies in a writable root and no digest is compiled in",
                path.display()
            ));
        } else if is_executable_file(&path) {
            let file = verify_bundled(&path)?;
            let caps = probe(&path, cache_dir).unwrap_or(LauncherCaps::ALL);
            return Ok(LauncherChoice {
                kind: LauncherKind::Bundled,
                reason: format!(
                    "bundled bubblewrap {} ({}){}",
                    path.display(),
                    match expected_digest()? {
                        Some(_) => "digest verified",
                        None => "no digest compiled in, not verified",
                    },
                    if skipped.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", skipped.join("; "))
                    }
                ),
                path,
                caps,
                verified_fd: Some(file),
            });
        }
        if !planted_risk {
            skipped.push(format!("no bundled {}", path.display()));
        }
        if forced.is_some() {
            return Err(LauncherError::Forced {
                wanted: "bundled".into(),
                reason: skipped.join("; "),
            });
        }
    }
    Ok(LauncherChoice {
        kind: LauncherKind::Builtin,
        reason: if forced.is_some() {
            format!("forced by {FORCE_ENV}=builtin")
        } else {
            format!("built-in bubblewrap ({})", skipped.join("; "))
        },
        path: exe.to_path_buf(),
        caps: LauncherCaps::ALL,
        verified_fd: None,
    })
}

/// Is `path` (in either spelling) below one of `roots` (in either spelling)?
/// `resources/bwrap` next to the (resolved) executable.
pub fn bundled_path(exe: &Path) -> PathBuf {
    exe.parent()
        .unwrap_or(Path::new("/"))
        .join("resources")
        .join("bwrap")
}

/// The compiled-in digest: None when absent or all zeros.
pub fn expected_digest() -> Result<Option<String>, LauncherError> {
    parse_digest(BUNDLED_SHA256)
}

fn parse_digest(value: Option<&str>) -> Result<Option<String>, LauncherError> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let v = v.strip_prefix("sha256:").unwrap_or(v).to_ascii_lowercase();
    if v.len() != 64 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(LauncherError::BadDigest(v.len()));
    }
    if v.bytes().all(|b| b == b'0') {
        return Ok(None);
    }
    Ok(Some(v))
}

/// Opens the bundled bwrap and checks its digest on the open file.
pub fn verify_bundled(path: &Path) -> Result<File, LauncherError> {
    verify_with(path, expected_digest()?.as_deref())
}

fn verify_with(path: &Path, expected: Option<&str>) -> Result<File, LauncherError> {
    let read_err = |source| LauncherError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(read_err)?;
    if let Some(expected) = expected {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buf).map_err(read_err)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let actual: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if actual != expected {
            return Err(LauncherError::DigestMismatch {
                path: path.to_path_buf(),
                expected: expected.to_owned(),
                actual,
            });
        }
    }
    Ok(file)
}

/// Parses `bwrap --help` output.
pub fn caps_from_help(help: &str) -> LauncherCaps {
    LauncherCaps {
        argv0: help.contains("--argv0"),
        perms: help.contains("--perms"),
        cap_drop: help.contains("--cap-drop"),
        disable_userns: help.contains("--disable-userns"),
    }
}

/// Capabilities of the launcher at `path`, from the cache or `--help`.
pub fn probe(path: &Path, cache_dir: Option<&Path>) -> Option<LauncherCaps> {
    let meta = std::fs::metadata(path).ok()?;
    let key = format!(
        "{}\t{}\t{}\t{}\t{}.{}",
        path.display(),
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec()
    );
    if let Some(dir) = cache_dir {
        if let Some(caps) = crate::sandbox::state::read_cache(dir, &key) {
            return Some(caps);
        }
    }
    let out = Command::new(path)
        .arg("--help")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .ok()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    if !text.contains("--bind") {
        return None;
    }
    let caps = caps_from_help(&text);
    if let Some(dir) = cache_dir {
        crate::sandbox::state::write_cache(dir, &key, caps);
    }
    Some(caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_parse_from_help_text() {
        let c = caps_from_help("  --argv0 VALUE\n  --perms OCTAL\n --bind");
        assert!(c.argv0 && c.perms && !c.cap_drop);
        let old = caps_from_help("--bind --cap-drop CAP");
        assert!(!old.argv0 && !old.perms && old.cap_drop);
    }

    #[test]
    fn digest_parsing_and_verification() {
        assert_eq!(parse_digest(None).unwrap(), None);
        assert_eq!(parse_digest(Some(&"0".repeat(64))).unwrap(), None);
        assert!(matches!(
            parse_digest(Some("abc")),
            Err(LauncherError::BadDigest(3))
        ));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bwrap");
        std::fs::write(&f, b"hello").unwrap();
        let good = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        assert!(verify_with(&f, Some(good)).is_ok());
        assert!(verify_with(&f, None).is_ok());
        let err = verify_with(&f, Some(&"1".repeat(64))).unwrap_err();
        assert!(err.to_string().contains("digest mismatch"), "{err}");
    }
}
