//! The SOCKS5 listener (RFC 1928, no authentication): CONNECT, and UDP
//! ASSOCIATE when enabled; BIND is refused. Policy order as the reference's:
//! `limited` mode refuses non-443 ports as
//! `method_not_allowed` and 443 as `mitm_required` before the host policy.
//! A refusal by policy answers REP `0x02` (connection not allowed by
//! ruleset); a name that does not resolve `0x04` (host unreachable).
//! SOCKS5 traffic is never chained to an upstream proxy. Every address
//! (IPv4, IPv6, or a name, which may spell an address) is parsed into its
//! canonical host (`net::destination`) before anything is decided; a name
//! that is none is refused as not allowed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::decision::{DenyReason, Protocol};
use super::destination::{Host, HostError};
use super::dial::dial;
use super::policy::Mode;
use super::proxy::{Admission, Destination, ProxyState};
use crate::shutdown::Watcher;

/// How long a client may take to send its greeting and request.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest UDP datagram relayed.
const MAX_DATAGRAM_BYTES: usize = 65_535;

const VERSION: u8 = 5;
const NO_AUTH: u8 = 0;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const CMD_CONNECT: u8 = 1;
const CMD_UDP_ASSOCIATE: u8 = 3;
const ATYP_V4: u8 = 1;
const ATYP_NAME: u8 = 3;
const ATYP_V6: u8 = 4;

/// SOCKS5 reply codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Reply {
    Succeeded = 0,
    GeneralFailure = 1,
    NotAllowed = 2,
    HostUnreachable = 4,
    ConnectionRefused = 5,
    CommandNotSupported = 7,
    AddressNotSupported = 8,
}

impl Reply {
    fn for_denial(reason: DenyReason) -> Reply {
        match reason {
            DenyReason::DnsFailed => Reply::HostUnreachable,
            _ => Reply::NotAllowed,
        }
    }
}

/// A destination in a SOCKS request or UDP header, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Ip(IpAddr),
    /// The name's bytes (invalid UTF-8 replaced; such a name is refused).
    Name(String),
}

impl Address {
    /// The canonical host this address names.
    pub fn host(&self) -> Result<Host, HostError> {
        match self {
            Address::Ip(ip) => Ok(Host::from_ip(*ip)),
            Address::Name(name) => Host::parse(name),
        }
    }
}

/// Why a SOCKS exchange stopped.
#[derive(Debug, thiserror::Error)]
enum SocksError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not SOCKS version 5")]
    Version,
    #[error("bad address type {0}")]
    AddressType(u8),
    #[error("handshake timed out")]
    Timeout,
}

/// Parses `ATYP ADDR PORT` at the start of `bytes`; returns the address,
/// port and bytes used. `None` if truncated or of an unknown type.
pub fn parse_address(bytes: &[u8]) -> Option<(Address, u16, usize)> {
    let (&atyp, rest) = bytes.split_first()?;
    let (address, len) = match atyp {
        ATYP_V4 => {
            let octets: [u8; 4] = rest.get(..4)?.try_into().ok()?;
            (Address::Ip(Ipv4Addr::from(octets).into()), 4)
        }
        ATYP_V6 => {
            let octets: [u8; 16] = rest.get(..16)?.try_into().ok()?;
            (Address::Ip(Ipv6Addr::from(octets).into()), 16)
        }
        ATYP_NAME => {
            let (&n, name) = rest.split_first()?;
            let n = usize::from(n);
            let name = String::from_utf8_lossy(name.get(..n)?);
            (Address::Name(name.into_owned()), 1 + n)
        }
        _ => return None,
    };
    let port_bytes: [u8; 2] = rest.get(len..len + 2)?.try_into().ok()?;
    Some((address, u16::from_be_bytes(port_bytes), 1 + len + 2))
}

/// `ATYP ADDR PORT` for a socket address.
pub fn encode_address(addr: SocketAddr, out: &mut Vec<u8>) {
    match addr.ip() {
        IpAddr::V4(v4) => {
            out.push(ATYP_V4);
            out.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.push(ATYP_V6);
            out.extend_from_slice(&v6.octets());
        }
    }
    out.extend_from_slice(&addr.port().to_be_bytes());
}

async fn reply(stream: &mut TcpStream, code: Reply, bound: SocketAddr) -> std::io::Result<()> {
    let mut out = vec![VERSION, code as u8, 0];
    encode_address(bound, &mut out);
    stream.write_all(&out).await
}

const UNSPECIFIED: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// Serves one SOCKS5 client connection until it ends or the proxy stops
/// (`watcher`: the connection, its tunnel or its UDP association, is then
/// closed).
pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<ProxyState>,
    mut watcher: Watcher,
) {
    tokio::select! {
        () = serve(stream, peer, &state) => {}
        () = watcher.stopped() => {}
    }
}

async fn serve(mut stream: TcpStream, peer: SocketAddr, state: &ProxyState) {
    let request = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&mut stream))
        .await
        .unwrap_or(Err(SocksError::Timeout));
    let (command, address, port) = match request {
        Ok(request) => request,
        Err(err) => {
            tracing::debug!(%peer, "socks5 handshake failed: {err}");
            if let SocksError::AddressType(_) = err {
                let _ = reply(&mut stream, Reply::AddressNotSupported, UNSPECIFIED).await;
            }
            return;
        }
    };
    let client = peer.to_string();
    match command {
        CMD_CONNECT => connect(stream, &client, state, &address, port).await,
        CMD_UDP_ASSOCIATE if state.socks5_udp => udp_associate(stream, peer, state).await,
        _ => {
            let _ = reply(&mut stream, Reply::CommandNotSupported, UNSPECIFIED).await;
        }
    }
}

/// Method negotiation and the request; returns `(command, address, port)`.
async fn handshake(stream: &mut TcpStream) -> Result<(u8, Address, u16), SocksError> {
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await?;
    if head[0] != VERSION {
        return Err(SocksError::Version);
    }
    let mut methods = vec![0u8; usize::from(head[1])];
    stream.read_exact(&mut methods).await?;
    if !methods.contains(&NO_AUTH) {
        stream.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await?;
        return Err(SocksError::Version);
    }
    stream.write_all(&[VERSION, NO_AUTH]).await?;
    let mut request = [0u8; 4];
    stream.read_exact(&mut request).await?;
    if request[0] != VERSION {
        return Err(SocksError::Version);
    }
    let atyp = request[3];
    let mut buf = vec![atyp];
    let len = match atyp {
        ATYP_V4 => 4,
        ATYP_V6 => 16,
        ATYP_NAME => {
            let n = stream.read_u8().await?;
            buf.push(n);
            usize::from(n)
        }
        other => return Err(SocksError::AddressType(other)),
    };
    let start = buf.len();
    buf.resize(start + len + 2, 0);
    stream.read_exact(&mut buf[start..]).await?;
    let (address, port, _) = parse_address(&buf).ok_or(SocksError::AddressType(atyp))?;
    Ok((request[1], address, port))
}

async fn connect(
    mut stream: TcpStream,
    client: &str,
    state: &ProxyState,
    address: &Address,
    port: u16,
) {
    let dest = Destination {
        host: address.host(),
        port,
        protocol: Protocol::Socks5Tcp,
        method: "CONNECT",
        client,
    };
    let mode_denial = match (state.policy.mode, port) {
        (Mode::Full, _) => None,
        (Mode::Limited, 443) => Some(DenyReason::MitmRequired),
        (Mode::Limited, _) => Some(DenyReason::MethodNotAllowed),
    };
    let verdict = match mode_denial {
        // The mode guard comes before the host policy for SOCKS5.
        Some(reason) => {
            state.record_denial(&dest, reason).await;
            Err(reason)
        }
        None => state.admit(&dest, None, None).await,
    };
    let targets = match verdict {
        Ok(Admission::Direct(targets)) => targets,
        Ok(Admission::Upstream(_)) => {
            let _ = reply(&mut stream, Reply::GeneralFailure, UNSPECIFIED).await;
            return;
        }
        Err(reason) => {
            let _ = reply(&mut stream, Reply::for_denial(reason), UNSPECIFIED).await;
            return;
        }
    };
    let target = match dial(&targets).await {
        Ok(target) => target,
        Err(err) => {
            tracing::info!(host = %dest.shown(), port, "socks5 dial failed: {err}");
            let _ = reply(&mut stream, Reply::ConnectionRefused, UNSPECIFIED).await;
            return;
        }
    };
    let bound = target.local_addr().unwrap_or(UNSPECIFIED);
    if reply(&mut stream, Reply::Succeeded, bound).await.is_err() {
        return;
    }
    super::relay::relay(stream, target).await;
}

/// UDP ASSOCIATE: a relay socket on the listener's address for the client,
/// one outbound socket per address family; lives until the TCP control
/// connection closes. Only datagrams from the client's IP are relayed out,
/// and only answers from destinations the client sent to are relayed back.
async fn udp_associate(mut control: TcpStream, peer: SocketAddr, state: &ProxyState) {
    let local_ip = control
        .local_addr()
        .map_or(Ipv4Addr::LOCALHOST.into(), |a| a.ip());
    let relay = match UdpSocket::bind(SocketAddr::new(local_ip, 0)).await {
        Ok(relay) => relay,
        Err(err) => {
            tracing::info!("socks5 udp relay bind failed: {err}");
            let _ = reply(&mut control, Reply::GeneralFailure, UNSPECIFIED).await;
            return;
        }
    };
    let (Ok(relay_addr), Ok(out4), Ok(out6)) = (
        relay.local_addr(),
        UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).await,
        UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).await,
    ) else {
        let _ = reply(&mut control, Reply::GeneralFailure, UNSPECIFIED).await;
        return;
    };
    if reply(&mut control, Reply::Succeeded, relay_addr)
        .await
        .is_err()
    {
        return;
    }
    let client = peer.to_string();
    let mut client_addr: Option<SocketAddr> = None;
    let mut contacted: Vec<SocketAddr> = Vec::new();
    let mut verdicts = Verdicts::default();
    let mut inbound = vec![0u8; MAX_DATAGRAM_BYTES];
    let mut answer4 = vec![0u8; MAX_DATAGRAM_BYTES];
    let mut answer6 = vec![0u8; MAX_DATAGRAM_BYTES];
    let mut control_byte = [0u8; 1];
    loop {
        tokio::select! {
            read = control.read(&mut control_byte) => {
                if matches!(read, Ok(0) | Err(_)) {
                    return;
                }
            }
            received = relay.recv_from(&mut inbound) => {
                let Ok((n, from)) = received else { return };
                if from.ip() != peer.ip() || client_addr.is_some_and(|c| c != from) {
                    continue;
                }
                client_addr = Some(from);
                let Some(datagram) = inbound.get(..n) else { continue };
                if let Some(to) = relay_out(datagram, &client, state, &mut verdicts, &out4, &out6).await {
                    if !contacted.contains(&to) && contacted.len() < 1024 {
                        contacted.push(to);
                    }
                }
            }
            received = out4.recv_from(&mut answer4) => {
                let Ok((n, from)) = received else { return };
                relay_back(&relay, client_addr, &contacted, from, answer4.get(..n)).await;
            }
            received = out6.recv_from(&mut answer6) => {
                let Ok((n, from)) = received else { return };
                relay_back(&relay, client_addr, &contacted, from, answer6.get(..n)).await;
            }
        }
    }
}

/// Destinations one association has been judged for at most once each
/// (bounded): a flow of datagrams is admitted, resolved and recorded once,
/// not per datagram. Keyed by the address as sent.
#[derive(Default)]
struct Verdicts(Vec<((Address, u16), Option<SocketAddr>)>);

/// Destinations remembered per association; beyond that each is judged
/// per datagram.
const MAX_VERDICTS: usize = 1024;

impl Verdicts {
    fn get(&self, address: &Address, port: u16) -> Option<Option<SocketAddr>> {
        self.0
            .iter()
            .find(|((a, p), _)| a == address && *p == port)
            .map(|(_, to)| *to)
    }

    fn remember(&mut self, address: Address, port: u16, to: Option<SocketAddr>) {
        if self.0.len() < MAX_VERDICTS {
            self.0.push(((address, port), to));
        }
    }
}

/// Checks and sends one client datagram; returns where it went.
async fn relay_out(
    datagram: &[u8],
    client: &str,
    state: &ProxyState,
    verdicts: &mut Verdicts,
    out4: &UdpSocket,
    out6: &UdpSocket,
) -> Option<SocketAddr> {
    // RSV RSV FRAG, then the address; fragments are not supported.
    let (header, rest) = (datagram.get(..3)?, datagram.get(3..)?);
    if header[2] != 0 {
        return None;
    }
    let (address, port, used) = parse_address(rest)?;
    let payload = rest.get(used..)?;
    let to = match verdicts.get(&address, port) {
        Some(to) => to,
        None => {
            let to = admit_datagrams(&address, port, client, state).await;
            verdicts.remember(address, port, to);
            to
        }
    }?;
    let socket = if to.is_ipv4() { out4 } else { out6 };
    socket.send_to(payload, to).await.ok()?;
    Some(to)
}

/// Where datagrams to `host:port` go, if the policy lets them.
async fn admit_datagrams(
    address: &Address,
    port: u16,
    client: &str,
    state: &ProxyState,
) -> Option<SocketAddr> {
    let dest = Destination {
        host: address.host(),
        port,
        protocol: Protocol::Socks5Udp,
        method: "none",
        client,
    };
    let mode_denial = (state.policy.mode == Mode::Limited).then_some(DenyReason::MethodNotAllowed);
    match state.admit(&dest, mode_denial, None).await {
        Ok(Admission::Direct(targets)) => targets.addrs.first().copied(),
        _ => None,
    }
}

async fn relay_back(
    relay: &UdpSocket,
    client: Option<SocketAddr>,
    contacted: &[SocketAddr],
    from: SocketAddr,
    payload: Option<&[u8]>,
) {
    let (Some(client), Some(payload)) = (client, payload) else {
        return;
    };
    if !contacted.contains(&from) {
        return;
    }
    let mut out = vec![0, 0, 0];
    encode_address(from, &mut out);
    out.extend_from_slice(payload);
    let _ = relay.send_to(&out, client).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_truncation_is_refused() {
        let mut out = Vec::new();
        encode_address("[::1]:8080".parse().unwrap(), &mut out);
        assert_eq!(
            parse_address(&out),
            Some((Address::Ip("::1".parse().unwrap()), 8080, 19))
        );
        let name = [ATYP_NAME, 3, b'a', b'.', b'b', 0, 80];
        assert_eq!(
            parse_address(&name),
            Some((Address::Name("a.b".into()), 80, 7))
        );
        assert_eq!(parse_address(&name[..6]), None);
        let binary = [ATYP_NAME, 2, 0xff, b'a', 0, 80];
        let (address, _, _) = parse_address(&binary).unwrap();
        assert!(address.host().is_err());
        assert_eq!(parse_address(&[9, 1, 2]), None);
        assert_eq!(parse_address(&[]), None);
    }

    #[test]
    fn names_spelling_addresses_are_those_addresses() {
        let ip = |text: &str| Ok(Host::Ip(text.parse().unwrap()));
        assert_eq!(Address::Name("1686110210".into()).host(), ip("100.128.0.2"));
        assert_eq!(Address::Name("[::1]".into()).host(), ip("::1"));
        assert_eq!(
            Address::Name("::ffff:7f00:1".into()).host(),
            ip("127.0.0.1")
        );
        assert_eq!(
            Address::Ip("::ffff:7f00:1".parse().unwrap()).host(),
            ip("127.0.0.1")
        );
        assert!(Address::Name("100.128.0.2%.allowed.test".into())
            .host()
            .is_err());
    }
}
