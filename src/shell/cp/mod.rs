//! `codexbox cp SRC DST`: copy files and trees between this machine and an
//! exec-server, one side written `REMOTE:PATH` (the server named by
//! `--url` or `--registry`/`--environment-id`). Like `cp -r`: a directory
//! is copied with everything in it, into `DST` when `DST` is a directory
//! (as `DST/NAME`), or as `DST`; `SRC/.` copies what is in `SRC`. Modes are
//! kept (permission bits and sticky bit; never set-id bits), symlinks are
//! copied as symlinks and never followed (the root only when written
//! `SRC/`), special files are reported and skipped. Contents stream in
//! bounded memory (the client's transfers). A file that fails is reported
//! and the rest goes on, unless `--strict`.
//!
//! The walk of the source is [`tree`]'s; the progress line [`progress`]'s.

pub mod progress;
pub mod tree;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Parser;

use super::target::TargetArgs;
use super::{remote_path, ShellError};
use crate::client::{ClientError, ExecServerClient};
use crate::protocol::envelope::code::NOT_FOUND;
use crate::protocol::fs::{GetMetadataResponse, OpenMode};
use crate::terminal_text::Escaped;
use progress::Progress;
use tree::{join, text, Item, Kind, Problem, Side};

const NAME: &str = "codexbox cp";

/// Copy files and directories to or from an exec-server.
#[derive(Debug, Parser)]
#[command(
    name = "codexbox cp",
    after_help = "One of SRC and DST is REMOTE:PATH (any name before the colon, e.g. remote:/srv/app; a local path holding a colon is written ./a:b). A relative remote PATH starts from the server's working directory.\n\nExit status: 0 when everything was copied, 1 when something was not (each reported), 255 when the connection failed, 2 for usage errors."
)]
struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// Stop at the first file that cannot be copied.
    #[arg(long)]
    strict: bool,
    /// No progress line, even on a terminal.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// What to copy.
    #[arg(value_name = "SRC")]
    source: String,
    /// Where to copy it.
    #[arg(value_name = "DST")]
    destination: String,
}

/// One side of the copy as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    Local(String),
    /// The path text after `REMOTE:`.
    Remote(String),
}

impl Location {
    /// `NAME:PATH` (no `/` before the first `:`) is remote; anything else
    /// is local, as scp reads its arguments.
    fn parse(text: &str) -> Self {
        match text.split_once(':') {
            Some((name, path)) if !name.contains('/') => Self::Remote(path.to_owned()),
            _ => Self::Local(text.to_owned()),
        }
    }
}

/// Which way the bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Upload,
    Download,
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Entry point of the `cp` mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    super::main_with(NAME, &argv, run)
}

/// `SRC/.` or `.`: copy what is in the directory, not the directory.
fn names_contents(source: &str) -> bool {
    source == "." || source.ends_with("/.")
}

async fn run(args: Args) -> Result<i32, ShellError> {
    let local_env = |name: &str| std::env::var(name).ok();
    let (direction, source, destination) = match (
        Location::parse(&args.source),
        Location::parse(&args.destination),
    ) {
        (Location::Local(source), Location::Remote(destination)) => {
            (Direction::Upload, source, destination)
        }
        (Location::Remote(source), Location::Local(destination)) => {
            (Direction::Download, source, destination)
        }
        _ => {
            return Err(ShellError::Usage(
                "exactly one of SRC and DST must be REMOTE:PATH".into(),
            ))
        }
    };
    // Nothing to resume: its session goes away with it.
    let options = args
        .target
        .connect_options(&local_env)?
        .session_grace(std::time::Duration::ZERO);
    let mut client = ExecServerClient::connect_with(options).await?;
    client.initialize(NAME, None).await?;
    let outcome = copy_all(&client, &args, direction, &source, &destination).await;
    client.close_and_wait().await;
    outcome
}

/// Copies `source` to `destination` as `direction` says, reporting problems.
async fn copy_all(
    client: &ExecServerClient,
    args: &Args,
    direction: Direction,
    source: &str,
    destination: &str,
) -> Result<i32, ShellError> {
    let server_cwd = client.environment_info().await?.cwd;
    let contents = names_contents(source);
    let remote = |text: &str| remote_path(server_cwd.as_deref(), text);
    let (source, destination) = match direction {
        Direction::Upload => (PathBuf::from(source), remote(destination)?),
        Direction::Download => (remote(source)?, PathBuf::from(destination)),
    };
    if source.file_name().is_none() && !contents {
        return Err(ShellError::Usage(format!(
            "cannot copy `{}` itself; copy what is in it with `{}/.`",
            source.display(),
            source.display().to_string().trim_end_matches('/')
        )));
    }
    let mut copy = Copy {
        client,
        direction,
        strict: args.strict,
        problems: 0,
        handles: 0,
        progress: Progress::new(false, 0),
        created: Default::default(),
    };
    let (source_side, destination_side) = match direction {
        Direction::Upload => (Side::Local, Side::Remote(client)),
        Direction::Download => (Side::Remote(client), Side::Local),
    };
    let mut problems = Vec::new();
    let items = source_side.walk(&source, args.strict, &mut problems).await;
    for problem in &problems {
        copy.report(problem);
    }
    if args.strict && copy.problems > 0 {
        return Ok(1);
    }
    let Some(root) = items.first() else {
        return Ok(1);
    };
    let destination = match copy
        .destination_root(
            &destination_side,
            &source,
            &destination,
            &root.kind,
            contents,
        )
        .await
    {
        Ok(destination) => destination,
        Err(message) => {
            copy.report(&Problem {
                path: destination.display().to_string(),
                message,
            });
            return Ok(1);
        }
    };
    let total = items
        .iter()
        .map(|item| match item.kind {
            Kind::File { size, .. } => size,
            _ => 0,
        })
        .sum();
    let files = items
        .iter()
        .filter(|item| matches!(item.kind, Kind::File { .. }))
        .count();
    copy.progress = Progress::new(std::io::stderr().is_terminal() && !args.quiet, total);
    copy.apply(&items, &source, &destination).await;
    copy.progress
        .finish(u64::try_from(files).unwrap_or(u64::MAX));
    Ok(if copy.problems == 0 { 0 } else { 1 })
}

/// A copy in progress.
struct Copy<'a> {
    client: &'a ExecServerClient,
    direction: Direction,
    strict: bool,
    /// How many problems were reported.
    problems: usize,
    /// Handle ids used so far.
    handles: u64,
    progress: Progress,
    /// Server directories this run created: what goes into them is known
    /// not to exist yet, so it is not looked up first (each lookup is a
    /// round trip, over a relay a long one). Creating is still exclusive,
    /// so anything that appeared meanwhile is an error, never overwritten.
    created: std::collections::HashSet<String>,
}

impl Copy<'_> {
    /// Prints a problem; its path and message may come from the server.
    fn report(&mut self, problem: &Problem) {
        self.progress.clear();
        eprintln!(
            "{NAME}: {}: {}",
            Escaped(&problem.path),
            Escaped(&problem.message)
        );
        self.problems += 1;
    }

    /// Where the source's root goes: into `destination` when it is a
    /// directory (unless the contents are asked for), else `destination`.
    async fn destination_root(
        &self,
        side: &Side<'_>,
        source: &Path,
        destination: &Path,
        root: &Kind,
        contents: bool,
    ) -> Result<PathBuf, String> {
        if contents {
            return Ok(destination.to_path_buf());
        }
        let is_directory = match side {
            Side::Local => tokio::fs::metadata(destination)
                .await
                .is_ok_and(|meta| meta.is_dir()),
            Side::Remote(client) => client
                .fs_metadata(&text(destination)?, true, None)
                .await
                .is_ok_and(|meta| meta.is_directory),
        };
        let trailing_slash = destination.as_os_str().as_encoded_bytes().ends_with(b"/");
        match source.file_name() {
            Some(name) if is_directory => Ok(destination.join(name)),
            _ if trailing_slash && !matches!(root, Kind::Directory { .. }) => {
                Err("no such directory to copy into".into())
            }
            _ => Ok(destination.to_path_buf()),
        }
    }

    /// Creates every item under `destination`; directory modes are set
    /// last, deepest first, so a read-only directory is filled before it
    /// becomes read-only.
    async fn apply(&mut self, items: &[Item], source: &Path, destination: &Path) {
        let mut directories = Vec::new();
        let mut skipped: Vec<PathBuf> = Vec::new();
        for item in items {
            if skipped.iter().any(|dir| item.relative.starts_with(dir)) {
                continue;
            }
            let from = join(source, &item.relative);
            let to = join(destination, &item.relative);
            // Named from the source's own name, so a single file has one.
            let label = join(
                Path::new(source.file_name().unwrap_or_default()),
                &item.relative,
            );
            self.progress.start_file(&label.display().to_string());
            let outcome = match self.direction {
                Direction::Upload => self.upload(&item.kind, &from, &to).await,
                Direction::Download => self.download(&item.kind, &from, &to).await,
            };
            match outcome {
                Ok(()) => {
                    if let Kind::Directory { mode } = item.kind {
                        directories.push((to, mode));
                    }
                }
                Err(message) => {
                    let shown = match self.direction {
                        Direction::Upload if message.local => &from,
                        Direction::Download if !message.local => &from,
                        _ => &to,
                    };
                    self.report(&Problem {
                        path: shown.display().to_string(),
                        message: message.text,
                    });
                    if matches!(item.kind, Kind::Directory { .. }) {
                        skipped.push(item.relative.clone());
                    }
                    if self.strict {
                        return;
                    }
                }
            }
        }
        for (dir, mode) in directories.into_iter().rev() {
            let outcome = match self.direction {
                Direction::Upload => match text(&dir) {
                    Ok(path) => self
                        .client
                        .fs_set_permissions(&path, mode, None)
                        .await
                        .map_err(|err| err.to_string()),
                    Err(message) => Err(message),
                },
                Direction::Download => set_local_mode(&dir, mode).await,
            };
            if let Err(message) = outcome {
                self.report(&Problem {
                    path: dir.display().to_string(),
                    message,
                });
                if self.strict {
                    return;
                }
            }
        }
    }

    fn next_handle(&mut self) -> String {
        self.handles += 1;
        format!("cp-{}", self.handles)
    }

    /// One item from here to the server.
    async fn upload(&mut self, kind: &Kind, from: &Path, to: &Path) -> Result<(), Failure> {
        let in_new_directory = to
            .parent()
            .and_then(Path::to_str)
            .is_some_and(|parent| self.created.contains(parent));
        let to = text(to).map_err(Failure::remote)?;
        let existing = if in_new_directory {
            None
        } else {
            remote_entry(self.client, &to).await?
        };
        match kind {
            Kind::Directory { .. } => match existing {
                Some(meta) if meta.is_directory => Ok(()),
                Some(_) => Err(Failure::remote("exists and is not a directory")),
                None => {
                    self.client
                        .fs_create_directory(&to, Some(false), None)
                        .await
                        .map_err(Failure::rpc)?;
                    self.created.insert(to);
                    Ok(())
                }
            },
            Kind::File { mode, .. } => {
                let open_mode = match existing {
                    None => OpenMode::Create,
                    Some(meta) if meta.is_directory => {
                        return Err(Failure::remote("is a directory"))
                    }
                    Some(meta) if meta.is_file => OpenMode::Truncate,
                    // A symlink (never written through) or a special file.
                    Some(_) => {
                        self.remove_remote(&to).await?;
                        OpenMode::Create
                    }
                };
                let mut file = open_local_source(from).await.map_err(Failure::local)?;
                let handle = self.next_handle();
                let progress = &mut self.progress;
                self.client
                    .upload(&handle, &to, open_mode, &mut file, &mut |n| {
                        progress.advance(n)
                    })
                    .await
                    .map_err(Failure::transfer)?;
                self.client
                    .fs_set_permissions(&to, *mode, None)
                    .await
                    .map_err(Failure::rpc)
            }
            Kind::Symlink { target } => {
                match existing {
                    Some(meta) if meta.is_directory && !meta.is_symlink => {
                        return Err(Failure::remote("is a directory"))
                    }
                    Some(_) => self.remove_remote(&to).await?,
                    None => {}
                }
                self.client
                    .fs_create_symlink(&to, target, None)
                    .await
                    .map_err(Failure::rpc)
            }
            Kind::Special => Err(Failure::local(special())),
        }
    }

    async fn remove_remote(&self, path: &str) -> Result<(), Failure> {
        self.client
            .fs_remove(path, Some(false), Some(true), None)
            .await
            .map_err(Failure::rpc)
    }

    /// One item from the server to here.
    async fn download(&mut self, kind: &Kind, from: &Path, to: &Path) -> Result<(), Failure> {
        let existing = match tokio::fs::symlink_metadata(to).await {
            Ok(meta) => Some(meta),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => return Err(Failure::local(err)),
        };
        match kind {
            Kind::Directory { .. } => match existing {
                Some(meta) if meta.is_dir() => Ok(()),
                Some(_) => Err(Failure::local("exists and is not a directory")),
                None => tokio::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(to)
                    .await
                    .map_err(Failure::local),
            },
            Kind::File { mode, .. } => {
                let from = text(from).map_err(Failure::remote)?;
                if existing.as_ref().is_some_and(|meta| meta.is_dir()) {
                    return Err(Failure::local("is a directory"));
                }
                if existing
                    .as_ref()
                    .is_some_and(|meta| !meta.file_type().is_file())
                {
                    // A symlink (never written through) or a special file.
                    tokio::fs::remove_file(to).await.map_err(Failure::local)?;
                }
                let mut file = open_local_destination(to).await.map_err(Failure::local)?;
                let handle = self.next_handle();
                let progress = &mut self.progress;
                self.client
                    .download(&handle, &from, &mut file, &mut |n| progress.advance(n))
                    .await
                    .map_err(Failure::transfer)?;
                // On the descriptor opened without following a symlink,
                // not by path again.
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(*mode))
                    .await
                    .map_err(Failure::local)
            }
            Kind::Symlink { target } => {
                match existing {
                    Some(meta) if meta.is_dir() => return Err(Failure::local("is a directory")),
                    Some(_) => tokio::fs::remove_file(to).await.map_err(Failure::local)?,
                    None => {}
                }
                tokio::fs::symlink(target, to).await.map_err(Failure::local)
            }
            Kind::Special => Err(Failure::remote(special())),
        }
    }
}

fn special() -> &'static str {
    "not copied: a special file (FIFO, socket or device)"
}

/// Why one item failed, and on which side (to name the right path).
struct Failure {
    local: bool,
    text: String,
}

impl Failure {
    fn local(message: impl std::fmt::Display) -> Self {
        Self {
            local: true,
            text: message.to_string(),
        }
    }

    fn remote(message: impl std::fmt::Display) -> Self {
        Self {
            local: false,
            text: message.to_string(),
        }
    }

    /// The server's own words for an error it answered (`No such file or
    /// directory (os error 2)`), the client's otherwise.
    fn rpc(err: ClientError) -> Self {
        match err {
            ClientError::Rpc(rpc) => Self::remote(rpc.message),
            other => Self::remote(other),
        }
    }

    fn transfer(err: crate::client::transfer::TransferError) -> Self {
        match err {
            crate::client::transfer::TransferError::Local(err) => Self::local(err),
            remote => Self::remote(remote),
        }
    }
}

/// What is at `path` on the server (not following a symlink), `None` when
/// nothing is.
async fn remote_entry(
    client: &ExecServerClient,
    path: &str,
) -> Result<Option<GetMetadataResponse>, Failure> {
    match client.fs_metadata(path, false, None).await {
        Ok(meta) => Ok(Some(meta)),
        Err(ClientError::Rpc(err)) if err.code == NOT_FOUND => Ok(None),
        Err(err) => Err(Failure::rpc(err)),
    }
}

/// Opens a local regular file to read, never a symlink and never blocking
/// on a FIFO swapped in since the walk.
async fn open_local_source(path: &Path) -> std::io::Result<tokio::fs::File> {
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .await?;
    if !file.metadata().await?.is_file() {
        return Err(std::io::Error::other("no longer a regular file"));
    }
    Ok(file)
}

/// Creates or truncates a local file to write, owner-only until its mode is
/// set, never through a symlink.
async fn open_local_destination(path: &Path) -> std::io::Result<tokio::fs::File> {
    tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .await
}

async fn set_local_mode(path: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .await
        .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_and_a_colon_before_any_slash_mean_the_server() {
        assert_eq!(
            Location::parse("remote:/srv/x"),
            Location::Remote("/srv/x".into())
        );
        assert_eq!(Location::parse(":rel"), Location::Remote("rel".into()));
        assert_eq!(
            Location::parse("dev:notes.txt"),
            Location::Remote("notes.txt".into())
        );
        assert_eq!(Location::parse("./a:b"), Location::Local("./a:b".into()));
        assert_eq!(Location::parse("/x/y"), Location::Local("/x/y".into()));
    }

    #[test]
    fn a_trailing_dot_names_the_contents() {
        assert!(names_contents("."));
        assert!(names_contents("dir/."));
        assert!(!names_contents("dir"));
        assert!(!names_contents("dir/.hidden"));
    }
}
