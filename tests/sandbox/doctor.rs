//! `codexbox doctor` through the real binary: the JSON parses and matches
//! facts the test reads independently from this machine.

use std::process::{Command, Output};

use crate::common::confine::in_child;
use serde_json::Value;

fn doctor(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_codexbox"));
    cmd.arg("doctor").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run codexbox doctor");
    eprintln!(
        "doctor {args:?}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("doctor --json prints one JSON object")
}

#[test]
fn json_report_matches_this_machine() {
    let out = doctor(&["--json"], &[]);
    let report = json(&out);

    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    assert_eq!(report["kernel"]["release"], release.trim());

    // SAFETY: NULL attributes, size 0, LANDLOCK_CREATE_RULESET_VERSION.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    if abi > 0 {
        assert_eq!(report["landlock"]["abi"], abi);
    } else {
        assert!(report["landlock"]["abi"].is_null());
    }

    let userns = in_child(|| {
        // SAFETY: integer flag only.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0 {
            0
        } else {
            1
        }
    }) == 0;
    assert_eq!(report["user_namespaces"]["allowed"], userns);
    assert_eq!(
        report["backend"],
        if userns { "bwrap" } else { "landlock" },
        "auto backend"
    );

    match which::which("bwrap") {
        Ok(path) => {
            let path = path.canonicalize().expect("canonical bwrap");
            assert_eq!(
                report["system_bwrap"]["path"],
                path.to_str().expect("utf-8")
            );
            let help = Command::new(&path)
                .arg("--help")
                .output()
                .expect("bwrap --help");
            let help = String::from_utf8_lossy(&help.stdout).into_owned()
                + &String::from_utf8_lossy(&help.stderr);
            assert_eq!(report["system_bwrap"]["argv0"], help.contains("--argv0"));
            assert_eq!(report["system_bwrap"]["perms"], help.contains("--perms"));
            let version = Command::new(&path)
                .arg("--version")
                .output()
                .expect("version");
            assert_eq!(
                report["system_bwrap"]["version"],
                String::from_utf8_lossy(&version.stdout).trim()
            );
        }
        Err(_) => assert!(report["system_bwrap"].is_null()),
    }
    assert_eq!(report["ripgrep"].is_null(), which::which("rg").is_err());
    assert_eq!(report["wsl"], "none");
    assert_eq!(report["seccomp"]["available"], true);

    let works = report["sandbox_works"].as_bool().expect("bool");
    assert_eq!(out.status.code(), Some(if works { 0 } else { 1 }));
    if userns {
        assert!(works, "this machine can sandbox: {report:#}");
        assert_eq!(report["launcher"]["trial"]["usable"], true);
    }
}

#[test]
fn a_launcher_that_cannot_be_found_makes_doctor_exit_1() {
    // Forcing the bundled bwrap, which is not next to the test binary.
    let out = doctor(&["--json"], &[("CODEXBOX_BWRAP", "bundled")]);
    let report = json(&out);
    if report["backend"] != "bwrap"
        && !crate::common::host::host_has(
            "the bwrap backend",
            Err(format!("doctor chose {}", report["backend"])),
        )
    {
        return;
    }
    assert_eq!(report["bundled_bwrap"]["present"], false);
    assert_eq!(report["sandbox_works"], false);
    assert!(report["problem"]
        .as_str()
        .is_some_and(|p| p.contains("bundled")));
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn human_report_names_each_fact_and_usage_errors_exit_2() {
    let out = doctor(&[], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    for key in [
        "kernel",
        "WSL",
        "user namespaces",
        "Landlock",
        "seccomp",
        "system bwrap",
        "bundled bwrap",
        "built-in bwrap",
        "ripgrep",
        "launcher",
        "backend",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(key)),
            "missing {key}:\n{text}"
        );
    }
    let last = text.lines().last().unwrap_or_default();
    assert!(last.starts_with("sandboxing "), "{last}");
    assert_eq!(
        last == "sandboxing works",
        out.status.success(),
        "exit status follows the verdict"
    );

    let bad = doctor(&["--frobnicate"], &[]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--frobnicate"));
}

#[test]
fn a_seccomp_profile_blocking_user_namespaces_is_diagnosed() {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::os::unix::process::CommandExt;
    // What Docker's default profile does: unshare/clone with CLONE_NEWUSER
    // fail with EPERM.
    let arch = if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else {
        TargetArch::x86_64
    };
    let newuser = libc::CLONE_NEWUSER as u64;
    let rule = || {
        SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(newuser),
            newuser,
        )
        .expect("condition")])
        .expect("rule")
    };
    let rules = [
        (libc::SYS_unshare, vec![rule()]),
        (libc::SYS_clone, vec![rule()]),
        (libc::SYS_clone3, Vec::new()),
    ]
    .into_iter()
    .collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .expect("filter");
    let program: seccompiler::BpfProgram = filter.try_into().expect("compile");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_codexbox"));
    cmd.args(["doctor", "--json"]);
    // SAFETY: apply_filter makes two raw syscalls on a prebuilt program.
    unsafe {
        cmd.pre_exec(move || seccompiler::apply_filter(&program).map_err(std::io::Error::other));
    }
    let out = cmd.output().expect("run doctor");
    let report = json(&out);
    eprintln!("{report:#}");
    assert_eq!(report["user_namespaces"]["allowed"], false);
    assert_eq!(report["user_namespaces"]["blocked_by"], "seccomp");
    assert_eq!(report["seccomp"]["current_mode"], 2);
    let landlock = report["landlock"]["abi"].is_u64();
    assert_eq!(
        report["backend"],
        if landlock { "landlock" } else { "none" }
    );
    assert_eq!(out.status.code(), Some(if landlock { 0 } else { 1 }));
}

#[test]
fn managed_routing_is_reported_from_a_real_routed_sandbox() {
    let out = doctor(&["--json"], &[]);
    let report = json(&out);
    let works = report["sandbox_works"] == true && report["backend"] == "bwrap";
    assert_eq!(report["managed_routing"]["usable"], works, "{report}");
    let text = String::from_utf8_lossy(&doctor(&[], &[]).stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("managed routing"))
        .unwrap_or_else(|| panic!("no managed routing line in {text}"));
    assert_eq!(line.contains(" works ("), works, "{line}");
}
