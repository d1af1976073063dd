//! `codexbox sandbox` (SPEC §5.6): run one command the way the server
//! sandboxes it, for people trying a policy.
//!
//! Builds a permission profile from a name or JSON plus `--writable-root`
//! and `--network`, then starts this binary as `codex-linux-sandbox` with
//! the same flags the server uses (`runtime_paths`), inherits stdio, and
//! exits with the command's status (128+signal when it was killed).
//! `disabled` and `external` profiles run the command directly, as the
//! server does.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;

use clap::Parser;

use crate::runtime_paths::ExecServerRuntimePaths;
use crate::sandbox::cli::Backend;
use crate::sandbox::policy::{normalize, NetworkSandboxPolicy, PermissionProfile};

const PREFIX: &str = "codexbox sandbox";

/// Command line of `codexbox sandbox`.
#[derive(Debug, Parser)]
#[command(
    name = "codexbox sandbox",
    version,
    about = "Run a command the way the exec-server would sandbox it.",
    after_help = "Profiles: read-only (default), workspace, danger-full-access (each also with a leading `:`, as in `-P :workspace`), a PermissionProfile JSON document, or a file holding one."
)]
struct Args {
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
                "--full-auto was removed; use `-P :workspace` (the workspace writable, no network)"
                    .into(),
            );
        }
        if arg.starts_with('-') {
            takes_value = !arg.contains('=') && OPTIONS_WITH_VALUES.contains(&arg);
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

/// The options of [`Args`] that take a value as the next argument.
const OPTIONS_WITH_VALUES: [&str; 9] = [
    "-P",
    "-p",
    "--permission-profile",
    "--permissions-profile",
    "--profile",
    "-C",
    "--cd",
    "--writable-root",
    "--backend",
];

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

/// Entry point of this mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    if let Some(message) = removed_form(&argv) {
        eprintln!("{PREFIX}: {message}");
        return 2;
    }
    let args = match super::cli::parse_args::<Args>(&argv, PREFIX) {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(args) {
        Ok(code) => code,
        Err((code, message)) => {
            eprintln!("{PREFIX}: {message}");
            code
        }
    }
}

fn run(args: Args) -> Result<i32, (i32, String)> {
    if args.command.is_empty() && !args.explain {
        return Err((
            2,
            "no command given (usage: codexbox sandbox [OPTIONS] -- COMMAND...)".into(),
        ));
    }
    let here = std::env::current_dir()
        .map_err(|e| (1, format!("cannot read the current directory: {e}")))?;
    let cwd = normalize(&here.join(args.cwd.unwrap_or_else(|| here.clone())));
    if !cwd.is_dir() {
        return Err((1, format!("{} is not a directory", cwd.display())));
    }
    let mut profile = read_profile(&args.profile).map_err(|e| (2, e))?;
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

    let mut cmd = match profile {
        PermissionProfile::Disabled | PermissionProfile::External { .. } if !args.explain => {
            let Some((program, rest)) = args.command.split_first() else {
                return Err((2, "no command given".into()));
            };
            let mut cmd = Command::new(program);
            cmd.args(rest).current_dir(&cwd);
            cmd
        }
        _ => {
            let paths = ExecServerRuntimePaths::current()
                .map_err(|e| (1, format!("cannot locate this executable: {e}")))?;
            let mut cmd = paths.linux_sandbox_command();
            cmd.args(super::cli::helper_args(
                &cwd,
                &cwd,
                &profile.to_json(),
                false,
            ))
            .arg("--backend")
            .arg(match args.backend {
                Backend::Auto => "auto",
                Backend::Bwrap => "bwrap",
                Backend::Landlock => "landlock",
            });
            if args.no_proc {
                cmd.arg("--no-proc");
            }
            if args.explain {
                cmd.arg("--explain");
            }
            cmd.arg("--").args(&args.command).current_dir(&cwd);
            cmd
        }
    };
    if !profile_network_enabled(&profile) {
        cmd.env("CODEX_SANDBOX_NETWORK_DISABLED", "1");
    }
    let status = cmd.status().map_err(|e| {
        (
            1,
            format!(
                "cannot run {}: {e}",
                args.command
                    .first()
                    .map_or_else(String::new, |c| c.to_string_lossy().into_owned())
            ),
        )
    })?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    })
}

fn profile_network_enabled(p: &PermissionProfile) -> bool {
    p.network().is_enabled()
}
