//! The spawn zygote: a small single-threaded helper (this binary re-executed
//! with [`ZYGOTE_ARG1`]) started once per server. Forking the multi-threaded
//! server for every command is slow (page tables, then copy-on-write faults in
//! the server); forking the tiny zygote is not. The zygote keeps a supervisor
//! forked ahead of time (its own session, a child subreaper) waiting for the
//! next job; that supervisor forks and execs the command, reports its own pid and the command's pid (or the exec
//! error) on the status pipe, then the command's wait status, and reaps adopted
//! descendants until none is left (see `supervisor.rs` for the record format).
//!
//! The zygote exits after [`IDLE_EXIT`] without work, so an idle server has no
//! helper process; the next launch starts a new one.
//!
//! Jobs travel over a `SOCK_SEQPACKET` socket: one message with the encoded
//! launch and four descriptors (stdin, stdout, stderr, status pipe) as
//! `SCM_RIGHTS`. Any failure to reach the zygote makes the caller fall back to
//! forking the server directly.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use super::spawn::LaunchSpec;
use super::supervisor;
use super::vfork::{prefault, ChildStack, Launch};
use crate::arg0::LINUX_SANDBOX_ARG0;

/// argv[1] that turns the binary into the spawn zygote (stdin is its socket).
pub const ZYGOTE_ARG1: &str = "--codexbox-zygote";
/// What `ps` shows for the zygote and its waiting supervisors.
const ZYGOTE_TITLE: [&str; 2] = ["codexbox-zygote", ZYGOTE_ARG1];
/// Bytes of argv room the zygote is started with (a blank argument it
/// clears at once), so that a sandbox helper run in a fork of it can show
/// its own command line in `ps` (see [`set_process_title`]).
const TITLE_ROOM: usize = 4096;
/// Descriptors sent with each job.
const JOB_FDS: usize = 4;
/// Largest job message (argv + env); larger launches use the direct path.
const MAX_JOB_BYTES: usize = 192 * 1024;

/// The server's handle on its zygote. The zygote exits when it has been idle
/// (no job, no live supervisor) for [`IDLE_EXIT`], so an idle server has no
/// helper process; the next job starts a fresh one.
#[derive(Debug)]
pub struct Zygote {
    exe: PathBuf,
    live: Mutex<Option<Live>>,
}

#[derive(Debug)]
struct Live {
    socket: OwnedFd,
    /// Reaps the zygote when it exits.
    waiter: std::thread::JoinHandle<()>,
}

/// Supervisors kept forked and waiting for a job.
const WARM_SUPERVISORS: usize = 2;

/// How long replacing a taken supervisor waits while another is still warm:
/// the fork then runs after the launch has been answered, not beside it on
/// a busy CPU.
const REPLENISH_DELAY: std::time::Duration = std::time::Duration::from_micros(150);
/// The kernel's default timer slack (50 us), restored for supervisors.
const DEFAULT_TIMER_SLACK_NS: libc::c_ulong = 50_000;
/// The zygote's poll period while nothing is due (under one second).
const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// How long an idle zygote waits for work before exiting.
pub const IDLE_EXIT: std::time::Duration = std::time::Duration::from_millis(500);

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into the array.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl Live {
    /// Starts a zygote from the codexbox binary at `exe`. The zygote dies
    /// with the calling thread, so call it from a long-lived one.
    fn start(exe: &Path) -> io::Result<Live> {
        let (ours, theirs) = seqpacket_pair()?;
        let server_pid = std::process::id() as libc::pid_t;
        let mut cmd = Command::new(exe);
        cmd.arg0(ZYGOTE_TITLE[0])
            .args([ZYGOTE_ARG1, &" ".repeat(TITLE_ROOM)])
            .env_clear()
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null());
        // SAFETY: prctl, getppid and setsid only; async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() != server_pid {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                // Out of the server's terminal session: a Ctrl-C meant for the
                // server must not kill the zygote (and its supervisors) before
                // the server has killed every tree.
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let waiter = std::thread::Builder::new()
            .name("zygote-waiter".into())
            .spawn(move || {
                let _ = child.wait();
            })?;
        Ok(Live {
            socket: ours,
            waiter,
        })
    }
}

impl Zygote {
    /// A handle that starts the zygote from `exe` on first use.
    pub fn new(exe: &Path) -> Zygote {
        Zygote {
            exe: exe.to_owned(),
            live: Mutex::new(None),
        }
    }

    /// Sends one job. `fds` = stdin, stdout, stderr, status pipe (write end).
    /// Restarts a zygote that exited (idle) once.
    pub fn send(&self, spec: &LaunchSpec, fds: [RawFd; JOB_FDS]) -> io::Result<()> {
        let job = encode_job(spec);
        if job.len() > MAX_JOB_BYTES {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        let mut live = super::managed::lock(&self.live);
        for attempt in 0..2 {
            let socket = match live.as_ref() {
                Some(current) => current.socket.as_raw_fd(),
                None => {
                    let started = Live::start(&self.exe)?;
                    let fd = started.socket.as_raw_fd();
                    *live = Some(started);
                    fd
                }
            };
            match send_with_fds(socket, &job, &fds) {
                Ok(()) => return Ok(()),
                Err(err) if attempt == 0 && is_gone(&err) => *live = None,
                Err(err) => return Err(err),
            }
        }
        Err(io::Error::from_raw_os_error(libc::EPIPE))
    }

    /// Stops the zygote (it waits for its supervisors first) and reaps it,
    /// waiting at most `timeout`.
    pub fn shutdown(&self, timeout: std::time::Duration) {
        let live = super::managed::lock(&self.live).take();
        if let Some(Live { socket, waiter }) = live {
            drop(socket);
            let deadline = std::time::Instant::now() + timeout;
            while !waiter.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            if waiter.is_finished() {
                let _ = waiter.join();
            }
        }
    }
}

/// The zygote exited: its end of the socket is closed.
fn is_gone(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNREFUSED)
    )
}

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// `tty, cwd, arg0?, argc, argv…, envc, KEY=VALUE…` with length prefixes.
fn encode_job(spec: &LaunchSpec) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    out.push(u8::from(spec.tty.is_some()));
    push_bytes(&mut out, spec.cwd.as_os_str().as_bytes());
    match &spec.arg0 {
        Some(arg0) => {
            out.push(1);
            push_bytes(&mut out, arg0.as_bytes());
        }
        None => out.push(0),
    }
    out.extend_from_slice(&(spec.argv.len() as u32).to_le_bytes());
    for arg in &spec.argv {
        push_bytes(&mut out, arg.as_bytes());
    }
    out.extend_from_slice(&(spec.env.len() as u32).to_le_bytes());
    for (key, value) in &spec.env {
        let mut pair = key.as_bytes().to_vec();
        pair.push(b'=');
        pair.extend_from_slice(value.as_bytes());
        push_bytes(&mut out, &pair);
    }
    out
}

/// A decoded job, in the zygote.
#[derive(Debug, PartialEq, Eq)]
struct Job {
    tty: bool,
    cwd: PathBuf,
    arg0: Option<OsString>,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u32(&mut self) -> Option<usize> {
        let bytes = self.0.get(..4)?;
        let n = u32::from_le_bytes(bytes.try_into().ok()?);
        self.0 = self.0.get(4..)?;
        usize::try_from(n).ok()
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let len = self.u32()?;
        let bytes = self.0.get(..len)?.to_vec();
        self.0 = self.0.get(len..)?;
        Some(bytes)
    }
}

fn decode_job(bytes: &[u8]) -> Option<Job> {
    let mut r = Reader(bytes);
    let tty = r.byte()? == 1;
    let cwd = PathBuf::from(OsString::from_vec(r.bytes()?));
    let arg0 = match r.byte()? {
        1 => Some(OsString::from_vec(r.bytes()?)),
        _ => None,
    };
    let argc = r.u32()?;
    let mut argv = Vec::with_capacity(argc.min(4096));
    for _ in 0..argc {
        argv.push(OsString::from_vec(r.bytes()?));
    }
    let envc = r.u32()?;
    let mut env = Vec::with_capacity(envc.min(4096));
    for _ in 0..envc {
        let pair = r.bytes()?;
        let eq = pair.iter().position(|&b| b == b'=')?;
        let value = pair.get(eq + 1..)?.to_vec();
        let mut key = pair;
        key.truncate(eq);
        env.push((OsString::from_vec(key), OsString::from_vec(value)));
    }
    Some(Job {
        tty,
        cwd,
        arg0,
        argv,
        env,
    })
}

const CMSG_BUF: usize = 128;

fn send_with_fds(socket: RawFd, data: &[u8], fds: &[RawFd; JOB_FDS]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut cmsg_buf = [0u64; CMSG_BUF / 8];
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the
    // sendmsg call, and the control buffer is large and aligned enough for
    // one SCM_RIGHTS message with four descriptors (checked by CMSG_SPACE).
    unsafe {
        let space = libc::CMSG_SPACE(fd_bytes) as usize;
        if space > CMSG_BUF {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg_buf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), JOB_FDS);
        loop {
            let sent = libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL);
            if sent >= 0 {
                return Ok(());
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

/// Receives one job: `None` at EOF.
fn recv_with_fds(socket: RawFd, buf: &mut [u8]) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cmsg_buf = [0u64; CMSG_BUF / 8];
    // SAFETY: as in `send_with_fds`; the kernel fills at most the lengths we
    // pass, and received descriptors are taken into OwnedFds exactly once.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg_buf.as_mut_ptr().cast();
        msg.msg_controllen = CMSG_BUF as _;
        let n = loop {
            let n = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        };
        let mut fds = Vec::new();
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let header = libc::CMSG_LEN(0) as usize;
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(header)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        if n == 0 && fds.is_empty() {
            return Ok(None);
        }
        Ok(Some((n, fds)))
    }
}

/// The zygote's life. It keeps [`WARM_SUPERVISORS`] supervisors forked ahead
/// of time and blocked on the job socket, so a launch costs one wake-up and
/// one fork of the command. A supervisor that took a job reports its pid on a
/// pipe once the command runs, and the zygote forks a replacement. The zygote reaps supervisors
/// and, when idle for [`IDLE_EXIT`] or when the server hangs up, stops taking
/// jobs, waits for its supervisors and exits.
pub fn main(_argv: &[OsString]) -> i32 {
    set_process_title(&ZYGOTE_TITLE.map(std::ffi::OsStr::new));
    // Supervisors and commands inherit these; the command resets SIGPIPE.
    supervisor::reset_signal_dispositions(true);
    // Wake for a due replacement on time, not up to 50 us late (the
    // default slack); the supervisors reset it.
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
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
                    warm_supervisor(taken_write)
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
fn warm_supervisor(taken_write: RawFd) -> ! {
    // SAFETY: plain system calls on our own process.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::setsid();
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // Back to the kernel's default timer slack, which commands inherit.
        libc::prctl(libc::PR_SET_TIMERSLACK, DEFAULT_TIMER_SLACK_NS, 0, 0, 0);
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
    let job = buf.get(..len).and_then(decode_job);
    match (job, <[OwnedFd; JOB_FDS]>::try_from(fds)) {
        (Some(job), Ok(fds)) => supervise(job, fds, &mut stack, taken_write),
        // A malformed job: dropping its descriptors tells the server.
        _ => {
            announce_taken(taken_write);
            // SAFETY: _exit skips atexit handlers.
            unsafe { libc::_exit(0) }
        }
    }
}

/// Tells the zygote this supervisor is busy, so it forks the next warm one.
fn announce_taken(taken_write: RawFd) {
    // SAFETY: getpid has no preconditions; closing our own descriptor.
    unsafe {
        supervisor::write_records(taken_write, &[libc::getpid()]);
        libc::close(taken_write);
    }
}

/// Runs one job in a warm supervisor; announces itself busy once the command
/// runs (so forking the next warm supervisor stays off the launch's path).
fn supervise(job: Job, fds: [OwnedFd; JOB_FDS], stack: &mut ChildStack, taken_write: RawFd) -> ! {
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
    let outcome = if runs_own_sandbox_helper(&job) {
        fork_sandbox_helper(&job)
    } else {
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

/// Whether the job runs this very binary as the `codex-linux-sandbox`
/// helper, as the server does for every sandboxed command.
fn runs_own_sandbox_helper(job: &Job) -> bool {
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
fn fork_sandbox_helper(job: &Job) -> io::Result<libc::pid_t> {
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
            run_forked_helper(job, argv, parent, &cwd, report_write)
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
    argv: Vec<OsString>,
    parent: libc::pid_t,
    cwd: &std::ffi::CStr,
    report: OwnedFd,
) -> ! {
    if let Err(errno) = super::vfork::enter_command_session(job.tty, parent, cwd) {
        supervisor::write_records(report.as_raw_fd(), &[errno]);
        // SAFETY: _exit skips atexit handlers.
        unsafe { libc::_exit(127) }
    }
    drop(report);
    // SAFETY: closing descriptors above stdio (this process holds no other
    // descriptor it needs), then naming the process for `ps` and `top`.
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        libc::prctl(libc::PR_SET_NAME, c"codex-linux-san".as_ptr(), 0, 0, 0);
    }
    let title: Vec<&std::ffi::OsStr> = argv.iter().map(OsString::as_os_str).collect();
    set_process_title(&title);
    supervisor::reset_signal_dispositions(true);
    for (key, _) in std::env::vars_os() {
        std::env::remove_var(key);
    }
    for (key, value) in &job.env {
        std::env::set_var(key, value);
    }
    // A panic must not unwind into the zygote's frames this fork inherited.
    let code = std::panic::catch_unwind(|| crate::arg0::dispatch(argv)).unwrap_or(101);
    let _ = std::io::Write::flush(&mut std::io::stdout());
    // SAFETY: _exit skips atexit handlers registered before the fork.
    unsafe { libc::_exit(code) }
}

/// Rewrites this process's command line as `ps` and `/proc/PID/cmdline`
/// show it, in the room its own argv strings occupy (like setproctitle(3)):
/// `args` NUL-separated, cut to fit, the rest cleared.
fn set_process_title(args: &[&std::ffi::OsStr]) {
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
/// `/proc/self/stat`).
fn argv_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = after_name.split(' ').skip(48 - 3);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (end > start).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_round_trip() {
        let spec = LaunchSpec {
            argv: vec!["sh".into(), "-c".into(), "echo =".into()],
            arg0: Some("x".into()),
            cwd: "/tmp".into(),
            env: vec![("A".into(), "b=c".into())],
            tty: Some(Default::default()),
            pipe_stdin: false,
            sandboxed: false,
        };
        let job = decode_job(&encode_job(&spec)).unwrap();
        assert_eq!(
            job,
            Job {
                tty: true,
                cwd: "/tmp".into(),
                arg0: Some("x".into()),
                argv: spec.argv.clone(),
                env: spec.env.clone(),
            }
        );
        assert!(decode_job(&encode_job(&spec)[..5]).is_none());
    }
}
