//! Test doubles of the reference's remote mode, written from its
//! documented behaviour rather than from codexbox's own stream code:
//! single-segment data frames, `seq` from 0 per direction equal to the
//! Noise nonce, no acknowledgements, no retransmission, `resume{0}` then
//! `handshake` from the harness, an empty-payload msg2 from the executor.
//! Only the wire definitions (frame structs, Noise handshake) are shared.
#![allow(dead_code)]

use std::collections::HashMap;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use codexbox::relay::frame::{Body, RelayMessageFrame};
use codexbox::relay::noise::{prologue, Initiator, NoiseIdentity, Opener, Responder, Sealer};
use codexbox::relay::registry_client::{AuthHeaders, RegistryClient};
use codexbox::relay::socket::dial;

use super::client::WAIT;

/// Plaintext per record, as the reference cuts messages.
const RECORD: usize = 61440;
/// How long the reference executor double waits for its local server.
const LOCAL_SILENCE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Checks a frame has the reference's shape: no ack fields, single segments.
pub fn assert_reference_shape(frame: &RelayMessageFrame) {
    assert_eq!(
        (frame.ack, frame.ack_bits),
        (0, 0),
        "ack fields set: {frame:?}"
    );
    if let Some(Body::Data(data)) = &frame.body {
        assert_eq!(
            (data.segment_index, data.segment_count),
            (0, 1),
            "segmented: {frame:?}"
        );
    }
    assert!(
        !matches!(frame.body, Some(Body::AckFrame(_) | Body::Heartbeat(_))),
        "the reference never sees {}",
        frame.kind()
    );
}

/// One direction of a reference stream: seal, number and frame messages.
struct Sender {
    stream_id: String,
    sealer: Sealer,
    seq: u32,
}

impl Sender {
    fn frames(&mut self, json: &[u8]) -> Vec<Vec<u8>> {
        let mut plain = (json.len() as u32).to_be_bytes().to_vec();
        plain.extend_from_slice(json);
        plain
            .chunks(RECORD)
            .map(|chunk| {
                let ciphertext = self.sealer.seal(chunk).expect("seal");
                let frame = RelayMessageFrame::data(&self.stream_id, self.seq, 0, 1, ciphertext);
                self.seq += 1;
                frame.to_bytes()
            })
            .collect()
    }
}

/// The other direction: strictly in-order records, length-prefixed messages.
struct Receiver {
    opener: Opener,
    seq: u32,
    buffer: Vec<u8>,
}

impl Receiver {
    fn record(&mut self, seq: u32, ciphertext: &[u8]) -> Vec<Vec<u8>> {
        assert_eq!(seq, self.seq, "records arrive in order from seq 0");
        self.seq += 1;
        let plain = self.opener.open(ciphertext).expect("decrypt");
        self.buffer.extend_from_slice(&plain);
        let mut messages = Vec::new();
        while self.buffer.len() >= 4 {
            let len = u32::from_be_bytes([
                self.buffer[0],
                self.buffer[1],
                self.buffer[2],
                self.buffer[3],
            ]) as usize;
            if self.buffer.len() < 4 + len {
                break;
            }
            messages.push(self.buffer[4..4 + len].to_vec());
            self.buffer.drain(..4 + len);
        }
        messages
    }
}

/// A reference harness: one socket, one stream.
pub struct ReferenceHarness {
    ws: codexbox::relay::socket::RelaySocket,
    pub stream_id: String,
    sender: Sender,
    receiver: Receiver,
    /// The feature bits the executor's msg2 frame carried.
    pub msg2_ack_bits: u32,
    backlog: Vec<Value>,
    next_id: i64,
}

impl ReferenceHarness {
    /// POST /connect, socket, `resume{0}`, `handshake{msg1}`, msg2.
    pub async fn connect(registry: &str, environment: &str) -> ReferenceHarness {
        match Self::try_connect(registry, environment).await {
            Ok(harness) => harness,
            Err(reason) => panic!("stream reset during the handshake: {reason}"),
        }
    }

    /// Like [`connect`](Self::connect); a reset instead of msg2 is `Err(reason)`.
    pub async fn try_connect(
        registry: &str,
        environment: &str,
    ) -> Result<ReferenceHarness, String> {
        Self::try_connect_with(registry, environment, AuthHeaders::default()).await
    }

    /// Like [`connect`](Self::connect), calling the registry with `auth`.
    pub async fn connect_with(
        registry: &str,
        environment: &str,
        auth: AuthHeaders,
    ) -> ReferenceHarness {
        match Self::try_connect_with(registry, environment, auth).await {
            Ok(harness) => harness,
            Err(reason) => panic!("no stream: {reason}"),
        }
    }

    /// Like [`try_connect`](Self::try_connect), calling the registry with
    /// `auth`; a refused upgrade is `Err` too.
    pub async fn try_connect_with(
        registry: &str,
        environment: &str,
        auth: AuthHeaders,
    ) -> Result<ReferenceHarness, String> {
        let identity = NoiseIdentity::generate().expect("identity");
        let registry = RegistryClient::new(registry, environment, auth).expect("registry");
        let bundle = registry
            .connect(&identity.public_key().encode())
            .await
            .expect("connect bundle");
        let mut ws = dial(&bundle.url)
            .await
            .map_err(|err| format!("upgrade refused: {err}"))?;
        let stream_id = uuid::Uuid::new_v4().to_string();
        let p = prologue(
            &bundle.environment_id,
            &bundle.executor_registration_id,
            &stream_id,
        );
        let key = bundle.executor_public_key.decode().expect("executor key");
        let (initiator, msg1) = Initiator::start(
            &identity,
            &key,
            &p,
            bundle.harness_key_authorization.as_bytes(),
        )
        .expect("msg1");
        assert_eq!(msg1.len(), 3568 + bundle.harness_key_authorization.len());
        for frame in [
            RelayMessageFrame::resume(&stream_id, 0),
            RelayMessageFrame::handshake(&stream_id, msg1, 0),
        ] {
            ws.send(Message::binary(frame.to_bytes()))
                .await
                .expect("send");
        }
        let (msg2, bits) = loop {
            let frame = next_frame(&mut ws).await.expect("msg2");
            if frame.stream_id != stream_id {
                continue;
            }
            match frame.body {
                Some(Body::Handshake(h)) => break (h.payload, frame.ack_bits),
                Some(Body::Reset(reset)) => return Err(reset.reason),
                other => panic!("expected msg2, got {other:?}"),
            }
        };
        assert_eq!(msg2.len(), 3424);
        let transport = initiator.finish(&msg2).expect("finish handshake");
        Ok(ReferenceHarness {
            ws,
            sender: Sender {
                stream_id: stream_id.clone(),
                sealer: transport.sealer,
                seq: 0,
            },
            receiver: Receiver {
                opener: transport.opener,
                seq: 0,
                buffer: Vec::new(),
            },
            stream_id,
            msg2_ack_bits: bits,
            backlog: Vec::new(),
            next_id: 1,
        })
    }

    pub async fn send(&mut self, value: Value) {
        for bytes in self.sender.frames(value.to_string().as_bytes()) {
            self.ws
                .send(Message::binary(bytes))
                .await
                .expect("send data");
        }
    }

    /// The next JSON-RPC message.
    pub async fn recv(&mut self) -> Value {
        self.recv_within(WAIT).await
    }

    /// The next JSON-RPC message, waiting up to `limit` for each frame.
    pub async fn recv_within(&mut self, limit: std::time::Duration) -> Value {
        if !self.backlog.is_empty() {
            return self.backlog.remove(0);
        }
        loop {
            let frame = next_frame_within(&mut self.ws, limit)
                .await
                .expect("stream ended");
            if frame.stream_id != self.stream_id {
                continue;
            }
            assert_reference_shape(&frame);
            match frame.body {
                Some(Body::Data(data)) => {
                    let mut messages = self.receiver.record(data.seq, &data.payload);
                    if !messages.is_empty() {
                        let first = messages.remove(0);
                        for rest in messages {
                            self.backlog
                                .push(serde_json::from_slice(&rest).expect("json"));
                        }
                        return serde_json::from_slice(&first).expect("json");
                    }
                }
                Some(Body::Reset(reset)) => panic!("stream reset: {}", reset.reason),
                _ => {}
            }
        }
    }

    /// Sends a request and returns its result (other messages are kept).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(serde_json::json!({"id": id, "method": method, "params": params}))
            .await;
        let mut kept = Vec::new();
        loop {
            let message = self.recv().await;
            if message["id"] == id {
                self.backlog.splice(0..0, kept);
                assert!(message.get("error").is_none(), "{method} failed: {message}");
                return message["result"].clone();
            }
            kept.push(message);
        }
    }

    /// The output of `process_id` until its `process/closed`.
    pub async fn output_until_closed(&mut self, process_id: &str) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let message = self.recv().await;
            if message["params"]["processId"] != process_id {
                continue;
            }
            match message["method"].as_str() {
                Some("process/output") => out.extend(super::client::unb64(
                    message["params"]["chunk"].as_str().unwrap_or(""),
                )),
                Some("process/closed") => return out,
                _ => {}
            }
        }
    }
}

pub async fn next_frame(
    ws: &mut codexbox::relay::socket::RelaySocket,
) -> Option<RelayMessageFrame> {
    next_frame_within(ws, WAIT).await
}

/// The next frame, waiting up to `limit`; `None` when the socket ended.
pub async fn next_frame_within(
    ws: &mut codexbox::relay::socket::RelaySocket,
    limit: std::time::Duration,
) -> Option<RelayMessageFrame> {
    loop {
        let message = tokio::time::timeout(limit, ws.next()).await.ok()??;
        match message {
            Ok(Message::Binary(bytes)) => {
                return Some(
                    RelayMessageFrame::parse(&bytes, codexbox::relay::Dialect::Reference)
                        .expect("valid frame"),
                )
            }
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// A reference executor in front of a real local exec-server: it registers,
/// holds the rendezvous socket, completes handshakes after `validate`
/// (never answering the reliable offer) and forwards each stream's
/// decrypted messages to its own WebSocket connection to `local`.
pub struct ReferenceExecutor {
    task: tokio::task::JoinHandle<()>,
    /// Frames the double received from harnesses, for shape checks.
    pub frames: std::sync::Arc<std::sync::Mutex<Vec<RelayMessageFrame>>>,
}

impl Drop for ReferenceExecutor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ReferenceExecutor {
    pub async fn start(registry: &str, environment: &str, local: &str) -> ReferenceExecutor {
        let identity = NoiseIdentity::generate().expect("identity");
        let registry =
            RegistryClient::new(registry, environment, AuthHeaders::default()).expect("registry");
        let registration = registry
            .register(&identity.public_key().encode())
            .await
            .expect("register");
        let ws = dial(&registration.url).await.expect("dial");
        let frames = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = frames.clone();
        let local = local.to_owned();
        let task = tokio::spawn(async move {
            let (mut sink, mut source) = ws.split();
            let (out_tx, mut out_rx) = mpsc::channel::<Vec<u8>>(256);
            tokio::spawn(async move {
                while let Some(bytes) = out_rx.recv().await {
                    if sink.send(Message::binary(bytes)).await.is_err() {
                        return;
                    }
                }
            });
            let mut streams: HashMap<String, (Receiver, mpsc::Sender<String>)> = HashMap::new();
            while let Some(Ok(message)) = source.next().await {
                let Message::Binary(bytes) = message else {
                    continue;
                };
                let Ok(frame) =
                    RelayMessageFrame::parse(&bytes, codexbox::relay::Dialect::Reference)
                else {
                    continue;
                };
                seen.lock().expect("lock").push(frame.clone());
                let sid = frame.stream_id.clone();
                match frame.body {
                    Some(Body::Handshake(h)) => {
                        let p = prologue(
                            environment_of(&registration),
                            &registration.executor_registration_id,
                            &sid,
                        );
                        let responder =
                            Responder::read_request(&identity, &p, &h.payload).expect("msg1");
                        let authorization =
                            String::from_utf8(responder.payload().to_vec()).expect("utf8");
                        registry
                            .validate(
                                &registration.executor_registration_id,
                                &responder.remote_key().encode(),
                                &authorization,
                            )
                            .await
                            .expect("validate");
                        let (msg2, transport) = responder.finish().expect("msg2");
                        let _ = out_tx
                            .send(RelayMessageFrame::handshake(&sid, msg2, 0).to_bytes())
                            .await;
                        let mut local_ws = super::client::Raw::connect(&local).await;
                        let (to_local, mut from_harness) = mpsc::channel::<String>(256);
                        let mut sender = Sender {
                            stream_id: sid.clone(),
                            sealer: transport.sealer,
                            seq: 0,
                        };
                        let out = out_tx.clone();
                        tokio::spawn(async move {
                            loop {
                                tokio::select! {
                                    text = from_harness.recv() => {
                                        let Some(text) = text else { return };
                                        local_ws.send_text(text).await;
                                    }
                                    // The local server may be silent for long
                                    // (a request that waits); the task ends with the double.
                                    reply = local_ws.recv_socket_within(LOCAL_SILENCE) => {
                                        let Some(reply) = reply else { return };
                                        for bytes in sender.frames(reply.to_string().as_bytes()) {
                                            if out.send(bytes).await.is_err() {
                                                return;
                                            }
                                        }
                                    }
                                }
                            }
                        });
                        streams.insert(
                            sid,
                            (
                                Receiver {
                                    opener: transport.opener,
                                    seq: 0,
                                    buffer: Vec::new(),
                                },
                                to_local,
                            ),
                        );
                    }
                    Some(Body::Data(data)) => {
                        let Some((receiver, to_local)) = streams.get_mut(&sid) else {
                            continue;
                        };
                        for message in receiver.record(data.seq, &data.payload) {
                            let _ = to_local
                                .send(String::from_utf8(message).expect("utf8"))
                                .await;
                        }
                    }
                    Some(Body::Reset(_)) => {
                        streams.remove(&sid);
                    }
                    // resume, ack_frame, heartbeat: ignored, as the reference does.
                    _ => {}
                }
            }
        });
        ReferenceExecutor { task, frames }
    }
}

fn environment_of(registration: &codexbox::relay::registry_api::RegisterResponse) -> &str {
    &registration.environment_id
}
