//! Helpers for the sandbox tests: a private workspace per test (under
//! cargo's target tmp dir, never under `/tmp`, which the workspace profile
//! makes writable), profiles, and runs of the real binary as
//! `codexbox linux-sandbox …` / `codexbox sandbox …`.
#![allow(dead_code)] // each test file uses a subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_codexbox");

/// A private directory tree for one test.
pub struct Ws {
    _dir: tempfile::TempDir,
    /// Canonical root of the tree; the workspace is `root/ws`.
    pub root: PathBuf,
    pub ws: PathBuf,
    pub outside: PathBuf,
}

impl Ws {
    pub fn new() -> Ws {
        let dir = super::host::dir_outside_tmp("sbx");
        let root = dir.path().canonicalize().expect("canonical tempdir");
        let ws = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        Ws {
            _dir: dir,
            root,
            ws,
            outside,
        }
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Names directly in the workspace (sorted), to check nothing was left.
    pub fn listing(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.ws)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

/// `{"path":{"type":"special","value":{"kind":K}},"access":A}`
pub fn special(kind: &str, access: &str) -> String {
    format!(r#"{{"path":{{"type":"special","value":{{"kind":"{kind}"}}}},"access":"{access}"}}"#)
}

pub fn path_entry(p: &Path, access: &str) -> String {
    format!(
        r#"{{"path":{{"type":"path","path":"{}"}},"access":"{access}"}}"#,
        p.display()
    )
}

pub fn glob_entry(pattern: &str, access: &str) -> String {
    format!(r#"{{"path":{{"type":"glob_pattern","pattern":"{pattern}"}},"access":"{access}"}}"#)
}

/// A managed restricted profile with `entries` and `network`.
pub fn profile(entries: &[String], network: &str) -> String {
    format!(
        r#"{{"type":"managed","file_system":{{"type":"restricted","entries":[{}]}},"network":"{network}"}}"#,
        entries.join(",")
    )
}

/// Read access to `sub` below each project root (protected metadata).
pub fn project_metadata(sub: &str) -> String {
    format!(
        r#"{{"path":{{"type":"special","value":{{"kind":"project_roots","subpath":"{sub}"}}}},"access":"read"}}"#
    )
}

/// Read everything, write the project root (with its protected metadata),
/// plus `extra` entries; `/tmp` and `$TMPDIR` stay read-only.
pub fn workspace_with(extra: &[String], network: &str) -> String {
    let mut entries = vec![
        special("root", "read"),
        special("project_roots", "write"),
        project_metadata(".git"),
        project_metadata(".agents"),
        project_metadata(".codex"),
    ];
    entries.extend_from_slice(extra);
    profile(&entries, network)
}

/// The workspace profile without `/tmp` and `$TMPDIR` (so only the
/// workspace is writable).
pub fn workspace_only(network: &str) -> String {
    workspace_with(&[], network)
}

/// `codexbox linux-sandbox --sandbox-policy-cwd CWD --permission-profile P [extra] -- sh -c SCRIPT`.
pub fn sh(cwd: &Path, profile: &str, extra: &[&str], script: &str) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("linux-sandbox")
        .arg("--sandbox-policy-cwd")
        .arg(cwd)
        .arg("--permission-profile")
        .arg(profile)
        .args(extra)
        .args(["--", "sh", "-c", script])
        .current_dir(cwd)
        .stdin(Stdio::null());
    let out = cmd.output().expect("run codexbox linux-sandbox");
    eprintln!(
        "--- sh -c {script:?}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Whether the bubblewrap backend works here; tests skip out loud when it
/// does not, unless `CODEXBOX_REQUIRE_SANDBOX=1`.
pub fn sandbox_available() -> bool {
    let ws = Ws::new();
    let out = sh(&ws.ws, "read-only", &["--backend", "bwrap"], "true");
    if out.status.success() {
        return true;
    }
    super::host::host_has("a usable bubblewrap sandbox", Err(stderr(&out)))
}

/// Returns from the calling test when no sandbox backend works here.
#[allow(unused_macros)]
macro_rules! require_sandbox {
    () => {
        if !$crate::common::sandbox::sandbox_available() {
            return;
        }
    };
}
#[allow(unused_imports)] // only some test files skip without a sandbox
pub(crate) use require_sandbox;
