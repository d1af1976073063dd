//! Attacks on the processes the sandbox starts for its own purposes, from
//! a command that shares their namespaces: with managed routing (`codexbox
//! sandbox --allow-domain`, routing without the DNS stub, and the
//! exec-server's `networkProxy`) and without it, through the system
//! bubblewrap and the built-in one, started by root and by uid 65534.
//!
//! The probe looks at every other process its `/proc` shows (the
//! launcher's pid 1 is the only one that may be there): it opens
//! `/proc/PID/mem` read-write and writes a byte back, reads `maps`,
//! `environ`, `fd`, `root` and `cwd`, signals it, takes a pidfd and
//! `pidfd_getfd`s through it, calls `process_vm_readv`, lists its own
//! inherited descriptors, and finally sends pid 1 every fatal signal it can
//! (`kill` and `pidfd_send_signal`): the `ok:ran` marker after that shows
//! pid 1 ignored them. Before the bridges were served from outside, the
//! routing helper sat in the command's pid namespace with the command's
//! uid, dumpable, and every one of these but `pidfd_getfd` and
//! `process_vm_readv` reached it.

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::json;

use crate::common::bwrap::{callers, descendants, tempdir_for, Caller, NOBODY};
use crate::common::client::{unb64, Raw, Server};
use crate::common::net::PROXY_VARS;
use crate::common::redteam::*;

/// The probe (python3): one marker line per attempt, `ok:ran` last.
const PROBE: &str = r#"
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
NR = {"pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424,
      "process_vm_readv": 310 if os.uname().machine == "x86_64" else 270}
def call(name, *args):
    return libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(a) for a in args])
def report(name, hits):
    print("ESCAPE:%s %s" % (name, hits) if hits else "held:%s" % name)
def cmdline(p):
    try:
        return open("/proc/%d/cmdline" % p, "rb").read().replace(b"\0", b" ")[:80]
    except OSError as e:
        return e.strerror
me = os.getpid()
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me)
report("foreign", [(p, cmdline(p)) for p in pids if p != 1])
hits = {k: [] for k in ("mem", "mem-write", "maps", "environ", "fd", "root",
                        "signal", "pidfd", "pidfd_getfd", "vm_readv")}
for p in pids:
    try:
        fd = os.open("/proc/%d/mem" % p, os.O_RDWR)
        hits["mem"].append(p)
        try:
            start = int(open("/proc/%d/maps" % p).readline().split("-")[0], 16)
            if os.pwrite(fd, os.pread(fd, 1, start), start) == 1:
                hits["mem-write"].append(p)
        except (OSError, ValueError):
            pass
        os.close(fd)
    except OSError:
        pass
    for name in ("maps", "environ"):
        try:
            open("/proc/%d/%s" % (p, name), "rb").read()
            hits[name].append(p)
        except OSError:
            pass
    try:
        os.listdir("/proc/%d/fd" % p)
        hits["fd"].append(p)
    except OSError:
        pass
    for link in ("root", "cwd"):
        try:
            os.listdir("/proc/%d/%s/" % (p, link))
            hits["root"].append((p, link))
        except OSError:
            pass
    if p != 1:
        try:
            os.kill(p, 0)
            hits["signal"].append(p)
        except OSError:
            pass
    pidfd = call("pidfd_open", p, 0)
    if pidfd >= 0:
        if p != 1:
            hits["pidfd"].append(p)
        for n in range(64):
            got = call("pidfd_getfd", pidfd, n, 0)
            if got >= 0:
                hits["pidfd_getfd"].append((p, n))
                os.close(got)
        os.close(pidfd)
    buf = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
    remote = (ctypes.c_void_p * 2)(0x400000, 8)
    if call("process_vm_readv", p, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0) >= 0:
        hits["vm_readv"].append(p)
for name, found in hits.items():
    report(name, found)
inherited = []
for n in range(3, 256):
    try:
        os.fstat(n)
        inherited.append((n, os.readlink("/proc/self/fd/%d" % n)))
    except OSError:
        pass
report("inherited-fd", inherited)
pidfd = call("pidfd_open", 1, 0)
for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1,
            signal.SIGSTOP, signal.SIGKILL):
    try:
        os.kill(1, sig)
    except OSError:
        pass
    if pidfd >= 0:
        call("pidfd_send_signal", pidfd, int(sig), 0, 0)
print("ok:ran")
"#;

/// Every attempt of [`PROBE`].
const ATTEMPTS: [&str; 12] = [
    "foreign",
    "mem",
    "mem-write",
    "maps",
    "environ",
    "fd",
    "root",
    "signal",
    "pidfd",
    "pidfd_getfd",
    "vm_readv",
    "inherited-fd",
];

/// How long one probe run may take before it counts as hung (pid 1
/// stopped by the probe would never report the command's end).
const RUN_LIMIT_SECS: &str = "120";

/// `timeout … [setpriv as caller] codexbox ARGS -- COMMAND…` in `cwd`
/// with `launcher`, proxy variables from `envs` only (not started yet).
fn codexbox_as(
    launcher: Launcher,
    caller: Caller,
    cwd: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
    command: &[&str],
) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["--signal=KILL", RUN_LIMIT_SECS]);
    if caller == Caller::Nobody {
        let id = NOBODY.to_string();
        cmd.args(["setpriv", "--reuid", &id, "--regid", &id, "--clear-groups"])
            .env_remove("XDG_RUNTIME_DIR")
            .env("HOME", "/nonexistent");
    }
    cmd.arg(BIN)
        .args(args)
        .arg("--")
        .args(command)
        .current_dir(cwd)
        .stdin(Stdio::null());
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(envs.iter().copied());
    only_std_fds(&mut cmd);
    launcher.apply(&mut cmd);
    cmd
}

/// Runs [`PROBE`] through `codexbox ARGS` (see [`codexbox_as`]).
fn probe_command(
    launcher: Launcher,
    caller: Caller,
    cwd: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Output {
    let mut cmd = codexbox_as(launcher, caller, cwd, args, envs, &["python3", "-c", PROBE]);
    let out = cmd.output().expect("run codexbox");
    log(launcher, &format!("as {caller:?}: codexbox {args:?}"), &out);
    out
}

/// Runs the probe as each caller through `args` and checks that nothing
/// was reached.
fn probe_as_every_caller(launcher: Launcher, args: &[&str], envs: &[(&str, &str)]) {
    if !crate::common::host::python3() {
        return;
    }
    for caller in callers() {
        let dir = tempdir_for(caller);
        let out = probe_command(launcher, caller, dir.path(), args, envs);
        assert_marker_lines(
            &stdout(&out),
            &format!("{launcher:?} as {caller:?}: {}", stderr(&out)),
            &ATTEMPTS,
            &["ran"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
}

/// `codexbox sandbox --allow-domain`: the bridges and the DNS stub run, and
/// nothing of them is inside.
fn managed_routing_leaves_nothing_to_take_over(l: Launcher) {
    probe_as_every_caller(l, &["sandbox", "--allow-domain", "allowed.test"], &[]);
}

against!(managed_routing_leaves_nothing_to_take_over: system, builtin);

/// Routing without the DNS stub (only a SOCKS proxy: bubblewrap makes the
/// network namespace): the same.
fn routing_without_the_stub_leaves_nothing_to_take_over(l: Launcher) {
    probe_as_every_caller(
        l,
        &[
            "linux-sandbox",
            "--sandbox-policy-cwd",
            ".",
            "--permission-profile",
            "read-only",
            "--backend",
            "bwrap",
            "--allow-network-for-proxy",
        ],
        &[("ALL_PROXY", "socks5h://127.0.0.1:9")],
    );
}

against!(routing_without_the_stub_leaves_nothing_to_take_over: system, builtin);

/// A sandbox without routing: the launcher's pid 1 is all there is.
fn an_unrouted_sandbox_leaves_nothing_to_take_over(l: Launcher) {
    probe_as_every_caller(l, &["sandbox"], &[]);
}

against!(an_unrouted_sandbox_leaves_nothing_to_take_over: system, builtin);

/// The exec-server's `networkProxy` with `enforceManagedNetwork`, the
/// server started by `caller`.
fn exec_server_network_proxy_leaves_nothing_to_take_over(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    let launcher = match l {
        Launcher::System => "system",
        _ => "builtin",
    };
    for caller in callers() {
        let ws = tempdir_for(caller);
        let mut command = Command::new(match caller {
            Caller::Current => BIN,
            Caller::Nobody => "setpriv",
        });
        if caller == Caller::Nobody {
            let id = NOBODY.to_string();
            command
                .args(["--reuid", &id, "--regid", &id, "--clear-groups", BIN])
                .env_remove("XDG_RUNTIME_DIR")
                .env("HOME", "/nonexistent");
        }
        command
            .args(["exec-server", "--listen", "ws://127.0.0.1:0"])
            .env_remove("CODEXBOX_AUTH_TOKEN")
            .env("CODEXBOX_BWRAP", launcher)
            .env("NO_PROXY", "*")
            .current_dir("/");
        let server = Server::start_command(command, "exec-server for the probe");
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let (text, result) = runtime.block_on(probe_through(&server, ws.path()));
        assert_marker_lines(
            &text,
            &format!("{launcher} as {caller:?}: {result}\n{}", server.stderr()),
            &ATTEMPTS,
            &["ran"],
        );
        assert_eq!(result["exitCode"], 0, "{result}");
    }
}

against!(exec_server_network_proxy_leaves_nothing_to_take_over: system, builtin);

/// Runs the probe as a sandboxed process with an enforced network proxy;
/// its output and the last read.
async fn probe_through(server: &Server, ws: &Path) -> (String, serde_json::Value) {
    let mut raw = Raw::connect(&server.url).await;
    raw.handshake().await;
    let proxy = json!({
        "proxy": {"enabled": true, "enableSocks5": true, "enableSocks5Udp": true,
            "allowUpstreamProxy": false, "dangerouslyAllowAllUnixSockets": false,
            "mode": "full", "domains": {"allowed.test": "allow"}, "unixSockets": null,
            "allowLocalBinding": false},
        "auditMetadata": {}, "environmentId": "probe", "executionId": "probe"
    });
    let params = json!({
        "processId": "probe", "argv": ["python3", "-c", PROBE], "cwd": ws,
        "env": {"PATH": "/usr/bin:/bin", "HTTP_PROXY": "http://127.0.0.1:9"},
        "tty": false, "networkProxy": proxy, "enforceManagedNetwork": true,
        "sandbox": {
            "permissions": {"type": "managed", "file_system": {"type": "restricted",
                "entries": [{"path": {"type": "special", "value": {"kind": "root"}},
                    "access": "read"}]},
                "network": "restricted"},
            "cwd": ws, "workspaceRoots": [ws], "windowsSandboxLevel": "disabled"
        }
    });
    raw.call("process/start", params).await;
    let result = raw.read_until_closed("probe", 0).await;
    let mut out = Vec::new();
    for chunk in result["chunks"].as_array().into_iter().flatten() {
        out.extend(unb64(chunk["chunk"].as_str().unwrap_or_default()));
    }
    (String::from_utf8_lossy(&out).into_owned(), result)
}

/// The pid namespace of `pid` and its pid in there (the last `NSpid`).
fn pid_namespace(pid: i32) -> Option<(std::path::PathBuf, i32)> {
    let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let inner = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()?;
    Some((ns, inner))
}

/// The signals `pid` has a handler for (`SigCgt`, a bit mask).
fn caught_signals(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned()
}

/// Seen from the host, while a routed sandbox runs: the command's pid
/// namespace holds the command (pid 2) and the launcher's pid 1, nothing
/// else, and that pid 1 has no signal handler (the kernel then drops every
/// signal sent to it from inside the namespace).
fn only_the_launchers_pid1_shares_the_commands_pid_namespace(l: Launcher) {
    for caller in callers() {
        let dir = tempdir_for(caller);
        let mut cmd = codexbox_as(
            l,
            caller,
            dir.path(),
            &["sandbox", "--allow-domain", "allowed.test"],
            &[],
            &["sh", "-c", "echo ready; exec cat"],
        );
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start codexbox sandbox");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the command's first line");
        assert_eq!(
            line, "ready\n",
            "{l:?} as {caller:?}: the sandbox did not start"
        );
        let command = descendants(i32::try_from(child.id()).expect("pid"))
            .into_iter()
            .find_map(|pid| {
                let (ns, inner) = pid_namespace(pid)?;
                (inner == 2).then_some(ns)
            });
        let namespace = command.expect("the command's pid namespace");
        let mut sharing: Vec<(i32, i32)> = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some((ns, inner)) = pid_namespace(pid) {
                if ns == namespace {
                    sharing.push((inner, pid));
                }
            }
        }
        sharing.sort_unstable();
        drop(child.stdin.take());
        let status = child.wait().expect("wait");
        let inner: Vec<i32> = sharing.iter().map(|(inner, _)| *inner).collect();
        assert_eq!(inner, [1, 2], "{l:?} as {caller:?}: {sharing:?}");
        let pid1 = sharing.first().map_or(0, |(_, pid)| *pid);
        assert_eq!(
            caught_signals(pid1),
            "0000000000000000",
            "{l:?} as {caller:?}: the launcher's pid 1 catches signals"
        );
        assert!(status.success(), "{l:?} as {caller:?}: {status:?}");
    }
}

against!(only_the_launchers_pid1_shares_the_commands_pid_namespace: system, builtin);
