//! Every serving mode takes SIGINT and SIGTERM from the moment it prints its
//! stdout line: whoever read the line may signal at once, and the mode must
//! then stop cleanly (exit 0, its cleanup done), never die by the signal's
//! default action.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::common::client::BIN;

/// Rounds per mode: the window the test guards against is narrow.
const ROUNDS: usize = 5;

fn start(args: &[&str]) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn codexbox");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the stdout line");
    (child, line)
}

fn signalled_at_once_exits_cleanly(args: &[&str], signal: Signal) {
    for round in 0..ROUNDS {
        let (mut child, line) = start(args);
        assert!(!line.is_empty(), "{args:?} printed no line");
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
        kill(pid, signal).expect("signal");
        let status = child.wait().expect("wait");
        assert_eq!(
            status.code(),
            Some(0),
            "{args:?}, round {round}: {signal} right after {line:?} gave {status}"
        );
    }
}

#[test]
fn the_exec_server_stops_cleanly_when_signalled_right_after_its_line() {
    let args = ["exec-server", "--listen", "ws://127.0.0.1:0"];
    signalled_at_once_exits_cleanly(&args, Signal::SIGTERM);
    signalled_at_once_exits_cleanly(&args, Signal::SIGINT);
}

#[test]
fn the_proxy_stops_cleanly_when_signalled_right_after_its_line() {
    let args = ["proxy", "--allow", "example.test"];
    signalled_at_once_exits_cleanly(&args, Signal::SIGTERM);
    signalled_at_once_exits_cleanly(&args, Signal::SIGINT);
}

#[test]
fn the_rendezvous_stops_cleanly_when_signalled_right_after_its_line() {
    let args = [
        "rendezvous",
        "--listen",
        "127.0.0.1:0",
        "--insecure-no-auth",
    ];
    signalled_at_once_exits_cleanly(&args, Signal::SIGTERM);
}

#[test]
fn connect_stops_cleanly_when_signalled_right_after_its_line() {
    let args = [
        "connect",
        "--registry",
        "http://127.0.0.1:9",
        "--environment-id",
        "stop-test",
    ];
    signalled_at_once_exits_cleanly(&args, Signal::SIGTERM);
}
