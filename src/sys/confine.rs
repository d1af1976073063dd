//! Process confinement primitives: no_new_privs, dropping every capability
//! (also for a root caller), and a fresh anonymous session keyring.
//!
//! These are the last steps before a sandboxed command is exec'ed, shared by
//! the inner stage of `linux-sandbox`, the Landlock backend and the built-in
//! bwrap. Only system calls live here; which set a command keeps is decided
//! by the callers (the sandbox's seccomp filter is not here either).
//!
//! Everything except [`last_cap`] and [`confine_process`] is async-signal-safe
//! (no allocation, no locks), so it may run between fork and exec: read
//! [`last_cap`] before forking and pass it to [`drop_capabilities_through`].
//!
//! Why the securebits: a process whose uid is 0 regains the full capability
//! set on `execve` unless `SECBIT_NOROOT` is set, and regains it on a setuid
//! transition unless `SECBIT_NO_SETUID_FIXUP` is set. Emptying the bounding
//! set (PR_CAPBSET_DROP) removes what any later exec could grant; the locked
//! securebits make the "no caps for root" rule permanent for every
//! descendant. no_new_privs additionally forbids any exec from gaining
//! permitted capabilities.

use std::io;

/// `SECBIT_NOROOT`: uid 0 gets no capabilities on execve.
const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
/// `SECBIT_NO_SETUID_FIXUP`: uid transitions leave capabilities alone.
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
/// `SECBIT_KEEP_CAPS` stays clear and locked: setuid() from 0 never keeps caps.
const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
/// `SECBIT_NO_CAP_AMBIENT_RAISE` and its lock: ambient caps can never come back.
const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;

/// The securebits set by [`drop_capabilities_through`].
pub const LOCKED_SECUREBITS: libc::c_ulong = SECBIT_NOROOT
    | SECBIT_NOROOT_LOCKED
    | SECBIT_NO_SETUID_FIXUP
    | SECBIT_NO_SETUID_FIXUP_LOCKED
    | SECBIT_KEEP_CAPS_LOCKED
    | SECBIT_NO_CAP_AMBIENT_RAISE
    | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

/// Highest capability number any kernel is expected to have (cap numbers fit
/// in the two 32-bit words of the capset v3 ABI).
const MAX_CAP: u32 = 63;

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// `KEYCTL_GET_KEYRING_ID`.
const KEYCTL_GET_KEYRING_ID: libc::c_long = 0;
/// `KEYCTL_JOIN_SESSION_KEYRING`.
const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
/// `KEY_SPEC_SESSION_KEYRING`.
const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;

/// A confinement step that failed; each variant names the call.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("prctl(PR_SET_NO_NEW_PRIVS) failed: {0}")]
    NoNewPrivs(#[source] io::Error),
    #[error("prctl(PR_SET_SECUREBITS) failed: {0}")]
    Securebits(#[source] io::Error),
    #[error("prctl(PR_CAPBSET_DROP, {cap}) failed: {source}")]
    BoundingDrop {
        cap: u32,
        #[source]
        source: io::Error,
    },
    #[error("prctl(PR_CAP_AMBIENT_CLEAR_ALL) failed: {0}")]
    AmbientClear(#[source] io::Error),
    #[error("capset failed: {0}")]
    Capset(#[source] io::Error),
    #[error("capget failed: {0}")]
    Capget(#[source] io::Error),
    #[error("capabilities still present after dropping them ({0})")]
    StillPresent(&'static str),
    #[error("keyctl(KEYCTL_JOIN_SESSION_KEYRING) failed: {0}")]
    Keyring(#[source] io::Error),
    #[error("prctl(PR_CAP_AMBIENT_RAISE, {cap}) failed: {source}")]
    AmbientRaise {
        cap: u32,
        #[source]
        source: io::Error,
    },
}

/// Result of this module.
pub type Result<T, E = ConfineError> = std::result::Result<T, E>;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// prctl with every argument widened to `unsigned long` (the kernel reads
/// all five as such; a variadic `int` would leave the upper half undefined).
fn prctl(option: libc::c_int, arg2: libc::c_ulong, arg3: libc::c_ulong) -> io::Result<libc::c_int> {
    let zero: libc::c_ulong = 0;
    // SAFETY: every option used in this module takes integer arguments only;
    // no pointer is passed.
    let rc = unsafe { libc::prctl(option, arg2, arg3, zero, zero) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// Sets no_new_privs: no later exec can gain privileges (setuid bits and
/// file capabilities are ignored). Async-signal-safe.
pub fn set_no_new_privs() -> Result<()> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0).map_err(ConfineError::NoNewPrivs)?;
    Ok(())
}

/// Asks for `signal` when the parent thread dies (PR_SET_PDEATHSIG). The
/// caller then checks that its parent has not gone already: one that died
/// before the request never signals. Async-signal-safe.
pub fn set_parent_death_signal(signal: libc::c_int) -> io::Result<()> {
    let signal =
        libc::c_ulong::try_from(signal).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    prctl(libc::PR_SET_PDEATHSIG, signal, 0).map(drop)
}

/// Whether no_new_privs is set on the calling thread.
pub fn no_new_privs() -> bool {
    matches!(prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0), Ok(1))
}

/// The highest capability number of this kernel, from
/// `/proc/sys/kernel/cap_last_cap`, else found by probing the bounding set.
/// Allocates: call it before forking.
pub fn last_cap() -> u32 {
    static LAST: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *LAST.get_or_init(read_last_cap)
}

fn read_last_cap() -> u32 {
    if let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap") {
        if let Ok(n) = text.trim().parse::<u32>() {
            return n.min(MAX_CAP);
        }
    }
    // PR_CAPBSET_READ fails with EINVAL for numbers above the last capability.
    let mut last = 0;
    for cap in 0..=MAX_CAP {
        if capbset_read(cap).is_err() {
            break;
        }
        last = cap;
    }
    last
}

/// PR_CAPBSET_READ: whether `cap` is in the bounding set.
fn capbset_read(cap: u32) -> io::Result<bool> {
    Ok(prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0)? == 1)
}

fn capget() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and data are valid, writable, correctly laid out for
    // the v3 ABI (one header, two data words).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(data)
}

fn current_securebits() -> io::Result<libc::c_ulong> {
    let bits = prctl(libc::PR_GET_SECUREBITS, 0, 0)?;
    Ok(libc::c_ulong::try_from(bits).unwrap_or(0))
}

/// Drops every capability for good: locks the securebits so uid 0 gains
/// nothing on exec, empties the bounding set for caps `0..=last`, clears the
/// ambient set, then empties the effective, permitted and inheritable sets,
/// and checks with `capget` that nothing is left. Async-signal-safe.
///
/// A caller without CAP_SETPCAP cannot touch the bounding set or the
/// securebits; that is accepted only when it ends with no capabilities at
/// all and either no uid is 0 or no_new_privs is already set (with it, an
/// exec never gains permitted capabilities).
pub fn drop_capabilities_through(last: u32) -> Result<()> {
    let last = last.min(MAX_CAP);
    let wanted = LOCKED_SECUREBITS;
    let bits = current_securebits().map_err(ConfineError::Securebits)?;
    let mut privileged_steps_done = true;
    if bits & wanted != wanted {
        if let Err(err) = prctl(libc::PR_SET_SECUREBITS, bits | wanted, 0) {
            if err.raw_os_error() != Some(libc::EPERM) {
                return Err(ConfineError::Securebits(err));
            }
            privileged_steps_done = false;
        }
    }
    for cap in 0..=last {
        if let Err(err) = prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0) {
            match err.raw_os_error() {
                // Unknown to this kernel: nothing to drop.
                Some(libc::EINVAL) => break,
                Some(libc::EPERM) if matches!(capbset_read(cap), Ok(false)) => {}
                Some(libc::EPERM) => privileged_steps_done = false,
                _ => return Err(ConfineError::BoundingDrop { cap, source: err }),
            }
        }
    }
    let clear_all = libc::c_ulong::try_from(libc::PR_CAP_AMBIENT_CLEAR_ALL).unwrap_or(4);
    if let Err(err) = prctl(libc::PR_CAP_AMBIENT, clear_all, 0) {
        // Kernels before 4.3 have no ambient set.
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(ConfineError::AmbientClear(err));
        }
    }
    capset_to(0, 0).map_err(ConfineError::Capset)?;

    // The checks below read back what the kernel cannot have left: each
    // step above either succeeded or returned its error. One capget covers
    // the ambient set too: the kernel keeps it within permitted ∩
    // inheritable and lowers it on every capset, so with both empty it is.
    let data = capget().map_err(ConfineError::Capget)?;
    if data.iter().any(|d| d.effective != 0 || d.permitted != 0) {
        return Err(ConfineError::StillPresent("effective or permitted"));
    }
    if data.iter().any(|d| d.inheritable != 0) {
        return Err(ConfineError::StillPresent("inheritable"));
    }
    // uid 0 without CAP_SETPCAP (e.g. root inside a user namespace whose
    // launcher already dropped everything): an exec hands back nothing when
    // the bounding set is already empty (bubblewrap's `--cap-drop ALL`), or
    // when no_new_privs caps it at the (empty) current set. A bounding-set
    // drop that succeeded needs no reading back.
    let bounding_empty = || (0..=last).all(|cap| matches!(capbset_read(cap), Ok(false)));
    if !privileged_steps_done && any_uid_is_root() && !no_new_privs() && !bounding_empty() {
        return Err(ConfineError::StillPresent(
            "bounding set and securebits unchangeable for a uid 0 process without no_new_privs",
        ));
    }
    Ok(())
}

fn any_uid_is_root() -> bool {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: the three pointers are valid, writable uid_t locations.
    let rc = unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    rc != 0 || r == 0 || e == 0 || s == 0
}

/// Moves this process into a new IPC namespace (SysV IPC and POSIX message
/// queues of its own). Needs `CAP_SYS_ADMIN`, so only a root caller gets
/// one; false when refused.
pub fn unshare_ipc() -> bool {
    // SAFETY: unshare takes a flag word and touches no memory of ours.
    unsafe { libc::unshare(libc::CLONE_NEWIPC) == 0 }
}

/// [`drop_capabilities_through`] with [`last_cap`]. Allocates.
pub fn drop_all_capabilities() -> Result<()> {
    drop_capabilities_through(last_cap())
}

/// Joins a new anonymous session keyring, so the caller's session keyring
/// (and the keys linked from it) is no longer reachable. Async-signal-safe.
///
/// A kernel without keys support (ENOSYS), or a container whose seccomp
/// profile denies `keyctl` (EPERM/ENOSYS, as Docker's does), has no keyring
/// to leak: that is accepted after checking that looking up the current
/// session keyring fails the same way.
pub fn join_fresh_session_keyring() -> Result<()> {
    // SAFETY: a NULL name asks for a new anonymous keyring; no other pointer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        )
    };
    if rc >= 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
        // SAFETY: integer arguments only.
        let lookup = unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_GET_KEYRING_ID,
                KEY_SPEC_SESSION_KEYRING,
                0,
            )
        };
        if lookup < 0 {
            return Ok(());
        }
    }
    Err(ConfineError::Keyring(err))
}

/// The serial of the current session keyring (creating none), for tests and
/// the doctor.
pub fn session_keyring_id() -> io::Result<i64> {
    // SAFETY: integer arguments only; create flag 0.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_SESSION_KEYRING,
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// The whole confinement of a sandboxed command, in order: fresh session
/// keyring, no_new_privs, all capabilities dropped. Allocates (reads
/// `cap_last_cap`); use the individual steps after a fork.
pub fn confine_process() -> Result<()> {
    join_fresh_session_keyring()?;
    set_no_new_privs()?;
    drop_all_capabilities()
}

/// The calling thread's effective capabilities as a bit mask (bit n =
/// capability n). Async-signal-safe.
pub fn effective_capabilities() -> Result<u64> {
    let data = capget().map_err(ConfineError::Capget)?;
    Ok(u64::from(data[0].effective) | (u64::from(data[1].effective) << 32))
}

/// The calling thread's permitted capabilities as a bit mask.
/// Async-signal-safe.
pub fn permitted_capabilities() -> Result<u64> {
    let data = capget().map_err(ConfineError::Capget)?;
    Ok(u64::from(data[0].permitted) | (u64::from(data[1].permitted) << 32))
}

/// Leaves the calling process with exactly the capabilities in `keep` (bit n
/// = capability n) for caps `0..=last`: every other one leaves the bounding
/// set, the ambient set is cleared, effective and permitted become `keep`.
/// With `ambient`, `keep` is also made inheritable and raised as ambient so
/// that it survives an exec by a non-root uid (bubblewrap's `--cap-add`).
/// The securebits are left alone. Async-signal-safe.
///
/// [`drop_capabilities_through`] is the hardened form for an empty `keep`.
pub fn keep_only_capabilities(keep: u64, last: u32, ambient: bool) -> Result<()> {
    let last = last.min(MAX_CAP);
    for cap in (0..=last).filter(|cap| keep & (1u64 << cap) == 0) {
        if let Err(err) = prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0) {
            match err.raw_os_error() {
                // Unknown to this kernel: nothing to drop.
                Some(libc::EINVAL) => break,
                _ => return Err(ConfineError::BoundingDrop { cap, source: err }),
            }
        }
    }
    let clear_all = libc::c_ulong::try_from(libc::PR_CAP_AMBIENT_CLEAR_ALL).unwrap_or(4);
    if let Err(err) = prctl(libc::PR_CAP_AMBIENT, clear_all, 0) {
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(ConfineError::AmbientClear(err));
        }
    }
    let inheritable = if ambient { keep } else { 0 };
    capset_to(keep, inheritable).map_err(ConfineError::Capset)?;
    if ambient {
        let raise = libc::c_ulong::try_from(libc::PR_CAP_AMBIENT_RAISE).unwrap_or(2);
        for cap in (0..=last).filter(|cap| keep & (1u64 << cap) != 0) {
            prctl(libc::PR_CAP_AMBIENT, raise, libc::c_ulong::from(cap))
                .map_err(|source| ConfineError::AmbientRaise { cap, source })?;
        }
    }
    Ok(())
}

/// Empties the effective, permitted and inheritable sets, leaving the
/// bounding and ambient sets and the securebits alone (what bubblewrap does
/// to its reaper). Async-signal-safe.
pub fn clear_capability_sets() -> Result<()> {
    capset_to(0, 0).map_err(ConfineError::Capset)
}

/// capset with effective = permitted = `caps` (all empty with `(0, 0)`).
fn capset_to(caps: u64, inheritable: u64) -> io::Result<()> {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let word = |set: u64, high: bool| {
        let bits = if high { set >> 32 } else { set & 0xffff_ffff };
        u32::try_from(bits).unwrap_or(u32::MAX)
    };
    let data = [false, true].map(|high| CapData {
        effective: word(caps, high),
        permitted: word(caps, high),
        inheritable: word(inheritable, high),
    });
    // SAFETY: header and data are valid and laid out for the v3 ABI; the
    // kernel only reads data.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
