//! The whole command line, assembled: every mode's clap definition as a
//! subcommand of `codexbox`, for the top-level help, `codexbox help MODE`,
//! `codexbox completions SHELL` and the man pages (`scripts/man`).
//!
//! Built only when one of those asks: dispatch never builds it on its way
//! to a mode. Each mode owns its definition (its `command()`); the
//! convention they share is [`crate::cli`]'s.

use std::ffi::OsString;

use clap::CommandFactory;

use crate::cli::VERSION;
use crate::mode::{Mode, ALIASES};

/// The definition of one mode, named as its subcommand
/// (`codexbox exec …`).
pub fn mode_command(mode: Mode) -> clap::Command {
    let command = match mode {
        Mode::ExecServer => crate::server::cli::command(),
        Mode::LinuxSandbox => crate::sandbox::cli::command(),
        Mode::Bwrap => crate::bwrap::cli::command(),
        Mode::FsHelper => crate::fs_helper::command(),
        Mode::Sandbox => crate::sandbox::debug::command(),
        Mode::Doctor => crate::sandbox::doctor::command(),
        Mode::InstallLinks => crate::install_links::command(),
        Mode::Rendezvous => crate::rendezvous::cli::command(),
        Mode::Connect => crate::connect::cli::command(),
        Mode::Proxy => crate::net::cli::command(),
        Mode::Exec => crate::shell::exec::command(),
        Mode::Attach => crate::shell::attach::command(),
        Mode::Ps => crate::shell::ps::command(),
        Mode::Cp => crate::shell::cp::command(),
        Mode::Completions => CompletionsArgs::command(),
    };
    let name = mode.subcommand();
    command
        .name(name)
        .bin_name(format!("codexbox {name}"))
        .version(VERSION)
}

/// `codexbox` with every mode as a subcommand (and clap's `help`).
pub fn command() -> clap::Command {
    clap::Command::new("codexbox")
        .version(VERSION)
        .about("Run commands and touch files on this machine, safely and remotely")
        .subcommand_value_name("MODE")
        .override_usage("codexbox <MODE> [ARGS]...")
        .subcommand_help_heading("Modes")
        .subcommands(Mode::ALL.map(mode_command))
        .after_help(format!(
            "Installed under one of the names {} (see install-links), the binary runs that mode.\n\
             `codexbox help MODE` or `codexbox MODE --help` shows the options of a mode.",
            ALIASES.join(", ")
        ))
}

/// The top-level help text.
pub fn help_text() -> String {
    command().render_help().to_string()
}

/// Command line of `codexbox completions`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "codexbox completions",
    about = "Print a shell completion script for every mode",
    after_help = "bash: codexbox completions bash > /etc/bash_completion.d/codexbox\n\
                  zsh:  codexbox completions zsh > \"${fpath[1]}/_codexbox\"\n\
                  fish: codexbox completions fish > ~/.config/fish/completions/codexbox.fish"
)]
struct CompletionsArgs {
    /// The shell to complete in.
    #[arg(value_enum, value_name = "SHELL")]
    shell: clap_complete::Shell,
}

/// Entry point of `codexbox completions SHELL`.
pub fn completions_main(argv: Vec<OsString>) -> i32 {
    let name = "codexbox completions";
    let args: CompletionsArgs = match crate::cli::parse(&argv, name) {
        Ok(args) => args,
        Err(exit) => return exit.report(),
    };
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command(), "codexbox", &mut script);
    crate::stdout::print(&String::from_utf8_lossy(&script))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_is_a_subcommand_and_the_whole_definition_is_sound() {
        let command = command();
        for mode in Mode::ALL {
            assert!(
                command.find_subcommand(mode.subcommand()).is_some(),
                "{mode:?}"
            );
        }
        command.debug_assert();
    }
}
