//! The tokens of codexbox's own loopback listeners, and how codexbox's
//! clients find them without the user copying anything.
//!
//! A listener that must not serve every local process (`codexbox connect`,
//! `codexbox rendezvous`) [`generate`]s random tokens at start and
//! [`publish_for`]es them in the private runtime directory
//! ([`crate::runtime_paths::private_dir`]: owned by the user, mode 0700,
//! hidden inside every bubblewrap sandbox), as `listeners/IP:PORT` (what a
//! [`Holder`] may do is a suffix of the name), mode 0600, holding an
//! exclusive `flock` for as long as it serves. A client given no token
//! [`find_for`]s the one published for the exact loopback address it
//! dials, and uses it only while that lock is held (a listener killed
//! without cleaning up leaves a file nobody uses, removed by the next
//! publication). Another user cannot enter the directory; a sandboxed
//! command does not see it.
//!
//! Every file is opened without following a symlink and refused unless it
//! is a regular file of ours that nobody else may read.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use nix::fcntl::{Flock, FlockArg};

use crate::runtime_paths;
use crate::web_url::{Scheme, WebUrl};

/// The directory under the runtime directory holding published tokens.
const LISTENERS_DIR: &str = "listeners";
/// Random bytes in a token (base64url: 43 characters).
const TOKEN_BYTES: usize = 32;
/// Largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;
/// Most stale entries one [`publish`] looks at.
const PRUNE_BATCH: usize = 256;

/// Why a token could not be made or published.
#[derive(Debug, thiserror::Error)]
pub enum ListenerTokenError {
    #[error("cannot generate a token: {0}")]
    Random(#[source] getrandom::Error),
    #[error(transparent)]
    RuntimeDir(#[from] runtime_paths::NoPrivateDir),
    #[error("{} is not a private directory (a directory of ours, mode 0700)", .0.display())]
    NotPrivate(PathBuf),
    #[error("cannot publish the token in {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A fresh random token (32 bytes, base64url without padding).
pub fn generate() -> Result<String, ListenerTokenError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(ListenerTokenError::Random)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// What the holder of a published token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Use a local endpoint (`codexbox connect`'s WebSocket): `IP:PORT`.
    Client,
    /// Register and serve environments at a rendezvous (its `register`
    /// and `validate` calls): `IP:PORT.rendezvous-executor`.
    Executor,
    /// Reach environments through a rendezvous (its `connect` call):
    /// `IP:PORT.rendezvous-harness`.
    Harness,
}

impl Holder {
    /// The file name of the token for the listener at `addr`.
    fn file_name(self, addr: SocketAddr) -> String {
        match self {
            Holder::Client => addr.to_string(),
            Holder::Executor => format!("{addr}.rendezvous-executor"),
            Holder::Harness => format!("{addr}.rendezvous-harness"),
        }
    }
}

/// The loopback address a `ws://IP:PORT[/…]` URL dials, if it names one
/// literally (the only addresses tokens are published for).
pub fn loopback_address(url: &str) -> Option<SocketAddr> {
    loopback_address_of(url, Scheme::Ws)
}

/// The same for an `http://IP:PORT[/…]` URL (a rendezvous's registry).
pub fn loopback_http_address(url: &str) -> Option<SocketAddr> {
    loopback_address_of(url, Scheme::Http)
}

fn loopback_address_of(url: &str, scheme: Scheme) -> Option<SocketAddr> {
    let url = WebUrl::parse(url)
        .ok()
        .filter(|url| url.scheme() == scheme)?;
    url.literal_address().filter(|addr| addr.ip().is_loopback())
}

/// A published token: the file stays, locked, until this is dropped.
#[derive(Debug)]
pub struct Published {
    path: PathBuf,
    /// The open file holding the exclusive lock that marks it live.
    file: Flock<File>,
}

impl Published {
    /// Where the token is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        // Only our own file: a later listener on the same address may have
        // replaced it.
        if same_file(&self.path, &self.file) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Writes `token` for the local endpoint at `addr` ([`Holder::Client`]).
pub fn publish(addr: SocketAddr, token: &str) -> Result<Published, ListenerTokenError> {
    publish_for(addr, Holder::Client, token)
}

/// Writes `token` for `holder`s of the listener at `addr` (blocking; small
/// files in the runtime directory).
pub fn publish_for(
    addr: SocketAddr,
    holder: Holder,
    token: &str,
) -> Result<Published, ListenerTokenError> {
    let dir = listeners_dir(true)?;
    prune(&dir);
    let name = holder.file_name(addr);
    let path = dir.join(&name);
    let temporary = dir.join(format!(".{name}.{}", std::process::id()));
    let write_error = |source| ListenerTokenError::Write {
        path: path.clone(),
        source,
    };
    let _ = std::fs::remove_file(&temporary);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temporary)
        .map_err(write_error)?;
    // Locked before it has its name, so no reader or pruner ever sees it
    // unlocked while we live.
    let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(file) => file,
        Err((_, errno)) => {
            let _ = std::fs::remove_file(&temporary);
            return Err(write_error(errno.into()));
        }
    };
    let written = file
        .write_all(format!("{token}\n").as_bytes())
        .and_then(|()| std::fs::rename(&temporary, &path));
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(write_error(source));
    }
    Ok(Published { path, file })
}

/// The token a live codexbox listener of ours published for the local
/// endpoint at `addr` ([`Holder::Client`]).
pub fn find(addr: SocketAddr) -> Option<String> {
    find_for(addr, Holder::Client)
}

/// The token a live codexbox listener of ours at `addr` published for
/// `holder`s. Blocking (one small file).
pub fn find_for(addr: SocketAddr, holder: Holder) -> Option<String> {
    let path = listeners_dir(false).ok()?.join(holder.file_name(addr));
    // A shared lock we can take means no listener holds its exclusive one:
    // the file is left over from one that is gone.
    let file = match Flock::lock(open_private(&path)?, FlockArg::LockSharedNonblock) {
        Ok(_left_over) => return None,
        Err((file, nix::errno::Errno::EWOULDBLOCK)) => file,
        Err(_) => return None,
    };
    let mut text = String::new();
    file.take(MAX_TOKEN_FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    let token = text.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

/// `listeners/` under the runtime directory, created when `create`.
fn listeners_dir(create: bool) -> Result<PathBuf, ListenerTokenError> {
    let dir = runtime_paths::private_dir()?.join(LISTENERS_DIR);
    if create {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    }
    if runtime_paths::is_private_dir(&dir) {
        Ok(dir)
    } else {
        Err(ListenerTokenError::NotPrivate(dir))
    }
}

/// Opens `path` to read when it is a regular file of ours that only we may
/// read or write, never through a symlink and never blocking.
fn open_private(path: &Path) -> Option<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let ours = meta.uid() == nix::unistd::geteuid().as_raw();
    (meta.file_type().is_file() && ours && meta.mode() & 0o077 == 0).then_some(file)
}

/// Whether `path` still names the file open as `file`.
fn same_file(path: &Path, file: &File) -> bool {
    let Ok(open) = nix::sys::stat::fstat(file.as_fd()) else {
        return false;
    };
    path.symlink_metadata()
        .is_ok_and(|named| named.dev() == open.st_dev && named.ino() == open.st_ino)
}

/// Removes tokens whose listener is gone (nobody holds their lock).
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten().take(PRUNE_BATCH) {
        let path = entry.path();
        // Temporary names belong to a listener still publishing.
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let Some(file) = open_private(&path) else {
            continue;
        };
        if let Ok(stale) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            if same_file(&path, &stale) {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_literal_loopback_websocket_urls_have_an_address() {
        let v4: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        assert_eq!(loopback_address("ws://127.0.0.1:4000"), Some(v4));
        assert_eq!(loopback_address("ws://127.0.0.1:4000/x?y"), Some(v4));
        assert_eq!(
            loopback_address("ws://[::1]:4000"),
            Some("[::1]:4000".parse().unwrap())
        );
        assert_eq!(loopback_address("ws://10.0.0.1:4000"), None);
        assert_eq!(loopback_address("ws://localhost:4000"), None);
        assert_eq!(loopback_address("unix:///run/x.sock"), None);
        assert_eq!(loopback_address("wss://127.0.0.1:4000"), None);
        assert_eq!(loopback_http_address(" http://127.0.0.1:4000/p "), Some(v4));
        assert_eq!(loopback_http_address("https://127.0.0.1:4000"), None);
        assert_eq!(loopback_http_address("ws://127.0.0.1:4000"), None);
    }

    #[test]
    fn each_holder_has_its_own_file_per_address() {
        let addr: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let names = [Holder::Client, Holder::Executor, Holder::Harness].map(|h| h.file_name(addr));
        assert_eq!(
            names,
            [
                "127.0.0.1:4000",
                "127.0.0.1:4000.rendezvous-executor",
                "127.0.0.1:4000.rendezvous-harness"
            ]
        );
    }

    #[test]
    fn only_private_regular_files_of_ours_are_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::write(&private, "t\n").unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(open_private(&private).is_some());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        assert!(open_private(&link).is_none(), "followed a symlink");
        let shared = dir.path().join("shared");
        std::fs::write(&shared, "t\n").unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(
            open_private(&shared).is_none(),
            "read a group-readable file"
        );
        assert!(open_private(dir.path()).is_none(), "read a directory");
        if nix::unistd::geteuid().is_root() {
            let planted = dir.path().join("planted");
            std::fs::write(&planted, "t\n").unwrap();
            std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
            assert!(open_private(&planted).is_none(), "read another user's file");
        }
    }

    #[test]
    fn tokens_are_long_random_and_header_safe() {
        let (a, b) = (generate().unwrap(), generate().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
    }
}
