//! Capabilities, no_new_privs and the session keyring after
//! `sys::confine`, observed by a program exec'ed afterwards (as root,
//! where an exec would otherwise hand back the full capability set).

use crate::common::confine::{exec_after, in_child, status_field};
use codexbox::sys::confine;

fn confined_status() -> String {
    let last = confine::last_cap();
    let out = exec_after("/bin/cat", &["/proc/self/status"], move || {
        confine::join_fresh_session_keyring().map_err(std::io::Error::other)?;
        confine::drop_capabilities_through(last).map_err(std::io::Error::other)?;
        confine::set_no_new_privs().map_err(std::io::Error::other)?;
        Ok(())
    });
    assert!(
        out.status.success(),
        "cat failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 status")
}

#[test]
fn root_caller_really_has_capabilities_to_lose() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        crate::common::host::not_applicable("not running as root");
        return;
    }
    let mine = std::fs::read_to_string("/proc/self/status").expect("status");
    assert_ne!(status_field(&mine, "CapEff"), Some("0000000000000000"));
    assert_ne!(status_field(&mine, "CapBnd"), Some("0000000000000000"));
}

#[test]
fn exec_after_confine_holds_no_capabilities_even_as_root() {
    let status = confined_status();
    for field in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(
            status_field(&status, field),
            Some("0000000000000000"),
            "{field} in\n{status}"
        );
    }
    assert_eq!(status_field(&status, "NoNewPrivs"), Some("1"), "{status}");
}

#[test]
fn securebits_are_locked_after_confine() {
    let last = confine::last_cap();
    let got = in_child(move || {
        if confine::drop_capabilities_through(last).is_err() {
            return 1;
        }
        let zero: libc::c_ulong = 0;
        // SAFETY: PR_GET_SECUREBITS takes no pointers.
        let bits = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, zero, zero, zero, zero) };
        if bits < 0 {
            return 2;
        }
        let bits = bits as libc::c_ulong;
        if bits & confine::LOCKED_SECUREBITS != confine::LOCKED_SECUREBITS {
            return 3;
        }
        // Trying to unlock must fail.
        // SAFETY: integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, zero, zero, zero, zero) };
        if rc == 0 {
            return 4;
        }
        0
    });
    assert_eq!(got, 0, "step {got}");
}

#[test]
fn confined_child_cannot_mount_or_change_sysctls() {
    let last = confine::last_cap();
    let got = in_child(move || {
        // Private mount and UTS namespaces first, so that a wrong success
        // below could not touch the host.
        // SAFETY: integer flags; NUL-terminated literal; no data pointer.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWUTS) != 0
                || libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
            {
                return 5;
            }
        }
        if confine::drop_capabilities_through(last).is_err() {
            return 1;
        }
        // SAFETY: NUL-terminated literals; a tmpfs mount attempt.
        let rc = unsafe {
            libc::mount(
                c"none".as_ptr(),
                c"/mnt".as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc == 0 {
            return 2;
        }
        // sethostname needs CAP_SYS_ADMIN (a uid-0 write to
        // /proc/sys/kernel/hostname needs only the file mode: the Landlock
        // backend keeps /proc read-only for that reason).
        // SAFETY: the buffer is valid for its length.
        let rc = unsafe { libc::sethostname(c"x".as_ptr(), 1) };
        if rc == 0 {
            return 3;
        }
        // SAFETY: integer arguments only; setuid(0) from uid 0 is allowed
        // but must not bring capabilities back.
        unsafe { libc::setuid(0) };
        let mut data = [0u32; 6];
        let mut header = [0x2008_0522u32, 0];
        // SAFETY: v3 header and two data structs (six u32s).
        let rc = unsafe { libc::syscall(libc::SYS_capget, header.as_mut_ptr(), data.as_mut_ptr()) };
        if rc != 0 || data.iter().any(|w| *w != 0) {
            return 4;
        }
        0
    });
    assert_eq!(got, 0, "step {got}");
}

#[test]
fn confined_child_gets_a_fresh_session_keyring() {
    // The caller's session keyring (possibly the user-session one).
    let parent = confine::session_keyring_id().ok();
    let got = in_child(move || {
        if confine::join_fresh_session_keyring().is_err() {
            return 1;
        }
        match confine::session_keyring_id() {
            Ok(id) if Some(id) != parent => 0,
            Ok(_) => 2,
            Err(_) => 3,
        }
    });
    assert_eq!(got, 0, "step {got}");
}

#[test]
fn unprivileged_caller_is_confined_without_touching_the_bounding_set() {
    let last = confine::last_cap();
    let out = exec_after("/bin/cat", &["/proc/self/status"], move || {
        // Become an ordinary user first (root loses its caps on setresuid).
        // SAFETY: an empty group list (NULL with size 0) and integer ids.
        let dropped = unsafe {
            libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(65534, 65534, 65534) == 0
                && libc::setresuid(65534, 65534, 65534) == 0
        };
        if !dropped {
            return Err(std::io::Error::last_os_error());
        }
        confine::join_fresh_session_keyring().map_err(std::io::Error::other)?;
        confine::set_no_new_privs().map_err(std::io::Error::other)?;
        confine::drop_capabilities_through(last).map_err(std::io::Error::other)?;
        Ok(())
    });
    assert!(
        out.status.success(),
        "confine failed for an unprivileged caller: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = String::from_utf8_lossy(&out.stdout);
    assert_eq!(status_field(&status, "CapEff"), Some("0000000000000000"));
    assert_eq!(status_field(&status, "CapPrm"), Some("0000000000000000"));
    assert_eq!(status_field(&status, "NoNewPrivs"), Some("1"));
}
