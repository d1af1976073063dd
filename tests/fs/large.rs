//! Large files through the real server over WebSocket: whole-file methods at
//! 64 MiB with default flags, an oversize request answered with its own id,
//! and streaming writes (`fs/open` with a write mode, `fs/writeBlock`,
//! `fs/close`) — positional, appending, bounded per connection, in bounded
//! server memory, and through a sandboxed fs-helper like every other
//! operation (README "Large files").

use std::path::Path;

use crate::common::fs::{
    b64, canonical, restricted, sandbox, sandbox_available, serving_helpers, snapshot, unb64,
    workdir, Client, Server,
};
use serde_json::{json, Value};

const MIB: usize = 1024 * 1024;

use crate::common::client::pseudo_random_bytes as data;

/// `VmRSS` and `VmHWM` (peak) of `pid`, in bytes.
fn memory(pid: u32) -> (usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kib| kib.trim().parse::<usize>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or_else(|| panic!("{name} missing from /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

async fn open(client: &Client, id: &str, path: &Path, mode: &str) -> Value {
    client
        .ok(
            "fs/open",
            json!({"handleId": id, "path": path, "mode": mode}),
        )
        .await
}

async fn write_block(client: &Client, id: &str, offset: usize, bytes: &[u8]) {
    let answer = client
        .ok(
            "fs/writeBlock",
            json!({"handleId": id, "offset": offset, "dataBase64": b64(bytes)}),
        )
        .await;
    assert_eq!(answer, json!({}));
}

#[tokio::test]
async fn whole_file_methods_carry_64_mib_with_default_flags() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let bytes = data(64 * MIB, 1);
    let path = root.join("big");
    client
        .ok(
            "fs/writeFile",
            json!({"path": path, "dataBase64": b64(&bytes)}),
        )
        .await;
    assert!(
        std::fs::read(&path).unwrap() == bytes,
        "written bytes differ"
    );
    let read = client.ok("fs/readFile", json!({"path": path})).await;
    assert!(unb64(&read["dataBase64"]) == bytes, "read bytes differ");
}

#[tokio::test]
async fn an_oversize_request_is_refused_with_its_own_id() {
    let server = Server::start_with(&["--max-message-bytes", "1048576"], &[]);
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let padding = "A".repeat(2 * MIB);
    for id in [
        json!("upload-7"),
        json!(9_007_199_254_740_993i64),
        json!(-5),
    ] {
        let text = json!({
            "id": id,
            "method": "fs/writeFile",
            "params": {"path": root.join("f"), "dataBase64": padding},
        })
        .to_string();
        let answer = client.send_raw(text, &id).await;
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("exceeds the limit of 1048576 bytes"),
            "{message}"
        );
    }
    // The id member may come last, after the payload.
    let text =
        format!(r#"{{"method":"fs/writeFile","params":{{"dataBase64":"{padding}"}},"id":"late"}}"#);
    let answer = client.send_raw(text, &json!("late")).await;
    assert_eq!(answer["error"]["code"], -32600);
    // Without a recoverable id (here: no method) the answer is the `-1` error.
    let text = format!(r#"{{"id":3,"params":{{"dataBase64":"{padding}"}}}}"#);
    let answer = client.send_raw(text, &json!(-1)).await;
    assert_eq!(answer["error"]["code"], -32600);
    assert!(!root.join("f").exists());
    // The connection still serves.
    let meta = client.ok("fs/getMetadata", json!({"path": root})).await;
    assert_eq!(meta["isDirectory"], true);
}

#[tokio::test]
async fn a_file_larger_than_the_message_cap_streams_up_in_bounded_server_memory() {
    const CAP: usize = 4 * MIB;
    let server = Server::start_with(&["--max-message-bytes", &CAP.to_string()], &[]);
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let size = 128 * MIB;
    let bytes = data(size, 2);
    let path = root.join("upload");
    open(&client, "up", &path, "create").await;
    let mut peak_rss = 0;
    for (i, block) in bytes.chunks(MIB).enumerate() {
        write_block(&client, "up", i * MIB, block).await;
        peak_rss = peak_rss.max(memory(server.pid()).0);
    }
    assert_eq!(
        client.ok("fs/close", json!({"handleId": "up"})).await,
        json!({})
    );
    let (_, high_water) = memory(server.pid());
    assert!(
        std::fs::read(&path).unwrap() == bytes,
        "uploaded bytes differ"
    );
    eprintln!(
        "server RSS while uploading {} MiB: sampled peak {} KiB, VmHWM {} KiB",
        size / MIB,
        peak_rss / 1024,
        high_water / 1024
    );
    assert!(
        high_water < size / 4,
        "server peak RSS {high_water} bytes for a {size}-byte upload"
    );
}

#[tokio::test]
async fn write_blocks_land_at_their_offsets_in_any_order() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let path = root.join("out");
    let bytes = data(3 * MIB + 123, 3);
    open(&client, "w", &path, "create").await;
    // Last block first, then the first, then the middle ones backwards.
    let blocks: Vec<(usize, &[u8])> = bytes
        .chunks(MIB)
        .enumerate()
        .map(|(i, b)| (i * MIB, b))
        .collect();
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.rotate_right(1);
    order[1..].reverse();
    for i in order {
        write_block(&client, "w", blocks[i].0, blocks[i].1).await;
    }
    client.ok("fs/close", json!({"handleId": "w"})).await;
    assert!(std::fs::read(&path).unwrap() == bytes);

    // A block past the end leaves a hole of zeros.
    open(&client, "hole", &root.join("sparse"), "create").await;
    write_block(&client, "hole", 10, b"tail").await;
    write_block(&client, "hole", 0, b"head").await;
    client.ok("fs/close", json!({"handleId": "hole"})).await;
    assert_eq!(
        std::fs::read(root.join("sparse")).unwrap(),
        b"head\0\0\0\0\0\0tail"
    );

    // `create` refuses an existing path (a symlink too); `truncate` empties it.
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "c", "path": path, "mode": "create"}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32603, "File exists (os error 17)")
    );
    std::os::unix::fs::symlink(root.join("elsewhere"), root.join("link")).unwrap();
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "c", "path": root.join("link"), "mode": "create"}),
        )
        .await;
    assert_eq!(err.code, -32603);
    assert!(!root.join("elsewhere").exists());
    open(&client, "t", &path, "truncate").await;
    write_block(&client, "t", 0, b"short").await;
    client.ok("fs/close", json!({"handleId": "t"})).await;
    assert_eq!(std::fs::read(&path).unwrap(), b"short");

    // The default mode still reads, as the reference's `fs/open` does.
    client
        .ok("fs/open", json!({"handleId": "r", "path": path}))
        .await;
    let block = client
        .ok(
            "fs/readBlock",
            json!({"handleId": "r", "offset": 0, "len": 100}),
        )
        .await;
    assert_eq!(unb64(&block["chunk"]), b"short");
}

#[tokio::test]
async fn append_mode_counts_offsets_from_the_length_at_open() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let path = root.join("log");
    std::fs::write(&path, b"line1\n").unwrap();
    open(&client, "a", &path, "append").await;
    write_block(&client, "a", 6, b"line3\n").await;
    write_block(&client, "a", 0, b"line2\n").await;
    client.ok("fs/close", json!({"handleId": "a"})).await;
    assert_eq!(std::fs::read(&path).unwrap(), b"line1\nline2\nline3\n");
    // A missing file is created.
    open(&client, "n", &root.join("fresh"), "append").await;
    write_block(&client, "n", 0, b"x").await;
    client.ok("fs/close", json!({"handleId": "n"})).await;
    assert_eq!(std::fs::read(root.join("fresh")).unwrap(), b"x");
}

#[tokio::test]
async fn write_handles_share_the_limits_and_checks_of_read_handles() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::write(root.join("r"), b"readable").unwrap();
    for i in 0..64 {
        open(
            &client,
            &format!("w{i}"),
            &root.join(format!("f{i}")),
            "create",
        )
        .await;
        client
            .ok(
                "fs/open",
                json!({"handleId": format!("r{i}"), "path": root.join("r")}),
            )
            .await;
    }
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "extra", "path": root.join("extra"), "mode": "create"}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            -32600,
            "at most 128 file reads and writes may be open per connection"
        )
    );
    assert!(
        !root.join("extra").exists(),
        "a refused open created its file"
    );
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "extra", "path": root.join("r")}),
        )
        .await;
    assert_eq!(
        err.message,
        "at most 128 file reads may be open per connection"
    );
    // Another connection has its own capacity.
    let other = server.connect().await;
    open(&other, "w0", &root.join("other"), "create").await;
    client.ok("fs/close", json!({"handleId": "r0"})).await;
    open(&client, "extra", &root.join("extra"), "truncate").await;

    let err = client
        .err(
            "fs/open",
            json!({"handleId": "w1", "path": root.join("again"), "mode": "append"}),
        )
        .await;
    assert_eq!(err.message, "file write handle `w1` already exists");
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "x".repeat(33), "path": root.join("y"), "mode": "create"}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "file write handle ID must not exceed 32 bytes")
    );
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "m", "path": root.join("y"), "mode": "sideways"}),
        )
        .await;
    assert_eq!(err.code, -32602);

    let write = |id: &str, offset: u64, text: &str| json!({"handleId": id, "offset": offset, "dataBase64": text});
    let err = client
        .err("fs/writeBlock", write("r1", 0, &b64(b"x")))
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "file handle `r1` is not open for writing")
    );
    let err = client
        .err(
            "fs/readBlock",
            json!({"handleId": "w1", "offset": 0, "len": 1}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "file handle `w1` is not open for reading")
    );
    let err = client
        .err("fs/writeBlock", write("nope", 0, &b64(b"x")))
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32004, "unknown file write handle `nope`")
    );
    // Bad blocks are refused and leave the handle open.
    let err = client
        .err("fs/writeBlock", write("w1", 0, &b64(&vec![0; MIB + 1])))
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "file write block must not exceed 1048576 bytes")
    );
    let err = client.err("fs/writeBlock", write("w1", 0, "!!!")).await;
    assert_eq!(err.code, -32600);
    assert!(
        err.message
            .starts_with("fs/writeBlock requires valid base64"),
        "{}",
        err.message
    );
    let err = client
        .err("fs/writeBlock", write("w1", u64::MAX - 1, &b64(b"xy")))
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            -32600,
            "file write offset 18446744073709551614 is out of range"
        )
    );
    write_block(&client, "w1", 0, &vec![7u8; MIB]).await;
    client.ok("fs/close", json!({"handleId": "w1"})).await;
    assert_eq!(std::fs::read(root.join("f1")).unwrap(), vec![7u8; MIB]);
    let err = client
        .err("fs/writeBlock", write("w1", 0, &b64(b"x")))
        .await;
    assert_eq!(err.code, -32004);
    // Unknown ids close fine.
    client.ok("fs/close", json!({"handleId": "w1"})).await;
    // Not a regular file: refused, nothing opened.
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "d", "path": root, "mode": "append"}),
        )
        .await;
    assert_eq!(err.code, -32603, "{err:?}");
}

/// The sandbox of these tests: `work` writable, `outside` readable only.
struct Sandboxed {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    work: std::path::PathBuf,
    outside: std::path::PathBuf,
    ctx: Value,
}

fn sandboxed() -> Sandboxed {
    let (work_dir, outside_dir) = (workdir(), workdir());
    let (work, outside) = (canonical(&work_dir), canonical(&outside_dir));
    std::fs::write(outside.join("secret"), b"secret").unwrap();
    let ctx = sandbox(
        restricted(&[(&work, "write"), (&outside, "read")], &[]),
        &work,
    );
    Sandboxed {
        _dirs: (work_dir, outside_dir),
        work,
        outside,
        ctx,
    }
}

#[tokio::test]
async fn sandboxed_handles_live_in_a_helper_and_a_denied_path_is_never_written() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = sandboxed();
    let bytes = data(2 * MIB + 5, 4);
    let path = s.work.join("up");
    client
        .ok(
            "fs/open",
            json!({"handleId": "w", "path": path, "mode": "create", "sandbox": s.ctx}),
        )
        .await;
    for (i, block) in bytes.chunks(MIB).enumerate().rev() {
        write_block(&client, "w", i * MIB, block).await;
    }
    client.ok("fs/close", json!({"handleId": "w"})).await;
    assert!(std::fs::read(&path).unwrap() == bytes);
    // Reads in the sandbox too, of files it may read.
    client
        .ok(
            "fs/open",
            json!({"handleId": "r", "path": s.outside.join("secret"), "sandbox": s.ctx}),
        )
        .await;
    let block = client
        .ok(
            "fs/readBlock",
            json!({"handleId": "r", "offset": 0, "len": 100}),
        )
        .await;
    assert_eq!(unb64(&block["chunk"]), b"secret");
    client.ok("fs/close", json!({"handleId": "r"})).await;

    // Every write mode on a read-only path is denied and changes nothing.
    let before = snapshot(&s.outside);
    for (mode, target) in [
        ("create", "new"),
        ("truncate", "secret"),
        ("append", "secret"),
        ("truncate", "new"),
    ] {
        let err = client
            .err(
                "fs/open",
                json!({"handleId": "d", "path": s.outside.join(target), "mode": mode, "sandbox": s.ctx}),
            )
            .await;
        assert!(
            err.message.contains("Read-only file system")
                || err.message.contains("Permission denied"),
            "{mode} {target}: {err:?}"
        );
        assert_eq!(snapshot(&s.outside), before, "{mode} {target}");
    }
    let err = client
        .err(
            "fs/writeBlock",
            json!({"handleId": "d", "offset": 0, "dataBase64": b64(b"x")}),
        )
        .await;
    assert_eq!(err.code, -32004);
    // The same write without a sandbox goes through: the denial was the sandbox's.
    client
        .ok(
            "fs/open",
            json!({"handleId": "d", "path": s.outside.join("new"), "mode": "create"}),
        )
        .await;
    client.ok("fs/close", json!({"handleId": "d"})).await;
    assert!(s.outside.join("new").exists());
}

#[tokio::test]
async fn sandboxed_handles_count_against_the_connection_and_free_their_helper() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let boxes: Vec<Sandboxed> = (0..5).map(|_| sandboxed()).collect();
    for (i, b) in boxes.iter().take(4).enumerate() {
        client
            .ok(
                "fs/open",
                json!({"handleId": format!("s{i}"), "path": b.work.join("f"), "mode": "create", "sandbox": b.ctx}),
            )
            .await;
    }
    let held = serving_helpers(server.pid()).len();
    assert!(
        held >= 4,
        "{held} helpers for 4 sandboxes with open handles"
    );
    let fifth = &boxes[4];
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "s4", "path": fifth.work.join("f"), "mode": "create", "sandbox": fifth.ctx}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            -32600,
            "at most 4 sandboxes may have file handles open per connection"
        )
    );
    assert!(!fifth.work.join("f").exists());
    // Direct handles fill the rest of the 128.
    let direct = workdir();
    for i in 4..128 {
        open(
            &client,
            &format!("d{i}"),
            &canonical(&direct).join(format!("f{i}")),
            "create",
        )
        .await;
    }
    let err = client
        .err(
            "fs/open",
            json!({"handleId": "s5", "path": boxes[0].work.join("g"), "mode": "create", "sandbox": boxes[0].ctx}),
        )
        .await;
    assert_eq!(
        err.message,
        "at most 128 file reads and writes may be open per connection"
    );
    assert!(!boxes[0].work.join("g").exists());
    // Closing frees the sandbox slot; other one-shot calls keep working.
    client.ok("fs/close", json!({"handleId": "s0"})).await;
    client.ok("fs/close", json!({"handleId": "d4"})).await;
    client
        .ok(
            "fs/open",
            json!({"handleId": "s4", "path": fifth.work.join("f"), "mode": "create", "sandbox": fifth.ctx}),
        )
        .await;
    let meta = client
        .ok(
            "fs/getMetadata",
            json!({"path": boxes[1].work.join("f"), "sandbox": boxes[1].ctx}),
        )
        .await;
    assert_eq!(meta["isFile"], true);
}

#[tokio::test]
async fn a_helper_that_dies_takes_its_handles_with_it() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = sandboxed();
    let before = serving_helpers(server.pid());
    client
        .ok(
            "fs/open",
            json!({"handleId": "w", "path": s.work.join("f"), "mode": "create", "sandbox": s.ctx}),
        )
        .await;
    let helpers: Vec<u32> = serving_helpers(server.pid())
        .into_iter()
        .filter(|pid| !before.contains(pid))
        .collect();
    assert_eq!(helpers.len(), 1, "{helpers:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(helpers[0]).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let err = client
        .err(
            "fs/writeBlock",
            json!({"handleId": "w", "offset": 0, "dataBase64": b64(b"x")}),
        )
        .await;
    assert_eq!(err.code, -32603, "{err:?}");
    let err = client
        .err(
            "fs/writeBlock",
            json!({"handleId": "w", "offset": 0, "dataBase64": b64(b"x")}),
        )
        .await;
    assert_eq!(err.code, -32004, "{err:?}");
    // A new handle in the same sandbox gets a new helper.
    client
        .ok(
            "fs/open",
            json!({"handleId": "w", "path": s.work.join("g"), "mode": "create", "sandbox": s.ctx}),
        )
        .await;
    write_block(&client, "w", 0, b"ok").await;
    client.ok("fs/close", json!({"handleId": "w"})).await;
    assert_eq!(std::fs::read(s.work.join("g")).unwrap(), b"ok");
}
