//! `exec` can always be left, and says what became of the command: `-t`
//! without a terminal here warns and runs without one (stdin sent); a
//! second Ctrl-C stops it; SIGTERM is passed on and a command that ignores
//! it is killed once its time is up (one that obeys ends with its own
//! status); what an exited command left running is killed too; and a
//! connection lost for good is one sentence, then a pasteable way back.

use serde_json::Value;

use crate::common::client::{pids_in, Server};
use crate::common::shell::{run, wait_gone_blocking, Streaming};

fn exec_args<'a>(url: &'a str, extra: &[&'a str], script: &'a str) -> Vec<&'a str> {
    let mut args = vec!["exec", "--url", url];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", script]);
    args
}

/// Waits until the front end printed a `pid:N` line; returns N.
fn first_pid(running: &Streaming) -> u32 {
    running.wait_for("pid:");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(pid) = pids_in(&String::from_utf8_lossy(&running.stdout())).first() {
            return *pid;
        }
        assert!(std::time::Instant::now() < deadline, "no whole pid line");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn tty_without_a_terminal_warns_and_runs_without_one() {
    let server = Server::start(&[]);
    let out = run(
        &["exec", "-t", "--url", &server.url, "--", "sh"],
        Some(b"echo hi-$((6*7)); tty; exit 5\n".to_vec()),
    );
    assert_eq!(out.code, 5, "{out:?}");
    assert_eq!(out.stdout_text(), "hi-42\nnot a tty\n");
    assert!(
        out.stderr
            .starts_with("codexbox exec: stdin is not a terminal: the command runs without one"),
        "{out:?}"
    );
}

#[test]
fn a_second_ctrl_c_stops_exec_and_kills_the_command() {
    let server = Server::start(&[]);
    let script = "trap 'echo got-int' INT; echo pid:$$; while :; do sleep 0.05; done";
    let running = Streaming::start(&exec_args(&server.url, &[], script), false);
    let pid = first_pid(&running);
    running.signal(libc::SIGINT);
    // The first one reached the command, which ignores it.
    running.wait_for("got-int");
    running.signal(libc::SIGINT);
    let done = running.finish();
    assert_eq!(done.code, 128 + libc::SIGINT, "{done:?}");
    assert_eq!(
        done.stderr, "codexbox exec: stopped by SIGINT; the command was killed\n",
        "{done:?}"
    );
    wait_gone_blocking(pid);
}

#[test]
fn sigterm_is_passed_on_and_a_command_that_ignores_it_is_killed() {
    let server = Server::start(&[]);
    let script = "trap 'echo got-term' TERM; echo pid:$$; while :; do sleep 0.05; done";
    let running = Streaming::start(
        &exec_args(&server.url, &["--stop-grace-ms", "200"], script),
        false,
    );
    let pid = first_pid(&running);
    running.signal(libc::SIGTERM);
    let done = running.finish();
    assert_eq!(done.code, 128 + libc::SIGTERM, "{done:?}");
    assert!(done.stdout_text().contains("got-term"), "{done:?}");
    // (The remote shell may report its `sleep` terminated first.)
    assert!(
        done.stderr
            .ends_with("\ncodexbox exec: stopped by SIGTERM; the command was killed\n")
            || done.stderr == "codexbox exec: stopped by SIGTERM; the command was killed\n",
        "{done:?}"
    );
    wait_gone_blocking(pid);
}

#[test]
fn sigterm_lets_a_command_that_obeys_it_end_with_its_own_status() {
    let server = Server::start(&[]);
    let script = "trap 'echo bye; exit 9' TERM; echo pid:$$; while :; do sleep 0.05; done";
    let running = Streaming::start(
        &exec_args(&server.url, &["--stop-grace-ms", "600000"], script),
        false,
    );
    first_pid(&running);
    running.signal(libc::SIGTERM);
    let done = running.finish();
    assert_eq!(done.code, 9, "{done:?}");
    assert!(done.stdout_text().ends_with("bye\n"), "{done:?}");
    assert!(!done.stderr.contains("codexbox"), "{done:?}");
}

/// The state `codexbox ps` reports for process `process` of `url`.
fn state_of(url: &str, process: &str) -> Option<String> {
    let listed = run(&["ps", "--url", url, "--json"], None);
    assert_eq!(listed.code, 0, "{listed:?}");
    let value: Value = serde_json::from_slice(&listed.stdout).expect("ps --json");
    value["sessions"]
        .as_array()?
        .iter()
        .flat_map(|session| session["processes"].as_array().cloned().unwrap_or_default())
        .find(|p| {
            p["processId"]
                .as_str()
                .is_some_and(|id| id.starts_with(process))
        })
        .and_then(|p| p["state"].as_str().map(str::to_owned))
}

#[test]
fn stopping_kills_what_an_exited_command_left_holding_its_output() {
    let server = Server::start(&[]);
    // The shell exits at once; its background child keeps stdout open.
    let script = "sleep 1000 & echo pid:$!";
    let running = Streaming::start(
        &exec_args(&server.url, &["--stop-grace-ms", "100"], script),
        false,
    );
    let orphan = first_pid(&running);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while state_of(&server.url, "exec-").as_deref() != Some("exited") {
        assert!(std::time::Instant::now() < deadline, "never exited");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    running.signal(libc::SIGTERM);
    let done = running.finish();
    assert_eq!(done.code, 128 + libc::SIGTERM, "{done:?}");
    assert_eq!(
        done.stderr,
        "codexbox exec: stopped by SIGTERM; the command had already exited, and what it left running was killed\n",
        "{done:?}"
    );
    wait_gone_blocking(orphan);
}

#[test]
fn a_connection_lost_for_good_is_one_sentence_then_a_pasteable_way_back() {
    let mut server = Server::start(&[]);
    let script = "echo ready; exec sleep 1000";
    let running = Streaming::start(
        &exec_args(&server.url, &["--reconnect-secs", "1"], script),
        false,
    );
    running.wait_for("ready");
    server.kill_hard();
    let done = running.finish();
    assert_eq!(done.code, 255, "{done:?}");
    let lines: Vec<&str> = done.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{done:?}");
    assert!(
        lines[0].starts_with(
            "codexbox exec: lost the connection to the exec-server and could not reconnect within 1 s (last attempt: cannot connect to ws://"
        ) && lines[0].ends_with(").")
            && !lines[0].contains("in flight"),
        "{done:?}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "codexbox exec: the command may still be running (for the session's grace period); to continue: codexbox attach --url {} --session ",
            server.url
        )),
        "{done:?}"
    );
}
