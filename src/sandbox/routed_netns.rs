//! The network namespace of a routed sandbox that has a DNS stub, made by
//! the helper before the launcher starts, so that the stub can bind
//! 127.0.0.1:53 without any capability.
//!
//! Why not bubblewrap's `--unshare-net`: port 53 is privileged, and binding
//! it takes `CAP_NET_BIND_SERVICE` in the user namespace that *owns* the
//! network namespace. bubblewrap creates the network namespace together
//! with its first user namespace, and runs the command in a second one
//! nested in it whenever its setup ids differ from the sandbox's (a
//! non-root caller with `--dev`, which needs root mapped to mount devpts)
//! or `--disable-userns` is asked; the built-in launcher always nests.
//! From a nested namespace no capability reaches the network namespace, so
//! `--cap-add` cannot help there (bubblewrap 0.8 here, and 0.11's
//! `bubblewrap.c` nests the same way).
//!
//! What instead: a short-lived child of the helper (forked, so it is
//! single-threaded whatever the helper runs) unshares a network namespace
//! — inside a user namespace of its own mapping only the caller's uid and
//! gid when it may not do so directly (any non-root caller) — brings `lo`
//! up and lowers that namespace's `net.ipv4.ip_unprivileged_port_start` to
//! 53. The sysctl is per network namespace: the host's value is untouched,
//! and the write needs `CAP_NET_ADMIN` over the new namespace, which its
//! creator holds. The helper opens the child's namespace files and lets it
//! exit; [`enter`] joins them between the launcher's fork and exec, and the
//! launcher runs without `--unshare-net`. The stub then binds port 53
//! unprivileged, and the command keeps `--cap-drop ALL` and
//! `--disable-userns` like every other sandbox. It may also bind ports
//! 53–1023 of its own namespace, where only it and the stub live.
//!
//! When any step fails (no user namespaces for this caller, a read-only
//! `/proc/sys`, a kernel before 4.11 without the sysctl), the caller falls
//! back to bubblewrap's own namespace without a stub and says why. The
//! inner stage checks that the namespace it runs in has no interface but
//! `lo` (`proxy_routing::activate_inside`), so a namespace that was not
//! entered can never leave the command on the host's network.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Errors preparing the namespace (the caller turns them into a warning).
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("cannot create a pipe: {0}")]
    Pipe(#[source] nix::Error),
    #[error("cannot fork: {0}")]
    Fork(#[source] nix::Error),
    #[error("{step}: {}", crate::sys::errno_text(.source))]
    Step {
        step: Step,
        #[source]
        source: io::Error,
    },
    #[error("the namespace process ended without a report")]
    NoReport,
    #[error("cannot open {path}: {source}")]
    OpenNamespace {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// The steps of the namespace process, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Unshare,
    UidMap,
    Setgroups,
    GidMap,
    Loopback,
    Sysctl,
}

impl Step {
    const ALL: [Step; 6] = [
        Step::Unshare,
        Step::UidMap,
        Step::Setgroups,
        Step::GidMap,
        Step::Loopback,
        Step::Sysctl,
    ];

    /// The byte that reports a failure of this step (0 is success).
    fn code(self) -> u8 {
        match self {
            Step::Unshare => 1,
            Step::UidMap => 2,
            Step::Setgroups => 3,
            Step::GidMap => 4,
            Step::Loopback => 5,
            Step::Sysctl => 6,
        }
    }

    fn from_code(code: u8) -> Option<Step> {
        Step::ALL.into_iter().find(|s| s.code() == code)
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::Unshare => "cannot create a network namespace",
            Step::UidMap => "cannot map the uid in a new user namespace",
            Step::Setgroups => "cannot deny setgroups in a new user namespace",
            Step::GidMap => "cannot map the gid in a new user namespace",
            Step::Loopback => "cannot bring lo up in a new network namespace",
            Step::Sysctl => {
                "cannot set net.ipv4.ip_unprivileged_port_start in a new network namespace"
            }
        })
    }
}

/// The sysctl lowered in the namespace.
const PORT_START_SYSCTL: &std::ffi::CStr = c"/proc/sys/net/ipv4/ip_unprivileged_port_start";

/// The report of the namespace process: step code (0: done), whether it
/// made a user namespace, errno (native endian).
const REPORT_BYTES: usize = 6;

/// A prepared network namespace (and the user namespace owning it, when
/// one was needed), held open by these fds.
#[derive(Debug)]
pub struct PreparedNetns {
    user: Option<OwnedFd>,
    net: OwnedFd,
}

/// What [`enter`] joins: raw fds, valid while the [`PreparedNetns`] lives.
#[derive(Debug, Clone, Copy)]
pub struct NetnsFds {
    user: Option<RawFd>,
    net: RawFd,
}

impl PreparedNetns {
    /// Creates the namespace with `port_start` as its lowest unprivileged
    /// port.
    pub fn create(port_start: u16) -> Result<PreparedNetns, NetnsError> {
        // Formatted before the fork: the child must not allocate.
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        let texts = ChildTexts {
            uid_map: format!("{uid} {uid} 1\n"),
            gid_map: format!("{gid} {gid} 1\n"),
            port_start: port_start.to_string(),
        };
        let (report_read, report_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(NetnsError::Pipe)?;
        let (release_read, release_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(NetnsError::Pipe)?;
        // SAFETY: the child runs only async-signal-safe code (system calls
        // on buffers prepared above) and ends with _exit, so forking a
        // process that may have other threads is sound.
        match unsafe { nix::unistd::fork() }.map_err(NetnsError::Fork)? {
            nix::unistd::ForkResult::Child => {
                drop(report_read);
                drop(release_write);
                let report = encode(prepare(&texts));
                let _ = crate::sys::fds::write_all(report_write.as_raw_fd(), &report);
                // Hold the namespaces until the helper has opened them (or
                // is gone: the pipe then reads EOF).
                let mut byte = [0u8; 1];
                // SAFETY: reads at most one byte into a live buffer.
                unsafe { libc::read(release_read.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
                // SAFETY: _exit skips the helper's atexit handlers and buffers.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(report_write);
                drop(release_read);
                let opened = read_report(&report_read).and_then(|made_userns| {
                    let open = |kind: &str| open_namespace(child.as_raw(), kind);
                    Ok(PreparedNetns {
                        user: if made_userns {
                            Some(open("user")?)
                        } else {
                            None
                        },
                        net: open("net")?,
                    })
                });
                drop(release_write);
                let _ = nix::sys::wait::waitpid(child, None);
                opened
            }
        }
    }

    /// The fds [`enter`] needs.
    pub fn fds(&self) -> NetnsFds {
        NetnsFds {
            user: self.user.as_ref().map(AsRawFd::as_raw_fd),
            net: self.net.as_raw_fd(),
        }
    }
}

/// Joins the prepared namespaces (the user namespace first, which grants
/// the capability the network one needs). Runs between fork and exec:
/// async-signal-safe; a single-threaded process only.
pub fn enter(fds: NetnsFds) -> io::Result<()> {
    use crate::sys::netns::setns;
    if let Some(user) = fds.user {
        setns(user, libc::CLONE_NEWUSER)?;
    }
    setns(fds.net, libc::CLONE_NEWNET)
}

/// The texts the namespace process writes.
struct ChildTexts {
    uid_map: String,
    gid_map: String,
    port_start: String,
}

/// The namespace process's steps. Returns whether it made a user
/// namespace. Async-signal-safe.
fn prepare(texts: &ChildTexts) -> Result<bool, (Step, io::Error)> {
    use crate::sys::netns::{loopback_up, unshare, write_file};
    let at = |step: Step| move |err: io::Error| (step, err);
    let made_userns = match unshare(libc::CLONE_NEWNET) {
        Ok(()) => false,
        Err(err) if err.raw_os_error() == Some(libc::EPERM) => {
            unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET).map_err(at(Step::Unshare))?;
            write_file(c"/proc/self/uid_map", texts.uid_map.as_bytes())
                .map_err(at(Step::UidMap))?;
            match write_file(c"/proc/self/setgroups", b"deny\n") {
                // Kernels before 3.19 have no setgroups file.
                Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {}
                other => other.map_err(at(Step::Setgroups))?,
            }
            write_file(c"/proc/self/gid_map", texts.gid_map.as_bytes())
                .map_err(at(Step::GidMap))?;
            true
        }
        Err(err) => return Err((Step::Unshare, err)),
    };
    loopback_up().map_err(at(Step::Loopback))?;
    write_file(PORT_START_SYSCTL, texts.port_start.as_bytes()).map_err(at(Step::Sysctl))?;
    Ok(made_userns)
}

fn encode(result: Result<bool, (Step, io::Error)>) -> [u8; REPORT_BYTES] {
    let (code, made_userns, errno) = match result {
        Ok(made_userns) => (0, made_userns, 0),
        Err((step, err)) => (step.code(), false, err.raw_os_error().unwrap_or(0)),
    };
    let mut report = [0u8; REPORT_BYTES];
    let [c, u, e0, e1, e2, e3] = &mut report;
    *c = code;
    *u = u8::from(made_userns);
    [*e0, *e1, *e2, *e3] = errno.to_ne_bytes();
    report
}

fn decode(report: [u8; REPORT_BYTES]) -> Result<bool, NetnsError> {
    let [code, made_userns, e0, e1, e2, e3] = report;
    if code == 0 {
        return Ok(made_userns != 0);
    }
    let source = io::Error::from_raw_os_error(i32::from_ne_bytes([e0, e1, e2, e3]));
    match Step::from_code(code) {
        Some(step) => Err(NetnsError::Step { step, source }),
        None => Err(NetnsError::NoReport),
    }
}

fn read_report(read_end: &OwnedFd) -> Result<bool, NetnsError> {
    let mut report = [0u8; REPORT_BYTES];
    let mut filled = 0;
    while filled < REPORT_BYTES {
        let Some(rest) = report.get_mut(filled..) else {
            break;
        };
        match nix::unistd::read(read_end, rest) {
            Ok(0) => return Err(NetnsError::NoReport),
            Ok(n) => filled += n,
            Err(nix::Error::EINTR) => {}
            Err(_) => return Err(NetnsError::NoReport),
        }
    }
    decode(report)
}

fn open_namespace(pid: libc::pid_t, kind: &str) -> Result<OwnedFd, NetnsError> {
    let path = format!("/proc/{pid}/ns/{kind}");
    let file =
        std::fs::File::open(&path).map_err(|source| NetnsError::OpenNamespace { path, source })?;
    Ok(OwnedFd::from(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip_with_step_and_errno() {
        assert!(decode(encode(Ok(true))).unwrap());
        assert!(!decode(encode(Ok(false))).unwrap());
        let err = decode(encode(Err((
            Step::Sysctl,
            io::Error::from_raw_os_error(libc::EROFS),
        ))))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot set net.ipv4.ip_unprivileged_port_start in a new network namespace: \
             Read-only file system"
        );
        assert!(matches!(
            decode([9, 0, 0, 0, 0, 0]),
            Err(NetnsError::NoReport)
        ));
    }

    /// Runs `body` in a forked child (joining namespaces changes the whole
    /// process) and returns its exit code.
    fn in_child(body: impl FnOnce() -> i32) -> i32 {
        // SAFETY: the child runs `body` and _exits; the test harness's other
        // threads are not used by it.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let code = body();
                // SAFETY: ends the forked child without the harness's cleanup.
                unsafe { libc::_exit(code) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                match nix::sys::wait::waitpid(child, None).unwrap() {
                    nix::sys::wait::WaitStatus::Exited(_, code) => code,
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn the_namespace_has_only_lo_and_a_lower_port_start_and_the_host_keeps_its_own() {
        let read_port_start = || {
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
                .unwrap()
                .trim()
                .to_owned()
        };
        let host_before = read_port_start();
        let netns = match PreparedNetns::create(53) {
            Ok(netns) => netns,
            Err(err) => {
                if std::env::var_os("CODEXBOX_REQUIRE_SANDBOX").is_some() {
                    panic!("cannot prepare a network namespace: {err}");
                }
                eprintln!("SKIP: cannot prepare a network namespace here: {err}");
                return;
            }
        };
        assert_eq!(read_port_start(), host_before);
        let fds = netns.fds();
        let code = in_child(move || {
            if enter(fds).is_err() {
                return 10;
            }
            let only_lo = crate::sys::netns::interface_names().is_ok_and(|n| n == ["lo"]);
            let port_start =
                std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
                    .is_ok_and(|v| v.trim() == "53");
            let loopback_up = std::net::UdpSocket::bind("127.0.0.1:0").is_ok();
            match (only_lo, port_start, loopback_up) {
                (true, true, true) => 0,
                (false, _, _) => 11,
                (_, false, _) => 12,
                (_, _, false) => 13,
            }
        });
        assert_eq!(code, 0);
    }
}
