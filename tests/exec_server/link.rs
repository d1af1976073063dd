//! The WebSocket link of the exec-server: a peer that goes silent is pinged,
//! then closed at its deadline with the reason; a peer that answers the
//! pings stays; `--max-connections` refuses one more connection with 503
//! and serves again once one leaves.

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::common::client::*;
use crate::common::silent::{
    assert_pinged_then_closed, silent_until_closed, upgrade, wait_until_upgraded,
};

fn addr_of(server: &Server) -> std::net::SocketAddr {
    server.addr().parse().expect("server address")
}

#[tokio::test]
async fn a_silent_peer_is_pinged_then_closed_with_the_reason() {
    let server = Server::start(&["--peer-timeout-secs", "1"]);
    let frames = silent_until_closed(addr_of(&server), "/", None).await;
    assert_pinged_then_closed(&frames, Some((1001, "no frame from the peer within 1 s")));
    // The server goes on serving.
    let (mut ws, _) = server.session().await;
    ws.call("session/list", serde_json::json!({})).await;
}

#[tokio::test]
async fn pings_are_answered_and_a_peer_that_answers_stays_past_its_deadline() {
    let server = Server::start(&["--peer-timeout-secs", "1"]);
    let (ws, _) = tokio_tungstenite::connect_async(server.url.as_str())
        .await
        .expect("connect");
    let (mut sink, mut source) = ws.split();
    sink.send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .expect("ping");
    // Reading answers the server's pings; five of them span more than
    // twice the peer deadline.
    let (mut pongs, mut pings) = (0, 0);
    while pings < 5 {
        let frame = tokio::time::timeout(WAIT, source.next()).await;
        match frame {
            Ok(Some(Ok(Message::Pong(payload)))) => {
                assert_eq!(&payload[..], b"are you there");
                pongs += 1;
            }
            Ok(Some(Ok(Message::Ping(_)))) => pings += 1,
            other => panic!("expected pings and a pong, got {other:?}"),
        }
    }
    assert_eq!(pongs, 1, "our ping is answered once");
    // Still open: a request is answered.
    let request = r#"{"id":1,"method":"initialize","params":{"clientName":"link-test"}}"#;
    sink.send(Message::text(request)).await.expect("send");
    loop {
        match tokio::time::timeout(WAIT, source.next()).await {
            Ok(Some(Ok(Message::Text(text)))) => {
                assert!(text.contains("\"sessionId\""), "{text}");
                break;
            }
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            other => panic!("no answer from a live link: {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_connection_cap_refuses_one_more_with_503_until_one_leaves() {
    let server = Server::start(&["--max-connections", "2"]);
    let addr = addr_of(&server);
    let (first, _) = server.session().await;
    let (mut second, _) = server.session().await;
    let (status, _) = upgrade(addr, "/", None).await;
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    // The two served connections are not disturbed.
    second.call("session/list", serde_json::json!({})).await;
    first.close().await;
    // Once the first connection's task has ended, its slot serves again.
    wait_until_upgraded(addr, None).await;
}
