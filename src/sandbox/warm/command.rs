//! The command's own process in a reused sandbox, started by the
//! sandbox's pid 1 with `clone(CLONE_VM | CLONE_VFORK)`: no copy of pid 1's
//! memory; pid 1 waits until the command has exec'd or failed.
//!
//! Its steps, system calls only on data prepared before the clone (as the
//! one-shot launcher and inner stage take them): die with pid 1; a nested
//! user namespace with the one-shot launcher's mapping, in which no user
//! namespace can be made (`max_user_namespaces` 0, then checked); the
//! working directory (`--chdir`, then the command cwd as given when it
//! exists, as the inner stage does); an empty signal mask (dispositions are
//! pid 1's: the defaults, with SIGPIPE ignored as the inner stage leaves
//! it); nothing inherited but stdio; a fresh session keyring,
//! no_new_privs, no capability; the seccomp filter; for a standby's
//! command, the server's go-ahead (its warnings then written on stderr);
//! the exec, searched along the command's `PATH` as `execvp` searches.
//! A failed step leaves
//! its errno for pid 1, which says why in the words of the one-shot
//! sandbox's part that would have failed.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

use crate::process::vfork::{ChildStack, Launch};
use crate::sandbox::cli::PREFIX;
use crate::sandbox::inner::InnerError;
use crate::sandbox::seccomp::SeccompProgram;
use crate::sys::confine;

/// The first byte of the go-ahead (`super::request::go_ahead`).
pub const GO_AHEAD: u8 = 1;

/// Largest go-ahead a standby's command reads: the warnings beyond are
/// cut (the server sends none this long).
pub const MAX_GO_AHEAD_BYTES: usize = 16 * 1024;

/// The step that failed, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Step {
    None = 0,
    DieWithParent,
    UserNamespace,
    IdMaps,
    CloseUserNamespaces,
    UsernsStillAllowed,
    Chdir,
    Keyring,
    Capabilities,
    Seccomp,
    CalledOff,
    Exec,
}

impl Step {
    fn from_code(code: u8) -> Step {
        [
            Step::None,
            Step::DieWithParent,
            Step::UserNamespace,
            Step::IdMaps,
            Step::CloseUserNamespaces,
            Step::UsernsStillAllowed,
            Step::Chdir,
            Step::Keyring,
            Step::Capabilities,
            Step::Seccomp,
            Step::CalledOff,
            Step::Exec,
        ]
        .get(usize::from(code))
        .copied()
        .unwrap_or(Step::None)
    }

    fn what(self) -> &'static str {
        match self {
            Step::None => "start the command",
            Step::DieWithParent => "tie the command to pid 1",
            Step::UserNamespace => "create the command's user namespace",
            Step::IdMaps => "map the command's ids",
            Step::CloseUserNamespaces => "limit user namespaces",
            Step::UsernsStillAllowed => "disable user namespaces",
            Step::Chdir => "change directory",
            Step::Keyring => "join a fresh session keyring",
            Step::Capabilities => "drop every capability",
            Step::Seccomp => "install the seccomp filter",
            Step::CalledOff => "go ahead: the server called the command off",
            Step::Exec => "execute the command",
        }
    }
}

/// Everything the command's steps use, built before the clone.
pub struct CommandExec<'a> {
    launch: Launch,
    program_name: OsString,
    chdir: CString,
    command_cwd: CString,
    /// The steps that confine it (`None`: its pid 1 took them already,
    /// and the command inherits them).
    confinement: Option<Confinement<'a>>,
    /// A standby's command: where its go-ahead comes, and room for it.
    hold: Option<Hold>,
    step: AtomicU8,
    errno: AtomicI32,
}

/// What confines a command, as the one-shot launcher and inner stage do:
/// a nested user namespace with the caller's ids `ids` mapped over the
/// prepared namespace's 0, in which no user namespace can be made; a
/// fresh session keyring, no_new_privs, no capability; the seccomp filter.
pub struct Confinement<'a> {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Where the process's `uid_map` and `gid_map` are.
    maps_at: (RawFd, &'static std::ffi::CStr, &'static std::ffi::CStr),
    user_sysctls: RawFd,
    last_cap: u32,
    seccomp: &'a SeccompProgram,
}

/// Where a standby's command waits for its go-ahead.
struct Hold {
    socket: RawFd,
    room: Vec<u8>,
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

impl<'a> Confinement<'a> {
    pub fn new(ids: (u32, u32), seccomp: &'a SeccompProgram) -> Confinement<'a> {
        Confinement {
            uid_map: format!("{} 0 1\n", ids.0).into_bytes(),
            gid_map: format!("{} 0 1\n", ids.1).into_bytes(),
            maps_at: (libc::AT_FDCWD, c"/proc/self/uid_map", c"/proc/self/gid_map"),
            user_sysctls: -1,
            last_cap: confine::last_cap(),
            seccomp,
        }
    }

    /// Where user namespaces are limited: `sys/user` of the fresh `/proc`
    /// (see `super::mounts`), open while the steps run.
    pub fn set_user_sysctls(&mut self, dir: &OwnedFd) {
        self.user_sysctls = dir.as_raw_fd();
    }

    /// Takes every step on the calling process: a standby's pid 1, once it
    /// is done with its mounts, so that its command inherits them (see
    /// `super::standby`); `own_proc` is its directory in the fresh
    /// `/proc`, where `/proc/self` is hidden. The stderr line when one
    /// failed.
    pub fn apply_here(&mut self, own_proc: &OwnedFd) -> Result<(), String> {
        self.maps_at = (own_proc.as_raw_fd(), c"uid_map", c"gid_map");
        self.enter_user_namespace()
            .and_then(|()| self.confine())
            .map_err(|(step, errno)| failure_line(step, errno, "".as_ref(), c""))
    }

    /// The nested user namespace. Async-signal-safe.
    fn enter_user_namespace(&self) -> Result<(), (Step, libc::c_int)> {
        let check = |rc: libc::c_long| if rc < 0 { Err(errno()) } else { Ok(()) };
        // SAFETY: plain system calls on data prepared before any clone,
        // with buffers that outlive them.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWUSER).into())
                .map_err(|errno| (Step::UserNamespace, errno))?;
            let (dir, uid_map, gid_map) = self.maps_at;
            for (path, map) in [(uid_map, &self.uid_map), (gid_map, &self.gid_map)] {
                write_file(dir, path, map).map_err(|errno| (Step::IdMaps, errno))?;
            }
            write_file(self.user_sysctls, c"max_user_namespaces", b"0")
                .map_err(|errno| (Step::CloseUserNamespaces, errno))?;
            if libc::unshare(libc::CLONE_NEWUSER) == 0 {
                return Err((Step::UsernsStillAllowed, libc::EPERM));
            }
        }
        Ok(())
    }

    /// The inner stage's confinement and the filter. Async-signal-safe.
    fn confine(&self) -> Result<(), (Step, libc::c_int)> {
        let errno_of = |err: confine::ConfineError| {
            use std::error::Error;
            err.source()
                .and_then(|source| source.downcast_ref::<io::Error>())
                .and_then(io::Error::raw_os_error)
                .unwrap_or(libc::EPERM)
        };
        confine::join_fresh_session_keyring().map_err(|e| (Step::Keyring, errno_of(e)))?;
        confine::set_no_new_privs().map_err(|e| (Step::Capabilities, errno_of(e)))?;
        confine::drop_capabilities_through(self.last_cap)
            .map_err(|e| (Step::Capabilities, errno_of(e)))?;
        self.seccomp
            .install()
            .map_err(|_| (Step::Seccomp, libc::EPERM))?;
        Ok(())
    }
}

impl<'a> CommandExec<'a> {
    /// `command` (seeing `arg0` as its argv[0] when given) with this
    /// process's environment and `PWD` = `chdir`, confined by
    /// `confinement` (`None`: by its pid 1 already).
    pub fn new(
        command: &[OsString],
        arg0: Option<&std::ffi::OsStr>,
        chdir: &std::ffi::OsStr,
        command_cwd: &Path,
        confinement: Option<Confinement<'a>>,
    ) -> io::Result<CommandExec<'a>> {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(key, _)| key != "PWD")
            .collect();
        env.push(("PWD".into(), chdir.to_owned()));
        let launch = Launch::new(command, arg0, &env, Path::new(chdir), false)?;
        Ok(CommandExec {
            launch,
            program_name: command.first().cloned().unwrap_or_default(),
            chdir: cstring(chdir.as_bytes())?,
            command_cwd: cstring(command_cwd.as_os_str().as_bytes())?,
            confinement,
            hold: None,
            step: AtomicU8::new(Step::None as u8),
            errno: AtomicI32::new(0),
        })
    }

    /// Where the command limits its user namespaces (see
    /// [`Confinement::set_user_sysctls`]), open until the spawn returns.
    pub fn set_user_sysctls(&mut self, dir: &OwnedFd) {
        if let Some(confinement) = &mut self.confinement {
            confinement.set_user_sysctls(dir);
        }
    }

    /// Makes the command wait, its last step before the exec, for the
    /// server's go-ahead on `socket` (a standby's control socket, open
    /// until the spawn returns; see `super::request::go_ahead`): it writes
    /// the warnings that come with it on its stderr and execs, or exits
    /// without exec'ing on anything else, the socket's end included.
    pub fn hold_for_go_ahead(&mut self, socket: RawFd) {
        let mut room = vec![0u8; MAX_GO_AHEAD_BYTES];
        crate::process::vfork::prefault(&mut room);
        self.hold = Some(Hold { socket, room });
    }

    /// Starts the command (see the module docs). `Ok(pid)` once it has
    /// exec'd; `Err((pid, line))` when a step failed: the child exits 1
    /// (reap it) and `line` says why.
    pub fn spawn(&mut self, stack: &mut ChildStack) -> Result<libc::pid_t, (libc::pid_t, String)> {
        // SAFETY: plain data, filled by `clone_vfork` before the clone.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `child_main` only makes system calls on `self`, which
        // outlives the call; `old` is a local of this frame.
        let pid = unsafe { stack.clone_vfork(child_main, ptr::from_mut(self).cast(), &mut old) }
            .map_err(|err| (-1, format!("{PREFIX}: cannot start the command: {err}")))?;
        match Step::from_code(self.step.load(Ordering::SeqCst)) {
            Step::None => Ok(pid),
            step => Err((pid, self.failure(step))),
        }
    }

    /// The stderr line for a failed step, in the one-shot sandbox's words.
    fn failure(&self, step: Step) -> String {
        let errno = self.errno.load(Ordering::SeqCst);
        failure_line(step, errno, &self.program_name, &self.chdir)
    }
}

/// The stderr line for `step` failed with `errno`, in the one-shot
/// sandbox's words (`program` and `chdir` name the command's).
fn failure_line(
    step: Step,
    errno: libc::c_int,
    program: &std::ffi::OsStr,
    chdir: &std::ffi::CStr,
) -> String {
    let source = io::Error::from_raw_os_error(errno);
    match step {
        Step::Exec => format!(
            "{PREFIX}: {}",
            InnerError::Exec {
                program: program.to_string_lossy().into_owned(),
                source: nix::errno::Errno::from_raw(errno),
            }
        ),
        Step::Chdir => format!(
            "bwrap: {}",
            crate::bwrap::BwrapError::Chdir {
                path: std::ffi::OsStr::from_bytes(chdir.to_bytes()).to_owned(),
                source,
            }
        ),
        Step::UsernsStillAllowed => {
            format!("{PREFIX}: creation of new user namespaces was not disabled as requested")
        }
        other => format!(
            "{PREFIX}: error applying Linux sandbox restrictions: cannot {}: {}",
            other.what(),
            crate::sys::errno_text(&source)
        ),
    }
}

fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// The child's side: system calls on prepared data only.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `CommandExec` the suspended parent passed, valid
    // and not touched by anyone else until we exec or exit.
    let exec = unsafe { &mut *arg.cast::<CommandExec<'_>>() };
    let (step, errno) = steps(exec);
    exec.errno.store(errno, Ordering::SeqCst);
    exec.step.store(step as u8, Ordering::SeqCst);
    // SAFETY: _exit leaves without running any user-space cleanup.
    unsafe { libc::_exit(1) }
}

/// Runs the steps; returns the failed one and its errno (the exec only
/// returns on failure).
fn steps(exec: &mut CommandExec<'_>) -> (Step, libc::c_int) {
    let check = |rc: libc::c_long| if rc < 0 { Err(errno()) } else { Ok(()) };
    // SAFETY: each call is a plain system call on data prepared before the
    // clone, with buffers that outlive it.
    let die = unsafe {
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0).into()).and_then(|()| {
            if libc::getppid() == 1 {
                Ok(())
            } else {
                Err(libc::ESRCH)
            }
        })
    };
    if let Err(errno) = die {
        return (Step::DieWithParent, errno);
    }
    if let Some(confinement) = &exec.confinement {
        if let Err(failed) = confinement.enter_user_namespace() {
            return failed;
        }
    }
    // SAFETY: as above.
    unsafe {
        if let Err(errno) = check(libc::chdir(exec.chdir.as_ptr()).into()) {
            return (Step::Chdir, errno);
        }
        // As the inner stage: the cwd as given, when it exists inside.
        libc::chdir(exec.command_cwd.as_ptr());
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, ptr::null_mut());
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
    if let Some(confinement) = &exec.confinement {
        if let Err(failed) = confinement.confine() {
            return failed;
        }
    }
    if let Some(hold) = &mut exec.hold {
        if let Err(errno) = wait_for_go_ahead(hold) {
            return (Step::CalledOff, errno);
        }
    }
    (Step::Exec, exec.launch.exec_prepared())
}

/// Reads the go-ahead (one message) and writes its warnings on stderr.
/// Async-signal-safe.
fn wait_for_go_ahead(hold: &mut Hold) -> Result<(), libc::c_int> {
    let read = loop {
        // SAFETY: reading into our own buffer of its length.
        let n = unsafe { libc::read(hold.socket, hold.room.as_mut_ptr().cast(), hold.room.len()) };
        if n >= 0 || errno() != libc::EINTR {
            break n;
        }
    };
    let said = usize::try_from(read)
        .ok()
        .and_then(|n| hold.room.get(..n))
        .unwrap_or_default();
    let Some((&GO_AHEAD, mut warnings)) = said.split_first() else {
        return Err(if read < 0 { errno() } else { libc::ECANCELED });
    };
    while !warnings.is_empty() {
        // SAFETY: writing from a live buffer of its length.
        let n = unsafe { libc::write(2, warnings.as_ptr().cast(), warnings.len()) };
        match usize::try_from(n) {
            Ok(written) if written > 0 => warnings = warnings.get(written..).unwrap_or_default(),
            _ if n < 0 && errno() == libc::EINTR => {}
            // Stderr gone: the warnings have nowhere to go.
            _ => break,
        }
    }
    Ok(())
}

/// Writes `data` to `path` (relative to `dir`) in one write.
/// Async-signal-safe.
fn write_file(dir: RawFd, path: &std::ffi::CStr, data: &[u8]) -> Result<(), libc::c_int> {
    // SAFETY: the path is NUL-terminated; the fd is closed below.
    let fd = unsafe { libc::openat(dir, path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: `data` is a live buffer of its length; then closing our fd.
    let written = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    let failed = errno();
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(fd) };
    match usize::try_from(written) {
        Ok(n) if n == data.len() => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(_) => Err(failed),
    }
}
