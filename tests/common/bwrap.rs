//! Differential-test helpers for the built-in bwrap: run the same argv through
//! the system bubblewrap and through `codexbox` invoked as `bwrap`, and compare
//! what the command inside observes.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The bubblewrap the built-in mode is compared against.
pub const SYSTEM_BWRAP: &str = "/usr/bin/bwrap";

/// The codexbox binary under test.
pub const CODEXBOX: &str = env!("CARGO_BIN_EXE_codexbox");

/// Whether the system bubblewrap is there (the one skip rule of
/// [`super::host`] applies when it is not).
pub fn have_system_bwrap(test: &str) -> bool {
    super::host::host_has(
        &format!("the system bubblewrap ({test})"),
        super::host::exists(SYSTEM_BWRAP),
    )
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

/// Who starts the launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The test process's own user (root in CI).
    Current,
    /// uid and gid 65534 without supplementary groups, through `setpriv`:
    /// an unprivileged caller, as on a desktop.
    Nobody,
}

/// The uid and gid [`Caller::Nobody`] runs as.
pub const NOBODY: u32 = 65534;

const SETPRIV: &str = "/usr/bin/setpriv";

/// The callers every differential case runs as: the test's own user and,
/// when the tests run as root with `setpriv` installed, [`Caller::Nobody`]
/// (says so out loud when it cannot).
pub fn callers() -> Vec<Caller> {
    let mut callers = vec![Caller::Current];
    if !nix::unistd::getuid().is_root() {
        super::host::not_applicable(
            "not running as root: the unprivileged caller is the test's own user",
        );
    } else if !super::host::host_has(
        &format!("{SETPRIV} for the uid {NOBODY} runs"),
        super::host::exists(SETPRIV),
    ) {
    } else if !reachable_by_nobody(Path::new(CODEXBOX)) {
        super::host::not_applicable(&format!(
            "the uid {NOBODY} runs: {CODEXBOX} is not reachable for it"
        ));
    } else {
        callers.push(Caller::Nobody);
    }
    callers
}

/// Whether every directory above `path` lets others through and `path`
/// lets them read.
fn reachable_by_nobody(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.ancestors()
        .all(|dir| std::fs::metadata(dir).is_ok_and(|meta| meta.permissions().mode() & 0o005 != 0))
}

/// A directory holding a `bwrap` symlink to the binary under test, so that
/// a caller started through `setpriv` reaches the built-in mode by argv[0].
/// It lives in cargo's per-target scratch directory, reachable by all users.
pub fn builtin_link() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bwrap-link");
    let link = dir.join("bwrap");
    if std::fs::read_link(&link).is_ok_and(|target| target == Path::new(CODEXBOX)) {
        return link;
    }
    std::fs::create_dir_all(&dir).expect("create the bwrap link directory");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // Another test may create it at the same time: build it aside, then rename.
    let staged = dir.join(format!("bwrap.{}", std::process::id()));
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(CODEXBOX, &staged).expect("symlink codexbox");
    std::fs::rename(&staged, &link).expect("rename the bwrap link");
    link
}

/// A fresh temporary directory the caller owns (so it can read and write
/// it like its own), removed when dropped.
pub fn tempdir_for(caller: Caller) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    if caller == Caller::Nobody {
        std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).expect("chown");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    dir
}

/// Gives a file or directory the test made to `caller`.
pub fn give_to(caller: Caller, path: &Path) {
    if caller == Caller::Nobody {
        std::os::unix::fs::lchown(path, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
}

/// A command for `which` with `args`, stdin from /dev/null.
pub fn command<S: AsRef<OsStr>>(which: Impl, args: &[S]) -> Command {
    command_as(which, Caller::Current, args)
}

/// A command for `which` started by `caller` with `args`, stdin from /dev/null.
pub fn command_as<S: AsRef<OsStr>>(which: Impl, caller: Caller, args: &[S]) -> Command {
    let mut cmd = match (which, caller) {
        (Impl::System, Caller::Current) => Command::new(SYSTEM_BWRAP),
        (Impl::Builtin, Caller::Current) => {
            let mut cmd = Command::new(CODEXBOX);
            cmd.arg0("bwrap");
            cmd
        }
        (Impl::Subcommand, Caller::Current) => {
            let mut cmd = Command::new(CODEXBOX);
            cmd.arg("bwrap");
            cmd
        }
        (_, Caller::Nobody) => {
            let mut cmd = Command::new(SETPRIV);
            let (reuid, regid) = (format!("--reuid={NOBODY}"), format!("--regid={NOBODY}"));
            cmd.args([reuid.as_str(), regid.as_str(), "--clear-groups"]);
            match which {
                Impl::System => cmd.arg(SYSTEM_BWRAP),
                Impl::Builtin => cmd.arg(builtin_link()),
                Impl::Subcommand => cmd.args([CODEXBOX, "bwrap"]),
            };
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

/// Runs `args` through one implementation, started by `caller`.
pub fn run_as<S: AsRef<OsStr>>(which: Impl, caller: Caller, args: &[S]) -> Outcome {
    finish(command_as(which, caller, args))
}

/// Runs through the system bwrap and the built-in one and asserts identical
/// stdout, stderr and exit status, apart from the intended differences
/// [`without_intended_differences`] takes out. Returns the built-in outcome.
pub fn assert_same<S: AsRef<OsStr>>(args: &[S]) -> Outcome {
    assert_same_as(Caller::Current, args)
}

/// [`assert_same`] with both launchers started by `caller`.
pub fn assert_same_as<S: AsRef<OsStr>>(caller: Caller, args: &[S]) -> Outcome {
    let system = run_as(Impl::System, caller, args);
    let builtin = run_as(Impl::Builtin, caller, args);
    assert_outcomes_equal_as(caller, args, &system, &builtin);
    builtin
}

/// The probe's mount lines for the read-only covers the built-in `--proc`
/// puts on the kernel-global corners of `/proc` whenever they exist, where
/// bubblewrap covers only those `access(W_OK)` calls writable: never
/// `/proc/sys`, and for an unprivileged caller none.
pub const PROC_COVERS: [&str; 4] = [
    "mount: /proc/sys proc ro\n",
    "mount: /proc/sysrq-trigger proc ro\n",
    "mount: /proc/irq proc ro\n",
    "mount: /proc/bus proc ro\n",
];

/// What a root caller's command reads in `/proc/self/uid_map` and
/// `gid_map` from bubblewrap run without `--unshare-user` (the host's maps)
/// and from the built-in, which always creates a user namespace.
pub const HOST_ID_MAPS: (&str, &str) = ("0 0 4294967295", "0 0 1");

/// Both outcomes without the intended differences, each documented in
/// README.md: the built-in's read-only covers in `/proc` ([`PROC_COVERS`],
/// each line taken out of both when the built-in has it: the system one
/// either lacks it or has it too, a bind of the caller's own landing on the
/// cover); for a root caller the one-line id maps of the user namespace
/// the built-in always creates; and for uid 65534 the submounts bubblewrap
/// leaves writable under a read-only bind because that caller cannot reach
/// their mount points ([`unreachable_submounts_read_only`]).
pub fn without_intended_differences(
    caller: Caller,
    system: &Outcome,
    builtin: &Outcome,
) -> (Outcome, Outcome) {
    let (mut system, mut builtin) = (system.clone(), builtin.clone());
    if caller == Caller::Nobody {
        system.stdout = unreachable_submounts_read_only(&system.stdout, &builtin.stdout);
    }
    for cover in PROC_COVERS {
        if builtin.stdout.contains(cover) {
            system.stdout = system.stdout.replacen(cover, "", 1);
            builtin.stdout = builtin.stdout.replacen(cover, "", 1);
        }
    }
    let (host, own) = HOST_ID_MAPS;
    for name in ["uid_map", "gid_map"] {
        let host_line = format!("{name}: {host}\n");
        let own_line = format!("{name}: {own}\n");
        if system.stdout.contains(&host_line) && builtin.stdout.contains(&own_line) {
            system.stdout = system.stdout.replacen(&host_line, &own_line, 1);
        }
    }
    (system, builtin)
}

/// `system`'s probe output with each `mount: POINT TYPE rw` line turned
/// `ro` where `builtin` has the same mount read-only and uid 65534 cannot
/// reach POINT: bubblewrap ignores EACCES when it remounts a submount
/// read-only ("not something the user can access"); the built-in's
/// recursive remount covers it.
pub fn unreachable_submounts_read_only(system: &str, builtin: &str) -> String {
    system
        .split_inclusive('\n')
        .map(|line| {
            let Some(point_and_type) = line
                .strip_prefix("mount: ")
                .and_then(|rest| rest.strip_suffix(" rw\n"))
            else {
                return line.to_owned();
            };
            let read_only = format!("mount: {point_and_type} ro");
            let point = point_and_type
                .rsplit_once(' ')
                .map_or("", |(point, _)| point);
            if builtin.lines().any(|other| other == read_only)
                && !reachable_by_nobody(Path::new(point))
            {
                format!("{read_only}\n")
            } else {
                line.to_owned()
            }
        })
        .collect()
}

/// Asserts two outcomes are equal apart from the intended differences,
/// printing the argv and both sides if not.
pub fn assert_outcomes_equal<S: AsRef<OsStr>>(args: &[S], system: &Outcome, builtin: &Outcome) {
    assert_outcomes_equal_as(Caller::Current, args, system, builtin)
}

/// [`assert_outcomes_equal`], naming the caller in the failure.
pub fn assert_outcomes_equal_as<S: AsRef<OsStr>>(
    caller: Caller,
    args: &[S],
    system: &Outcome,
    builtin: &Outcome,
) {
    let (compared_system, compared_builtin) = without_intended_differences(caller, system, builtin);
    if compared_system != compared_builtin {
        let argv: Vec<String> = args
            .iter()
            .map(|arg| arg.as_ref().to_string_lossy().into_owned())
            .collect();
        panic!(
            "system bwrap and built-in bwrap differ for {argv:?} started by {caller:?}\n\
             --- system (exit {}) stdout:\n{}\n--- stderr:\n{}\n\
             --- built-in (exit {}) stdout:\n{}\n--- stderr:\n{}",
            system.code, system.stdout, system.stderr, builtin.code, builtin.stdout, builtin.stderr
        );
    }
}

/// A shell script printing what a sandboxed command can observe, one fact a
/// line: ids and id maps, pid, its process group and session (as "self",
/// "one", "zero" or "other"), hostname, sorted environment, cwd, /dev
/// listing, capabilities, open fds, the mount table normalised to "mount
/// point, fs type, ro/rw" (topmost mount per point, as path lookup sees it),
/// and the readable/writable state of each path in `paths`.
pub fn probe_script(paths: &[&str]) -> String {
    let mut script = String::from(
        r#"echo "ids: $(id -u) $(id -g) [$(id -G)]"
awk '{ print "uid_map: " $1 " " $2 " " $3 }' /proc/self/uid_map
awk '{ print "gid_map: " $1 " " $2 " " $3 }' /proc/self/gid_map
echo "pid: $$"
read -r stat < /proc/self/stat; me=${stat%% *}; set -- ${stat##*) }
rel() { case $1 in "$me") echo self;; 1) echo one;; 0) echo zero;; *) echo other;; esac; }
echo "session: pgrp $(rel $3) sid $(rel $4)"
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

/// Every process below `pid` (children before their children), from a scan
/// of `/proc`.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // Fields after the command name: state, ppid, …
        let ppid = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.split(' ').nth(1))
            .and_then(|ppid| ppid.parse::<i32>().ok());
        if let Some(ppid) = ppid {
            parents.push((child, ppid));
        }
    }
    let mut found = vec![pid];
    let mut index = 0;
    while let Some(&parent) = found.get(index) {
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        index += 1;
    }
    found.remove(0);
    found
}

/// Waits until every process in `pids` has ended (exited or zombie), with
/// `limit` as a safety net, without polling: each is watched through a
/// pidfd. Returns those still running at the limit.
pub fn wait_until_gone(pids: &[i32], limit: std::time::Duration) -> Vec<i32> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let deadline = std::time::Instant::now() + limit;
    let mut watched: Vec<(i32, OwnedFd)> = Vec::new();
    for &pid in pids {
        // SAFETY: pidfd_open takes a pid and flags; the fd is owned below.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if let Ok(fd) = i32::try_from(fd) {
            if fd >= 0 {
                // SAFETY: pidfd_open just returned this fd.
                watched.push((pid, unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        // ESRCH: gone already.
    }
    while !watched.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let mut polled: Vec<libc::pollfd> = watched
            .iter()
            .map(|(_, fd)| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let timeout = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
        let count = libc::nfds_t::try_from(polled.len()).expect("pollfd count");
        // SAFETY: `polled` is a live array of `count` pollfds.
        let rc = unsafe { libc::poll(polled.as_mut_ptr(), count, timeout) };
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            panic!("poll pidfds: {}", std::io::Error::last_os_error());
        }
        let ended: Vec<bool> = polled.iter().map(|p| p.revents != 0).collect();
        let mut flags = ended.into_iter();
        watched.retain(|_| !flags.next().unwrap_or(false));
    }
    watched.into_iter().map(|(pid, _)| pid).collect()
}

/// SIGKILLs what a test left running.
pub fn kill_all(pids: &[i32]) {
    for &pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
