//! Escape attempts against the process half of the sandbox, through the
//! real binary (`codexbox linux-sandbox`), as root, with the system
//! bubblewrap, the built-in bubblewrap and the Landlock backend: forged
//! launcher errors, inherited and helper fds, sockets, dangerous syscalls,
//! keyrings, terminal injection, namespaces, host kernel state, file
//! capabilities, host processes, the inner-stage flags, legacy policy
//! flags, and what is left on the host after a killed run.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use crate::common::redteam::*;

/// A shell line that writes `message` to every fd of every process the
/// command can see (bubblewrap's pid 1 holds the helper's stderr pipe).
fn forge(message: &str) -> String {
    let message = message.replace('\'', "'\\''");
    format!(
        "for f in /proc/[0-9]*/fd/[0-9]*; do case \"$f\" in /proc/$$/*) ;; *) echo '{message}' > \"$f\" ;; esac; done 2>/dev/null\n"
    )
}

/// The command forges the launcher's "no user namespaces" error and fails:
/// the helper must not run it a second time (under the Landlock backend,
/// with weaker isolation), once is all the caller asked for.
fn forged_userns_failure_does_not_rerun(l: Launcher) {
    let t = Tree::new();
    t.put("ws/sub/keep", "");
    let script = format!(
        "echo run >> sub/runs\n{}exit 1\n",
        forge("bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces.")
    );
    let cmd = command(
        l,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        &["sh", "-c", &script],
    );
    // --backend auto: the one that falls back.
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let mut auto = Command::new(BIN);
    for a in args.iter().filter(|a| *a != "--backend" && *a != "bwrap") {
        auto.arg(a);
    }
    auto.current_dir(&t.ws).stdin(Stdio::null());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            auto.env(k, v);
        }
    }
    let out = auto.output().expect("run");
    log(l, &script, &out);
    assert_eq!(
        t.read("ws/sub/runs").as_deref(),
        Some("run\n"),
        "the command ran more than once: {}",
        stderr(&out)
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(!stderr(&out).contains("Landlock"), "{}", stderr(&out));
}

against!(forged_userns_failure_does_not_rerun:
    system,
    builtin);

/// Same with bubblewrap's `/proc` mount failure: a rerun without `/proc`
/// would also show the host's `/proc` (see `no_proc_hides_host_processes`).
fn forged_proc_failure_does_not_rerun(l: Launcher) {
    let t = Tree::new();
    t.put("ws/sub/keep", "");
    let script = format!(
        "echo run >> sub/runs\n{}exit 1\n",
        forge("bwrap: Can't mount proc on /newroot/proc: Invalid argument")
    );
    let out = sh(l, &t.ws, &workspace(&[], "restricted"), &[], &script);
    assert_eq!(
        t.read("ws/sub/runs").as_deref(),
        Some("run\n"),
        "the command ran more than once"
    );
    assert_eq!(out.status.code(), Some(1));
}

against!(forged_proc_failure_does_not_rerun:
    system,
    builtin);

/// bubblewrap's pid 1 inside the sandbox holds the helper's stderr pipe
/// (what the helper parses to decide on a rerun): the command must not get
/// hold of it, neither through `/proc/1/fd` nor with `pidfd_getfd`.
fn launcher_fds_are_out_of_reach(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let code = r#"
import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
got = []
for fd in range(0, 64):
    pfd = l.syscall(ctypes.c_long(434), ctypes.c_long(1), ctypes.c_long(0))
    if pfd >= 0:
        n = l.syscall(ctypes.c_long(438), ctypes.c_long(pfd), ctypes.c_long(fd), ctypes.c_long(0))
        if n >= 0:
            got.append(fd)
print("ESCAPE:pidfd_getfd %s" % got if got else "held:pidfd_getfd")
opened = []
for name in os.listdir("/proc/1/fd") if os.path.isdir("/proc/1/fd") else []:
    try:
        os.close(os.open("/proc/1/fd/" + name, os.O_WRONLY)); opened.append(name)
    except OSError:
        pass
print("ESCAPE:proc1-fd %s" % opened if opened else "held:proc1-fd")
print("ok:ran")
"#;
    let out = py(l, &t.ws, &workspace(&[], "restricted"), code);
    assert_markers(&out, &["pidfd_getfd", "proc1-fd"], &["ran"]);
}

against!(launcher_fds_are_out_of_reach:
    system,
    builtin);

/// `--no-proc` (restrictive containers) keeps the pid namespace: host
/// processes and their command lines must stay invisible.
fn no_proc_hides_host_processes(l: Launcher) {
    let t = Tree::new();
    let mut host = Command::new("sleep")
        .arg("987.654")
        .spawn()
        .expect("spawn sleep");
    let pid = host.id();
    let script = format!(
        "{PRELUDE}\
         try host-pid test -e /proc/{pid}/cmdline\n\
         try host-cmdline sh -c 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr \"\\0\" \" \" | grep -q 987.654'\n\
         try host-kill kill -0 {pid}\n\
         must echo echo hi\n"
    );
    let out = sh(l, &t.ws, "read-only", &["--no-proc"], &script);
    let _ = host.kill();
    let _ = host.wait();
    assert_markers(&out, &["host-pid", "host-cmdline", "host-kill"], &["echo"]);
}

against!(no_proc_hides_host_processes:
    system,
    builtin);

/// An fd the caller leaked (no CLOEXEC) must not reach the command, and
/// the command sees only its stdio.
fn inherited_fds_do_not_reach_the_command(l: Launcher) {
    let t = Tree::new();
    let leak = t.put("outside/leak", "");
    let script = format!(
        "{PRELUDE}\
         try fd7 sh -c 'echo x >&7'\n\
         try fd7-proc sh -c 'echo x > /proc/self/fd/7'\n\
         must stdout echo hi\n\
         echo fds: $(ls /proc/self/fd | sort -n | tr '\\n' ' ')\n"
    );
    let cmd = command(
        l,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        &["sh", "-c", &script],
    );
    let mut outer = Command::new("sh");
    outer
        .arg("-c")
        .arg("exec 7>>\"$0\"; exec \"$@\"")
        .arg(&leak)
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .current_dir(&t.ws)
        .stdin(Stdio::null());
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            outer.env(k, v);
        }
    }
    let out = outer.output().expect("run");
    log(l, &script, &out);
    assert_markers(&out, &["fd7", "fd7-proc"], &["stdout"]);
    // `ls` itself holds one directory fd (3).
    assert!(stdout(&out).contains("fds: 0 1 2 3\n"), "{}", stdout(&out));
    assert_eq!(t.read("outside/leak").as_deref(), Some(""));
}

against!(inherited_fds_do_not_reach_the_command: system,
    builtin,
    landlock);

/// Sockets with the network restricted: a host listener on an abstract
/// Unix address and on a socket file inside the writable workspace, and
/// every address family but AF_UNIX.
fn sockets_reach_nothing(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    use std::os::linux::net::SocketAddrExt;
    let t = Tree::new();
    let name = format!("codexbox-attack-{}-{:?}", std::process::id(), l);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
    let abstract_listener = std::os::unix::net::UnixListener::bind_addr(&addr).expect("bind");
    abstract_listener
        .set_nonblocking(true)
        .expect("nonblocking");
    let file_listener =
        std::os::unix::net::UnixListener::bind(t.ws.join("host.sock")).expect("bind file");
    file_listener.set_nonblocking(true).expect("nonblocking");
    let code = format!(
        r#"
import socket
def t(name, fn):
    try:
        fn(); print("ESCAPE:" + name)
    except OSError:
        print("held:" + name)
def conn(a):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(a)
t("abstract", lambda: conn(b"\0{name}"))
t("file-socket", lambda: conn("host.sock"))
def dgram():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b"x", "/dev/log")
t("dev-log", dgram)
opened = []
for fam in range(0, 46):
    if fam == socket.AF_UNIX:
        continue
    for ty in (1, 2, 3, 5, 10):
        try:
            socket.socket(fam, ty).close(); opened.append((fam, ty))
        except OSError:
            pass
print("ESCAPE:families %s" % opened if opened else "held:families")
a, b = socket.socketpair(); a.sendall(b"ping"); print("ok:socketpair" if b.recv(4) == b"ping" else "BROKEN:socketpair")
socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close(); print("ok:unix-stream")
"#
    );
    let out = py(l, &t.ws, &workspace(&[], "restricted"), &code);
    assert_markers(
        &out,
        &["abstract", "file-socket", "dev-log", "families"],
        &["socketpair", "unix-stream"],
    );
    assert!(
        abstract_listener.accept().is_err(),
        "abstract listener was reached"
    );
    assert!(
        file_listener.accept().is_err(),
        "socket file listener was reached"
    );
}

against!(sockets_reach_nothing: system,
    builtin, landlock);

/// Syscalls that would reach the host kernel or other processes.
fn dangerous_syscalls_fail(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let code = r#"
import ctypes, os
l = ctypes.CDLL(None, use_errno=True)
def sc(nr, *a):
    return l.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
def t(name, ok):
    # A refusal must be a permission error (EPERM/EACCES) or a missing
    # syscall (ENOSYS), not an argument error a privileged caller would get.
    e = ctypes.get_errno()
    refused = not ok and e in (1, 13, 38)
    print(("held:" if refused else "ESCAPE:") + name + ("" if refused else " errno=%d" % e))
buf = ctypes.create_string_buffer(256)
pp = os.getppid()
t("io_uring_setup", sc(425, 8, buf) >= 0)
t("ptrace_attach_parent", sc(101, 16, pp, 0, 0) == 0)
t("ptrace_traceme", sc(101, 0, 0, 0, 0) == 0)
iov = (ctypes.c_char * 16)()
t("process_vm_readv_parent", sc(310, pp, ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0) >= 0)
attr = (ctypes.c_uint32 * 32)(2, 4, 4, 1)  # BPF_MAP_TYPE_ARRAY, 4-byte key/value, 1 entry
t("bpf", sc(321, 0, attr, 128) >= 0)
t("perf_event_open", sc(298, buf, 0, -1, -1, 0) >= 0)
t("fsopen", sc(430, b"tmpfs", 0) >= 0)
t("open_tree_clone", sc(428, -100, b"/", 1 | 0x80000) >= 0)
t("mount_setattr", sc(442, -100, b"/", 0x8000, buf, 32) == 0)
t("kexec_load", sc(246, 0, 0, 0, 0) == 0)
t("init_module", sc(175, buf, 0, b"") == 0)
t("delete_module", sc(176, b"codexbox_attack_none", 0x800) == 0)
t("reboot_cad_off", sc(169, 0xfee1dead, 672274793, 0, 0) == 0)
t("acct", sc(163, b"/dev/null") == 0)
t("swapoff", sc(168, b"/dev/null") == 0)
t("chroot", sc(161, b"/") == 0)
t("unshare_user", sc(272, 0x10000000) == 0)
t("unshare_mount", sc(272, 0x00020000) == 0)
t("unshare_net", sc(272, 0x40000000) == 0)
t("clone_newuser", sc(56, 0x10000000 | 17, 0, 0, 0, 0) == 0)
args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)
r = sc(435, ctypes.byref(args), 88)
if r == 0:
    os._exit(0)
t("clone3_newuser", r > 0)
t("add_key", sc(248, b"user", b"codexbox-attack", b"x", 1, -3) >= 0)
t("request_key", sc(249, b"user", b"codexbox-attack", b"callout", -3) >= 0)
for ns in ("mnt", "net", "pid", "user", "uts", "ipc", "cgroup"):
    try:
        if os.stat("/proc/1/ns/" + ns).st_ino == os.stat("/proc/self/ns/" + ns).st_ino:
            print("held:setns_" + ns)  # pid 1 shares it: nothing to join
            continue
        fd = os.open("/proc/1/ns/" + ns, os.O_RDONLY)
        t("setns_" + ns, sc(308, fd, 0) == 0)
    except OSError:
        ctypes.set_errno(13)
        t("setns_" + ns, False)
r, w = os.pipe(); os.write(w, b"ok"); print("ok:pipe" if os.read(r, 2) == b"ok" else "BROKEN:pipe")
print("ok:fork" if os.fork() or os._exit(0) else "BROKEN:fork")
"#;
    let out = py(l, &t.ws, &workspace(&[], "restricted"), code);
    let held = vec![
        "io_uring_setup",
        "ptrace_attach_parent",
        "process_vm_readv_parent",
        "bpf",
        "perf_event_open",
        "fsopen",
        "open_tree_clone",
        "mount_setattr",
        "kexec_load",
        "init_module",
        "delete_module",
        "reboot_cad_off",
        "acct",
        "swapoff",
        "chroot",
        "unshare_user",
        "unshare_mount",
        "unshare_net",
        "clone_newuser",
        "clone3_newuser",
        "add_key",
        "request_key",
        "setns_mnt",
        "setns_net",
        "setns_user",
    ];
    let s = stdout(&out);
    // ptrace(TRACEME) is harmless; it is listed to show the filter's reach.
    let s: String = s
        .lines()
        .filter(|line| !line.ends_with("ptrace_traceme"))
        .map(|line| format!("{line}\n"))
        .collect();
    let filtered = std::process::Output {
        status: out.status,
        stdout: s.into_bytes(),
        stderr: out.stderr.clone(),
    };
    assert_markers(&filtered, &held, &["pipe", "fork"]);
}

against!(dangerous_syscalls_fail:
    system,
    builtin,
    landlock);

/// The caller's session keyring: a key the caller possesses must not be
/// readable (or searchable) from inside.
fn caller_keys_stay_private(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let mut flags = vec![
        "--sandbox-policy-cwd".to_owned(),
        t.ws.display().to_string(),
    ];
    flags.extend(["--permission-profile".to_owned(), "read-only".to_owned()]);
    flags.extend(l.flags().iter().map(|s| s.to_string()));
    let host = r#"
import ctypes, subprocess, sys, json
l = ctypes.CDLL(None, use_errno=True)
l.syscall(250, 1, b"codexbox-attack")                     # join a fresh session keyring
kid = l.syscall(248, b"user", b"codexbox-attack", b"K3YDATA", 7, ctypes.c_long(-3))
b = ctypes.create_string_buffer(64)
n = l.syscall(250, 11, kid, b, 64)
print("ok:host-read" if b.value == b"K3YDATA" else "BROKEN:host-read")
inner = ("import ctypes\n"
    "l = ctypes.CDLL(None, use_errno=True)\n"
    "b = ctypes.create_string_buffer(64)\n"
    "n = l.syscall(250, 11, %d, b, 64)\n"
    "print('ESCAPE:read-key' if b.value == b'K3YDATA' else 'held:read-key')\n"
    "s = l.syscall(250, 10, ctypes.c_long(-3), b'user', b'codexbox-attack', 0)\n"
    "print('ESCAPE:search-key' if s > 0 else 'held:search-key')\n"
    "j = l.syscall(250, 1, b'codexbox-attack')\n"
    "n = l.syscall(250, 11, %d, b, 64)\n"
    "print('ESCAPE:join-named' if b.value == b'K3YDATA' else 'held:join-named')\n"
    "print('ok:inner')\n") % (kid, kid)
sys.stdout.flush()
subprocess.run([sys.argv[1], "linux-sandbox", *json.loads(sys.argv[2]), "--", "python3", "-c", inner])
"#;
    let out = Command::new("python3")
        .args([
            "-c",
            host,
            BIN,
            &serde_json::to_string(&flags).expect("json"),
        ])
        .env(
            "CODEXBOX_BWRAP",
            if l == Launcher::Builtin {
                "builtin"
            } else {
                "system"
            },
        )
        .current_dir(&t.ws)
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    log(l, "keyring", &out);
    assert_markers(
        &out,
        &["read-key", "search-key", "join-named"],
        &["host-read", "inner"],
    );
}

against!(caller_keys_stay_private: system,
    builtin, landlock);

/// TIOCSTI on the caller's terminal: the command runs on a pty whose
/// input it must not be able to fake. Control: the same injection outside
/// the sandbox works (root holds CAP_SYS_ADMIN).
fn terminal_injection_fails(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let inject = "import fcntl, termios, os\n\
                  ok = os.isatty(0)\n\
                  try:\n    [fcntl.ioctl(0, termios.TIOCSTI, bytes([c])) for c in b'ZQJ']\n    print('INJECTED')\n\
                  except OSError as e:\n    print('refused', e.errno)\n\
                  print('tty' if ok else 'notty')\n";
    let driver = r#"
import os, pty, select, sys
pid, fd = pty.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
out = b""
while True:
    r, _, _ = select.select([fd], [], [], 30)
    if not r:
        break
    try:
        d = os.read(fd, 4096)
    except OSError:
        break
    if not d:
        break
    out += d
os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
"#;
    let run_pty = |argv: Vec<String>| {
        let out = Command::new("python3")
            .arg("-c")
            .arg(driver)
            .args(&argv)
            .env(
                "CODEXBOX_BWRAP",
                if l == Launcher::Builtin {
                    "builtin"
                } else {
                    "system"
                },
            )
            .current_dir(&t.ws)
            .stdin(Stdio::null())
            .output()
            .expect("python3");
        log(l, "pty", &out);
        stdout(&out)
    };
    let control = run_pty(vec!["python3".into(), "-c".into(), inject.into()]);
    assert!(
        control.contains("INJECTED") && control.contains("tty"),
        "control: {control}"
    );
    let mut argv = vec![
        BIN.to_owned(),
        "linux-sandbox".into(),
        "--sandbox-policy-cwd".into(),
        t.ws.display().to_string(),
        "--permission-profile".into(),
        "read-only".into(),
    ];
    argv.extend(l.flags().iter().map(|s| s.to_string()));
    argv.extend(["--".into(), "python3".into(), "-c".into(), inject.into()]);
    let inside = run_pty(argv);
    assert!(inside.contains("refused"), "{inside}");
    assert!(
        inside.contains("tty"),
        "the command must run on the pty: {inside}"
    );
    assert!(
        !inside.contains("INJECTED") && !inside.contains("ZQJ"),
        "{inside}"
    );
}

against!(terminal_injection_fails: system,
    builtin, landlock);

/// Nested namespaces and joining the host's (with the Landlock backend pid
/// 1 is the host's init).
fn namespaces_cannot_be_made_or_joined(l: Launcher) {
    let t = Tree::new();
    let script = format!(
        "{PRELUDE}\
         try unshare-user unshare -U true\n\
         try unshare-root unshare -Ur true\n\
         try unshare-mount unshare -m true\n\
         try unshare-net unshare -n true\n\
         try unshare-pid unshare -pf true\n\
         try unshare-ipc unshare -i true\n\
         try unshare-uts unshare -u true\n\
         try unshare-cgroup unshare -C true\n\
         try unshare-time unshare -T true\n\
         try nsenter-mnt nsenter -t 1 -m true\n\
         try nsenter-net nsenter -t 1 -n true\n\
         try nsenter-user nsenter -t 1 -U true\n\
         try nsenter-all nsenter -t 1 -a true\n\
         must own-ns readlink /proc/self/ns/mnt\n"
    );
    let out = sh(l, &t.ws, &workspace(&[], "restricted"), &[], &script);
    assert_markers(
        &out,
        &[
            "unshare-user",
            "unshare-root",
            "unshare-mount",
            "unshare-net",
            "unshare-pid",
            "unshare-ipc",
            "unshare-uts",
            "unshare-cgroup",
            "unshare-time",
            "nsenter-mnt",
            "nsenter-net",
            "nsenter-user",
            "nsenter-all",
        ],
        &["own-ns"],
    );
}

against!(namespaces_cannot_be_made_or_joined: system,
    builtin, landlock);

/// Host kernel state: cgroups, sysfs, procfs knobs, device nodes, the
/// hostname, `/dev/shm`. Files are only opened for writing (nothing is
/// written), so a failure of the sandbox cannot harm the host.
fn host_kernel_state_is_read_only(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    t.put("ws/sub/keep", "");
    let shm = format!("codexbox-attack-{}-{:?}", std::process::id(), l);
    let code = format!(
        r#"
import os, glob, socket
def t(name, fn):
    try:
        fn(); print("ESCAPE:" + name)
    except (OSError, ValueError):
        print("held:" + name)
def wopen(path):
    os.close(os.open(path, os.O_WRONLY))
targets = ["/sys/kernel/uevent_helper", "/sys/power/state", "/sys/kernel/mm/ksm/run"]
targets += glob.glob("/sys/fs/cgroup/**/cgroup.procs", recursive=True)[:20]
targets += glob.glob("/sys/fs/cgroup/**/tasks", recursive=True)[:20]
targets += glob.glob("/sys/class/net/*/mtu")
bad = []
for p in targets:
    try:
        wopen(p); bad.append(p)
    except OSError:
        pass
print("ESCAPE:open-for-write %s" % bad if bad else "held:open-for-write")
made = []
for d in ["/sys/fs/cgroup"] + glob.glob("/sys/fs/cgroup/*/"):
    try:
        os.mkdir(os.path.join(d, "codexbox-attack")); made.append(d)
    except OSError:
        pass
print("ESCAPE:cgroup-mkdir %s" % made if made else "held:cgroup-mkdir")
t("mknod-block", lambda: os.mknod("sub/sda", 0o600 | 0o060000, os.makedev(8, 0)))
t("mknod-mem", lambda: os.mknod("sub/mem", 0o600 | 0o020000, os.makedev(1, 1)))
t("open-kmsg-write", lambda: wopen("/dev/kmsg"))
t("open-mem", lambda: wopen("/dev/mem"))
t("sethostname", lambda: socket.sethostname("codexbox-attack"))
try:
    open("/dev/shm/{shm}", "w").close()
except OSError:
    pass
print("ok:ran")
"#
    );
    let out = py(l, &t.ws, &workspace(&[], "restricted"), &code);
    for d in ["/sys/fs/cgroup"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .chain(
            std::fs::read_dir("/sys/fs/cgroup")
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path()),
        )
    {
        let _ = std::fs::remove_dir(d.join("codexbox-attack"));
    }
    let host_shm = std::path::Path::new("/dev/shm").join(&shm);
    let leaked = host_shm.exists();
    let _ = std::fs::remove_file(&host_shm);
    assert_markers(
        &out,
        &[
            "open-for-write",
            "cgroup-mkdir",
            "mknod-block",
            "mknod-mem",
            "open-kmsg-write",
            "open-mem",
            "sethostname",
        ],
        &["ran"],
    );
    assert!(
        !leaked,
        "a file written to /dev/shm inside appeared on the host"
    );
    assert_eq!(t.names("ws/sub"), ["keep"]);
}

against!(host_kernel_state_is_read_only: system,
    builtin, landlock);

/// Sysctls are host kernel state (`kernel.core_pattern` or
/// `kernel.modprobe` name programs the kernel runs as host root): no file
/// under `/proc/sys`, nor `/proc/sysrq-trigger`, may be opened for writing.
/// Nothing is written. Control: they are readable.
fn sysctls_are_read_only(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let code = r#"
import os
bad = []
for top, dirs, files in os.walk("/proc/sys"):
    for f in files:
        p = os.path.join(top, f)
        try:
            os.close(os.open(p, os.O_WRONLY)); bad.append(p)
        except OSError:
            pass
for p in ["/proc/sysrq-trigger"]:
    try:
        os.close(os.open(p, os.O_WRONLY)); bad.append(p)
    except OSError:
        pass
print("ESCAPE:sysctl-write %d %s" % (len(bad), bad[:8]) if bad else "held:sysctl-write")
print("ok:read" if open("/proc/sys/kernel/ostype").read().strip() == "Linux" else "BROKEN:read")
"#;
    let out = py(l, &t.ws, &workspace(&[], "restricted"), code);
    assert_markers(&out, &["sysctl-write"], &["read"]);
}

against!(sysctls_are_read_only:
    system,
    builtin,
    landlock);

/// File capabilities and setuid bits give nothing (no_new_privs).
fn file_capabilities_grant_nothing(l: Launcher) {
    let Some(setcap) = which("setcap").or_else(|| {
        ["/usr/sbin/setcap", "/sbin/setcap"]
            .into_iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.is_file())
    }) else {
        crate::common::host::host_has("setcap", Err("not installed".into()));
        return;
    };
    let t = Tree::new();
    let grep = which("grep").expect("grep");
    let capgrep = t.ws.join("capgrep");
    std::fs::copy(&grep, &capgrep).expect("copy grep");
    let ok = Command::new(&setcap)
        .args(["cap_sys_admin,cap_dac_override,cap_sys_ptrace,cap_net_admin+eip"])
        .arg(&capgrep)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "setcap failed on the host (control)");
    let suid = t.ws.join("suidgrep");
    std::fs::copy(&grep, &suid).expect("copy grep");
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    let out = sh(
        l,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        "./capgrep -E '^Cap(Prm|Eff|Amb):' /proc/self/status; ./suidgrep -E '^(Cap(Prm|Eff)|NoNewPrivs):' /proc/self/status",
    );
    let s = stdout(&out);
    // The capability binary either runs with nothing or is refused at
    // exec (the kernel's answer for a capability-dumb binary that cannot
    // get all of its file capabilities).
    let capgrep_ran = s.lines().filter(|l| l.starts_with("Cap")).count() == 5;
    assert!(
        capgrep_ran || stderr(&out).contains("capgrep: Operation not permitted"),
        "{s}\n{}",
        stderr(&out)
    );
    for line in s.lines().filter(|l| l.starts_with("Cap")) {
        assert!(line.ends_with("0000000000000000"), "{line}\n{s}");
    }
    assert!(
        s.contains("NoNewPrivs:\t1"),
        "the setuid binary must run: {s}"
    );
}

against!(file_capabilities_grant_nothing: system,
    builtin, landlock);

/// The inner-stage flags given from outside, through the
/// `codex-linux-sandbox` argv[0] name too, never run a command unsandboxed.
#[test]
fn inner_stage_flags_from_outside_are_refused() {
    let t = Tree::new();
    let link = t.root.join("codex-linux-sandbox");
    std::os::unix::fs::symlink(BIN, &link).expect("symlink");
    let planted = t.outside.join("planted");
    let script = format!("echo pwned > {}", planted.display());
    let profile = workspace(&[], "restricted");
    let ws = t.ws.display().to_string();
    let variants: Vec<Vec<&str>> = vec![
        vec!["--apply-seccomp-then-exec"],
        vec!["--apply-seccomp-then-exec", "--restore-stderr-fd", "2"],
        vec!["--apply-seccomp-then-exec", "--backend", "bwrap"],
        vec!["--apply-seccomp-then-exec", "--command-cwd", "/"],
    ];
    for extra in variants {
        for program in [link.as_path(), std::path::Path::new(BIN)] {
            let mut cmd = Command::new(program);
            if program == std::path::Path::new(BIN) {
                cmd.arg("linux-sandbox");
            }
            let out = cmd
                .args([
                    "--sandbox-policy-cwd",
                    &ws,
                    "--permission-profile",
                    &profile,
                ])
                .args(&extra)
                .args(["--", "sh", "-c", &script])
                .stdin(Stdio::null())
                .output()
                .expect("run");
            log(Launcher::System, &format!("{extra:?}"), &out);
            assert_ne!(out.status.code(), Some(0), "{extra:?}");
            assert!(
                !planted.exists(),
                "{program:?} {extra:?} ran the command unsandboxed"
            );
        }
    }
    // Control: the same command through the normal path is merely denied.
    if available(Launcher::System) {
        let out = sh(
            Launcher::System,
            &t.ws,
            &profile,
            &[],
            &format!("{script}; echo ran"),
        );
        assert!(stdout(&out).contains("ran"));
        assert!(!planted.exists());
    }
}

/// Older policy flags must not grant more than they say: the historical
/// read-only shape with a restricted `access` lists what may be read.
#[test]
fn legacy_policy_flags_grant_no_more_than_asked() {
    if !available(Launcher::System) {
        return;
    }
    let t = Tree::new();
    t.put("ws/notes.txt", "PRIVATE-NOTES");
    let run = |policy: &str| {
        let out = Command::new(BIN)
            .args(["linux-sandbox", "--sandbox-policy-cwd"])
            .arg(&t.ws)
            .args(["--sandbox-policy", policy, "--", "cat", "notes.txt"])
            .current_dir(&t.ws)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        log(Launcher::System, policy, &out);
        stdout(&out)
    };
    // Control: plain read-only reads the workspace.
    assert!(run(r#"{"type":"read-only"}"#).contains("PRIVATE-NOTES"));
    for policy in [
        r#"{"type":"read-only","access":{"type":"restricted","include_platform_defaults":true,"readable_roots":["/usr"]}}"#,
        r#"{"type":"workspace-write","writable_roots":[],"read_only_access":{"type":"restricted","include_platform_defaults":true,"readable_roots":["/usr"]},"exclude_tmpdir_env_var":true,"exclude_slash_tmp":true}"#,
    ] {
        // Either refused or honoured; never silently widened.
        let s = run(policy);
        if policy.contains("workspace-write") {
            // The workspace itself is writable (and so readable) there.
            continue;
        }
        assert!(
            !s.contains("PRIVATE-NOTES"),
            "{policy} granted a read outside its readable roots"
        );
    }
    let outside = t.put("outside/secret", "OUTSIDE-SECRET");
    let s = {
        let out = Command::new(BIN)
            .args(["linux-sandbox", "--sandbox-policy-cwd"])
            .arg(&t.ws)
            .args([
                "--sandbox-policy",
                r#"{"type":"workspace-write","writable_roots":[],"read_only_access":{"type":"restricted","include_platform_defaults":true,"readable_roots":[]},"exclude_tmpdir_env_var":true,"exclude_slash_tmp":true}"#,
                "--",
                "cat",
            ])
            .arg(&outside)
            .current_dir(&t.ws)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        stdout(&out)
    };
    assert!(!s.contains("OUTSIDE-SECRET"), "read_only_access ignored");
}

/// Mount points bubblewrap created in the workspace are
/// gone after the run, also when the helper itself is killed with SIGKILL
/// (what the exec-server's terminate does to the process tree): the next
/// run in that workspace at the latest removes them.
#[test]
fn no_leftovers_after_the_helper_is_killed() {
    if !available(Launcher::System) {
        return;
    }
    let t = Tree::new();
    t.put("ws/src/main.rs", "fn main() {}\n");
    let mut child = command(
        Launcher::System,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        &["sh", "-c", "echo started; exec sleep 60"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .expect("spawn");
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line, "started\n");
    assert!(
        t.names("ws").len() > 1,
        "the run should have created mount points: {:?}",
        t.names("ws")
    );
    let _ = child.kill(); // SIGKILL: no cleanup possible in the helper
    let _ = child.wait();
    // bwrap dies with its parent; give the pid namespace its teardown.
    let out = sh(
        Launcher::System,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        "true",
    );
    assert!(out.status.success());
    assert_eq!(t.names("ws"), ["src"], "leftovers on the host");
}

/// A sandboxed command that can write a directory on the caller's PATH
/// (a writable root such as `~/.local` with `~/.local/bin` on PATH) plants
/// a `bwrap` there: the next sandboxed run must not execute it outside the
/// sandbox. Launcher selection only skips binaries under the current
/// directory; it should skip every writable root.
#[test]
fn planted_bwrap_in_a_writable_root_is_never_launched() {
    if !available(Launcher::System) {
        return;
    }
    let t = Tree::new();
    let tools = t.root.join("tools");
    std::fs::create_dir_all(tools.join("bin")).expect("mkdir");
    let profile = workspace(&[entry(&tools, "write")], "restricted");
    let path = format!(
        "{}:{}",
        tools.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let pwned = t.outside.join("pwned");
    let plant = format!(
        "printf '#!/bin/sh\\necho ESCAPED >> {}\\nexit 1\\n' > {}/bin/bwrap && chmod +x {}/bin/bwrap && echo planted",
        pwned.display(),
        tools.display(),
        tools.display()
    );
    let run = |script: &str| {
        let mut cmd = Command::new(BIN);
        cmd.args(["linux-sandbox", "--sandbox-policy-cwd"])
            .arg(&t.ws)
            .args(["--permission-profile", &profile, "--", "sh", "-c", script])
            .env("PATH", &path)
            .current_dir(&t.ws)
            .stdin(Stdio::null());
        let out = cmd.output().expect("run");
        log(Launcher::System, script, &out);
        out
    };
    let out = run(&plant);
    assert!(
        stdout(&out).contains("planted"),
        "control: the writable root is writable"
    );
    assert!(!pwned.exists());
    let out = run("echo second");
    assert!(
        !pwned.exists(),
        "the planted bwrap ran outside the sandbox: {}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("second"), "{}", stderr(&out));
}

/// A crashing command's core dump is written with the sandbox's view of
/// the filesystem: nothing lands in a read-only working directory.
fn core_dumps_respect_the_sandbox(l: Launcher) {
    let t = Tree::new();
    t.put("ws/keep", "");
    let out = sh(
        l,
        &t.ws,
        "read-only",
        &[],
        "ulimit -c unlimited 2>/dev/null; sh -c 'kill -SEGV $$'; echo status $?",
    );
    assert!(
        stdout(&out).contains("status 139"),
        "control: the crash happens"
    );
    assert_eq!(t.names("ws"), ["keep"], "a core file was written");
}

against!(core_dumps_respect_the_sandbox: system,
    builtin, landlock);

/// System V IPC of the host: a root-owned (0600) shared-memory segment
/// must not be attachable from inside, and queues created inside must not
/// appear on the host. Control: the command's own private segment works.
fn host_sysv_ipc_is_unreachable(l: Launcher) {
    if !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let salt = (std::process::id() & 0xfff) as i32;
    let key: i32 = 0x5eed_0000 + (salt << 4) + l as i32;
    let qkey: i32 = 0x5eef_0000 + (salt << 4) + l as i32;
    // SAFETY: plain SysV calls on a fresh segment of 4096 bytes; the
    // pointer from shmat is checked and only 11 bytes are written.
    let sid = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | 0o600) };
    assert!(sid >= 0, "control: shmget on the host");
    // SAFETY: as above.
    let addr = unsafe { libc::shmat(sid, std::ptr::null(), 0) };
    assert!(addr as isize != -1, "control: shmat on the host");
    // SAFETY: `addr` maps at least 4096 writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(c"SHM-SECRET".as_ptr().cast::<u8>(), addr.cast::<u8>(), 11)
    };
    let code = format!(
        r#"
import ctypes
l = ctypes.CDLL(None, use_errno=True)
l.shmat.restype = ctypes.c_void_p
sid = l.shmget({key}, 0, 0)
a = l.shmat(sid, None, 0) if sid >= 0 else None
got = a is not None and a != ctypes.c_void_p(-1).value and ctypes.string_at(a, 10) == b"SHM-SECRET"
print("ESCAPE:attach-host-shm" if got else "held:attach-host-shm")
q = l.msgget({qkey}, 0o1000 | 0o600)
print("created-queue" if q >= 0 else "no-queue")
own = l.shmget(0, 4096, 0o1000 | 0o600)
b = l.shmat(own, None, 0) if own >= 0 else None
ok = b is not None and b != ctypes.c_void_p(-1).value
if ok:
    ctypes.memmove(b, b"mine", 4); ok = ctypes.string_at(b, 4) == b"mine"
print("ok:own-shm" if ok else "BROKEN:own-shm")
"#
    );
    let out = py(l, &t.ws, "read-only", &code);
    // SAFETY: detach and remove our own segment.
    unsafe {
        libc::shmdt(addr);
        libc::shmctl(sid, libc::IPC_RMID, std::ptr::null_mut());
    }
    // SAFETY: msgget without IPC_CREAT only looks the key up.
    let q = unsafe { libc::msgget(qkey, 0) };
    if q >= 0 {
        // SAFETY: removes the queue the sandboxed command created.
        unsafe { libc::msgctl(q, libc::IPC_RMID, std::ptr::null_mut()) };
    }
    assert_markers(&out, &["attach-host-shm"], &["own-shm"]);
    assert!(q < 0, "a message queue created inside appeared on the host");
}

against!(host_sysv_ipc_is_unreachable: system,
    builtin,
    landlock);

/// The chain of two findings with the default `--backend auto`: the
/// command forges bubblewrap's "no user namespaces" error, the helper
/// reruns it under Landlock, and there it sets the setuid bit on a
/// root-owned binary outside every writable root.
#[test]
fn forged_fallback_cannot_setuid_a_host_binary() {
    if !available(Launcher::System) {
        return;
    }
    let t = Tree::new();
    let tool = t.outside.join("tool");
    std::fs::copy("/bin/true", &tool).expect("copy");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let script = format!(
        "if [ $$ -lt 100 ]; then echo 'bwrap: No permissions to create a new namespace' > /proc/1/fd/2; exit 1; fi\n\
         chmod 4755 {} && echo SETUID",
        tool.display()
    );
    let out = Command::new(BIN)
        .args(["linux-sandbox", "--sandbox-policy-cwd"])
        .arg(&t.ws)
        .args([
            "--permission-profile",
            "workspace",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("CODEXBOX_BWRAP", "system")
        .current_dir(&t.ws)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    log(Launcher::System, &script, &out);
    let mode = std::fs::metadata(&tool).expect("stat").permissions().mode();
    assert_eq!(mode & 0o7777, 0o755, "host binary changed to {mode:o}");
    assert!(!stdout(&out).contains("SETUID"));
}

/// The 32-bit syscall entry (`int 0x80`) numbers syscalls differently:
/// a filter that did not check the architecture would let i386
/// `socket(AF_INET)` and `unshare(CLONE_NEWUSER)` through. Control: the
/// same code outside the sandbox gets a socket.
fn compat_syscalls_cannot_bypass_the_filter(l: Launcher) {
    if !cfg!(target_arch = "x86_64") || !crate::common::host::python3() {
        return;
    }
    let t = Tree::new();
    let code = r#"
import ctypes, mmap, sys
def call(nr, a=0, b=0, c=0):
    code = (bytes([0x53, 0xb8]) + nr.to_bytes(4, "little") + bytes([0xbb]) + a.to_bytes(4, "little")
            + bytes([0xb9]) + b.to_bytes(4, "little") + bytes([0xba]) + c.to_bytes(4, "little")
            + bytes([0xcd, 0x80, 0x5b, 0xc3]))  # push rbx; mov eax/ebx/ecx/edx; int 0x80; pop rbx; ret
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))()
print("start", flush=True)
s = call(359, 2, 1, 0)
print("ESCAPE:i386-socket" if s >= 0 else "held:i386-socket", flush=True)
u = call(310, 0x10000000)
print("ESCAPE:i386-unshare" if u == 0 else "held:i386-unshare", flush=True)
"#;
    let host = Command::new("python3")
        .args(["-c", code])
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    if !stdout(&host).contains("ESCAPE:i386-socket") {
        crate::common::host::not_applicable(&format!(
            "no 32-bit syscall entry here: {}",
            stdout(&host)
        ));
        return;
    }
    let out = py(l, &t.ws, "read-only", code);
    let s = stdout(&out);
    assert!(s.contains("start"), "{s}");
    assert!(!s.contains("ESCAPE"), "{s}");
    // Killed with SIGSYS (status 128+31 through the helper) or refused.
    assert!(
        out.status.code() == Some(159)
            || std::os::unix::process::ExitStatusExt::signal(&out.status) == Some(libc::SIGSYS)
            || s.contains("held:i386-unshare"),
        "{s} {:?}",
        out.status
    );
}

against!(compat_syscalls_cannot_bypass_the_filter: system, builtin, landlock);

/// The helper's own executable inside a writable root (a project that
/// installs the tool under `node_modules` or builds it in `target/`): a
/// sandboxed command must not replace it, or the next run executes the
/// replacement outside any sandbox. Hard link of the real binary, so the
/// test's binary is never touched.
#[test]
fn helper_executable_in_a_writable_root_cannot_be_replaced() {
    if !available(Launcher::System) {
        return;
    }
    let t = Tree::new();
    std::fs::create_dir_all(t.ws.join("bin")).expect("mkdir");
    let exe = t.ws.join("bin/codexbox");
    if std::fs::hard_link(BIN, &exe).is_err() {
        crate::common::host::not_applicable(
            "the test tree is on another filesystem: cannot hard-link the binary into it",
        );
        return;
    }
    let pwned = t.outside.join("pwned");
    let script = format!(
        "{PRELUDE}\
         try replace sh -c \"rm -f bin/codexbox && printf '#!/bin/sh\\necho PWNED > {}\\n' > bin/codexbox && chmod +x bin/codexbox\"\n\
         try overwrite sh -c 'cat /bin/true > bin/codexbox'\n\
         must ws-write sh -c 'echo ok > bin/other'\n",
        pwned.display()
    );
    let out = Command::new(&exe)
        .args(["linux-sandbox", "--sandbox-policy-cwd"])
        .arg(&t.ws)
        .args([
            "--permission-profile",
            &workspace(&[], "restricted"),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("CODEXBOX_BWRAP", "system")
        .current_dir(&t.ws)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    log(Launcher::System, &script, &out);
    // Whatever happened, run the workspace's binary once more.
    let _ = Command::new(&exe)
        .args(["sandbox", "--", "true"])
        .current_dir(&t.ws)
        .stdin(Stdio::null())
        .output();
    assert!(
        !pwned.exists(),
        "the replaced helper ran outside the sandbox"
    );
    assert_markers(&out, &["replace", "overwrite"], &["ws-write"]);
}
