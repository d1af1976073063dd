//! The command-line convention (docs/cli.md), held to by every mode of the
//! real binary: a table of modes × {`--bogus`, a bad value, `--help`/`-h`,
//! `--version`/`-V`, a missing required argument} checked for exit status,
//! the one `NAME: …` line and which stream gets what; `help MODE`; the
//! commit in the version; 126/127 for commands that cannot run; flags that
//! would do nothing; loopback-only listeners; plain log lines in a file;
//! `install-links`; completions and man pages for every mode.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::shell::{command, finish, run, Run};

#[path = "../../examples/man.rs"]
#[allow(dead_code)]
mod man;

/// This build's version, as `--version` prints it after the mode's name.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("CODEXBOX_BUILD_SUFFIX"));

/// One mode and how the convention reads for it.
struct Mode {
    /// The subcommand.
    mode: &'static str,
    /// The name its messages, usage and version line start with.
    name: &'static str,
    /// Arguments with one refused value, and the flag the refusal names.
    bad_value: &'static [&'static str],
    bad_flag: &'static str,
    /// What the refusal names when the mode runs with no argument at all;
    /// `None` when it needs none.
    missing: Option<&'static str>,
}

/// Every mode but `bwrap`, which keeps bubblewrap's conventions (checked
/// below).
const MODES: &[Mode] = &[
    Mode {
        mode: "exec-server",
        name: "codexbox exec-server",
        bad_value: &["--session-grace-secs", "soon"],
        bad_flag: "--session-grace-secs",
        missing: None,
    },
    Mode {
        mode: "linux-sandbox",
        name: "codex-linux-sandbox",
        bad_value: &[
            "--sandbox-policy-cwd",
            "/",
            "--permission-profile",
            "read-only",
            "--backend",
            "nope",
            "--",
            "true",
        ],
        bad_flag: "--backend",
        missing: Some("--sandbox-policy-cwd"),
    },
    Mode {
        mode: "fs-helper",
        name: "codexbox fs-helper",
        bad_value: &["--serve=yes"],
        bad_flag: "--serve",
        missing: None,
    },
    Mode {
        mode: "sandbox",
        name: "codexbox sandbox",
        bad_value: &["--backend", "nope", "--", "true"],
        bad_flag: "--backend",
        missing: Some("COMMAND"),
    },
    Mode {
        mode: "doctor",
        name: "codexbox doctor",
        bad_value: &["--json=yes"],
        bad_flag: "--json",
        missing: None,
    },
    Mode {
        mode: "install-links",
        name: "codexbox install-links",
        bad_value: &["--force=yes", "."],
        bad_flag: "--force",
        missing: Some("<DIR>"),
    },
    Mode {
        mode: "rendezvous",
        name: "codexbox rendezvous",
        bad_value: &["--max-connections", "many"],
        bad_flag: "--max-connections",
        missing: None,
    },
    Mode {
        mode: "connect",
        name: "codexbox connect",
        bad_value: &[
            "--registry",
            "http://127.0.0.1:9",
            "--environment-id",
            "e",
            "--relay-dialect",
            "nope",
        ],
        bad_flag: "--relay-dialect",
        missing: Some("--registry"),
    },
    Mode {
        mode: "proxy",
        name: "codexbox proxy",
        bad_value: &["--allow", "exa mple.com"],
        bad_flag: "--allow",
        missing: None,
    },
    Mode {
        mode: "exec",
        name: "codexbox exec",
        bad_value: &["--env-policy", "nope", "--", "true"],
        bad_flag: "--env-policy",
        missing: Some("<COMMAND>"),
    },
    Mode {
        mode: "attach",
        name: "codexbox attach",
        bad_value: &["--session", "s", "--process", "p", "--after-seq", "later"],
        bad_flag: "--after-seq",
        missing: Some("--session"),
    },
    Mode {
        mode: "ps",
        name: "codexbox ps",
        bad_value: &["--json=yes"],
        bad_flag: "--json",
        missing: Some("--url"),
    },
    Mode {
        mode: "cp",
        name: "codexbox cp",
        bad_value: &["a", "b", "--url"],
        bad_flag: "--url",
        missing: Some("<SRC>"),
    },
    Mode {
        mode: "completions",
        name: "codexbox completions",
        bad_value: &["tcsh"],
        bad_flag: "<SHELL>",
        missing: Some("<SHELL>"),
    },
];

/// The modes the binary's own top-level help lists (clap's `help` aside),
/// so a mode added without a row here still gets the checks that take
/// every mode.
pub(crate) fn listed_modes() -> Vec<String> {
    let help = run(&["--help"], None).stdout_text();
    let modes: Vec<String> = help
        .lines()
        .skip_while(|line| *line != "Modes:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|mode| *mode != "help")
        .map(str::to_owned)
        .collect();
    assert!(modes.len() > 10, "modes listed by --help: {help}");
    modes
}

/// The long options (`--name`, without a value) that `text` names; a lone
/// `--` is not one.
pub(crate) fn long_flags(text: &str) -> BTreeSet<String> {
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '-';
    let mut flags = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("--") {
        let before = rest[..at].chars().next_back();
        let name: String = rest[at + 2..]
            .chars()
            .take_while(|c| name_char(*c))
            .collect();
        if !before.is_some_and(name_char) && name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            flags.insert(format!("--{name}"));
        }
        rest = &rest[at + 2 + name.len()..];
    }
    flags
}

/// `codexbox MODE --help` as the binary prints it.
pub(crate) fn mode_help(mode: &str) -> String {
    let out = mode_run(mode, &["--help"]);
    assert_eq!(out.code, 0, "{mode} --help: {out:?}");
    out.stdout_text()
}

#[test]
fn the_table_holds_every_mode_the_binary_lists() {
    let listed: BTreeSet<String> = listed_modes().into_iter().collect();
    let tabled: BTreeSet<String> = MODES
        .iter()
        .map(|m| m.mode.to_owned())
        .chain(["bwrap".to_owned()])
        .collect();
    assert_eq!(listed, tabled);
    let flags = long_flags("a --b-c, --d=1 [--e] -- x--y --");
    assert_eq!(
        flags.into_iter().collect::<Vec<_>>(),
        ["--b-c", "--d", "--e"]
    );
}

/// Runs `codexbox MODE ARGS…` in a scratch directory (nothing a mistaken
/// parse could create lands anywhere else), stdin `/dev/null`.
fn mode_run(mode: &str, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("scratch directory");
    let mut cmd = command(&[mode]);
    cmd.args(args).current_dir(dir.path());
    finish(&mut cmd, None, &format!("{mode} {args:?}"))
}

/// A usage error: exit 2, nothing on stdout, one line on stderr that
/// starts with the mode's name and names `needle`.
fn assert_usage_error(out: &Run, name: &str, needle: &str, what: &str) {
    assert_eq!(out.code, 2, "{what}: {out:?}");
    assert!(out.stdout.is_empty(), "{what}: stdout {out:?}");
    assert_eq!(out.stderr.lines().count(), 1, "{what}: one line: {out:?}");
    assert!(
        out.stderr.starts_with(&format!("{name}: ")),
        "{what}: {out:?}"
    );
    assert!(
        out.stderr.contains(needle),
        "{what} names {needle}: {out:?}"
    );
}

#[test]
fn every_mode_refuses_an_unknown_flag_in_one_line_with_status_2() {
    for mode in MODES {
        let out = mode_run(mode.mode, &["--bogus"]);
        assert_usage_error(&out, mode.name, "'--bogus'", mode.mode);
    }
}

#[test]
fn every_mode_names_the_flag_whose_value_it_refuses() {
    for mode in MODES {
        let out = mode_run(mode.mode, mode.bad_value);
        assert_usage_error(&out, mode.name, mode.bad_flag, mode.mode);
    }
}

#[test]
fn every_mode_names_what_is_missing() {
    for mode in MODES {
        if let Some(missing) = mode.missing {
            let out = mode_run(mode.mode, &[]);
            assert_usage_error(&out, mode.name, missing, mode.mode);
        }
    }
}

#[test]
fn every_mode_prints_help_and_version_on_stdout() {
    for mode in MODES {
        for flag in ["--help", "-h"] {
            let out = mode_run(mode.mode, &[flag]);
            assert_eq!(out.code, 0, "{} {flag}: {out:?}", mode.mode);
            assert!(out.stderr.is_empty(), "{} {flag}: {out:?}", mode.mode);
            assert!(
                out.stdout_text().contains(&format!("Usage: {}", mode.name)),
                "{} {flag}: {out:?}",
                mode.mode
            );
        }
        for flag in ["--version", "-V"] {
            let out = mode_run(mode.mode, &[flag]);
            assert_eq!(out.code, 0, "{} {flag}: {out:?}", mode.mode);
            assert!(out.stderr.is_empty(), "{} {flag}: {out:?}", mode.mode);
            assert_eq!(out.stdout_text(), format!("{} {VERSION}\n", mode.name));
        }
    }
}

#[test]
fn help_mode_is_the_modes_own_help() {
    for mode in listed_modes() {
        let mode = mode.as_str();
        let asked = run(&["help", mode], None);
        let own = mode_run(mode, &["--help"]);
        assert_eq!(asked.code, 0, "help {mode}: {asked:?}");
        assert_eq!(asked.stdout, own.stdout, "help {mode}");
    }
    let top = run(&["help"], None);
    assert_eq!(top.code, 0);
    for mode in MODES {
        assert!(top.stdout_text().contains(mode.mode), "{}", mode.mode);
    }
    assert_eq!(run(&["--help"], None).stdout, top.stdout);
    for args in [&["help", "nope"][..], &["nope"], &[]] {
        let out = run(args, None);
        assert_usage_error(&out, "codexbox", "exec-server, linux-sandbox", "top level");
    }
}

#[test]
fn the_version_names_the_commit_when_built_from_a_checkout() {
    let out = run(&["--version"], None);
    assert_eq!(out.stdout_text(), format!("codexbox {VERSION}\n"));
    let root = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let own_checkout = git(&["rev-parse", "--show-toplevel"]).is_some_and(|top| {
        Path::new(&top).canonicalize().ok() == Path::new(root).canonicalize().ok()
    });
    match git(&["log", "-1", "--format=%h"]).filter(|_| own_checkout) {
        Some(commit) => assert!(
            VERSION.contains(&format!("({commit} ")),
            "{VERSION} names {commit}"
        ),
        // A build without .git (an unpacked tarball) has no commit to name.
        None => assert_eq!(VERSION, env!("CARGO_PKG_VERSION")),
    }
}

#[test]
fn bwrap_keeps_bubblewraps_conventions() {
    let unknown = mode_run("bwrap", &["--bogus"]);
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert_eq!(unknown.stderr, "bwrap: Unknown option --bogus\n");
    let bad = mode_run("bwrap", &["--uid", "someone", "true"]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.starts_with("bwrap: "), "{bad:?}");
    let none = mode_run("bwrap", &[]);
    assert_eq!(none.code, 1, "{none:?}");
    assert!(none.stderr.starts_with("usage: codexbox bwrap"), "{none:?}");
    let version = mode_run("bwrap", &["--version"]);
    assert_eq!(
        version.stdout_text(),
        format!("bubblewrap 0.11.0 (built into codexbox {VERSION})\n")
    );
}

#[test]
fn a_command_that_cannot_run_exits_127_or_126_as_in_a_shell() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path().to_str().expect("utf-8");
    let not_executable = dir.path().join("data");
    std::fs::write(&not_executable, "text").expect("write");
    let not_executable = not_executable.to_str().expect("utf-8");
    let helper = |program: &str| {
        run(
            &[
                "linux-sandbox",
                "--sandbox-policy-cwd",
                cwd,
                "--permission-profile",
                "danger-full-access",
                "--",
                program,
            ],
            None,
        )
    };
    let direct = |program: &str| {
        run(
            &[
                "sandbox",
                "-P",
                "danger-full-access",
                "-C",
                cwd,
                "--",
                program,
            ],
            None,
        )
    };
    for (what, runner) in [
        ("linux-sandbox", &helper as &dyn Fn(&str) -> Run),
        ("sandbox", &direct),
    ] {
        let missing = runner("/no/such/program");
        assert_eq!(missing.code, 127, "{what}: {missing:?}");
        assert!(missing.stderr.contains("/no/such/program"), "{missing:?}");
        let refused = runner(not_executable);
        assert_eq!(refused.code, 126, "{what}: {refused:?}");
    }
}

#[test]
fn a_flag_after_the_required_ones_is_not_taken_for_the_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let out = run(
        &[
            "linux-sandbox",
            "--sandbox-policy-cwd",
            dir.path().to_str().expect("utf-8"),
            "--permission-profile",
            "danger-full-access",
            "--bogus",
            "touch",
            marker.to_str().expect("utf-8"),
        ],
        None,
    );
    assert_usage_error(&out, "codex-linux-sandbox", "'--bogus'", "linux-sandbox");
    assert!(!marker.exists());
    let help = run(&["linux-sandbox", "--help"], None).stdout_text();
    let usage = help
        .lines()
        .find(|line| line.starts_with("Usage:"))
        .unwrap_or_default();
    assert!(
        usage.contains("--sandbox-policy-cwd <DIR>") && !usage.contains("[--sandbox-policy-cwd"),
        "required in the usage line: {usage}"
    );
}

#[test]
fn flags_that_would_do_nothing_are_refused_by_name() {
    for (args, name, flag) in [
        (
            &["proxy", "--deny", "x.test"][..],
            "codexbox proxy",
            "--deny",
        ),
        (&["proxy", "--mode", "limited"], "codexbox proxy", "--mode"),
        (
            &["proxy", "--allow-local-binding"],
            "codexbox proxy",
            "--allow-local-binding",
        ),
        (
            &["sandbox", "--mode", "limited", "--", "true"],
            "codexbox sandbox",
            "--mode",
        ),
        (
            &["sandbox", "--resolve", "a.test=127.0.0.1", "--", "true"],
            "codexbox sandbox",
            "--resolve",
        ),
        (
            &[
                "sandbox",
                "--proxy",
                "http://127.0.0.1:9",
                "--allow",
                "a.test",
                "--",
                "true",
            ],
            "codexbox sandbox",
            "--allow",
        ),
    ] {
        let out = run(args, None);
        assert_usage_error(&out, name, flag, &format!("{args:?}"));
        assert!(out.stderr.contains("no effect"), "{out:?}");
    }
    // The policy's refusals name the flag, not an internal field.
    for args in [
        &["proxy", "--deny", "*"][..],
        &["sandbox", "--allow-domain", "exa mple.com", "--", "true"],
    ] {
        let out = run(args, None);
        assert_eq!(out.code, 2, "{out:?}");
        assert!(!out.stderr.contains("network."), "{out:?}");
        assert!(out.stderr.contains("--deny") || out.stderr.contains("--allow"));
    }
}

#[test]
fn a_refused_listen_address_is_a_usage_error_in_every_mode() {
    for (args, name) in [
        (
            &["exec-server", "--listen", "ws://0.0.0.0:0"][..],
            "codexbox exec-server",
        ),
        (&["proxy", "--listen", "0.0.0.0:0"], "codexbox proxy"),
        (
            &["rendezvous", "--listen", "0.0.0.0:0"],
            "codexbox rendezvous",
        ),
        (
            &[
                "connect",
                "--listen",
                "ws://0.0.0.0:0",
                "--registry",
                "http://127.0.0.1:9",
                "--environment-id",
                "e",
            ],
            "codexbox connect",
        ),
    ] {
        let out = run(args, None);
        assert_usage_error(&out, name, "0.0.0.0", &format!("{args:?}"));
    }
    let out = run(&["exec-server", "--listen", "http://127.0.0.1:0"], None);
    assert_usage_error(&out, "codexbox exec-server", "unix:///", "http listen");
}

#[test]
fn log_lines_written_to_a_file_carry_no_colour() {
    let mut cmd = command(&["exec-server", "--listen", "stdio"]);
    cmd.env("RUST_LOG", "codexbox::wire=trace")
        .env_remove("NO_COLOR");
    let out = finish(
        &mut cmd,
        Some(b"{\"id\":1,\"method\":\"initialize\",\"params\":{\"clientName\":\"t\"}}\n".to_vec()),
        "exec-server --listen stdio",
    );
    assert!(out.stderr.contains("codexbox::wire"), "{out:?}");
    assert!(!out.stderr.contains('\x1b'), "{out:?}");
}

#[test]
fn install_links_needs_the_directory_and_can_run_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no/such");
    let out = run(&["install-links", missing.to_str().expect("utf-8")], None);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no/such: not a directory"), "{out:?}");
    assert!(!missing.exists(), "the directory was not created");

    let links = dir.path().join("bin");
    std::fs::create_dir(&links).expect("mkdir");
    let links_arg = links.to_str().expect("utf-8");
    for _ in 0..2 {
        let out = run(&["install-links", links_arg], None);
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(out.stdout_text().lines().count(), 4, "{out:?}");
    }
    let alias = run_path(&links.join("codex-exec-server"), &["--bogus"]);
    assert_usage_error(&alias, "codex-exec-server", "'--bogus'", "alias");

    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(other.join("bwrap"), "mine").expect("write");
    let other_arg = other.to_str().expect("utf-8");
    let out = run(&["install-links", other_arg], None);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("--force"), "{out:?}");
    assert!(out.stderr.contains("other/bwrap"), "{out:?}");
    let names = |dir: &Path| {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(&other), ["bwrap"], "nothing changed");
    let out = run(&["install-links", "--force", other_arg], None);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(names(&other).len(), 4);
    assert!(std::fs::read_link(other.join("bwrap")).is_ok());
}

/// Runs the binary through `path` (an alias symlink).
fn run_path(path: &Path, args: &[&str]) -> Run {
    let mut cmd = std::process::Command::new(path);
    cmd.args(args);
    finish(&mut cmd, None, &format!("{} {args:?}", path.display()))
}

#[test]
fn every_mode_has_completions_and_a_man_page() {
    let modes = listed_modes();
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&["completions", shell], None);
        assert_eq!(out.code, 0, "{shell}: {out:?}");
        let script = out.stdout_text();
        for mode in &modes {
            assert!(script.contains(mode), "{shell} completes {mode}");
        }
        // Options of the modes, the built-in bwrap's included.
        for option in [
            "sandbox-policy-cwd",
            "environment-id",
            "ro-bind",
            "after-seq",
        ] {
            assert!(script.contains(option), "{shell} completes --{option}");
        }
    }
    let pages = man::pages().expect("man pages");
    for mode in &modes {
        let file = format!("codexbox-{mode}.1");
        let page = pages
            .iter()
            .find(|(name, _)| *name == file)
            .unwrap_or_else(|| panic!("no {file}"));
        let text = String::from_utf8_lossy(&page.1);
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{file}");
        assert!(text.contains("SYNOPSIS"), "{file}");
        // Every option the mode's --help describes (bwrap's from
        // bubblewrap's usage text; the usage line also names hidden legacy
        // spellings) is on its page; roff writes a hyphen as `\-` and
        // switches fonts with `\fB`, `\fI`, `\fR`.
        let plain = ["\\fB", "\\fI", "\\fR"]
            .iter()
            .fold(text.replace("\\-", "-"), |page, font| {
                page.replace(font, " ")
            });
        let documented = long_flags(&plain);
        let help = mode_help(mode);
        let described = help
            .lines()
            .filter(|line| !line.starts_with("Usage:"))
            .collect::<Vec<_>>()
            .join("\n");
        let missing: Vec<String> = long_flags(&described)
            .difference(&documented)
            .cloned()
            .collect();
        assert!(missing.is_empty(), "{file} lacks {missing:?}");
    }
    assert!(pages.iter().any(|(name, _)| name == "codexbox.1"));
}
