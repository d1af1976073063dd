//! The seccomp filter of the sandbox (docs/sandbox.md), for x86_64 and
//! aarch64, built with seccompiler and installed on the calling thread right
//! before exec.
//!
//! Described as data ([`rules`]), compiled ([`SeccompProgram::build`]) and
//! installed ([`SeccompProgram::install`], async-signal-safe) as separate
//! steps. No capability or keyring handling here: see
//! [`crate::sys::confine`].
//!
//! Every matching rule returns `EPERM`; anything else is allowed.
//!
//! In **every** mode (network enabled too): `ptrace`, `process_vm_readv`,
//! `process_vm_writev`, `pidfd_getfd`, `io_uring_setup|enter|register`, `unshare` and
//! `clone` with `CLONE_NEWUSER` (nested user namespaces), `keyctl`,
//! `add_key`, `request_key` (the caller's user keyring is otherwise reachable
//! by number when no user namespace separates it), `ioctl` `TIOCSTI` and
//! `TIOCLINUX` (pushing input into the caller's terminal), `socket`/`socketpair` of
//! `AF_VSOCK` (hypervisor and WSL2 interop). `clone3`, whose flags live in
//! memory seccomp cannot read, returns `ENOSYS` so libc falls back to
//! `clone`, and on x86_64 the x32 syscall ABI (numbers with bit 30 set, a
//! second syscall table these rules don't cover) returns `EPERM`. A
//! syscall from another architecture (32-bit `int 0x80`, whose `socketcall`
//! the rules cannot see) kills the process: 32-bit programs do not run. These
//! never concern the network, and with network enabled bubblewrap's pid
//! namespace is not the only thing standing between the command and the
//! host (the Landlock backend has none).
//!
//! [`SeccompMode::Restricted`] adds: `socket` of any family but `AF_UNIX`,
//! and `AF_UNIX` of any type but `SOCK_STREAM`/`SOCK_SEQPACKET`;
//! `socketpair` likewise (only stream/seqpacket `AF_UNIX` pairs);
//! `connect`, `bind`, `listen`, `accept`, `accept4`; `sendto` with a
//! destination address. Allowed: `socketpair`, `send`/`recv*`/`sendmsg`,
//! `setsockopt`/`getsockopt`, `getpeername`/`getsockname`, `shutdown`.
//! Why `connect`/`bind` are denied for `AF_UNIX` too: only `AF_UNIX`
//! sockets can be created, so a `connect` could only reach a host Unix
//! socket (docker.sock, D-Bus, ssh-agent), which is exactly what must be
//! unreachable; socketpairs are connected at birth and need neither.
//! Why datagram sockets are refused: `sendmsg` carries its destination in
//! memory seccomp cannot inspect, and an `AF_UNIX` datagram socket (even one
//! of a socketpair) would deliver to any named host socket; stream and
//! seqpacket sockets refuse a destination on `sendmsg`.
//!
//! [`SeccompMode::ProxyRouted`] (the managed-proxy inner stage, after its
//! bridges exist): `socket` of any family but `AF_INET`/`AF_INET6` (the
//! network namespace holds only loopback and the bridges), `socketpair` of
//! any family but `AF_UNIX`.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Which network rules the filter carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeccompMode {
    /// No network: only local IPC over socketpairs.
    Restricted,
    /// Network through the managed proxy bridges only.
    ProxyRouted,
    /// Network allowed; only the always-on denials.
    NetworkEnabled,
}

impl SeccompMode {
    /// Stable lower-case name (for `--explain` and the doctor).
    pub fn as_str(self) -> &'static str {
        match self {
            SeccompMode::Restricted => "restricted",
            SeccompMode::ProxyRouted => "proxy-routed",
            SeccompMode::NetworkEnabled => "network-enabled",
        }
    }
}

/// Building or installing the filter failed.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp filters are not supported on this architecture ({0})")]
    UnsupportedArch(&'static str),
    #[error("cannot build the seccomp filter: {0}")]
    Build(#[source] seccompiler::BackendError),
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(#[source] seccompiler::BackendError),
    #[error("cannot install the seccomp filter: {0}")]
    Install(#[source] seccompiler::Error),
    #[error(transparent)]
    NoNewPrivs(#[from] crate::sys::confine::ConfineError),
}

/// Result of this module.
pub type Result<T, E = SeccompError> = std::result::Result<T, E>;

/// The compiled filter, ready to install: one program, a small
/// hand-written prefix for `clone3` and the x32 ABI that falls through into
/// the rule table. One program, not two, because the kernel converts and
/// JIT-compiles every filter again each time one is attached, once per
/// sandboxed command.
#[derive(Debug, Clone)]
pub struct SeccompProgram {
    program: BpfProgram,
}

#[cfg(target_arch = "x86_64")]
const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
#[cfg(target_arch = "aarch64")]
const ARCH: Option<TargetArch> = Some(TargetArch::aarch64);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCH: Option<TargetArch> = None;

/// `AUDIT_ARCH_*` of the build target, checked by the hand-written program.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const AUDIT_ARCH: u32 = 0;

/// `__X32_SYSCALL_BIT`.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `TIOCSTI` (same number on x86_64 and aarch64).
const TIOCSTI: u32 = 0x5412;
/// `TIOCLINUX`.
const TIOCLINUX: u32 = 0x541C;
/// `SOCK_TYPE_MASK`.
const SOCK_TYPE_MASK: u32 = 0xf;

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(SeccompError::Build)
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule> {
    SeccompRule::new(conditions).map_err(SeccompError::Build)
}

fn family(value: libc::c_int) -> u64 {
    u64::try_from(value).unwrap_or(u64::MAX)
}

/// The rule table for `mode`: syscall number → rules, any of which matching
/// means `EPERM` (an empty list matches unconditionally).
pub fn rules(mode: SeccompMode) -> Result<BTreeMap<i64, Vec<SeccompRule>>> {
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
    ] {
        map.insert(nr, Vec::new());
    }
    // Faking terminal input (TIOCSTI) or TIOCLINUX tricks would let the
    // command type into the caller's shell once it exits. The kernel reads
    // the request as a 32-bit value, so a Dword comparison is exact.
    map.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, SeccompCmpOp::Eq, u64::from(TIOCSTI))?])?,
            rule(vec![cond(1, SeccompCmpOp::Eq, u64::from(TIOCLINUX))?])?,
        ],
    );
    let newuser = u64::try_from(libc::CLONE_NEWUSER).unwrap_or(0x1000_0000);
    // clone's flags are arg0 on x86_64 and aarch64 alike.
    for nr in [libc::SYS_unshare, libc::SYS_clone] {
        map.insert(
            nr,
            vec![rule(vec![cond(
                0,
                SeccompCmpOp::MaskedEq(newuser),
                newuser,
            )?])?],
        );
    }

    let vsock = || -> Result<SeccompRule> {
        rule(vec![cond(0, SeccompCmpOp::Eq, family(libc::AF_VSOCK))?])
    };
    let mut socket_rules = Vec::new();
    let mut socketpair_rules = Vec::new();
    match mode {
        SeccompMode::NetworkEnabled => {
            socket_rules.push(vsock()?);
            socketpair_rules.push(vsock()?);
        }
        SeccompMode::Restricted => {
            socket_rules.push(rule(vec![cond(
                0,
                SeccompCmpOp::Ne,
                family(libc::AF_UNIX),
            )?])?);
            socketpair_rules.push(rule(vec![cond(
                0,
                SeccompCmpOp::Ne,
                family(libc::AF_UNIX),
            )?])?);
            for nr in [
                libc::SYS_connect,
                libc::SYS_bind,
                libc::SYS_listen,
                libc::SYS_accept,
                libc::SYS_accept4,
            ] {
                map.insert(nr, Vec::new());
            }
            // sendto(fd, buf, len, flags, dest_addr, addrlen): a non-NULL
            // destination pointer. `send()` is sendto with NULL.
            map.insert(
                libc::SYS_sendto,
                vec![SeccompRule::new(vec![SeccompCondition::new(
                    4,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::Ne,
                    0,
                )
                .map_err(SeccompError::Build)?])
                .map_err(SeccompError::Build)?],
            );
        }
        SeccompMode::ProxyRouted => {
            socket_rules.push(rule(vec![
                cond(0, SeccompCmpOp::Ne, family(libc::AF_INET))?,
                cond(0, SeccompCmpOp::Ne, family(libc::AF_INET6))?,
            ])?);
            socketpair_rules.push(rule(vec![cond(
                0,
                SeccompCmpOp::Ne,
                family(libc::AF_UNIX),
            )?])?);
        }
    }
    map.insert(libc::SYS_socket, socket_rules);
    map.insert(libc::SYS_socketpair, socketpair_rules);
    Ok(map)
}

/// BPF helpers for the hand-written program.
mod bpf {
    use seccompiler::sock_filter;

    /// BPF_LD | BPF_W | BPF_ABS (both of the first are 0).
    pub const LD_W_ABS: u16 = 0x20;
    pub const JEQ_K: u16 = 0x05 | 0x10;
    pub const JGE_K: u16 = 0x05 | 0x30;
    /// BPF_JMP | BPF_JA: jump `k` instructions ahead, unconditionally.
    pub const JA: u16 = 0x05;
    /// BPF_ALU | BPF_AND | BPF_K.
    pub const AND_K: u16 = 0x04 | 0x50;
    pub const RET_K: u16 = 0x06;
    /// `offsetof(struct seccomp_data, nr)`.
    pub const NR_OFFSET: u32 = 0;
    /// `offsetof(struct seccomp_data, arch)`.
    pub const ARCH_OFFSET: u32 = 4;
    /// `offsetof(struct seccomp_data, args[i])`: the low 32 bits of the
    /// argument on a little-endian machine (x86_64, aarch64), all of an
    /// `int` argument.
    pub const ARG_OFFSET: [u32; 2] = [16, 24];

    pub fn stmt(code: u16, k: u32) -> sock_filter {
        sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    pub fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
        sock_filter { code, jt, jf, k }
    }
}

fn errno_ret(errno: libc::c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (u32::try_from(errno).unwrap_or(1) & libc::SECCOMP_RET_DATA)
}

/// `clone3` → ENOSYS (glibc then uses `clone`, whose flags the rule table
/// checks); on x86_64 any x32 syscall → EPERM; in [`SeccompMode::Restricted`],
/// `socket`/`socketpair` of `AF_UNIX` with a type other than stream or
/// seqpacket → EPERM (the type masked with `SOCK_TYPE_MASK`, a test the
/// rule table could only spell as one rule per other type, 28 rules, two
/// thirds of the program). Anything else, a foreign architecture included,
/// falls through to the rule table that follows this prefix (which kills a
/// foreign architecture). The same decisions as the prefix and the table
/// stacked as two filters: where the prefix returns, the table allows.
fn prefix_program(mode: SeccompMode) -> BpfProgram {
    use bpf::*;
    let nr = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
    let eperm = errno_ret(libc::EPERM);
    let mut tail = vec![stmt(LD_W_ABS, NR_OFFSET)];
    if cfg!(target_arch = "x86_64") {
        tail.push(jump(JGE_K, X32_SYSCALL_BIT, 0, 1));
        tail.push(stmt(RET_K, eperm));
    }
    tail.push(jump(JEQ_K, nr(libc::SYS_clone3), 0, 1));
    tail.push(stmt(RET_K, errno_ret(libc::ENOSYS)));
    if mode == SeccompMode::Restricted {
        let unix = u32::try_from(libc::AF_UNIX).unwrap_or(u32::MAX);
        let ty = |t: libc::c_int| u32::try_from(t).unwrap_or(u32::MAX) & SOCK_TYPE_MASK;
        tail.extend([
            // socket or socketpair → on; else → the rule table (7 ahead).
            jump(JEQ_K, nr(libc::SYS_socket), 1, 0),
            jump(JEQ_K, nr(libc::SYS_socketpair), 0, 7),
            stmt(LD_W_ABS, ARG_OFFSET[0]),
            // Not AF_UNIX → the rule table, which denies every other family.
            jump(JEQ_K, unix, 0, 5),
            stmt(LD_W_ABS, ARG_OFFSET[1]),
            stmt(AND_K, SOCK_TYPE_MASK),
            jump(JEQ_K, ty(libc::SOCK_STREAM), 2, 0),
            jump(JEQ_K, ty(libc::SOCK_SEQPACKET), 1, 0),
            stmt(RET_K, eperm),
        ]);
    }
    let skip = u32::try_from(tail.len()).unwrap_or(u32::MAX);
    let mut program = vec![
        stmt(LD_W_ABS, ARCH_OFFSET),
        // Our arch → the checks above; else → the rule table.
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(JA, skip),
    ];
    program.extend(tail);
    program
}

/// What a backend leaves shared with the host, denied on top of the mode's
/// rules (the Landlock backend: no mount or IPC namespace of its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostShared {
    /// The host's SysV IPC and POSIX message queues: every SysV IPC and
    /// `mq_*` syscall is denied.
    pub ipc: bool,
    /// Metadata of read-only host files (Landlock has no right for it):
    /// chmod setting the set-user-ID or set-group-ID bit and every
    /// extended-attribute change are denied.
    pub metadata: bool,
}

/// `fchmodat2` (same number on x86_64 and aarch64; not in every libc).
const SYS_FCHMODAT2: i64 = 452;
/// `setxattrat` and `removexattrat` (Linux 6.13).
const SYS_SETXATTRAT: i64 = 463;
const SYS_REMOVEXATTRAT: i64 = 466;

/// Adds the denials for `shared` to `map`. An unconditional entry (empty
/// rule list) stays unconditional.
fn add_host_shared(map: &mut BTreeMap<i64, Vec<SeccompRule>>, shared: HostShared) -> Result<()> {
    let mut deny = |nr: i64, rules: Vec<SeccompRule>| match map.get_mut(&nr) {
        Some(existing) if existing.is_empty() => {}
        Some(existing) if !rules.is_empty() => existing.extend(rules),
        _ => {
            map.insert(nr, rules);
        }
    };
    if shared.ipc {
        for nr in [
            libc::SYS_shmget,
            libc::SYS_shmat,
            libc::SYS_shmdt,
            libc::SYS_shmctl,
            libc::SYS_msgget,
            libc::SYS_msgsnd,
            libc::SYS_msgrcv,
            libc::SYS_msgctl,
            libc::SYS_semget,
            libc::SYS_semop,
            libc::SYS_semtimedop,
            libc::SYS_semctl,
            libc::SYS_mq_open,
            libc::SYS_mq_unlink,
            libc::SYS_mq_timedsend,
            libc::SYS_mq_timedreceive,
            libc::SYS_mq_notify,
            libc::SYS_mq_getsetattr,
        ] {
            deny(nr, Vec::new());
        }
    }
    if shared.metadata {
        let set_id = |arg: u8| -> Result<Vec<SeccompRule>> {
            let mut out = Vec::new();
            for bit in [libc::S_ISUID, libc::S_ISGID] {
                let bit = u64::from(bit);
                out.push(rule(vec![cond(arg, SeccompCmpOp::MaskedEq(bit), bit)?])?);
            }
            Ok(out)
        };
        #[cfg(target_arch = "x86_64")]
        deny(libc::SYS_chmod, set_id(1)?);
        deny(libc::SYS_fchmod, set_id(1)?);
        deny(libc::SYS_fchmodat, set_id(2)?);
        deny(SYS_FCHMODAT2, set_id(2)?);
        for nr in [
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
            SYS_SETXATTRAT,
            SYS_REMOVEXATTRAT,
        ] {
            deny(nr, Vec::new());
        }
    }
    Ok(())
}

impl SeccompProgram {
    /// Builds and compiles the filters for `mode` on this architecture.
    pub fn build(mode: SeccompMode) -> Result<SeccompProgram> {
        Self::build_with(mode, HostShared::default())
    }

    /// [`Self::build`] once per mode and process: what a fork of the spawn
    /// zygote finds already built (the zygote builds them at its start).
    pub fn shared(mode: SeccompMode) -> Result<&'static SeccompProgram> {
        static RESTRICTED: std::sync::OnceLock<SeccompProgram> = std::sync::OnceLock::new();
        static ROUTED: std::sync::OnceLock<SeccompProgram> = std::sync::OnceLock::new();
        static ENABLED: std::sync::OnceLock<SeccompProgram> = std::sync::OnceLock::new();
        let cell = match mode {
            SeccompMode::Restricted => &RESTRICTED,
            SeccompMode::ProxyRouted => &ROUTED,
            SeccompMode::NetworkEnabled => &ENABLED,
        };
        if let Some(program) = cell.get() {
            return Ok(program);
        }
        let program = Self::build(mode)?;
        Ok(cell.get_or_init(|| program))
    }

    /// [`Self::build`], also denying what `shared` names.
    pub fn build_with(mode: SeccompMode, shared: HostShared) -> Result<SeccompProgram> {
        let arch = ARCH.ok_or(SeccompError::UnsupportedArch(std::env::consts::ARCH))?;
        let mut table = rules(mode)?;
        add_host_shared(&mut table, shared)?;
        let filter = SeccompFilter::new(
            table,
            SeccompAction::Allow,
            SeccompAction::Errno(u32::try_from(libc::EPERM).unwrap_or(1)),
            arch,
        )
        .map_err(SeccompError::Build)?;
        let rules: BpfProgram = filter.try_into().map_err(SeccompError::Compile)?;
        let mut program = prefix_program(mode);
        program.extend(rules);
        Ok(SeccompProgram { program })
    }

    /// Installs the filter on the calling thread (inherited by children
    /// and kept across exec). no_new_privs must already be set (seccompiler
    /// sets it too). Does not allocate.
    pub fn install(&self) -> Result<()> {
        seccompiler::apply_filter(&self.program).map_err(SeccompError::Install)
    }

    /// Number of BPF instructions, for `--explain` and the doctor.
    pub fn len(&self) -> usize {
        self.program.len()
    }

    /// Whether the program is empty (never, once built).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Sets no_new_privs, then builds and installs the filter for `mode` on the
/// calling thread. Call it last before exec, single-threaded.
pub fn install(mode: SeccompMode) -> Result<()> {
    let program = SeccompProgram::build(mode)?;
    crate::sys::confine::set_no_new_privs()?;
    program.install()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_compiles_for_this_arch() {
        for mode in [
            SeccompMode::Restricted,
            SeccompMode::ProxyRouted,
            SeccompMode::NetworkEnabled,
        ] {
            let program = SeccompProgram::build(mode).expect("build");
            assert!(program.len() > 10 && program.len() < 4096, "{mode:?}");
        }
    }

    #[test]
    fn restricted_denies_connect_but_not_socketpair_unconditionally() {
        let map = rules(SeccompMode::Restricted).expect("rules");
        assert!(map[&libc::SYS_connect].is_empty());
        assert!(!map[&libc::SYS_socketpair].is_empty());
        assert!(!map.contains_key(&libc::SYS_getpeername));
        assert!(!map.contains_key(&libc::SYS_setsockopt));
        assert!(!map.contains_key(&libc::SYS_sendmsg));
    }

    #[test]
    fn host_shared_adds_ipc_and_metadata_denials() {
        let mut map = rules(SeccompMode::NetworkEnabled).expect("rules");
        assert!(!map.contains_key(&libc::SYS_shmget));
        add_host_shared(
            &mut map,
            HostShared {
                ipc: true,
                metadata: true,
            },
        )
        .expect("extras");
        assert!(map[&libc::SYS_shmget].is_empty(), "unconditional");
        assert!(map[&libc::SYS_mq_open].is_empty());
        assert!(map[&libc::SYS_fsetxattr].is_empty());
        assert_eq!(map[&libc::SYS_fchmodat].len(), 2, "set-uid and set-gid");
        assert!(map[&libc::SYS_ptrace].is_empty(), "still unconditional");
        SeccompProgram::build_with(
            SeccompMode::Restricted,
            HostShared {
                ipc: true,
                metadata: true,
            },
        )
        .expect("compiles");
    }

    #[test]
    fn network_enabled_keeps_the_always_on_denials() {
        let map = rules(SeccompMode::NetworkEnabled).expect("rules");
        for nr in [
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_pidfd_getfd,
            libc::SYS_io_uring_setup,
            libc::SYS_unshare,
        ] {
            assert!(map.contains_key(&nr), "{nr}");
        }
        assert!(!map.contains_key(&libc::SYS_connect));
    }
}
