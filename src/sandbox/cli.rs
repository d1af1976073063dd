//! The `codex-linux-sandbox` command line (docs/sandbox.md): its flags
//! (the reference helper's and the older policy flags), the fast reader of
//! the command lines the exec-server sends, the builders of those command
//! lines, and the profile the flags describe. What a parsed command line
//! runs is `sandbox::orchestrate`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser, ValueEnum};

use crate::policy::{
    FileSystemSandboxPolicy, NetworkSandboxPolicy, PermissionProfile, SandboxPolicy,
};

/// The flag giving the command its own `argv[0]`.
pub const COMMAND_ARG0_FLAG: &str = "--command-arg0";
/// The flag confining a command to its managed proxy.
pub const ALLOW_NETWORK_FOR_PROXY_FLAG: &str = "--allow-network-for-proxy";
/// The flag carrying the routes to the inner stage.
pub(crate) const PROXY_ROUTE_SPEC_FLAG: &str = "--proxy-route-spec";
/// The flag naming a place where earlier sandboxed commands could have
/// written (repeatable).
const PLANTABLE_ROOT_FLAG: &str = "--plantable-root";

/// Prefix of every message of this mode.
pub const PREFIX: &str = "codex-linux-sandbox";

/// Which enforcement backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// bubblewrap, or Landlock when user namespaces are unusable.
    Auto,
    Bwrap,
    Landlock,
}

/// Command line of the helper.
#[derive(Debug, Parser)]
#[command(
    name = "codex-linux-sandbox",
    about = "Run one command inside the Linux sandbox (bubblewrap + seccomp, or Landlock)",
    group(
        clap::ArgGroup::new("profile")
            .required(true)
            .multiple(true)
            .args(["permission_profile", "sandbox_policy", "file_system_sandbox_policy"])
    )
)]
pub struct Args {
    /// Directory that cwd-relative policy entries resolve against.
    #[arg(long, value_name = "DIR", required = true)]
    pub sandbox_policy_cwd: Option<PathBuf>,
    /// Working directory of the command (default: the policy cwd).
    #[arg(long, value_name = "DIR")]
    pub command_cwd: Option<PathBuf>,
    /// The `argv[0]` the command sees (default: the program as given); the
    /// program run is still the first word of COMMAND.
    #[arg(long, value_name = "NAME")]
    pub command_arg0: Option<OsString>,
    /// PermissionProfile JSON (or read-only, workspace, danger-full-access).
    #[arg(long, value_name = "JSON")]
    pub permission_profile: Option<String>,
    /// Legacy SandboxPolicy JSON.
    #[arg(long, value_name = "JSON", hide = true)]
    pub sandbox_policy: Option<String>,
    /// FileSystemSandboxPolicy JSON (with --network-sandbox-policy).
    #[arg(long, value_name = "JSON", hide = true)]
    pub file_system_sandbox_policy: Option<String>,
    /// restricted | enabled (with --file-system-sandbox-policy).
    #[arg(long, value_name = "POLICY", hide = true)]
    pub network_sandbox_policy: Option<String>,
    /// Use the Landlock backend.
    #[arg(long)]
    pub use_legacy_landlock: bool,
    /// Confine the command's network to the loopback proxies named by its
    /// proxy variables (bubblewrap backend only).
    #[arg(long)]
    pub allow_network_for_proxy: bool,
    /// Internal: a directory where earlier sandboxed commands could have
    /// written (repeatable); a grant through a symlink inside one grants
    /// nothing, as for the cwd, /tmp and $TMPDIR.
    #[arg(long = "plantable-root", value_name = "DIR", hide = true)]
    pub plantable_roots: Vec<PathBuf>,
    /// Internal: proxy routes for the inner stage.
    #[arg(long, value_name = "JSON", hide = true)]
    pub proxy_route_spec: Option<String>,
    /// Do not mount a fresh /proc (restrictive containers).
    #[arg(long)]
    pub no_proc: bool,
    /// Internal: the inner stage inside bubblewrap.
    #[arg(long, hide = true)]
    pub apply_seccomp_then_exec: bool,
    /// Internal: the fd holding the command's stderr.
    #[arg(long, value_name = "FD", hide = true)]
    pub restore_stderr_fd: Option<i32>,
    /// Internal: the fd the inner stage writes one byte to right before it
    /// execs the command.
    #[arg(long, value_name = "FD", hide = true)]
    pub started_fd: Option<i32>,
    /// Print the resolved policy and the launcher argv instead of running.
    #[arg(long)]
    pub explain: bool,
    /// Enforcement backend.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
    /// The command to run (after `--`, or from the first argument that is
    /// not an option).
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

pub(crate) fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: 2,
        message: message.into(),
    }
}

pub(crate) fn fail(message: impl std::fmt::Display) -> Failure {
    Failure {
        code: 1,
        message: message.to_string(),
    }
}

/// The leading flags of a `codex-linux-sandbox` command line, as every caller
/// builds it: where the policy is resolved, where the command runs, the
/// profile JSON, and the Landlock backend when asked for.
pub fn helper_args(
    policy_cwd: &Path,
    command_cwd: &Path,
    profile_json: &str,
    use_legacy_landlock: bool,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--sandbox-policy-cwd".into(),
        policy_cwd.into(),
        "--command-cwd".into(),
        command_cwd.into(),
        "--permission-profile".into(),
        profile_json.into(),
    ];
    if use_legacy_landlock {
        args.push("--use-legacy-landlock".into());
    }
    args
}

/// The `--plantable-root` flags naming `roots`.
pub fn plantable_args(roots: &[PathBuf]) -> Vec<OsString> {
    roots
        .iter()
        .flat_map(|root| [PLANTABLE_ROOT_FLAG.into(), root.into()])
        .collect()
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    Args::command()
}

/// The command lines the exec-server sends on every sandboxed start
/// ([`helper_args`], [`plantable_args`], then `--allow-network-for-proxy`,
/// `--command-arg0` and `--` before the command), read without building the clap parser:
/// `None` for anything else (a repeated or unknown flag, a value that
/// starts with `-`), which [`crate::cli::parse`] then reads.
pub fn parse_server_args(argv: &[OsString]) -> Option<Args> {
    let mut words = argv.iter().skip(1);
    let mut policy_cwd = None;
    let mut command_cwd = None;
    let mut command_arg0 = None;
    let mut profile = None;
    let mut landlock = false;
    let mut proxy = false;
    let mut plantable = Vec::new();
    fn value(word: Option<&OsString>) -> Option<&OsString> {
        word.filter(|w| !w.as_encoded_bytes().starts_with(b"-"))
    }
    let once = |slot: &mut Option<PathBuf>, word: Option<&OsString>| {
        let word = value(word)?;
        slot.replace(PathBuf::from(word)).is_none().then_some(())
    };
    loop {
        match words.next()?.to_str()? {
            "--sandbox-policy-cwd" => once(&mut policy_cwd, words.next())?,
            "--command-cwd" => once(&mut command_cwd, words.next())?,
            "--permission-profile" => {
                let json = value(words.next())?.to_str()?.to_owned();
                if profile.replace(json).is_some() {
                    return None;
                }
            }
            "--plantable-root" => plantable.push(PathBuf::from(value(words.next())?)),
            "--command-arg0" => {
                if command_arg0.replace(value(words.next())?.clone()).is_some() {
                    return None;
                }
            }
            "--use-legacy-landlock" if !landlock => landlock = true,
            "--allow-network-for-proxy" if !proxy => proxy = true,
            "--" => break,
            _ => return None,
        }
    }
    Some(Args {
        sandbox_policy_cwd: policy_cwd,
        command_cwd,
        command_arg0,
        permission_profile: profile,
        sandbox_policy: None,
        file_system_sandbox_policy: None,
        network_sandbox_policy: None,
        use_legacy_landlock: landlock,
        allow_network_for_proxy: proxy,
        plantable_roots: plantable,
        proxy_route_spec: None,
        no_proc: false,
        apply_seccomp_then_exec: false,
        restore_stderr_fd: None,
        started_fd: None,
        explain: false,
        backend: Backend::Auto,
        command: words.cloned().collect(),
    })
}

/// Resolves which profile the flags describe.
pub fn profile_from_args(args: &Args) -> Result<PermissionProfile, Failure> {
    let split = match (
        &args.file_system_sandbox_policy,
        &args.network_sandbox_policy,
    ) {
        (Some(fs), Some(net)) => {
            let fs: FileSystemSandboxPolicy = serde_json::from_str(fs)
                .map_err(|e| usage(format!("invalid file-system sandbox policy JSON: {e}")))?;
            let net: NetworkSandboxPolicy =
                serde_json::from_value(serde_json::Value::String(net.trim_matches('"').to_owned()))
                    .map_err(|_| {
                        usage(format!(
                    "invalid network sandbox policy `{net}` (expected restricted or enabled)"
                ))
                    })?;
            Some(PermissionProfile::from_runtime(&fs, net))
        }
        (None, None) => None,
        _ => {
            return Err(usage(
                "file-system and network sandbox policies must be provided together",
            ))
        }
    };
    let legacy = match &args.sandbox_policy {
        Some(text) => {
            let p: SandboxPolicy = serde_json::from_str(text)
                .map_err(|e| usage(format!("invalid sandbox policy JSON: {e}")))?;
            Some(PermissionProfile::from_legacy(&p))
        }
        None => None,
    };
    if let Some(text) = &args.permission_profile {
        return PermissionProfile::parse(text).map_err(|e| usage(e.to_string()));
    }
    match (legacy, split) {
        (Some(l), Some(s)) if l.to_runtime() != s.to_runtime() => Err(fail(format!(
            "legacy sandbox policy must match split sandbox policies: provided={}, derived={}",
            s.to_json(),
            l.to_json()
        ))),
        (_, Some(s)) => Ok(s),
        (Some(l), None) => Ok(l),
        (None, None) => Err(usage(
            "missing permission profile configuration (--permission-profile)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_command_lines_read_as_clap_reads_them() {
        let mut argv: Vec<OsString> = vec!["codex-linux-sandbox".into()];
        argv.extend(helper_args(
            Path::new("/w"),
            Path::new("/w/sub"),
            r#"{"type":"disabled"}"#,
            false,
        ));
        argv.extend(plantable_args(&[
            PathBuf::from("/tmp"),
            PathBuf::from("/w"),
        ]));
        argv.push(ALLOW_NETWORK_FOR_PROXY_FLAG.into());
        argv.extend([COMMAND_ARG0_FLAG.into(), "shell".into()]);
        argv.push("--".into());
        argv.extend(["sh".into(), "-c".into(), "echo --explain".into()]);
        let fast = parse_server_args(&argv).expect("a server command line");
        let clap: Args = crate::cli::parse(&argv, PREFIX).expect("clap reads it");
        assert_eq!(format!("{fast:?}"), format!("{clap:?}"));
        for odd in [
            vec!["x", "--explain", "--", "true"],
            vec![
                "x",
                "--command-cwd",
                "/a",
                "--command-cwd",
                "/b",
                "--",
                "true",
            ],
            vec!["x", "--command-cwd", "-a", "--", "true"],
            vec!["x", "--command-cwd", "/a"],
        ] {
            let odd: Vec<OsString> = odd.into_iter().map(OsString::from).collect();
            assert!(parse_server_args(&odd).is_none(), "{odd:?}");
        }
    }
}
