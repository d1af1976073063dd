//! `codexbox install-links [--force] DIR`: the alias symlinks
//! ([`crate::mode::ALIASES`]) in an existing directory, busybox
//! `--install -s` style. Running it again is harmless: a link that already
//! points at this binary is kept; anything else of an alias's name is left
//! alone unless `--force` replaces it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::mode::ALIASES;

const NAME: &str = "codexbox install-links";

/// Command line of `codexbox install-links`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "codexbox install-links",
    about = "Create the alias symlinks (codex-exec-server, codex-linux-sandbox, bwrap, codex-fs-helper) in a directory",
    after_help = "DIR must exist. A link that already points at this binary is kept; \
                  anything else of an alias's name is an error unless --force replaces it."
)]
struct Args {
    /// Replace existing entries of the aliases' names.
    #[arg(short = 'f', long)]
    force: bool,
    /// The directory to create the symlinks in (it must exist).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

/// Why a link could not be made; `Display` is the text after the mode's name.
#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("cannot locate this executable: {0}")]
    Executable(#[source] std::io::Error),
    #[error("{}: not a directory (create it first)", .0.display())]
    NotADirectory(PathBuf),
    #[error("{} already exists and is not a link to {}; --force replaces it", .link.display(), .exe.display())]
    Exists { link: PathBuf, exe: PathBuf },
    #[error("cannot replace {}: {source}", .link.display())]
    Replace {
        link: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {}: {source}", .link.display())]
    Create {
        link: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The clap definition of this mode (for help, completions, man pages).
pub fn command() -> clap::Command {
    Args::command()
}

/// Entry point of this mode.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args: Args = match crate::cli::parse(&argv, NAME) {
        Ok(args) => args,
        Err(exit) => return exit.report(),
    };
    match install(&args.dir, args.force) {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("{NAME}: {err}");
            crate::cli::EXIT_FAILURE
        }
    }
}

/// What to do with one alias's path.
enum Step {
    /// Already a link to this executable.
    Keep,
    /// Nothing there yet.
    Create,
    /// Something else there, and `--force` was given.
    Replace,
}

/// Makes every alias in `dir` a symlink to this executable, one line on
/// stdout per alias. Every path is checked before anything changes, so a
/// refusal leaves the directory as it was.
fn install(dir: &Path, force: bool) -> Result<(), LinkError> {
    let exe = std::env::current_exe().map_err(LinkError::Executable)?;
    if !dir.is_dir() {
        return Err(LinkError::NotADirectory(dir.to_path_buf()));
    }
    let mut steps = Vec::with_capacity(ALIASES.len());
    for alias in ALIASES {
        let link = dir.join(alias);
        let step = if link.symlink_metadata().is_err() {
            Step::Create
        } else if std::fs::read_link(&link).is_ok_and(|target| target == exe) {
            Step::Keep
        } else if force {
            Step::Replace
        } else {
            return Err(LinkError::Exists { link, exe });
        };
        steps.push((link, step));
    }
    for (link, step) in steps {
        if let Step::Replace = step {
            std::fs::remove_file(&link).map_err(|source| LinkError::Replace {
                link: link.clone(),
                source,
            })?;
        }
        if !matches!(step, Step::Keep) {
            std::os::unix::fs::symlink(&exe, &link).map_err(|source| LinkError::Create {
                link: link.clone(),
                source,
            })?;
        }
        crate::stdout::print(&format!("{} -> {}\n", link.display(), exe.display()));
    }
    Ok(())
}
