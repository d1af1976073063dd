//! The docs and the binary agree: every `--flag` that a command line in
//! README.md or docs/*.md gives a mode (`codexbox MODE …` or an alias such
//! as `codex-linux-sandbox …`, in a code span or a code block) is an
//! option that mode's `--help` lists, so a renamed or removed flag cannot
//! linger in the docs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::cli::{listed_modes, long_flags, mode_help};

/// The names the binary answers to besides `codexbox MODE`.
const ALIASES: &[(&str, &str)] = &[
    ("codex-exec-server", "exec-server"),
    ("codex-linux-sandbox", "linux-sandbox"),
    ("codex-fs-helper", "fs-helper"),
    ("bwrap", "bwrap"),
];

/// The code a markdown text shows: every code span (joined onto one line)
/// and every line of every code block (backslash continuations joined).
fn code_of(markdown: &str) -> Vec<String> {
    let mut code = Vec::new();
    for (n, part) in markdown.split("```").enumerate() {
        if n % 2 == 1 {
            let block = part.replace("\\\n", " ");
            code.extend(block.lines().map(str::to_owned));
        } else {
            code.extend(
                part.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(|span| span.replace('\n', " ")),
            );
        }
    }
    code
}

/// The mode a command line runs and the part of it that is the mode's own
/// arguments (before `--`, a pipe, `;`, `&&` or a comment), or `None` when
/// it is not a codexbox command line.
fn mode_arguments<'a>(line: &'a str, modes: &BTreeSet<String>) -> Option<(String, &'a str)> {
    let line = line.trim().trim_start_matches("$ ");
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let mode = match ALIASES.iter().find(|(alias, _)| *alias == first) {
        Some((_, mode)) => (*mode).to_owned(),
        None if first == "codexbox" => words.next().filter(|w| modes.contains(*w))?.to_owned(),
        None => return None,
    };
    let end = [" -- ", " | ", ";", " && ", " #"]
        .iter()
        .filter_map(|stop| line.find(stop))
        .min()
        .unwrap_or(line.len());
    let own = line[..end].strip_suffix(" --").unwrap_or(&line[..end]);
    Some((mode, own))
}

#[test]
fn every_flag_the_docs_give_a_mode_is_in_its_help() {
    let modes: BTreeSet<String> = listed_modes().into_iter().collect();
    let helps: BTreeMap<&str, BTreeSet<String>> = modes
        .iter()
        .map(|mode| (mode.as_str(), long_flags(&mode_help(mode))))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("docs entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut checked = 0;
    let mut unknown = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("read doc");
        for line in code_of(&text) {
            let Some((mode, own)) = mode_arguments(&line, &modes) else {
                continue;
            };
            for flag in long_flags(own) {
                checked += 1;
                if !helps.get(mode.as_str()).is_some_and(|h| h.contains(&flag)) {
                    unknown.push(format!(
                        "{}: {mode} {flag}: {}",
                        page.display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} flags found in the docs");
    assert!(
        unknown.is_empty(),
        "flags the docs give that --help does not list:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_reader_finds_flags_in_spans_and_blocks_only() {
    let modes: BTreeSet<String> = ["exec".to_owned()].into();
    let code = code_of(
        "Run `codexbox exec\n--tty` or `cargo --x`.\n```sh\ncodexbox exec --env A=1 \\\n  --detach -- ls --all\n```\nprose --not-code\n",
    );
    let found: Vec<(String, BTreeSet<String>)> = code
        .iter()
        .filter_map(|line| mode_arguments(line, &modes))
        .map(|(mode, own)| (mode, long_flags(own)))
        .collect();
    let flags = |list: &[&str]| {
        list.iter()
            .map(|f| (*f).to_owned())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        found,
        [
            ("exec".to_owned(), flags(&["--tty"])),
            ("exec".to_owned(), flags(&["--env", "--detach"])),
        ]
    );
}
