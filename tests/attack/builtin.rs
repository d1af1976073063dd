//! The escape battery against the built-in bubblewrap (`codexbox bwrap`),
//! run with the exact argv `codexbox linux-sandbox --explain` prints for
//! the built-in launcher (inner stage included: no_new_privs, seccomp),
//! as root: the built-in mode on its own, without the helper around it
//! (the explained argv carries no `--restore-stderr-fd`).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::redteam::*;

/// Splits the explain line's shell quoting (`'…'` with `'\''`).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            '\\' if !quoted => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                in_word = true;
            }
            ' ' if !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// The built-in bwrap argv the sandbox builds for `profile` in `cwd`.
fn explained(cwd: &Path, profile: &str) -> Vec<String> {
    let out = Command::new(BIN)
        .args(["linux-sandbox", "--sandbox-policy-cwd"])
        .arg(cwd)
        .args([
            "--permission-profile",
            profile,
            "--backend",
            "bwrap",
            "--explain",
            "--",
            "true",
        ])
        .env("CODEXBOX_BWRAP", "builtin")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("explain");
    let text = stdout(&out);
    assert!(
        text.contains("launcher: builtin"),
        "{text}\n{}",
        stderr(&out)
    );
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("argv: "))
        .expect("argv line");
    let mut words = shell_words(line);
    assert_eq!(words.first().map(String::as_str), Some("bwrap"));
    words.remove(0);
    // The explained inner command ends with `--` and the command `true`.
    assert_eq!(words.last().map(String::as_str), Some("true"), "{words:?}");
    words.pop();
    words
}

/// Runs `sh -c script` through `codexbox bwrap` with the explained argv.
fn run(cwd: &Path, profile: &str, script: &str) -> Output {
    let argv = explained(cwd, profile);
    let out = only_std_fds(&mut Command::new(BIN))
        .arg("bwrap")
        .args(&argv)
        .args(["sh", "-c", script])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("codexbox bwrap");
    log(Launcher::Builtin, script, &out);
    out
}

fn ready() -> bool {
    available(Launcher::Builtin)
}

#[test]
fn explained_words_round_trip() {
    assert_eq!(shell_words(r#"a 'b c' 'it'\''s' "#), ["a", "b c", "it's"]);
}

#[test]
fn builtin_confines_like_the_sandbox_promises() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/.git/config", "[core]\n");
    t.put("ws/sub/keep", "");
    let ws = t.ws.display();
    let o = t.outside.display();
    let host_ns = std::fs::read_link("/proc/self/ns/pid")
        .expect("host pid ns")
        .display()
        .to_string();
    let script = format!(
        "{PRELUDE}\
         try remount-root mount -o remount,rw /\n\
         try umount-git umount -l {ws}/.git\n\
         try bind mount --bind {ws} {o}\n\
         try git-config sh -c 'echo evil >> .git/config'\n\
         try codex sh -c 'mkdir -p .codex/x'\n\
         try outside sh -c 'echo x > {o}/planted'\n\
         try unshare-user unshare -U true\n\
         try unshare-mount unshare -m true\n\
         try nsenter nsenter -t 1 -m true\n\
         try caps sh -c 'grep -E \"^Cap(Prm|Eff|Bnd|Amb):\" /proc/self/status | grep -v 0000000000000000'\n\
         try no-nnp sh -c 'grep -q \"NoNewPrivs:.1\" /proc/self/status && exit 1 || exit 0'\n\
         try no-seccomp sh -c 'grep -q \"Seccomp:.2\" /proc/self/status && exit 1 || exit 0'\n\
         try host-uid-map sh -c 'grep -q \"0 *0 *4294967295\" /proc/self/uid_map'\n\
         try cgroup sh -c 'mkdir /sys/fs/cgroup/codexbox-attack-builtin'\n\
         try extra-fds sh -c 'test $(ls /proc/self/fd | wc -l) -gt 4'\n\
         must ws-write sh -c 'echo ok > sub/new'\n\
         must own-pid-ns sh -c 'test \"$(readlink /proc/self/ns/pid)\" != {host_ns}'\n"
    );
    let out = run(&t.ws, &workspace(&[], "restricted"), &script);
    let _ = std::fs::remove_dir("/sys/fs/cgroup/codexbox-attack-builtin");
    assert_markers(
        &out,
        &[
            "remount-root",
            "umount-git",
            "bind",
            "git-config",
            "codex",
            "outside",
            "unshare-user",
            "unshare-mount",
            "nsenter",
            "caps",
            "no-nnp",
            "no-seccomp",
            "host-uid-map",
            "cgroup",
            "extra-fds",
        ],
        &["ws-write", "own-pid-ns"],
    );
    assert_eq!(t.read("ws/.git/config").as_deref(), Some("[core]\n"));
    assert!(t.names("outside").is_empty());
}

#[test]
fn builtin_sysctls_are_read_only() {
    if !ready() || !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let script = "python3 -c '
import os
bad = []
for top, dirs, files in os.walk(\"/proc/sys\"):
    for f in files:
        try:
            os.close(os.open(os.path.join(top, f), os.O_WRONLY)); bad.append(f)
        except OSError:
            pass
print(\"ESCAPE:sysctl-write %d\" % len(bad) if bad else \"held:sysctl-write\")
print(\"ok:read\" if open(\"/proc/sys/kernel/ostype\").read().strip() == \"Linux\" else \"BROKEN:read\")
'";
    let out = run(&t.ws, &workspace(&[], "restricted"), script);
    assert_markers(&out, &["sysctl-write"], &["read"]);
}

#[test]
fn builtin_pid1_holds_nothing_of_the_host() {
    if !ready() || !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let script = "python3 -c '
import os
names = os.listdir(\"/proc/1/fd\") if os.access(\"/proc/1/fd\", os.R_OK) else []
targets = []
for n in names:
    try:
        targets.append(os.readlink(\"/proc/1/fd/\" + n))
    except OSError:
        pass
host = [x for x in targets if not x.startswith((\"/dev/null\", \"pipe:\", \"anon_inode:\", \"socket:\", \"/dev/pts\"))]
print(\"ESCAPE:pid1-fds %s\" % host if host else \"held:pid1-fds\")
try:
    root = os.readlink(\"/proc/1/root\"); print(\"ESCAPE:pid1-root\" if root != \"/\" else \"held:pid1-root\")
except OSError:
    print(\"held:pid1-root\")
print(\"ok:ran\")
'";
    let out = run(&t.ws, &workspace(&[], "restricted"), script);
    assert_markers(&out, &["pid1-fds", "pid1-root"], &["ran"]);
}
