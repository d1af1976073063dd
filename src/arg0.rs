//! Multi-call dispatch: picks a mode from the basename of argv[0] or from the
//! first argument, before any other start-up work (no runtime, no logging),
//! so the sandbox and helper paths stay fast and single-threaded.

use std::ffi::OsString;

use crate::mode::Mode;

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
        let helpers = crate::process::zygote::Helpers {
            sandbox: crate::sandbox::orchestrate::main,
            reuse: crate::sandbox::warm::entry,
            warm_up: crate::sandbox::warm::warm_up,
        };
        return crate::process::zygote::main(&argv, helpers);
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
        eprintln!(
            "codexbox: no mode given; one of {} (see codexbox --help)",
            mode_list()
        );
        return crate::cli::EXIT_USAGE;
    };
    if let Some(mode) = Mode::from_subcommand(first) {
        return run(mode, mode_argv(mode, &argv[2..]));
    }
    match first.to_str() {
        Some("-h" | "--help") => crate::stdout::print(&crate::commands::help_text()),
        Some("help") => help(argv.get(2)),
        Some("-V" | "--version") => crate::stdout::print(&crate::cli::version_line("codexbox")),
        _ => unknown_mode(first),
    }
}

/// `codexbox help [MODE]`: the top-level help, or `codexbox MODE --help`.
fn help(mode: Option<&OsString>) -> i32 {
    let Some(name) = mode else {
        return crate::stdout::print(&crate::commands::help_text());
    };
    match Mode::from_subcommand(name) {
        Some(mode) => run(mode, mode_argv(mode, &["--help".into()])),
        None => unknown_mode(name),
    }
}

fn unknown_mode(name: &OsString) -> i32 {
    eprintln!(
        "codexbox: unknown mode {:?}; one of {} (see codexbox --help)",
        name.to_string_lossy(),
        mode_list()
    );
    crate::cli::EXIT_USAGE
}

/// The subcommands, comma-separated.
fn mode_list() -> String {
    Mode::ALL.map(Mode::subcommand).join(", ")
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
        Mode::LinuxSandbox => crate::sandbox::orchestrate::main(argv),
        Mode::Bwrap => crate::bwrap::main(argv),
        Mode::FsHelper => crate::fs_helper::main(argv),
        Mode::Sandbox => crate::sandbox::debug::main(argv),
        Mode::Doctor => crate::sandbox::doctor::main(argv),
        Mode::InstallLinks => crate::install_links::main(argv),
        Mode::Rendezvous => crate::rendezvous::cli::main(argv),
        Mode::Connect => crate::connect::cli::main(argv),
        Mode::Proxy => crate::net::cli::main(argv),
        Mode::Exec => crate::shell::exec::main(argv),
        Mode::Attach => crate::shell::attach::main(argv),
        Mode::Ps => crate::shell::ps::main(argv),
        Mode::Cp => crate::shell::cp::main(argv),
        Mode::Completions => crate::commands::completions_main(argv),
    }
}
