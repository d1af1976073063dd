//! `codexbox exec -t` in a real terminal: a tmux pane runs a local `sh`,
//! which runs `codexbox exec -t -- sh` against a real server. Checked from
//! what the pane shows (bounded polling of `capture-pane`): the remote
//! prompt, keys echoed and commands run, a full-screen program redrawn
//! after the window is resized, and the local terminal's settings exactly
//! as before (`stty -g`) after the remote shell exits and after the server
//! is killed under it.

use std::path::Path;

use crate::common::client::{Server, BIN};
use crate::common::shell::{have_tmux, Tmux};

/// A curses program that fills the screen with its size and redraws it
/// whenever the terminal changes size; `q` quits.
const REDRAW: &str = r#"
import curses
def main(screen):
    while True:
        screen.clear()
        rows, cols = screen.getmaxyx()
        screen.addstr(rows // 2, 0, "size %dx%d" % (rows, cols))
        screen.addstr(rows - 1, 0, "bottom line")
        screen.refresh()
        if screen.getch() == ord("q"):
            return
curses.wrapper(main)
"#;

/// The local terminal's settings, as `stty -g` prints them, saved by the
/// pane's shell into `file`.
fn saved_settings(tmux: &Tmux, file: &Path) -> String {
    let _ = std::fs::remove_file(file);
    tmux.type_line(&format!(
        "stty -g > {}; echo saved-$((40+2))",
        file.display()
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "stty -g never wrote {}; the pane shows:\n{}",
            file.display(),
            tmux.screen()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn exec_line(url: &str, extra: &str) -> String {
    format!("{BIN} exec -t --url {url} {extra} -e 'PS1=remote$ ' -- sh")
}

#[test]
fn an_interactive_shell_works_and_the_terminal_comes_back_as_it_was() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("redraw.py");
    std::fs::write(&script, REDRAW).expect("write the curses program");
    let server = Server::start(&[]);
    let tmux = Tmux::start(100, 30, dir.path());
    let before = saved_settings(&tmux, &dir.path().join("before"));
    assert!(before.contains(':'), "{before:?}");

    tmux.type_line(&exec_line(&server.url, ""));
    tmux.wait_for_prompt("remote$");
    // Keys reach the remote shell as typed and its output comes back.
    tmux.type_line("echo hel''lo-$((6*7))");
    tmux.wait_for("hello-42");
    tmux.type_line("stty size; tty");
    let screen = tmux.wait_for("/dev/pts/");
    assert!(
        screen.contains("30 100"),
        "the remote size is not the pane's:\n{screen}"
    );

    // A full-screen program, redrawn after a resize.
    tmux.type_line(&format!("python3 {}", script.display()));
    let screen = tmux.wait_for("size 30x100");
    assert!(screen.contains("bottom line"), "{screen}");
    tmux.resize(120, 40);
    // The redraw reaches the pane in pieces: wait for its last row too.
    tmux.wait_until("a redraw at 40x120", |screen| {
        screen.contains("size 40x120")
            && screen
                .lines()
                .nth(39)
                .is_some_and(|row| row.contains("bottom line"))
    });
    tmux.keys(&["q"]);
    // curses discards typed-ahead keys when it leaves: wait for the prompt.
    tmux.wait_for_prompt("remote$");
    tmux.type_line("stty size");
    tmux.wait_for("40 120");

    // Ctrl-C goes to the remote terminal, not to codexbox. Each step waits
    // for the state the next one needs: the command running (its first
    // line shown) before Ctrl-C, the prompt back before typing on.
    tmux.type_line("echo sleep-$((2+2)); sleep 30; echo not-inter''rupted");
    tmux.wait_for("sleep-4");
    tmux.keys(&["C-c"]);
    tmux.wait_for_prompt("remote$");
    tmux.type_line("echo after-$((1+1))");
    let screen = tmux.wait_for("after-2");
    assert!(!screen.contains("not-interrupted"), "{screen}");

    tmux.type_line("exit 3");
    tmux.wait_for_prompt("local$");
    tmux.type_line("echo rc=$?");
    tmux.wait_for("rc=3");
    let after = saved_settings(&tmux, &dir.path().join("after"));
    assert_eq!(before, after, "the terminal settings changed");
}

#[test]
fn the_terminal_comes_back_when_the_server_is_killed() {
    if !have_tmux() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut server = Server::start(&[]);
    let tmux = Tmux::start(80, 24, dir.path());
    let before = saved_settings(&tmux, &dir.path().join("before"));

    tmux.type_line(&exec_line(&server.url, "--reconnect-secs 1"));
    tmux.wait_for_prompt("remote$");
    tmux.type_line("echo alive-$((2+3))");
    tmux.wait_for("alive-5");
    server.kill_hard();
    tmux.wait_for("lost the connection");
    tmux.wait_for_prompt("local$");
    tmux.type_line("echo rc=$?");
    tmux.wait_for("rc=255");
    let after = saved_settings(&tmux, &dir.path().join("after"));
    assert_eq!(before, after, "raw mode was left on");
}
