//! Deny-glob expansion: turns `deny` glob patterns into the concrete paths
//! bubblewrap must mask, with ripgrep when it is installed and a built-in
//! walker otherwise. Fails closed: any scan error stops the launch.
//!
//! Matching rules (same as the reference): `*` and `?` never cross `/`,
//! `**` spans directories, `[...]` is a class (`!`/`^` negate); files,
//! symlinks and directories match (a matched directory is masked whole, so
//! `**/.ssh` hides what is inside; the reference lists files only and hides
//! nothing there); symlinked directories are not followed; the scan is
//! bounded by `glob_scan_max_depth` when given and by [`MAX_GLOB_MATCHES`].
//! ripgrep lists files only: a directory is found through the files below
//! it, so an empty matching directory is not masked (it hides nothing).
//! A pattern whose static prefix is `/` (e.g. `/**/*.env`) would scan the
//! whole machine: it is reported and skipped, never silently. Matching a
//! pattern against one path is [`crate::glob_pattern`]'s.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::glob_pattern::{class_end, glob_match};

/// More matches than this for one search root aborts the launch.
pub const MAX_GLOB_MATCHES: usize = 8192;

/// Errors of glob expansion.
#[derive(Debug, thiserror::Error)]
pub enum GlobError {
    #[error("ripgrep unreadable glob scan failed for {}: {stderr}", .root.display())]
    Ripgrep { root: PathBuf, stderr: String },
    #[error("cannot run ripgrep for {}: {source}", .root.display())]
    RipgrepSpawn {
        root: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unreadable glob scan failed for {}: {source}", .path.display())]
    Walk {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unreadable glob expansion for {} matched more than {MAX_GLOB_MATCHES} paths", .root.display())]
    TooManyMatches { root: PathBuf },
}

/// What the expansion produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GlobExpansion {
    /// Matches and, for matches crossing a symlink, their canonical targets.
    pub paths: BTreeSet<PathBuf>,
    /// Patterns not expanded because they would scan from `/`.
    pub skipped: Vec<String>,
}

/// The name ripgrep is looked up by on `PATH`.
pub const RIPGREP: &str = "rg";

/// Which scanner to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scanner {
    Ripgrep(PathBuf),
    BuiltIn,
}

impl Scanner {
    /// ripgrep from PATH, looked up as the system bwrap is (absolute
    /// entries only, never one under `cwd` or `untrusted`: it runs outside
    /// the sandbox), else the built-in walker.
    pub fn detect(cwd: &Path, untrusted: &[PathBuf]) -> Scanner {
        match crate::sys::program::find_on_path(RIPGREP, cwd, untrusted) {
            Some(real) => Scanner::Ripgrep(real),
            None => Scanner::BuiltIn,
        }
    }
}

/// Splits a pattern into (search root, relative glob). None: too broad.
pub fn split_pattern(pattern: &str) -> Option<(PathBuf, String)> {
    let first_meta = pattern.find(['*', '?', '[', ']'])?;
    let slash = pattern[..first_meta].rfind('/')?;
    let root = &pattern[..slash];
    if root.is_empty() {
        return None;
    }
    Some((PathBuf::from(root), pattern[slash + 1..].to_owned()))
}

/// Groups `patterns` by search root (sorted), and lists those that would
/// scan from `/` (in their order): [`expand`]'s first step, shared with the
/// incremental index so both group and skip alike.
pub fn group_by_root(patterns: &[String]) -> (BTreeMap<PathBuf, Vec<String>>, Vec<String>) {
    let mut groups: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    let mut skipped = Vec::new();
    for pattern in patterns {
        match split_pattern(pattern) {
            Some((root, glob)) => groups.entry(root).or_default().push(glob),
            None => skipped.push(pattern.clone()),
        }
    }
    (groups, skipped)
}

/// Expands `patterns` (absolute) into the paths to mask.
pub fn expand(
    patterns: &[String],
    max_depth: Option<usize>,
    scanner: &Scanner,
) -> Result<GlobExpansion, GlobError> {
    let mut out = GlobExpansion::default();
    if max_depth == Some(0) {
        return Ok(out);
    }
    let (groups, skipped) = group_by_root(patterns);
    out.skipped = skipped;
    for (root, globs) in groups {
        if !root.is_dir() {
            continue;
        }
        let matches = match scanner {
            Scanner::Ripgrep(rg) => ripgrep(rg, &root, &globs, max_depth)?,
            Scanner::BuiltIn => walk(&root, &globs, max_depth)?,
        };
        if matches.len() > MAX_GLOB_MATCHES {
            return Err(GlobError::TooManyMatches { root });
        }
        for m in matches {
            if let Ok(real) = m.canonicalize() {
                if real != m {
                    out.paths.insert(real);
                }
            }
            out.paths.insert(m);
        }
    }
    Ok(out)
}

/// Escapes an unclosed `[` so ripgrep does not reject the glob.
fn escape_unclosed_classes(glob: &str) -> String {
    let mut out = String::with_capacity(glob.len());
    let chars: Vec<char> = glob.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '[' && class_end(&chars, i).is_none() {
            out.push_str("\\[");
        } else {
            out.push(c);
        }
        i += 1;
    }
    out
}

fn ripgrep(
    rg: &Path,
    root: &Path,
    globs: &[String],
    max_depth: Option<usize>,
) -> Result<Vec<PathBuf>, GlobError> {
    let mut cmd = Command::new(rg);
    cmd.args(["--files", "--hidden", "--no-ignore", "--null"]);
    if let Some(depth) = max_depth {
        // One level more: the files showing a matching directory.
        cmd.arg("--max-depth").arg((depth + 1).to_string());
    }
    for g in globs {
        let g = escape_unclosed_classes(g);
        cmd.arg("--glob").arg(format!("{g}/**"));
        cmd.arg("--glob").arg(g);
    }
    cmd.arg("--").arg(root);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = cmd.output().map_err(|source| GlobError::RipgrepSpawn {
        root: root.to_path_buf(),
        source,
    })?;
    let ok =
        output.status.success() || (output.status.code() == Some(1) && output.stderr.is_empty());
    if !ok {
        return Err(GlobError::Ripgrep {
            root: root.to_path_buf(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    let found: BTreeSet<PathBuf> = output
        .stdout
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| shallowest_match(root, PathBuf::from(OsString::from_vec(s.to_vec())), globs))
        .filter(|p| {
            let depth = p.strip_prefix(root).map_or(0, |r| r.components().count());
            max_depth.is_none_or(|d| depth <= d)
        })
        .collect();
    Ok(found.into_iter().collect())
}

/// The shallowest of `path` and its ancestors below `root` that a glob
/// matches (a matching directory stands for every file below it); `path`
/// itself when none does (ripgrep's own matching found it).
fn shallowest_match(root: &Path, path: PathBuf, globs: &[String]) -> PathBuf {
    let Ok(rel) = path.strip_prefix(root) else {
        return path;
    };
    let mut prefix = PathBuf::new();
    for c in rel.components() {
        prefix.push(c);
        let text = prefix.to_string_lossy();
        if globs.iter().any(|g| glob_match(g, &text)) {
            return root.join(&prefix);
        }
    }
    path
}

fn walk(
    root: &Path,
    globs: &[String],
    max_depth: Option<usize>,
) -> Result<Vec<PathBuf>, GlobError> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 1usize)];
    while let Some((dir, level)) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|source| GlobError::Walk {
            path: dir.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| GlobError::Walk {
                path: dir.clone(),
                source,
            })?;
            let path = entry.path();
            let ft = entry.file_type().map_err(|source| GlobError::Walk {
                path: path.clone(),
                source,
            })?;
            let Ok(rel) = path.strip_prefix(root) else {
                continue;
            };
            let matched = globs.iter().any(|g| glob_match(g, &rel.to_string_lossy()));
            if ft.is_dir() && !matched {
                if max_depth.is_none_or(|d| level < d) {
                    stack.push((path, level + 1));
                }
                continue;
            }
            if matched {
                out.push(path);
                if out.len() > MAX_GLOB_MATCHES {
                    return Ok(out);
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_too_broad_patterns() {
        assert_eq!(
            split_pattern("/w/**/*.env"),
            Some((PathBuf::from("/w"), "**/*.env".to_owned()))
        );
        assert_eq!(split_pattern("/**/*.env"), None);
        let r = expand(&["/**/*.env".to_owned()], None, &Scanner::BuiltIn).unwrap();
        assert_eq!(r.skipped, vec!["/**/*.env".to_owned()]);
    }

    #[test]
    fn unclosed_character_classes_are_escaped_for_ripgrep() {
        assert_eq!(escape_unclosed_classes("a[b"), "a\\[b");
        assert_eq!(escape_unclosed_classes("a[bc]"), "a[bc]");
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::write(d.join(".gitignore"), "*.env\n").unwrap();
        std::fs::write(d.join("top.env"), "x").unwrap();
        std::fs::write(d.join("a/mid.env"), "x").unwrap();
        std::fs::write(d.join("a/b/deep.env"), "x").unwrap();
        std::fs::write(d.join("a/keep.txt"), "x").unwrap();
        dir
    }

    #[test]
    fn walker_and_ripgrep_agree_and_honour_depth() {
        let dir = tree();
        let d = dir.path().canonicalize().unwrap();
        let pat = vec![format!("{}/**/*.env", d.display())];
        let mut scanners = vec![Scanner::BuiltIn];
        if let Scanner::Ripgrep(rg) = Scanner::detect(Path::new("/"), &[]) {
            scanners.push(Scanner::Ripgrep(rg));
        }
        for scanner in scanners {
            let all = expand(&pat, None, &scanner).unwrap();
            let expected: BTreeSet<PathBuf> = ["top.env", "a/mid.env", "a/b/deep.env"]
                .iter()
                .map(|p| d.join(p))
                .collect();
            assert_eq!(all.paths, expected, "{scanner:?}");
            let shallow = expand(&pat, Some(2), &scanner).unwrap();
            assert!(
                !shallow.paths.contains(&d.join("a/b/deep.env")),
                "{scanner:?}"
            );
            assert!(shallow.paths.contains(&d.join("a/mid.env")), "{scanner:?}");
        }
    }

    #[test]
    fn a_matching_directory_is_one_match_for_both_scanners() {
        let dir = tree();
        let d = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(d.join("a/.ssh/sub")).unwrap();
        std::fs::write(d.join("a/.ssh/id_rsa"), "k").unwrap();
        std::fs::write(d.join("a/.ssh/sub/x"), "k").unwrap();
        let pat = vec![format!("{}/**/.ssh", d.display())];
        let mut scanners = vec![Scanner::BuiltIn];
        if let Scanner::Ripgrep(rg) = Scanner::detect(Path::new("/"), &[]) {
            scanners.push(Scanner::Ripgrep(rg));
        }
        for scanner in scanners {
            let r = expand(&pat, None, &scanner).unwrap();
            assert_eq!(r.paths, BTreeSet::from([d.join("a/.ssh")]), "{scanner:?}");
            let shallow = expand(&pat, Some(1), &scanner).unwrap();
            assert!(shallow.paths.is_empty(), "{scanner:?}");
        }
    }

    #[test]
    fn symlink_matches_add_canonical_targets() {
        let dir = tree();
        let d = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink(d.join("a/keep.txt"), d.join("link.env")).unwrap();
        let r = expand(&[format!("{}/*.env", d.display())], None, &Scanner::BuiltIn).unwrap();
        assert!(r.paths.contains(&d.join("link.env")));
        assert!(r.paths.contains(&d.join("a/keep.txt")));
    }
}
