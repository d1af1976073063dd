//! A rendezvous embedded in this test process (`Rendezvous::bind` +
//! `run`): stopping it closes its relay sockets and its pending
//! connections, and `run` returns only once every task it started has ended.

use std::net::SocketAddr;

use codexbox::rendezvous::{Rendezvous, RendezvousConfig};

use crate::common::client::WAIT;
use crate::common::relay::Executor;

#[test]
fn a_stopped_embedded_rendezvous_leaves_no_task_behind() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut config = RendezvousConfig::new(listen);
        config.insecure_no_auth = true;
        let rendezvous = Rendezvous::bind(config).await.unwrap();
        let url = rendezvous.url();
        let addr = url.trim_start_matches("http://").to_owned();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(rendezvous.run(async {
            let _ = stopped.await;
        }));
        // A real executor holds a relay socket; its start waits (blocking)
        // until it says it is connected, so it runs on a thread of its own.
        let registry = url.clone();
        let executor = std::thread::spawn(move || Executor::start(&registry, "env-1", &[], &[]));
        let mut executor = tokio::task::spawn_blocking(move || executor.join())
            .await
            .unwrap()
            .expect("executor thread");
        // A connection that never sends its request: pending until stopped.
        let _pending = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let metrics = tokio::runtime::Handle::current().metrics();
        assert!(metrics.num_alive_tasks() > 2, "sockets are being served");

        let _ = stop.send(());
        let outcome = tokio::time::timeout(WAIT, serving).await;
        assert!(matches!(outcome, Ok(Ok(()))), "{outcome:?}");
        // The relay socket, the pending connection, the sweeper and the
        // reloader have all ended.
        assert_eq!(metrics.num_alive_tasks(), 0);
        executor.proc.kill();
    });
}
