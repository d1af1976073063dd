//! Differential-test helpers for the built-in bwrap: run the same argv through
//! the system bubblewrap and through `codexbox` invoked as `bwrap`, and compare
//! what the command inside observes.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};

/// The bubblewrap the built-in mode is compared against.
pub const SYSTEM_BWRAP: &str = "/usr/bin/bwrap";

/// The codexbox binary under test.
pub const CODEXBOX: &str = env!("CARGO_BIN_EXE_codexbox");

/// Whether the system bubblewrap is there; says so out loud when it is not.
pub fn have_system_bwrap(test: &str) -> bool {
    if Path::new(SYSTEM_BWRAP).exists() {
        return true;
    }
    eprintln!("skipping {test}: {SYSTEM_BWRAP} is not installed");
    false
}

/// Which implementation runs an argv.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Impl {
    /// /usr/bin/bwrap.
    System,
    /// codexbox with argv[0] `bwrap`.
    Builtin,
    /// `codexbox bwrap …`.
    Subcommand,
}

/// What one run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub stdout: String,
    pub stderr: String,
    /// Exit code, or 128 + signal if the launcher itself was killed.
    pub code: i32,
}

/// A command for `which` with `args`, stdin from /dev/null.
pub fn command<S: AsRef<OsStr>>(which: Impl, args: &[S]) -> Command {
    let mut cmd = match which {
        Impl::System => Command::new(SYSTEM_BWRAP),
        Impl::Builtin => {
            let mut cmd = Command::new(CODEXBOX);
            cmd.arg0("bwrap");
            cmd
        }
        Impl::Subcommand => {
            let mut cmd = Command::new(CODEXBOX);
            cmd.arg("bwrap");
            cmd
        }
    };
    cmd.args(args).stdin(Stdio::null());
    // Fds this test process inherited without close-on-exec would reach the
    // launcher, and bubblewrap passes them on: keep them out of the comparison.
    super::redteam::only_std_fds(&mut cmd);
    cmd
}

/// Makes `fd` (ours) appear as fd `target` in the launched process. The fd is
/// first duplicated above 100 so that several calls cannot overwrite each
/// other's source while the child shuffles them into place.
pub fn pass_fd(cmd: &mut Command, fd: &OwnedFd, target: i32) {
    // SAFETY: F_DUPFD_CLOEXEC returns a new fd (or -1) and takes no pointer.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 100) };
    assert!(
        high >= 0,
        "dup {target}: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `high` was just created and is owned by nothing else.
    let high = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(high) };
    // SAFETY: dup2 is async-signal-safe; it runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(high.as_raw_fd(), target) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs a prepared command to completion.
pub fn finish(mut cmd: Command) -> Outcome {
    let output = cmd.output().expect("spawn launcher");
    let code = output
        .status
        .code()
        .or_else(|| output.status.signal().map(|sig| 128 + sig))
        .unwrap_or(-1);
    Outcome {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        code,
    }
}

/// Runs `args` through one implementation.
pub fn run<S: AsRef<OsStr>>(which: Impl, args: &[S]) -> Outcome {
    finish(command(which, args))
}

/// Runs through the system bwrap and the built-in one and asserts identical
/// stdout, stderr and exit status, apart from [`PROC_SYS_COVER`] (an
/// intended difference, see `builtin_proc_sys_is_read_only` in
/// tests/bwrap_compat.rs). Returns the built-in outcome.
pub fn assert_same<S: AsRef<OsStr>>(args: &[S]) -> Outcome {
    let system = run(Impl::System, args);
    let builtin = run(Impl::Builtin, args);
    assert_outcomes_equal(args, &system, &builtin);
    builtin
}

/// The probe's mount line for the read-only cover the built-in `--proc`
/// puts on `/proc/sys`, which bubblewrap skips for a root caller.
pub const PROC_SYS_COVER: &str = "mount: /proc/sys proc ro\n";

/// Both outcomes with the `/proc/sys` mount line taken out of stdout when
/// the built-in one has it and the system one either has none (the cover
/// is the only difference) or has the same line (a `/proc/sys` bind of the
/// caller's own lands on the cover, so only the line's position differs).
pub fn without_proc_sys_cover(system: &Outcome, builtin: &Outcome) -> (Outcome, Outcome) {
    let (mut system, mut builtin) = (system.clone(), builtin.clone());
    if builtin.stdout.contains(PROC_SYS_COVER) {
        system.stdout = system.stdout.replacen(PROC_SYS_COVER, "", 1);
        builtin.stdout = builtin.stdout.replacen(PROC_SYS_COVER, "", 1);
    }
    (system, builtin)
}

/// Asserts two outcomes are equal apart from [`PROC_SYS_COVER`], printing
/// the argv and both sides if not.
pub fn assert_outcomes_equal<S: AsRef<OsStr>>(args: &[S], system: &Outcome, builtin: &Outcome) {
    let (compared_system, compared_builtin) = without_proc_sys_cover(system, builtin);
    if compared_system != compared_builtin {
        let argv: Vec<String> = args
            .iter()
            .map(|arg| arg.as_ref().to_string_lossy().into_owned())
            .collect();
        panic!(
            "system bwrap and built-in bwrap differ for {argv:?}\n\
             --- system (exit {}) stdout:\n{}\n--- stderr:\n{}\n\
             --- built-in (exit {}) stdout:\n{}\n--- stderr:\n{}",
            system.code, system.stdout, system.stderr, builtin.code, builtin.stdout, builtin.stderr
        );
    }
}

/// A shell script printing what a sandboxed command can observe, one fact a
/// line: ids, pid, hostname, sorted environment, cwd, /dev listing,
/// capabilities, open fds, the mount table normalised to "mount point, fs
/// type, ro/rw" (topmost mount per point, as path lookup sees it), and the
/// readable/writable state of each path in `paths`.
pub fn probe_script(paths: &[&str]) -> String {
    let mut script = String::from(
        r#"echo "ids: $(id -u) $(id -g) [$(id -G)]"
echo "pid: $$"
echo "hostname: $(cat /proc/sys/kernel/hostname)"
env | grep -v '^_=' | sort | sed 's/^/env: /'
echo "cwd: $(pwd)"
echo "root: $(ls -A / | tr '\n' ' ')"
echo "dev: $(ls -A /dev | tr '\n' ' ')"
grep -E '^(Cap|NoNewPrivs|SigIgn|SigBlk)' /proc/self/status | tr '\t' ' '
echo "fds: $(ls /proc/self/fd | tr '\n' ' ')"
awk '{ for (i = 7; i <= NF; i++) if ($i == "-") break; split($6, o, ",");
       if (!($5 in seen)) { order[++n] = $5; seen[$5] = 1 }
       top[$5] = $5 " " $(i + 1) " " o[1] }
     END { for (k = 1; k <= n; k++) print "mount: " top[order[k]] }' /proc/self/mountinfo
"#,
    );
    for path in paths {
        script.push_str(&format!(
            "printf 'access: %s %s%s\\n' '{path}' \"$(test -r '{path}' && echo r || echo -)\" \"$(test -w '{path}' && echo w || echo -)\"\n"
        ));
    }
    script
}

/// `args` + `sh -c probe`.
pub fn with_probe(args: &[&str], paths: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    argv.extend(["sh".to_owned(), "-c".to_owned(), probe_script(paths)]);
    argv
}
