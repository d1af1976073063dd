//! The relay transport: one virtual stream of the remote-mode executor
//! (`crate::server::relay_executor`) as a normal JSON-RPC connection on the shared
//! session registry. The stream hands in whole JSON messages and takes the
//! connection's outbound queue, and reports what it hears from the harness
//! to the connection's liveness; this module only runs the connection.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::link::liveness::Liveness;
use crate::server::config::OUTBOUND_QUEUE;
use crate::server::connection::{Connection, Shared};
use crate::server::router;

/// Inbound messages a virtual stream queues before it must wait.
pub const INBOUND_QUEUE: usize = 128;

/// Starts a connection for one virtual stream, whose task reports to
/// `liveness`. Returns where to put inbound JSON messages (dropping it ends
/// the connection and detaches its session) and where its responses and
/// notifications come out.
pub fn open(
    shared: Shared,
    stream_id: &str,
    liveness: Arc<Liveness>,
) -> (mpsc::Sender<Vec<u8>>, mpsc::Receiver<String>) {
    let (in_tx, mut in_rx) = mpsc::channel::<Vec<u8>>(INBOUND_QUEUE);
    let (out_tx, out_rx) = mpsc::channel::<String>(OUTBOUND_QUEUE);
    let prefix =
        format!("failed to parse JSON-RPC message from exec-server relay stream {stream_id}");
    let conn = Connection::new(shared, out_tx, liveness, prefix);
    tracing::debug!(
        connection = conn.id,
        stream = stream_id,
        "relay stream opened"
    );
    tokio::spawn(async move {
        while let Some(message) = in_rx.recv().await {
            router::handle_message(&conn, &message).await;
        }
        tracing::debug!(connection = conn.id, "relay stream closed");
        conn.close();
    });
    (in_tx, out_rx)
}
