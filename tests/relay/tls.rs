//! Remote mode over TLS: an `https://` registry and `wss://` relay URLs,
//! here a TLS terminator (the test's, with a test CA) in front of the
//! rendezvous, as a deployment would have one. The executor and the bridge
//! verify the certificate against the roots `SSL_CERT_FILE` (or
//! `CODEX_CA_CERTIFICATE`) names, and refuse it without them.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use crate::common::client::{output_of, sh};
use crate::common::relay::{Bridge, Executor, Rendezvous};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;

fn tls_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls")
}

/// A TLS terminator on 127.0.0.1; it forwards to the address sent on the
/// returned channel (the rendezvous, started once the terminator's port is
/// known, because the rendezvous advertises it).
async fn terminator() -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<std::net::SocketAddr>,
) {
    let cert = CertificateDer::from(std::fs::read(tls_dir().join("server.der")).expect("cert"));
    let key =
        PrivateKeyDer::try_from(std::fs::read(tls_dir().join("server.key.der")).expect("key"))
            .expect("pkcs8 key");
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (target_tx, target_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Ok(target) = target_rx.await else { return };
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut plain) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    (addr, target_tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_mode_works_over_https_and_wss_and_checks_the_certificate() {
    let (addr, target) = terminator().await;
    let public = format!("https://localhost:{}", addr.port());
    // Behind a terminator the peers name another address than the one the
    // rendezvous listens on: they get their tokens from a token file.
    let mut tokens = tempfile::NamedTempFile::new().expect("token file");
    writeln!(tokens, "exec-tok * executor\nharn-tok * harness").expect("write tokens");
    let tokens_path = tokens.path().to_string_lossy().into_owned();
    let rendezvous = Rendezvous::start(&["--public-url", &public, "--tokens", &tokens_path]);
    target.send(rendezvous.addr()).expect("terminator running");
    let ca = tls_dir().join("ca.pem").to_string_lossy().into_owned();
    let executor_token = ("CODEX_API_KEY", "exec-tok");
    let harness_token = ("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN", "harn-tok");
    let trust = [
        ("SSL_CERT_FILE", ca.as_str()),
        executor_token,
        harness_token,
    ];

    // Without the test CA the certificate is refused and nothing registers.
    let mut untrusting =
        Executor::spawn(&public, "env-tls", &[], &[("SSL_CERT_FILE", "/dev/null")]);
    let status = untrusting.proc.wait().expect("exits");
    assert!(!status.success(), "{}", untrusting.proc.stderr());

    let _executor = Executor::start(&public, "env-tls", &[], &trust);
    let bridge = Bridge::start(&public, "env-tls", &[], &trust);
    let mut client = bridge.client().await;
    client.handshake().await;
    client.call("process/start", sh("p", "echo over-tls")).await;
    let events = client.events_until_closed("p").await;
    assert_eq!(output_of(&events), "over-tls\n");

    // The CA may also come through CODEX_CA_CERTIFICATE, as for http/request.
    let extra_ca = [
        ("SSL_CERT_FILE", "/dev/null"),
        ("CODEX_CA_CERTIFICATE", ca.as_str()),
        executor_token,
        harness_token,
    ];
    let _executor = Executor::start(&public, "env-tls-ca", &[], &extra_ca);
    let bridge = Bridge::start(&public, "env-tls-ca", &[], &extra_ca);
    let mut client = bridge.client().await;
    client.handshake().await;
    client.call("process/start", sh("p", "echo extra-ca")).await;
    let events = client.events_until_closed("p").await;
    assert_eq!(output_of(&events), "extra-ca\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_registries_and_wss_relays_are_tunnelled_through_https_proxy() {
    let (addr, target) = terminator().await;
    let public = format!("https://localhost:{}", addr.port());
    let mut tokens = tempfile::NamedTempFile::new().expect("token file");
    writeln!(tokens, "exec-tok * executor").expect("write tokens");
    let tokens_path = tokens.path().to_string_lossy().into_owned();
    let rendezvous = Rendezvous::start(&["--public-url", &public, "--tokens", &tokens_path]);
    target.send(rendezvous.addr()).expect("terminator running");
    let proxy = crate::common::net::RecordingProxy::start();
    let ca = tls_dir().join("ca.pem").to_string_lossy().into_owned();
    let proxy_url = proxy.url();
    // HTTP_PROXY is for http:// only: a dead one changes nothing here.
    let _executor = Executor::start(
        &public,
        "env-tls-proxied",
        &[],
        &[
            ("SSL_CERT_FILE", ca.as_str()),
            ("CODEX_API_KEY", "exec-tok"),
            ("HTTPS_PROXY", proxy_url.as_str()),
            ("HTTP_PROXY", "http://127.0.0.1:9"),
        ],
    );
    let connect = format!("CONNECT localhost:{} HTTP/1.1", addr.port());
    let lines = proxy.lines();
    // One tunnel for the registration, one for the relay socket.
    assert_eq!(
        lines.iter().filter(|line| **line == connect).count(),
        2,
        "{lines:?}"
    );
}
