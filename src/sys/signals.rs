//! Signal dispositions of a process that is about to become something
//! else: a command (before its exec) or a sandbox's pid 1.

/// Sets every catchable signal back to its default action (SIGPIPE stays
/// ignored when `keep_sigpipe_ignored`) and empties the signal mask. An
/// ignored signal stays ignored across exec, so a server started by `nohup`
/// or as `cmd &` in a script would otherwise hand commands that never die
/// of `process/signal hangup` or `interrupt`; and a pid 1 with no handler
/// gets no signal from inside its pid namespace. Async-signal-safe.
pub fn reset_dispositions(keep_sigpipe_ignored: bool) {
    for signo in 1..=libc::SIGRTMAX() {
        if matches!(signo, libc::SIGKILL | libc::SIGSTOP)
            || (keep_sigpipe_ignored && signo == libc::SIGPIPE)
        {
            continue;
        }
        // SAFETY: setting a disposition; numbers glibc reserves fail harmlessly.
        unsafe { libc::signal(signo, libc::SIG_DFL) };
    }
    // SAFETY: an empty set, then installing it as the mask.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}
