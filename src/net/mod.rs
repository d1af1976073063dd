//! The network capability (docs/network.md): a policy-enforcing proxy (HTTP
//! forward, CONNECT, SOCKS5) shared by `codexbox proxy`, the exec-server's
//! per-process `networkProxy` and `codexbox sandbox --allow-domain`.
//!
//! - [`destination`]: the one canonical form of a destination host;
//! - [`policy`]: patterns and the pure host decision;
//! - [`resolve`]: local/private classification, `--resolve`, DNS checks;
//! - [`dial`]: outbound connections to checked addresses only;
//! - [`dns`]: the DNS stub inside a managed sandbox and its codec;
//! - [`http_proxy`], [`socks5`]: the two listeners; [`http_server`]: the
//!   HTTP/1.1 serving every listener shares;
//! - [`relay`]: tunnel bytes (`splice(2)`, no copies in the proxy);
//! - [`upstream`]: chaining to an upstream HTTP proxy;
//! - `exchange`: one request on a client connection driven in the
//!   caller's task (an upstream CONNECT, the DNS stub's question);
//! - [`client`], [`connector`]: codexbox's own outbound HTTP
//!   client (`http/request`, registries) and connections (rendezvous
//!   sockets too), through the process's proxy settings;
//! - [`decision`], [`audit`]: what was decided and where it is reported;
//! - [`env`]: the variables a child gets;
//! - [`proxy`]: the handle the callers share; [`cli`]: `codexbox proxy`;
//! - [`managed`]: the proxy of one `codexbox sandbox --allow-domain` run.

pub mod address;
pub mod audit;
pub mod cli;
pub mod client;
pub mod connector;
pub mod decision;
pub mod destination;
pub mod dial;
pub mod dns;
pub mod env;
pub(crate) mod exchange;
pub mod http_proxy;
pub mod http_server;
pub mod managed;
pub mod policy;
pub mod proxy;
pub mod relay;
pub mod resolve;
pub mod socks5;
pub mod upstream;

pub use proxy::{ProxyConfig, ProxyError, ProxyHandle};
