//! Process semantics of the exec-server (docs/protocol.md) in raw JSON over a real
//! WebSocket: sequence numbers and ordering, retention and `truncated`, late
//! output, PTY echo and resize, stdin, signals and exit codes, tree
//! termination, spawn details, and no zombie or orphan left behind.

use std::collections::BTreeSet;

use crate::common::client::*;
use serde_json::{json, Value};

fn text(events: &[Event], stream: &str) -> String {
    let bytes: Vec<u8> = events
        .iter()
        .filter(|e| e.kind == "output" && e.stream == stream)
        .flat_map(|e| e.data.iter().copied())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn run_to_close(ws: &mut Raw, params: Value) -> Vec<Event> {
    let id = params["processId"].as_str().unwrap_or_default().to_owned();
    ws.call("process/start", params).await;
    let events = ws.events_until_closed(&id).await;
    assert_well_ordered(&events);
    events
}

#[tokio::test]
async fn true_gives_exited_seq_1_and_closed_seq_2() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let events = run_to_close(&mut ws, start_params("t", &["true"])).await;
    assert_eq!(events.len(), 2, "{events:#?}");
    assert_eq!(events[0].kind, "exited");
    assert_eq!(events[0].seq, 1);
    assert_eq!(events[0].exit_code, Some(0));
    assert!(
        events[0].params["signal"].is_null(),
        "no signal on a normal exit"
    );
    assert_eq!(events[0].params["sandboxDenied"], false);
    assert_eq!(events[1].params, json!({"processId": "t", "seq": 2}));
    let read = ws.call("process/read", json!({"processId": "t"})).await;
    assert_eq!(read["chunks"], json!([]));
    assert_eq!(read["exited"], true);
    assert_eq!(read["exitCode"], 0);
    assert_eq!(read["closed"], true);
    assert_eq!(read["failure"], Value::Null);
    assert_eq!(read["truncated"], false);
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn stdout_stderr_exit_and_close_are_numbered_in_order() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let mut params = sh("p", "read a; echo out; read b; echo err >&2; exit 7");
    params["pipeStdin"] = json!(true);
    ws.call("process/start", params).await;
    let write = |data: &[u8]| json!({"processId": "p", "chunk": b64(data)});
    assert_eq!(
        ws.call("process/write", write(b"1\n")).await,
        json!({"status": "accepted"})
    );
    let first = ws.notification("process/output", "p").await;
    assert_eq!(
        first,
        json!({"processId": "p", "seq": 1, "stream": "stdout", "chunk": b64(b"out\n")})
    );
    ws.call("process/write", write(b"2\n")).await;
    let rest = ws.events_until_closed("p").await;
    let summary: Vec<(String, u64, String, Option<i64>)> = rest
        .iter()
        .map(|e| (e.kind.clone(), e.seq, e.stream.clone(), e.exit_code))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("output".into(), 2, "stderr".into(), None),
            ("exited".into(), 3, String::new(), Some(7)),
            ("closed".into(), 4, String::new(), None),
        ]
    );
    assert_eq!(rest[0].data, b"err\n");
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn many_chunks_stay_ordered_closed_is_last_and_read_replays_them() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let events = run_to_close(
        &mut ws,
        sh(
            "many",
            "for i in $(seq 1 3000); do echo line$i; done; echo tail >&2",
        ),
    )
    .await;
    let expected: String = (1..=3000).map(|i| format!("line{i}\n")).collect();
    assert_eq!(text(&events, "stdout"), expected);
    assert_eq!(text(&events, "stderr"), "tail\n");
    assert!(
        events.iter().all(|e| e.data.len() <= 64 * 1024),
        "chunks are at most 64 KiB"
    );

    let read = ws
        .call("process/read", json!({"processId": "many", "afterSeq": 0}))
        .await;
    let chunks = read["chunks"].as_array().cloned().unwrap_or_default();
    let replayed: Vec<(u64, String, Vec<u8>)> = chunks
        .iter()
        .map(|c| {
            (
                c["seq"].as_u64().unwrap_or(0),
                c["stream"].as_str().unwrap_or_default().to_owned(),
                unb64(c["chunk"].as_str().unwrap_or_default()),
            )
        })
        .collect();
    let pushed: Vec<(u64, String, Vec<u8>)> = events
        .iter()
        .filter(|e| e.kind == "output")
        .map(|e| (e.seq, e.stream.clone(), e.data.clone()))
        .collect();
    assert_eq!(
        replayed, pushed,
        "process/read replays exactly the pushed chunks"
    );
    assert_eq!(read["closed"], true);

    // maxBytes 0 returns exactly one chunk and nextSeq right after it.
    let one = ws
        .call(
            "process/read",
            json!({"processId": "many", "afterSeq": 0, "maxBytes": 0}),
        )
        .await;
    assert_eq!(one["chunks"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(one["nextSeq"], json!(pushed[0].0 + 1));
    // afterSeq past the end: nothing, immediately.
    let last = events[events.len() - 1].seq;
    let none = ws
        .call(
            "process/read",
            json!({"processId": "many", "afterSeq": last, "waitMs": 10000}),
        )
        .await;
    assert_eq!(none["chunks"], json!([]));
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn retention_keeps_the_newest_output_and_reports_truncated() {
    let server = Server::start(&["--retained-output-bytes", "1024"]);
    let (mut ws, _) = server.session().await;
    let events = run_to_close(
        &mut ws,
        sh(
            "big",
            "head -c 300000 /dev/zero | tr '\\0' a; echo; echo END",
        ),
    )
    .await;
    let total = text(&events, "stdout");
    assert_eq!(total.len(), 300_000 + 5, "every byte was pushed live");
    let exited = exited_of(&events);

    let read = ws
        .call("process/read", json!({"processId": "big", "afterSeq": 0}))
        .await;
    assert_eq!(
        read["truncated"], true,
        "evicted chunks are reported: {}",
        read["truncated"]
    );
    let chunks = read["chunks"].as_array().cloned().unwrap_or_default();
    assert!(!chunks.is_empty(), "the newest output is retained");
    assert!(
        chunks[0]["seq"].as_u64().unwrap_or(0) > 1,
        "the oldest chunk is gone"
    );
    let retained: Vec<u8> = chunks
        .iter()
        .flat_map(|c| unb64(c["chunk"].as_str().unwrap_or_default()))
        .collect();
    assert!(
        retained.len() < 300_000,
        "retention is bounded: {}",
        retained.len()
    );
    assert!(retained.ends_with(b"END\n"), "the newest bytes are kept");
    assert_eq!(read["exited"], true);
    assert_eq!(read["closed"], true);

    // Reading only what is still retained is not truncated.
    let newest = chunks[chunks.len() - 1]["seq"].as_u64().unwrap_or(0);
    let read = ws
        .call(
            "process/read",
            json!({"processId": "big", "afterSeq": newest - 1}),
        )
        .await;
    assert_eq!(read["truncated"], false, "{read}");
    assert!(newest < exited.seq);
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn output_after_exit_is_numbered_after_exited_and_closed_waits_for_it() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let fifo = Fifo::new();
    let script = format!("(read x < {0}; echo late:$x) & echo early", fifo.path_str());
    ws.call("process/start", sh("late", &script)).await;
    let early = ws.notification("process/output", "late").await;
    assert_eq!(early["seq"], 1);
    assert_eq!(
        unb64(early["chunk"].as_str().unwrap_or_default()),
        b"early\n"
    );
    let exited = ws.notification("process/exited", "late").await;
    assert_eq!(exited["seq"], 2);
    assert_eq!(exited["exitCode"], 0);

    let read = ws
        .call("process/read", json!({"processId": "late", "afterSeq": 2}))
        .await;
    assert_eq!(read["exited"], true);
    assert_eq!(
        read["closed"], false,
        "a descendant still holds stdout: {read}"
    );

    // Long-poll for the late output, then release the grandchild.
    ws.send(json!({"id": "poll", "method": "process/read",
                   "params": {"processId": "late", "afterSeq": 2, "waitMs": 10000}}))
        .await;
    fifo.write(b"go\n").await;
    let poll = ws.response(&json!("poll")).await;
    let chunks = poll["result"]["chunks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(chunks.len(), 1, "{poll}");
    assert_eq!(chunks[0]["seq"], 3);
    assert_eq!(
        unb64(chunks[0]["chunk"].as_str().unwrap_or_default()),
        b"late:go\n"
    );

    let rest = ws.events_until_closed("late").await;
    let kinds: Vec<(String, u64)> = rest.iter().map(|e| (e.kind.clone(), e.seq)).collect();
    assert_eq!(kinds, vec![("output".into(), 3), ("closed".into(), 4)]);
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn pty_echoes_input_and_follows_resizes() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let mut params = sh("tty", "stty size; read x; stty size; echo got:$x");
    params["tty"] = json!(true);
    params["size"] = json!({"rows": 30, "cols": 100});
    ws.call("process/start", params).await;
    let mut events = ws.output_until("tty", "30 100").await;
    assert_eq!(
        ws.call(
            "process/resize",
            json!({"processId": "tty", "rows": 40, "cols": 120})
        )
        .await,
        json!({})
    );
    ws.call(
        "process/write",
        json!({"processId": "tty", "chunk": b64(b"go\n")}),
    )
    .await;
    events.extend(ws.events_until_closed("tty").await);
    assert_well_ordered(&events);
    let out = text(&events, "pty");
    assert!(events
        .iter()
        .filter(|e| e.kind == "output")
        .all(|e| e.stream == "pty"));
    let echo = out.find("go\r\n");
    let got = out.find("got:go");
    assert!(
        echo.is_some() && got.is_some() && echo < got,
        "echo then reply: {out:?}"
    );
    assert!(out.contains("40 120"), "resize applied: {out:?}");
    assert_eq!(exited_of(&events).exit_code, Some(0));

    // Without `size` the terminal is 24x80.
    let mut params = sh("tty2", "stty size");
    params["tty"] = json!(true);
    let events = run_to_close(&mut ws, params).await;
    assert!(text(&events, "pty").contains("24 80"), "{events:?}");
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn pipe_stdin_and_close_stdin_deliver_eof() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;

    let mut params = start_params("cat", &["cat"]);
    params["pipeStdin"] = json!(true);
    ws.call("process/start", params).await;
    let result = ws
        .call(
            "process/write",
            json!({"processId": "cat", "chunk": b64(b"abc"), "closeStdin": true}),
        )
        .await;
    assert_eq!(result, json!({"status": "accepted"}));
    let events = ws.events_until_closed("cat").await;
    assert_well_ordered(&events);
    assert_eq!(text(&events, "stdout"), "abc");
    assert_eq!(exited_of(&events).exit_code, Some(0));

    let mut params = start_params("ptycat", &["cat"]);
    params["tty"] = json!(true);
    ws.call("process/start", params).await;
    ws.call(
        "process/write",
        json!({"processId": "ptycat", "chunk": b64(b"xyz\n")}),
    )
    .await;
    ws.output_until("ptycat", "xyz\r\nxyz").await;
    let result = ws
        .call(
            "process/write",
            json!({"processId": "ptycat", "chunk": "", "closeStdin": true, "writeId": "9"}),
        )
        .await;
    assert_eq!(result, json!({"status": "accepted"}));
    let events = ws.events_until_closed("ptycat").await;
    assert_eq!(
        exited_of(&events).exit_code,
        Some(0),
        "EOF ends cat on a PTY"
    );

    // Without pipeStdin the child's stdin is /dev/null.
    let events = run_to_close(
        &mut ws,
        sh("devnull", "cat; echo rc:$?; readlink /proc/self/fd/0"),
    )
    .await;
    assert_eq!(text(&events, "stdout"), "rc:0\n/dev/null\n");
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn writes_after_close_stdin_report_stdin_closed() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let mut params = sh("w", "cat >/dev/null; read x < /dev/null; sleep 1000");
    params["pipeStdin"] = json!(true);
    ws.call("process/start", params).await;
    ws.call(
        "process/write",
        json!({"processId": "w", "chunk": "", "closeStdin": true}),
    )
    .await;
    let result = ws
        .call(
            "process/write",
            json!({"processId": "w", "chunk": b64(b"x"), "writeId": "2"}),
        )
        .await;
    assert_eq!(result, json!({"status": "stdinClosed"}));
    let (code, _) = ws
        .call_err(
            "process/write",
            json!({"processId": "w", "chunk": b64(b"x")}),
        )
        .await;
    assert_eq!(code, -32600);
    ws.call("process/terminate", json!({"processId": "w"}))
        .await;
    ws.events_until_closed("w").await;
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn signals_reach_the_group_and_exit_codes_are_128_plus_signal() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let cases = [
        ("kill", "kill", 137, "KILL"),
        ("terminate", "terminate", 143, "TERM"),
        ("hangup", "hangup", 129, "HUP|HANGUP"),
        ("quit", "quit", 131, "QUIT"),
        ("usr1", "SIGUSR1", 138, "USR1"),
        ("interrupt", "interrupt", 130, "INT"),
    ];
    for (id, _, _, _) in cases {
        ws.call("process/start", sh(id, "echo ready; exec sleep 1000"))
            .await;
    }
    let mut ready = std::collections::HashMap::new();
    for (id, _, _, _) in cases {
        ready.insert(id, ws.output_until(id, "ready").await);
    }
    for (id, signal, _, _) in cases {
        let result = ws
            .call("process/signal", json!({"processId": id, "signal": signal}))
            .await;
        assert_eq!(result, json!({}), "{id}");
    }
    for (id, _, code, name) in cases {
        let mut events = ready.remove(id).unwrap_or_default();
        events.extend(ws.events_until_closed(id).await);
        assert_well_ordered(&events);
        let exited = exited_of(&events);
        assert_eq!(exited.exit_code, Some(code), "{id}: {exited:?}");
        let signal = exited.params["signal"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_uppercase();
        assert!(
            name.split('|').any(|n| signal.contains(n)),
            "{id}: signal field {signal:?} names {name}"
        );
    }

    // A shell trap sees the interrupt and picks its own exit code.
    ws.call(
        "process/start",
        sh(
            "trap",
            "trap 'exit 7' INT; echo ready; while :; do sleep 1; done",
        ),
    )
    .await;
    ws.output_until("trap", "ready").await;
    ws.call(
        "process/signal",
        json!({"processId": "trap", "signal": "interrupt"}),
    )
    .await;
    let events = ws.events_until_closed("trap").await;
    assert_eq!(exited_of(&events).exit_code, Some(7));
    assert!(exited_of(&events).params["signal"].is_null());

    let events = run_to_close(&mut ws, sh("exit3", "exit 3")).await;
    assert_eq!(exited_of(&events).exit_code, Some(3));
    // Signalling an exited process is a no-op.
    let result = ws
        .call(
            "process/signal",
            json!({"processId": "exit3", "signal": "kill"}),
        )
        .await;
    assert_eq!(result, json!({}));
    assert_no_children(server.pid()).await;
}

/// A server started by `nohup` or as `cmd &` in a script has SIGHUP, SIGINT
/// and SIGQUIT ignored; its commands must still start with default actions,
/// through the spawn helper and through the direct fork alike.
#[tokio::test]
async fn commands_start_with_default_signal_actions_whatever_the_server_ignores() {
    for envs in [&[][..], &[("CODEXBOX_SPAWN", "direct")][..]] {
        let server = Server::start_with_ignored_signals(envs);
        let (mut ws, _) = server.session().await;
        let cases = [("hangup", 129), ("interrupt", 130), ("quit", 131)];
        for (id, _) in cases {
            ws.call("process/start", sh(id, "echo ready; exec sleep 1000"))
                .await;
        }
        for (id, _) in cases {
            ws.output_until(id, "ready").await;
            let result = ws
                .call("process/signal", json!({"processId": id, "signal": id}))
                .await;
            assert_eq!(result, json!({}), "{id}");
        }
        for (id, code) in cases {
            let events = ws.events_until_closed(id).await;
            assert_eq!(exited_of(&events).exit_code, Some(code), "{id} {envs:?}");
        }
    }
}

#[tokio::test]
async fn terminate_kills_a_setsid_grandchild_holding_the_pipe() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let script = "setsid sh -c 'echo pid:$$; exec sleep 1000' & echo pid:$$; wait";
    ws.call("process/start", sh("tree", script)).await;
    let mut events = Vec::new();
    while pids_in(&output_of(&events)).len() < 2 {
        let params = ws.notification("process/output", "tree").await;
        events.push(Event::from_params("output", &params));
    }
    let pids = pids_in(&output_of(&events));
    assert_eq!(
        ws.call("process/terminate", json!({"processId": "tree"}))
            .await,
        json!({"running": true})
    );
    events.extend(ws.events_until_closed("tree").await);
    assert_well_ordered(&events);
    assert_eq!(exited_of(&events).exit_code, Some(137));
    for pid in pids {
        wait_gone(pid).await;
    }
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn terminate_after_the_exit_kills_what_the_command_left_holding_its_output() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.call("process/start", sh("left", "sleep 1000 & echo pid:$!"))
        .await;
    let exited = ws.notification("process/exited", "left").await;
    assert_eq!(exited["exitCode"], 0, "{exited}");
    let orphan = pids_in(&output_of(&ws.output_until("left", "\n").await))[0];
    assert!(!is_gone(orphan), "it holds the output open");
    // The command itself is gone: `running` false, what it left is killed.
    assert_eq!(
        ws.call("process/terminate", json!({"processId": "left"}))
            .await,
        json!({"running": false})
    );
    wait_gone(orphan).await;
    ws.notification("process/closed", "left").await;
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn terminate_kills_a_double_forked_daemon() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => panic!("tempdir: {err}"),
    };
    let pidfile = dir.path().join("daemon.pid");
    let script = format!(
        "(setsid sh -c 'echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 1000' </dev/null >/dev/null 2>&1 &); echo started; exec sleep 1000",
        pidfile.display()
    );
    ws.call("process/start", sh("daemon", &script)).await;
    ws.output_until("daemon", "started").await;
    let daemon = {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(pid) = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
            {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "daemon never wrote its pid"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    assert!(!is_gone(daemon), "the daemon runs before terminate");
    assert_eq!(
        ws.call("process/terminate", json!({"processId": "daemon"}))
            .await,
        json!({"running": true})
    );
    let events = ws.events_until_closed("daemon").await;
    assert_eq!(exited_of(&events).exit_code, Some(137));
    wait_gone(daemon).await;
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn a_long_poll_read_does_not_block_later_requests() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.call("process/start", start_params("sleeper", &["sleep", "1000"]))
        .await;
    ws.send(json!({"id": "poll", "method": "process/read",
                   "params": {"processId": "sleeper", "waitMs": 10000}}))
        .await;
    ws.send(json!({"id": "status", "method": "environment/status"}))
        .await;
    ws.send(json!({"id": "kill", "method": "process/terminate",
                   "params": {"processId": "sleeper"}}))
        .await;
    let mut order = Vec::new();
    while order.len() < 3 {
        let message = ws.recv().await;
        if message.get("method").is_none() {
            order.push(message["id"].as_str().unwrap_or_default().to_owned());
            if message["id"] == "poll" {
                assert_eq!(message["result"]["exited"], true, "{message}");
            }
        }
    }
    // The status request was sent after the poll but must not wait for it.
    assert_eq!(order[0], "status", "{order:?}");
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn children_get_exact_env_cwd_arg0_own_session_and_no_inherited_fds() {
    let server = Server::start_listen(
        "ws://127.0.0.1:0",
        &[],
        &[("KEEP_ME", "1"), ("MY_SECRET_TOKEN", "hidden")],
    );
    let (mut ws, _) = server.session().await;

    let mut params = start_params("env", &["env"]);
    params["env"] = json!({"PATH": "/usr/bin:/bin", "FOO": "bar"});
    let events = run_to_close(&mut ws, params).await;
    let lines: BTreeSet<String> = text(&events, "stdout").lines().map(str::to_owned).collect();
    assert_eq!(
        lines,
        BTreeSet::from(["FOO=bar".to_owned(), "PATH=/usr/bin:/bin".to_owned()]),
        "env without envPolicy is the whole environment"
    );

    let mut params = start_params("policy", &["env"]);
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": false,
                                 "exclude": [], "set": {"SET_BY_POLICY": "1"}, "includeOnly": []});
    params["env"] = json!({"OVERLAY": "2"});
    let events = run_to_close(&mut ws, params).await;
    let out = text(&events, "stdout");
    assert!(out.contains("KEEP_ME=1\n"), "inherit all: {out}");
    assert!(
        out.contains("SET_BY_POLICY=1\n") && out.contains("OVERLAY=2\n"),
        "{out}"
    );
    assert!(
        !out.contains("MY_SECRET_TOKEN"),
        "default excludes drop *TOKEN*: {out}"
    );

    for (id, cwd) in [("cwd-native", "/tmp"), ("cwd-uri", "file:///tmp")] {
        let mut params = start_params(id, &["pwd"]);
        params["cwd"] = json!(cwd);
        let events = run_to_close(&mut ws, params).await;
        assert_eq!(text(&events, "stdout"), "/tmp\n", "{cwd}");
    }

    let mut params = sh("arg0", "echo $0");
    params["arg0"] = json!("custom-name");
    params["argv"] = json!(["sh", "-c", "echo $0"]);
    let events = run_to_close(&mut ws, params).await;
    assert_eq!(text(&events, "stdout"), "custom-name\n");

    let events = run_to_close(
        &mut ws,
        sh("ids", "echo $$ $(cut -d' ' -f5,6 /proc/$$/stat)"),
    )
    .await;
    let ids: Vec<String> = text(&events, "stdout")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(
        ids[0] == ids[1] && ids[1] == ids[2],
        "pid = pgid = sid: {ids:?}"
    );

    let events = run_to_close(&mut ws, start_params("fds", &["ls", "/proc/self/fd"])).await;
    let fds: BTreeSet<String> = text(&events, "stdout").lines().map(str::to_owned).collect();
    assert!(
        fds.iter()
            .all(|fd| ["0", "1", "2", "3"].contains(&fd.as_str())),
        "no inherited descriptors: {fds:?}"
    );
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn many_concurrent_processes_leave_no_zombie() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    for i in 0..100 {
        let id = format!("p{i}");
        ws.send(json!({"id": id, "method": "process/start",
                       "params": sh(&id, &format!("echo {i}; exit {}", i % 5))}))
            .await;
    }
    for i in 0..100 {
        let id = format!("p{i}");
        let response = ws.response(&json!(id)).await;
        assert_eq!(response["result"]["processId"], json!(id), "{response}");
    }
    for i in 0..100 {
        let events = ws.events_until_closed(&format!("p{i}")).await;
        assert_well_ordered(&events);
        assert_eq!(text(&events, "stdout"), format!("{i}\n"));
        assert_eq!(exited_of(&events).exit_code, Some(i % 5));
    }
    assert_no_children(server.pid()).await;
}

/// VmHWM (peak resident set) of `pid` in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_slow_client_loses_nothing_and_the_server_does_not_buffer_it_all() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let total: u64 = 128 << 20;
    let count = total.to_string();
    ws.call(
        "process/start",
        start_params("flood", &["head", "-c", &count, "/dev/zero"]),
    )
    .await;
    // Not reading for a moment lets the outbound queue fill up: flow
    // control must then hold the child back instead of buffering its output.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut received = 0u64;
    let mut next_seq = 1u64;
    loop {
        let message = ws.recv().await;
        let Some(event) = Event::parse(&message) else {
            continue;
        };
        assert_eq!(event.seq, next_seq, "no event lost or reordered");
        next_seq += 1;
        match event.kind.as_str() {
            "output" => received += event.data.len() as u64,
            "closed" => break,
            _ => {}
        }
    }
    assert_eq!(received, total, "every byte delivered");
    let peak_mib = peak_rss_kib(server.pid()) / 1024;
    eprintln!("server peak RSS while streaming to a slow client: {peak_mib} MiB");
    // Buffering it all would take more than the output's base64 size.
    assert!(
        peak_mib < 96,
        "server peaked at {peak_mib} MiB while streaming {} MiB to a slow client",
        total >> 20
    );
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn process_ids_with_special_characters_round_trip() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let id = "p\"1\\ é/\n✓";
    let events = run_to_close(&mut ws, start_params(id, &["echo", "hi"])).await;
    assert!(events.iter().all(|e| e.process_id == id), "{events:?}");
    assert_eq!(text(&events, "stdout"), "hi\n");
    let read = ws.call("process/read", json!({"processId": id})).await;
    assert_eq!(read["closed"], true);
}

#[tokio::test]
async fn a_long_poll_without_events_returns_empty_at_its_deadline() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    ws.call("process/start", start_params("quiet", &["sleep", "1000"]))
        .await;
    let read = ws
        .call("process/read", json!({"processId": "quiet", "waitMs": 50}))
        .await;
    assert_eq!(read["chunks"], json!([]));
    assert_eq!(read["exited"], false);
    assert_eq!(read["closed"], false);
    assert_eq!(read["nextSeq"], 1);
    ws.call("process/terminate", json!({"processId": "quiet"}))
        .await;
    ws.events_until_closed("quiet").await;
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn env_policy_include_only_keeps_matching_names_then_overlays_env() {
    let server = Server::start_listen(
        "ws://127.0.0.1:0",
        &[],
        &[("KEEP_ME", "1"), ("KEEP_TOO", "2"), ("DROP_ME", "3")],
    );
    let (mut ws, _) = server.session().await;
    let mut params = start_params("only", &["/usr/bin/env"]);
    params["envPolicy"] = json!({"inherit": "all", "ignoreDefaultExcludes": false,
                                 "exclude": ["KEEP_TOO"], "set": {}, "includeOnly": ["KEEP_*"]});
    params["env"] = json!({"OVERLAY": "x"});
    let events = run_to_close(&mut ws, params).await;
    let lines: BTreeSet<String> = text(&events, "stdout").lines().map(str::to_owned).collect();
    assert_eq!(
        lines,
        BTreeSet::from(["KEEP_ME=1".to_owned(), "OVERLAY=x".to_owned()]),
        "inherit all → exclude → includeOnly → overlay"
    );
}

#[tokio::test]
async fn sessions_do_not_see_each_others_processes() {
    let server = Server::start(&[]);
    let (mut first, _) = server.session().await;
    let (mut second, _) = server.session().await;
    first
        .call("process/start", start_params("mine", &["sleep", "1000"]))
        .await;
    let (code, _) = second
        .call_err("process/read", json!({"processId": "mine"}))
        .await;
    assert_eq!(code, -32600);
    assert_eq!(
        second
            .call("process/terminate", json!({"processId": "mine"}))
            .await,
        json!({"running": false})
    );
    // The same id is free in the other session.
    second
        .call("process/start", start_params("mine", &["true"]))
        .await;
    second.events_until_closed("mine").await;
    first
        .call("process/terminate", json!({"processId": "mine"}))
        .await;
    first.events_until_closed("mine").await;
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn pipelined_requests_take_effect_in_arrival_order() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let mut params = start_params("cat", &["cat"]);
    params["pipeStdin"] = json!(true);
    // Start, write, close stdin: sent back to back, no waiting in between.
    ws.send(json!({"id": "start", "method": "process/start", "params": params}))
        .await;
    ws.send(json!({"id": "write", "method": "process/write",
                   "params": {"processId": "cat", "chunk": b64(b"ordered"), "writeId": "1", "closeStdin": true}}))
        .await;
    ws.send(json!({"id": "sleeper", "method": "process/start",
                   "params": start_params("sleeper", &["sleep", "1000"])}))
        .await;
    ws.send(json!({"id": "kill", "method": "process/terminate",
                   "params": {"processId": "sleeper"}}))
        .await;
    assert_eq!(
        ws.response(&json!("start")).await["result"],
        json!({"processId": "cat"})
    );
    assert_eq!(
        ws.response(&json!("write")).await["result"],
        json!({"status": "accepted"})
    );
    assert_eq!(
        ws.response(&json!("sleeper")).await["result"],
        json!({"processId": "sleeper"})
    );
    assert_eq!(
        ws.response(&json!("kill")).await["result"],
        json!({"running": true})
    );
    let events = ws.events_until_closed("cat").await;
    assert_eq!(text(&events, "stdout"), "ordered");
    let events = ws.events_until_closed("sleeper").await;
    assert_eq!(exited_of(&events).exit_code, Some(137));
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn a_pty_process_killed_by_a_signal_exits_128_plus_signal() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let mut params = sh("tty-int", "echo ready; exec sleep 1000");
    params["tty"] = json!(true);
    ws.call("process/start", params).await;
    let mut events = ws.output_until("tty-int", "ready").await;
    ws.call(
        "process/signal",
        json!({"processId": "tty-int", "signal": "interrupt"}),
    )
    .await;
    events.extend(ws.events_until_closed("tty-int").await);
    assert_well_ordered(&events);
    let exited = exited_of(&events);
    assert_eq!(exited.exit_code, Some(130), "{exited:?}");
    assert!(exited.params["signal"].is_string(), "{exited:?}");
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn read_max_bytes_and_next_seq_follow_the_reference_rules() {
    let server = Server::start(&[]);
    let (mut ws, _) = server.session().await;
    let mut params = sh("steps", "while read l; do echo $l; done");
    params["pipeStdin"] = json!(true);
    ws.call("process/start", params).await;
    // One line at a time, each awaited: three chunks of 2 bytes, seqs 1..3.
    for line in ["a", "b", "c"] {
        ws.call(
            "process/write",
            json!({"processId": "steps", "chunk": b64(format!("{line}\n").as_bytes())}),
        )
        .await;
        let output = ws.notification("process/output", "steps").await;
        assert_eq!(
            unb64(output["chunk"].as_str().unwrap_or_default()),
            format!("{line}\n").as_bytes()
        );
    }
    let seqs = |read: &Value| -> Vec<u64> {
        read["chunks"]
            .as_array()
            .map(|c| c.iter().filter_map(|c| c["seq"].as_u64()).collect())
            .unwrap_or_default()
    };
    let read = ws
        .call(
            "process/read",
            json!({"processId": "steps", "afterSeq": 0, "maxBytes": 3}),
        )
        .await;
    assert_eq!(
        (seqs(&read), read["nextSeq"].clone()),
        (vec![1], json!(2)),
        "{read}"
    );
    let read = ws
        .call(
            "process/read",
            json!({"processId": "steps", "afterSeq": 0, "maxBytes": 4}),
        )
        .await;
    assert_eq!(
        (seqs(&read), read["nextSeq"].clone()),
        (vec![1, 2], json!(3)),
        "{read}"
    );
    let read = ws
        .call(
            "process/read",
            json!({"processId": "steps", "afterSeq": 1, "maxBytes": 1}),
        )
        .await;
    assert_eq!(
        (seqs(&read), read["nextSeq"].clone()),
        (vec![2], json!(3)),
        "{read}"
    );
    let read = ws
        .call("process/read", json!({"processId": "steps", "afterSeq": 0}))
        .await;
    assert_eq!(
        (seqs(&read), read["nextSeq"].clone()),
        (vec![1, 2, 3], json!(4)),
        "{read}"
    );
    ws.call(
        "process/write",
        json!({"processId": "steps", "chunk": "", "closeStdin": true}),
    )
    .await;
    let events = ws.events_until_closed("steps").await;
    assert_eq!(exited_of(&events).exit_code, Some(0));
    assert_no_children(server.pid()).await;
}

/// After the server is SIGKILLed (OOM killer, `kill -9`, a crashed
/// container) every supervisor kills its whole subtree: descendants that
/// stayed in the group, left it with setsid, or double-forked away.
#[tokio::test]
async fn nothing_started_outlives_a_sigkilled_server() {
    for spawn in ["zygote", "direct"] {
        let marker = format!("{}.{}", 7000 + std::process::id() % 1000, spawn.len());
        let mut server =
            Server::start_listen("ws://127.0.0.1:0", &[], &[("CODEXBOX_SPAWN", spawn)]);
        let (mut ws, _) = server.session().await;
        let script = format!(
            "sleep {marker} & setsid sleep {marker} & (setsid sh -c 'sleep {marker} &' &); \
             echo ready; sleep {marker}"
        );
        ws.call("process/start", sh("p", &script)).await;
        ws.output_until("p", "ready").await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while sleepers(&marker).len() < 4 {
            assert!(
                std::time::Instant::now() < deadline,
                "{spawn}: sleepers did not start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        server.kill_hard();
        for pid in sleepers(&marker) {
            wait_gone(pid).await;
        }
        assert_eq!(sleepers(&marker), Vec::<u32>::new(), "{spawn}: survivors");
    }
}
