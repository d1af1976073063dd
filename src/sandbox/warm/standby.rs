//! A command's pid 1 made ahead of the command: the helper's standby role.
//!
//! While nobody waits, the exec-server starts a helper that enters a
//! prepared sandbox and clones the next command's pid 1, exactly as a
//! launch does ([`super::launch`]): its own pid, mount, ipc, uts and cgroup
//! namespaces, its fresh `/proc`, `/dev/shm` and `/dev/pts`, its session,
//! not dumpable. Pid 1 then takes the command's whole confinement itself
//! (`super::command::Confinement`: a nested user namespace in which none
//! can be made, a fresh session keyring, no_new_privs, no capability, the
//! seccomp filter), which the command inherits, says it stands by
//! ([`super::request::STANDING_BY`]) and waits on its control socket.
//!
//! The server hands the next command to pid 1 ([`super::request::Go`]:
//! the command with the setup the server expects, its environment, and
//! its stdin, stdout and stderr as descriptors) while it decides the
//! command's sandbox as for any launch (`super::decide_ahead`). Pid 1
//! takes that stdio and environment and starts the command, which only
//! enters its directory (`super::command`) and then waits before its
//! exec for the server's go-ahead ([`super::request::go_ahead`]). The
//! server sends it only when a one-shot run would build the prepared
//! sandbox and the decided setup is the one sent; otherwise it hangs up,
//! the command exits without exec'ing, and the server starts it the
//! other way. What a command can do is what a launch gives it: the
//! standby is made from the same prepared sandbox the decision was
//! checked against, serves one command only, and nothing of it was ever
//! seen by another command.
//!
//! The control socket's end (the server dropped the standby) ends pid 1
//! before any command, and with it the helper; so do the helper's usual
//! exits (parent-death signal, passed-on signals).

use std::os::fd::{AsRawFd, OwnedFd};

use super::command::{CommandExec, Confinement};
use super::launch::{self, die, host_ids, in_own_namespaces, io_error, Namespaces, Report};
use super::request::{Go, StandbyRequest, STANDING_BY};
use crate::process::vfork::ChildStack;
use crate::sandbox::seccomp::{SeccompMode, SeccompProgram};
use crate::sys::{fds, scm};

/// Largest command message a standby reads (as a spawn job).
pub const MAX_GO_BYTES: usize = 128 * 1024;

/// The standby role. Descriptors: the supervisor's status pipe and its
/// gate, then those [`StandbyRequest`] names. Returns the helper's exit
/// status, as a launch does.
pub fn run(data: &[u8], fds: Vec<OwnedFd>) -> i32 {
    let mut fds = fds.into_iter();
    let (Some(request), Some(status), Some(gate), Some(control), Some(_in_use)) = (
        StandbyRequest::decode(data),
        fds.next(),
        fds.next(),
        fds.next(),
        fds.next(),
    ) else {
        return 1;
    };
    let (Some(user), Some(mnt)) = (fds.next(), fds.next()) else {
        return 1;
    };
    let net = match request.seccomp {
        SeccompMode::Restricted => match fds.next() {
            Some(net) => Some(net),
            None => return 1,
        },
        SeccompMode::NetworkEnabled => None,
        // Managed routing never reuses a sandbox.
        SeccompMode::ProxyRouted => return 1,
    };
    let program = match SeccompProgram::shared(request.seccomp) {
        Ok(program) => program,
        Err(err) => {
            eprintln!("{}", launch::LaunchError::from(err).line());
            return 1;
        }
    };
    let ids = host_ids();
    let stack = ChildStack::new();
    let mut buf = vec![0u8; MAX_GO_BYTES];
    let ns = Namespaces { user, mnt, net };
    let report = Report { status, gate };
    let outcome = in_own_namespaces(ns, report, move |pid1| {
        let mounts = pid1.set_up(false);
        // The command's confinement, taken here: the command inherits it.
        let mut confinement = Confinement::new(ids, program);
        confinement.set_user_sysctls(&mounts.user_sysctls);
        if let Err(line) = confinement.apply_here(&mounts.own_proc) {
            eprintln!("{line}");
            // SAFETY: ends pid 1 before any command ran.
            unsafe { libc::_exit(1) }
        }
        // Still tied to the helper in its new credentials.
        pid1.die_with_helper();
        let Some(go) = wait_for_go(&control, &mut buf) else {
            // Dropped unused, or a command this standby cannot take.
            // SAFETY: ends pid 1 before any command ran.
            unsafe { libc::_exit(0) }
        };
        if go.setup.seccomp != request.seccomp || go.setup.console {
            die(&io_error("take the command")(
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        let Go { setup, env } = go;
        for (key, _) in std::env::vars_os() {
            std::env::remove_var(key);
        }
        for (key, value) in &env {
            std::env::set_var(key, value);
        }
        let mut command = CommandExec::new(
            &setup.command,
            setup.arg0.as_deref(),
            &setup.chdir,
            &setup.command_cwd,
            None,
        )
        .unwrap_or_else(|err| die(&io_error("prepare the command")(err)));
        // Closed by the reaper, once the command has exec'd.
        command.hold_for_go_ahead(control.as_raw_fd());
        pid1.start_command(command, stack, mounts)
    });
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{}", err.line());
            1
        }
    }
}

/// Says the standby is ready and waits for its command: the decoded
/// message with stdio moved onto 0, 1 and 2, or `None` when the server
/// hung up or sent something else.
fn wait_for_go(control: &OwnedFd, buf: &mut [u8]) -> Option<Go> {
    fds::write_all(control.as_raw_fd(), &[STANDING_BY]).ok()?;
    let (len, received) = scm::recv_with_fds(control.as_raw_fd(), buf).ok()??;
    let go = Go::decode(buf.get(..len)?)?;
    let [stdin, stdout, stderr] = <[OwnedFd; 3]>::try_from(received).ok()?;
    for (fd, target) in [(stdin, 0), (stdout, 1), (stderr, 2)] {
        // SAFETY: dup2 of a descriptor we own onto a stdio number.
        if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
            return None;
        }
    }
    Some(go)
}
