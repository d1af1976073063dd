//! The writer half of a relay WebSocket (executor and rendezvous): alone
//! owns the sink, sends what is queued in batches with one flush, and pings
//! at the keepalive interval. It ends when the queue closes (after a close
//! frame) or the socket fails.

use std::time::Duration;

use futures_util::{Sink, SinkExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Bytes, Message};

/// Writes queued frames to `sink` until the queue closes or a write fails.
pub async fn write_frames<K, T>(mut sink: K, mut queue: mpsc::Receiver<T>, ping_every: Duration)
where
    K: Sink<Message> + Unpin,
    T: Into<Bytes>,
{
    let start = tokio::time::Instant::now() + ping_every;
    let mut ping = tokio::time::interval_at(start, ping_every);
    loop {
        tokio::select! {
            frame = queue.recv() => {
                let Some(frame) = frame else { break };
                if sink.feed(Message::Binary(frame.into())).await.is_err() {
                    return;
                }
                while let Ok(frame) = queue.try_recv() {
                    if sink.feed(Message::Binary(frame.into())).await.is_err() {
                        return;
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
            _ = ping.tick() => {
                if sink.send(Message::Ping(Bytes::new())).await.is_err() {
                    return;
                }
            }
        }
    }
    let _ = sink.close().await;
}
