//! The linux-sandbox mode on the built-in bwrap: with no bubblewrap on PATH
//! (as on a host without it) and when forced with `CODEXBOX_BWRAP=builtin`,
//! `codexbox sandbox` still runs commands with the same protections.

use std::process::{Command, Output};

const CODEXBOX: &str = env!("CARGO_BIN_EXE_codexbox");

/// `codexbox sandbox --profile <profile> -- /bin/sh -c <script>` in `cwd`,
/// with `PATH` and `CODEXBOX_BWRAP` as given.
fn sandbox(cwd: &std::path::Path, path: &str, force: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(CODEXBOX);
    cmd.current_dir(cwd)
        .env("PATH", path)
        .env_remove("CODEXBOX_BWRAP");
    if let Some(force) = force {
        cmd.env("CODEXBOX_BWRAP", force);
    }
    cmd.arg("sandbox")
        .args(args)
        .output()
        .expect("run codexbox sandbox")
}

const PROBE: &str =
    "echo x > /etc/codexbox-probe 2>/dev/null && echo wrote-etc || echo etc-denied; \
                     echo x > ./probe && echo wrote-cwd || echo cwd-denied; \
                     /bin/grep '^CapEff' /proc/self/status; \
                     /usr/bin/unshare -U /bin/true 2>/dev/null && echo userns || echo no-userns";

#[test]
fn sandbox_works_without_bubblewrap_on_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let explain = sandbox(
        dir.path(),
        "/nonexistent",
        None,
        &["--explain", "--", "/bin/true"],
    );
    let explained = String::from_utf8_lossy(&explain.stdout);
    assert!(explained.contains("launcher: builtin"), "{explained}");
    for (profile, cwd_line) in [("read-only", "cwd-denied"), ("workspace", "wrote-cwd")] {
        let run = sandbox(
            dir.path(),
            "/nonexistent",
            None,
            &["--profile", profile, "--", "/bin/sh", "-c", PROBE],
        );
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert_eq!(
            stdout,
            format!("etc-denied\n{cwd_line}\nCapEff:\t0000000000000000\nno-userns\n"),
            "{profile}: stderr {}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert_eq!(run.status.code(), Some(0));
    }
}

#[test]
fn forced_builtin_passes_exit_status_and_stderr_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sandbox(
        dir.path(),
        "/usr/bin:/bin",
        Some("builtin"),
        &[
            "--",
            "/bin/sh",
            "-c",
            "echo out; echo err >&2; kill -TERM $$",
        ],
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&run.stderr), "err\n");
    assert_eq!(run.status.code(), Some(143));
}
