//! The escape battery under the Landlock backend (`codexbox linux-sandbox
//! --backend landlock`), as root, asserting exactly what that backend
//! claims (README, "The Landlock backend"): what it stops, and the two
//! things it does not give (its own pid namespace; new entries at the top
//! of a root with protected metadata).

use crate::common::sandbox::*;

const LANDLOCK: &[&str] = &["--backend", "landlock"];

fn landlock_available() -> bool {
    crate::common::host::landlock()
}

macro_rules! require_landlock {
    () => {
        if !landlock_available() {
            return;
        }
    };
}

fn ws_with_subdir() -> Ws {
    let w = Ws::new();
    std::fs::create_dir_all(w.ws.join("sub")).expect("mkdir sub");
    w
}

#[test]
fn writes_outside_writable_roots_fail_and_inside_succeed() {
    require_landlock!();
    let w = ws_with_subdir();
    let out = sh(
        &w.ws,
        &workspace_only("restricted"),
        LANDLOCK,
        &format!(
            "echo in > sub/inside.txt && cat sub/inside.txt; (echo out > {0}/f) 2>/dev/null || echo denied; \
             touch /etc/codexbox-escape 2>/dev/null || echo denied; \
             (echo top > top.txt) 2>/dev/null || echo top-denied",
            w.outside.display()
        ),
    );
    let escaped = std::path::Path::new("/etc/codexbox-escape");
    let existed = escaped.exists();
    let _ = std::fs::remove_file(escaped);
    assert!(!existed, "wrote into /etc");
    assert!(out.status.success());
    assert_eq!(stdout(&out), "in\ndenied\ndenied\ntop-denied\n");
    assert!(!w.outside.join("f").exists());
}

#[test]
fn read_only_profile_denies_every_write() {
    require_landlock!();
    let w = ws_with_subdir();
    let out = sh(&w.ws, "read-only", LANDLOCK, "echo x > sub/f");
    assert!(!out.status.success());
    assert!(!w.ws.join("sub/f").exists());
}

#[test]
fn git_config_and_codex_writes_are_denied_and_leave_nothing() {
    require_landlock!();
    let w = Ws::new();
    w.write(".git/config", "[core]\n");
    let out = sh(
        &w.ws,
        &workspace_only("restricted"),
        LANDLOCK,
        "(echo evil >> .git/config) 2>/dev/null || echo a-denied; mkdir -p .codex/x 2>/dev/null || echo b-denied; \
         (echo x > .codex/config.toml) 2>/dev/null || echo c-denied; mv .git gone 2>/dev/null || echo d-denied; \
         (echo x > .git/hooks-pre-commit) 2>/dev/null || echo e-denied; git status >/dev/null 2>&1; echo ok",
    );
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "a-denied\nb-denied\nc-denied\nd-denied\ne-denied\nok\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/config")).expect("read"),
        "[core]\n"
    );
    assert_eq!(w.listing(), vec![".git".to_owned()], "nothing left behind");
}

/// A `.codex` symlink in the workspace cannot be protected (the command
/// could swap the link): the sandbox is refused, the command never runs.
#[test]
fn codex_symlink_to_decoy_refuses_the_sandbox() {
    require_landlock!();
    let w = ws_with_subdir();
    std::fs::create_dir_all(w.ws.join("decoy")).expect("mkdir");
    std::os::unix::fs::symlink("decoy", w.ws.join(".codex")).expect("symlink");
    let out = sh(
        &w.ws,
        &workspace_only("restricted"),
        LANDLOCK,
        "rm .codex && mkdir .codex && echo pwned > .codex/config.toml; echo ran > sub/ran",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "error building the Landlock sandbox: cannot enforce sandbox read-only path {0} because it crosses writable symlink {0}",
            w.ws.join(".codex").display()
        )),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("panicked"));
    assert!(!w.ws.join("sub/ran").exists(), "the command never ran");
    assert_eq!(
        std::fs::read_link(w.ws.join(".codex")).expect("link"),
        std::path::PathBuf::from("decoy")
    );
}

#[test]
fn deny_carve_outs_and_reopened_writable_children() {
    require_landlock!();
    let w = Ws::new();
    w.write("blocked/secret.txt", "s3cret");
    std::fs::create_dir_all(w.ws.join("blocked/allowed")).expect("mkdir");
    let p = profile(
        &[
            special("root", "read"),
            path_entry(&w.ws, "write"),
            path_entry(&w.ws.join("blocked"), "none"),
            path_entry(&w.ws.join("blocked/allowed"), "write"),
        ],
        "restricted",
    );
    let out = sh(
        &w.ws,
        &p,
        LANDLOCK,
        "cat blocked/secret.txt 2>/dev/null || echo r-denied; (echo x > blocked/new) 2>/dev/null || echo w-denied; \
         echo ok > blocked/allowed/f && cat blocked/allowed/f",
    );
    let s = stdout(&out);
    assert!(!s.contains("s3cret"), "{s}");
    assert_eq!(s, "r-denied\nw-denied\nok\n");
    assert!(!w.ws.join("blocked/new").exists());
}

#[test]
fn glob_denied_and_denied_files_are_unreadable() {
    require_landlock!();
    let w = Ws::new();
    w.write("a/b/.env", "TOKEN=1");
    w.write("key.pem", "PRIVATE");
    w.write("a/readme.txt", "public");
    let p = profile(
        &[
            special("root", "read"),
            glob_entry("**/*.env", "deny"),
            path_entry(&w.ws.join("key.pem"), "deny"),
        ],
        "restricted",
    );
    let out = sh(
        &w.ws,
        &p,
        LANDLOCK,
        "cat a/b/.env 2>/dev/null; cat key.pem 2>/dev/null; cat a/readme.txt",
    );
    assert_eq!(stdout(&out), "public");
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn network_egress_fails_tcp_udp_dns() {
    require_landlock!();
    let w = Ws::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let out = sh(
        &w.ws,
        "read-only",
        LANDLOCK,
        &format!(
            "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo TCP-OPEN; \
             getent hosts example.com >/dev/null && echo DNS-OK; echo done"
        ),
    );
    assert_eq!(stdout(&out), "done\n");
    if !crate::common::host::python3() {
        return;
    }
    let script = r#"
import socket
for fam, typ in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),
                 (socket.AF_INET6, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW),
                 (socket.AF_PACKET, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ)
        print("OPEN", fam, typ)
    except OSError:
        print("blocked", fam)
"#;
    let out = sh(
        &w.ws,
        "read-only",
        LANDLOCK,
        &format!("python3 -c '{script}'"),
    );
    assert!(!stdout(&out).contains("OPEN"), "{}", stdout(&out));
    assert_eq!(stdout(&out).matches("blocked").count(), 5);
}

#[test]
fn host_unix_socket_is_unreachable_but_local_ipc_works() {
    require_landlock!();
    if !crate::common::host::python3() {
        return;
    }
    let w = Ws::new();
    let sock = w.outside.join("host.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    let script = format!(
        "import socket\n\
         s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n\
         try:\n    s.connect('{}'); print('CONNECTED')\n\
         except OSError as e: print('refused', e.errno)\n\
         a, b = socket.socketpair(); a.sendall(b'ping'); print(b.recv(4).decode())\n\
         a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536); print('sockopt')\n\
         import asyncio\n\
         async def main():\n    p = await asyncio.create_subprocess_exec('true'); await p.wait(); return p.returncode\n\
         print('asyncio', asyncio.run(main()))\n",
        sock.display()
    );
    let out = sh(
        &w.ws,
        "read-only",
        LANDLOCK,
        &format!("python3 -c \"{script}\""),
    );
    assert_eq!(stdout(&out), "refused 1\nping\nsockopt\nasyncio 0\n");
}

#[test]
fn host_processes_are_visible_but_unsignalable_unptraceable_and_unreadable() {
    require_landlock!();
    let abi = codexbox::sandbox::probe::landlock_abi().unwrap_or(0);
    let w = Ws::new();
    let mut host = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .expect("spawn sleep");
    let pid = host.id();
    let out = sh(
        &w.ws,
        "read-only",
        LANDLOCK,
        &format!(
            "kill -0 {pid} 2>/dev/null && echo SIGNALLED; ls /proc | grep -qx {pid} && echo visible; \
             cat /proc/{pid}/environ >/dev/null 2>&1 && echo ENVIRON; echo done"
        ),
    );
    let _ = host.kill();
    let _ = host.wait();
    let s = stdout(&out);
    if abi >= 6 {
        assert_eq!(
            s, "visible\ndone\n",
            "no pid namespace, but no signals either"
        );
    } else {
        assert!(!s.contains("ENVIRON"), "{s}");
    }
    if crate::common::host::python3() {
        let out = sh(
            &w.ws,
            "read-only",
            LANDLOCK,
            &format!(
                "python3 -c 'import ctypes; l=ctypes.CDLL(None,use_errno=True); \
                 print(\"ptrace\", l.ptrace(16, {pid}, 0, 0), ctypes.get_errno()); \
                 print(\"io_uring\", l.syscall(425, 1, ctypes.create_string_buffer(120)), ctypes.get_errno())'"
            ),
        );
        assert_eq!(stdout(&out), "ptrace -1 1\nio_uring -1 1\n");
    }
}

#[test]
fn nested_user_namespaces_mounts_and_sysctl_fail() {
    require_landlock!();
    let w = Ws::new();
    let out = sh(
        &w.ws,
        "read-only",
        LANDLOCK,
        "unshare -U true 2>/dev/null && echo USERNS; unshare -Ur true 2>/dev/null && echo USERNS-ROOT; \
         mount -t tmpfs none /mnt 2>/dev/null && echo MOUNTED; \
         mount -o remount,rw / 2>/dev/null && echo REMOUNTED; \
         cat /proc/sys/kernel/sysrq > /proc/sys/kernel/sysrq 2>/dev/null && echo SYSCTL; \
         cat /sys/kernel/mm/ksm/run > /sys/kernel/mm/ksm/run 2>/dev/null && echo SYSFS; echo done",
    );
    assert_eq!(stdout(&out), "done\n");
}

#[test]
fn command_holds_no_capabilities_and_no_new_privs_even_for_root() {
    require_landlock!();
    let w = Ws::new();
    for network in ["restricted", "enabled"] {
        let out = sh(
            &w.ws,
            &workspace_only(network),
            LANDLOCK,
            "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status",
        );
        assert_eq!(
            stdout(&out),
            "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n\
             CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n",
            "{network}"
        );
    }
}

#[test]
fn dev_nodes_and_pipes_keep_working() {
    require_landlock!();
    let w = Ws::new();
    let out = sh(
        &w.ws,
        "read-only",
        LANDLOCK,
        "echo x > /dev/null && head -c 4 /dev/zero | wc -c && head -c 4 /dev/urandom | wc -c \
         && seq 1 50 | sort -n -r | head -1",
    );
    assert_eq!(stdout(&out), "4\n4\n50\n");
}
