//! `codexbox doctor [--json]` (docs/sandbox.md): what this host supports for
//! sandboxing, why not when it doesn't, and what a sandboxed command would
//! use. Exit 0 when sandboxing works, 1 when it does not, 2 on usage errors.
//!
//! Host facts come from [`crate::sandbox::probe`]; launcher discovery,
//! capability probing and digest checks from [`crate::sandbox::launcher`]
//! (nothing is re-implemented here). The only thing the doctor adds is a
//! trial run of the chosen launcher with a minimal sandbox, so "works" means
//! a sandbox was really created.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::sandbox::glob;
use crate::sandbox::launcher::{self, LauncherChoice};
use crate::sandbox::probe::{self, Backend, HostProbe};
use crate::sys::program;

/// A trial sandbox that takes longer than this is reported as hung.
const TRIAL_DEADLINE: Duration = Duration::from_secs(10);
/// Stderr kept from a trial run.
const TRIAL_STDERR_BYTES: usize = 4096;

/// The whole report, as printed by `--json`.
#[derive(Debug, Serialize)]
pub struct DoctorReport {
    pub kernel: KernelReport,
    pub wsl: &'static str,
    pub user_namespaces: UsernsReport,
    pub landlock: LandlockReport,
    pub seccomp: SeccompReport,
    pub system_bwrap: Option<BwrapReport>,
    pub bundled_bwrap: BundledReport,
    pub builtin_bwrap: TrialReport,
    pub ripgrep: Option<ToolReport>,
    pub launcher: Option<LauncherReport>,
    pub backend: &'static str,
    /// Whether `--allow-network-for-proxy` (managed proxy routing) works.
    pub managed_routing: TrialReport,
    /// Whether its DNS stub could start.
    pub dns_stub: bool,
    pub sandbox_works: bool,
    /// Why sandboxing does not work (None when it does).
    pub problem: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct KernelReport {
    pub release: String,
    pub arch: &'static str,
}

#[derive(Debug, Serialize)]
pub struct UsernsReport {
    pub allowed: bool,
    /// Stable token: sysctl_unprivileged_userns_clone, apparmor, seccomp, …
    pub blocked_by: Option<&'static str>,
    pub explanation: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct LandlockReport {
    pub abi: Option<u32>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct SeccompReport {
    pub available: bool,
    /// Seccomp mode of this process (0 none, 1 strict, 2 filtered).
    pub current_mode: u8,
}

#[derive(Debug, Serialize)]
pub struct BwrapReport {
    pub path: PathBuf,
    pub version: Option<String>,
    pub argv0: bool,
    pub perms: bool,
    pub runs: bool,
}

#[derive(Debug, Serialize)]
pub struct BundledReport {
    pub path: PathBuf,
    pub present: bool,
    /// `verified`, `not_checked` (no digest compiled in), `mismatch`,
    /// `error`, or `absent`.
    pub digest: &'static str,
    pub detail: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TrialReport {
    pub usable: bool,
    pub detail: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ToolReport {
    pub path: PathBuf,
    pub version: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct LauncherReport {
    pub kind: &'static str,
    pub path: PathBuf,
    pub reason: String,
    pub argv0: bool,
    pub perms: bool,
    /// A minimal sandbox run through it succeeded.
    pub trial: TrialReport,
}

/// Command line of `codexbox doctor`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "codexbox doctor",
    about = "Report what this host supports for sandboxing, and why",
    long_about = "Reports what this host supports for sandboxing: kernel, user namespaces \
(and why not), Landlock ABI, seccomp, bubblewrap (system, bundled, built-in), ripgrep, WSL, \
and which backend a sandboxed command would use. It runs one tiny trial sandbox through the \
chosen launcher, so \"works\" means a sandbox was really created.",
    after_help = "Exit status: 0 when sandboxing works, 1 when it does not, 2 for usage errors."
)]
struct Args {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Entry point: `codexbox doctor [--json]`.
pub fn main(argv: Vec<OsString>) -> i32 {
    let name = crate::cli::mode_name(&argv, "codexbox doctor");
    let Args { json } = match crate::cli::parse(&argv, &name) {
        Ok(args) => args,
        Err(exit) => return exit.report(),
    };
    let report = collect();
    let text = if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => text + "\n",
            Err(err) => {
                eprintln!("{name}: cannot encode the report: {err}");
                return 1;
            }
        }
    } else {
        render(&report)
    };
    let printed = crate::stdout::print(&text);
    if printed != 0 {
        printed
    } else if report.sandbox_works {
        0
    } else {
        1
    }
}

/// Gathers every fact (runs trial sandboxes; takes a few milliseconds).
pub fn collect() -> DoctorReport {
    let host = probe::host();
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let cache = crate::sandbox::state::state_dir().ok();
    let exe = std::env::current_exe().unwrap_or_default();

    let system_bwrap = program::find_on_path(launcher::SYSTEM_BWRAP, &cwd, &[]).map(|path| {
        let caps = launcher::probe(&path, cache.as_deref());
        BwrapReport {
            version: version_of(&path, &[]),
            argv0: caps.is_some_and(|c| c.argv0),
            perms: caps.is_some_and(|c| c.perms),
            runs: caps.is_some(),
            path,
        }
    });
    let bundled_bwrap = bundled_report(&exe);
    let builtin_bwrap = if host.userns_usable() {
        let mut cmd = Command::new(&exe);
        std::os::unix::process::CommandExt::arg0(&mut cmd, "bwrap");
        trial(cmd)
    } else {
        TrialReport {
            usable: false,
            detail: Some("user namespaces are unavailable".to_owned()),
        }
    };
    // The ripgrep the sandbox's deny-glob scan would run from here.
    let ripgrep = match glob::Scanner::detect(&cwd, &[]) {
        glob::Scanner::Ripgrep(path) => Some(ToolReport {
            version: version_of(&path, &[]),
            path,
        }),
        glob::Scanner::BuiltIn => None,
    };
    let launcher = match launcher::select(&cwd, cache.as_deref()) {
        Ok(choice) => Some(launcher_report(&choice, host)),
        Err(err) => {
            return finish(
                host,
                system_bwrap,
                bundled_bwrap,
                builtin_bwrap,
                ripgrep,
                None,
                Some(format!("no usable bubblewrap launcher: {err}")),
            )
        }
    };
    finish(
        host,
        system_bwrap,
        bundled_bwrap,
        builtin_bwrap,
        ripgrep,
        launcher,
        None,
    )
}

fn finish(
    host: &HostProbe,
    system_bwrap: Option<BwrapReport>,
    bundled_bwrap: BundledReport,
    builtin_bwrap: TrialReport,
    ripgrep: Option<ToolReport>,
    launcher: Option<LauncherReport>,
    launcher_problem: Option<String>,
) -> DoctorReport {
    let backend = probe::auto_backend(host);
    let (managed_routing, dns_stub) = match (&launcher, backend) {
        (Some(l), Backend::Bwrap) if l.trial.usable => routing_trial(),
        _ => (
            TrialReport {
                usable: false,
                detail: Some("needs a working bubblewrap launcher".to_owned()),
            },
            false,
        ),
    };
    let problem = match backend {
        Backend::Bwrap => match &launcher {
            Some(l) if l.trial.usable => None,
            Some(l) => Some(format!(
                "the {} bubblewrap cannot create a sandbox: {}",
                l.kind,
                l.trial.detail.as_deref().unwrap_or("unknown error")
            )),
            None => {
                Some(launcher_problem.unwrap_or_else(|| "no usable bubblewrap launcher".to_owned()))
            }
        },
        Backend::Landlock => None,
        Backend::Unavailable => Some(format!(
            "user namespaces are unavailable ({}) and Landlock is unavailable ({})",
            host.userns
                .as_ref()
                .err()
                .map(|b| b.explain())
                .unwrap_or_default(),
            host.landlock_error.as_deref().unwrap_or("unknown")
        )),
    };
    DoctorReport {
        kernel: KernelReport {
            release: host.kernel_release.clone(),
            arch: std::env::consts::ARCH,
        },
        wsl: host.wsl.as_str(),
        user_namespaces: UsernsReport {
            allowed: host.userns_usable(),
            blocked_by: host.userns.as_ref().err().map(|b| b.as_str()),
            explanation: host.userns.as_ref().err().map(|b| b.explain()),
        },
        landlock: LandlockReport {
            abi: host.landlock_abi,
            error: host.landlock_error.clone(),
        },
        seccomp: SeccompReport {
            available: host.seccomp.filters_available,
            current_mode: host.seccomp.current_mode,
        },
        system_bwrap,
        bundled_bwrap,
        builtin_bwrap,
        ripgrep,
        launcher,
        backend: backend.as_str(),
        managed_routing,
        dns_stub,
        sandbox_works: problem.is_none(),
        problem,
    }
}

fn launcher_report(choice: &LauncherChoice, host: &HostProbe) -> LauncherReport {
    let trial = if host.userns_usable() {
        trial(choice.command())
    } else {
        TrialReport {
            usable: false,
            detail: Some("user namespaces are unavailable".to_owned()),
        }
    };
    LauncherReport {
        kind: choice.kind.as_str(),
        path: choice.path.clone(),
        reason: choice.reason.clone(),
        argv0: choice.caps.argv0,
        perms: choice.caps.perms,
        trial,
    }
}

fn bundled_report(exe: &Path) -> BundledReport {
    let path = launcher::bundled_path(exe);
    if !path.is_file() {
        return BundledReport {
            path,
            present: false,
            digest: "absent",
            detail: None,
        };
    }
    let (digest, detail) = match (launcher::expected_digest(), launcher::verify_bundled(&path)) {
        (Err(err), _) => ("error", Some(err.to_string())),
        (Ok(None), Ok(_)) => ("not_checked", Some("no digest compiled in".to_owned())),
        (Ok(Some(_)), Ok(_)) => ("verified", None),
        (Ok(_), Err(err @ launcher::LauncherError::DigestMismatch { .. })) => {
            ("mismatch", Some(err.to_string()))
        }
        (Ok(_), Err(err)) => ("error", Some(err.to_string())),
    };
    BundledReport {
        path,
        present: true,
        digest,
        detail,
    }
}

/// `PATH --version`, first line.
fn version_of(path: &Path, extra: &[&str]) -> Option<String> {
    let out = Command::new(path)
        .args(extra)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().next().map(|l| l.trim().to_owned())
}

/// Runs `launcher` with the reference's user-namespace probe argv (a new
/// user and network namespace, `/` read-only, `/bin/true`), bounded by
/// [`TRIAL_DEADLINE`].
fn trial(mut launcher: Command) -> TrialReport {
    launcher.args([
        "--unshare-user",
        "--unshare-net",
        "--ro-bind",
        "/",
        "/",
        "/bin/true",
    ]);
    match run_bounded(launcher) {
        TrialRun::Exited(status, _) if status.success() => TrialReport {
            usable: true,
            detail: None,
        },
        TrialRun::Exited(status, stderr) => TrialReport {
            usable: false,
            detail: Some(format!(
                "{status}{}",
                first_line(&stderr)
                    .map(|line| format!(": {line}"))
                    .unwrap_or_default()
            )),
        },
        other => other.failure(),
    }
}

/// Runs `true` under managed proxy routing towards a listener of this
/// process (bridges, network namespace, ProxyRouted seccomp), bounded by
/// [`TRIAL_DEADLINE`]; also tells whether the DNS stub started.
fn routing_trial() -> (TrialReport, bool) {
    let listener = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr,
        Err(err) => {
            return (
                TrialReport {
                    usable: false,
                    detail: Some(format!("cannot bind a loopback port: {err}")),
                },
                false,
            )
        }
    };
    let exe = match crate::runtime_paths::self_exe() {
        Ok(exe) => exe.to_path_buf(),
        Err(err) => {
            return (
                TrialReport {
                    usable: false,
                    detail: Some(format!("cannot locate this executable: {err}")),
                },
                false,
            )
        }
    };
    let mut cmd = Command::new(&exe);
    // argv[0] selects the mode whatever name this binary has.
    std::os::unix::process::CommandExt::arg0(&mut cmd, crate::mode::LINUX_SANDBOX_ARG0);
    cmd.args([
        "--sandbox-policy-cwd",
        "/",
        "--permission-profile",
        "read-only",
    ])
    .arg(crate::sandbox::cli::ALLOW_NETWORK_FOR_PROXY_FLAG)
    .args(["--", "true"])
    .env("HTTP_PROXY", format!("http://{listener}"));
    match run_bounded(cmd) {
        TrialRun::Exited(status, stderr) if status.success() => (
            TrialReport {
                usable: true,
                detail: None,
            },
            !stderr.contains(crate::sandbox::proxy_routing::NO_STUB_WARNING),
        ),
        TrialRun::Exited(_, stderr) => (
            TrialReport {
                usable: false,
                detail: first_line(&stderr).map(str::to_owned),
            },
            false,
        ),
        other => (other.failure(), false),
    }
}

/// How a bounded trial run ended.
enum TrialRun {
    /// It exited, having written this to stderr.
    Exited(std::process::ExitStatus, String),
    /// It was still running at the deadline (and was killed).
    NoAnswer,
    /// It could not be spawned.
    CannotStart(std::io::Error),
}

impl TrialRun {
    /// The report of a run that did not exit by itself.
    fn failure(self) -> TrialReport {
        let detail = match self {
            TrialRun::Exited(status, _) => status.to_string(),
            TrialRun::NoAnswer => format!("no answer within {}s", TRIAL_DEADLINE.as_secs()),
            TrialRun::CannotStart(err) => format!("cannot start: {err}"),
        };
        TrialReport {
            usable: false,
            detail: Some(detail),
        }
    }
}

/// Runs `cmd` (stdin and stdout on /dev/null) until it exits or
/// [`TRIAL_DEADLINE`] passes, then kills it.
fn run_bounded(mut cmd: Command) -> TrialRun {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(err) => return TrialRun::CannotStart(err),
    };
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() < TRIAL_DEADLINE => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let stderr = child.stderr.take().map(read_available).unwrap_or_default();
    match status {
        Some(status) => TrialRun::Exited(status, stderr),
        None => TrialRun::NoAnswer,
    }
}

/// The first non-blank line of `text`, trimmed.
fn first_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|line| !line.is_empty())
}

/// What is already in the pipe, without waiting for writers that outlive
/// the launcher (a grandchild may hold it open).
fn read_available(stderr: std::process::ChildStderr) -> String {
    use std::os::fd::AsRawFd;
    let fd = stderr.as_raw_fd();
    // SAFETY: fcntl on a pipe fd we own; integer arguments only.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    let mut buf = Vec::new();
    let _ = stderr
        .take(u64::try_from(TRIAL_STDERR_BYTES).unwrap_or(4096))
        .read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The human-readable report.
pub fn render(r: &DoctorReport) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<17} {v}\n"));
    line(
        "kernel",
        format!("{} ({})", r.kernel.release, r.kernel.arch),
    );
    line(
        "WSL",
        match r.wsl {
            "none" => "no".to_owned(),
            other => other.to_uppercase(),
        },
    );
    line(
        "user namespaces",
        if r.user_namespaces.allowed {
            "allowed".to_owned()
        } else {
            format!(
                "not allowed: {}",
                r.user_namespaces
                    .explanation
                    .as_deref()
                    .unwrap_or("unknown")
            )
        },
    );
    line(
        "Landlock",
        match (r.landlock.abi, &r.landlock.error) {
            (Some(abi), _) => format!("ABI {abi}"),
            (None, Some(err)) => format!("unavailable: {err}"),
            (None, None) => "unavailable".to_owned(),
        },
    );
    line(
        "seccomp",
        format!(
            "{} (this process: {})",
            if r.seccomp.available {
                "available"
            } else {
                "unavailable"
            },
            match r.seccomp.current_mode {
                0 => "unfiltered",
                1 => "strict mode",
                _ => "already filtered",
            }
        ),
    );
    line(
        "system bwrap",
        match &r.system_bwrap {
            Some(b) => format!(
                "{} ({}; --argv0: {}, --perms: {})",
                b.path.display(),
                b.version.as_deref().unwrap_or("version unknown"),
                yes_no(b.argv0),
                yes_no(b.perms)
            ),
            None => "not found on PATH".to_owned(),
        },
    );
    line(
        "bundled bwrap",
        if r.bundled_bwrap.present {
            format!(
                "{} (digest: {}{})",
                r.bundled_bwrap.path.display(),
                r.bundled_bwrap.digest.replace('_', " "),
                r.bundled_bwrap
                    .detail
                    .as_deref()
                    .map(|d| format!("; {d}"))
                    .unwrap_or_default()
            )
        } else {
            format!("not present ({})", r.bundled_bwrap.path.display())
        },
    );
    line(
        "built-in bwrap",
        if r.builtin_bwrap.usable {
            "usable".to_owned()
        } else {
            format!(
                "not usable: {}",
                r.builtin_bwrap.detail.as_deref().unwrap_or("unknown")
            )
        },
    );
    line(
        "ripgrep",
        match &r.ripgrep {
            Some(t) => format!(
                "{} ({})",
                t.path.display(),
                t.version.as_deref().unwrap_or("version unknown")
            ),
            None => "not found (deny globs use the built-in walker)".to_owned(),
        },
    );
    line(
        "launcher",
        match &r.launcher {
            Some(l) => format!(
                "{}: {} (trial sandbox: {})",
                l.kind,
                l.reason,
                if l.trial.usable {
                    "ok".to_owned()
                } else {
                    format!("failed: {}", l.trial.detail.as_deref().unwrap_or("unknown"))
                }
            ),
            None => "none".to_owned(),
        },
    );
    line(
        "backend",
        match r.backend {
            "bwrap" => "bwrap + seccomp (user, pid and network namespaces)".to_owned(),
            "landlock" => {
                "landlock + seccomp (no user namespaces: weaker, see the README)".to_owned()
            }
            _ => "none".to_owned(),
        },
    );
    line(
        "managed routing",
        match (r.managed_routing.usable, r.dns_stub) {
            (true, true) => "works (proxy bridges, DNS stub for allowed names)".to_owned(),
            (true, false) => {
                "works (proxy bridges; no DNS stub: clients must let the proxy resolve)".to_owned()
            }
            (false, _) => format!(
                "does not work: {}",
                r.managed_routing.detail.as_deref().unwrap_or("unknown")
            ),
        },
    );
    match &r.problem {
        None => out.push_str("sandboxing works\n"),
        Some(p) => out.push_str(&format!("sandboxing does not work: {p}\n")),
    }
    out
}
