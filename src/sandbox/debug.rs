//! `codexbox sandbox` (docs/sandbox.md): run one command the way the server
//! sandboxes it, for people trying a policy.
//!
//! Builds a permission profile from a name or JSON plus `--writable-root`
//! and `--network`, then starts this binary as `codex-linux-sandbox` with
//! the same flags the server uses (`runtime_paths`), inherits stdio, and
//! exits with the command's status (128+signal when it was killed).
//! `disabled` and `external` profiles run the command directly, as the
//! server does.
//!
//! With `--allow-domain`/`--deny-domain` (or `--proxy URL`) the command's
//! network goes through a proxy (`net::managed`) under managed routing, and
//! each refused destination is named on stderr at exit.
//!
//! [`parse`] and [`plan`] only read (the command line, the profile file,
//! the working directory); running, the proxy included, is separate.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{CommandFactory, Parser};

use crate::cli::ParseExit;
use crate::policy::{normalize, NetworkSandboxPolicy, PermissionProfile};
use crate::runtime_paths::ExecServerRuntimePaths;
use crate::sandbox::cli::Backend;

const PREFIX: &str = "codexbox sandbox";

/// Command line of `codexbox sandbox`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "codexbox sandbox",
    about = "Run a command the way the exec-server would sandbox it",
    after_help = "Profiles: read-only (default), workspace, danger-full-access (each also with a leading `:`, as in `-P :workspace`), a PermissionProfile JSON document, or a file holding one."
)]
pub struct Args {
    /// read-only | workspace | danger-full-access (or `:read-only`, …), a
    /// PermissionProfile JSON document, or the path of a file holding one.
    #[arg(
        short = 'P',
        long = "permission-profile",
        visible_alias = "profile",
        alias = "permissions-profile",
        short_alias = 'p',
        default_value = ":read-only",
        value_name = "PROFILE"
    )]
    profile: String,
    /// Accepted for the Codex CLI's sake; codexbox has no managed configuration.
    #[arg(long, hide = true)]
    include_managed_config: bool,
    /// Working directory (the workspace root); default: the current directory.
    #[arg(short = 'C', long = "cd", value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Also make this path writable (repeatable).
    #[arg(long, value_name = "PATH")]
    writable_root: Vec<PathBuf>,
    /// Allow network access.
    #[arg(long)]
    network: bool,
    /// Print the resolved policy and launcher argv instead of running.
    #[arg(long)]
    explain: bool,
    /// Enforcement backend.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Do not mount a fresh /proc.
    #[arg(long)]
    no_proc: bool,
    /// Destination policy: only these destinations are reachable, through a
    /// proxy started for this command.
    #[command(flatten)]
    policy: crate::net::cli::PolicyArgs,
    /// Use this already running proxy (http://127.0.0.1:PORT) instead of
    /// starting one.
    #[arg(long, value_name = "URL")]
    proxy: Option<String>,
    /// The command to run (after `--`, or from the first argument that is
    /// not an option).
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Subcommands of the older `codex sandbox` (the backend is now chosen by
/// the host).
const REMOVED_BACKEND_SUBCOMMANDS: [&str; 5] =
    ["linux", "landlock", "macos", "seatbelt", "windows"];

/// A migration message for a command line in a form the Codex CLI removed:
/// `sandbox linux …` (and the other backends) or `--full-auto`, given
/// before any `--`.
fn removed_form(argv: &[OsString]) -> Option<String> {
    let before_dashes = argv
        .iter()
        .skip(1)
        .take_while(|arg| *arg != "--")
        .filter_map(|arg| arg.to_str());
    let mut takes_value = false;
    for arg in before_dashes {
        if std::mem::take(&mut takes_value) {
            continue;
        }
        if arg == "--full-auto" {
            return Some(
                "--full-auto was removed; use `-P workspace` (the workspace writable, no network)"
                    .into(),
            );
        }
        if arg.starts_with('-') {
            takes_value = !arg.contains('=') && option_takes_value(arg);
            continue;
        }
        return REMOVED_BACKEND_SUBCOMMANDS.contains(&arg).then(|| {
            format!(
                "`sandbox {arg}` was removed; the host picks the backend: \
                 run `sandbox [-P PROFILE] -- COMMAND...`"
            )
        });
    }
    None
}

/// Whether `arg` names an option of [`Args`] that takes its value as the
/// next argument (read from the clap definition, so it cannot drift).
fn option_takes_value(arg: &str) -> bool {
    use clap::CommandFactory;
    let long = arg.strip_prefix("--");
    let short = arg
        .strip_prefix('-')
        .filter(|rest| !rest.starts_with('-'))
        .and_then(|rest| {
            let mut chars = rest.chars();
            chars.next().filter(|_| chars.next().is_none())
        });
    Args::command()
        .get_arguments()
        .filter(|option| option.get_action().takes_values() && !option.is_positional())
        .any(|option| {
            let longs = option
                .get_long()
                .into_iter()
                .chain(option.get_all_aliases().unwrap_or_default());
            let shorts = option
                .get_short()
                .into_iter()
                .chain(option.get_all_short_aliases().unwrap_or_default());
            long.is_some_and(|name| longs.clone().any(|l| l == name))
                || short.is_some_and(|c| shorts.clone().any(|s| s == c))
        })
}

/// A profile named on the command line: a name or JSON as
/// [`PermissionProfile::parse`] takes them, or else a file holding JSON.
/// (`codexbox exec -P` takes the same.)
pub fn read_profile(text: &str) -> Result<PermissionProfile, String> {
    match PermissionProfile::parse(text) {
        Ok(profile) => Ok(profile),
        Err(err) if !std::path::Path::new(text).is_file() => Err(err.to_string()),
        Err(_) => {
            let json = std::fs::read_to_string(text)
                .map_err(|e| format!("cannot read the profile file {text}: {e}"))?;
            serde_json::from_str(&json)
                .map_err(|e| format!("invalid permission profile in {text}: {e}"))
        }
    }
}

/// Why `codexbox sandbox` stops before running the command: its exit
/// status and the message after `codexbox sandbox: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: i32,
    pub message: String,
}

impl Refusal {
    fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: message.into(),
        }
    }
    fn failure(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: message.into(),
        }
    }
    /// A command that could not be started: 127 when it does not exist,
    /// 126 when it cannot be executed, as a shell says.
    fn not_started(command: &[OsString], err: &std::io::Error) -> Self {
        let program = command
            .first()
            .map_or_else(String::new, |c| c.to_string_lossy().into_owned());
        Self {
            code: crate::cli::exec_failure_status(err),
            message: format!("cannot run {program}: {err}"),
        }
    }
}

/// What to run, resolved from the command line: the profile with the
/// writable roots, network and project roots applied, and where.
#[derive(Debug, Clone)]
pub struct Plan {
    pub profile: PermissionProfile,
    pub cwd: PathBuf,
    pub command: Vec<OsString>,
    pub explain: bool,
    pub backend: Backend,
    pub no_proc: bool,
    /// The destination policy, enforced through a proxy started by `run`.
    pub policy: crate::net::cli::PolicyArgs,
    /// An already running proxy to use instead.
    pub proxy: Option<String>,
}

/// Parses the command line (`argv[0]` first): the arguments, or how the mode
/// ends (a removed form and a usage error exit 2, help and version 0).
/// Prints nothing.
pub fn parse(argv: &[OsString]) -> Result<Args, ParseExit> {
    if let Some(message) = removed_form(argv) {
        return Err(ParseExit::Usage(format!("{PREFIX}: {message}")));
    }
    crate::cli::parse::<Args>(argv, PREFIX)
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    Args::command()
}

/// A flag of the destination policy that would do nothing with the others
/// given, and why.
fn idle_network_flag(args: &Args) -> Option<String> {
    let policy = &args.policy;
    if args.proxy.is_some() {
        let own = [
            ("--allow", !policy.allow.is_empty()),
            ("--deny", !policy.deny.is_empty()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .chain(policy.refinements_given())
        .find(|flag| *flag != "--allow-local-binding")?;
        return Some(format!(
            "{own} has no effect with --proxy: the running proxy applies its own policy"
        ));
    }
    if policy.is_set() {
        return None;
    }
    let flag = policy.refinements_given().into_iter().next()?;
    Some(format!(
        "{flag} has no effect without --allow, --deny or --proxy (no proxy is started)"
    ))
}

/// Resolves the arguments against the directory `here`: reads the profile
/// (a name, JSON, or a file) and checks the working directory. Runs
/// nothing.
pub fn plan(args: Args, here: &Path) -> Result<Plan, Refusal> {
    if args.command.is_empty() && !args.explain {
        return Err(Refusal::usage(
            "no command given (usage: codexbox sandbox [OPTIONS] -- COMMAND...)",
        ));
    }
    if let Some(message) = idle_network_flag(&args) {
        return Err(Refusal::usage(message));
    }
    let cwd = normalize(&here.join(args.cwd.unwrap_or_else(|| here.to_path_buf())));
    if !cwd.is_dir() {
        return Err(Refusal::failure(format!(
            "-C {}: not a directory",
            cwd.display()
        )));
    }
    let mut profile = read_profile(&args.profile).map_err(Refusal::usage)?;
    let roots: Vec<PathBuf> = args
        .writable_root
        .iter()
        .map(|p| normalize(&here.join(p)))
        .collect();
    profile = profile.with_writable_roots(&roots);
    if args.network {
        profile = profile.with_network(NetworkSandboxPolicy::Enabled);
    }
    profile = profile.materialize_project_roots(std::slice::from_ref(&cwd));
    if args.network && (args.policy.is_set() || args.proxy.is_some()) {
        return Err(Refusal::usage(
            "--network allows every destination; it cannot be combined with --allow-domain, --deny-domain or --proxy",
        ));
    }
    Ok(Plan {
        profile,
        cwd,
        command: args.command,
        explain: args.explain,
        backend: args.backend,
        no_proc: args.no_proc,
        policy: args.policy,
        proxy: args.proxy,
    })
}

/// Entry point of this mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(exit) => return exit.report(),
    };
    let planned = std::env::current_dir()
        .map_err(|e| Refusal::failure(format!("cannot read the current directory: {e}")))
        .and_then(|here| plan(args, &here))
        .and_then(run);
    match planned {
        Ok(code) => code,
        Err(refusal) => {
            eprintln!("{PREFIX}: {refusal}");
            refusal.code
        }
    }
}

/// Runs the planned command and waits for it; returns its exit status.
fn run(plan: Plan) -> Result<i32, Refusal> {
    let managed = managed_network(&plan)?;
    let mut cmd = match plan.profile {
        PermissionProfile::Disabled | PermissionProfile::External { .. }
            if !plan.explain && managed.is_none() =>
        {
            let Some((program, rest)) = plan.command.split_first() else {
                return Err(Refusal::usage("no command given"));
            };
            let mut cmd = Command::new(program);
            cmd.args(rest).current_dir(&plan.cwd);
            cmd
        }
        _ => {
            let paths = ExecServerRuntimePaths::current()
                .map_err(|e| Refusal::failure(format!("cannot locate this executable: {e}")))?;
            let mut cmd = paths.linux_sandbox_command();
            cmd.args(super::cli::helper_args(
                &plan.cwd,
                &plan.cwd,
                &plan.profile.to_json(),
                false,
            ))
            .arg("--backend")
            .arg(match plan.backend {
                Backend::Auto => "auto",
                Backend::Bwrap => "bwrap",
                Backend::Landlock => "landlock",
            });
            if plan.no_proc {
                cmd.arg("--no-proc");
            }
            if plan.explain {
                cmd.arg("--explain");
            }
            if managed.is_some() {
                cmd.arg(super::cli::ALLOW_NETWORK_FOR_PROXY_FLAG);
            }
            cmd.arg("--").args(&plan.command).current_dir(&plan.cwd);
            cmd
        }
    };
    if !plan.profile.network().is_enabled() {
        cmd.env("CODEX_SANDBOX_NETWORK_DISABLED", "1");
    }
    if let Some(managed) = &managed {
        cmd.envs(managed.env());
        if plan.explain {
            crate::stdout::print(&format!("{}\n", managed.describe()));
        }
    }
    let status = wait_forwarding_signals(&mut cmd)
        .map_err(|err| Refusal::not_started(&plan.command, &err))?;
    if let Some(managed) = managed {
        for line in managed.finish() {
            eprintln!("{line}");
        }
    }
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    })
}

/// Runs `cmd` to its end as a foreground wrapper. The signals that would
/// end this process (SIGHUP, SIGINT, SIGQUIT, SIGTERM) go to the child
/// instead, as the linux-sandbox helper passes them on to bwrap, so the
/// sandbox is torn down by its own helper and the blocked summary still
/// prints; and should this process be killed outright, the child gets
/// SIGTERM.
fn wait_forwarding_signals(cmd: &mut Command) -> std::io::Result<std::process::ExitStatus> {
    use nix::sys::signal::{kill, SigmaskHow, Signal};
    use std::os::unix::process::CommandExt;
    let set = super::run::forwarded();
    let old = set.thread_swap_mask(SigmaskHow::SIG_BLOCK)?;
    let parent = nix::unistd::getpid().as_raw();
    // SAFETY: the closure makes only async-signal-safe calls (prctl,
    // getppid) and allocates nothing. std empties the child's signal mask.
    unsafe {
        cmd.pre_exec(move || {
            crate::sys::confine::set_parent_death_signal(libc::SIGTERM)?;
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let waited = (|| {
        let mut child = cmd.spawn()?;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            // A SIGCHLD that came since `try_wait` is pending: no wake-up
            // is lost.
            match set.wait() {
                Ok(Signal::SIGCHLD) => {}
                Ok(signal) => {
                    let _ = kill(pid, signal);
                }
                // Cannot wait for signals: wait for the child alone.
                Err(_) => return child.wait(),
            }
        }
    })();
    let _ = old.thread_set_mask();
    waited
}

/// The proxy of a run with a destination policy or `--proxy`, if any:
/// started (or reached) here, when the command is about to run.
fn managed_network(plan: &Plan) -> Result<Option<crate::net::managed::ManagedRun>, Refusal> {
    use crate::net::managed::ManagedRun;
    if !plan.policy.is_set() && plan.proxy.is_none() {
        return Ok(None);
    }
    let run = match &plan.proxy {
        Some(url) => ManagedRun::external(url, plan.policy.allow_local_binding),
        None => ManagedRun::start(&plan.policy),
    };
    run.map(Some).map_err(|e| Refusal::usage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_with_values_come_from_the_definition() {
        for option in [
            "-P",
            "-p",
            "--permission-profile",
            "--permissions-profile",
            "--profile",
            "-C",
            "--cd",
            "--writable-root",
            "--backend",
            "--allow",
            "--allow-domain",
            "--deny",
            "--deny-domain",
            "--mode",
            "--network-mode",
            "--resolve",
            "--audit-log",
            "--proxy",
        ] {
            assert!(option_takes_value(option), "{option}");
        }
        for flag in [
            "--network",
            "--explain",
            "--no-proc",
            "-h",
            "--help",
            "-",
            "--",
            "-PC",
        ] {
            assert!(!option_takes_value(flag), "{flag}");
        }
        // A removed form after an option's value is still found, not
        // taken for the value.
        let argv = |args: &[&str]| -> Vec<OsString> {
            std::iter::once("sandbox")
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect()
        };
        assert!(removed_form(&argv(&["-P", "linux", "--", "true"])).is_none());
        assert!(removed_form(&argv(&["-C", "/tmp", "linux"])).is_some());
    }
}
