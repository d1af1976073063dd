//! `codexbox exec` and `codexbox attach` against real servers on 127.0.0.1:
//! exit codes and signals, stdin to EOF, large output byte-exact, env and
//! cwd, sandboxed `-P`, Ctrl-C as `process/signal interrupt`, the same
//! through a registry, a connection cut mid-stream (resumed and backfilled
//! without loss or repetition), and `--detach` + `attach`.

use crate::common::client::{Fifo, Server};
use crate::common::relay::{seq_output, Executor, Faults, Proxy, Rendezvous};
use crate::common::shell::{finish, pasted, release, run, Run, Streaming};

fn exec(url: &str, extra: &[&str], command: &[&str], stdin: Option<Vec<u8>>) -> Run {
    let mut args = vec!["exec", "--url", url];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    run(&args, stdin)
}

fn sh(url: &str, script: &str) -> Run {
    exec(url, &[], &["sh", "-c", script], None)
}

#[test]
fn exit_codes_and_signals_pass_through() {
    let server = Server::start(&[]);
    assert_eq!(sh(&server.url, "exit 0").code, 0);
    assert_eq!(sh(&server.url, "exit 3").code, 3);
    assert_eq!(sh(&server.url, "exit 255").code, 255);
    let killed = sh(&server.url, "kill -TERM $$");
    assert_eq!(killed.code, 143, "{killed:?}");
    assert_eq!(sh(&server.url, "kill -KILL $$").code, 137);
    assert_eq!(sh(&server.url, "kill -SEGV $$").code, 128 + 11);
    let missing = exec(&server.url, &[], &["/no/such/program"], None);
    assert_eq!(missing.code, 127, "{missing:?}");
    assert!(
        missing
            .stderr
            .contains("codexbox exec: cannot start `/no/such/program`"),
        "{missing:?}"
    );
}

#[test]
fn a_command_that_cannot_start_is_told_from_a_bad_directory() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::write(&data, "not a program").expect("write");
    let data = data.to_str().expect("utf-8");
    let refused = exec(&server.url, &[], &[data], None);
    assert_eq!(refused.code, 126, "{refused:?}");
    let missing_dir = exec(&server.url, &["-C", "/no/such/dir"], &["pwd"], None);
    assert_eq!(missing_dir.code, 126, "{missing_dir:?}");
    assert_eq!(
        missing_dir.stderr,
        "codexbox exec: cannot start `pwd` in /no/such/dir on the server: No such file or directory (os error 2)\n"
    );
    let file_dir = exec(&server.url, &["-C", data], &["pwd"], None);
    assert_eq!(file_dir.code, 126, "{file_dir:?}");
    assert!(
        file_dir.stderr.ends_with(": not a directory\n"),
        "{file_dir:?}"
    );
}

#[test]
fn stdout_and_stderr_stay_apart_and_large_output_is_byte_exact() {
    let server = Server::start(&[]);
    let out = sh(&server.url, "echo out; echo err >&2; echo out2");
    assert_eq!(out.stdout_text(), "out\nout2\n");
    assert_eq!(out.stderr, "err\n");
    // 24 MiB of every byte value, through base64 and the WebSocket.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blob");
    let data: Vec<u8> = (0..24u32 * 1024 * 1024)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &data).expect("write blob");
    let cat = exec(
        &server.url,
        &[],
        &["cat", file.to_str().expect("utf-8")],
        None,
    );
    assert_eq!(cat.code, 0, "{}", cat.stderr);
    assert_eq!(cat.stdout.len(), data.len());
    assert!(cat.stdout == data, "the output differs from the file");
}

#[test]
fn stdin_streams_until_eof() {
    let server = Server::start(&[]);
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let echoed = exec(&server.url, &["-i"], &["cat"], Some(input.clone()));
    assert_eq!(echoed.code, 0, "{}", echoed.stderr);
    assert!(echoed.stdout == input, "cat did not give back its stdin");
    // EOF reaches the command: it goes on after reading everything.
    let counted = exec(
        &server.url,
        &["-i"],
        &["sh", "-c", "wc -c; echo after-eof"],
        Some(b"12345".to_vec()),
    );
    assert_eq!(
        counted.stdout_text().split_whitespace().collect::<Vec<_>>(),
        ["5", "after-eof"]
    );
    // Without -i the command's stdin is /dev/null.
    let closed = exec(
        &server.url,
        &[],
        &["sh", "-c", "wc -c"],
        Some(b"ignored".to_vec()),
    );
    assert_eq!(closed.stdout_text().trim(), "0");
}

#[test]
fn env_and_working_directory_are_the_ones_asked_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir(root.join("sub")).expect("mkdir");
    let server = Server::start_in(&root);
    // Only -e with --env-policy none; a bare name takes this side's value.
    let mut args = vec!["exec", "--url", &server.url, "--env-policy", "none"];
    args.extend([
        "-e",
        "A=1",
        "-e",
        "B=x=y",
        "-e",
        "FROM_HERE",
        "--",
        "/usr/bin/env",
    ]);
    let mut command = crate::common::shell::command(&args);
    command.env("FROM_HERE", "local value");
    let env = crate::common::shell::finish(&mut command, None, "env");
    let mut lines: Vec<&str> = env
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| std::str::from_utf8(l).unwrap_or(""))
        .collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        ["A=1", "B=x=y", "FROM_HERE=local value"],
        "{}",
        env.stderr
    );
    // core: the server's PATH and HOME, then -e on top.
    let core = sh(&server.url, "echo \"$HOME|$A\"");
    assert_eq!(
        core.stdout_text(),
        format!("{}|\n", std::env::var("HOME").unwrap_or_default())
    );
    // -C relative to the server's directory, and absolute.
    let relative = exec(&server.url, &["-C", "sub"], &["pwd"], None);
    assert_eq!(
        relative.stdout_text().trim(),
        root.join("sub").to_str().unwrap_or("")
    );
    let absolute = exec(&server.url, &["-C", "/"], &["pwd"], None);
    assert_eq!(absolute.stdout_text().trim(), "/");
    let missing = exec(&server.url, &["-C", "nope"], &["pwd"], None);
    assert_eq!(missing.code, 126, "{missing:?}");
    assert!(
        missing.stderr.contains("/nope on the server"),
        "{missing:?}"
    );
}

#[test]
fn ctrl_c_without_a_terminal_interrupts_the_command() {
    let server = Server::start(&[]);
    let script = "trap 'echo got-interrupt; exit 7' INT; echo ready; while :; do sleep 0.05; done";
    let running = Streaming::start(
        &["exec", "--url", &server.url, "--", "sh", "-c", script],
        false,
    );
    running.wait_for("ready");
    running.signal(libc::SIGINT);
    let done = running.finish();
    assert_eq!(done.code, 7, "{done:?}");
    assert!(done.stdout_text().contains("got-interrupt"));
}

#[test]
fn a_permission_profile_runs_the_command_in_the_sandbox() {
    if !crate::common::sandbox::sandbox_available() {
        return;
    }
    let work = crate::common::host::dir_outside_tmp("exec-sbx");
    let ws = work.path().canonicalize().expect("canonical");
    std::fs::create_dir(ws.join("ws")).expect("mkdir");
    let outside = ws.join("outside.txt");
    let server = Server::start(&[]);
    let script = format!("echo in > inside.txt && echo out > {}", outside.display());
    let cwd = ws.join("ws");
    let sandboxed = exec(
        &server.url,
        &["-P", "workspace", "-C", cwd.to_str().unwrap_or("/")],
        &["sh", "-c", &script],
        None,
    );
    assert_ne!(sandboxed.code, 0, "{sandboxed:?}");
    assert_eq!(
        std::fs::read_to_string(cwd.join("inside.txt"))
            .ok()
            .as_deref(),
        Some("in\n")
    );
    assert!(!outside.exists(), "the sandbox let a write out");
    assert!(
        sandboxed.stderr.contains("the sandbox denied"),
        "{sandboxed:?}"
    );
    // read-only: nothing at all; no network either.
    let read_only = exec(
        &server.url,
        &["-P", "read-only", "-C", cwd.to_str().unwrap_or("/")],
        &["sh", "-c", "echo x > again.txt"],
        None,
    );
    assert_ne!(read_only.code, 0);
    assert!(!cwd.join("again.txt").exists());
    // The same command without -P writes.
    let free = exec(
        &server.url,
        &["-C", cwd.to_str().unwrap_or("/")],
        &["sh", "-c", "echo x > again.txt"],
        None,
    );
    assert_eq!(free.code, 0, "{free:?}");
    assert!(cwd.join("again.txt").exists());
    let unknown = exec(&server.url, &["-P", "no-such-profile"], &["true"], None);
    assert_eq!(unknown.code, 2, "{unknown:?}");
}

#[test]
fn exec_and_cp_work_through_a_registry() {
    let rendezvous = Rendezvous::start(&[]);
    let _executor = Executor::start(&rendezvous.url, "shell-env", &[], &[]);
    let relayed = |extra: &[&str], command: &[&str], stdin: Option<Vec<u8>>| {
        let mut args = vec![
            "exec",
            "--registry",
            &rendezvous.url,
            "--environment-id",
            "shell-env",
        ];
        args.extend_from_slice(extra);
        args.push("--");
        args.extend_from_slice(command);
        run(&args, stdin)
    };
    let out = relayed(
        &[],
        &["sh", "-c", "echo via relay; echo e >&2; exit 4"],
        None,
    );
    assert_eq!(
        (out.code, out.stdout_text().as_str(), out.stderr.as_str()),
        (4, "via relay\n", "e\n")
    );
    let input = seq_output(400_000);
    let echoed = relayed(&["-i"], &["cat"], Some(input.clone()));
    assert!(echoed.stdout == input, "{}", echoed.stderr);
    // The variables of the reference client name the environment too.
    let mut command = crate::common::shell::command(&["exec", "--", "echo", "from-variables"]);
    command
        .env("CODEX_EXEC_SERVER_NOISE_REGISTRY_URL", &rendezvous.url)
        .env("CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID", "shell-env");
    let by_env = crate::common::shell::finish(&mut command, None, "exec by variables");
    assert_eq!(
        by_env.stdout_text(),
        "from-variables\n",
        "{}",
        by_env.stderr
    );
    // cp both ways through the relay.
    let dir = tempfile::tempdir().expect("tempdir");
    let here = dir.path().canonicalize().expect("canonical");
    std::fs::write(here.join("up.bin"), seq_output(3_000_000)).expect("write");
    let target = [
        "--registry",
        &rendezvous.url,
        "--environment-id",
        "shell-env",
    ];
    let remote_copy = format!("remote:{}", here.join("copied.bin").display());
    let up = run(
        &[
            &["cp"][..],
            &target,
            &[here.join("up.bin").to_str().unwrap_or(""), &remote_copy],
        ]
        .concat(),
        None,
    );
    assert_eq!(up.code, 0, "{up:?}");
    let down = run(
        &[
            &["cp"][..],
            &target,
            &[&remote_copy, here.join("down.bin").to_str().unwrap_or("")],
        ]
        .concat(),
        None,
    );
    assert_eq!(down.code, 0, "{down:?}");
    assert!(std::fs::read(here.join("down.bin")).ok() == Some(seq_output(3_000_000)));
    // A registry without the environment: a clear error, exit 255.
    let nowhere = run(
        &[
            "exec",
            "--registry",
            &rendezvous.url,
            "--environment-id",
            "absent",
            "--reconnect-secs",
            "1",
            "--",
            "true",
        ],
        None,
    );
    assert_eq!(nowhere.code, 255, "{nowhere:?}");
    assert!(nowhere.stderr.starts_with("codexbox exec: "), "{nowhere:?}");
}

/// The output of `seq FROM TO`.
fn seq_lines(from: u64, to: u64) -> String {
    (from..=to).map(|i| format!("{i}\n")).collect()
}

#[test]
fn a_cut_connection_resumes_without_losing_or_repeating_output() {
    let server = Server::start(&[]);
    let proxy = Proxy::start(Faults::default(), 7);
    proxy.set_target(
        server
            .url
            .trim_start_matches("ws://")
            .parse()
            .expect("addr"),
    );
    let fifo = Fifo::new();
    let url = format!("ws://{}", proxy.addr);
    let script = format!(
        "seq 1 50000; echo marker; read x < {}; seq 50001 100000",
        fifo.path_str()
    );
    let running = Streaming::start(&["exec", "--url", &url, "--", "sh", "-c", &script], false);
    running.wait_for("marker\n");
    proxy.cut_all();
    release(&fifo.path, b"go\n");
    let done = running.finish();
    assert_eq!(done.code, 0, "{done:?}");
    let expected = format!(
        "{}marker\n{}",
        seq_lines(1, 50000),
        seq_lines(50001, 100000)
    );
    assert!(
        done.stdout_text() == expected,
        "output differs: {} bytes vs {} expected; stderr {}",
        done.stdout.len(),
        expected.len(),
        done.stderr
    );
    assert!(proxy.accepted() >= 2, "the client never reconnected");
}

#[test]
fn random_cuts_while_output_streams_keep_it_exact() {
    // Retention large enough that nothing is evicted while detached.
    let server = Server::start(&["--retained-output-bytes", "67108864"]);
    let proxy = Proxy::start(
        Faults {
            cut_every: Some(std::time::Duration::from_millis(400)),
            ..Faults::default()
        },
        11,
    );
    proxy.set_target(
        server
            .url
            .trim_start_matches("ws://")
            .parse()
            .expect("addr"),
    );
    let url = format!("ws://{}", proxy.addr);
    let done = exec(
        &url,
        &[],
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 60 ]; do seq 1 5000; sleep 0.05; i=$((i+1)); done",
        ],
        None,
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    let expected = seq_lines(1, 5000).repeat(60);
    assert!(
        done.stdout_text() == expected,
        "output differs: {} bytes vs {}; stderr {}",
        done.stdout.len(),
        expected.len(),
        done.stderr
    );
    assert!(!done.stderr.contains("lost"), "{}", done.stderr);
    assert!(
        proxy.accepted() >= 2,
        "no cut happened while the output streamed"
    );
}

/// What `exec --detach` printed: the `attach` line, its session and process.
struct Detached {
    line: String,
    session: String,
    process: String,
}

fn detached(server_url: &str, script: &str) -> Detached {
    let out = exec(server_url, &["--detach"], &["sh", "-c", script], None);
    assert_eq!(out.code, 0, "{out:?}");
    let line = out.stdout_text().trim_end().to_owned();
    let words: Vec<&str> = line.split(' ').collect();
    assert_eq!(words.len(), 10, "{line:?}");
    assert_eq!(
        [words[0], words[1], words[2], words[3], words[4], words[6], words[8], words[9]],
        [
            "codexbox",
            "attach",
            "--url",
            server_url,
            "--session",
            "--process",
            "--after-seq",
            "0"
        ],
        "{line:?}"
    );
    Detached {
        session: words[5].to_owned(),
        process: words[7].to_owned(),
        line,
    }
}

#[test]
fn detach_then_attach_continues_the_stream() {
    let server = Server::start(&[]);
    let fifo = Fifo::new();
    let script = format!(
        "echo first; read x < {}; echo second; exit 6",
        fifo.path_str()
    );
    let detached = detached(&server.url, &script);
    let attached = Streaming::spawn(pasted(&detached.line), false, &detached.line);
    attached.wait_for("first\n");
    release(&fifo.path, b"go\n");
    let done = attached.finish();
    assert_eq!(done.code, 6, "{done:?}");
    assert_eq!(done.stdout_text(), "first\nsecond\n");
}

#[test]
fn attach_follows_from_now_from_a_seq_or_from_the_start() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = dir.path().join("stop");
    let script = format!(
        "echo early; while [ ! -e {} ]; do echo tick; sleep 0.05; done; echo late; exit 3",
        stop.display()
    );
    let detached = detached(&server.url, &script);
    let (session, process) = (detached.session.as_str(), detached.process.as_str());
    let attach = |extra: &[&str]| {
        let mut args = vec![
            "attach",
            "--url",
            &server.url,
            "--session",
            session,
            "--process",
            process,
        ];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<String>>()
    };
    // A watcher from the start, let go with Ctrl-C: it says where it stopped.
    let peek = Streaming::start(&strs(&attach(&["--from-start"])), false);
    peek.wait_for("early\ntick\n");
    peek.signal(libc::SIGINT);
    let peeked = peek.finish();
    assert_eq!(peeked.code, 128 + libc::SIGINT, "{peeked:?}");
    let hint = format!(
        "codexbox attach --url {} --session {session} --process {process} --after-seq ",
        server.url
    );
    let continuation = peeked
        .stderr
        .lines()
        .find_map(|line| {
            line.split_once("To continue: ")
                .map(|(_, hint)| hint.to_owned())
        })
        .unwrap_or_else(|| panic!("no continuation in {:?}", peeked.stderr));
    let after: u64 = continuation
        .strip_prefix(&hint)
        .and_then(|seq| seq.parse().ok())
        .unwrap_or_else(|| panic!("not {hint:?}N: {continuation:?}"));
    assert!(after >= 1, "{peeked:?}");
    // From now: live output, but not what came before.
    let now = Streaming::start(&strs(&attach(&[])), false);
    now.wait_for("tick\n");
    std::fs::write(&stop, b"").expect("stop file");
    let now = now.finish();
    assert_eq!(now.code, 3, "{now:?}");
    assert!(!now.stdout_text().contains("early"), "{now:?}");
    assert!(now.stdout_text().ends_with("tick\nlate\n"), "{now:?}");
    // The continuation the watcher printed, pasted, then from the start:
    // together the two halves are the whole stream, nothing lost, nothing twice.
    let rest = finish(&mut pasted(&continuation), None, &continuation);
    let whole = run(&strs(&attach(&["--from-start"])), None);
    assert_eq!((rest.code, whole.code), (3, 3), "{rest:?} {whole:?}");
    assert!(
        whole.stdout_text().starts_with("early\ntick\n") && whole.stdout_text().ends_with("late\n")
    );
    assert_eq!(
        [peeked.stdout.clone(), rest.stdout.clone()].concat(),
        whole.stdout,
        "peek {:?} + rest {:?} != whole {:?}",
        peeked.stdout_text(),
        rest.stdout_text(),
        whole.stdout_text()
    );
    // A seq past the end of a closed process: its close, not a hang.
    for beyond in ["18446744073709551615", "1000000"] {
        let past = run(&strs(&attach(&["--after-seq", beyond])), None);
        assert_eq!((past.code, past.stdout.len()), (3, 0), "{past:?}");
    }
    // From now, once it has closed: nothing to show, its exit status.
    let closed = run(&strs(&attach(&[])), None);
    assert_eq!((closed.code, closed.stdout.len()), (3, 0), "{closed:?}");
    let unknown = run(
        &[
            "attach",
            "--url",
            &server.url,
            "--session",
            "no-such-session",
            "--process",
            "p",
        ],
        None,
    );
    assert_eq!(unknown.code, 1, "{unknown:?}");
    assert!(
        unknown
            .stderr
            .contains("cannot resume session no-such-session"),
        "{unknown:?}"
    );
}

#[test]
// The child is reaped by waitpid in `wait_measured`, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn a_broken_stdout_stops_the_remote_writer() {
    let server = Server::start(&[]);
    let mut command = crate::common::shell::command(&["exec", "--url", &server.url, "--", "yes"]);
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .stdin(std::process::Stdio::null());
    let mut child = command.spawn().expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 4];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("some output");
    drop(stdout);
    let (code, _) = crate::common::shell::wait_measured(&child, "exec yes");
    assert_eq!(code, 128 + libc::SIGPIPE);
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}
