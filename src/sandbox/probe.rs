//! Host facts the sandbox depends on, probed once per process and cached:
//! can this process create an unprivileged user namespace (and if not, why),
//! the Landlock ABI, seccomp support, WSL1/WSL2 and the kernel release.
//!
//! Read-only: nothing here changes the calling process. The user-namespace
//! test runs in a forked child that exits without exec'ing. Which launcher
//! and backend to use is decided elsewhere (`sandbox::launcher`, the CLI);
//! the doctor (`crate::sandbox::doctor`) prints these facts.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// `LANDLOCK_CREATE_RULESET_VERSION`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_ulong = 1;

/// Which Windows Subsystem for Linux, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wsl {
    None,
    Wsl1,
    Wsl2,
}

impl Wsl {
    pub fn as_str(self) -> &'static str {
        match self {
            Wsl::None => "none",
            Wsl::Wsl1 => "wsl1",
            Wsl::Wsl2 => "wsl2",
        }
    }
}

/// Why user namespaces cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsernsBlocker {
    /// WSL1 has no user namespaces at all.
    Wsl1,
    /// `kernel.unprivileged_userns_clone = 0` (Debian/Ubuntu patch).
    UnprivilegedCloneSysctl,
    /// `user.max_user_namespaces = 0`.
    MaxUserNamespacesZero,
    /// Ubuntu's `kernel.apparmor_restrict_unprivileged_userns = 1`.
    AppArmorRestriction,
    /// A seccomp filter on this process (a container runtime's, e.g.
    /// Docker's default profile) denies `unshare(CLONE_NEWUSER)`.
    SeccompFilter,
    /// The namespace limit or nesting depth is reached (ENOSPC/EUSERS).
    Limit,
    /// Something else; the failing call and errno.
    Other { call: &'static str, errno: i32 },
}

impl UsernsBlocker {
    /// One sentence for people, with the usual fix.
    pub fn explain(&self) -> String {
        match self {
            UsernsBlocker::Wsl1 => {
                "WSL1 cannot create user namespaces; use WSL2 for bubblewrap sandboxing".into()
            }
            UsernsBlocker::UnprivilegedCloneSysctl => {
                "sysctl kernel.unprivileged_userns_clone is 0 (set it to 1)".into()
            }
            UsernsBlocker::MaxUserNamespacesZero => {
                "sysctl user.max_user_namespaces is 0 (raise it)".into()
            }
            UsernsBlocker::AppArmorRestriction => {
                "AppArmor restricts unprivileged user namespaces \
                 (kernel.apparmor_restrict_unprivileged_userns=1); allow bwrap with an \
                 AppArmor profile granting `userns,`"
                    .into()
            }
            UsernsBlocker::SeccompFilter => {
                "a seccomp filter on this process denies unshare(CLONE_NEWUSER) \
                 (a container runtime's default profile, e.g. Docker's)"
                    .into()
            }
            UsernsBlocker::Limit => "the user namespace limit or nesting depth is reached".into(),
            UsernsBlocker::Other { call, errno } => {
                format!("{call} failed: {}", io::Error::from_raw_os_error(*errno))
            }
        }
    }

    /// Stable token for `--json`.
    pub fn as_str(&self) -> &'static str {
        match self {
            UsernsBlocker::Wsl1 => "wsl1",
            UsernsBlocker::UnprivilegedCloneSysctl => "sysctl_unprivileged_userns_clone",
            UsernsBlocker::MaxUserNamespacesZero => "sysctl_max_user_namespaces",
            UsernsBlocker::AppArmorRestriction => "apparmor",
            UsernsBlocker::SeccompFilter => "seccomp",
            UsernsBlocker::Limit => "limit",
            UsernsBlocker::Other { .. } => "other",
        }
    }
}

/// Seccomp as seen by this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeccompSupport {
    /// The kernel can install seccomp filters.
    pub filters_available: bool,
    /// `Seccomp:` of /proc/self/status: 0 none, 1 strict, 2 filtered.
    pub current_mode: u8,
}

/// Everything probed, once per process.
#[derive(Debug, Clone)]
pub struct HostProbe {
    /// `uname -r`.
    pub kernel_release: String,
    /// `/proc/version` (trimmed), empty when unreadable.
    pub kernel_version: String,
    pub wsl: Wsl,
    /// `Ok(())` when a user namespace with a uid map could be created.
    pub userns: Result<(), UsernsBlocker>,
    /// The kernel's Landlock ABI version, None when Landlock is unavailable.
    pub landlock_abi: Option<u32>,
    /// Why Landlock is unavailable (ENOSYS: not built; EOPNOTSUPP: disabled).
    pub landlock_error: Option<String>,
    pub seccomp: SeccompSupport,
}

impl HostProbe {
    /// Whether the bubblewrap backend can work here (user namespaces).
    pub fn userns_usable(&self) -> bool {
        self.userns.is_ok()
    }
}

/// The backend `--backend auto` picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// bubblewrap (user, pid, network namespaces) + seccomp.
    Bwrap,
    /// Landlock + seccomp + no_new_privs (no user namespaces here).
    Landlock,
    /// Neither: sandboxed commands must be refused.
    Unavailable,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Bwrap => "bwrap",
            Backend::Landlock => "landlock",
            Backend::Unavailable => "none",
        }
    }
}

/// `--backend auto`: bubblewrap when user namespaces work, else Landlock
/// when the kernel has it, else nothing (the caller fails closed).
pub fn auto_backend(host: &HostProbe) -> Backend {
    if host.userns_usable() {
        Backend::Bwrap
    } else if host.landlock_abi.is_some() {
        Backend::Landlock
    } else {
        Backend::Unavailable
    }
}

/// The cached probe of this host (first call does the work).
pub fn host() -> &'static HostProbe {
    static PROBE: OnceLock<HostProbe> = OnceLock::new();
    PROBE.get_or_init(run_probe)
}

fn run_probe() -> HostProbe {
    let kernel_version = read_trimmed("/proc/version");
    let osrelease = read_trimmed("/proc/sys/kernel/osrelease");
    let wsl = detect_wsl(&kernel_version, &osrelease);
    let kernel_release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or(osrelease);
    let seccomp = seccomp_support();
    let userns = if wsl == Wsl::Wsl1 {
        Err(UsernsBlocker::Wsl1)
    } else {
        probe_userns().map_err(|failure| diagnose_userns(failure, seccomp))
    };
    let (landlock_abi, landlock_error) = match landlock_abi() {
        Ok(v) => (Some(v), None),
        Err(err) => (None, Some(describe_landlock_error(&err))),
    };
    HostProbe {
        kernel_release,
        kernel_version,
        wsl,
        userns,
        landlock_abi,
        landlock_error,
        seccomp,
    }
}

/// This host's WSL generation, from /proc alone (no other probing).
pub fn host_wsl() -> Wsl {
    detect_wsl(
        &read_trimmed("/proc/version"),
        &read_trimmed("/proc/sys/kernel/osrelease"),
    )
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// WSL detection as the reference does it: `wsl` followed by digits in
/// /proc/version decides; otherwise `microsoft` without `microsoft-standard`
/// means WSL1, `microsoft-standard` (or `WSL2` in osrelease) WSL2.
pub fn detect_wsl(proc_version: &str, osrelease: &str) -> Wsl {
    let lower = proc_version.to_ascii_lowercase();
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("wsl") {
        let after = &rest[at + 3..];
        let digits: String = after.chars().take_while(|c| c.is_ascii_digit()).collect();
        if let Ok(n) = digits.parse::<u32>() {
            return if n == 1 { Wsl::Wsl1 } else { Wsl::Wsl2 };
        }
        rest = after;
    }
    let release = osrelease.to_ascii_lowercase();
    if lower.contains("microsoft-standard") || release.contains("microsoft-standard") {
        return Wsl::Wsl2;
    }
    if lower.contains("microsoft") || release.contains("microsoft") {
        return Wsl::Wsl1;
    }
    Wsl::None
}

/// Which step of the user-namespace test failed, with its errno.
#[derive(Debug, Clone, Copy)]
struct UsernsFailure {
    call: &'static str,
    errno: i32,
}

/// Forks a child that calls `unshare(CLONE_NEWUSER)` and writes a one-line
/// uid map, then `_exit`s with `0`, `100 + errno` (unshare) or `200 +
/// errno` (uid_map). The child never execs and only makes raw syscalls.
fn probe_userns() -> Result<(), UsernsFailure> {
    // Built before the fork: the child must not allocate.
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let map = format!("0 {euid} 1\0");
    let map_bytes = map.into_bytes();
    let map_path = b"/proc/self/uid_map\0";
    let mut cmd = Command::new("/proc/self/exe");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs in the forked child and only makes raw,
    // async-signal-safe syscalls on memory prepared before the fork, then
    // leaves with _exit (never returning into std's exec path).
    unsafe {
        cmd.pre_exec(move || {
            let code = userns_child(map_path, &map_bytes);
            libc::_exit(code)
        });
    }
    let status = match cmd.status() {
        Ok(status) => status,
        Err(err) => {
            return Err(UsernsFailure {
                call: "fork",
                errno: err.raw_os_error().unwrap_or(libc::EIO),
            })
        }
    };
    match status.code() {
        Some(0) => Ok(()),
        Some(code @ 100..=199) => Err(UsernsFailure {
            call: "unshare(CLONE_NEWUSER)",
            errno: code - 100,
        }),
        Some(code @ 200..=255) => Err(UsernsFailure {
            call: "write /proc/self/uid_map",
            errno: code - 200,
        }),
        _ => Err(UsernsFailure {
            call: "user namespace probe",
            errno: libc::EIO,
        }),
    }
}

/// The child side of [`probe_userns`]; returns the exit code.
fn userns_child(map_path: &[u8], map: &[u8]) -> libc::c_int {
    fn errno_code(base: libc::c_int) -> libc::c_int {
        let errno = match io::Error::last_os_error().raw_os_error() {
            // Both mean "limit reached"; EUSERS does not fit the exit code.
            Some(libc::EUSERS) => libc::ENOSPC,
            Some(errno) => errno,
            None => libc::EIO,
        };
        base + errno.clamp(1, 55)
    }
    // SAFETY: integer flag only.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
        return errno_code(100);
    }
    // SAFETY: map_path is NUL-terminated and outlives the call.
    let fd = unsafe { libc::open(map_path.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return errno_code(200);
    }
    // Without the trailing NUL.
    let len = map.len().saturating_sub(1);
    // SAFETY: map is valid for len bytes; fd is ours.
    let written = unsafe { libc::write(fd, map.as_ptr().cast(), len) };
    if written < 0 {
        return errno_code(200);
    }
    0
}

fn read_sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn diagnose_userns(failure: UsernsFailure, seccomp: SeccompSupport) -> UsernsBlocker {
    if read_sysctl("/proc/sys/user/max_user_namespaces") == Some(0) {
        return UsernsBlocker::MaxUserNamespacesZero;
    }
    if matches!(failure.errno, libc::ENOSPC | libc::EUSERS) {
        return UsernsBlocker::Limit;
    }
    if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return UsernsBlocker::UnprivilegedCloneSysctl;
    }
    if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return UsernsBlocker::AppArmorRestriction;
    }
    if failure.call.starts_with("unshare")
        && failure.errno == libc::EPERM
        && seccomp.current_mode == 2
    {
        return UsernsBlocker::SeccompFilter;
    }
    UsernsBlocker::Other {
        call: failure.call,
        errno: failure.errno,
    }
}

/// The kernel's Landlock ABI version (`landlock_create_ruleset` with
/// `LANDLOCK_CREATE_RULESET_VERSION`).
pub fn landlock_abi() -> io::Result<u32> {
    // SAFETY: NULL attributes with size 0 and the VERSION flag only query.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(rc).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Why [`landlock_abi`] failed, for people.
pub fn describe_landlock_error(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::ENOSYS) => "not built into this kernel (ENOSYS)".into(),
        Some(libc::EOPNOTSUPP) => {
            "built in but disabled at boot (EOPNOTSUPP; add landlock to lsm=)".into()
        }
        _ => err.to_string(),
    }
}

fn seccomp_support() -> SeccompSupport {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let current_mode = status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .and_then(|v| v.trim().parse::<u8>().ok())
        .unwrap_or(0);
    // PR_GET_SECCOMP fails with EINVAL on kernels without CONFIG_SECCOMP.
    let zero: libc::c_ulong = 0;
    // SAFETY: PR_GET_SECCOMP takes no pointer.
    let rc = unsafe { libc::prctl(libc::PR_GET_SECCOMP, zero, zero, zero, zero) };
    let filters_available =
        rc >= 0 && std::path::Path::new("/proc/sys/kernel/seccomp/actions_avail").exists();
    SeccompSupport {
        filters_available,
        current_mode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wsl_versions_are_told_apart() {
        assert_eq!(
            detect_wsl(
                "Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com)",
                ""
            ),
            Wsl::Wsl1
        );
        assert_eq!(
            detect_wsl(
                "Linux version 5.15.90.1-microsoft-standard-WSL2 (root@x)",
                "5.15.90.1-microsoft-standard-WSL2"
            ),
            Wsl::Wsl2
        );
        assert_eq!(detect_wsl("Linux version 6.1.0 (gcc)", "6.1.0"), Wsl::None);
        assert_eq!(
            detect_wsl("Linux version 5.10 wsl1 microsoft", ""),
            Wsl::Wsl1
        );
    }

    #[test]
    fn probe_is_cached_and_sane() {
        let first = host() as *const HostProbe;
        assert_eq!(first, host() as *const HostProbe);
        assert!(!host().kernel_release.is_empty());
    }
}
