//! Refuses connections that come from the server's own sandboxed processes.
//!
//! A sandboxed command with network access could otherwise connect back to
//! the loopback listener (or the Unix socket) and start unsandboxed commands.
//! On accept, and only while sandboxed processes are alive, the server
//! identifies the peer process — `SO_PEERCRED` for a Unix socket, whose
//! parent chain is walked up to the server; for a local TCP peer the socket
//! inode from `/proc/net/tcp{,6}` (matched on the 4-tuple), looked for among
//! the descriptors of the sandboxed subtrees, then of the other processes.
//! A peer below a sandboxed process's supervisor is refused; so is a local peer that cannot be identified
//! (fail closed). Remote peers (neither loopback nor connecting from the
//! very address they reached) are never inspected.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use nix::unistd::Pid;

use crate::process::kill::{live_descendants, parent_of};

/// Whether a TCP connection from `peer` to our `local` address must be
/// refused (only local peers are inspected), given the supervisor pids of
/// the server's live sandboxed processes. Blocking: reads `/proc`.
pub fn refuse_tcp(local: SocketAddr, peer: SocketAddr, roots: Vec<i32>) -> bool {
    let (peer, local) = (canonical(peer), canonical(local));
    // A peer on this host: loopback, or one of the host's own addresses
    // (the same address as the listener's end of the connection).
    if !peer.ip().is_loopback() && peer.ip() != local.ip() {
        return false;
    }
    if roots.is_empty() {
        return false;
    }
    let Some(inode) = socket_inode(peer, local) else {
        return true;
    };
    let wanted = format!("socket:[{inode}]");
    // The sandboxed subtrees first (few processes): an owner there is refused.
    let root_pids: Vec<Pid> = roots.iter().copied().map(Pid::from_raw).collect();
    let mut sandboxed: Vec<i32> = roots;
    sandboxed.extend(live_descendants(&root_pids).into_iter().map(Pid::as_raw));
    if sandboxed.iter().any(|&pid| holds(pid, &wanted)) {
        return true;
    }
    // Otherwise some other process must hold it (newest first, stopping at
    // the first): a socket nobody holds any more is refused, since its
    // owner may have been a sandboxed process that exited after connecting.
    !other_pids(&sandboxed).any(|pid| holds(pid, &wanted))
}

/// Whether a Unix-socket peer with credentials pid `pid` must be refused,
/// given the server's sandboxed roots. Blocking: reads `/proc`.
pub fn refuse_unix(pid: Option<i32>, roots: &[i32]) -> bool {
    if roots.is_empty() {
        return false;
    }
    match pid {
        Some(pid) if pid > 0 => in_sandboxed_subtree(pid, roots),
        _ => true,
    }
}

/// Walks `pid`'s parents up to the server: true when one of them is a
/// sandboxed supervisor. A chain that never reaches the server is not ours
/// (a reused pid cannot match).
fn in_sandboxed_subtree(pid: i32, roots: &[i32]) -> bool {
    let server = std::process::id() as i32;
    let mut below_root = false;
    let mut current = pid;
    for _ in 0..4096 {
        if current == server {
            return below_root;
        }
        if roots.contains(&current) {
            below_root = true;
        }
        match parent_of(current) {
            Some(parent) if parent > 0 && parent != current => current = parent,
            _ => return false,
        }
    }
    below_root
}

fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
            None => addr,
        },
        IpAddr::V4(_) => addr,
    }
}

/// The inode of the socket whose local end is `peer` and remote end `local`:
/// one exact `sock_diag` lookup, else a scan of `/proc/net/tcp{,6}`.
fn socket_inode(peer: SocketAddr, local: SocketAddr) -> Option<u64> {
    if let Some(inode) = diag_inode(peer, local) {
        return Some(inode);
    }
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            if fields.len() < 10 {
                continue;
            }
            let (Some(l), Some(r)) = (parse_addr(fields[1]), parse_addr(fields[2])) else {
                continue;
            };
            if canonical(l) == peer && canonical(r) == local {
                return fields[9].parse().ok().filter(|&inode| inode != 0);
            }
        }
    }
    None
}

const NETLINK_SOCK_DIAG: libc::c_int = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
/// `nlmsghdr` (16 bytes) + `inet_diag_req_v2` (56 bytes).
const REQUEST_LEN: usize = 16 + 56;
/// Offset of `idiag_inode` in a reply: `nlmsghdr` + 68.
const INODE_AT: usize = 16 + 68;

/// Writes an `inet_diag_sockid` address (network byte order, 16 bytes).
fn put_ip(out: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out[..16].copy_from_slice(&v6.octets()),
    }
}

/// Looks the TCP socket `peer` → `local` up with one `SOCK_DIAG_BY_FAMILY`
/// request (no dump) and returns its inode.
fn diag_inode(peer: SocketAddr, local: SocketAddr) -> Option<u64> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let family = match peer.ip() {
        IpAddr::V4(_) => libc::AF_INET,
        IpAddr::V6(_) => libc::AF_INET6,
    };
    if local.is_ipv4() != peer.is_ipv4() {
        return None;
    }
    let mut req = [0u8; REQUEST_LEN];
    req[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    let body = &mut req[16..];
    body[0] = family as u8;
    body[1] = libc::IPPROTO_TCP as u8;
    body[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // every state
    let id = &mut body[8..];
    id[0..2].copy_from_slice(&peer.port().to_be_bytes());
    id[2..4].copy_from_slice(&local.port().to_be_bytes());
    put_ip(&mut id[4..20], peer.ip());
    put_ip(&mut id[20..36], local.ip());
    id[40..48].copy_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
                                            // SAFETY: plain socket(2); the result is checked and owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sends `req`, a live buffer of `req.len()` bytes, to the kernel.
    let sent = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent != req.len() as isize {
        return None;
    }
    let mut reply = [0u8; 512];
    // SAFETY: receives into `reply`, a live buffer of `reply.len()` bytes.
    let got = unsafe { libc::recv(fd.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
    let got = usize::try_from(got).ok()?;
    if got < INODE_AT + 4 {
        return None;
    }
    let kind = u16::from_ne_bytes([reply[4], reply[5]]);
    if kind == NLMSG_ERROR || kind != SOCK_DIAG_BY_FAMILY {
        return None;
    }
    let mut inode = [0u8; 4];
    inode.copy_from_slice(&reply[INODE_AT..INODE_AT + 4]);
    Some(u64::from(u32::from_ne_bytes(inode))).filter(|&inode| inode != 0)
}

/// `0100007F:1F90` (IPv4) or 32 hex digits + port (IPv6): each 32-bit word
/// is printed from the address's bytes in host order.
fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for chunk in ip.as_bytes().chunks(8) {
        let word = u32::from_str_radix(std::str::from_utf8(chunk).ok()?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&bytes);
            IpAddr::V6(Ipv6Addr::from(octets))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Every pid in `/proc` not in `skip`, highest (newest) first.
fn other_pids(skip: &[i32]) -> impl Iterator<Item = i32> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
                .filter(|pid| !skip.contains(pid))
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable_by(|a, b| b.cmp(a));
    pids.into_iter()
}

/// Whether `pid` has a descriptor whose link reads `wanted`.
fn holds(pid: i32, wanted: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == wanted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_addresses_parse_in_host_order() {
        let v4 = parse_addr(&format!("{:08X}:1F90", u32::from_ne_bytes([127, 0, 0, 1])));
        assert_eq!(v4, Some("127.0.0.1:8080".parse().unwrap()));
        let words: String = Ipv6Addr::LOCALHOST
            .octets()
            .chunks(4)
            .map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
            .collect();
        assert_eq!(
            parse_addr(&format!("{words}:0050")),
            Some("[::1]:80".parse().unwrap())
        );
    }

    #[test]
    fn sock_diag_and_proc_net_find_the_same_socket() {
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        let local = listener.local_addr().unwrap();
        let link = std::fs::read_link(format!("/proc/self/fd/{}", client.as_raw_fd())).unwrap();
        let expected = format!("{}", link.display());
        let diag = diag_inode(peer, local).map(|inode| format!("socket:[{inode}]"));
        assert_eq!(diag.as_deref(), Some(expected.as_str()));
        assert_eq!(socket_inode(peer, local), diag_inode(peer, local));
        assert!(diag_inode(local, peer).is_some(), "the accepted end");
        assert!(holds(std::process::id() as i32, &expected));
    }

    #[test]
    fn the_servers_own_chain_is_not_sandboxed() {
        assert!(!in_sandboxed_subtree(std::process::id() as i32, &[1]));
    }
}
