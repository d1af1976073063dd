//! Reused sandboxes: the exec-server's sandboxed commands run in a sandbox
//! prepared once per shape instead of one built per command.
//!
//! The expensive part of a sandbox (user and mount namespaces with the
//! whole mount tree, and the empty network namespace) is built once by a
//! keeper ([`keeper`]) and kept as namespace descriptors; each command gets
//! only what must be its own on top ([`launch`]): pid, mount (a copy of
//! the tree), ipc, uts and cgroup namespaces, a fresh `/proc`, `/dev/shm`
//! and `/dev/pts`, a nested user namespace without capabilities, a fresh
//! session keyring, no_new_privs and the seccomp filter.
//!
//! Reuse never changes what a command can do: before each command the
//! sandbox is decided exactly as a one-shot run would decide it
//! ([`plan::decide`]), from the host as it is at that moment, and the
//! prepared one is used only when the decision and every host path it
//! names are the same as when the sandbox was prepared
//! ([`plan::Plan::digest`]). The exec-server decides just before the
//! launch ([`decide_ahead`]) and the helper only launches, or runs the
//! command on a one-shot sandbox when the server found a difference or
//! could not decide. Without deny-glob matches from the server, the helper
//! decides itself, and on a difference runs the command on a one-shot
//! sandbox and tells the server, which prepares a new one. The server also
//! drops every prepared sandbox when its own mount table changes.
//! `docs/sandbox.md` (Reused sandboxes) has the argument in full.
//!
//! Both roles run in a fork of the spawn zygote's supervisor, reached
//! through [`entry`] with a request the server encoded ([`request`]).

mod command;
mod error;
pub mod keeper;
pub mod launch;
mod mounts;
pub mod plan;
pub mod request;
pub mod standby;

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use crate::process::launch::HelperKind;
use crate::sandbox::cli::{self, Args, PREFIX};
use crate::sandbox::orchestrate;
use crate::sandbox::seccomp::SeccompMode;
use launch::{CommandSetup, Namespaces};
use plan::{DecisionEnv, KnownHost};
use request::{Decided, DenyMatches, LaunchRequest};

/// What the spawn zygote does once, so that every helper forked from it
/// finds it done: this executable's path, the last capability number, the
/// CPU features the plan's digest looks up (`cpuid`, which traps to the
/// hypervisor in a VM), and the seccomp filters compiled.
pub fn warm_up() {
    let _ = crate::runtime_paths::self_exe();
    let _ = crate::sys::confine::last_cap();
    let _ = <sha2::Sha256 as sha2::Digest>::digest(b"");
    for mode in [
        crate::sandbox::seccomp::SeccompMode::Restricted,
        crate::sandbox::seccomp::SeccompMode::NetworkEnabled,
    ] {
        let _ = crate::sandbox::seccomp::SeccompProgram::shared(mode);
    }
}

/// Entry point of the helper's reuse roles (argv as for
/// `codex-linux-sandbox`, the role, its request and descriptors after the
/// supervisor's status pipe and the gate that opens once the supervisor's
/// own records are on it).
pub fn entry(argv: Vec<OsString>, kind: HelperKind, data: Vec<u8>, fds: Vec<OwnedFd>) -> i32 {
    match kind {
        HelperKind::Launch => launch_or_one_shot(argv, &data, fds),
        HelperKind::Prepare => {
            // The status pipe and its gate: a keeper's end is reported by
            // its supervisor.
            let mut fds = fds.into_iter().skip(2);
            match (fds.next(), fds.next()) {
                (Some(control), Some(in_use)) => keeper::run(&argv, &data, control, in_use),
                _ => 1,
            }
        }
        HelperKind::Standby => standby::run(&data, fds),
    }
}

/// One command: in the prepared sandbox when the server or this helper
/// found that a one-shot run would build the same, else on a one-shot
/// sandbox (and the server is told). The in-use marker stays open until
/// this process exits: the keeper removes the mount points it made on the
/// host only once no command of its sandbox is left (removing one would
/// unmount the command's mask).
fn launch_or_one_shot(argv: Vec<OsString>, data: &[u8], fds: Vec<OwnedFd>) -> i32 {
    let mut fds = fds.into_iter();
    let (
        Some(request),
        Some(status),
        Some(gate),
        Some(stale),
        Some(_in_use),
        Some(user),
        Some(mnt),
    ) = (
        LaunchRequest::decode(data),
        fds.next(),
        fds.next(),
        fds.next(),
        fds.next(),
        fds.next(),
        fds.next(),
    )
    else {
        return one_shot(&argv);
    };
    let verdict = if request.verdict_piped {
        match fds.next() {
            Some(verdict) => Some(verdict),
            None => return one_shot(&argv),
        }
    } else {
        None
    };
    let net = fds.next();
    let decided = match verdict {
        // The server decided while this helper started.
        Some(verdict) => {
            let said = crate::sys::fds::read_all(verdict.as_raw_fd()).unwrap_or_default();
            request::decode_verdict(&said)
        }
        None => match decide_here(&argv, &request, &stale) {
            Ok(decided) => Some(decided),
            Err(exit) => return exit,
        },
    };
    let Some(Decided { setup, warnings }) = decided else {
        return one_shot(&argv);
    };
    drop(stale);
    for line in &warnings {
        eprintln!("{line}");
    }
    let network_enabled = setup.seccomp == SeccompMode::NetworkEnabled;
    let namespaces = Namespaces {
        user,
        mnt,
        net: if network_enabled { None } else { net },
    };
    if !network_enabled && namespaces.net.is_none() {
        return one_shot(&argv);
    }
    launch::run(namespaces, &setup, launch::Report { status, gate })
}

/// This helper's own decision, when the server left it one: the command
/// as decided, or the exit status of the one-shot run it ran instead
/// (after telling the server, on `stale`, when the prepared sandbox is
/// outdated).
fn decide_here(
    argv: &[OsString],
    request: &LaunchRequest,
    stale: &OwnedFd,
) -> Result<Decided, i32> {
    let args = parse(argv).map_err(|exit| exit.report())?;
    let console = nix::unistd::isatty(std::io::stdout()).unwrap_or(false);
    let env = DecisionEnv::of_process();
    match plan::decide(&args, &env, request.expansion.as_ref(), console) {
        Ok(Ok(plan)) if plan.digest == request.expected => Ok(Decided {
            setup: command_setup(&args, &plan, console),
            warnings: plan.warnings,
        }),
        Ok(_) => {
            // The prepared sandbox is not what a one-shot run would build
            // now: the server replaces it.
            let _ = crate::sys::fds::write_all(stale.as_raw_fd(), &[1]);
            Err(run_one_shot(args))
        }
        // The one-shot run fails the same way and says so.
        Err(_) => Err(run_one_shot(args)),
    }
}

/// What the exec-server found, deciding a command's sandbox just before
/// its launch ([`decide_ahead`]).
#[derive(Debug)]
pub enum Verdict {
    /// A one-shot run would build the prepared sandbox: launch in it. With
    /// what the decision found of the host paths it looked at.
    Launch(Box<Decided>, KnownHost),
    /// It would build another: the prepared sandbox is outdated.
    Outdated,
    /// Run it on a one-shot sandbox: a command line the server does not
    /// decide for, or a run that fails (the one-shot run says why).
    OneShot,
}

/// Decides, in the exec-server and right before the launch, the sandbox a
/// one-shot run of the helper command line `argv` would build in the
/// environment `env` (the helper's), and compares it with the prepared
/// one (`expected`). The decision is [`plan::decide`], the one the helper
/// makes otherwise: the server shares the helper's host view (mount
/// namespace, credentials), is given the helper's environment (`env`), and
/// decides only when every path the command line names is absolute (the
/// helper's directory is not the server's). Made in a warm process, it costs a
/// fraction of what it costs in a freshly forked helper. `known`: what
/// the server vouches the kernel would say of some host paths (see
/// [`KnownHost`]).
pub fn decide_ahead(
    argv: &[OsString],
    env: &DecisionEnv,
    expected: [u8; 32],
    expansion: &DenyMatches,
    console: bool,
    known: Option<&KnownHost>,
) -> Verdict {
    let Some(args) = cli::parse_server_args(argv) else {
        return Verdict::OneShot;
    };
    let absolute = |path: &std::path::Path| path.is_absolute();
    let all_absolute = args.sandbox_policy_cwd.as_deref().is_some_and(absolute)
        && args.command_cwd.as_deref().is_none_or(absolute)
        && args.plantable_roots.iter().all(|root| absolute(root));
    if !all_absolute {
        return Verdict::OneShot;
    }
    match plan::decide_knowing(&args, env, Some(expansion), console, known) {
        Ok(Ok(plan)) if plan.digest == expected => Verdict::Launch(
            Box::new(Decided {
                setup: command_setup(&args, &plan, console),
                warnings: plan.warnings,
            }),
            plan.looked_at,
        ),
        Ok(_) => Verdict::Outdated,
        Err(_) => Verdict::OneShot,
    }
}

/// The directories a decision gave a command of a standby's prepared
/// sandbox, and the command cwd its command line named (for
/// [`expected_setup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandDirs {
    given: Option<PathBuf>,
    chdir: OsString,
    command_cwd: PathBuf,
}

impl CommandDirs {
    /// What `setup`, decided for the helper command line `argv`, says.
    pub fn of(argv: &[OsString], setup: &CommandSetup) -> Option<CommandDirs> {
        Some(CommandDirs {
            given: cli::parse_server_args(argv)?.command_cwd,
            chdir: setup.chdir.clone(),
            command_cwd: setup.command_cwd.clone(),
        })
    }
}

/// The setup the command of the helper command line `argv` runs with when
/// the decision finds the prepared sandbox still what a one-shot run
/// would build, as far as it can be told without deciding: the command
/// line's own parts, the prepared sandbox's filter `seccomp`, and the
/// directories `dirs` decided for an earlier command whose command line
/// named the same cwd (`None` when it named another). A standby may start
/// the command with it while the server decides; the server lets it run
/// only if the decision comes to the same.
pub fn expected_setup(
    argv: &[OsString],
    seccomp: SeccompMode,
    dirs: &CommandDirs,
) -> Option<CommandSetup> {
    let args = cli::parse_server_args(argv)?;
    (args.command_cwd == dirs.given).then(|| CommandSetup {
        command: args.command,
        arg0: args.command_arg0,
        chdir: dirs.chdir.clone(),
        command_cwd: dirs.command_cwd.clone(),
        seccomp,
        console: false,
    })
}

/// What the command of `args` runs with in the sandbox `plan` decided.
fn command_setup(args: &Args, plan: &plan::Plan, console: bool) -> CommandSetup {
    CommandSetup {
        command: args.command.clone(),
        arg0: args.command_arg0.clone(),
        chdir: plan
            .built
            .chdir()
            .map(ToOwned::to_owned)
            .unwrap_or_else(|| plan.prepared.command_cwd.clone().into_os_string()),
        command_cwd: plan.prepared.command_cwd.clone(),
        seccomp: orchestrate::seccomp_mode(plan.prepared.network),
        console,
    }
}

/// The helper's command line, as the server writes it or in full.
fn parse(argv: &[OsString]) -> Result<Args, crate::cli::ParseExit> {
    cli::parse_server_args(argv)
        .map(Ok)
        .unwrap_or_else(|| crate::cli::parse::<Args>(argv, PREFIX))
}

/// The one-shot run of the command line `argv`.
fn one_shot(argv: &[OsString]) -> i32 {
    match parse(argv) {
        Ok(args) => run_one_shot(args),
        Err(exit) => exit.report(),
    }
}

/// The one-shot run of the same command line.
fn run_one_shot(args: Args) -> i32 {
    match orchestrate::run_args(args) {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("{PREFIX}: {}", failure.message);
            failure.code
        }
    }
}
