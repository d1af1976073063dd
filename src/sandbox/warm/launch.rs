//! One command in a prepared sandbox: the helper's side ([`run`]) and the
//! command's own pid 1 (the reaper). Pid 1's mounts are `super::mounts`',
//! the command's own last steps `super::command`'s.
//!
//! The helper joins the prepared user, mount and (restricted network)
//! network namespaces and clones the command's pid 1 into new pid, mount
//! (a copy of the prepared tree), ipc, uts and cgroup namespaces. The
//! helper itself keeps nothing of them, so its exit tears nothing down on
//! the way of the exit status.
//!
//! Pid 1, with the capabilities of the prepared user namespace over the
//! copied tree, mounts what must be the command's own: a fresh `/proc`
//! with the host's kernel knobs bound read-only over it and its own pid 1
//! hidden, as a one-shot sandbox has them; a fresh tmpfs on `/dev/shm` and
//! devpts on `/dev/pts`; the command's terminal on `/dev/console` when it
//! runs on one. It then leads a new session, becomes non-dumpable, starts
//! the command (a nested user namespace that may create no further one,
//! its directory, a fresh session keyring, no capability, no_new_privs,
//! the seccomp filter, the exec), and reaps as the built-in launcher's
//! reaper does: no capability, no signal handler, only its status pipe.
//!
//! The helper waits for the status pid 1 reports the moment the command
//! ends and exits with it; pid 1 dies with the helper (parent-death
//! signal), and with it the pid namespace and whatever the command left
//! running, as in a one-shot sandbox. HUP, INT, QUIT and TERM sent to the
//! helper end the sandbox at once and the helper exits 128 + the signal,
//! as a one-shot run does when it passes them on to bubblewrap.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;

use super::command::{CommandExec, Confinement};
pub use super::error::LaunchError;
use super::mounts;
use crate::bwrap::namespaces::{self, Forked};
use crate::bwrap::proc_pid1;
use crate::process::supervisor;
use crate::process::vfork::ChildStack;
use crate::sandbox::seccomp::{SeccompMode, SeccompProgram};
use crate::sys::{confine, fds, netns};

/// The prepared sandbox's namespaces, as received.
#[derive(Debug)]
pub struct Namespaces {
    pub user: OwnedFd,
    pub mnt: OwnedFd,
    pub net: Option<OwnedFd>,
}

/// What the command runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSetup {
    pub command: Vec<OsString>,
    /// The `argv[0]` the command sees (`--command-arg0`).
    pub arg0: Option<OsString>,
    /// bwrap's `--chdir` (sets `PWD`).
    pub chdir: OsString,
    /// The command cwd as given, tried after `chdir` as the inner stage does.
    pub command_cwd: PathBuf,
    pub seccomp: SeccompMode,
    /// Standard output is a terminal: bind it as `/dev/console`.
    pub console: bool,
}

/// Says why on stderr and ends this forked process.
pub(super) fn die(err: &LaunchError) -> ! {
    eprintln!("{}", err.line());
    // SAFETY: ends this forked process without the parent's atexit work.
    unsafe { libc::_exit(1) }
}

pub(super) fn io_error(what: &'static str) -> impl FnOnce(io::Error) -> LaunchError {
    move |source| LaunchError::Io { what, source }
}

/// Where pid 1 reports the command's end for the supervisor, the moment
/// it is known: the supervisor's status pipe, written once the gate reads
/// end of file (the supervisor's own records come first on that pipe).
#[derive(Debug)]
pub struct Report {
    pub status: OwnedFd,
    pub gate: OwnedFd,
}

impl Report {
    /// Writes the wait status of a helper exiting with `code`.
    fn exited(&self, code: i32) {
        let mut byte = [0u8; 1];
        // Nothing is ever written on the gate: it only closes.
        while let Err(nix::errno::Errno::EINTR) = nix::unistd::read(&self.gate, &mut byte) {}
        supervisor::write_records(self.status.as_raw_fd(), &[(code & 0xff) << 8]);
    }
}

/// Runs `setup` in the sandbox `ns` and returns the helper's exit status:
/// the command's (128 + signal when it was killed), 128 + a signal passed
/// on, or 1 when the sandbox could not be entered (said on stderr).
pub fn run(ns: Namespaces, setup: &CommandSetup, report: Report) -> i32 {
    match start(ns, setup, report) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{}", err.line());
            1
        }
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), LaunchError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|errno| io_error("create a pipe")(errno.into()))
}

fn start(ns: Namespaces, setup: &CommandSetup, report: Report) -> Result<i32, LaunchError> {
    let program = SeccompProgram::shared(setup.seccomp)?;
    // Everything pid 1 and the command need is built here, before the
    // clone: pid 1 starts with its work done.
    let command = CommandExec::new(
        &setup.command,
        setup.arg0.as_deref(),
        &setup.chdir,
        &setup.command_cwd,
        Some(Confinement::new(host_ids(), program)),
    )
    .map_err(io_error("prepare the command"))?;
    let stack = ChildStack::new();
    in_own_namespaces(ns, report, move |pid1| {
        let mounts = pid1.set_up(setup.console);
        pid1.start_command(command, stack, mounts)
    })
}

/// The caller's uid and gid, read on the host (before any `setns`): the
/// command's nested user namespace maps them over the prepared one's 0.
pub(super) fn host_ids() -> (u32, u32) {
    (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    )
}

/// Enters the prepared sandbox `ns` and clones the command's pid 1 into
/// its own pid, mount (a copy of the prepared tree), ipc, uts and cgroup
/// namespaces, where it runs `pid1` (whose steps end pid 1).
/// In the helper, returns the status to
/// exit with once pid 1 reports it ([`wait_for`]); the signals passed on
/// are blocked from before the clone.
pub(super) fn in_own_namespaces(
    ns: Namespaces,
    report: Report,
    pid1: impl FnOnce(Pid1),
) -> Result<i32, LaunchError> {
    // Read on the host, before /proc is the sandbox's.
    let cgroup_ns = Path::new("/proc/self/ns/cgroup").exists();
    let forwarded = crate::sandbox::run::forwarded();
    let old_mask = forwarded
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
        .map_err(|errno| io_error("block signals")(errno.into()))?;
    let signals = nix::sys::signalfd::SignalFd::with_flags(
        &forwarded,
        nix::sys::signalfd::SfdFlags::SFD_CLOEXEC | nix::sys::signalfd::SfdFlags::SFD_NONBLOCK,
    )
    .map_err(|errno| io_error("create a signalfd")(errno.into()))?;
    let (status_read, status_write) = pipe()?;
    let (alive_read, alive_write) = pipe()?;
    let enter = |fd: &OwnedFd, nstype, what| {
        netns::setns(fd.as_raw_fd(), nstype).map_err(|source| LaunchError::Enter { what, source })
    };
    enter(&ns.user, libc::CLONE_NEWUSER, "user namespace")?;
    enter(&ns.mnt, libc::CLONE_NEWNS, "mount namespace")?;
    if let Some(net) = &ns.net {
        enter(net, libc::CLONE_NEWNET, "network namespace")?;
    }
    drop(ns);
    let mut flags =
        libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if cgroup_ns {
        flags |= libc::CLONE_NEWCGROUP;
    }
    match namespaces::clone_into(flags)? {
        Forked::Parent(pid) => {
            // Pid 1's part (the command, its stack) is not the helper's.
            drop((status_write, alive_read, pid1, report));
            let code = wait_for(pid, &status_read, &signals);
            yield_to_everything_else();
            // The helper exits now; pid 1 follows (parent-death signal).
            drop(alive_write);
            let _ = old_mask.thread_set_mask();
            Ok(code)
        }
        Forked::Child => {
            drop((status_read, alive_write, signals));
            pid1(Pid1 {
                alive: alive_read,
                status: status_write,
                report,
            });
            // Pid 1's steps end it; should one return, so does pid 1.
            // SAFETY: ends pid 1 without the helper's atexit work.
            unsafe { libc::_exit(1) }
        }
    }
}

/// The helper's wait: the status pid 1 reports, or pid 1's own end, or a
/// signal to pass on (which ends the sandbox at once).
fn wait_for(pid1: libc::pid_t, status: &OwnedFd, signals: &nix::sys::signalfd::SignalFd) -> i32 {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let mut polls = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(status.as_fd(), PollFlags::POLLIN),
        ];
        let _ = poll(&mut polls, PollTimeout::NONE);
        while let Ok(Some(info)) = signals.read_signal() {
            let Some(signal) = i32::try_from(info.ssi_signo)
                .ok()
                .and_then(|signo| Signal::try_from(signo).ok())
            else {
                continue;
            };
            if signal != Signal::SIGCHLD {
                // SAFETY: kill takes a pid and a signal number.
                unsafe { libc::kill(pid1, libc::SIGKILL) };
                reap(pid1);
                return 128 + signal as i32;
            }
        }
        let ready = polls[1].revents().is_some_and(|r| !r.is_empty());
        if !ready {
            continue;
        }
        let mut record = [0u8; 4];
        match nix::unistd::read(status, &mut record) {
            Ok(4) => return i32::from_ne_bytes(record),
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
            // Pid 1 ended without a status (it said why on stderr).
            _ => return proc_pid1::exit_code(reap(pid1)),
        }
    }
}

fn reap(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out-pointer for the call.
        let got = unsafe { libc::waitpid(pid, &mut status, 0) };
        if got >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return if got == pid { status } else { 1 << 8 };
        }
    }
}

/// The sandbox's pid 1 for one command, in its own namespaces.
pub(super) struct Pid1 {
    alive: OwnedFd,
    status: OwnedFd,
    /// The command's end is reported there at once, as the supervisor
    /// would report the helper's end with the same status a moment later.
    report: Report,
}

impl Pid1 {
    /// Pid 1's own steps before any command: it dies with the helper, makes
    /// the command's mounts, leads a new session and turns non-dumpable.
    /// A failure ends it, said on stderr.
    pub(super) fn set_up(&self, console: bool) -> mounts::FreshMounts {
        self.die_with_helper();
        let mounts = mounts::fresh_mounts(console).unwrap_or_else(|err| die(&err));
        if let Err(errno) = nix::unistd::setsid() {
            die(&io_error("start a session")(errno.into()));
        }
        // The reaper holds no secret, but nothing of it is the command's
        // business: not dumpable, so /proc/1 and pidfd_getfd stay shut.
        let off: libc::c_ulong = 0;
        // SAFETY: PR_SET_DUMPABLE takes integers only.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, off, off, off, off) } != 0 {
            die(&io_error("make pid 1 non-dumpable")(
                io::Error::last_os_error(),
            ));
        }
        mounts
    }

    /// Ties pid 1 to the helper: killed when it ends (and ended now if it
    /// already did).
    pub(super) fn die_with_helper(&self) {
        if let Err(err) = crate::bwrap::kill_with_parent(|| {
            crate::bwrap::has_hung_up(&self.alive).map_err(crate::bwrap::BwrapError::Poll)
        }) {
            die(&err.into());
        }
    }

    /// Starts `command` (on `stack`, with `mounts`' `/proc`) and reaps
    /// until the namespace is empty; ends pid 1 with the command's status.
    pub(super) fn start_command(
        self,
        mut command: CommandExec<'_>,
        mut stack: ChildStack,
        mounts: mounts::FreshMounts,
    ) -> ! {
        command.set_user_sysctls(&mounts.user_sysctls);
        let child = match command.spawn(&mut stack) {
            Ok(pid) => pid,
            Err((pid, line)) => {
                eprintln!("{line}");
                if pid < 0 {
                    // SAFETY: ends pid 1 before any command ran.
                    unsafe { libc::_exit(1) }
                }
                pid
            }
        };
        drop((command, mounts));
        let code = reaper(child, self.status, self.report);
        // SAFETY: ends pid 1; the namespace goes with it.
        unsafe { libc::_exit(code) }
    }
}

/// Pid 1 once the command runs: no capability, nothing open but its
/// status pipe, no signal handler (its dispositions are the helper's
/// defaults; only the signals the helper waited for were blocked), as the
/// built-in launcher's reaper; then reaping until the namespace is empty.
fn reaper(command: libc::pid_t, status: OwnedFd, report: Report) -> i32 {
    let log = crate::bwrap::log::Log::default();
    let keep = [
        status.as_raw_fd(),
        report.status.as_raw_fd(),
        report.gate.as_raw_fd(),
    ];
    if confine::clear_capability_sets().is_err() || fds::close_all_but(&keep).is_err() {
        return 1;
    }
    // Its stdio is the command's: pid 1 keeps none of it.
    for fd in 0..3 {
        fds::close(fd);
    }
    if nix::sys::signal::SigSet::empty().thread_set_mask().is_err() {
        return 1;
    }
    proc_pid1::run_reaper_reporting(command, status, log, |code| {
        report.exited(code);
        // What is left (reaping, then the namespaces' teardown as pid 1
        // exits) must not hold up the server that reports the end.
        yield_to_everything_else();
    })
}

/// Lowers this process to `SCHED_IDLE`: it runs only when nothing else
/// wants the CPU. Best effort (lowering needs no privilege).
fn yield_to_everything_else() {
    // SAFETY: a zeroed sched_param is valid for SCHED_IDLE (priority 0).
    let param: libc::sched_param = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this process; `param` lives for the call.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}
