//! Capabilities: `--cap-add` / `--cap-drop` names, and the final capability
//! sets of the sandboxed command.
//!
//! bubblewrap's rule, kept here: a command running as uid 0 inside the sandbox
//! keeps every capability (of its user namespace) unless told otherwise, any
//! other uid keeps none. `--cap-drop`/`--cap-add` edit that set; the bounding set
//! is cut down to it whenever it was edited. Capabilities are only ever held in
//! the sandbox's own user namespace, never on the host.

use std::io;

/// Capability names in kernel order (`CAP_CHOWN` = 0 …).
const CAP_NAMES: [&str; 41] = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

/// A set of capabilities as a bit mask (bit n = capability n).
pub type CapSet = u64;

/// Every capability this kernel knows.
pub fn all_caps() -> CapSet {
    let last = last_cap();
    if last >= 63 {
        u64::MAX
    } else {
        (1u64 << (last + 1)) - 1
    }
}

/// `/proc/sys/kernel/cap_last_cap`, or the highest name we know.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .unwrap_or(CAP_NAMES.len() as u32 - 1)
        .min(63)
}

/// Parses `ALL`, `CAP_SYS_ADMIN`, `cap_sys_admin` or `sys_admin`.
pub fn parse_cap(name: &str) -> Option<CapSet> {
    if name.eq_ignore_ascii_case("ALL") {
        return Some(all_caps());
    }
    let lower = name.to_ascii_lowercase();
    let bare = lower.strip_prefix("cap_").unwrap_or(&lower);
    CAP_NAMES
        .iter()
        .position(|known| *known == bare)
        .map(|bit| 1u64 << bit)
}

/// One `--cap-add` or `--cap-drop`, in command-line order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapEdit {
    Add(CapSet),
    Drop(CapSet),
}

/// The capabilities the command keeps, and whether the bounding set is cut
/// down to them (always, as bubblewrap does). bubblewrap's rules: a root
/// caller passes on its own effective set; otherwise uid 0 inside keeps
/// everything and any other uid nothing. `--cap-add`/`--cap-drop` edit that
/// set in order.
pub fn requested_caps(
    caller_root_caps: Option<CapSet>,
    sandbox_uid: u32,
    edits: &[CapEdit],
) -> (CapSet, bool) {
    let mut caps = match caller_root_caps {
        Some(caps) => caps,
        None if sandbox_uid == 0 => all_caps(),
        None => 0,
    };
    for edit in edits {
        match *edit {
            CapEdit::Add(set) => caps |= set,
            CapEdit::Drop(set) => caps &= !set,
        }
    }
    (caps, true)
}

/// The calling process's effective capabilities.
pub fn effective_caps() -> io::Result<CapSet> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and the two-element data array are live and correctly
    // sized for version 3; the kernel writes only into them.
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
    Ok(u64::from(data[0].effective) | (u64::from(data[1].effective) << 32))
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Sets effective and permitted to `caps`, inheritable to `inheritable`.
fn capset(caps: CapSet, inheritable: CapSet) -> io::Result<()> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let low = |set: CapSet| (set & 0xffff_ffff) as u32;
    let high = |set: CapSet| (set >> 32) as u32;
    let data = [
        CapData {
            effective: low(caps),
            permitted: low(caps),
            inheritable: low(inheritable),
        },
        CapData {
            effective: high(caps),
            permitted: high(caps),
            inheritable: high(inheritable),
        },
    ];
    // SAFETY: header and data are valid, correctly sized (version 3 takes two
    // CapData elements) and live across the call.
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

fn prctl(option: libc::c_int, arg2: libc::c_ulong, arg3: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the prctl options used here take integers only, no pointers.
    if unsafe { libc::prctl(option, arg2, arg3, 0 as libc::c_ulong, 0 as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets no_new_privs: nothing exec'd can gain privileges (bwrap always does).
pub fn set_no_new_privs() -> io::Result<()> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0)
}

/// Leaves the process with exactly `keep` (in its user namespace).
///
/// The bounding set is only cut when `bound` is set (the caller edited the
/// set), as bwrap leaves it untouched otherwise. With `ambient` (a non-zero
/// uid that asked for capabilities) they are raised as ambient so they
/// survive execve.
pub fn apply(keep: CapSet, bound: bool, ambient: bool) -> io::Result<()> {
    if bound {
        for cap in 0..=last_cap() {
            if keep & (1u64 << cap) == 0 {
                match prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0) {
                    // A capability newer than the running kernel.
                    Err(err) if err.raw_os_error() == Some(libc::EINVAL) => {}
                    other => other?,
                }
            }
        }
    }
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
    )?;
    // Inheritable only where ambient capabilities need it.
    capset(keep, if ambient { keep } else { 0 })?;
    if ambient {
        for cap in 0..=last_cap() {
            if keep & (1u64 << cap) != 0 {
                prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                    libc::c_ulong::from(cap),
                )?;
            }
        }
    }
    Ok(())
}

/// Drops every capability including the bounding set (for the reaper).
pub fn drop_all() -> io::Result<()> {
    apply(0, true, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_names_parse_in_every_spelling() {
        assert_eq!(parse_cap("CAP_SYS_ADMIN"), Some(1 << 21));
        assert_eq!(parse_cap("cap_sys_admin"), Some(1 << 21));
        assert_eq!(parse_cap("chown"), Some(1));
        assert_eq!(parse_cap("FOO"), None);
        assert_eq!(parse_cap("ALL"), Some(all_caps()));
    }

    #[test]
    fn root_keeps_everything_unless_told_otherwise() {
        assert_eq!(requested_caps(None, 0, &[]), (all_caps(), true));
        assert_eq!(requested_caps(None, 1000, &[]), (0, true));
        assert_eq!(requested_caps(Some(0b101), 0, &[]), (0b101, true));
        let (caps, bound) = requested_caps(None, 0, &[CapEdit::Drop(all_caps())]);
        assert_eq!((caps, bound), (0, true));
    }
}
