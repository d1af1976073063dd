//! The bridges of managed routing, served from outside the sandbox.
//!
//! The inner stage (inside the sandbox's namespaces, before the command
//! exists and before seccomp) binds the sandbox's loopback listeners: one
//! TCP listener on 127.0.0.1 per proxy endpoint, and the DNS stub's UDP
//! socket on 127.0.0.1:53. It does not serve them: [`hand_over`] sends them
//! as `SCM_RIGHTS` over a `SOCK_SEQPACKET` socketpair whose other end the
//! sandbox helper kept ([`handoff_pair`]), waits for the helper's
//! acknowledgement, closes its end and its copies, and execs the command.
//!
//! The helper ([`serve_from_host`]) lives in the caller's namespaces: a
//! socket stays in the network namespace it was created in, so it accepts
//! the sandbox's loopback connections there and dials the proxy on the
//! host's loopback, and answers the stub's queries from the proxy's
//! resolve endpoint. Nothing of managed routing runs inside the sandbox:
//! no process shares the command's pid namespace or user namespace on its
//! behalf (that is, none whose memory, descriptors or signals the command
//! could reach), and no Unix socket needs to be visible inside.
//!
//! The message: two bytes (the number of listeners, whether the stub
//! socket follows) and that many descriptors. The helper checks each (a
//! listening IPv4 stream socket, a datagram socket) before it takes them
//! over; any mismatch, or a message that never comes, fails the inner
//! stage before the command runs.

use std::io;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::mode::LINUX_SANDBOX_ARG0;
use crate::sys::scm;

/// The most bridges one sandbox gets (the stub's socket travels too).
pub const MAX_BRIDGES: usize = scm::MAX_FDS - 1;

/// The helper's answer once it serves the listeners.
const ACK: u8 = 1;

/// Errors moving or serving the listeners.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error("cannot create the handoff socket: {0}")]
    Socketpair(#[source] nix::Error),
    #[error("fd {0} is not the handoff socket")]
    NotHandoff(RawFd),
    #[error("cannot hand the listeners to the sandbox helper: {0}")]
    Send(#[source] io::Error),
    #[error("the sandbox helper did not take over the listeners")]
    NotTaken,
    #[error("cannot receive the sandbox's listeners: {0}")]
    Receive(#[source] io::Error),
    #[error("the sandbox sent {got}, expected {expected}")]
    Mismatch { got: String, expected: String },
    #[error("the sandbox sent a descriptor that is not {0}")]
    NotListener(&'static str),
    #[error("cannot serve the listeners: {0}")]
    Serve(#[source] io::Error),
    #[error("cannot start the bridge thread: {0}")]
    Thread(#[source] io::Error),
}

/// What the helper serves: the proxy endpoint behind each listener (by
/// index), and the proxy's HTTP listener the stub asks, when the stub runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bridges {
    pub endpoints: Vec<SocketAddr>,
    pub dns_proxy: Option<SocketAddr>,
}

/// A connected close-on-exec `SOCK_SEQPACKET` pair: `(helper's end, the
/// end the inner stage inherits)`. The caller makes the second inheritable
/// for the launcher only.
pub fn handoff_pair() -> Result<(OwnedFd, OwnedFd), BridgeError> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(BridgeError::Socketpair)
}

/// The inner stage's part: sends `listeners` and `stub` over the handoff
/// socket `fd`, waits until the helper serves them, and closes `fd`.
pub fn hand_over(
    fd: RawFd,
    listeners: &[TcpListener],
    stub: Option<&UdpSocket>,
) -> Result<(), BridgeError> {
    let result = send_and_wait(fd, listeners, stub);
    crate::sys::fds::close(fd);
    result
}

fn send_and_wait(
    fd: RawFd,
    listeners: &[TcpListener],
    stub: Option<&UdpSocket>,
) -> Result<(), BridgeError> {
    use nix::sys::socket::{getsockopt, sockopt};
    let count = u8::try_from(listeners.len())
        .ok()
        .filter(|n| usize::from(*n) <= MAX_BRIDGES)
        .ok_or_else(|| BridgeError::Mismatch {
            got: format!("{} listeners", listeners.len()),
            expected: format!("at most {MAX_BRIDGES}"),
        })?;
    // The number comes from the route spec: check that it names a
    // seqpacket socket (a stray fd would swallow the listeners).
    // SAFETY: only borrowed for the calls below, while `fd` stays open.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    if getsockopt(&borrowed, sockopt::SockType) != Ok(nix::sys::socket::SockType::SeqPacket) {
        return Err(BridgeError::NotHandoff(fd));
    }
    let mut fds: Vec<RawFd> = listeners.iter().map(AsRawFd::as_raw_fd).collect();
    fds.extend(stub.map(AsRawFd::as_raw_fd));
    scm::send_with_fds(fd, &[count, u8::from(stub.is_some())], &fds).map_err(BridgeError::Send)?;
    let mut answer = [0u8; 1];
    loop {
        match nix::unistd::read(borrowed, &mut answer) {
            Ok(1) if answer == [ACK] => return Ok(()),
            Err(nix::Error::EINTR) => {}
            _ => return Err(BridgeError::NotTaken),
        }
    }
}

/// The listeners as the helper received them.
struct Received {
    listeners: Vec<TcpListener>,
    stub: Option<UdpSocket>,
}

/// Starts the helper's bridge thread on its end of the handoff socket:
/// it waits for the sandbox's listeners (ending quietly if the sandbox
/// never sends them), then serves them for as long as the helper lives.
pub fn serve_from_host(host_end: OwnedFd, bridges: Bridges) -> Result<(), BridgeError> {
    spawn_quiet(move || {
        if let Err(err) = take_and_serve(&host_end, &bridges) {
            eprintln!("{LINUX_SANDBOX_ARG0}: proxy routing: {err}");
        }
    })
    .map_err(BridgeError::Thread)
}

/// Starts a thread with every signal blocked, so signals meant for the
/// helper's `signalfd` never land on it.
fn spawn_quiet(body: impl FnOnce() + Send + 'static) -> io::Result<()> {
    use nix::sys::signal::{SigSet, SigmaskHow};
    let old = SigSet::all()
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(io::Error::from)?;
    let spawned = std::thread::Builder::new()
        .name("proxy-bridges".into())
        .spawn(body);
    let _ = old.thread_set_mask();
    spawned.map(drop)
}

fn take_and_serve(host_end: &OwnedFd, bridges: &Bridges) -> Result<(), BridgeError> {
    let Some(received) = receive(host_end, bridges)? else {
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(BridgeError::Serve)?;
    runtime.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for (listener, endpoint) in received.listeners.into_iter().zip(&bridges.endpoints) {
            listener.set_nonblocking(true).map_err(BridgeError::Serve)?;
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(BridgeError::Serve)?;
            tasks.spawn(serve_bridge(listener, *endpoint));
        }
        if let (Some(socket), Some(proxy)) = (received.stub, bridges.dns_proxy) {
            socket.set_nonblocking(true).map_err(BridgeError::Serve)?;
            let socket = tokio::net::UdpSocket::from_std(socket).map_err(BridgeError::Serve)?;
            tasks.spawn(crate::net::dns::serve(socket, proxy));
        }
        // Everything is served from here on: the command may start.
        crate::sys::fds::write_all(host_end.as_raw_fd(), &[ACK]).map_err(BridgeError::Serve)?;
        while tasks.join_next().await.is_some() {}
        Ok(())
    })
}

/// Receives and checks the sandbox's listeners; `None` when the sandbox
/// ended without sending them (the launcher or the inner stage failed,
/// and says so itself).
fn receive(host_end: &OwnedFd, bridges: &Bridges) -> Result<Option<Received>, BridgeError> {
    let mut header = [0u8; 2];
    let Some((len, mut fds)) =
        scm::recv_with_fds(host_end.as_raw_fd(), &mut header).map_err(BridgeError::Receive)?
    else {
        return Ok(None);
    };
    let expected_stub = bridges.dns_proxy.is_some();
    let [count, stub] = header;
    let stub = stub == 1;
    let count = usize::from(count);
    if len != header.len()
        || count != bridges.endpoints.len()
        || (stub && !expected_stub)
        || fds.len() != count + usize::from(stub)
    {
        return Err(BridgeError::Mismatch {
            got: format!("{count} listeners, stub {stub}, {} descriptors", fds.len()),
            expected: format!(
                "{} listeners, stub at most {expected_stub}",
                bridges.endpoints.len()
            ),
        });
    }
    let stub = if stub {
        fds.pop().map(checked_stub).transpose()?
    } else {
        None
    };
    let listeners = fds
        .into_iter()
        .map(checked_listener)
        .collect::<Result<_, _>>()?;
    Ok(Some(Received { listeners, stub }))
}

/// `fd` as a listening TCP socket on IPv4 loopback.
fn checked_listener(fd: OwnedFd) -> Result<TcpListener, BridgeError> {
    use nix::sys::socket::{getsockopt, sockopt, SockType};
    let listening = getsockopt(&fd, sockopt::AcceptConn).unwrap_or(false)
        && getsockopt(&fd, sockopt::SockType) == Ok(SockType::Stream);
    let listener = TcpListener::from(fd);
    if !listening || !on_loopback_v4(listener.local_addr()) {
        return Err(BridgeError::NotListener(
            "a listening TCP socket on 127.0.0.1",
        ));
    }
    Ok(listener)
}

/// `fd` as a UDP socket on IPv4 loopback.
fn checked_stub(fd: OwnedFd) -> Result<UdpSocket, BridgeError> {
    use nix::sys::socket::{getsockopt, sockopt, SockType};
    let datagram = getsockopt(&fd, sockopt::SockType) == Ok(SockType::Datagram);
    let socket = UdpSocket::from(fd);
    if !datagram || !on_loopback_v4(socket.local_addr()) {
        return Err(BridgeError::NotListener("a UDP socket on 127.0.0.1"));
    }
    Ok(socket)
}

fn on_loopback_v4(address: io::Result<SocketAddr>) -> bool {
    address.is_ok_and(|a| a.is_ipv4() && a.ip().is_loopback())
}

/// Joins each connection the command makes to a new connection to the
/// proxy at `proxy`.
async fn serve_bridge(listener: tokio::net::TcpListener, proxy: SocketAddr) {
    loop {
        let mut inside = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, or an aborted connection: try again
                // shortly rather than spin.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let _ = inside.set_nodelay(true);
            if let Ok(mut outside) = tokio::net::TcpStream::connect(proxy).await {
                let _ = outside.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional_with_sizes(
                    &mut inside,
                    &mut outside,
                    64 * 1024,
                    64 * 1024,
                )
                .await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::IntoRawFd;

    /// An echo server standing in for the proxy.
    fn echo_proxy() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let mut writer = stream;
                    let _ = std::io::copy(&mut reader, &mut writer);
                });
            }
        });
        address
    }

    #[test]
    fn handed_over_listeners_reach_the_proxy_from_the_helper() {
        let (host, sandbox) = handoff_pair().unwrap();
        let proxy = echo_proxy();
        serve_from_host(
            host,
            Bridges {
                endpoints: vec![proxy],
                dns_proxy: None,
            },
        )
        .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        hand_over(sandbox.into_raw_fd(), &[listener], None).unwrap();
        let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        client.write_all(b"ping").unwrap();
        let mut reply = [0u8; 4];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"ping");
    }

    #[test]
    fn a_wrong_count_or_descriptor_is_refused_and_the_sandbox_side_fails() {
        let bridges = Bridges {
            endpoints: vec![echo_proxy()],
            dns_proxy: None,
        };
        // Two listeners where one was planned.
        let (host, sandbox) = handoff_pair().unwrap();
        let two = [
            TcpListener::bind("127.0.0.1:0").unwrap(),
            TcpListener::bind("127.0.0.1:0").unwrap(),
        ];
        let sent = std::thread::spawn(move || {
            let fd = sandbox.as_raw_fd();
            let result = send_and_wait(fd, &two, None);
            drop(sandbox);
            result
        });
        assert!(matches!(
            receive(&host, &bridges),
            Err(BridgeError::Mismatch { .. })
        ));
        drop(host);
        assert!(matches!(sent.join().unwrap(), Err(BridgeError::NotTaken)));
        // A bound but not listening socket.
        let (host, sandbox) = handoff_pair().unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        scm::send_with_fds(sandbox.as_raw_fd(), &[1, 0], &[udp.as_raw_fd()]).unwrap();
        assert!(matches!(
            receive(&host, &bridges),
            Err(BridgeError::NotListener(_))
        ));
        // A sandbox that ends without sending anything.
        let (host, sandbox) = handoff_pair().unwrap();
        drop(sandbox);
        assert!(receive(&host, &bridges).unwrap().is_none());
        // A handoff number that is not the handoff socket.
        let (read, _write) = nix::unistd::pipe().unwrap();
        assert!(matches!(
            send_and_wait(read.as_raw_fd(), &[], None),
            Err(BridgeError::NotHandoff(_))
        ));
    }
}
