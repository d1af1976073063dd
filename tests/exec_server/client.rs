//! `ExecServerClient` against the real server: pipelined calls, the
//! notification stream, typed helpers, errors with code and message, and
//! reconnect + resume.

use std::collections::HashMap;

use crate::common::client::*;
use codexbox::client::{
    ClientError, ExecServerClient, ProcessEvent, PtySize, ReadParams, StartParams, StreamKind,
    WriteStatus,
};
use futures_util::future::join_all;
use tokio::sync::mpsc;

async fn connect(
    server: &Server,
) -> (
    ExecServerClient,
    mpsc::Receiver<codexbox::client::Notification>,
) {
    let options = codexbox::client::ConnectOptions::new(&server.url).request_timeout(WAIT);
    let mut client = match ExecServerClient::connect_with(options).await {
        Ok(client) => client,
        Err(err) => panic!("connect: {err}"),
    };
    let events = match client.take_notifications() {
        Some(events) => events,
        None => panic!("no notification receiver"),
    };
    if let Err(err) = client.initialize("client-tests", None).await {
        panic!("initialize: {err}");
    }
    (client, events)
}

async fn next_event(events: &mut mpsc::Receiver<codexbox::client::Notification>) -> ProcessEvent {
    loop {
        let notification = match tokio::time::timeout(WAIT, events.recv()).await {
            Ok(Some(notification)) => notification,
            other => panic!("no notification: {other:?}"),
        };
        if let Some(event) = ProcessEvent::from_notification(&notification) {
            return event;
        }
    }
}

#[tokio::test]
async fn pipelined_starts_deliver_every_event_in_seq_order() {
    let server = Server::start(&[]);
    let (client, mut events) = connect(&server).await;
    let count = 64;
    let params: Vec<StartParams> = (0..count)
        .map(|i| {
            StartParams::new(
                format!("p{i}"),
                ["sh", "-c", "echo out; echo err >&2; exit 5"],
            )
        })
        .collect();
    let started = join_all(params.iter().map(|p| client.process_start(p))).await;
    for (i, result) in started.into_iter().enumerate() {
        assert_eq!(result.ok(), Some(format!("p{i}")));
    }
    let mut seen: HashMap<String, Vec<ProcessEvent>> = HashMap::new();
    let mut closed = 0;
    while closed < count {
        let event = next_event(&mut events).await;
        if matches!(event, ProcessEvent::Closed { .. }) {
            closed += 1;
        }
        seen.entry(event.process_id().to_owned())
            .or_default()
            .push(event);
    }
    for (id, list) in &seen {
        let seqs: Vec<u64> = list.iter().map(ProcessEvent::seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4], "{id}: {list:?}");
        let exit = list.iter().find_map(|e| match e {
            ProcessEvent::Exited { exit_code, .. } => Some(*exit_code),
            _ => None,
        });
        assert_eq!(exit, Some(5));
        let streams: Vec<StreamKind> = list
            .iter()
            .filter_map(|e| match e {
                ProcessEvent::Output { stream, .. } => Some(*stream),
                _ => None,
            })
            .collect();
        assert_eq!(streams.len(), 2);
    }
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn server_errors_carry_code_and_message() {
    let server = Server::start(&[]);
    let (client, _events) = connect(&server).await;
    let err = client.call("no/such", serde_json::Value::Null).await;
    match err {
        Err(ClientError::Rpc(error)) => assert_eq!(error.code, -32601),
        other => panic!("expected an rpc error: {other:?}"),
    }
    let err = client
        .process_start(&StartParams::new("e", Vec::<String>::new()))
        .await;
    let rpc = err.as_ref().err().and_then(ClientError::rpc).cloned();
    assert_eq!(
        rpc.map(|e| (e.code, e.message)),
        Some((-32602, "argv must not be empty".to_owned()))
    );
    let read = client
        .process_read(&ReadParams {
            process_id: "missing".into(),
            ..ReadParams::default()
        })
        .await;
    assert_eq!(
        read.err().and_then(|e| e.rpc().map(|r| r.code)),
        Some(-32600)
    );
}

#[tokio::test]
async fn typed_helpers_drive_a_pty_process() {
    let server = Server::start(&[]);
    let (client, mut events) = connect(&server).await;
    let params = StartParams::new("tty", ["sh", "-c", "read x; stty size; echo got:$x"]).tty(true);
    assert!(client.process_start(&params).await.is_ok());
    assert!(client
        .process_resize("tty", PtySize { rows: 33, cols: 99 })
        .await
        .is_ok());
    let write = client.process_write("tty", b"hi\n", Some("1"), false).await;
    assert_eq!(write.ok().map(|w| w.status), Some(WriteStatus::Accepted));
    let mut output = Vec::new();
    loop {
        match next_event(&mut events).await {
            ProcessEvent::Output { chunk, stream, .. } => {
                assert_eq!(stream, StreamKind::Pty);
                output.extend(chunk);
            }
            ProcessEvent::Exited { exit_code, .. } => assert_eq!(exit_code, 0),
            ProcessEvent::Closed { .. } => break,
        }
    }
    let text = String::from_utf8_lossy(&output);
    assert!(
        text.contains("33 99") && text.contains("got:hi"),
        "{text:?}"
    );
    assert_eq!(
        client.environment_status().await.ok().as_deref(),
        Some("ready")
    );
    let info = client.environment_info().await;
    assert!(info.map(|i| i.shell.path.starts_with('/')).unwrap_or(false));
    assert_eq!(client.process_terminate("tty").await.ok(), Some(false));
}

#[tokio::test]
async fn reconnect_resumes_the_session_and_catches_up() {
    let server = Server::start(&[]);
    let (mut client, mut events) = connect(&server).await;
    let session = client.session_id().map(str::to_owned);
    let fifo = Fifo::new();
    let script = format!("echo pid:$$; read x < {}; echo after:$x", fifo.path_str());
    assert!(client
        .process_start(&StartParams::new("r", ["sh", "-c", script.as_str()]))
        .await
        .is_ok());
    let pid = match next_event(&mut events).await {
        ProcessEvent::Output { chunk, .. } => pids_in(&String::from_utf8_lossy(&chunk)),
        other => panic!("unexpected {other:?}"),
    };
    fifo.write(b"x\n").await;
    wait_gone(pid[0]).await;

    let resumed = client.reconnect().await;
    assert_eq!(resumed.ok(), session);
    let read = client
        .process_read(&ReadParams {
            process_id: "r".into(),
            after_seq: Some(1),
            wait_ms: Some(10_000),
            ..ReadParams::default()
        })
        .await;
    let read = match read {
        Ok(read) => read,
        Err(err) => panic!("read after resume: {err}"),
    };
    let bytes: Vec<u8> = read.chunks.iter().flat_map(|c| c.chunk.clone()).collect();
    assert!(
        String::from_utf8_lossy(&bytes).contains("after:x"),
        "{read:?}"
    );
    assert!(read.exited);
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn an_untaken_notification_channel_never_stalls_responses() {
    let server = Server::start(&[]);
    let mut options = codexbox::client::ConnectOptions::new(&server.url);
    options.notification_capacity = 1;
    let client = match ExecServerClient::connect_and_initialize(options, "no-listener").await {
        Ok(client) => client,
        Err(err) => panic!("connect: {err}"),
    };
    let body = async {
        for i in 0..10 {
            let params = StartParams::new(format!("t{i}"), ["echo", "x"]);
            assert!(client.process_start(&params).await.is_ok());
        }
        for i in 0..10 {
            let mut after = 0;
            loop {
                let read = client
                    .process_read(&ReadParams {
                        process_id: format!("t{i}"),
                        after_seq: Some(after),
                        wait_ms: Some(10_000),
                        ..ReadParams::default()
                    })
                    .await;
                let read = match read {
                    Ok(read) => read,
                    Err(err) => panic!("read t{i}: {err}"),
                };
                if read.closed {
                    break;
                }
                after = read.next_seq.saturating_sub(1).max(after);
            }
        }
        assert_eq!(
            client.environment_status().await.ok().as_deref(),
            Some("ready")
        );
    };
    if tokio::time::timeout(WAIT * 3, body).await.is_err() {
        panic!("responses stalled behind unread notifications");
    }
    assert_no_children(server.pid()).await;
}

#[tokio::test]
async fn fs_helpers_round_trip_files_without_a_sandbox() {
    let server = Server::start(&[]);
    let (client, _events) = connect(&server).await;
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(err) => panic!("tempdir: {err}"),
    };
    let root = dir.path().to_string_lossy().into_owned();
    let file = format!("{root}/a.txt");
    let result = async {
        client.fs_write_file(&file, b"hello fs", None).await?;
        assert_eq!(client.fs_read_file(&file, None).await?, b"hello fs");
        // The URI dialect reads the same file and answers in kind.
        let uri = format!("file://{file}");
        assert_eq!(client.fs_read_file(&uri, None).await?, b"hello fs");
        let meta = client.fs_get_metadata(&file, None).await?;
        assert_eq!(meta["isFile"], true);
        assert_eq!(meta["size"], 8);
        client
            .fs_create_directory(&format!("{root}/d/e"), None, None)
            .await?;
        client
            .fs_copy(&file, &format!("{root}/d/b.txt"), false, None)
            .await?;
        let listing = client.fs_read_directory(&format!("{root}/d"), None).await?;
        let names: Vec<&str> = listing["entries"]
            .as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter_map(|e| e["fileName"].as_str())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(names, ["b.txt", "e"], "sorted by name: {listing}");
        let canonical = client
            .fs_canonicalize(&format!("{root}/d/../a.txt"), None)
            .await?;
        assert!(
            canonical.ends_with("/a.txt") && !canonical.contains(".."),
            "{canonical}"
        );
        client.fs_open("h1", &file, None).await?;
        let (block, eof) = client.fs_read_block("h1", 6, 100).await?;
        assert_eq!((block.as_slice(), eof), (&b"fs"[..], true));
        client.fs_close("h1").await?;
        client
            .fs_remove(&format!("{root}/d"), None, None, None)
            .await?;
        let missing = client.fs_read_file(&format!("{root}/d/b.txt"), None).await;
        assert_eq!(
            missing.err().and_then(|e| e.rpc().map(|r| r.code)),
            Some(-32004),
            "NotFound maps to -32004"
        );
        Ok::<(), ClientError>(())
    }
    .await;
    if let Err(err) = result {
        panic!("fs call failed: {err}");
    }
}

#[tokio::test]
async fn a_request_timeout_gives_up_on_one_call_and_the_connection_goes_on() {
    let server = Server::start(&[]);
    let options = codexbox::client::ConnectOptions::new(&server.url)
        .request_timeout(std::time::Duration::from_millis(100));
    let client = match ExecServerClient::connect_and_initialize(options, "timeouts").await {
        Ok(client) => client,
        Err(err) => panic!("connect: {err}"),
    };
    let params = StartParams::new("quiet", ["sleep", "1000"]);
    assert!(client.process_start(&params).await.is_ok());
    let read = client
        .process_read(&ReadParams {
            process_id: "quiet".into(),
            wait_ms: Some(3_000),
            ..ReadParams::default()
        })
        .await;
    assert!(matches!(read, Err(ClientError::Timeout { .. })), "{read:?}");
    assert_eq!(client.process_terminate("quiet").await.ok(), Some(true));
    assert_eq!(
        client.environment_status().await.ok().as_deref(),
        Some("ready")
    );
    assert_no_children(server.pid()).await;
}
