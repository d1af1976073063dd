//! Writes a man page for `codexbox` and one per mode (`codexbox-exec.1`,
//! …) into a directory, from the same clap definitions the binary parses
//! with ([`codexbox::commands`]). Kept out of the shipped binary: run it
//! through `scripts/man OUTDIR`.

use std::path::PathBuf;

/// Every page: its file name and its roff text.
pub fn pages() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let whole = codexbox::commands::command();
    let mut pages = vec![("codexbox.1".to_owned(), render(whole.clone())?)];
    for mode in whole.get_subcommands() {
        let name = format!("codexbox-{}", mode.get_name());
        let page = render(with_visible_aliases(
            mode.clone().name(name.clone()).display_name(name.clone()),
        ))?;
        pages.push((format!("{name}.1"), page));
    }
    Ok(pages)
}

/// clap_mangen leaves out an option's visible aliases (`--allow-domain`
/// for `--allow`); they are added at the end of its help, as `--help`
/// shows them.
fn with_visible_aliases(command: clap::Command) -> clap::Command {
    command.mut_args(|arg| {
        let aliases: Vec<String> = arg
            .get_visible_aliases()
            .unwrap_or_default()
            .iter()
            .map(|alias| format!("--{alias}"))
            .collect();
        if aliases.is_empty() {
            return arg;
        }
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        arg.long_help(format!("{help}\n\n[alias: {}]", aliases.join(", ")))
    })
}

fn render(command: clap::Command) -> std::io::Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .source(format!("codexbox {}", codexbox::cli::VERSION))
        .manual("codexbox manual")
        .render(&mut page)?;
    Ok(page)
}

fn main() -> std::process::ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: man OUTDIR");
        return std::process::ExitCode::from(2);
    };
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        for (name, page) in pages()? {
            std::fs::write(dir.join(&name), page)?;
            println!("{}", dir.join(name).display());
        }
        Ok(())
    });
    match written {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("man: cannot write the pages into {}: {err}", dir.display());
            std::process::ExitCode::FAILURE
        }
    }
}
