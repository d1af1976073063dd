//! How codexbox's own outbound connections are made (`http/request`,
//! registry calls, rendezvous sockets): the proxy the environment names
//! for the URL ([`Upstream::for_url`]), a CONNECT tunnel through it for
//! TLS and WebSocket targets, and the one TLS client configuration
//! (rustls with the ring provider, the system's root certificates plus
//! `CODEX_CA_CERTIFICATE`).

use std::io;
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::dial::dial_unchecked;
use super::upstream::{ProxyEndpoint, Upstream, UpstreamError};
use crate::web_url::WebUrl;

/// Environment variable naming an extra PEM bundle of trusted roots.
pub const CA_CERTIFICATE_ENV: &str = "CODEX_CA_CERTIFICATE";

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot connect to {authority}: {source}")]
    Tcp {
        authority: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("upstream proxy {proxy} sent bytes before the tunnel was used")]
    TunnelNotClean { proxy: String },
    #[error("cannot set up TLS: {0}")]
    TlsConfig(String),
    #[error("invalid TLS server name `{0}`")]
    ServerName(String),
    #[error("TLS handshake with {host} failed: {source}")]
    Handshake {
        host: String,
        #[source]
        source: io::Error,
    },
}

/// Anything a connection runs on.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// A boxed connection.
pub type BoxedIo = Box<dyn Io>;

/// An open connection for a URL.
pub struct Connection {
    pub io: BoxedIo,
    /// The proxy a plain-HTTP request goes to in absolute form (it sees
    /// the request; every other proxied connection is a tunnel).
    pub forward_proxy: Option<ProxyEndpoint>,
}

/// How a connection through a proxy is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    /// Plain HTTP is forwarded in absolute form, TLS tunnelled.
    Request,
    /// Always a CONNECT tunnel (a WebSocket, even a `ws://` one).
    Tunnel,
}

/// Connects to `url`, through the proxy `upstream` names for it.
pub async fn connect(
    url: &WebUrl,
    upstream: &Upstream,
    through: Through,
) -> Result<Connection, ConnectError> {
    let proxy = upstream.for_url(url);
    let forward = !url.is_secure() && through == Through::Request;
    let tcp = match proxy {
        Some(endpoint) if forward => {
            return Ok(Connection {
                io: Box::new(endpoint.connect().await?),
                forward_proxy: Some(endpoint.clone()),
            })
        }
        Some(endpoint) => {
            let (stream, early) = endpoint.tunnel(&url.authority()).await?;
            // Neither a TLS nor an HTTP server speaks first.
            if !early.is_empty() {
                return Err(ConnectError::TunnelNotClean {
                    proxy: endpoint.display(),
                });
            }
            stream
        }
        None => dial_unchecked(url.host(), url.port())
            .await
            .map_err(|source| ConnectError::Tcp {
                authority: url.authority(),
                source,
            })?,
    };
    let io: BoxedIo = if url.is_secure() {
        Box::new(tls_handshake(tcp, url.host()).await?)
    } else {
        Box::new(tcp)
    };
    Ok(Connection {
        io,
        forward_proxy: None,
    })
}

/// Runs the TLS handshake for `host` over `tcp`, verifying the certificate.
pub async fn tls_handshake(
    tcp: TcpStream,
    host: &str,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ConnectError> {
    let config = tls_client_config().map_err(ConnectError::TlsConfig)?;
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|_| ConnectError::ServerName(host.to_owned()))?;
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|source| ConnectError::Handshake {
            host: host.to_owned(),
            source,
        })
}

/// The TLS client configuration of every outgoing connection: rustls with
/// the ring provider, the system's root certificates and those of
/// `CODEX_CA_CERTIFICATE`; built once per process. The error says why no
/// configuration could be built.
pub fn tls_client_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG.get_or_init(build_tls_config).clone()
}

fn build_tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = std::env::var_os(CA_CERTIFICATE_ENV).filter(|p| !p.is_empty()) {
        let shown = std::path::Path::new(&path).display().to_string();
        let certs = CertificateDer::pem_file_iter(&path).map_err(|e| format!("{shown}: {e}"))?;
        for cert in certs {
            let cert = cert.map_err(|e| format!("{shown}: {e}"))?;
            roots.add(cert).map_err(|e| format!("{shown}: {e}"))?;
        }
    }
    if roots.is_empty() {
        return Err("no usable root certificate on this system".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
