//! A WebSocket peer that upgrades and then neither speaks nor answers (it
//! reads the raw bytes, so no pong goes back): what a vanished host looks
//! like to a server. It returns the frames the server sent until it closed
//! the connection, so a test sees the pings and the close frame.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::client::WAIT;

/// One frame from a server (servers do not mask).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub opcode: u8,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The code and reason of a close frame.
    pub fn close(&self) -> Option<(u16, String)> {
        if self.opcode != 8 {
            return None;
        }
        let code = u16::from_be_bytes([*self.payload.first()?, *self.payload.get(1)?]);
        let reason = String::from_utf8_lossy(self.payload.get(2..).unwrap_or_default());
        Some((code, reason.into_owned()))
    }
}

/// The first answer line of an upgrade request to `addr` for `path`
/// (`HTTP/1.1 101 ...` when accepted), and the connection.
pub async fn upgrade(addr: SocketAddr, path: &str, token: Option<&str>) -> (String, TcpStream) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let auth = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{auth}\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(WAIT, stream.read(&mut byte)).await;
        match read {
            Ok(Ok(1)) => head.push(byte[0]),
            Ok(_) => break,
            Err(_) => panic!("no answer to the upgrade within {WAIT:?}"),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let status = text.lines().next().unwrap_or_default().to_owned();
    (status, stream)
}

/// Upgrades, then stays silent until the server closes the connection
/// (bounded); returns every frame it sent.
pub async fn silent_until_closed(addr: SocketAddr, path: &str, token: Option<&str>) -> Vec<Frame> {
    let (status, mut stream) = upgrade(addr, path, token).await;
    assert!(
        status.starts_with("HTTP/1.1 101"),
        "upgrade refused: {status}"
    );
    let mut bytes = Vec::new();
    let read = tokio::time::timeout(WAIT * 3, stream.read_to_end(&mut bytes)).await;
    assert!(
        read.is_ok(),
        "a silent peer was not closed within {:?}",
        WAIT * 3
    );
    parse_frames(&bytes)
}

fn parse_frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while let [first, second, rest @ ..] = bytes {
        let (len, rest) = match second & 0x7f {
            126 if rest.len() >= 2 => (
                usize::from(u16::from_be_bytes([rest[0], rest[1]])),
                &rest[2..],
            ),
            127 if rest.len() >= 8 => {
                let mut len = [0u8; 8];
                len.copy_from_slice(&rest[..8]);
                (
                    usize::try_from(u64::from_be_bytes(len)).unwrap_or(usize::MAX),
                    &rest[8..],
                )
            }
            len @ 0..=125 => (usize::from(len), rest),
            _ => break,
        };
        let Some(payload) = rest.get(..len) else {
            break;
        };
        frames.push(Frame {
            opcode: first & 0x0f,
            payload: payload.to_vec(),
        });
        bytes = &rest[len..];
    }
    frames
}

/// Asserts the server pinged the silent peer, then closed with `close`
/// (code and reason) or, when `None`, with any close frame.
pub fn assert_pinged_then_closed(frames: &[Frame], close: Option<(u16, &str)>) {
    assert!(frames.iter().any(|f| f.opcode == 9), "no ping: {frames:?}");
    let sent = frames.iter().find(|f| f.opcode == 8);
    let Some(sent) = sent else {
        panic!("no close frame: {frames:?}");
    };
    if let Some((code, reason)) = close {
        assert_eq!(sent.close(), Some((code, reason.to_owned())), "{frames:?}");
    }
}

/// Waits (bounded) until an upgrade to `addr` is accepted again after a
/// connection left a full server; every refusal meanwhile must be a 503.
pub async fn wait_until_upgraded(addr: SocketAddr, token: Option<&str>) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (status, _) = upgrade(addr, "/", token).await;
        if status.starts_with("HTTP/1.1 101") {
            return;
        }
        assert!(status.starts_with("HTTP/1.1 503"), "{status}");
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was never given back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
