//! Starting a command from a supervisor without copying its address space.
//!
//! `clone(CLONE_VM | CLONE_VFORK)` runs a child on a stack of its own that
//! shares the supervisor's memory; the supervisor is suspended until the
//! child has exec'd or exited. The child only makes raw system calls on data
//! prepared beforehand, and leaves the errno of a failed step in shared
//! memory, so the supervisor learns the outcome without a pipe, a fork's
//! page-table copy or its copy-on-write faults. This is how `posix_spawn`
//! works, with the steps it lacks: the parent-death signal and the PTY as
//! controlling terminal.
//!
//! The program is searched like `execvp` with the command's own `PATH`
//! (`/bin:/usr/bin` when it has none), including the `/bin/sh` retry for a
//! file without a `#!` line.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

/// The search path used when the command's environment has no `PATH`
/// (glibc's `_CS_PATH`, which `execvp` falls back to).
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";
/// The shell that runs a file the kernel cannot execute (`ENOEXEC`).
const SHELL: &[u8] = b"/bin/sh";
/// The child's stack. It only makes system calls; this is generous.
const CHILD_STACK_BYTES: usize = 32 * 1024;

/// Memory for the child's stack, faulted in when created so the launch
/// itself does not fault. Reusable: the child is gone when `spawn` returns.
pub struct ChildStack(Box<[u128]>);

impl ChildStack {
    pub fn new() -> ChildStack {
        let mut words = vec![0u128; CHILD_STACK_BYTES / std::mem::size_of::<u128>()];
        prefault(&mut words);
        ChildStack(words.into_boxed_slice())
    }
}

/// Writes to every page `items` spans, so later writes do not fault (after a
/// fork every page is shared until written).
pub fn prefault<T: Default + Copy>(items: &mut [T]) {
    let per_page = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    for page in items.chunks_mut(per_page) {
        // SAFETY: a volatile write of a valid value into our own buffer, so
        // it is not elided.
        unsafe { ptr::write_volatile(page.as_mut_ptr(), T::default()) };
    }
}

impl ChildStack {
    /// The top of the stack (it grows down), 16-byte aligned, for `clone`.
    fn top(&mut self) -> *mut libc::c_void {
        self.0.as_mut_ptr_range().end.cast::<libc::c_void>()
    }

    /// Runs `entry(arg)` on this stack in a child that shares the caller's
    /// memory: `clone(CLONE_VM | CLONE_VFORK)`, which suspends the calling
    /// thread until the child has exec'd or exited. Every signal is blocked
    /// around the clone so that no handler runs in the child on the shared
    /// memory: the caller's mask is stored in `*saved_mask` first (for the
    /// child to restore before its exec) and restored once the child is
    /// done. Returns the child's pid.
    ///
    /// # Safety
    ///
    /// `entry` may only make async-signal-safe system calls on memory that
    /// outlives this call (`arg` points to it); `saved_mask` must be valid
    /// for reads and writes (it may point into `arg`'s memory).
    pub unsafe fn clone_vfork(
        &mut self,
        entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
        arg: *mut libc::c_void,
        saved_mask: *mut libc::sigset_t,
    ) -> io::Result<libc::pid_t> {
        // SAFETY: sigset_t is plain data; sigfillset initializes it.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: filling a local set, then blocking every signal; the
        // caller's mask goes where the caller said it may be written.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, saved_mask);
        }
        let stack_top = self.top();
        // SAFETY: the caller vouches for `entry` and `arg`; CLONE_VFORK
        // keeps this frame (and `arg`) alive until the child has exec'd or
        // exited, and the stack is ours alone and 16-byte aligned at its top.
        let pid = unsafe {
            libc::clone(
                entry,
                stack_top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                arg,
            )
        };
        let clone_error = io::Error::last_os_error();
        // SAFETY: restoring the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, saved_mask, ptr::null_mut()) };
        if pid < 0 {
            Err(clone_error)
        } else {
            Ok(pid)
        }
    }
}

impl Default for ChildStack {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything the child needs, as C strings and pointer arrays built before
/// the clone so the child never allocates.
pub struct Launch {
    /// Paths to try in order (one when the program names a path).
    candidates: Vec<CString>,
    /// `argv` as given (`arg0` replacing the first element).
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    /// `[/bin/sh, <candidate>, args…]` for the `ENOEXEC` retry; slot 1 is
    /// filled by the child.
    sh_argv_ptrs: Vec<*const libc::c_char>,
    _env: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    shell: CString,
    cwd: CString,
    controlling_tty: bool,
}

/// Shared with the child: its inputs, and the errno of its failed step.
struct ChildContext<'a> {
    launch: &'a mut Launch,
    parent: libc::pid_t,
    old_mask: libc::sigset_t,
    errno: AtomicI32,
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

impl Launch {
    /// Prepares `argv` (non-empty) with `env` in `cwd`. `arg0` replaces
    /// `argv[0]` as the program sees it. A NUL byte anywhere is `EINVAL`.
    pub fn new(
        argv: &[OsString],
        arg0: Option<&OsStr>,
        env: &[(OsString, OsString)],
        cwd: &Path,
        controlling_tty: bool,
    ) -> io::Result<Launch> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let path_var = env
            .iter()
            .rev()
            .find(|(key, _)| key == "PATH")
            .map_or(DEFAULT_PATH, |(_, value)| value.as_bytes());
        let candidates = search_candidates(program.as_bytes(), path_var)?;
        let mut c_argv = Vec::with_capacity(argv.len());
        c_argv.push(cstring(arg0.unwrap_or(program).as_bytes())?);
        for arg in args {
            c_argv.push(cstring(arg.as_bytes())?);
        }
        let mut env_strings = Vec::with_capacity(env.len());
        for (key, value) in env {
            let mut pair = Vec::with_capacity(key.len() + value.len() + 1);
            pair.extend_from_slice(key.as_bytes());
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            env_strings.push(cstring(&pair)?);
        }
        let shell = cstring(SHELL)?;
        let argv_ptrs = null_terminated(&c_argv);
        let mut sh_argv_ptrs = vec![shell.as_ptr(), ptr::null()];
        sh_argv_ptrs.extend(c_argv.iter().skip(1).map(|arg| arg.as_ptr()));
        sh_argv_ptrs.push(ptr::null());
        Ok(Launch {
            candidates,
            argv_ptrs,
            sh_argv_ptrs,
            _argv: c_argv,
            envp_ptrs: null_terminated(&env_strings),
            _env: env_strings,
            shell,
            cwd: cstring(cwd.as_os_str().as_bytes())?,
            controlling_tty,
        })
    }

    /// Starts the command as a child of the calling process: its own
    /// session, the PTY on fd 0 as controlling terminal when asked, SIGKILL
    /// when the calling thread dies (PR_SET_PDEATHSIG follows the thread),
    /// descriptors above 2 closed on exec, default SIGPIPE, an empty
    /// signal mask. Returns once the child has exec'd (its pid) or failed
    /// (the errno of the failed step; the child is reaped).
    ///
    /// The child only touches `self`, `stack` and its own context, so other
    /// threads of the caller may keep running (the supervisors have none).
    pub fn spawn(&mut self, stack: &mut ChildStack) -> io::Result<libc::pid_t> {
        let mut context = ChildContext {
            launch: self,
            // SAFETY: getpid has no preconditions.
            parent: unsafe { libc::getpid() },
            // SAFETY: plain data, filled by `clone_vfork` before the clone.
            old_mask: unsafe { std::mem::zeroed() },
            errno: AtomicI32::new(0),
        };
        let saved_mask = ptr::addr_of_mut!(context.old_mask);
        // SAFETY: `child_main` only makes async-signal-safe system calls on
        // `context`, which lives until the end of this function; the saved
        // mask is a field of it, which the child restores before its exec.
        let pid = unsafe {
            stack.clone_vfork(child_main, ptr::from_mut(&mut context).cast(), saved_mask)?
        };
        match context.errno.load(Ordering::SeqCst) {
            0 => Ok(pid),
            errno => {
                // SAFETY: reaping the child that just failed; a null status.
                unsafe { libc::waitpid(pid, ptr::null_mut(), 0) };
                Err(io::Error::from_raw_os_error(errno))
            }
        }
    }
}

impl Launch {
    /// The exec alone (the `execvp` search with the prepared argv and
    /// environment), for a `CLONE_VM` child the caller made and prepared
    /// itself. Async-signal-safe; returns only the errno of the failure.
    pub fn exec_prepared(&mut self) -> libc::c_int {
        exec_first_found(self)
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect()
}

/// The paths `execvp` would try for `program` along `path_var`.
fn search_candidates(program: &[u8], path_var: &[u8]) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.contains(&b'/') {
        return Ok(vec![cstring(program)?]);
    }
    path_var
        .split(|&b| b == b':')
        .map(|dir| {
            // An empty entry is the working directory.
            if dir.is_empty() {
                return cstring(program);
            }
            let mut path = Vec::with_capacity(dir.len() + program.len() + 1);
            path.extend_from_slice(dir);
            if !dir.ends_with(b"/") {
                path.push(b'/');
            }
            path.extend_from_slice(program);
            cstring(&path)
        })
        .collect()
}

fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// The child's side. It shares the supervisor's memory: no allocation, no
/// locks, no unwinding; only system calls on prepared data.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildContext` the suspended parent passed, valid
    // and not touched by anyone else until we exec or exit.
    let context = unsafe { &mut *arg.cast::<ChildContext<'_>>() };
    let errno = setup_and_exec(context);
    context.errno.store(errno.max(1), Ordering::SeqCst);
    // SAFETY: _exit leaves without running any user-space cleanup.
    unsafe { libc::_exit(127) }
}

/// Returns the errno of the step that failed (exec only returns on failure).
fn setup_and_exec(context: &mut ChildContext<'_>) -> libc::c_int {
    let launch = &mut *context.launch;
    // SAFETY: a plain system call; an ignored SIGPIPE would survive the exec.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    if let Err(errno) = enter_command_session(launch.controlling_tty, context.parent, &launch.cwd) {
        return errno;
    }
    // SAFETY: plain system calls on our own process: descriptors above 2
    // close at exec, then an empty signal mask (the supervisor blocks the
    // signals its reaper waits for; the command must not inherit that).
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, ptr::null_mut());
    }
    exec_first_found(launch)
}

/// The steps every command's first process takes in a child of its
/// supervisor: its own session, the PTY on fd 0 as controlling terminal
/// when asked, SIGKILL when the supervisor (`parent`) dies (checked after
/// arming, so a supervisor that is already gone is noticed), and `cwd`.
/// System calls only; `Err` holds the errno of the failed step.
pub fn enter_command_session(
    controlling_tty: bool,
    parent: libc::pid_t,
    cwd: &std::ffi::CStr,
) -> Result<(), libc::c_int> {
    // SAFETY: each call is a plain system call on our own process with
    // arguments prepared by the caller.
    unsafe {
        if libc::setsid() < 0 {
            return Err(errno());
        }
        if controlling_tty && libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
            return Err(errno());
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
            return Err(errno());
        }
        if libc::getppid() != parent {
            return Err(libc::ESRCH);
        }
        if libc::chdir(cwd.as_ptr()) < 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Tries every candidate like `execvp`: a missing file moves on, a
/// permission error is remembered, `ENOEXEC` retries under `/bin/sh`, any
/// other error stops the search.
fn exec_first_found(launch: &mut Launch) -> libc::c_int {
    let mut saw_eacces = false;
    let mut last = libc::ENOENT;
    for candidate in &launch.candidates {
        // SAFETY: NUL-terminated strings and NULL-terminated arrays that live
        // in the suspended parent until we exec or exit.
        unsafe {
            libc::execve(
                candidate.as_ptr(),
                launch.argv_ptrs.as_ptr(),
                launch.envp_ptrs.as_ptr(),
            )
        };
        last = errno();
        if last == libc::ENOEXEC {
            if let Some(slot) = launch.sh_argv_ptrs.get_mut(1) {
                *slot = candidate.as_ptr();
            }
            // SAFETY: as above; the shell argv was completed just now.
            unsafe {
                libc::execve(
                    launch.shell.as_ptr(),
                    launch.sh_argv_ptrs.as_ptr(),
                    launch.envp_ptrs.as_ptr(),
                )
            };
            last = errno();
        }
        match last {
            libc::EACCES => saw_eacces = true,
            libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return last,
        }
    }
    if saw_eacces {
        libc::EACCES
    } else {
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(candidates: &[CString]) -> Vec<&str> {
        candidates.iter().map(|c| c.to_str().unwrap()).collect()
    }

    fn os(items: &[&str]) -> Vec<OsString> {
        items.iter().map(OsString::from).collect()
    }

    /// Spawns and waits; `Ok(exit code)` or the spawn error's errno.
    fn run(argv: &[&str], env: &[(&str, &str)], cwd: &Path) -> Result<i32, i32> {
        let env: Vec<(OsString, OsString)> =
            env.iter().map(|(k, v)| (k.into(), v.into())).collect();
        let mut launch = Launch::new(&os(argv), None, &env, cwd, false).unwrap();
        let pid = launch
            .spawn(&mut ChildStack::new())
            .map_err(|e| e.raw_os_error().unwrap())?;
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "status {status:#x}");
        Ok(libc::WEXITSTATUS(status))
    }

    #[test]
    fn commands_run_with_their_env_cwd_and_session() {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"[ "$(pwd -P)" = "$1" ] || exit 10
            [ "$X" = y ] || exit 11
            [ "$(ps -o sid= -p $$ | tr -d ' ')" = $$ ] || exit 12
            exit 3"#;
        let real = dir.path().canonicalize().unwrap();
        let argv = ["sh", "-c", script, "sh", real.to_str().unwrap()];
        let env = [("PATH", "/usr/bin:/bin"), ("X", "y")];
        assert_eq!(run(&argv, &env, dir.path()), Ok(3));
    }

    #[test]
    fn failures_report_the_errno_of_the_failed_step() {
        let dir = tempfile::tempdir().unwrap();
        let here = dir.path();
        assert_eq!(
            run(&["no-such-program"], &[("PATH", "/bin")], here),
            Err(libc::ENOENT)
        );
        assert_eq!(
            run(&["/bin/true"], &[], &here.join("gone")),
            Err(libc::ENOENT)
        );
        let plain = here.join("plain");
        std::fs::write(&plain, "exit 0\n").unwrap();
        let plain = plain.to_str().unwrap();
        assert_eq!(run(&[plain], &[], here), Err(libc::EACCES));
        // A permission error wins over entries that lack the program.
        assert_eq!(
            run(
                &["plain"],
                &[("PATH", &format!("{}:/bin", here.display()))],
                here
            ),
            Err(libc::EACCES)
        );
    }

    #[test]
    fn a_script_without_an_interpreter_line_runs_under_sh() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, "exit 5\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("/nonexistent::{}", dir.path().display());
        assert_eq!(run(&["script"], &[("PATH", &path)], Path::new("/")), Ok(5));
    }

    #[test]
    fn candidates_follow_the_search_path() {
        let found = search_candidates(b"sh", b"/usr/local/bin:/bin/::rel").unwrap();
        assert_eq!(
            names(&found),
            ["/usr/local/bin/sh", "/bin/sh", "sh", "rel/sh"]
        );
        let found = search_candidates(b"./run", b"/bin").unwrap();
        assert_eq!(names(&found), ["./run"]);
        assert_eq!(
            search_candidates(b"", b"/bin").unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        assert_eq!(
            search_candidates(b"a\0b", b"/bin")
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EINVAL)
        );
    }
}
