//! The `codex-linux-sandbox` command line and `codexbox sandbox`, through
//! the real binary: status and signal passthrough, cleanup after normal and
//! killed runs, usage errors, the inner-stage refusal, `--explain`, the
//! older policy flags and the Landlock backend.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use common::sandbox::*;

#[test]
fn exit_status_and_signals_pass_through() {
    require_sandbox!();
    let w = Ws::new();
    assert_eq!(sh(&w.ws, "read-only", &[], "exit 7").status.code(), Some(7));
    assert_eq!(
        sh(&w.ws, "read-only", &[], "kill -TERM $$").status.code(),
        Some(143)
    );
    assert_eq!(
        sh(&w.ws, "read-only", &[], "kill -KILL $$").status.code(),
        Some(137)
    );
}

#[test]
fn stdout_and_stderr_pass_through_untouched() {
    require_sandbox!();
    let w = Ws::new();
    let out = sh(&w.ws, "read-only", &[], "echo out; echo err >&2");
    assert_eq!(stdout(&out), "out\n");
    assert_eq!(stderr(&out), "err\n");
}

#[test]
fn no_leftovers_after_a_run_in_a_fresh_workspace() {
    require_sandbox!();
    let w = Ws::new();
    w.write("src/main.rs", "fn main() {}\n");
    let out = sh(
        &w.ws,
        "workspace",
        &[],
        "ls -a | tr '\\n' ' '; test -d .codex && echo codex-masked",
    );
    assert!(stdout(&out).contains("codex-masked"), "{}", stdout(&out));
    assert_eq!(w.listing(), vec!["src".to_owned()]);
}

#[test]
fn no_leftovers_when_the_command_is_killed() {
    require_sandbox!();
    let w = Ws::new();
    let mut child = Command::new(BIN)
        .arg("linux-sandbox")
        .arg("--sandbox-policy-cwd")
        .arg(&w.ws)
        .arg("--permission-profile")
        .arg(workspace_only("restricted"))
        .args(["--", "sh", "-c", "echo ready; exec sleep 1000"])
        .stdout(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    assert!(
        w.ws.join(".codex").exists(),
        "the mask exists while running"
    );
    // SAFETY: signalling a child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(w.listing().is_empty(), "left behind: {:?}", w.listing());
}

#[test]
fn concurrent_runs_keep_each_others_masks() {
    require_sandbox!();
    let w = Ws::new();
    let mut long = Command::new(BIN)
        .arg("linux-sandbox")
        .arg("--sandbox-policy-cwd")
        .arg(&w.ws)
        .arg("--permission-profile")
        .arg(workspace_only("restricted"))
        .args([
            "--",
            "sh",
            "-c",
            "echo ready; read x; mkdir .codex/x 2>/dev/null && echo BROKEN; echo end",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(long.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    // A short run on the same workspace ends first: it must not remove the
    // mount point the long run still uses.
    assert!(sh(&w.ws, &workspace_only("restricted"), &[], "true")
        .status
        .success());
    assert!(w.ws.join(".codex").exists());
    drop(long.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest, "end\n");
    assert!(long.wait().unwrap().success());
    assert!(w.listing().is_empty(), "left behind: {:?}", w.listing());
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let w = Ws::new();
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("linux-sandbox")
            .args(args)
            .current_dir(&w.ws)
            .output()
            .unwrap();
        (out.status.code(), stderr(&out))
    };
    let (code, err) = run(&[
        "--sandbox-policy-cwd",
        "/",
        "--permission-profile",
        "read-only",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.starts_with("codex-linux-sandbox: no command"), "{err}");
    let (code, err) = run(&[
        "--sandbox-policy-cwd",
        "/",
        "--permission-profile",
        "{bad",
        "--",
        "true",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with("codex-linux-sandbox: invalid permission profile JSON"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, err) = run(&["--sandbox-policy-cwd", "/", "--", "true"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("missing permission profile"), "{err}");
    let (code, _) = run(&["--bogus"]);
    assert_eq!(code, Some(2));
    let (code, err) = run(&[
        "--sandbox-policy-cwd",
        "/",
        "--file-system-sandbox-policy",
        r#"{"kind":"restricted"}"#,
        "--",
        "true",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("must be provided together"), "{err}");
}

#[test]
fn inner_stage_flags_are_refused_outside_the_sandbox() {
    let w = Ws::new();
    let marker = w.ws.join("ran");
    // `… --apply-seccomp-then-exec -- touch MARKER` through `front`.
    let run = |front: &mut Command| {
        front
            .arg("--sandbox-policy-cwd")
            .arg(&w.ws)
            .args([
                "--permission-profile",
                "read-only",
                "--apply-seccomp-then-exec",
                "--",
            ])
            .arg("touch")
            .arg(&marker)
            .output()
            .unwrap()
    };
    let out = run(Command::new(BIN).arg("linux-sandbox"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("refused"), "{}", stderr(&out));
    assert!(!marker.exists(), "the command must not run");
    // Same through argv[0] `codex-linux-sandbox`.
    let out = run(Command::new(BIN).arg0("codex-linux-sandbox"));
    assert_eq!(out.status.code(), Some(1));
    assert!(!marker.exists());
}

#[test]
fn explain_prints_policy_and_argv_without_running() {
    let w = Ws::new();
    let marker = w.ws.join("ran");
    let out = Command::new(BIN)
        .arg("linux-sandbox")
        .arg("--sandbox-policy-cwd")
        .arg(&w.ws)
        .args([
            "--permission-profile",
            "workspace",
            "--explain",
            "--backend",
            "bwrap",
            "--",
        ])
        .arg("touch")
        .arg(&marker)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let s = stdout(&out);
    assert!(s.contains("backend: bwrap"), "{s}");
    assert!(
        s.contains("argv: bwrap --new-session --die-with-parent --ro-bind / / --dev /dev"),
        "{s}"
    );
    assert!(
        s.contains(&format!("--bind {0} {0}", w.ws.display())),
        "{s}"
    );
    assert!(s.contains("--unshare-net"), "{s}");
    assert!(!marker.exists());
}

#[test]
fn legacy_policy_flags_are_accepted() {
    require_sandbox!();
    let w = Ws::new();
    let out = Command::new(BIN)
        .arg("linux-sandbox")
        .arg("--sandbox-policy-cwd")
        .arg(&w.ws)
        .args([
            "--sandbox-policy",
            r#"{"type":"workspace-write","exclude_tmpdir_env_var":true,"exclude_slash_tmp":true}"#,
            "--",
            "sh",
            "-c",
            "echo ok > f && cat f",
        ])
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));
    let out = Command::new(BIN)
        .arg("linux-sandbox")
        .arg("--sandbox-policy-cwd")
        .arg(&w.ws)
        .args([
            "--file-system-sandbox-policy",
            r#"{"kind":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}"#,
            "--network-sandbox-policy",
            "restricted",
            "--",
            "sh",
            "-c",
            "echo x > g",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!w.ws.join("g").exists());
}

#[test]
fn full_disk_write_profiles_skip_bubblewrap_but_keep_network_closed() {
    let w = Ws::new();
    let p = r#"{"type":"managed","file_system":{"type":"unrestricted"},"network":"restricted"}"#;
    let out = sh(
        &w.ws,
        p,
        &[],
        "echo ok > f; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; (exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo TCP",
    );
    let s = stdout(&out);
    assert!(w.ws.join("f").exists());
    assert!(
        s.contains("NoNewPrivs:\t1") && s.contains("CapEff:\t0000000000000000"),
        "{s}"
    );
    assert!(!s.contains("TCP"), "{s}");
    let out = sh(&w.ws, "danger-full-access", &[], "echo ok");
    assert_eq!(stdout(&out), "ok\n");
    // With the network on: still no capabilities, and the always-on
    // seccomp denials (mode 2 = filter).
    let p = r#"{"type":"managed","file_system":{"type":"unrestricted"},"network":"enabled"}"#;
    let out = sh(
        &w.ws,
        p,
        &[],
        "grep -E '^(NoNewPrivs|CapEff|Seccomp):' /proc/self/status",
    );
    let s = stdout(&out);
    assert!(
        s.contains("CapEff:\t0000000000000000") && s.contains("Seccomp:\t2"),
        "{s}"
    );
}

#[test]
fn debug_front_end_runs_like_the_server() {
    require_sandbox!();
    let w = Ws::new();
    let run = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("sandbox")
            .arg("-C")
            .arg(&w.ws)
            .args(args)
            .output()
            .unwrap();
        eprintln!("{:?} {}", out.status, stderr(&out));
        out
    };
    let out = run(&["--", "sh", "-c", "echo x > f"]);
    assert!(!out.status.success(), "read-only is the default");
    assert!(!w.ws.join("f").exists());
    let out = run(&[
        "--profile",
        "workspace",
        "--",
        "sh",
        "-c",
        "echo x > f; exit 5",
    ]);
    assert_eq!(out.status.code(), Some(5));
    assert!(w.ws.join("f").exists());
    let extra = w.outside.join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let out = run(&[
        "--writable-root",
        extra.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &format!("echo y > {}/g", extra.display()),
    ]);
    assert!(out.status.success());
    assert!(extra.join("g").exists());
    let out = run(&["--explain", "--", "true"]);
    assert!(stdout(&out).contains("argv: bwrap"), "{}", stdout(&out));
    assert_eq!(
        run(&["--profile", "nope", "--", "true"]).status.code(),
        Some(2)
    );
}

#[test]
fn landlock_backend_enforces_writable_roots() {
    let w = Ws::new();
    // The Landlock backend grants write below the root's entries, not on the
    // root itself (so protected names cannot be created there).
    std::fs::create_dir_all(w.ws.join("src")).unwrap();
    let out = sh(
        &w.ws,
        &workspace_only("restricted"),
        &["--backend", "landlock"],
        &format!(
            "echo in > src/inside.txt && echo wrote; (echo out > {0}/f) 2>/dev/null || echo denied",
            w.outside.display()
        ),
    );
    if stderr(&out).contains("Landlock is unavailable") {
        eprintln!("SKIP: Landlock unavailable: {}", stderr(&out));
        return;
    }
    assert_eq!(stdout(&out), "wrote\ndenied\n");
    assert!(!w.outside.join("f").exists());
}

#[test]
fn bundled_bubblewrap_runs_through_its_verified_fd() {
    require_sandbox!();
    let Some(system) = ["/usr/bin/bwrap", "/bin/bwrap"]
        .iter()
        .map(std::path::Path::new)
        .find(|p| p.exists())
    else {
        eprintln!("SKIP: no system bwrap to stand in for the bundled one");
        return;
    };
    let resources = std::path::Path::new(BIN)
        .parent()
        .unwrap()
        .join("resources");
    std::fs::create_dir_all(&resources).unwrap();
    let bundled = resources.join("bwrap");
    /// Removes the stand-in afterwards, so other tests see no bundled bwrap.
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    std::fs::copy(system, &bundled).unwrap();
    let _cleanup = Remove(bundled.clone());
    let w = Ws::new();
    let run = |extra: &[&str]| {
        Command::new(BIN)
            .env("CODEXBOX_BWRAP", "bundled")
            .arg("linux-sandbox")
            .arg("--sandbox-policy-cwd")
            .arg(&w.ws)
            .args(["--permission-profile", "read-only"])
            .args(extra)
            .args([
                "--",
                "sh",
                "-c",
                "echo inside; touch x 2>/dev/null || echo denied",
            ])
            .output()
            .unwrap()
    };
    let explain = run(&["--explain"]);
    assert!(
        stdout(&explain).contains(&format!("launcher: bundled {}", bundled.display())),
        "{}",
        stdout(&explain)
    );
    let out = run(&[]);
    assert_eq!(stdout(&out), "inside\ndenied\n", "{}", stderr(&out));
}
