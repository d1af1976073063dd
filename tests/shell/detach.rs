//! Start, go away, come back: `exec --detach` keeps its command for the
//! grace period it asks for (bounded by the server's maximum) and says how
//! long; the `attach` command it prints is complete and runs as pasted;
//! `codexbox ps` lists what there is to attach to; and through a registry a
//! client that exits closes its stream at once (attach works right away,
//! `/readyz` counts no stream of it), while one that was killed loses its
//! session to the next `attach` once it fails to answer (and one that
//! lives keeps it).

use serde_json::Value;

use crate::common::client::{Fifo, Server};
use crate::common::relay::{Executor, Rendezvous};
use crate::common::shell::{pasted, release, run, Run, Streaming};

/// `exec TARGET… --detach [EXTRA…] -- sh -c SCRIPT`.
fn detach(target: &[&str], extra: &[&str], script: &str) -> Run {
    let mut args = vec!["exec"];
    args.extend_from_slice(target);
    args.push("--detach");
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", script]);
    run(&args, None)
}

/// The `codexbox attach …` line a detached exec printed.
fn attach_line(out: &Run) -> String {
    assert_eq!(out.code, 0, "{out:?}");
    let line = out.stdout_text().trim_end().to_owned();
    assert!(line.starts_with("codexbox attach "), "{out:?}");
    line
}

/// `ps TARGET… --json`: the sessions listed.
fn ps_json(target: &[&str]) -> Vec<Value> {
    let mut args = vec!["ps"];
    args.extend_from_slice(target);
    args.push("--json");
    let out = run(&args, None);
    assert_eq!(out.code, 0, "{out:?}");
    let value: Value = serde_json::from_slice(&out.stdout).expect("ps --json");
    value["sessions"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_detached_command_outlives_the_servers_grace_period_for_as_long_as_asked() {
    let server = Server::start(&[
        "--session-grace-secs",
        "0",
        "--max-session-grace-secs",
        "7200",
    ]);
    let target = ["--url", server.url.as_str()];
    let fifo = Fifo::new();
    let script = format!(
        "echo early; read x < {}; echo late; exit 6",
        fifo.path_str()
    );
    let out = detach(&target, &[], &script);
    let line = attach_line(&out);
    assert!(
        line.starts_with(&format!("codexbox attach --url {} --session ", server.url)),
        "{line}"
    );
    assert!(
        out.stderr.contains(
            "detached; the server keeps the command for 1 h after its last client leaves"
        ),
        "{out:?}"
    );
    // The server's own grace period (0) would have ended it already.
    let attached = Streaming::spawn(pasted(&line), false, &line);
    attached.wait_for("early\n");
    release(&fifo.path, b"go\n");
    let done = attached.finish();
    assert_eq!(done.code, 6, "{done:?}");
    assert_eq!(done.stdout_text(), "early\nlate\n");
    // Asking for more than the server allows gets its maximum.
    let bounded = detach(&target, &["--session-grace-secs", "99999"], "true");
    assert!(
        bounded.stderr.contains("keeps the command for 2 h after"),
        "{bounded:?}"
    );
}

#[test]
fn ps_lists_what_there_is_to_attach_to_and_not_itself() {
    let server = Server::start(&[]);
    let target = ["--url", server.url.as_str()];
    let fifo = Fifo::new();
    let waiting = attach_line(&detach(
        &target,
        &[],
        &format!("read x < {}", fifo.path_str()),
    ));
    attach_line(&detach(&target, &[], "exit 3"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let sessions = loop {
        let sessions = ps_json(&target);
        let states: Vec<&str> = sessions
            .iter()
            .filter_map(|s| s["processes"][0]["state"].as_str())
            .collect();
        // Every earlier `ps` went away with itself.
        assert_eq!(sessions.len(), 2, "{sessions:?}");
        if states.contains(&"closed") {
            break sessions;
        }
        assert!(std::time::Instant::now() < deadline, "{sessions:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    for session in &sessions {
        assert_eq!(session["attached"], false, "{session}");
        assert_eq!(session["sessionGraceSecs"], 3600, "{session}");
        let process = &session["processes"][0];
        assert_eq!(process["argv"][0], "sh", "{session}");
        let id = format!(
            "--session {} --process {}",
            session["sessionId"].as_str().unwrap_or("?"),
            process["processId"].as_str().unwrap_or("?")
        );
        match process["state"].as_str() {
            Some("running") => assert!(waiting.contains(&id), "{waiting} {session}"),
            Some("closed") => assert_eq!(process["exitCode"], 3, "{session}"),
            other => panic!("state {other:?}: {session}"),
        }
    }
    let table = run(&["ps", "--url", &server.url], None);
    assert_eq!(table.code, 0, "{table:?}");
    let text = table.stdout_text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("SESSION "), "{text}");
    assert_eq!(lines.len(), 3, "{text}");
    assert!(text.contains("closed 3  sh -c 'exit 3'"), "{text}");
    assert!(
        lines[1..]
            .iter()
            .all(|line| line.contains("  none, ") && line.contains(" left  exec-")),
        "{text}"
    );
    assert!(
        table.stderr.contains(&format!(
            "follow one with: codexbox attach --url {} --session SESSION --process PROCESS",
            server.url
        )),
        "{table:?}"
    );
    release(&fifo.path, b"go\n");
}

/// Waits (bounded, well below the rendezvous's hold) until no stream is left.
fn wait_no_streams(rendezvous: &Rendezvous) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while rendezvous.streams() != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "streams: {}",
            rendezvous.streams()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn through_a_registry_attach_works_right_after_detach_and_no_stream_is_left() {
    // Streams of lost harnesses would be held for ten minutes.
    let rendezvous = Rendezvous::start(&["--resume-hold-secs", "600"]);
    let _executor = Executor::start(&rendezvous.url, "detach-env", &[], &[]);
    let target = [
        "--registry",
        rendezvous.url.as_str(),
        "--environment-id",
        "detach-env",
    ];
    let fifo = Fifo::new();
    let script = format!(
        "echo first; read x < {}; echo second; exit 6",
        fifo.path_str()
    );
    let line = attach_line(&detach(&target, &[], &script));
    assert!(
        line.starts_with(&format!(
            "codexbox attach --registry {} --environment-id detach-env --session ",
            rendezvous.url
        )),
        "{line}"
    );
    wait_no_streams(&rendezvous);
    let attached = Streaming::spawn(pasted(&line), false, &line);
    attached.wait_for("first\n");
    release(&fifo.path, b"go\n");
    let done = attached.finish();
    assert_eq!(done.code, 6, "{done:?}");
    assert_eq!(done.stdout_text(), "first\nsecond\n");
    wait_no_streams(&rendezvous);
}

#[test]
fn through_a_registry_attach_takes_over_from_a_client_that_was_killed() {
    let rendezvous = Rendezvous::start(&["--resume-hold-secs", "600"]);
    let _executor = Executor::start(
        &rendezvous.url,
        "killed-env",
        &["--takeover-probe-ms", "300"],
        &[],
    );
    let target = [
        "--registry",
        rendezvous.url.as_str(),
        "--environment-id",
        "killed-env",
    ];
    let fifo = Fifo::new();
    let script = format!(
        "echo started; read x < {}; echo after; exit 4",
        fifo.path_str()
    );
    let mut args = vec!["exec"];
    args.extend_from_slice(&target);
    args.extend(["--", "sh", "-c", &script]);
    let running = Streaming::start(&args, false);
    running.wait_for("started\n");
    let sessions = ps_json(&target);
    let [session] = sessions.as_slice() else {
        panic!("one session: {sessions:?}");
    };
    assert_eq!(session["attached"], true, "{session}");
    let (session_id, process_id) = (
        session["sessionId"].as_str().unwrap_or_default().to_owned(),
        session["processes"][0]["processId"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    );
    let mut attach = vec!["attach"];
    attach.extend_from_slice(&target);
    attach.extend([
        "--session",
        &session_id,
        "--process",
        &process_id,
        "--from-start",
    ]);
    // While it lives, its stream answers the probe: it keeps its session.
    let refused = run(&attach, None);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("is already attached to another connection, which still answers"),
        "{refused:?}"
    );
    // Killed: no clean close, its stream held by the rendezvous.
    running.signal(libc::SIGKILL);
    drop(running);
    let attached = Streaming::start(&attach, false);
    attached.wait_for("started\n");
    release(&fifo.path, b"go\n");
    let done = attached.finish();
    assert_eq!(done.code, 4, "{done:?}");
    assert_eq!(done.stdout_text(), "started\nafter\n");
}
