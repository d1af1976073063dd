//! `fs/walk`: a bounded breadth-first listing of a directory tree
//! (docs/filesystem.md). Entries of each directory are sorted by name; the root is not
//! listed; symlinks are skipped unless following directory symlinks; hidden
//! directories can be listed without being descended; cycles are cut by
//! canonical path; the response stays within a 4 MiB budget.

use std::collections::{HashSet, VecDeque};
use std::fs;
use std::path::PathBuf;

use super::error::{FsError, Result};
use crate::protocol::fs::{
    WalkEntry, WalkEntryKind, WalkError, WalkParams, WalkResponse, WALK_ITEM_OVERHEAD,
    WALK_MAX_DEPTH, WALK_MAX_DIRECTORIES, WALK_MAX_ENTRIES, WALK_RESPONSE_BUDGET,
};

/// Runs `fs/walk`.
///
/// Depth: the root is read at depth 0 and a directory found at depth `d`
/// is descended only when `d < maxDepth` (so `maxDepth: 0` lists the root's
/// children only). `maxDirectories` counts directories read,
/// the root included. `truncated` is set when the directory, entry or byte
/// budget stopped the walk (not when `maxDepth` did).
pub fn walk(params: &WalkParams) -> Result<WalkResponse> {
    let options = &params.options;
    if options.max_directories == 0 || options.max_entries == 0 {
        return Err(FsError::InvalidRequest(
            "filesystem walk limits must be greater than zero".into(),
        ));
    }
    if options.max_depth > WALK_MAX_DEPTH
        || options.max_directories > WALK_MAX_DIRECTORIES
        || options.max_entries > WALK_MAX_ENTRIES
    {
        return Err(FsError::InvalidRequest(format!(
            "filesystem walk limits exceed maximums: depth={WALK_MAX_DEPTH}, directories={WALK_MAX_DIRECTORIES}, entries={WALK_MAX_ENTRIES}"
        )));
    }
    let root = params.path.path();
    let follow = options.follow_directory_symlinks;
    let mut out = WalkResponse {
        entries: Vec::new(),
        errors: Vec::new(),
        truncated: false,
    };
    let root_meta = fs::symlink_metadata(root)?;
    let root_is_dir = if root_meta.file_type().is_symlink() {
        follow && fs::metadata(root).map(|m| m.is_dir()).unwrap_or(false)
    } else {
        root_meta.is_dir()
    };
    if !root_is_dir {
        return Ok(out);
    }
    let mut visited: HashSet<PathBuf> = HashSet::new();
    if follow {
        if let Ok(real) = fs::canonicalize(root) {
            visited.insert(real);
        }
    }
    let mut budget = WALK_RESPONSE_BUDGET;
    let mut directories_read = 0usize;
    let mut queue: VecDeque<(PathBuf, usize)> = VecDeque::from([(root.to_path_buf(), 0)]);
    'walk: while let Some((dir, depth)) = queue.pop_front() {
        if directories_read >= options.max_directories {
            out.truncated = true;
            break;
        }
        directories_read += 1;
        let mut children =
            match fs::read_dir(&dir).and_then(|it| it.collect::<std::io::Result<Vec<_>>>()) {
                Ok(children) => children,
                Err(err) => {
                    let wire = params.path.sibling(&dir);
                    let message = err.to_string();
                    let cost = wire.render().len() + message.len() + WALK_ITEM_OVERHEAD;
                    if cost > budget {
                        out.truncated = true;
                        break;
                    }
                    budget -= cost;
                    out.errors.push(WalkError {
                        path: wire,
                        message,
                    });
                    continue;
                }
            };
        children.sort_by_key(|entry| entry.file_name());
        for child in children {
            let path = child.path();
            let Ok(kind) = child.file_type() else {
                continue;
            };
            let (entry_kind, descend) = if kind.is_symlink() {
                if !follow || !fs::metadata(&path).map(|m| m.is_dir()).unwrap_or(false) {
                    continue;
                }
                (WalkEntryKind::Directory, true)
            } else if kind.is_dir() {
                (WalkEntryKind::Directory, true)
            } else if kind.is_file() {
                (WalkEntryKind::File, false)
            } else {
                continue;
            };
            if out.entries.len() >= options.max_entries {
                out.truncated = true;
                break 'walk;
            }
            let wire = params.path.sibling(&path);
            let cost = wire.render().len() + WALK_ITEM_OVERHEAD;
            if cost > budget {
                out.truncated = true;
                break 'walk;
            }
            budget -= cost;
            out.entries.push(WalkEntry {
                path: wire,
                kind: entry_kind,
            });
            let hidden = child.file_name().as_encoded_bytes().starts_with(b".");
            if !descend
                || depth >= options.max_depth
                || (hidden && options.prune_hidden_directories)
            {
                continue;
            }
            if follow {
                let fresh = fs::canonicalize(&path).is_ok_and(|real| visited.insert(real));
                if !fresh {
                    continue;
                }
            }
            queue.push_back((path, depth + 1));
        }
    }
    Ok(out)
}
