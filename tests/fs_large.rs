//! Large files through the real server over WebSocket: whole-file methods at
//! 64 MiB with default flags, an oversize request answered with its own id.

mod common;

use common::fs::{b64, canonical, unb64, workdir, Server};
use serde_json::json;

const MIB: usize = 1024 * 1024;

/// Deterministic bytes that do not compress into a pattern a bug could hide in.
fn data(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[0]
        })
        .collect()
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
