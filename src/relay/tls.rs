//! TLS for `https://` registries and `wss://` rendezvous URLs, with the
//! client configuration every outgoing connection shares
//! ([`crate::net::client::tls_client_config`]: the system's root
//! certificates, as the reference uses native roots, `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` pointing elsewhere, plus `CODEX_CA_CERTIFICATE`).

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

/// Why a TLS connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot set up TLS: {0}")]
    Config(String),
    #[error("invalid TLS server name `{0}`")]
    ServerName(String),
    #[error("TLS handshake with {host} failed: {source}")]
    Handshake {
        host: String,
        #[source]
        source: std::io::Error,
    },
}

/// Runs the TLS handshake for `host` over `tcp`, verifying the certificate.
pub async fn connect(host: &str, tcp: TcpStream) -> Result<TlsStream<TcpStream>, TlsError> {
    let name =
        ServerName::try_from(host.to_owned()).map_err(|_| TlsError::ServerName(host.to_owned()))?;
    TlsConnector::from(crate::net::client::tls_client_config().map_err(TlsError::Config)?)
        .connect(name, tcp)
        .await
        .map_err(|source| TlsError::Handshake {
            host: host.to_owned(),
            source,
        })
}

/// A TCP connection with or without TLS.
#[derive(Debug)]
pub enum MaybeTls {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl MaybeTls {
    /// Connects to `authority`, with TLS for `host` when `secure`.
    pub async fn connect(authority: &str, host: &str, secure: bool) -> Result<Self, ConnectError> {
        let tcp = TcpStream::connect(authority)
            .await
            .map_err(ConnectError::Tcp)?;
        let _ = tcp.set_nodelay(true);
        if !secure {
            return Ok(Self::Plain(tcp));
        }
        Ok(Self::Tls(Box::new(connect(host, tcp).await?)))
    }
}

/// Why [`MaybeTls::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    Tcp(#[source] std::io::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl tokio::io::AsyncRead for MaybeTls {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for MaybeTls {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
