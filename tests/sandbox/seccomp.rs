//! The seccomp filter, installed in forked children (the test process is
//! never filtered). Each child returns the errno of the attempted call (0 on
//! success), so every assertion would fail without the filter: the tests run
//! as root, where every one of these calls succeeds unfiltered.

use std::os::unix::net::UnixListener;

use crate::common::confine::{errno, in_child};
use codexbox::sandbox::seccomp::{SeccompMode, SeccompProgram};
use codexbox::sys::confine;

const EPERM: i32 = libc::EPERM;

/// Runs `op` in a child after no_new_privs and the filter for `mode`.
fn filtered<F>(mode: SeccompMode, mut op: F) -> i32
where
    F: FnMut() -> i32 + Send + Sync + 'static,
{
    let program = SeccompProgram::build(mode).expect("build filter");
    in_child(move || {
        if confine::set_no_new_privs().is_err() || program.install().is_err() {
            return 250;
        }
        op()
    })
}

/// Errno of `socket(domain, ty, proto)`, 0 when it succeeded.
fn socket_errno(domain: i32, ty: i32, proto: i32) -> i32 {
    // SAFETY: integer arguments only.
    let fd = unsafe { libc::socket(domain, ty, proto) };
    if fd < 0 {
        errno()
    } else {
        0
    }
}

#[test]
fn unfiltered_child_can_create_inet_sockets() {
    // The control: what the filter must change.
    assert_eq!(
        in_child(|| socket_errno(libc::AF_INET, libc::SOCK_STREAM, 0)),
        0
    );
}

#[test]
fn unfiltered_child_can_do_what_the_filter_denies() {
    let got = in_child(|| {
        // SAFETY: integer arguments / a zeroed params buffer only.
        unsafe {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) < 0 {
                return 1;
            }
            let mut params = [0u8; 120];
            if libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) < 0 {
                return 2;
            }
            if libc::unshare(libc::CLONE_NEWUSER) < 0 {
                return 3;
            }
        }
        0
    });
    assert_eq!(
        got, 0,
        "control step {got} failed: the tests below would prove nothing"
    );
}

#[test]
fn restricted_denies_every_socket_family_but_unix() {
    for (domain, ty, proto) in [
        (libc::AF_INET, libc::SOCK_STREAM, 0),
        (libc::AF_INET, libc::SOCK_DGRAM, 0),
        (libc::AF_INET6, libc::SOCK_STREAM, 0),
        (libc::AF_INET6, libc::SOCK_DGRAM, 0),
        (libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE),
        (libc::AF_PACKET, libc::SOCK_RAW, 0),
        (libc::AF_VSOCK, libc::SOCK_STREAM, 0),
    ] {
        let got = filtered(SeccompMode::Restricted, move || {
            socket_errno(domain, ty, proto)
        });
        assert_eq!(got, EPERM, "socket({domain}, {ty}) must be EPERM");
    }
}

#[test]
fn restricted_allows_unix_stream_but_not_datagram_sockets() {
    let stream = filtered(SeccompMode::Restricted, || {
        socket_errno(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)
    });
    assert_eq!(stream, 0);
    let seqpacket = filtered(SeccompMode::Restricted, || {
        socket_errno(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0)
    });
    assert_eq!(seqpacket, 0);
    let dgram = filtered(SeccompMode::Restricted, || {
        socket_errno(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK, 0)
    });
    assert_eq!(dgram, EPERM);
}

/// Every value of the type's low four bits, with and without the flag
/// bits above them, for `socket` and `socketpair`: only stream and
/// seqpacket pass (unfiltered, the kernel refuses the unknown types with
/// EINVAL and allows datagram and raw ones).
#[test]
fn restricted_allows_unix_stream_and_seqpacket_only_whatever_the_flags() {
    for base in 0..16 {
        for flags in [0, libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK] {
            let ty = base | flags;
            let allowed = base == libc::SOCK_STREAM || base == libc::SOCK_SEQPACKET;
            let socket = filtered(SeccompMode::Restricted, move || {
                socket_errno(libc::AF_UNIX, ty, 0)
            });
            let pair = filtered(SeccompMode::Restricted, move || {
                let mut fds = [0; 2];
                // SAFETY: fds is a valid two-int array.
                if unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, fds.as_mut_ptr()) } < 0 {
                    errno()
                } else {
                    0
                }
            });
            if allowed {
                assert_eq!((socket, pair), (0, 0), "type {ty:#x}");
            } else {
                assert_eq!((socket, pair), (EPERM, EPERM), "type {ty:#x}");
            }
        }
    }
}

#[test]
fn restricted_denies_connecting_to_a_host_unix_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("host.sock");
    let _listener = UnixListener::bind(&path).expect("bind host socket");
    let addr = sockaddr_un(&path);
    // Control: unfiltered, the connection works.
    let control = in_child(move || connect_errno(&addr));
    assert_eq!(control, 0, "control connect must succeed");
    let addr = sockaddr_un(&path);
    let got = filtered(SeccompMode::Restricted, move || connect_errno(&addr));
    assert_eq!(got, EPERM);
}

fn sockaddr_un(path: &std::path::Path) -> libc::sockaddr_un {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: sockaddr_un is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
        *dst = *src as libc::c_char;
    }
    addr
}

fn connect_errno(addr: &libc::sockaddr_un) -> i32 {
    // SAFETY: integer arguments only.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
    if fd < 0 {
        return 240;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: addr points to a valid sockaddr_un of `len` bytes.
    let rc = unsafe { libc::connect(fd, (addr as *const libc::sockaddr_un).cast(), len) };
    if rc < 0 {
        errno()
    } else {
        0
    }
}

#[test]
fn restricted_denies_bind_listen_and_sendto_with_an_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = sockaddr_un(&dir.path().join("new.sock"));
    let got = filtered(SeccompMode::Restricted, move || {
        // SAFETY: integer arguments only.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: addr is a valid sockaddr_un.
        let rc = unsafe { libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len) };
        if rc == 0 {
            return 0;
        }
        let bind = errno();
        // SAFETY: integer arguments only.
        let rc = unsafe { libc::listen(fd, 1) };
        if rc == 0 || errno() != EPERM {
            return 241;
        }
        let mut pair = [0; 2];
        // SAFETY: pair has room for two fds.
        unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) };
        // SAFETY: buffer and address are valid for the given lengths.
        let rc = unsafe {
            libc::sendto(
                pair[0],
                b"x".as_ptr().cast(),
                1,
                0,
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if rc >= 0 || errno() != EPERM {
            return 242;
        }
        bind
    });
    assert_eq!(got, EPERM);
}

#[test]
fn restricted_keeps_socketpair_ipc_working() {
    let got = filtered(SeccompMode::Restricted, || {
        let mut pair = [0; 2];
        // SAFETY: pair has room for two fds.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) } != 0
        {
            return 1;
        }
        // send() is sendto without an address.
        // SAFETY: the buffer is valid for 4 bytes.
        if unsafe { libc::send(pair[0], b"ping".as_ptr().cast(), 4, 0) } != 4 {
            return 2;
        }
        let mut buf = [0u8; 4];
        // SAFETY: buf is valid for 4 bytes.
        if unsafe { libc::recv(pair[1], buf.as_mut_ptr().cast(), 4, 0) } != 4 || &buf != b"ping" {
            return 3;
        }
        let one: libc::c_int = 1;
        // SAFETY: option value points to an int of the given size.
        let rc = unsafe {
            libc::setsockopt(
                pair[0],
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return 4;
        }
        // SAFETY: sockaddr_storage is plain old data.
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: addr/len are valid out-parameters.
        if unsafe {
            libc::getpeername(
                pair[0],
                (&mut addr as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        } != 0
        {
            return 5;
        }
        // SAFETY: as above.
        if unsafe {
            libc::getsockname(
                pair[0],
                (&mut addr as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        } != 0
        {
            return 6;
        }
        // A shell asks getpeername on its stdin (a pipe here): it must get
        // ENOTSOCK, not EPERM.
        let mut fds = [0; 2];
        // SAFETY: fds has room for two fds.
        unsafe { libc::pipe(fds.as_mut_ptr()) };
        // SAFETY: addr/len are valid out-parameters.
        let rc = unsafe {
            libc::getpeername(
                fds[0],
                (&mut addr as *mut libc::sockaddr_storage).cast(),
                &mut len,
            )
        };
        if rc == 0 || errno() != libc::ENOTSOCK {
            return 7;
        }
        0
    });
    assert_eq!(got, 0, "step {got} of the socketpair round trip failed");
}

#[test]
fn every_mode_denies_ptrace_process_vm_and_io_uring() {
    for mode in [
        SeccompMode::Restricted,
        SeccompMode::ProxyRouted,
        SeccompMode::NetworkEnabled,
    ] {
        let ptrace = filtered(mode, || {
            // SAFETY: PTRACE_TRACEME takes no pointers.
            let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
            if rc < 0 {
                errno()
            } else {
                0
            }
        });
        assert_eq!(ptrace, EPERM, "{mode:?} ptrace");
        let vm = filtered(mode, || {
            let mut local = [0u8; 8];
            let source = [7u8; 8];
            let liov = libc::iovec {
                iov_base: local.as_mut_ptr().cast(),
                iov_len: 8,
            };
            let riov = libc::iovec {
                iov_base: source.as_ptr() as *mut libc::c_void,
                iov_len: 8,
            };
            // SAFETY: both iovecs describe valid 8-byte buffers of this process.
            let rc = unsafe { libc::process_vm_readv(libc::getpid(), &liov, 1, &riov, 1, 0) };
            if rc < 0 {
                errno()
            } else {
                0
            }
        });
        assert_eq!(vm, EPERM, "{mode:?} process_vm_readv");
        let uring = filtered(mode, || {
            let mut params = [0u8; 120];
            // SAFETY: params is a zeroed io_uring_params-sized buffer.
            let rc = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) };
            if rc < 0 {
                errno()
            } else {
                0
            }
        });
        assert_eq!(uring, EPERM, "{mode:?} io_uring_setup");
    }
}

#[test]
fn every_mode_denies_nested_user_namespaces_and_keyctl() {
    for mode in [SeccompMode::Restricted, SeccompMode::NetworkEnabled] {
        let unshare = filtered(mode, || {
            // SAFETY: integer flag only.
            if unsafe { libc::unshare(libc::CLONE_NEWUSER) } < 0 {
                errno()
            } else {
                0
            }
        });
        assert_eq!(unshare, EPERM, "{mode:?} unshare");
        let clone = filtered(mode, || {
            let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
            // SAFETY: a fork-like clone without a new stack; a child that
            // should not exist leaves at once.
            let rc = unsafe { libc::syscall(libc::SYS_clone, flags, 0, 0, 0, 0) };
            if rc == 0 {
                // SAFETY: leaving the unexpected child.
                unsafe { libc::_exit(0) };
            }
            if rc < 0 {
                errno()
            } else {
                0
            }
        });
        assert_eq!(clone, EPERM, "{mode:?} clone(CLONE_NEWUSER)");
        let clone3 = filtered(mode, || {
            // SAFETY: a NULL args pointer; the filter answers first.
            let rc = unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) };
            if rc < 0 {
                errno()
            } else {
                0
            }
        });
        assert_eq!(clone3, libc::ENOSYS, "{mode:?} clone3");
        let keyctl = filtered(mode, || {
            // SAFETY: KEYCTL_GET_KEYRING_ID with integer arguments.
            let rc = unsafe { libc::syscall(libc::SYS_keyctl, 0, -3i64, 0) };
            if rc < 0 {
                errno()
            } else {
                0
            }
        });
        assert_eq!(keyctl, EPERM, "{mode:?} keyctl");
    }
}

#[test]
fn plain_fork_still_works_under_the_filter() {
    let got = filtered(SeccompMode::Restricted, || {
        // SAFETY: fork in a single-threaded child; the grandchild exits at once.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: leaving the grandchild.
            unsafe { libc::_exit(7) };
        }
        if pid < 0 {
            return errno();
        }
        let mut status = 0;
        // SAFETY: status is a valid out-parameter.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7 {
            0
        } else {
            1
        }
    });
    assert_eq!(got, 0);
}

#[test]
fn network_enabled_allows_inet_and_proxy_routed_only_inet() {
    let enabled = filtered(SeccompMode::NetworkEnabled, || {
        socket_errno(libc::AF_INET, libc::SOCK_STREAM, 0)
    });
    assert_eq!(enabled, 0);
    let proxy_inet = filtered(SeccompMode::ProxyRouted, || {
        socket_errno(libc::AF_INET6, libc::SOCK_STREAM, 0)
    });
    assert_eq!(proxy_inet, 0);
    let proxy_unix = filtered(SeccompMode::ProxyRouted, || {
        socket_errno(libc::AF_UNIX, libc::SOCK_STREAM, 0)
    });
    assert_eq!(proxy_unix, EPERM);
    let proxy_pair = filtered(SeccompMode::ProxyRouted, || {
        let mut pair = [0; 2];
        // SAFETY: pair has room for two fds.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) } < 0 {
            errno()
        } else {
            0
        }
    });
    assert_eq!(proxy_pair, 0);
}

/// Opens a pty pair and pushes one byte of input with TIOCSTI on the
/// slave; returns the errno (0 when it worked).
fn tiocsti_errno() -> i32 {
    // SAFETY: raw pty calls on fds this child owns; NUL-terminated names
    // come from ptsname_r into a stack buffer.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        if master < 0 || libc::grantpt(master) != 0 || libc::unlockpt(master) != 0 {
            return 240;
        }
        let mut name = [0 as libc::c_char; 64];
        if libc::ptsname_r(master, name.as_mut_ptr(), name.len()) != 0 {
            return 241;
        }
        // Become a session leader and take the slave as controlling tty
        // (TIOCSTI needs it unless CAP_SYS_ADMIN).
        libc::setsid();
        let slave = libc::open(name.as_ptr(), libc::O_RDWR);
        if slave < 0 {
            return 242;
        }
        let byte: libc::c_char = b'x' as libc::c_char;
        if libc::ioctl(slave, libc::TIOCSTI, &byte) != 0 {
            return errno();
        }
        0
    }
}

#[test]
fn every_mode_denies_faking_terminal_input() {
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").unwrap_or_default();
    if legacy.trim() == "0" {
        crate::common::host::not_applicable("the kernel already disables TIOCSTI");
        return;
    }
    assert_eq!(
        in_child(tiocsti_errno),
        0,
        "control: TIOCSTI works unfiltered"
    );
    for mode in [SeccompMode::Restricted, SeccompMode::NetworkEnabled] {
        assert_eq!(filtered(mode, tiocsti_errno), EPERM, "{mode:?}");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_syscalls_cannot_bypass_the_rules() {
    // socket(AF_INET) through the x32 table (bit 30): refused by the filter
    // whether or not the kernel has the x32 ABI.
    let got = filtered(SeccompMode::Restricted, || {
        let nr = 0x4000_0000 | libc::SYS_socket;
        // SAFETY: integer arguments only.
        let rc = unsafe { libc::syscall(nr, libc::AF_INET, libc::SOCK_STREAM, 0) };
        if rc < 0 {
            errno()
        } else {
            0
        }
    });
    assert_eq!(got, EPERM);
}
