//! The `codex-linux-sandbox` command line (docs/sandbox.md) and what it runs.
//!
//! Parses the reference helper's flags (and the older policy flags), picks
//! the backend, and drives one run: the full-disk-write shortcut (confine +
//! seccomp, then exec), the bubblewrap backend (argv from
//! `sandbox::bwrap_args`, launcher from `sandbox::launcher`, run and cleanup
//! in `sandbox::run` and `sandbox::state`), the Landlock backend
//! (`sandbox::landlock`), or the inner stage (`sandbox::inner`).
//!
//! Never panics: every failure is one line `codex-linux-sandbox: …` and exit
//! 1, usage errors exit 2, a command that cannot be executed 127 (not
//! found) or 126, the command's status passes through.
//!
//! Managed proxy routing (`--allow-network-for-proxy`): the command gets a
//! network namespace whose only way out is the bridges to the loopback
//! proxies of its `*_PROXY` variables (`sandbox::proxy_routing`), under the
//! `ProxyRouted` seccomp mode. It needs the bubblewrap backend; the Landlock
//! backend refuses it (it cannot route), never running with more network.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser, ValueEnum};

use crate::policy::{
    FileSystemAccessMode, FileSystemSandboxKind, FileSystemSandboxPolicy, NetworkSandboxPolicy,
    PermissionProfile, ResolvedPolicy, SandboxPolicy,
};
use crate::sandbox::bwrap_args::{self, BwrapInputs, InnerCommand};
use crate::sandbox::launcher;
use crate::sandbox::proxy_routing::{self, HostRouting, RouteSpec};
use crate::sandbox::route_bridges;
use crate::sandbox::seccomp::SeccompMode;
use crate::sandbox::{glob, inner, read_only_links, run, state};

/// The flag giving the command its own `argv[0]`.
pub const COMMAND_ARG0_FLAG: &str = "--command-arg0";
/// The flag confining a command to its managed proxy.
pub const ALLOW_NETWORK_FOR_PROXY_FLAG: &str = "--allow-network-for-proxy";
/// The flag carrying the routes to the inner stage.
const PROXY_ROUTE_SPEC_FLAG: &str = "--proxy-route-spec";
/// The flag naming a place where earlier sandboxed commands could have
/// written (repeatable).
const PLANTABLE_ROOT_FLAG: &str = "--plantable-root";
/// Set in the caller's environment by an orchestrating proxy; never passed on.
const ATTRIBUTION_ENV: &str = "CODEX_NETWORK_PROXY_ATTRIBUTION";

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

fn usage(message: impl Into<String>) -> Failure {
    Failure {
        code: 2,
        message: message.into(),
    }
}

fn fail(message: impl std::fmt::Display) -> Failure {
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

/// Entry point of this mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args = match crate::cli::parse::<Args>(&argv, PREFIX) {
        Ok(a) => a,
        Err(exit) => return exit.report(),
    };
    match run_args(args) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("{PREFIX}: {}", f.message);
            f.code
        }
    }
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

fn absolute(p: &Path) -> Result<PathBuf, Failure> {
    if p.is_absolute() {
        return Ok(crate::policy::normalize(p));
    }
    let here = std::env::current_dir()
        .map_err(|e| fail(format!("cannot read the current directory: {e}")))?;
    Ok(crate::policy::normalize(&here.join(p)))
}

/// Everything a run needs, resolved once.
#[derive(Debug)]
pub struct Prepared {
    pub profile: PermissionProfile,
    pub network: NetworkSandboxPolicy,
    pub policy_cwd: PathBuf,
    pub command_cwd: PathBuf,
    pub fs: FileSystemSandboxPolicy,
    pub resolved: ResolvedPolicy,
}

/// The policy one run enforces.
fn resolve_for_run(
    fs: &FileSystemSandboxPolicy,
    policy_cwd: &Path,
    plantable: &[PathBuf],
) -> ResolvedPolicy {
    let mut resolved = fs.resolve(policy_cwd, plantable);
    // The helper and its bundled launcher run outside the sandbox next
    // time: never writable from inside it.
    if let Ok(exe) = crate::runtime_paths::self_exe() {
        resolved.keep_read_only(&[launcher::bundled_path(exe), exe.to_path_buf()]);
    }
    resolved
}

/// One warning line per grant the run drops for a planted symlink.
pub(crate) fn dropped_grant_warnings(resolved: &ResolvedPolicy) -> Vec<String> {
    resolved
        .dropped_grants()
        .iter()
        .map(|grant| format!("{PREFIX}: warning: {grant}"))
        .collect()
}

/// The warnings a run of the helper with these flags prints about grants
/// dropped for planted symlinks (the exec-server repeats them in the
/// errors of a fs helper, whose stderr nobody reads). Empty when the
/// profile does not parse: the run itself then fails and says why.
pub fn planted_link_warnings(
    policy_cwd: &Path,
    profile_json: &str,
    plantable: &[PathBuf],
) -> Vec<String> {
    let Ok(profile) = PermissionProfile::parse(profile_json) else {
        return Vec::new();
    };
    let (fs, _) = profile.to_runtime();
    if fs.has_full_disk_write_access() {
        return Vec::new();
    }
    dropped_grant_warnings(&resolve_for_run(&fs, policy_cwd, plantable))
}

pub(crate) fn prepare(args: &Args) -> Result<Prepared, Failure> {
    let Some(cwd) = &args.sandbox_policy_cwd else {
        return Err(usage(
            "the following required argument was not provided: --sandbox-policy-cwd <DIR>",
        ));
    };
    let policy_cwd = absolute(cwd)?;
    let command_cwd = match &args.command_cwd {
        Some(c) => absolute(c)?,
        None => policy_cwd.clone(),
    };
    let mut profile = profile_from_args(args)?;
    if args.allow_network_for_proxy {
        // No proxy bridges in this build: keep the network closed.
        profile = match profile {
            PermissionProfile::Disabled => PermissionProfile::Managed {
                file_system: crate::policy::ManagedFileSystemPermissions::Unrestricted,
                network: NetworkSandboxPolicy::Restricted,
            },
            p => p.with_network(NetworkSandboxPolicy::Restricted),
        };
    }
    let (fs, network) = profile.to_runtime();
    let resolved = resolve_for_run(&fs, &policy_cwd, &args.plantable_roots);
    Ok(Prepared {
        profile,
        network,
        policy_cwd,
        command_cwd,
        fs,
        resolved,
    })
}

pub(crate) fn seccomp_mode(network: NetworkSandboxPolicy) -> SeccompMode {
    if network.is_enabled() {
        SeccompMode::NetworkEnabled
    } else {
        SeccompMode::Restricted
    }
}

pub(crate) fn run_args(args: Args) -> Result<i32, Failure> {
    if args.command.is_empty() && !args.explain {
        return Err(usage("no command specified to execute"));
    }
    if args.apply_seccomp_then_exec {
        if args.use_legacy_landlock || args.backend == Backend::Landlock {
            return Err(usage(
                "--apply-seccomp-then-exec is incompatible with --use-legacy-landlock",
            ));
        }
        return inner_stage(&args);
    }
    if args.proxy_route_spec.is_some() {
        return Err(usage(
            "--proxy-route-spec is internal to the sandbox and refused here",
        ));
    }
    if args.allow_network_for_proxy {
        std::env::remove_var(ATTRIBUTION_ENV);
    }
    let prepared = prepare(&args)?;
    let backend = if args.use_legacy_landlock {
        Backend::Landlock
    } else {
        args.backend
    };

    if args.allow_network_for_proxy && backend == Backend::Landlock {
        return Err(fail(LANDLOCK_CANNOT_ROUTE));
    }
    // No filesystem sandbox needed: confine, seccomp for the network, exec.
    // Managed routing needs the network namespace, whatever the filesystem.
    let needs_fs_sandbox = !prepared.resolved.full_write || args.allow_network_for_proxy;
    if !needs_fs_sandbox {
        if args.explain {
            let seccomp = if prepared.profile == PermissionProfile::Disabled {
                "none (sandbox disabled)"
            } else {
                seccomp_mode(prepared.network).as_str()
            };
            return Ok(crate::stdout::print(&format!(
                "backend: none (full-disk write: no filesystem sandbox)\n\
                 profile: {}\nnetwork: {}\nseccomp: {seccomp}\n",
                prepared.profile.to_json(),
                net_name(prepared.network),
            )));
        }
        std::env::set_current_dir(&prepared.command_cwd).map_err(|e| {
            fail(format!(
                "cannot change directory to {}: {e}",
                prepared.command_cwd.display()
            ))
        })?;
        if prepared.profile != PermissionProfile::Disabled {
            // No capabilities for a root caller, and the
            // always-on seccomp denials even with the network enabled.
            inner::confine(seccomp_mode(prepared.network)).map_err(fail)?;
        }
        return Err(exec_failure(&args.command, args.command_arg0.as_deref()));
    }

    // WSL1 cannot create the namespaces bubblewrap needs.
    let backend = if backend != Backend::Landlock && is_wsl1() {
        if backend == Backend::Bwrap {
            return Err(fail(
                "bubblewrap is not supported on WSL1, which cannot create user namespaces; use WSL2 or --backend landlock",
            ));
        }
        Backend::Landlock
    } else {
        backend
    };
    // Protected metadata behind a symlink the command could swap cannot be
    // enforced by either backend: refuse rather than run.
    if let Err(err) = read_only_links::check(&prepared.resolved) {
        return Err(fail(match backend {
            Backend::Landlock => format!("error building the Landlock sandbox: {err}"),
            Backend::Bwrap | Backend::Auto => format!("error building bubblewrap command: {err}"),
        }));
    }
    for line in dropped_grant_warnings(&prepared.resolved) {
        eprintln!("{line}");
    }

    match backend {
        Backend::Landlock => landlock_backend(&args, &prepared),
        Backend::Bwrap | Backend::Auto => bwrap_backend(&args, &prepared, backend == Backend::Auto),
    }
}

/// Why managed routing and the Landlock backend do not mix.
const LANDLOCK_CANNOT_ROUTE: &str = "managed proxy routing needs the bubblewrap backend (a network namespace); the Landlock backend cannot confine the command to the proxy";

pub(crate) fn is_wsl1() -> bool {
    crate::sandbox::probe::host_wsl() == crate::sandbox::probe::Wsl::Wsl1
}

fn net_name(n: NetworkSandboxPolicy) -> &'static str {
    if n.is_enabled() {
        "enabled"
    } else {
        "restricted"
    }
}

fn inner_stage(args: &Args) -> Result<i32, Failure> {
    inner::check_inside_sandbox().map_err(fail)?;
    if let Some(fd) = args.restore_stderr_fd {
        inner::restore_stderr(fd).map_err(fail)?;
    }
    let profile = profile_from_args(args)?;
    let mode = if args.allow_network_for_proxy {
        let text = args
            .proxy_route_spec
            .as_deref()
            .ok_or_else(|| fail(proxy_routing::RoutingError::MissingSpec))?;
        let spec = RouteSpec::parse(text).map_err(fail)?;
        proxy_routing::activate_inside(&spec)
            .map_err(|e| fail(format!("error activating Linux proxy routing bridge: {e}")))?;
        SeccompMode::ProxyRouted
    } else {
        seccomp_mode(profile.network())
    };
    if let Some(cwd) = &args.command_cwd {
        // bwrap already did --chdir; a symlinked alias may not exist inside.
        let _ = std::env::set_current_dir(cwd);
    }
    inner::confine(mode).map_err(fail)?;
    if let Some(fd) = args.started_fd {
        inner::signal_started(fd);
    }
    Err(exec_failure(&args.command, args.command_arg0.as_deref()))
}

/// The policy Landlock enforces: the request's, with the private state
/// directory denied as the bubblewrap backend hides it (it holds the
/// tokens of this user's local listeners, see `listener_token`).
fn landlock_policy(prepared: &Prepared) -> ResolvedPolicy {
    let mut resolved = prepared.resolved.clone();
    if let Ok(state_dir) = state::state_dir() {
        if resolved.kind == FileSystemSandboxKind::Restricted && resolved.can_read(&state_dir) {
            resolved
                .entries
                .push((state_dir, FileSystemAccessMode::Deny));
            resolved.entries.sort();
        }
    }
    resolved
}

fn landlock_backend(args: &Args, prepared: &Prepared) -> Result<i32, Failure> {
    let resolved = landlock_policy(prepared);
    if args.explain {
        let abi = crate::sandbox::probe::host().landlock_abi.unwrap_or(0);
        let plan = crate::sandbox::landlock::plan(&resolved, abi).map_err(fail)?;
        let mut text = format!(
            "backend: landlock (ABI {abi})\nprofile: {}\nnetwork: {}\nread: {}\nwrite: {}\n",
            prepared.profile.to_json(),
            net_name(prepared.network),
            join_paths(&plan.read),
            join_paths(&plan.write),
        );
        if !plan.unenforced.is_empty() {
            text.push_str(&format!("not enforced: {}\n", plan.unenforced.join("; ")));
        }
        return Ok(crate::stdout::print(&text));
    }
    std::env::set_current_dir(&prepared.command_cwd).map_err(|e| {
        fail(format!(
            "cannot change directory to {}: {e}",
            prepared.command_cwd.display()
        ))
    })?;
    // Nothing of the caller's but stdio reaches the command (the bwrap
    // path does the same before starting the launcher).
    run::cloexec_inherited_fds();
    crate::sandbox::landlock::apply(&resolved, prepared.network, PREFIX).map_err(fail)?;
    Err(exec_failure(&args.command, args.command_arg0.as_deref()))
}

/// Execs the command; returns only when that failed, with the status a
/// shell gives such a command (127 not found, 126 cannot be executed).
fn exec_failure(command: &[OsString], arg0: Option<&std::ffi::OsStr>) -> Failure {
    let err = inner::exec(command, arg0);
    let code = match &err {
        inner::InnerError::Exec { source, .. } => {
            crate::cli::exec_failure_status(&std::io::Error::from(*source))
        }
        _ => crate::cli::EXIT_FAILURE,
    };
    Failure {
        code,
        message: err.to_string(),
    }
}

fn join_paths(p: &[PathBuf]) -> String {
    p.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Shell-quotes one word for display.
pub fn quote(word: &std::ffi::OsStr) -> String {
    let s = word.to_string_lossy();
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn bwrap_backend(args: &Args, prepared: &Prepared, auto: bool) -> Result<i32, Failure> {
    run::cloexec_inherited_fds();
    let state_dir = state::state_dir().map_err(fail)?;
    state::tidy(&state_dir);
    let untrusted = prepared.resolved.untrusted_dirs();
    let choice = launcher::select_excluding(&prepared.policy_cwd, &untrusted, Some(&state_dir))
        .map_err(fail)?;
    let exe = crate::runtime_paths::self_exe()
        .map_err(|e| fail(format!("cannot locate this executable: {e}")))?;

    // Deny globs, expanded now (a snapshot), fail closed.
    let expansion = expand_globs(prepared, &untrusted)?;
    if let Some(line) = skipped_globs_warning(&expansion) {
        eprintln!("{line}");
    }
    let glob_matches = expansion.paths;

    let inner_profile = prepared.profile.with_network(prepared.network);
    // Managed routing: the bridges live in this process until it returns.
    let routing = if args.allow_network_for_proxy {
        let env = proxy_routing::process_env();
        let routes = proxy_routing::plan_routes(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| fail(format!("failed to prepare host proxy routing bridge: {e}")))?;
        let routing = HostRouting::prepare(&state_dir, &routes)
            .map_err(|e| fail(format!("failed to prepare host proxy routing bridge: {e}")))?;
        if let (Some(reason), false) = (&routing.no_stub, args.explain) {
            proxy_routing::warn_no_stub(reason);
        }
        Some(routing)
    } else {
        None
    };
    let mut mount_proc = !args.no_proc;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut fds = run::RunFds::open(0).map_err(fail)?;
        // A fresh pair per attempt: the helper's end waits for this
        // launch's listeners only.
        let mut host_handoff = None;
        if routing.is_some() {
            let (host, sandbox) = route_bridges::handoff_pair()
                .map_err(|e| fail(format!("failed to prepare host proxy routing bridge: {e}")))?;
            host_handoff = Some(host);
            fds.routing_handoff = Some(sandbox);
        }
        let mut flags = helper_args(
            &prepared.policy_cwd,
            &prepared.command_cwd,
            &inner_profile.to_json(),
            false,
        );
        if let Some(arg0) = &args.command_arg0 {
            flags.push(COMMAND_ARG0_FLAG.into());
            flags.push(arg0.clone());
        }
        flags.push("--apply-seccomp-then-exec".into());
        if let (Some(routing), Some(handoff)) = (&routing, &fds.routing_handoff) {
            flags.push(ALLOW_NETWORK_FOR_PROXY_FLAG.into());
            flags.push(PROXY_ROUTE_SPEC_FLAG.into());
            let spec = routing.spec(std::os::fd::AsRawFd::as_raw_fd(handoff));
            flags.push(spec.to_json().into());
        }
        if !args.explain {
            flags.push("--restore-stderr-fd".into());
            flags.push(
                std::os::fd::AsRawFd::as_raw_fd(&fds.stderr)
                    .to_string()
                    .into(),
            );
            flags.push("--started-fd".into());
            flags.push(
                std::os::fd::AsRawFd::as_raw_fd(&fds.started_write)
                    .to_string()
                    .into(),
            );
        }
        let inputs = BwrapInputs {
            policy: &prepared.resolved,
            command_cwd: prepared.command_cwd.clone(),
            network_enabled: prepared.network.is_enabled(),
            mount_proc,
            caps: choice.caps,
            glob_matches: glob_matches.clone(),
            extra_deny: extra_deny(&prepared.resolved, &state_dir),
            extra_read: vec![exe.to_path_buf()],
            managed_proxy: routing.as_ref().map(|r| r.mounts.clone()),
            inner: InnerCommand {
                exe: exe.to_path_buf(),
                flags,
                command: args.command.clone(),
            },
        };
        let built = bwrap_args::build(&inputs)
            .map_err(|e| fail(format!("error building bubblewrap command: {e}")))?;
        if args.explain {
            return Ok(crate::stdout::print(&explain(
                prepared,
                &choice,
                &built,
                routing.as_ref(),
            )));
        }
        let fds = fds.with_masks(built.fd_count()).map_err(fail)?;
        let argv = built.render(&fds.mask_numbers());
        let registration = state::register(
            &state_dir,
            &built.synthetic_targets,
            &read_only_links::protected_metadata_paths(&prepared.resolved),
        )
        .map_err(fail)?;
        let netns = routing
            .as_ref()
            .and_then(|r| r.netns.as_ref())
            .map(|n| n.fds());
        if let (Some(routing), Some(host)) = (&routing, host_handoff) {
            route_bridges::serve_from_host(host, routing.bridges().clone())
                .map_err(|e| fail(format!("failed to start host proxy routing bridge: {e}")))?;
        }
        let outcome = run::run(&choice, &argv, &fds, netns);
        drop(fds);
        registration.cleanup();
        let outcome = outcome.map_err(fail)?;
        // Once the command started, it ran: never again, whatever it wrote.
        let text = String::from_utf8_lossy(&outcome.stderr).into_owned();
        let setup_failed = outcome.code != 0 && !outcome.started;
        if setup_failed && mount_proc && attempt == 1 && run::is_proc_mount_failure(&text) {
            mount_proc = false;
            continue;
        }
        let setup_failed = setup_failed && text.contains("bwrap: ");
        if auto
            && setup_failed
            && (run::is_userns_failure(&text) || !crate::sandbox::probe::host().userns_usable())
        {
            if routing.is_some() {
                return Err(fail(LANDLOCK_CANNOT_ROUTE));
            }
            eprintln!("{PREFIX}: note: bubblewrap cannot create user namespaces here; using the Landlock backend");
            return landlock_backend(args, prepared);
        }
        use std::io::Write;
        let _ = std::io::stderr().write_all(&outcome.held);
        return Ok(outcome.code);
    }
}

/// The deny globs of `prepared` expanded (a snapshot, scanned now, with
/// ripgrep when a trusted one is on `PATH`), failing closed.
pub(crate) fn expand_globs(
    prepared: &Prepared,
    untrusted: &[PathBuf],
) -> Result<glob::GlobExpansion, Failure> {
    let globs = prepared.resolved.unreadable_globs();
    if globs.is_empty() {
        return Ok(glob::GlobExpansion::default());
    }
    let scanner = glob::Scanner::detect(&prepared.policy_cwd, untrusted);
    let depth = prepared.resolved.glob_scan_max_depth.map(|d| d.get());
    glob::expand(globs, depth, &scanner)
        .map_err(|e| fail(format!("error building bubblewrap command: {e}")))
}

/// The warning for deny globs too broad to expand, if any.
pub(crate) fn skipped_globs_warning(expansion: &glob::GlobExpansion) -> Option<String> {
    (!expansion.skipped.is_empty()).then(|| {
        format!(
            "{PREFIX}: warning: deny globs scanning from / are too broad to expand and are not enforced: {}",
            expansion.skipped.join(", ")
        )
    })
}

/// The helper's state directory when the sandbox could otherwise read it.
pub(crate) fn extra_deny(resolved: &ResolvedPolicy, state_dir: &Path) -> Vec<PathBuf> {
    if resolved.can_read(state_dir) {
        vec![state_dir.to_path_buf()]
    } else {
        Vec::new()
    }
}

/// The `--explain` report of the bubblewrap backend.
fn explain(
    prepared: &Prepared,
    choice: &launcher::LauncherChoice,
    built: &bwrap_args::BwrapCommand,
    routing: Option<&HostRouting>,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let r = &prepared.resolved;
    let _ = writeln!(out, "backend: bwrap");
    let _ = writeln!(
        out,
        "launcher: {} {} ({})",
        choice.kind.as_str(),
        choice.path.display(),
        choice.reason
    );
    let _ = writeln!(out, "profile: {}", prepared.profile.to_json());
    let _ = writeln!(out, "policy cwd: {}", prepared.policy_cwd.display());
    let _ = writeln!(out, "command cwd: {}", prepared.command_cwd.display());
    match routing {
        Some(routing) => {
            let _ = writeln!(out, "network: managed proxy only");
            let _ = writeln!(out, "seccomp: {}", SeccompMode::ProxyRouted.as_str());
            let _ = writeln!(
                out,
                "bridges: {} (listeners on the sandbox's 127.0.0.1, served from outside it)",
                routing.bridges().endpoints.len()
            );
            for (key, bridge) in routing.routes() {
                let value = std::env::var(key).unwrap_or_default();
                let _ = writeln!(out, "route: {key}={value} via bridge {bridge}");
            }
            let stub = match (&routing.bridges().dns_proxy, &routing.no_stub) {
                (Some(_), _) => "127.0.0.1:53 (allowed names only, resolved by the proxy; \
                                 network namespace made by the helper)"
                    .to_owned(),
                (None, Some(reason)) => format!("none ({reason})"),
                (None, None) => "none".to_owned(),
            };
            let _ = writeln!(out, "dns stub: {stub}");
        }
        None => {
            let _ = writeln!(out, "network: {}", net_name(prepared.network));
            let _ = writeln!(out, "seccomp: {}", seccomp_mode(prepared.network).as_str());
        }
    }
    let _ = writeln!(out, "readable: {}", join_paths(&r.readable_roots()));
    for w in r.writable_roots() {
        let _ = writeln!(
            out,
            "writable: {} (read-only inside: {})",
            w.root.display(),
            if w.read_only_subpaths.is_empty() && w.protected_metadata_names.is_empty() {
                "nothing".to_owned()
            } else {
                let mut v: Vec<String> = w
                    .read_only_subpaths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                for n in &w.protected_metadata_names {
                    let p = w.root.join(n).display().to_string();
                    if !v.contains(&p) {
                        v.push(p);
                    }
                }
                v.join(" ")
            }
        );
    }
    let _ = writeln!(out, "denied: {}", join_paths(&r.unreadable_roots()));
    if !r.unreadable_globs().is_empty() {
        let _ = writeln!(out, "denied globs: {}", r.unreadable_globs().join(" "));
    }
    let argv: Vec<String> = std::iter::once(OsString::from("bwrap"))
        .chain(built.render_example())
        .map(|w| quote(&w))
        .collect();
    let _ = writeln!(out, "argv: {}", argv.join(" "));
    out
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
