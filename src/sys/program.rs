//! Finding a program on `PATH`, the one way codexbox does it: the sandbox
//! (the system bubblewrap, ripgrep for deny globs) and `doctor`'s reports
//! all call [`find_on_path`], so they can never name different programs.
//!
//! A program found here runs outside any sandbox, so the search trusts
//! less than a shell does: only absolute `PATH` entries (an empty or
//! relative entry would mean the current directory), never a candidate
//! that resolves under `cwd` (unless `cwd` is `/`) or lies under one of
//! the `untrusted` roots (in either spelling, as given or canonical), and
//! only an executable regular file. The answer is the canonical path.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The first trusted `name` on this process's `PATH` (see the module
/// header), as a canonical path.
pub fn find_on_path(name: &str, cwd: &Path, untrusted: &[PathBuf]) -> Option<PathBuf> {
    let search = std::env::var_os("PATH")?;
    find_in(name, &search, cwd, untrusted)
}

/// [`find_on_path`] over the given `PATH` value.
pub fn find_in(name: &str, search: &OsStr, cwd: &Path, untrusted: &[PathBuf]) -> Option<PathBuf> {
    let cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    for dir in std::env::split_paths(search) {
        if dir.as_os_str().is_empty() || dir.is_relative() {
            continue; // "" and relative entries mean the current directory
        }
        let candidate = dir.join(name);
        // One stat rules out the usual miss before a component-by-component
        // resolution.
        if std::fs::metadata(&candidate).is_err() {
            continue;
        }
        let Ok(real) = candidate.canonicalize() else {
            continue;
        };
        if cwd != Path::new("/") && real.starts_with(&cwd) {
            continue;
        }
        if under_any(&candidate, untrusted) {
            continue;
        }
        if is_executable_file(&real) {
            return Some(real);
        }
    }
    None
}

/// Whether `path` is a regular file with an execute bit (following
/// symlinks).
pub fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Whether `path`, as given or canonical, lies under one of `roots`, as
/// given or canonical.
pub fn under_any(path: &Path, roots: &[PathBuf]) -> bool {
    let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    roots.iter().any(|r| {
        let r_real = r.canonicalize().unwrap_or_else(|_| r.clone());
        [path, real.as_path()]
            .iter()
            .any(|p| p.starts_with(r) || p.starts_with(&r_real))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn skips_workspace_local_programs_in_search_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws/bin");
        let sys = root.join("sys");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&sys).unwrap();
        for d in [&ws, &sys] {
            let f = d.join("bwrap");
            std::fs::write(&f, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let noexec = root.join("noexec");
        std::fs::create_dir_all(&noexec).unwrap();
        std::fs::write(noexec.join("bwrap"), "x").unwrap();
        let search = std::env::join_paths([&noexec, &ws, &sys]).unwrap();
        assert_eq!(
            find_in("bwrap", &search, &root.join("ws"), &[]),
            Some(sys.join("bwrap"))
        );
        assert_eq!(
            find_in("bwrap", &search, Path::new("/"), &[]),
            Some(ws.join("bwrap")),
            "cwd / hides nothing"
        );
        assert_eq!(
            find_in("bwrap", &search, Path::new("/"), &[root.join("ws")]),
            Some(sys.join("bwrap")),
            "a writable root is skipped whatever the cwd"
        );
        let rel = std::ffi::OsString::from(":.:bin");
        assert_eq!(find_in("bwrap", &rel, &root.join("ws"), &[]), None);
    }
}
