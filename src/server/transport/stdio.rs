//! The stdio transport: newline-delimited JSON on stdin/stdout, one
//! connection. When stdin ends, the caller kills everything and exits.

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::server::config::OUTBOUND_QUEUE;
use crate::server::connection::{Connection, Shared};
use crate::server::router;
use crate::server::wire_trace::{self, Direction};

/// Serves stdin/stdout until stdin hits EOF (or a line exceeds the
/// transport cap, which ends the connection like EOF).
pub async fn serve(shared: Shared) {
    let cap = shared.config.transport_cap();
    let (out_tx, mut out_rx) = mpsc::channel::<String>(OUTBOUND_QUEUE);
    // The one connection: nothing can resume its session, nothing to probe.
    let conn = Connection::new(
        shared,
        out_tx,
        crate::link::liveness::Liveness::new(false),
        "failed to parse JSON-RPC message from exec-server stdio".to_owned(),
    );
    let connection = conn.id;
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(mut text) = out_rx.recv().await {
            wire_trace::trace(connection, Direction::Out, text.as_bytes());
            // One write per message: each write on tokio's stdout is a trip
            // through the blocking pool.
            text.push('\n');
            if stdout.write_all(text.as_bytes()).await.is_err() {
                return;
            }
            if out_rx.is_empty() && stdout.flush().await.is_err() {
                return;
            }
        }
        let _ = stdout.flush().await;
    });
    let mut stdin = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    let mut line = Vec::new();
    while let Ok(buf) = stdin.fill_buf().await {
        if buf.is_empty() {
            if !line.is_empty() {
                handle_line(&conn, &line).await;
            }
            break;
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(pos) => {
                line.extend_from_slice(&buf[..pos]);
                stdin.consume(pos + 1);
                if line.len() > cap {
                    break;
                }
                handle_line(&conn, &line).await;
                line.clear();
            }
            None => {
                let len = buf.len();
                line.extend_from_slice(buf);
                stdin.consume(len);
                if line.len() > cap {
                    break;
                }
            }
        }
    }
    conn.close();
    drop(conn);
    // Let queued answers reach stdout; pending long polls may still hold the queue.
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), writer).await;
}

async fn handle_line(conn: &std::sync::Arc<Connection>, line: &[u8]) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    router::handle_message(conn, line).await;
}
