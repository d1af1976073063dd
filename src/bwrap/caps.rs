//! Capabilities: `--cap-add` / `--cap-drop` names, and the capability sets
//! the sandboxed command ends with.
//!
//! bubblewrap's rule (not setuid), kept here: a root caller passes its own
//! effective set on, any other caller passes nothing, whatever uid the
//! command has inside; `--cap-add`/`--cap-drop` edit that set in order, and
//! an edited set (or any set of a non-root caller) is also inheritable and
//! ambient, so it survives the exec for any uid. The bounding set is always
//! cut down to the set. Capabilities are only ever held in the command's own
//! user namespace, below the one that owns the mounts.
//!
//! Names are read as libcap's `cap_from_name` reads them. The system calls
//! are [`crate::sys::confine`]'s: this module only names capabilities and
//! decides the set.

use super::numbers::c_leading_ulong;
use crate::sys::confine::{self, ConfineError};

/// Capability names in kernel order (`CAP_CHOWN` = 0 …), as libcap knows them.
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

/// Capability numbers libcap accepts (`__CAP_MAXBITS`).
const CAP_MAX_BITS: u64 = 64;

/// A set of capabilities as a bit mask (bit n = capability n).
pub type CapSet = u64;

/// Every capability of a kernel whose highest capability is `last`
/// ([`confine::last_cap`], read before the sandbox is set up).
pub fn all_caps(last: u32) -> CapSet {
    if last >= 63 {
        u64::MAX
    } else {
        (1u64 << (last + 1)) - 1
    }
}

/// One capability as libcap's `cap_from_name` reads it: a number (C prefixes
/// allowed) below 64, or `cap_` + a known name in any case. Like libcap, only
/// the leading number or the leading run of letters and `_` is looked at, so
/// `cap_chown,x` names `cap_chown`. `ALL` is the caller's business.
pub fn parse_cap(name: &[u8]) -> Option<CapSet> {
    if name.first().is_some_and(u8::is_ascii_digit) {
        let number = c_leading_ulong(name).filter(|n| *n < CAP_MAX_BITS)?;
        return Some(1u64 << number);
    }
    let word_len = name
        .iter()
        .position(|byte| !(byte.is_ascii_alphabetic() || *byte == b'_'))
        .unwrap_or(name.len());
    let word = name.get(..word_len)?.to_ascii_lowercase();
    let bare = word.strip_prefix(b"cap_")?;
    CAP_NAMES
        .iter()
        .position(|known| known.as_bytes() == bare)
        .map(|bit| 1u64 << bit)
}

/// One `--cap-add` or `--cap-drop`, in command-line order (`ALL` = every bit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapEdit {
    Add(CapSet),
    Drop(CapSet),
}

/// What the command keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapPlan {
    /// Effective and permitted set, and the bounding set.
    pub keep: CapSet,
    /// `keep` is also inheritable and raised as ambient.
    pub ambient: bool,
}

/// bubblewrap's decision: the caller's effective set for a root caller,
/// nothing otherwise; edited in order. A root caller's untouched set is kept
/// as is (not made ambient); any other set is made ambient too.
pub fn plan(caller_root_caps: Option<CapSet>, edits: &[CapEdit]) -> CapPlan {
    let mut keep = caller_root_caps.unwrap_or(0);
    for edit in edits {
        match *edit {
            CapEdit::Add(set) => keep |= set,
            CapEdit::Drop(set) => keep &= !set,
        }
    }
    CapPlan {
        keep,
        ambient: caller_root_caps.is_none() || !edits.is_empty(),
    }
}

/// The calling process's effective capabilities.
pub fn effective_caps() -> Result<CapSet, ConfineError> {
    confine::effective_capabilities()
}

/// Leaves the process with exactly the planned set (in its user namespace),
/// for caps `0..=last`, the bounding set included.
pub fn apply(plan: CapPlan, last: u32) -> Result<(), ConfineError> {
    confine::keep_only_capabilities(plan.keep & all_caps(last), last, plan.ambient)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_names_parse_as_libcap_reads_them() {
        assert_eq!(parse_cap(b"CAP_SYS_ADMIN"), Some(1 << 21));
        assert_eq!(parse_cap(b"cap_sys_admin"), Some(1 << 21));
        assert_eq!(parse_cap(b"cap_sys_admin,"), Some(1 << 21));
        assert_eq!(parse_cap(b"cap_chown"), Some(1));
        assert_eq!(parse_cap(b"21"), Some(1 << 21));
        assert_eq!(parse_cap(b"0x15"), Some(1 << 21));
        assert_eq!(parse_cap(b"21abc"), Some(1 << 21));
        assert_eq!(parse_cap(b"63"), Some(1 << 63));
        assert_eq!(parse_cap(b"64"), None);
        assert_eq!(parse_cap(b"sys_admin"), None);
        assert_eq!(parse_cap(b"cap_chownx"), None);
        assert_eq!(parse_cap(b" cap_chown"), None);
        assert_eq!(parse_cap(b""), None);
    }

    #[test]
    fn only_a_root_caller_passes_capabilities_on() {
        let all = all_caps(40);
        assert_eq!(all, (1 << 41) - 1);
        assert_eq!(
            plan(Some(all), &[]),
            CapPlan {
                keep: all,
                ambient: false
            }
        );
        assert_eq!(
            plan(None, &[]),
            CapPlan {
                keep: 0,
                ambient: true
            }
        );
        assert_eq!(plan(Some(all), &[CapEdit::Drop(u64::MAX)]).keep, 0);
        let added = plan(None, &[CapEdit::Add(1 << 13)]);
        assert_eq!((added.keep, added.ambient), (1 << 13, true));
        let edited = plan(Some(0b111), &[CapEdit::Drop(0b10), CapEdit::Add(0b1000)]);
        assert_eq!((edited.keep, edited.ambient), (0b1101, true));
    }
}
