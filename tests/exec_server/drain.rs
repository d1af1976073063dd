//! Graceful drain on SIGTERM (`--drain-grace-secs`), with the real binary:
//! a remote executor refuses new streams while its running processes
//! finish and then exits; when the grace period runs out the trees are
//! killed; a listening server stops accepting connections and refuses new
//! processes on the ones it has; SIGINT still stops at once.

use crate::common::client::{is_gone, output_of, pids_in, sh, wait_gone, Fifo, Raw, Server};
use crate::common::relay::{Executor, Rendezvous};
use crate::common::shell::{release, run, Streaming};

fn terminate(pid: u32, signal: i32) {
    // SAFETY: kill takes a pid and a signal number, no pointers.
    unsafe { libc::kill(pid as i32, signal) };
}

#[test]
fn a_draining_executor_refuses_new_streams_and_lets_running_processes_finish() {
    let rendezvous = Rendezvous::start(&[]);
    let mut executor = Executor::start(
        &rendezvous.url,
        "drain-env",
        &["--drain-grace-secs", "60"],
        &[],
    );
    let fifo = Fifo::new();
    let target = [
        "--registry",
        rendezvous.url.as_str(),
        "--environment-id",
        "drain-env",
    ];
    let script = format!(
        "echo started; read x < {}; echo finished; exit 5",
        fifo.path_str()
    );
    let mut args = vec!["exec"];
    args.extend_from_slice(&target);
    args.extend(["--", "sh", "-c", &script]);
    let running = Streaming::start(&args, false);
    running.wait_for("started\n");

    terminate(executor.proc.child.id(), libc::SIGTERM);
    executor.proc.wait_stderr("draining", 1);
    // A new stream is refused…
    let mut args = vec!["exec"];
    args.extend_from_slice(&target);
    args.extend(["--", "echo", "too late"]);
    let refused = run(&args, None);
    assert_eq!(refused.code, 255, "{refused:?}");
    assert!(!refused.stdout_text().contains("too late"));
    // …while the running process goes on to its end, seen by its client.
    assert!(
        executor.proc.child.try_wait().ok().flatten().is_none(),
        "exited too early"
    );
    release(&fifo.path, b"go\n");
    let done = running.finish();
    assert_eq!(done.code, 5, "{done:?}");
    assert_eq!(done.stdout_text(), "started\nfinished\n");
    let status = executor
        .proc
        .wait()
        .expect("the executor exits after the drain");
    assert!(status.success(), "{status:?}: {}", executor.proc.stderr());
}

#[test]
fn when_the_grace_period_ends_the_trees_are_killed() {
    let rendezvous = Rendezvous::start(&[]);
    let mut executor = Executor::start(
        &rendezvous.url,
        "drain-short",
        &["--drain-grace-secs", "1"],
        &[],
    );
    let running = Streaming::start(
        &[
            "exec",
            "--registry",
            &rendezvous.url,
            "--environment-id",
            "drain-short",
            "--reconnect-secs",
            "1",
            "--",
            "sh",
            "-c",
            "sleep 1000 & echo pid:$!; wait",
        ],
        false,
    );
    running.wait_for("pid:");
    let grandchild = pids_in(&String::from_utf8_lossy(&running.stdout()))
        .first()
        .copied()
        .expect("the background pid");
    terminate(executor.proc.child.id(), libc::SIGTERM);
    let status = executor
        .proc
        .wait()
        .expect("the executor exits after the grace period");
    assert!(status.success(), "{status:?}: {}", executor.proc.stderr());
    assert!(executor
        .proc
        .stderr()
        .contains("drain over before every process finished"));
    assert!(is_gone(grandchild), "pid {grandchild} outlived the drain");
    drop(running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_takes_no_new_connection_or_process() {
    let mut server = Server::start(&["--drain-grace-secs", "60"]);
    let mut client = Raw::connect(&server.url).await;
    client.handshake().await;
    let fifo = Fifo::new();
    client
        .call(
            "process/start",
            sh(
                "p1",
                &format!("echo started; read x < {}; echo finished", fifo.path_str()),
            ),
        )
        .await;
    terminate(server.pid(), libc::SIGTERM);
    // The listener goes away…
    let addr = server.url.trim_start_matches("ws://").to_owned();
    let deadline = std::time::Instant::now() + crate::common::client::WAIT;
    while std::net::TcpStream::connect(&addr).is_ok() {
        assert!(std::time::Instant::now() < deadline, "still accepting");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // …and the open connection may not start anything new.
    let mut attempt = 0;
    let (code, message) = loop {
        attempt += 1;
        let response = client
            .request("process/start", sh(&format!("late{attempt}"), "true"))
            .await;
        if let Some(error) = crate::common::client::error_of(&response) {
            break error;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process/start still works"
        );
    };
    assert_eq!(code, -32600);
    assert!(message.contains("shutting down"), "{message}");
    fifo.write(b"go\n").await;
    let events = client.events_until_closed("p1").await;
    assert_eq!(output_of(&events), "started\nfinished\n");
    client.close().await;
    let status = server.wait().expect("the server exits after the drain");
    assert!(status.success(), "{status:?}: {}", server.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_a_drain_stops_at_once() {
    let mut server = Server::start(&["--drain-grace-secs", "600"]);
    let mut client = Raw::connect(&server.url).await;
    client.handshake().await;
    client
        .call("process/start", sh("p1", "sleep 1000 & echo pid:$!; wait"))
        .await;
    let events = client.output_until("p1", "pid:").await;
    let pid = pids_in(&output_of(&events))[0];
    terminate(server.pid(), libc::SIGTERM);
    let addr = server.url.trim_start_matches("ws://").to_owned();
    let deadline = std::time::Instant::now() + crate::common::client::WAIT;
    while std::net::TcpStream::connect(&addr).is_ok() {
        assert!(std::time::Instant::now() < deadline, "still accepting");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    terminate(server.pid(), libc::SIGINT);
    let status = server.wait().expect("SIGINT ends the drain");
    assert!(status.success(), "{status:?}");
    wait_gone(pid).await;
}
