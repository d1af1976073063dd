//! The `codex-linux-sandbox` command line and `codexbox sandbox`, through
//! the real binary: status and signal passthrough, cleanup after normal and
//! killed runs, usage errors, the inner-stage refusal, `--explain`, the
//! older policy flags and the Landlock backend.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use crate::common::sandbox::*;

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
fn a_command_that_cannot_run_exits_127_or_126_in_every_backend() {
    require_sandbox!();
    let w = Ws::new();
    let data = w.ws.join("data");
    std::fs::write(&data, "not a program").expect("write");
    for backend in ["bwrap", "landlock"] {
        let run = |program: &std::path::Path| {
            Command::new(BIN)
                .arg("linux-sandbox")
                .arg("--sandbox-policy-cwd")
                .arg(&w.ws)
                .args([
                    "--permission-profile",
                    "read-only",
                    "--backend",
                    backend,
                    "--",
                ])
                .arg(program)
                .current_dir(&w.ws)
                .stdin(Stdio::null())
                .output()
                .expect("run codexbox linux-sandbox")
        };
        let missing = run(std::path::Path::new("/no/such/program"));
        if backend == "landlock" && stderr(&missing).contains("Landlock is unavailable") {
            crate::common::host::host_has("Landlock", Err(stderr(&missing)));
            continue;
        }
        assert_eq!(
            missing.status.code(),
            Some(127),
            "{backend}: {}",
            stderr(&missing)
        );
        assert!(stderr(&missing).contains("codex-linux-sandbox: cannot execute /no/such/program"));
        let refused = run(&data);
        assert_eq!(
            refused.status.code(),
            Some(126),
            "{backend}: {}",
            stderr(&refused)
        );
    }
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
    assert!(err.contains("--permission-profile <JSON>"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
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
        crate::common::host::host_has("Landlock", Err(stderr(&out)));
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
        crate::common::host::host_has(
            "a system bwrap to stand in for the bundled one",
            Err("not installed".into()),
        );
        return;
    };
    // A copy of the binary with `resources/bwrap` beside it, outside /tmp
    // and $TMPDIR: a bundled bwrap where commands could write is refused,
    // wherever the checkout is. Other tests see no bundled bwrap.
    let install = crate::common::host::dir_outside_tmp("bundled");
    let bin = install.path().join("codexbox");
    std::fs::copy(BIN, &bin).unwrap();
    let resources = install.path().join("resources");
    std::fs::create_dir_all(&resources).unwrap();
    let bundled = resources.join("bwrap");
    std::fs::copy(system, &bundled).unwrap();
    let bundled = bundled.canonicalize().unwrap();
    let w = Ws::new();
    let run = |extra: &[&str]| {
        Command::new(&bin)
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

/// A `codex` symlink to the binary in a fresh directory, as a person who
/// replaces the Codex CLI's sandbox with codexbox would have it.
fn codex_link(w: &Ws) -> std::path::PathBuf {
    let link = w.root.join("codex");
    if link.symlink_metadata().is_err() {
        std::os::unix::fs::symlink(BIN, &link).expect("symlink codex");
    }
    link
}

fn codex_sandbox(w: &Ws, args: &[&str]) -> std::process::Output {
    Command::new(codex_link(w))
        .arg("sandbox")
        .args(args)
        .current_dir(&w.ws)
        .stdin(Stdio::null())
        .output()
        .expect("run codex sandbox")
}

#[test]
fn codex_sandbox_takes_the_codex_cli_profile_flags() {
    require_sandbox!();
    let w = Ws::new();
    let write_here = "echo made > made.txt && cat made.txt";
    for flags in [
        &["-P", ":workspace"][..],
        &["--permission-profile", ":workspace"],
        &["--permissions-profile", "workspace"],
        &["-P", ":workspace", "--include-managed-config"],
    ] {
        let mut args = flags.to_vec();
        args.extend(["--", "sh", "-c", write_here]);
        let out = codex_sandbox(&w, &args);
        assert_eq!(out.status.code(), Some(0), "{flags:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "made\n", "{flags:?}");
        std::fs::remove_file(w.ws.join("made.txt")).expect("remove made.txt");
    }
    // Read-only (the default, and by name) refuses the same write.
    for flags in [&[][..], &["-P", ":read-only"]] {
        let mut args = flags.to_vec();
        args.extend(["--", "sh", "-c", write_here]);
        let out = codex_sandbox(&w, &args);
        assert_ne!(out.status.code(), Some(0), "{flags:?} allowed a write");
        assert!(!w.ws.join("made.txt").exists());
    }
    // -C names the workspace; a profile file works like inline JSON.
    let other = w.root.join("other");
    std::fs::create_dir(&other).expect("mkdir other");
    let profile = w.root.join("profile.json");
    std::fs::write(&profile, r#"{"type":"disabled"}"#).expect("write profile");
    let cd = other.to_str().expect("utf-8 path");
    let out = codex_sandbox(
        &w,
        &["-C", cd, "-P", ":workspace", "--", "touch", "in-other"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(other.join("in-other").exists());
    let out = codex_sandbox(
        &w,
        &[
            "-P",
            profile.to_str().expect("utf-8"),
            "--",
            "touch",
            "/tmp/../tmp",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(w.listing(), Vec::<String>::new());
}

#[test]
fn codex_sandbox_refuses_removed_forms_and_unknown_options() {
    let w = Ws::new();
    for (args, needle) in [
        (&["linux", "--", "true"][..], "`sandbox linux` was removed"),
        (&["landlock", "true"], "`sandbox landlock` was removed"),
        (&["macos", "--", "true"], "`sandbox macos` was removed"),
        (&["--full-auto", "--", "true"], "--full-auto was removed"),
        (
            &["-P", ":workspace", "--full-auto", "true"],
            "--full-auto was removed",
        ),
        (&["-X", "true"], "unexpected argument '-X'"),
        (&["--bogus", "--", "true"], "unexpected argument '--bogus'"),
        (&["-P", "no-such-profile", "--", "true"], "no-such-profile"),
        (&["-P"], "a value is required"),
    ] {
        let out = codex_sandbox(&w, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // After `--`, a word that was a removed subcommand is just the command.
    let out = codex_sandbox(&w, &["-P", ":danger-full-access", "--", "linux"]);
    assert!(stderr(&out).contains("linux"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("was removed"), "{}", stderr(&out));
}

/// Every report a mode prints ends cleanly when its reader goes away
/// (`| head -1`): exit 0, no panic, nothing on stderr but the mode's own.
#[test]
fn a_closed_stdout_is_a_clean_end() {
    let w = Ws::new();
    let ws = w.ws.to_str().expect("utf-8 path");
    let cases: [&[&str]; 6] = [
        &["sandbox", "--explain", "-P", ":workspace", "--", "true"],
        &[
            "linux-sandbox",
            "--sandbox-policy-cwd",
            ws,
            "--permission-profile",
            "{\"type\":\"disabled\"}",
            "--explain",
            "--",
            "true",
        ],
        &["doctor"],
        &["doctor", "--json"],
        &["--help"],
        &["install-links", "--help"],
    ];
    for args in cases {
        let mut child = Command::new(BIN)
            .args(args)
            .current_dir(&w.ws)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn codexbox");
        // Read nothing: close our end first, so every write sees EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {:?} {err}",
            out.status
        );
    }
}

/// Signals meant for `codexbox sandbox` reach the sandbox (its helper tears
/// it down), and the sandbox never outlives the wrapper, even one that is
/// SIGKILLed.
#[test]
fn the_sandbox_does_not_outlive_codexbox_sandbox() {
    require_sandbox!();
    use crate::common::client::sleepers;
    for (signal, code) in [
        (libc::SIGINT, Some(130)),
        (libc::SIGTERM, Some(143)),
        (libc::SIGKILL, None),
    ] {
        let marker = format!("{}.{signal}", 7100 + std::process::id() % 1000);
        let script = format!("echo ready; exec sleep {marker}");
        let mut wrapper = Command::new(BIN)
            .args(["sandbox", "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn codexbox sandbox");
        let mut line = String::new();
        BufReader::new(wrapper.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(line, "ready\n");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while sleepers(&marker).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the sleeper never ran"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // SAFETY: kill takes a pid and a signal number, no pointers.
        unsafe { libc::kill(wrapper.id() as i32, signal) };
        let status = wrapper.wait().expect("wait");
        if code.is_some() {
            assert_eq!(status.code(), code, "signal {signal}");
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !sleepers(&marker).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "signal {signal}: the sandbox outlived codexbox sandbox"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// A command whose cwd lies outside every readable root runs at `/`, as
/// the reference's does, with either launcher; a readable cwd is kept.
#[test]
fn a_cwd_outside_every_readable_root_runs_the_command_at_the_root() {
    require_sandbox!();
    let w = Ws::new();
    let minimal_only = profile(&[special("minimal", "read")], "restricted");
    let readable_ws = profile(
        &[special("minimal", "read"), path_entry(&w.ws, "read")],
        "restricted",
    );
    let mut launchers = vec!["builtin"];
    if crate::common::host::host_has(
        "bubblewrap on PATH",
        crate::common::host::runs("bwrap", &["--version"]),
    ) {
        launchers.push("system");
    }
    for launcher in launchers {
        for (profile, expected) in [
            (&minimal_only, "/".to_owned()),
            (&readable_ws, w.ws.display().to_string()),
        ] {
            let out = Command::new(BIN)
                .arg("linux-sandbox")
                .arg("--sandbox-policy-cwd")
                .arg(&w.ws)
                .arg("--permission-profile")
                .arg(profile)
                .args(["--backend", "bwrap", "--", "/bin/sh", "-c", "pwd"])
                .current_dir(&w.ws)
                .env("CODEXBOX_BWRAP", launcher)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{launcher} {profile}: {}",
                stderr(&out)
            );
            assert_eq!(stdout(&out).trim_end(), expected, "{launcher} {profile}");
        }
    }
}
