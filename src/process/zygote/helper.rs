//! Running the `codex-linux-sandbox` helper in a fork of a warm supervisor
//! instead of exec'ing this binary again, and the process title it shows.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use super::job::Job;
use crate::mode::LINUX_SANDBOX_ARG0;
use crate::process::launch::HelperKind;
use crate::process::supervisor;

/// The `codex-linux-sandbox` mode's entry point (argv in, exit code out),
/// handed down by the dispatcher so that this module does not depend on it.
pub type SandboxHelper = fn(Vec<OsString>) -> i32;

/// The sandbox helper's reuse roles (`sandbox::warm`): argv, the role, its
/// encoded request and descriptors in, exit code out.
pub type ReuseHelper = fn(Vec<OsString>, HelperKind, Vec<u8>, Vec<OwnedFd>) -> i32;

/// What `ps` shows first for the keeper of a prepared sandbox.
pub const KEEPER_TITLE: &str = "codexbox-sandbox-keeper";
/// What `ps` shows first for a standby (the next command's pid 1, made
/// ahead), and the helper that then runs the command it takes.
pub const STANDBY_TITLE: &str = "codexbox-sandbox-standby";

/// The helper entry points a supervisor may run in a fork of itself, and
/// what the zygote does once at its start so that every fork has it done
/// (caches the helpers would otherwise fill on every launch).
#[derive(Clone, Copy)]
pub struct Helpers {
    pub sandbox: SandboxHelper,
    pub reuse: ReuseHelper,
    pub warm_up: fn(),
}

/// What a forked helper runs.
pub(super) enum Entry {
    Plain(SandboxHelper),
    Reuse {
        helper: ReuseHelper,
        kind: HelperKind,
        data: Vec<u8>,
        fds: Vec<OwnedFd>,
    },
}

/// Whether the job runs this very binary as the `codex-linux-sandbox`
/// helper, as the server does for every sandboxed command.
pub(super) fn runs_own_sandbox_helper(job: &Job) -> bool {
    use std::os::unix::fs::MetadataExt;
    if job.arg0.as_deref() != Some(std::ffi::OsStr::new(LINUX_SANDBOX_ARG0)) {
        return false;
    }
    // Names `set_var` would refuse go the exec way (and fail there cleanly).
    let settable = |key: &OsString, value: &OsString| {
        !key.is_empty() && !key.as_bytes().contains(&0) && !value.as_bytes().contains(&0)
    };
    if !job.env.iter().all(|(key, value)| settable(key, value)) {
        return false;
    }
    let (Some(program), Ok(own)) = (job.argv.first(), std::fs::metadata("/proc/self/exe")) else {
        return false;
    };
    std::fs::metadata(program).is_ok_and(|m| m.dev() == own.dev() && m.ino() == own.ino())
}

/// Runs the sandbox helper in a fork of this supervisor instead of exec'ing
/// the binary again: the same code is already loaded, so the helper skips
/// the exec, the dynamic loader and the runtime's start-up (about a
/// millisecond of every sandboxed start). The child takes the steps an
/// exec'd command would (see [`run_forked_helper`]); a failed step comes
/// back on a pipe as its errno, like a failed exec.
pub(super) fn fork_sandbox_helper(job: &Job, entry: Entry) -> io::Result<libc::pid_t> {
    let invalid = || io::Error::from_raw_os_error(libc::EINVAL);
    let cwd = std::ffi::CString::new(job.cwd.as_os_str().as_bytes()).map_err(|_| invalid())?;
    let mut argv = job.argv.clone();
    if let (Some(first), Some(arg0)) = (argv.first_mut(), &job.arg0) {
        first.clone_from(arg0);
    }
    let (report_read, report_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the supervisor is single-threaded, so the child may run
    // ordinary code after the fork.
    match unsafe { libc::fork() } {
        0 => {
            drop(report_read);
            run_forked_helper(job, entry, argv, parent, &cwd, report_write)
        }
        pid if pid > 0 => {
            drop(report_write);
            let mut errno = [0u8; 4];
            match nix::unistd::read(&report_read, &mut errno) {
                Ok(4) => {
                    // SAFETY: reaping the child that failed to start.
                    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                    Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)))
                }
                _ => Ok(pid),
            }
        }
        _ => Err(io::Error::last_os_error()),
    }
}

/// The forked helper: its own session, death with the supervisor, the
/// job's cwd, default signal actions (SIGPIPE ignored, as in any freshly
/// started Rust program), only stdio open and exactly the job's
/// environment; then the `codex-linux-sandbox` mode, and `_exit` with its code.
fn run_forked_helper(
    job: &Job,
    entry: Entry,
    argv: Vec<OsString>,
    parent: libc::pid_t,
    cwd: &std::ffi::CStr,
    report: OwnedFd,
) -> ! {
    if let Err(errno) = crate::process::vfork::enter_command_session(job.tty, parent, cwd) {
        supervisor::write_records(report.as_raw_fd(), &[errno]);
        // SAFETY: _exit skips atexit handlers.
        unsafe { libc::_exit(127) }
    }
    drop(report);
    // The request's descriptors move to 3, 4, …; every other one above
    // stdio is closed (this process holds no other descriptor it needs).
    let entry = match entry {
        Entry::Reuse {
            helper,
            kind,
            data,
            fds,
        } => match renumber_from_3(fds) {
            Ok(fds) => Entry::Reuse {
                helper,
                kind,
                data,
                fds,
            },
            // SAFETY: _exit skips atexit handlers.
            Err(_) => unsafe { libc::_exit(127) },
        },
        plain => {
            // SAFETY: closing descriptors above stdio.
            unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
            plain
        }
    };
    // A keeper or a standby shows what it is (and is not taken for a
    // command's helper); a standby, made before its command is known,
    // shows the helper's flags only (the words before `--`).
    let role = match &entry {
        Entry::Reuse {
            kind: HelperKind::Prepare,
            ..
        } => Some((c"codexbox-keeper", KEEPER_TITLE, false)),
        Entry::Reuse {
            kind: HelperKind::Standby,
            ..
        } => Some((c"codexbox-standb", STANDBY_TITLE, true)),
        _ => None,
    };
    let (name, first, flags_only) = match role {
        Some((name, title, flags_only)) => (name, std::ffi::OsStr::new(title), flags_only),
        None => (
            c"codex-linux-san",
            argv.first()
                .map_or(std::ffi::OsStr::new(""), OsString::as_os_str),
            false,
        ),
    };
    // SAFETY: naming the process for `ps` and `top`.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0);
    }
    let title: Vec<&std::ffi::OsStr> = std::iter::once(first)
        .chain(
            argv.iter()
                .skip(1)
                .take_while(|arg| !flags_only || *arg != "--")
                .map(OsString::as_os_str),
        )
        .collect();
    set_process_title(&title);
    // The zygote set every disposition back to its default (SIGPIPE
    // ignored) when it started and nothing since installed a handler: only
    // the supervisor's blocked signals are left to undo.
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
    for (key, _) in std::env::vars_os() {
        std::env::remove_var(key);
    }
    for (key, value) in &job.env {
        std::env::set_var(key, value);
    }
    // A panic must not unwind into the zygote's frames this fork inherited.
    let code = std::panic::catch_unwind(move || match entry {
        Entry::Plain(helper) => helper(argv),
        Entry::Reuse {
            helper,
            kind,
            data,
            fds,
        } => helper(argv, kind, data, fds),
    })
    .unwrap_or(101);
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // SAFETY: _exit skips atexit handlers registered before the fork.
    unsafe { libc::_exit(code) }
}

/// Moves `fds` to 3, 4, … (close-on-exec) and closes every other
/// descriptor above stdio.
fn renumber_from_3(fds: Vec<OwnedFd>) -> io::Result<Vec<OwnedFd>> {
    use std::os::fd::FromRawFd;
    let count = u32::try_from(fds.len()).map_err(|_| io::Error::from_raw_os_error(libc::EMFILE))?;
    // First out of the way (above every target), then down in order.
    let mut high = Vec::with_capacity(fds.len());
    for fd in fds {
        // SAFETY: F_DUPFD_CLOEXEC duplicates a descriptor we own.
        let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3 + count) };
        if moved < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fcntl just returned this descriptor.
        high.push(unsafe { OwnedFd::from_raw_fd(moved) });
    }
    let mut out = Vec::with_capacity(high.len());
    for (target, fd) in (3..).zip(&high) {
        // SAFETY: dup3 onto a number this process is about to own; the
        // close_range below keeps it.
        if unsafe { libc::dup3(fd.as_raw_fd(), target, libc::O_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: dup3 just made `target` a descriptor we own.
        out.push(unsafe { OwnedFd::from_raw_fd(target) });
    }
    std::mem::forget(high);
    // SAFETY: closes the high copies and everything else above the kept ones.
    unsafe { libc::syscall(libc::SYS_close_range, 3 + count, u32::MAX, 0u32) };
    Ok(out)
}

/// Rewrites this process's command line as `ps` and `/proc/PID/cmdline`
/// show it, in the room its own argv strings occupy (like setproctitle(3)):
/// `args` NUL-separated, cut to fit, the rest cleared.
pub(super) fn set_process_title(args: &[&std::ffi::OsStr]) {
    let Some((start, end)) = argv_area() else {
        return;
    };
    let room = end - start;
    let mut title = Vec::with_capacity(room);
    for arg in args {
        title.extend_from_slice(arg.as_bytes());
        title.push(0);
    }
    title.truncate(room.saturating_sub(1));
    title.resize(room, 0);
    // SAFETY: [start, end) is this process's own argv area as the kernel
    // reports it: mapped and writable (the top of the initial stack), and
    // only ever read as NUL-terminated strings, which the title keeps.
    unsafe { std::ptr::copy_nonoverlapping(title.as_ptr(), start as *mut u8, room) };
}

/// `[arg_start, arg_end)` of this process (fields 48 and 49 of
/// `/proc/self/stat`), read once: the zygote's forks have it at the same
/// addresses.
fn argv_area() -> Option<(usize, usize)> {
    static AREA: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();
    *AREA.get_or_init(read_argv_area)
}

fn read_argv_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = after_name.split(' ').skip(48 - 3);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (end > start).then_some((start, end))
}
