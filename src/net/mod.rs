//! The network capability (docs/network.md): a policy-enforcing proxy (HTTP
//! forward, CONNECT, SOCKS5) shared by `codexbox proxy`, the exec-server's
//! per-process `networkProxy` and `codexbox sandbox --allow-domain`.
//!
//! - [`destination`]: the one canonical form of a destination host;
//! - [`policy`]: patterns and the pure host decision;
//! - `resolve`: local/private classification, `--resolve`, DNS checks;
//! - `dial`: outbound connections to checked addresses only;
//! - [`dns`]: the DNS stub inside a managed sandbox and its codec;
//! - `http_proxy`, `socks5`: the two listeners; `http_server`: the
//!   HTTP/1.1 serving every listener shares;
//! - `relay`: tunnel bytes (`splice(2)`, no copies in the proxy);
//! - `upstream`: chaining to an upstream HTTP proxy;
//! - `exchange`: one request on a client connection driven in the
//!   caller's task (an upstream CONNECT, the DNS stub's question);
//! - `client`, `connector`: codexbox's own outbound HTTP
//!   client (`http/request`, registries) and connections (rendezvous
//!   sockets too), through the process's proxy settings;
//! - `decision`, `audit`: what was decided and where it is reported;
//! - [`env`]: the variables a child gets;
//! - `proxy`: the handle the callers share; `cli`: `codexbox proxy`;
//! - `managed`: the proxy of one `codexbox sandbox --allow-domain` run.

pub(crate) mod address;
pub(crate) mod audit;
pub(crate) mod cli;
pub(crate) mod client;
pub(crate) mod connector;
pub(crate) mod decision;
pub mod destination;
pub(crate) mod dial;
pub mod dns;
pub(crate) mod env;
pub(crate) mod exchange;
pub(crate) mod http_proxy;
pub(crate) mod http_server;
pub(crate) mod managed;
pub mod policy;
pub(crate) mod proxy;
pub(crate) mod relay;
pub(crate) mod resolve;
pub(crate) mod socks5;
pub(crate) mod upstream;

pub use proxy::{ProxyConfig, ProxyError, ProxyHandle};
