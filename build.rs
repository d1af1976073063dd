//! Build script: records which commit the binary was built from, for
//! `--version` (`codexbox 0.1.0 (abc1234 2026-11-28)`).
//!
//! `CODEXBOX_BUILD_COMMIT` wins when set (an image build, which has no
//! `.git`, passes it in); otherwise git is asked about this checkout, and
//! only when the checkout is this package's own repository (not a parent's
//! that happens to hold an unpacked tarball). Without either the version
//! carries no commit. Nothing here can fail the build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable that names the commit from outside (`abc1234 2026-11-28`).
const COMMIT_ENV: &str = "CODEXBOX_BUILD_COMMIT";
/// What the crate reads: ` (abc1234 2026-11-28)`, or empty.
const OUTPUT_ENV: &str = "CODEXBOX_BUILD_SUFFIX";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={COMMIT_ENV}");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let commit = match std::env::var(COMMIT_ENV) {
        Ok(given) => Some(given.trim().to_owned()).filter(|given| !given.is_empty()),
        Err(_) => from_git(&manifest_dir),
    };
    let suffix = commit
        .map(|commit| format!(" ({commit})"))
        .unwrap_or_default();
    println!("cargo:rustc-env={OUTPUT_ENV}={suffix}");
}

/// Runs git in `dir`; its trimmed output when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned()).filter(|text| !text.is_empty())
}

/// `abc1234 2026-11-28` for the checked-out commit of this package's own
/// repository; asks cargo to run again when HEAD moves.
fn from_git(manifest_dir: &Path) -> Option<String> {
    let toplevel = git(manifest_dir, &["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&toplevel), manifest_dir) {
        return None;
    }
    // HEAD, the branch it points to, and packed refs: a commit moves one.
    let mut watched = vec![git(manifest_dir, &["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(manifest_dir, &["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(
        manifest_dir,
        &["rev-parse", "--git-path", "packed-refs"],
    ));
    for path in watched.into_iter().flatten() {
        let path = manifest_dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    git(manifest_dir, &["log", "-1", "--format=%h %cs", "HEAD"])
}
