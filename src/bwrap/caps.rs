//! Capabilities: `--cap-add` / `--cap-drop` names, and the final capability
//! sets of the sandboxed command.
//!
//! bubblewrap's rule, kept here: a command running as uid 0 inside the sandbox
//! keeps every capability (of its user namespace) unless told otherwise, any
//! other uid keeps none (a root caller passes its own set on instead).
//! `--cap-drop`/`--cap-add` edit that set, which then is also ambient; the
//! bounding set is cut down to it. Capabilities are only ever held in the
//! sandbox's own user namespace, never on the host.
//!
//! The system calls are [`crate::sys::confine`]'s: this module only names
//! capabilities and decides the set; [`apply`] hands it over.

use crate::sys::confine::{self, ConfineError};

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

/// Every capability of a kernel whose highest capability is `last`
/// ([`confine::last_cap`], read before the sandbox is set up).
pub fn all_caps(last: u32) -> CapSet {
    if last >= 63 {
        u64::MAX
    } else {
        (1u64 << (last + 1)) - 1
    }
}

/// Parses `ALL`, `CAP_SYS_ADMIN`, `cap_sys_admin` or `sys_admin`.
pub fn parse_cap(name: &str) -> Option<CapSet> {
    if name.eq_ignore_ascii_case("ALL") {
        return Some(all_caps(confine::last_cap()));
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

/// The capabilities the command keeps; the bounding set is always cut down
/// to them, as bubblewrap does. bubblewrap's rules: a root caller passes on
/// its own effective set; otherwise uid 0 inside keeps everything and any
/// other uid nothing. `--cap-add`/`--cap-drop` edit that set in order.
pub fn requested_caps(
    caller_root_caps: Option<CapSet>,
    sandbox_uid: u32,
    last: u32,
    edits: &[CapEdit],
) -> CapSet {
    let mut caps = match caller_root_caps {
        Some(caps) => caps,
        None if sandbox_uid == 0 => all_caps(last),
        None => 0,
    };
    for edit in edits {
        match *edit {
            CapEdit::Add(set) => caps |= set,
            CapEdit::Drop(set) => caps &= !set,
        }
    }
    caps
}

/// The calling process's effective capabilities.
pub fn effective_caps() -> Result<CapSet, ConfineError> {
    confine::effective_capabilities()
}

/// Leaves the process with exactly `keep` (in its user namespace), for caps
/// `0..=last`, the bounding set included. With `ambient` (the set was edited
/// by `--cap-add`/`--cap-drop`) they are also inheritable and raised as
/// ambient, so they survive an execve by any uid.
/// Keeping nothing is [`confine::drop_capabilities_through`], which also
/// locks the securebits.
pub fn apply(keep: CapSet, ambient: bool, last: u32) -> Result<(), ConfineError> {
    if keep == 0 {
        confine::drop_capabilities_through(last)
    } else {
        confine::keep_only_capabilities(keep, last, ambient)
    }
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
        assert_eq!(parse_cap("ALL"), Some(all_caps(confine::last_cap())));
    }

    #[test]
    fn root_keeps_everything_unless_told_otherwise() {
        let all = all_caps(40);
        assert_eq!(all, (1 << 41) - 1);
        assert_eq!(requested_caps(None, 0, 40, &[]), all);
        assert_eq!(requested_caps(None, 1000, 40, &[]), 0);
        assert_eq!(requested_caps(Some(0b101), 0, 40, &[]), 0b101);
        assert_eq!(requested_caps(None, 0, 40, &[CapEdit::Drop(all)]), 0);
    }
}
