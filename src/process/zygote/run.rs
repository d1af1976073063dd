//! The zygote process itself: its loop keeping supervisors warm, and what a
//! warm supervisor does with the one job it takes.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::helper::{
    fork_sandbox_helper, runs_own_sandbox_helper, set_process_title, Entry, Helpers,
};
use super::job::{self, Job};
use super::{
    DEFAULT_TIMER_SLACK_NS, IDLE_EXIT, JOB_FDS, MAX_JOB_BYTES, POLL_INTERVAL, REPLENISH_DELAY,
    WARM_SUPERVISORS, ZYGOTE_TITLE,
};
use crate::process::supervisor;
use crate::process::vfork::{prefault, ChildStack, Launch};
use crate::sys::scm::recv_with_fds;

/// The zygote's life. It keeps `WARM_SUPERVISORS` supervisors forked ahead
/// of time and blocked on the job socket, so a launch costs one wake-up and
/// one fork of the command. A supervisor that took a job reports its pid on a
/// pipe once the command runs, and the zygote forks a replacement. The zygote reaps supervisors
/// and, when idle for [`IDLE_EXIT`] or when the server hangs up, stops taking
/// jobs, waits for its supervisors and exits.
pub fn main(_argv: &[OsString], helpers: Helpers) -> i32 {
    set_process_title(&ZYGOTE_TITLE.map(std::ffi::OsStr::new));
    (helpers.warm_up)();
    // Supervisors and commands inherit these; the command resets SIGPIPE.
    crate::sys::signals::reset_dispositions(true);
    // Wake for a due replacement on time, not up to 50 us late (the
    // default slack); the supervisors reset it.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    // SAFETY: getpid has no preconditions.
    let zygote = unsafe { libc::getpid() };
    let mut taken = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(taken.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return 1;
    }
    let [taken_read, taken_write] = taken;
    let mut warm: std::collections::HashSet<libc::pid_t> = Default::default();
    let mut active: std::collections::HashSet<libc::pid_t> = Default::default();
    let mut idle_since = std::time::Instant::now();
    // When the last warm supervisor was taken: replacing it waits a little
    // (see REPLENISH_DELAY) unless none is left.
    let mut last_take: Option<std::time::Instant> = None;
    loop {
        loop {
            // SAFETY: waitpid with a null status pointer.
            let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            warm.remove(&pid);
            active.remove(&pid);
        }
        let mut notice = [0u8; 4];
        // SAFETY: reads into a live 4-byte buffer from our non-blocking pipe.
        while unsafe { libc::read(taken_read, notice.as_mut_ptr().cast(), 4) } == 4 {
            let pid = i32::from_ne_bytes(notice);
            if warm.remove(&pid) {
                active.insert(pid);
            }
            idle_since = std::time::Instant::now();
            last_take = Some(idle_since);
        }
        if !active.is_empty() {
            idle_since = std::time::Instant::now();
        } else if idle_since.elapsed() >= IDLE_EXIT {
            return stop_taking_jobs();
        }
        let replenish_in = last_take
            .map(|taken| REPLENISH_DELAY.saturating_sub(taken.elapsed()))
            .filter(|wait| !wait.is_zero() && !warm.is_empty());
        while replenish_in.is_none() && warm.len() < WARM_SUPERVISORS {
            // SAFETY: the zygote is single-threaded, so the child may run
            // ordinary code after fork.
            match unsafe { libc::fork() } {
                0 => {
                    // SAFETY: the child does not need the notice reader.
                    unsafe { libc::close(taken_read) };
                    warm_supervisor(zygote, taken_write, helpers)
                }
                pid if pid > 0 => {
                    warm.insert(pid);
                }
                _ => break,
            }
        }
        let mut polls = [
            // Events 0: only a hang-up of the server's end is reported.
            libc::pollfd {
                fd: 0,
                events: 0,
                revents: 0,
            },
            libc::pollfd {
                fd: taken_read,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let wait = replenish_in.unwrap_or(POLL_INTERVAL);
        let timeout = libc::timespec {
            tv_sec: 0,
            tv_nsec: wait.subsec_nanos().into(),
        };
        // SAFETY: two valid pollfds, a valid timeout, no signal mask.
        unsafe { libc::ppoll(polls.as_mut_ptr(), 2, &timeout, std::ptr::null()) };
        if polls[0].revents & (libc::POLLHUP | libc::POLLERR) != 0 {
            return stop_taking_jobs();
        }
    }
}

/// Refuses further jobs (the server's next send fails with EPIPE and starts
/// a new zygote; a job already queued is still taken), waits for every
/// supervisor, and returns the exit code.
fn stop_taking_jobs() -> i32 {
    // SAFETY: shutting down the read side of our own socket, then blocking
    // waits with a null status pointer.
    unsafe {
        libc::shutdown(0, libc::SHUT_RD);
        while libc::waitpid(-1, std::ptr::null_mut(), 0) > 0 {}
    }
    0
}

/// A supervisor forked ahead of its job: its own session, a child subreaper,
/// dying with the zygote; it waits for one job, reports that it took it, and
/// runs it.
fn warm_supervisor(zygote: libc::pid_t, taken_write: RawFd, helpers: Helpers) -> ! {
    // While idle, the parent-death signal's default action ends this
    // supervisor with the zygote; once it holds a job it blocks the signal
    // and kills its subtree on it instead.
    if supervisor::arm_parent_death(zygote)
        .and_then(|()| become_session_subreaper())
        .is_err()
    {
        // Without its guarantees this supervisor must not take a job; the
        // zygote forks another.
        // SAFETY: _exit skips atexit handlers.
        unsafe { libc::_exit(1) }
    }
    // Everything a launch touches is allocated and faulted in now, while
    // nobody waits: the job buffer's first pages, the child's stack, and
    // heap pages for the decoded job (a fork shares every page until written).
    let mut buf = vec![0u8; MAX_JOB_BYTES];
    prefault(&mut buf[..8192]);
    let mut stack = ChildStack::new();
    prefault(&mut std::hint::black_box(vec![0u8; 64 * 1024]));
    let Ok(Some((len, fds))) = recv_with_fds(0, &mut buf) else {
        // SAFETY: _exit skips atexit handlers.
        unsafe { libc::_exit(0) }
    };
    // `buf` lives on: unmapping it would cost a TLB flush on the launch path.
    // A supervisor whose zygote died meanwhile drops the job (the server
    // then starts the command another way).
    // SAFETY: getppid has no preconditions.
    if supervisor::block_reaper_signals().is_err() || unsafe { libc::getppid() } != zygote {
        // SAFETY: _exit skips atexit handlers.
        unsafe { libc::_exit(1) }
    }
    let job = buf.get(..len).and_then(job::decode);
    let mut fds = fds;
    let extra = fds.split_off(JOB_FDS.min(fds.len()));
    // Descriptors beyond the four belong to a helper request only.
    let job = job.filter(|job| job.helper.is_some() || extra.is_empty());
    match (job, <[OwnedFd; JOB_FDS]>::try_from(fds)) {
        (Some(job), Ok(fds)) => supervise(job, fds, extra, &mut stack, taken_write, helpers),
        // A malformed job: dropping its descriptors tells the server.
        _ => {
            announce_taken(taken_write);
            // SAFETY: _exit skips atexit handlers.
            unsafe { libc::_exit(0) }
        }
    }
}

/// Its own session (out of the zygote's) and a child subreaper, so every
/// descendant of its command stays in its subtree; back to the kernel's
/// default timer slack, which commands inherit.
fn become_session_subreaper() -> std::io::Result<()> {
    // SAFETY: plain system calls on our own process, integer arguments only.
    unsafe {
        if libc::setsid() < 0 || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        libc::prctl(libc::PR_SET_TIMERSLACK, DEFAULT_TIMER_SLACK_NS, 0, 0, 0);
    }
    Ok(())
}

/// Tells the zygote this supervisor is busy, so it forks the next warm one.
fn announce_taken(taken_write: RawFd) {
    // SAFETY: getpid has no preconditions; closing our own descriptor.
    unsafe {
        supervisor::write_records(taken_write, &[libc::getpid()]);
        libc::close(taken_write);
    }
}

/// A reuse helper's first descriptors: the status pipe, and the read end
/// of a gate whose write end (returned last) the supervisor closes once
/// its own records are on the status pipe.
fn reuse_pipes(status: &OwnedFd) -> std::io::Result<(OwnedFd, OwnedFd, OwnedFd)> {
    let status = status.try_clone()?;
    let (gate, written) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    Ok((status, gate, written))
}

/// Runs one job in a warm supervisor; announces itself busy once the command
/// runs (so forking the next warm supervisor stays off the launch's path).
fn supervise(
    job: Job,
    fds: [OwnedFd; JOB_FDS],
    extra: Vec<OwnedFd>,
    stack: &mut ChildStack,
    taken_write: RawFd,
    helpers: Helpers,
) -> ! {
    let [stdin, stdout, stderr, status] = fds;
    let status_fd = status.as_raw_fd();
    // SAFETY: plain system calls on our own descriptors; dup2 onto 0 also
    // closes the job socket in this process.
    unsafe {
        libc::dup2(stdin.as_raw_fd(), 0);
        libc::dup2(stdout.as_raw_fd(), 1);
        libc::dup2(stderr.as_raw_fd(), 2);
    }
    drop((stdin, stdout, stderr));
    // Closed once the records below are written: a reused sandbox's pid 1
    // reports the command's end on the status pipe itself, never before
    // them.
    let mut records_written: Option<OwnedFd> = None;
    let outcome = if runs_own_sandbox_helper(&job) {
        match &job.helper {
            // The status pipe and the gate first (see `sandbox::warm`).
            Some((kind, data)) => match reuse_pipes(&status) {
                Ok((status, gate, written)) => {
                    records_written = Some(written);
                    let fds = [status, gate].into_iter().chain(extra).collect();
                    let entry = Entry::Reuse {
                        helper: helpers.reuse,
                        kind: *kind,
                        data: data.clone(),
                        fds,
                    };
                    fork_sandbox_helper(&job, entry)
                }
                Err(err) => Err(err),
            },
            None => fork_sandbox_helper(&job, Entry::Plain(helpers.sandbox)),
        }
    } else {
        // A reuse request only means something to the sandbox helper.
        drop(extra);
        Launch::new(&job.argv, job.arg0.as_deref(), &job.env, &job.cwd, job.tty)
            .and_then(|mut launch| launch.spawn(stack))
    };
    // SAFETY: getpid has no preconditions.
    let supervisor_pid = unsafe { libc::getpid() };
    // Both records in one write: the server wakes once.
    let command_record = match outcome {
        Ok(pid) => pid,
        Err(ref err) => -err.raw_os_error().unwrap_or(libc::EIO),
    };
    supervisor::write_records(status_fd, &[supervisor_pid, command_record]);
    drop(records_written);
    announce_taken(taken_write);
    match outcome {
        Ok(pid) => {
            // The supervisor holds none of the command's stdio.
            // SAFETY: closing our own descriptors.
            unsafe {
                for fd in 0..3 {
                    libc::close(fd);
                }
            }
            supervisor::reap_forever(pid, status_fd)
        }
        // SAFETY: _exit skips atexit handlers.
        Err(_) => unsafe { libc::_exit(0) },
    }
}
