//! Signals and tree-wide termination (docs/protocol.md). A managed command runs
//! under a supervisor that is a child subreaper, so every descendant (even one
//! that called setsid or double-forked) stays in the supervisor's subtree;
//! [`kill_tree`] freezes and kills that whole subtree, round after round,
//! until nothing is left but zombies the supervisor will reap.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// Parses a `process/signal` name: `interrupt`, `terminate`, `kill`,
/// `hangup`, `quit`, or a signal name with or without `SIG` (`SIGUSR1`, `usr1`).
pub fn parse_signal(name: &str) -> Option<Signal> {
    match name {
        "interrupt" => return Some(Signal::SIGINT),
        "terminate" => return Some(Signal::SIGTERM),
        "kill" => return Some(Signal::SIGKILL),
        "hangup" => return Some(Signal::SIGHUP),
        "quit" => return Some(Signal::SIGQUIT),
        _ => {}
    }
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse().ok()
}

/// `SIGKILL` for 9, or `SIG<n>` for a number without a name.
pub fn signal_name(signo: i32) -> String {
    match Signal::try_from(signo) {
        Ok(signal) => signal.as_str().to_owned(),
        Err(_) => format!("SIG{signo}"),
    }
}

/// Sends `signal` to process group `group`, ignoring a group that is gone.
pub fn signal_group(group: Pid, signal: Signal) -> nix::Result<()> {
    match killpg(group, signal) {
        Err(nix::errno::Errno::ESRCH) => Ok(()),
        other => other,
    }
}

/// Kills the command's process group and every live descendant of
/// `supervisor` (not the supervisor itself, which reaps them and exits).
/// Blocking: reads `/proc`; call it off the async workers.
pub fn kill_tree(supervisor: Pid, group: Pid) {
    let _ = signal_group(group, Signal::SIGKILL);
    kill_subtrees(&[supervisor]);
}

/// Kills every live descendant of the `supervisors`, one `/proc` scan per
/// round for all of them, and returns once none is left but zombies (or
/// after [`KILL_SETTLE_LIMIT`], for a descendant stuck in the kernel).
fn kill_subtrees(supervisors: &[Pid]) {
    // Each round stops then kills what it sees, so a process forking between
    // the scan and the kill is found by the next round. A killed process
    // stays "live" until it has released its resources, so later rounds
    // also wait for the dying to finish.
    let deadline = Instant::now() + KILL_SETTLE_LIMIT;
    for round in 0.. {
        let victims = live_descendants(supervisors);
        if victims.is_empty() || Instant::now() >= deadline {
            return;
        }
        for &pid in &victims {
            let _ = kill(pid, Signal::SIGSTOP);
        }
        for &pid in &victims {
            let _ = kill(pid, Signal::SIGKILL);
        }
        if round > 0 {
            std::thread::sleep(KILL_SETTLE_POLL);
        }
    }
}

/// The longest [`kill_subtrees`] waits for killed descendants to finish dying.
const KILL_SETTLE_LIMIT: Duration = Duration::from_secs(2);
/// Pause between rounds once the first two found victims.
const KILL_SETTLE_POLL: Duration = Duration::from_millis(1);

/// How long a sandbox helper gets to remove its mount points after SIGTERM.
pub const SANDBOX_CLEANUP_GRACE: Duration = Duration::from_millis(200);
/// Poll interval while waiting for the helper.
const GRACE_POLL: Duration = Duration::from_millis(5);

/// For a sandboxed command (`group` is the `codex-linux-sandbox` helper):
/// sends SIGTERM to the helper alone, which forwards it to bwrap and then
/// removes the mount points bwrap created on the host (docs/sandbox.md),
/// waits up to [`SANDBOX_CLEANUP_GRACE`] for it to exit, then kills the
/// whole tree like [`kill_tree`]. Blocking.
pub fn terminate_sandboxed_tree(supervisor: Pid, group: Pid) {
    kill_trees(&[(supervisor, group, true)]);
}

/// Kills many trees `(supervisor, group, sandboxed)` at once: every
/// sandboxed helper gets SIGTERM first and all of them share one
/// [`SANDBOX_CLEANUP_GRACE`], then each tree is killed. Blocking.
pub fn kill_trees(trees: &[(Pid, Pid, bool)]) {
    let helpers: Vec<Pid> = trees
        .iter()
        .filter(|(_, group, sandboxed)| *sandboxed && kill(*group, Signal::SIGTERM).is_ok())
        .map(|(_, group, _)| *group)
        .collect();
    let deadline = Instant::now() + SANDBOX_CLEANUP_GRACE;
    while helpers.iter().any(|&helper| is_running(helper)) && Instant::now() < deadline {
        std::thread::sleep(GRACE_POLL);
    }
    for &(_, group, _) in trees {
        let _ = signal_group(group, Signal::SIGKILL);
    }
    let supervisors: Vec<Pid> = trees.iter().map(|&(supervisor, _, _)| supervisor).collect();
    kill_subtrees(&supervisors);
}

/// Whether `pid` exists and is not a zombie.
pub fn is_running(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| parse_stat(&stat))
        .is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

/// The parent of `pid`, from `/proc/PID/stat`.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(_, ppid)| ppid)
}

/// Descendants of any of `roots` that are not zombies, from one scan of `/proc`.
pub fn live_descendants(roots: &[Pid]) -> Vec<Pid> {
    let mut children: HashMap<i32, Vec<(i32, bool)>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if let Some((state, ppid)) = parse_stat(&stat) {
            children
                .entry(ppid)
                .or_default()
                .push((pid, matches!(state, 'Z' | 'X')));
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<i32> = roots.iter().map(|root| root.as_raw()).collect();
    while let Some(parent) = stack.pop() {
        for &(pid, dead) in children.get(&parent).map(Vec::as_slice).unwrap_or_default() {
            if !dead {
                out.push(Pid::from_raw(pid));
            }
            stack.push(pid);
        }
    }
    out
}

/// `(state, ppid)` from the text of `/proc/PID/stat`.
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_parse_in_every_form() {
        assert_eq!(parse_signal("interrupt"), Some(Signal::SIGINT));
        assert_eq!(parse_signal("terminate"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("SIGUSR1"), Some(Signal::SIGUSR1));
        assert_eq!(parse_signal("usr2"), Some(Signal::SIGUSR2));
        assert_eq!(parse_signal("bogus"), None);
        assert_eq!(signal_name(9), "SIGKILL");
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        assert_eq!(parse_stat("42 (a) b (c)) S 7 42 42 0 -1"), Some(('S', 7)));
    }
}
