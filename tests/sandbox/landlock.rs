//! The Landlock backend end to end: this test binary re-executes itself as
//! a child that applies `sandbox::landlock::apply` for a policy and then
//! execs `/bin/sh -c SCRIPT` (what the linux-sandbox CLI does right before
//! exec), and the parent checks what the shell could and could not do.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use codexbox::policy::PermissionProfile;
use codexbox::sandbox::landlock;

const CHILD_ENV: &str = "CODEXBOX_TEST_LANDLOCK_CHILD";
const PREFIX: &str = "codex-linux-sandbox";

/// The child side: `CHILD_ENV` holds `cwd \n profile-json \n script`.
#[test]
fn landlock_child_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.splitn(3, '\n');
    let (Some(cwd), Some(profile), Some(script)) = (parts.next(), parts.next(), parts.next())
    else {
        std::process::exit(90);
    };
    let profile = match PermissionProfile::parse(profile) {
        Ok(p) => p,
        Err(err) => {
            eprintln!("bad profile: {err}");
            std::process::exit(91);
        }
    };
    let (fs, network) = profile.to_runtime();
    let resolved = fs.resolve(Path::new(cwd), &[]);
    if let Err(err) = landlock::apply(&resolved, network, PREFIX) {
        eprintln!("{PREFIX}: {err}");
        std::process::exit(1);
    }
    let err = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .exec();
    eprintln!("exec sh: {err}");
    std::process::exit(127);
}

/// Whether this kernel has Landlock (the one skip rule of `crate::common::host`).
fn landlock_or_skip() -> bool {
    crate::common::host::landlock()
}

struct Workspace {
    _guard: tempfile::TempDir,
    base: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
    tmp: PathBuf,
}

/// `base/{ws,outside,tmp}` outside /tmp and $TMPDIR (see
/// `host::dir_outside_tmp`): `ws` has `.git/config`, `src/`, a file,
/// and a secret.
fn workspace() -> Workspace {
    let guard = crate::common::host::dir_outside_tmp("landlock");
    let base = guard.path().canonicalize().expect("canonical");
    let ws = base.join("ws");
    let outside = base.join("outside");
    let tmp = base.join("tmp");
    for dir in [&ws, &outside, &tmp, &ws.join(".git/hooks"), &ws.join("src")] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(ws.join(".git/config"), "[core]\n").expect("write");
    std::fs::write(ws.join("file.txt"), "original\n").expect("write");
    std::fs::write(ws.join("secret.txt"), "TOPSECRET\n").expect("write");
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").expect("write");
    std::fs::write(outside.join("keep.txt"), "keep\n").expect("write");
    Workspace {
        _guard: guard,
        base,
        ws,
        outside,
        tmp,
    }
}

/// The workspace profile without `/tmp`, plus `extra` entries (JSON).
fn profile(extra: &[String]) -> String {
    let mut entries = vec![
        r#"{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}"#.to_owned(),
        r#"{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"}"#
            .to_owned(),
        r#"{"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"}"#.to_owned(),
    ];
    for sub in [".git", ".agents", ".codex"] {
        entries.push(format!(
            r#"{{"path":{{"type":"special","value":{{"kind":"project_roots","subpath":"{sub}"}}}},"access":"read"}}"#
        ));
    }
    entries.extend(extra.iter().cloned());
    format!(
        r#"{{"type":"managed","file_system":{{"type":"restricted","entries":[{}]}},"network":"restricted"}}"#,
        entries.join(",")
    )
}

fn deny_path(path: &Path) -> String {
    format!(
        r#"{{"path":{{"type":"path","path":"{}"}},"access":"deny"}}"#,
        path.display()
    )
}

fn run(w: &Workspace, profile: &str, script: &str) -> Output {
    let exe = std::env::current_exe().expect("test exe");
    let out = Command::new(exe)
        .args([
            "landlock::landlock_child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            // The leading newline ends the harness's "test … " line.
            format!("{}\n{}\necho; {}", w.ws.display(), profile, script),
        )
        .env("TMPDIR", &w.tmp)
        .stdin(Stdio::null())
        .output()
        .expect("spawn child");
    eprintln!(
        "script: {script}\nstatus: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `script`, returning lines of its stdout that start with `@`.
fn markers(w: &Workspace, profile: &str, script: &str) -> Vec<String> {
    let out = run(w, profile, script);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix('@'))
        .map(str::to_owned)
        .collect()
}

fn attempt(label: &str, command: &str) -> String {
    format!("if {command} 2>/dev/null; then echo @{label}=ok; else echo @{label}=denied; fi; ")
}

#[test]
fn writes_follow_the_writable_roots() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    let script = [
        attempt(
            "outside",
            &format!("echo x > {}/new.txt", w.outside.display()),
        ),
        attempt(
            "outside_modify",
            &format!("echo x >> {}/keep.txt", w.outside.display()),
        ),
        attempt("inside_subdir", "echo x > src/new.rs"),
        attempt("inside_modify", "echo changed > file.txt"),
        // Documented limitation: a root with protected metadata gets write on
        // its entries, not on itself, so nothing new appears at its top level.
        attempt("top_level_create", "touch new-top-level"),
        attempt("tmpdir", &format!("echo x > {}/t.txt", w.tmp.display())),
        attempt("dev_null", "echo x > /dev/null"),
        attempt("etc", "touch /etc/codexbox-landlock-test"),
        attempt(
            "proc_sys",
            "cat /proc/sys/kernel/hostname > /proc/sys/kernel/hostname",
        ),
    ]
    .concat();
    let got = markers(&w, &profile(&[]), &script);
    let escaped = Path::new("/etc/codexbox-landlock-test");
    let existed = escaped.exists();
    let _ = std::fs::remove_file(escaped);
    assert!(!existed, "wrote into /etc");
    assert_eq!(
        got,
        [
            "outside=denied",
            "outside_modify=denied",
            "inside_subdir=ok",
            "inside_modify=ok",
            "top_level_create=denied",
            "tmpdir=ok",
            "dev_null=ok",
            "etc=denied",
            "proc_sys=denied",
        ]
    );
    assert!(!w.outside.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(w.outside.join("keep.txt")).expect("read"),
        "keep\n"
    );
    assert!(w.ws.join("src/new.rs").exists());
}

#[test]
fn git_and_codex_stay_read_only_under_a_writable_root() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    let script = [
        attempt("git_config", "echo '[x]' >> .git/config"),
        attempt("git_hook", "echo evil > .git/hooks/post-checkout"),
        attempt("git_rm", "rm .git/config"),
        attempt("codex_create", "mkdir .codex"),
        attempt("git_read", "cat .git/config > /dev/null"),
        attempt("git_replace", "mv .git .git-old"),
    ]
    .concat();
    let got = markers(&w, &profile(&[]), &script);
    assert_eq!(
        got,
        [
            "git_config=denied",
            "git_hook=denied",
            "git_rm=denied",
            "codex_create=denied",
            "git_read=ok",
            "git_replace=denied",
        ]
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/config")).expect("read"),
        "[core]\n"
    );
    assert!(!w.ws.join(".git/hooks/post-checkout").exists());
    assert!(!w.ws.join(".codex").exists());
}

#[test]
fn denied_file_is_unreadable_but_its_siblings_are_not() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    let secret = w.ws.join("secret.txt");
    let outside_secret = w.outside.join("keep.txt");
    let script = [
        attempt("secret", "cat secret.txt"),
        attempt("sibling", "cat file.txt > /dev/null"),
        attempt(
            "outside_denied",
            &format!("cat {}", outside_secret.display()),
        ),
        attempt(
            "etc_readable",
            "cat /etc/hostname > /dev/null || cat /etc/passwd > /dev/null",
        ),
        attempt("secret_write", "echo x > secret.txt"),
    ]
    .concat();
    let out = run(
        &w,
        &profile(&[deny_path(&secret), deny_path(&outside_secret)]),
        &script,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("TOPSECRET"), "{stdout}");
    assert!(!stdout.contains("keep"), "{stdout}");
    let got: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix('@')).collect();
    assert_eq!(
        got,
        [
            "secret=denied",
            "sibling=ok",
            "outside_denied=denied",
            "etc_readable=ok",
            "secret_write=denied",
        ]
    );
}

#[test]
fn warning_line_names_exactly_the_unenforceable_rules() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    // A workspace glob is expanded and enforced; one rooted at `/` is not.
    std::fs::write(w.ws.join("src/key.pem"), "PRIVATEKEY\n").expect("write");
    let glob = r#"{"path":{"type":"glob_pattern","pattern":"**/*.pem"},"access":"deny"}"#;
    let root_glob = r#"{"path":{"type":"glob_pattern","pattern":"/**/*.key"},"access":"deny"}"#;
    let out = run(
        &w,
        &profile(&[
            glob.to_owned(),
            root_glob.to_owned(),
            deny_path(&w.ws.join("secret.txt")),
        ]),
        &attempt("pem", "cat src/key.pem"),
    );
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("@pem=denied"), "{stdout}");
    assert!(!stdout.contains("PRIVATEKEY"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with(&format!("{PREFIX}: warning:")))
        .collect();
    let abi = codexbox::sandbox::probe::landlock_abi().expect("landlock abi");
    let mut expected = vec!["deny glob /**/*.key (would scan from /)".to_owned()];
    if abi < 3 {
        expected.push("truncation of read-only files (Landlock ABI < 3)".into());
    }
    if abi < 6 {
        expected.push("signals to processes outside the sandbox (Landlock ABI < 6)".into());
    }
    assert_eq!(
        warnings,
        [format!(
            "{PREFIX}: warning: the Landlock backend cannot enforce: {}",
            expected.join("; ")
        )]
    );
    // Without unenforceable rules there is no warning at all.
    let quiet = run(&w, &profile(&[]), "true");
    if abi >= 6 {
        assert!(
            !String::from_utf8_lossy(&quiet.stderr).contains("warning"),
            "unexpected warning"
        );
    }
}

#[test]
fn confined_command_has_no_caps_no_network_and_cannot_signal_the_host() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let tcp = format!("bash -c 'echo > /dev/tcp/127.0.0.1/{port}'");
    // Control: outside the sandbox the same connection works.
    let control = Command::new("sh").arg("-c").arg(&tcp).status().expect("sh");
    assert!(control.success(), "control connection failed");
    let script = format!(
        "grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status | sed 's/^/@/'; {}{}",
        attempt("kill_host", &format!("kill -0 {me}")),
        attempt("host_tcp", &tcp),
    ) + &attempt("host_environ", &format!("cat /proc/{me}/environ > /dev/null"))
        + &attempt("own_environ", "cat /proc/self/environ > /dev/null");
    let got = markers(&w, &profile(&[]), &script);
    let abi = codexbox::sandbox::probe::landlock_abi().expect("landlock abi");
    let kill = if abi >= 6 {
        "kill_host=denied"
    } else {
        "kill_host=ok"
    };
    assert_eq!(
        got,
        [
            "CapPrm:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "CapBnd:\t0000000000000000",
            "NoNewPrivs:\t1",
            "Seccomp:\t2",
            kill,
            "host_tcp=denied",
            "host_environ=denied",
            "own_environ=ok",
        ]
    );
}

#[test]
fn plan_protects_git_by_granting_its_siblings() {
    let w = workspace();
    let profile = PermissionProfile::parse(&profile(&[])).expect("profile");
    let (fs, _) = profile.to_runtime();
    let resolved = fs.resolve_with(&codexbox::policy::ResolveContext {
        cwd: w.ws.clone(),
        tmpdir: Some(w.tmp.clone()),
        project_roots: Vec::new(),
        plantable: Vec::new(),
    });
    let plan = landlock::plan(&resolved, 7).expect("plan");
    assert!(plan.restrict_fs);
    assert!(!plan.write.contains(&w.ws), "{plan:?}");
    assert!(plan.write.contains(&w.ws.join("src")), "{plan:?}");
    assert!(plan.write.contains(&w.ws.join("file.txt")), "{plan:?}");
    assert!(!plan.write.iter().any(|p| p.starts_with(w.ws.join(".git"))));
    assert!(plan.write.contains(&w.tmp));
    assert!(plan.read.contains(&PathBuf::from("/")), "{plan:?}");
    assert!(plan.unenforced.is_empty(), "{:?}", plan.unenforced);
    let _ = &w.base;
}

#[test]
fn local_ipc_and_ordinary_tools_keep_working() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    let mut script = String::new();
    if Path::new("/usr/bin/python3").exists() {
        script += &attempt(
            "asyncio",
            "/usr/bin/python3 -c 'import asyncio, subprocess\nasync def m():\n    p = await asyncio.create_subprocess_exec(\"true\")\n    await p.wait()\n    r, w = await asyncio.open_unix_connection(sock=__import__(\"socket\").socketpair()[0])\nasyncio.run(m())'",
        );
    } else {
        script += "echo @asyncio=ok; ";
    }
    if Path::new("/usr/bin/node").exists() {
        script += &attempt(
            "node_spawnsync",
            "/usr/bin/node -e 'const r=require(\"child_process\").spawnSync(\"true\"); if (r.error || r.status !== 0) process.exit(1)'",
        );
    } else {
        script += "echo @node_spawnsync=ok; ";
    }
    // A real repository for `git status` (the fixture's .git is a stub).
    std::fs::remove_dir_all(w.ws.join(".git")).expect("rm stub .git");
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(&w.ws)
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "file.txt"]);
    git(&["commit", "-q", "-m", "init"]);
    script += &attempt("git_status", "git status --porcelain | grep -q secret.txt");
    script += &attempt(
        "git_commit_blocked_but_status_fine",
        "! git commit -q -am x >/dev/null 2>&1",
    );
    script += &attempt(
        "pipeline",
        "seq 1 100 | sort -n -r | head -1 | grep -qx 100",
    );
    let got = markers(&w, &profile(&[]), &script);
    assert_eq!(
        got,
        [
            "asyncio=ok",
            "node_spawnsync=ok",
            "git_status=ok",
            "git_commit_blocked_but_status_fine=ok",
            "pipeline=ok"
        ]
    );
}

#[test]
fn a_carve_out_beyond_the_bounds_is_named_in_the_warning() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    let crowded = w.outside.join("crowded");
    std::fs::create_dir_all(&crowded).expect("mkdir");
    for i in 0..=landlock::MAX_DIR_ENTRIES {
        std::fs::write(crowded.join(format!("f{i}")), "x").expect("write");
    }
    let denied = crowded.join("f7");
    let out = run(
        &w,
        &profile(&[deny_path(&denied)]),
        &attempt("crowded", &format!("cat {} > /dev/null", denied.display())),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = format!(
        "{PREFIX}: warning: the Landlock backend cannot enforce: deny {} (too many entries beside it)",
        denied.display()
    );
    assert!(stderr.lines().any(|l| l.starts_with(&line)), "{stderr}");
    // What the warning says is true: the file stays readable.
    assert!(String::from_utf8_lossy(&out.stdout).contains("@crowded=ok"));
}

/// The same backend through the real binary's command line.
fn run_cli(w: &Workspace, flags: &[&str], profile: &str, script: &str) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_codexbox"))
        .arg("linux-sandbox")
        .args(flags)
        .arg("--sandbox-policy-cwd")
        .arg(&w.ws)
        .arg("--command-cwd")
        .arg(&w.ws)
        .arg("--permission-profile")
        .arg(profile)
        .args(["--", "/bin/sh", "-c", script])
        .env("TMPDIR", &w.tmp)
        .stdin(Stdio::null())
        .output()
        .expect("run codexbox linux-sandbox");
    eprintln!(
        "flags {flags:?} script: {script}\nstatus: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn cli_landlock_backend_enforces_the_same_battery() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    let script = [
        attempt(
            "outside",
            &format!("echo x > {}/new.txt", w.outside.display()),
        ),
        attempt("inside", "echo x > src/new.rs"),
        attempt("git_config", "echo '[x]' >> .git/config"),
        attempt("secret", "cat secret.txt"),
        attempt(
            "nnp",
            "grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status",
        ),
        attempt(
            "caps",
            "grep -q '^CapEff:[[:space:]]*0000000000000000$' /proc/self/status",
        ),
        attempt("nested_userns", "unshare -U true"),
    ]
    .concat();
    let profile = profile(&[deny_path(&w.ws.join("secret.txt"))]);
    for flags in [
        &["--backend", "landlock"][..],
        &["--use-legacy-landlock"][..],
    ] {
        let out = run_cli(&w, flags, &profile, &script);
        assert!(out.status.success(), "{flags:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("TOPSECRET"));
        let got: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix('@')).collect();
        assert_eq!(
            got,
            [
                "outside=denied",
                "inside=ok",
                "git_config=denied",
                "secret=denied",
                "nnp=ok",
                "caps=ok",
                "nested_userns=denied",
            ],
            "{flags:?}"
        );
        assert!(!w.outside.join("new.txt").exists());
    }
}

#[test]
fn cli_landlock_backend_passes_the_exit_status_and_prints_one_warning() {
    if !landlock_or_skip() {
        return;
    }
    let w = workspace();
    let root_glob = r#"{"path":{"type":"glob_pattern","pattern":"/**/*.key"},"access":"deny"}"#;
    let out = run_cli(
        &w,
        &["--backend", "landlock"],
        &profile(&[root_glob.to_owned()]),
        "exit 7",
    );
    assert_eq!(out.status.code(), Some(7));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].starts_with(&format!(
            "{PREFIX}: warning: the Landlock backend cannot enforce: deny glob /**/*.key (would scan from /)"
        )),
        "{stderr}"
    );
}

#[test]
fn cli_landlock_backend_fails_closed_without_landlock() {
    use seccompiler::{SeccompAction, SeccompFilter, TargetArch};
    let w = workspace();
    // Pretend the kernel has no Landlock: its syscalls answer ENOSYS.
    let arch = if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else {
        TargetArch::x86_64
    };
    let rules = [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
    ]
    .into_iter()
    .map(|nr| (nr, Vec::new()))
    .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .expect("filter");
    let program: seccompiler::BpfProgram = filter.try_into().expect("compile");
    let marker = w.outside.join("ran-unsandboxed");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_codexbox"));
    cmd.arg("linux-sandbox")
        .args(["--backend", "landlock", "--sandbox-policy-cwd"])
        .arg(&w.ws)
        .arg("--permission-profile")
        .arg(profile(&[]))
        .arg("--")
        .arg("/bin/touch")
        .arg(&marker)
        .env("TMPDIR", &w.tmp);
    // SAFETY: apply_filter makes two raw syscalls on a prebuilt program.
    unsafe {
        cmd.pre_exec(move || seccompiler::apply_filter(&program).map_err(std::io::Error::other));
    }
    let out = cmd.output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("status {:?}, stderr:\n{stderr}", out.status);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!marker.exists(), "the command ran without Landlock");
    assert_eq!(stderr.lines().count(), 1, "one clear line: {stderr}");
    assert!(stderr.contains("Landlock"), "{stderr}");
}
