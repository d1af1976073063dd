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
    after_help = "Profiles: read-only (default), workspace, danger-full-access, or a PermissionProfile JSON document."
)]
struct Args {
    /// read-only | workspace | danger-full-access | PermissionProfile JSON.
    #[arg(long, short = 'p', default_value = "read-only", value_name = "PROFILE")]
    profile: String,
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
    /// The command to run.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

/// Entry point of this mode.
pub fn main(argv: Vec<OsString>) -> i32 {
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
    let mut profile = PermissionProfile::parse(&args.profile).map_err(|e| (2, e.to_string()))?;
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
