//! The per-process supervisor. The server forks a child (std's `pre_exec`
//! runs in it); that child becomes a tiny supervisor that never execs: it dies
//! with the server, becomes a child subreaper, forks the real command (which
//! returns from `pre_exec` and execs), closes every descriptor but its status
//! pipe, reports the command's pid and then its wait status on that pipe, and
//! reaps adopted orphans until none is left. Every descendant of the command,
//! even one that called setsid or double-forked, therefore stays in the
//! supervisor's subtree, which `kill::kill_tree` can find and kill.
//!
//! So that a long-lived supervisor does not pin a copy-on-write snapshot of
//! the server's memory, it re-executes the codexbox binary in its reaper role
//! ([`SUPERVISOR_ARG1`], handled by [`main`] before any other start-up work)
//! right after forking the command; if that exec fails it reaps in place.
//!
//! Everything before that exec runs between fork and exec in a multi-threaded
//! program: only async-signal-safe system calls, no allocation, no locks, no
//! logging.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::RawFd;

/// `argv[1]` that turns the binary into a supervisor's reaper loop:
/// `<name> --codexbox-supervise <status fd or -1> <command pid>`.
pub const SUPERVISOR_ARG1: &str = "--codexbox-supervise";

/// Bytes of one record on the status pipe (a native-endian `i32`).
pub const RECORD_LEN: usize = 4;

/// The reaper program: the path and argv the supervisor execs, built before
/// the fork so the child does not allocate. `{pid}` slots are filled in
/// place in a fixed-width buffer.
#[derive(Debug)]
pub struct ReaperExec {
    path: CString,
    name: CString,
    flag: CString,
    /// Decimal slots filled in the child: the status descriptor (or -1) and
    /// the command's pid.
    fd: std::cell::UnsafeCell<[u8; 12]>,
    pid: std::cell::UnsafeCell<[u8; 12]>,
}

// SAFETY: `fd` and `pid` are only written in the forked child, which has one thread.
unsafe impl Sync for ReaperExec {}

impl ReaperExec {
    /// The reaper command: the codexbox binary at `exe`.
    pub fn new(exe: &std::path::Path) -> Option<Self> {
        use std::os::unix::ffi::OsStrExt;
        Some(Self {
            path: CString::new(exe.as_os_str().as_bytes()).ok()?,
            name: CString::new("codexbox-supervisor").ok()?,
            flag: CString::new(SUPERVISOR_ARG1).ok()?,
            fd: std::cell::UnsafeCell::new([0; 12]),
            pid: std::cell::UnsafeCell::new([0; 12]),
        })
    }
}

/// What the forked child needs to know, captured before the fork.
#[derive(Debug, Clone, Copy)]
pub struct SupervisorConfig<'a> {
    /// How to re-exec as the reaper (`None`: reap in place).
    pub reaper: Option<&'a ReaperExec>,
    /// The write end of the status pipe.
    pub status_fd: RawFd,
    /// The server's pid, to detect a server that died before `PR_SET_PDEATHSIG`.
    pub server_pid: libc::pid_t,
    /// Make the command's stdin (a PTY slave) its controlling terminal.
    pub controlling_tty: bool,
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Runs in `pre_exec`. Returns `Ok` in the command process (which then
/// execs); never returns in the supervisor.
///
/// # Safety
/// Must only be called in a freshly forked child, as a `pre_exec` hook.
pub unsafe fn enter(config: SupervisorConfig<'_>) -> io::Result<()> {
    block_reaper_signals()?;
    arm_parent_death(config.server_pid)?;
    // SAFETY: setsid has no preconditions; a new session detaches the
    // supervisor from the server's terminal and process group.
    check(unsafe { libc::setsid() })?;
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) })?;
    // SAFETY: getpid has no preconditions.
    let supervisor = unsafe { libc::getpid() };
    // SAFETY: fork in a single-threaded child; both sides only make
    // async-signal-safe calls afterwards.
    let pid = check(unsafe { libc::fork() })?;
    if pid == 0 {
        return prepare_command(config, supervisor);
    }
    // SAFETY: called once, in the supervisor, with the command's pid.
    unsafe { supervise(pid, config) }
}

/// The signal a supervisor gets when its parent dies (the server, or the
/// zygote, which dies with the server). It then kills its whole subtree
/// ([`super::subtree`]) instead of leaving orphans behind; sent by hand it
/// does the same.
pub const PARENT_DEATH_SIGNAL: libc::c_int = libc::SIGTERM;

/// The signals the reaper waits for with `sigwaitinfo`: SIGCHLD and
/// [`PARENT_DEATH_SIGNAL`]. Async-signal-safe.
fn reaper_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, initialized by sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: filling a local set with valid signal numbers.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, PARENT_DEATH_SIGNAL);
    }
    set
}

/// Blocks the `reaper_signals`, so they wait, pending, for the reaper
/// loop: no handler, no race, and a blocked signal survives the reaper's
/// exec. Async-signal-safe.
pub fn block_reaper_signals() -> io::Result<()> {
    let set = reaper_signals();
    // SAFETY: adding a set built above to our own mask.
    check(unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) })?;
    Ok(())
}

/// Asks for [`PARENT_DEATH_SIGNAL`] when the parent dies and checks that
/// the parent is still `parent` (one that died before the request would
/// never signal). The request survives the reaper's exec. Async-signal-safe.
pub fn arm_parent_death(parent: libc::pid_t) -> io::Result<()> {
    crate::sys::confine::set_parent_death_signal(PARENT_DEATH_SIGNAL)?;
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// Reports `command`'s wait status on `status_fd`, reaps every descendant
/// and exits (for the zygote's supervisors).
pub fn reap_forever(command: libc::pid_t, status_fd: RawFd) -> ! {
    reap(command, status_fd)
}

/// The command's side: the steps every command's first process takes
/// ([`super::vfork::enter_command_session`]; std already changed to its
/// cwd), default signal actions, and no inherited descriptor beyond stdio
/// across exec.
fn prepare_command(config: SupervisorConfig<'_>, supervisor: libc::pid_t) -> io::Result<()> {
    super::vfork::enter_command_session(config.controlling_tty, supervisor, c".")
        .map_err(io::Error::from_raw_os_error)?;
    crate::sys::signals::reset_dispositions(false);
    mark_cloexec_from(3);
    Ok(())
}

/// Marks every descriptor >= `first` close-on-exec (std's own exec-error pipe
/// must stay open until exec, so they are not closed here).
fn mark_cloexec_from(first: u32) {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only changes descriptor flags.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if ret == 0 {
        return;
    }
    for fd in first..fd_limit() {
        // SAFETY: F_SETFD on a possibly closed descriptor fails harmlessly.
        unsafe { libc::fcntl(fd as RawFd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// Closes every descriptor except `keep`.
fn close_all_but(keep: RawFd) {
    let keep = keep.max(0) as u32;
    for (lo, hi) in [(0, keep.checked_sub(1)), (keep + 1, Some(u32::MAX))] {
        let Some(hi) = hi else { continue };
        // SAFETY: closing descriptors this process owns; nothing else uses them.
        let ret = unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) };
        if ret != 0 {
            for fd in lo..hi.min(fd_limit()) {
                // SAFETY: as above; EBADF on unused numbers is harmless.
                unsafe { libc::close(fd as RawFd) };
            }
        }
    }
}

fn fd_limit() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    limit.rlim_cur.min(65_536) as u32
}

fn write_record(fd: RawFd, value: i32) {
    write_records(fd, &[value]);
}

/// Writes up to two records in one write (atomic on a pipe), retrying on
/// EINTR and ignoring a vanished reader: the server wakes once for both.
pub fn write_records(fd: RawFd, values: &[i32]) {
    let mut bytes = [0u8; 2 * RECORD_LEN];
    let mut len = 0;
    for (slot, value) in bytes.chunks_exact_mut(RECORD_LEN).zip(values) {
        slot.copy_from_slice(&value.to_ne_bytes());
        len += RECORD_LEN;
    }
    loop {
        // SAFETY: writes `len` bytes from a live stack buffer; a pipe write
        // of less than PIPE_BUF bytes is atomic.
        let ret = unsafe { libc::write(fd, bytes.as_ptr().cast(), len) };
        if ret >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// The supervisor's life: report the pid, shed every descriptor, re-exec as
/// the reaper (or reap in place).
///
/// # Safety
/// Only in the forked supervisor.
unsafe fn supervise(command: libc::pid_t, config: SupervisorConfig<'_>) -> ! {
    // SAFETY: ignoring SIGPIPE so a vanished reader cannot kill the supervisor
    // before it reaped the subtree.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let mut status_fd = config.status_fd;
    write_record(status_fd, command);
    close_all_but(status_fd);
    // Most commands are short: wait for them in place first, so only the
    // long-lived ones pay for the reaper exec.
    wait_briefly(command);
    if !collect_exited(command, &mut status_fd) {
        // SAFETY: _exit is async-signal-safe and skips atexit handlers.
        unsafe { libc::_exit(0) }
    }
    if let Some(reaper) = config.reaper {
        // SAFETY: the buffers are only touched here, in the single-threaded child.
        let (pid, fd) = unsafe { (&mut *reaper.pid.get(), &mut *reaper.fd.get()) };
        format_decimal(command, pid);
        format_decimal(status_fd, fd);
        if status_fd >= 0 {
            // The reaper inherits the status descriptor across exec.
            // SAFETY: clearing FD_CLOEXEC on our own descriptor.
            unsafe { libc::fcntl(status_fd, libc::F_SETFD, 0) };
        }
        let argv = [
            reaper.name.as_ptr(),
            reaper.flag.as_ptr(),
            fd.as_ptr().cast(),
            pid.as_ptr().cast(),
            std::ptr::null(),
        ];
        let envp = [std::ptr::null()];
        // SAFETY: every pointer is a NUL-terminated string that outlives the
        // call; both arrays are NULL-terminated. Returns only on failure.
        unsafe { libc::execve(reaper.path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    }
    reap(command, status_fd)
}

/// How long the supervisor waits in place before re-executing as the reaper.
const IN_PLACE_WAIT_MS: libc::c_int = 50;

/// Waits until `command` exits or [`IN_PLACE_WAIT_MS`] pass.
fn wait_briefly(command: libc::pid_t) {
    // SAFETY: pidfd_open takes a pid and flags, no pointers.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, command, 0) };
    if pidfd < 0 {
        return;
    }
    let mut poll = libc::pollfd {
        fd: pidfd as RawFd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; then closing our own descriptor.
    unsafe {
        libc::poll(&mut poll, 1, IN_PLACE_WAIT_MS);
        libc::close(pidfd as RawFd);
    }
}

/// Writes the command's wait status and closes the pipe (EOF tells the
/// server the status is complete). Returns -1: nothing left to report.
fn report(status_fd: RawFd, status: libc::c_int) -> RawFd {
    if status_fd >= 0 {
        write_record(status_fd, status);
        // SAFETY: closing our own descriptor; then lowering our own priority
        // so the rest of our life (reaping, exit) yields the CPU to the
        // server delivering the exit.
        unsafe {
            libc::close(status_fd);
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
        }
    }
    -1
}

/// Writes `value` as NUL-terminated decimal into `buf` without allocating.
fn format_decimal(value: i32, buf: &mut [u8; 12]) {
    if value < 0 {
        *buf = [b'-', b'1', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        return;
    }
    let mut digits = [0u8; 11];
    let mut n = value.unsigned_abs();
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        n /= 10;
        len += 1;
        if n == 0 || len == digits.len() {
            break;
        }
    }
    for (i, slot) in buf.iter_mut().enumerate() {
        *slot = if i < len { digits[len - 1 - i] } else { 0 };
    }
}

/// Reaps every child that has exited, reporting the command's wait status
/// when it is among them (and `*status_fd` is not -1: already reported).
/// Returns whether children remain.
fn collect_exited(command: libc::pid_t, status_fd: &mut RawFd) -> bool {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes the status into a live stack variable.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid == command {
            *status_fd = report(*status_fd, status);
        } else if pid == 0 {
            return true;
        } else if pid < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
    }
}

/// Reports the command's wait status (unless `status_fd` is -1: already
/// reported), then reaps every adopted descendant until none is left, and exits.
fn reap(command: libc::pid_t, mut status_fd: RawFd) -> ! {
    let waited = reaper_signals();
    // Already blocked unless the reaper was started by hand.
    let _ = block_reaper_signals();
    loop {
        if !collect_exited(command, &mut status_fd) {
            // SAFETY: _exit is async-signal-safe and skips atexit handlers.
            unsafe { libc::_exit(0) }
        }
        // SAFETY: waits for one of the blocked signals of a live set.
        let signo = unsafe { libc::sigwaitinfo(&waited, std::ptr::null_mut()) };
        if signo == PARENT_DEATH_SIGNAL {
            super::subtree::kill_all_and_exit();
        }
    }
}

/// The reaper role after re-exec: `argv = [name, SUPERVISOR_ARG1, fd, pid]`.
pub fn main(argv: &[OsString]) -> i32 {
    let parse = |i: usize| -> Option<i32> { argv.get(i)?.to_str()?.parse().ok() };
    let (Some(status_fd), Some(command)) = (parse(2), parse(3)) else {
        eprintln!("codexbox: {SUPERVISOR_ARG1} expects <status fd> <command pid>");
        return 2;
    };
    // SAFETY: only sets a signal disposition; ignoring SIGPIPE keeps a
    // vanished reader from killing the reaper.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    reap(command, status_fd)
}

/// The NUL-terminated contents of a fixed buffer, for tests.
#[cfg(test)]
fn as_cstr(buf: &[u8; 12]) -> &std::ffi::CStr {
    std::ffi::CStr::from_bytes_until_nul(buf).unwrap_or_default()
}

/// `(exit code, signal number)` from a raw wait status: 128+signal when killed.
pub fn decode_wait_status(status: i32) -> (i32, Option<i32>) {
    if libc::WIFEXITED(status) {
        (libc::WEXITSTATUS(status), None)
    } else if libc::WIFSIGNALED(status) {
        let signo = libc::WTERMSIG(status);
        (128 + signo, Some(signo))
    } else {
        (-1, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_format_without_allocation() {
        let mut buf = [0xffu8; 12];
        format_decimal(4_194_304, &mut buf);
        assert_eq!(as_cstr(&buf).to_str().unwrap(), "4194304");
        format_decimal(0, &mut buf);
        assert_eq!(as_cstr(&buf).to_str().unwrap(), "0");
        format_decimal(-1, &mut buf);
        assert_eq!(as_cstr(&buf).to_str().unwrap(), "-1");
    }

    #[test]
    fn wait_statuses_decode_to_exit_codes() {
        assert_eq!(decode_wait_status(7 << 8), (7, None));
        assert_eq!(decode_wait_status(9), (137, Some(9)));
        assert_eq!(decode_wait_status(2), (130, Some(2)));
    }
}
