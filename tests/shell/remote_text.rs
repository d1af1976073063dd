//! Strings from the other end reach the terminal escaped. A remote file
//! whose name holds escape sequences (OSC title, clear screen, a C1 CSI, a
//! bidi override), copied by `cp` with its progress line on a real
//! terminal (a pty 60 columns wide, every byte read back), shows that name
//! with visible `\x1b`-style escapes, cut to the terminal's width, and no
//! control sequence but the progress line's own erase; the problem report
//! naming such a remote file, and `attach`'s error quoting the server, are
//! escaped the same way.

use std::path::Path;

use crate::common::client::Server;
use crate::common::shell::{command, run, stderr_on_terminal};

/// Everything a terminal would act on, as a remote name might hold it.
const HOSTILE: &str = "\x1b]0;pwned\x07\x1b[2J\u{9b}31m\u{202e}";
/// How [`HOSTILE`] must be shown.
const SHOWN: &str = "\\x1b]0;pwned\\x07\\x1b[2J\\u{9b}31m\\u{202e}";

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The terminal output without the progress line's own `\r` + erase.
fn without_own_sequences(seen: &[u8]) -> String {
    String::from_utf8_lossy(seen).replace("\r\x1b[K", "\r")
}

fn assert_nothing_raw(shown: &str) {
    for raw in ['\x1b', '\x07', '\u{9b}', '\u{202e}'] {
        assert!(
            !shown.contains(raw),
            "{raw:?} reached the terminal raw: {shown:?}"
        );
    }
}

#[test]
fn a_hostile_remote_name_is_shown_escaped_and_cut_to_the_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    let name = format!("{HOSTILE}{}-end.bin", "n".repeat(120));
    let remote_file = root.join(&name);
    std::fs::write(&remote_file, vec![1u8; 1 << 20]).expect("write");
    let server = Server::start(&[]);
    let copied = root.join("copied.bin");
    let cp = command(&[
        "cp",
        "--url",
        &server.url,
        &format!("remote:{}", text(&remote_file)),
        text(&copied),
    ]);
    let (code, seen) = stderr_on_terminal(cp, 60, "cp of a hostile name");
    assert_eq!(code, 0, "{:?}", String::from_utf8_lossy(&seen));
    assert_eq!(std::fs::read(&copied).ok(), Some(vec![1u8; 1 << 20]));
    let shown = without_own_sequences(&seen);
    assert_nothing_raw(&shown);
    let progress: Vec<&str> = shown
        .split(['\r', '\n'])
        .filter(|line| line.contains("ETA"))
        .collect();
    assert!(!progress.is_empty(), "no progress line: {shown:?}");
    for line in &progress {
        let cells = codexbox::terminal_text::width(line);
        assert!(cells < 60, "{cells} cells: {line:?}");
        assert!(
            line.ends_with("end.bin"),
            "the end of the name is kept: {line:?}"
        );
        assert!(line.contains('…'), "the long name was not cut: {line:?}");
    }

    // A name too long to cut away its escapes: shown whole in the report.
    let tree = root.join("tree");
    std::fs::create_dir(&tree).expect("mkdir");
    let fifo = tree.join(format!("fifo{HOSTILE}"));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let cp = command(&[
        "cp",
        "--url",
        &server.url,
        &format!("remote:{}", text(&tree)),
        text(&root.join("tree-copy")),
    ]);
    let (code, seen) = stderr_on_terminal(cp, 60, "cp of a hostile special file");
    assert_eq!(
        code,
        1,
        "the FIFO is reported: {:?}",
        String::from_utf8_lossy(&seen)
    );
    let shown = without_own_sequences(&seen);
    assert_nothing_raw(&shown);
    assert!(
        shown.contains(&format!("fifo{SHOWN}: not copied: a special file")),
        "{shown:?}"
    );
}

#[test]
fn a_server_error_quoting_a_hostile_string_is_escaped() {
    let server = Server::start(&[]);
    let session = format!("s{HOSTILE}");
    let attached = run(
        &[
            "attach",
            "--url",
            &server.url,
            "--session",
            &session,
            "--process",
            "p",
        ],
        None,
    );
    assert_eq!(attached.code, 1, "{}", attached.stderr);
    assert_nothing_raw(&attached.stderr);
    assert!(
        attached
            .stderr
            .contains(&format!("unknown session id s{SHOWN}")),
        "{:?}",
        attached.stderr
    );
}
