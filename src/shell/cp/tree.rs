//! What `codexbox cp` copies: the source tree walked into a list of items
//! (pre-order, each directory before its entries, entries by name), each a
//! regular file (size, mode), a directory (mode), a symlink (its text) or a
//! special file (reported, not copied). Symlinks are never followed inside
//! a tree; the root is followed only when written with a trailing `/`, as
//! the kernel does. A directory that cannot be read becomes a problem and
//! the walk goes on.

use std::path::{Path, PathBuf};

use crate::client::ExecServerClient;
use crate::protocol::fs::DirectoryEntry;

/// Mode bits a copy keeps: permissions and the sticky bit, never set-id.
pub const KEPT_MODE_BITS: u32 = crate::protocol::fs::SETTABLE_MODE_BITS;

/// What an item is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    File {
        size: u64,
        mode: u32,
    },
    Directory {
        mode: u32,
    },
    Symlink {
        target: String,
    },
    /// A FIFO, socket or device: not copied.
    Special,
}

/// One entry of the source tree, relative to its root (`""` is the root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub relative: PathBuf,
    pub kind: Kind,
}

/// Something that could not be read or written, for the per-file report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// Which side of the copy is walked.
pub enum Side<'a> {
    Local,
    Remote(&'a ExecServerClient),
}

impl Side<'_> {
    /// Walks the tree at `root`. With `strict`, stops at the first problem.
    pub async fn walk(&self, root: &Path, strict: bool, problems: &mut Vec<Problem>) -> Vec<Item> {
        let root_kind = match self.kind_of_root(root).await {
            Ok(kind) => kind,
            Err(message) => {
                problems.push(problem(root, message));
                return Vec::new();
            }
        };
        let mut items = Vec::new();
        let mut pending = vec![Item {
            relative: PathBuf::new(),
            kind: root_kind,
        }];
        while let Some(item) = pending.pop() {
            let is_directory = matches!(item.kind, Kind::Directory { .. });
            let relative = item.relative.clone();
            items.push(item);
            if !is_directory {
                continue;
            }
            let dir = join(root, &relative);
            match self.list(&dir).await {
                Ok(children) => {
                    // Reversed onto the stack so they come off by name.
                    for (name, kind) in children.into_iter().rev() {
                        match kind {
                            Ok(kind) => pending.push(Item {
                                relative: relative.join(name),
                                kind,
                            }),
                            Err(message) => {
                                problems.push(problem(&dir.join(name), message));
                                if strict {
                                    return items;
                                }
                            }
                        }
                    }
                }
                Err(message) => {
                    problems.push(problem(&dir, message));
                    if strict {
                        return items;
                    }
                }
            }
        }
        items
    }

    async fn kind_of_root(&self, root: &Path) -> Result<Kind, String> {
        match self {
            Side::Local => {
                let meta = tokio::fs::symlink_metadata(root)
                    .await
                    .map_err(|err| err.to_string())?;
                local_kind(root, &meta).await
            }
            Side::Remote(client) => {
                let meta = client
                    .fs_metadata(&text(root)?, false, None)
                    .await
                    .map_err(|err| err.to_string())?;
                remote_kind(
                    meta.is_symlink,
                    meta.is_directory,
                    meta.is_file,
                    meta.size,
                    meta.mode,
                    meta.symlink_target,
                )
            }
        }
    }

    /// The entries of `dir` by name, each with its kind (or why not).
    async fn list(&self, dir: &Path) -> Result<Vec<(String, Result<Kind, String>)>, String> {
        match self {
            Side::Local => {
                let mut reader = tokio::fs::read_dir(dir)
                    .await
                    .map_err(|err| err.to_string())?;
                let mut names = Vec::new();
                while let Some(entry) = reader.next_entry().await.map_err(|err| err.to_string())? {
                    names.push(entry.file_name());
                }
                names.sort();
                let mut children = Vec::with_capacity(names.len());
                for name in names {
                    let path = dir.join(&name);
                    let Ok(name) = name.into_string() else {
                        children.push((
                            path.to_string_lossy().into_owned(),
                            Err("the name is not UTF-8 (the wire carries paths as text)".into()),
                        ));
                        continue;
                    };
                    let kind = match tokio::fs::symlink_metadata(&path).await {
                        Ok(meta) => local_kind(&path, &meta).await,
                        Err(err) => Err(err.to_string()),
                    };
                    children.push((name, kind));
                }
                Ok(children)
            }
            Side::Remote(client) => {
                let entries = client
                    .fs_directory_entries(&text(dir)?, false, None)
                    .await
                    .map_err(|err| err.to_string())?;
                Ok(entries
                    .into_iter()
                    .map(|entry| {
                        let kind = entry_kind(&entry);
                        (entry.file_name, kind)
                    })
                    .collect())
            }
        }
    }
}

/// `root/relative`, or `root` itself for the root item (keeping a
/// trailing `/` the user wrote).
pub fn join(root: &Path, relative: &Path) -> PathBuf {
    if relative.as_os_str().is_empty() {
        root.to_path_buf()
    } else {
        root.join(relative)
    }
}

/// A path as wire text.
pub fn text(path: &Path) -> Result<String, String> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| "the path is not UTF-8 (the wire carries paths as text)".to_owned())
}

fn problem(path: &Path, message: String) -> Problem {
    Problem {
        path: path.display().to_string(),
        message,
    }
}

async fn local_kind(path: &Path, meta: &std::fs::Metadata) -> Result<Kind, String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & KEPT_MODE_BITS;
    let kind = meta.file_type();
    if kind.is_symlink() {
        let target = tokio::fs::read_link(path)
            .await
            .map_err(|err| err.to_string())?;
        let target = target
            .into_os_string()
            .into_string()
            .map_err(|_| "the symlink's target is not UTF-8".to_owned())?;
        Ok(Kind::Symlink { target })
    } else if kind.is_dir() {
        Ok(Kind::Directory { mode })
    } else if kind.is_file() {
        Ok(Kind::File {
            size: meta.len(),
            mode,
        })
    } else {
        Ok(Kind::Special)
    }
}

fn entry_kind(entry: &DirectoryEntry) -> Result<Kind, String> {
    remote_kind(
        entry.is_symlink.unwrap_or(false),
        entry.is_directory,
        entry.is_file,
        entry.size.unwrap_or(0),
        entry.mode,
        entry.symlink_target.clone(),
    )
}

fn remote_kind(
    is_symlink: bool,
    is_directory: bool,
    is_file: bool,
    size: u64,
    mode: Option<u32>,
    target: Option<String>,
) -> Result<Kind, String> {
    let mode =
        mode.ok_or("the server reports no modes (it predates fs/setPermissions)")? & KEPT_MODE_BITS;
    if is_symlink {
        let target = target.ok_or("the symlink's target is not UTF-8")?;
        Ok(Kind::Symlink { target })
    } else if is_directory {
        Ok(Kind::Directory { mode })
    } else if is_file {
        Ok(Kind::File { size, mode })
    } else {
        Ok(Kind::Special)
    }
}
