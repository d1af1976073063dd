//! What one `codex-linux-sandbox` command line runs (docs/sandbox.md).
//!
//! Picks the backend and drives one run: the full-disk-write shortcut
//! (confine + seccomp, then exec), the bubblewrap backend (argv from
//! `sandbox::bwrap_args`, launcher from `sandbox::launcher`, run and cleanup
//! in `sandbox::run` and `sandbox::state`), the Landlock backend
//! (`sandbox::landlock`), or the inner stage (`sandbox::inner`). The flags
//! themselves are `sandbox::cli`.
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

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::policy::{
    DroppedGrant, FileSystemAccessMode, FileSystemSandboxKind, FileSystemSandboxPolicy, HostView,
    NetworkSandboxPolicy, PermissionProfile, ResolvedPolicy,
};
use crate::sandbox::bwrap_args::{self, BwrapInputs, InnerCommand};
use crate::sandbox::cli::{
    fail, helper_args, profile_from_args, usage, Args, Backend, Failure,
    ALLOW_NETWORK_FOR_PROXY_FLAG, COMMAND_ARG0_FLAG, PREFIX, PROXY_ROUTE_SPEC_FLAG,
};
use crate::sandbox::launcher;
use crate::sandbox::proxy_routing::{self, HostRouting, RouteSpec};
use crate::sandbox::route_bridges;
use crate::sandbox::seccomp::SeccompMode;
use crate::sandbox::{glob, inner, read_only_links, run, state};

/// Set in the caller's environment by an orchestrating proxy; never passed on.
const ATTRIBUTION_ENV: &str = "CODEX_NETWORK_PROXY_ATTRIBUTION";

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
    pub resolved: ResolvedPolicy,
    /// What `resolved` grants on this host, looked up once for the whole
    /// run.
    pub host: HostView,
}

/// The policy one run enforces.
fn resolve_for_run(
    fs: &FileSystemSandboxPolicy,
    policy_cwd: &Path,
    plantable: &[PathBuf],
    tmpdir: Option<&OsStr>,
) -> ResolvedPolicy {
    let mut resolved = fs.resolve_with_tmpdir(policy_cwd, plantable, tmpdir);
    // The helper and its bundled launcher run outside the sandbox next
    // time: never writable from inside it.
    if let Ok(exe) = crate::runtime_paths::self_exe() {
        resolved.keep_read_only(&[launcher::bundled_path(exe), exe.to_path_buf()]);
    }
    resolved
}

/// One warning line per grant the run drops for a planted symlink.
pub(crate) fn dropped_grant_warnings(dropped: &[DroppedGrant]) -> Vec<String> {
    dropped
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
    let tmpdir = std::env::var_os("TMPDIR");
    dropped_grant_warnings(
        &resolve_for_run(&fs, policy_cwd, plantable, tmpdir.as_deref()).dropped_grants(),
    )
}

pub(crate) fn prepare(args: &Args) -> Result<Prepared, Failure> {
    prepare_with_tmpdir(args, std::env::var_os("TMPDIR").as_deref())
}

/// [`prepare`] for a helper whose `$TMPDIR` is `tmpdir`.
pub(crate) fn prepare_with_tmpdir(
    args: &Args,
    tmpdir: Option<&OsStr>,
) -> Result<Prepared, Failure> {
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
    let resolved = resolve_for_run(&fs, &policy_cwd, &args.plantable_roots, tmpdir);
    let host = resolved.host_view();
    Ok(Prepared {
        profile,
        network,
        policy_cwd,
        command_cwd,
        resolved,
        host,
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
    if let Err(err) = read_only_links::check(&prepared.host.writable_roots) {
        return Err(fail(match backend {
            Backend::Landlock => format!("error building the Landlock sandbox: {err}"),
            Backend::Bwrap | Backend::Auto => format!("error building bubblewrap command: {err}"),
        }));
    }
    for line in dropped_grant_warnings(&prepared.host.dropped_grants) {
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
            host: &prepared.host,
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
        // From the first mount point made on the host until the last is
        // removed, the signals that end a run wait (the run passes them on
        // to the launcher): one arriving in between, e.g. the server's
        // death as this helper starts, must not leave mount points behind.
        let held = run::forwarded()
            .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
            .map_err(|errno| fail(format!("cannot block signals: {errno}")))?;
        let registration = state::register(
            &state_dir,
            &built.synthetic_targets,
            &read_only_links::protected_metadata_paths(&prepared.host.writable_roots),
        );
        let outcome = registration.map_err(fail).and_then(|registration| {
            let netns = routing
                .as_ref()
                .and_then(|r| r.netns.as_ref())
                .map(|n| n.fds());
            let bridges = match (&routing, host_handoff) {
                (Some(routing), Some(host)) => {
                    route_bridges::serve_from_host(host, routing.bridges().clone()).map_err(|e| {
                        fail(format!("failed to start host proxy routing bridge: {e}"))
                    })
                }
                _ => Ok(()),
            };
            let outcome =
                bridges.and_then(|()| run::run(&choice, &argv, &fds, netns).map_err(fail));
            registration.cleanup();
            outcome
        });
        drop(fds);
        let _ = held.thread_set_mask();
        let outcome = outcome?;
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
