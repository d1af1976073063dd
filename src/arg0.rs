//! Multi-call dispatch: picks a mode from the basename of argv[0] or from the
//! first argument, before any other start-up work (no runtime, no logging),
//! so the sandbox and helper paths stay fast and single-threaded.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::mode::{Mode, ALIASES};

/// Runs the mode selected by `argv` and returns the process exit code.
pub fn dispatch(argv: Vec<OsString>) -> i32 {
    let Some(arg0) = argv.first() else {
        return run(Mode::Doctor, vec![OsString::from("codexbox")]);
    };
    if argv
        .get(1)
        .is_some_and(|a| a == crate::process::supervisor::SUPERVISOR_ARG1)
    {
        return crate::process::supervisor::main(&argv);
    }
    if argv
        .get(1)
        .is_some_and(|a| a == crate::process::zygote::ZYGOTE_ARG1)
    {
        return crate::process::zygote::main(&argv, crate::sandbox::cli::main);
    }
    // The markers of the binary's re-execs of itself come before argv[0]:
    // they select their mode whatever name the binary is installed under
    // (a copy named `codex-linux-sandbox` or `codex-exec-server` included).
    if let Some(mode) = argv.get(1).and_then(|first| Mode::from_marker(first)) {
        return run(mode, mode_argv(mode, &argv[2..]));
    }
    if let Some(mode) = Mode::from_arg0(arg0) {
        return run(mode, argv);
    }
    let Some(first) = argv.get(1) else {
        eprint!("{}", usage());
        return 2;
    };
    if let Some(mode) = Mode::from_subcommand(first) {
        return run(mode, mode_argv(mode, &argv[2..]));
    }
    match first.to_str() {
        Some("-h" | "--help" | "help") => crate::stdout::print(&usage()),
        Some("-V" | "--version") => {
            crate::stdout::print(&format!("codexbox {}\n", env!("CARGO_PKG_VERSION")))
        }
        _ => {
            eprintln!("codexbox: unknown mode {:?}", first.to_string_lossy());
            eprint!("{}", usage());
            2
        }
    }
}

/// argv for a mode reached through a subcommand: its display name, then the rest.
fn mode_argv(mode: Mode, rest: &[OsString]) -> Vec<OsString> {
    let mut argv = Vec::with_capacity(rest.len() + 1);
    argv.push(OsString::from(format!("codexbox {}", mode.subcommand())));
    argv.extend_from_slice(rest);
    argv
}

fn run(mode: Mode, argv: Vec<OsString>) -> i32 {
    match mode {
        Mode::ExecServer => crate::server::cli::main(argv),
        Mode::LinuxSandbox => crate::sandbox::cli::main(argv),
        Mode::Bwrap => crate::bwrap::main(argv),
        Mode::FsHelper => crate::fs_helper::main(argv),
        Mode::Sandbox => crate::sandbox::debug::main(argv),
        Mode::Doctor => crate::sandbox::doctor::main(argv),
        Mode::InstallLinks => install_links_main(argv),
        Mode::Rendezvous => crate::rendezvous::cli::main(argv),
        Mode::Connect => crate::connect::cli::main(argv),
        Mode::Proxy => crate::net::cli::main(argv),
        Mode::Exec => crate::shell::exec::main(argv),
        Mode::Attach => crate::shell::attach::main(argv),
        Mode::Ps => crate::shell::ps::main(argv),
        Mode::Cp => crate::shell::cp::main(argv),
    }
}

fn usage() -> String {
    format!(
        "\
codexbox {version}: run commands and touch files on this machine, safely and remotely.

Usage: codexbox <MODE> [ARGS]...

Modes:
  exec-server    JSON-RPC server for processes and files (also: codex-exec-server)
  linux-sandbox  run one command inside the Linux sandbox (also: codex-linux-sandbox)
  bwrap          built-in bubblewrap-compatible launcher (also: bwrap)
  fs-helper      sandboxed filesystem worker over stdin/stdout (also: codex-fs-helper)
  sandbox        run a command the way the server would sandbox it
  doctor         report what this host supports for sandboxing, and why
  install-links  create the alias symlinks in a directory
  rendezvous     registry and relay for remote executors (self-hosted)
  connect        expose a remote executor as a local exec-server endpoint
  proxy          network proxy that lets through only allowed destinations
  exec           run a command on an exec-server, as if it ran here
  attach         re-attach to a process of a detached session
  ps             list the sessions and processes of an exec-server
  cp             copy files and directories to or from an exec-server

Run `codexbox <MODE> --help` for the options of a mode.
",
        version = env!("CARGO_PKG_VERSION")
    )
}

/// `codexbox install-links [--force] DIR`: busybox `--install -s` style aliases.
fn install_links_main(argv: Vec<OsString>) -> i32 {
    let mut force = false;
    let mut dir: Option<PathBuf> = None;
    for arg in argv.iter().skip(1) {
        match arg.to_str() {
            Some("-h" | "--help") => {
                return crate::stdout::print(&format!(
                    "Usage: codexbox install-links [--force] DIR\n\n\
                     Creates the symlinks {} in DIR, pointing at this binary.\n\
                     --force replaces existing entries of those names.\n",
                    ALIASES.join(", ")
                ));
            }
            Some("-f" | "--force") => force = true,
            _ if dir.is_none() => dir = Some(PathBuf::from(arg)),
            _ => {
                eprintln!(
                    "codexbox install-links: unexpected argument {:?}",
                    arg.to_string_lossy()
                );
                return 2;
            }
        }
    }
    let Some(dir) = dir else {
        eprintln!(
            "codexbox install-links: missing DIR (usage: codexbox install-links [--force] DIR)"
        );
        return 2;
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => {
            eprintln!("codexbox install-links: cannot locate this executable: {err}");
            return 1;
        }
    };
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!(
            "codexbox install-links: cannot create {}: {err}",
            dir.display()
        );
        return 1;
    }
    for alias in ALIASES {
        let link = dir.join(alias);
        if force && link.symlink_metadata().is_ok() {
            if let Err(err) = std::fs::remove_file(&link) {
                eprintln!(
                    "codexbox install-links: cannot replace {}: {err}",
                    link.display()
                );
                return 1;
            }
        }
        if let Err(err) = std::os::unix::fs::symlink(&exe, &link) {
            eprintln!(
                "codexbox install-links: cannot create {}: {err}",
                link.display()
            );
            return 1;
        }
        crate::stdout::print(&format!("{} -> {}\n", link.display(), exe.display()));
    }
    0
}
