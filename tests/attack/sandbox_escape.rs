//! Escape attempts through the real binary (`codexbox linux-sandbox`), as
//! root: each attack must fail, each ordinary action must succeed, and the
//! host must be unchanged afterwards.

use crate::common::sandbox::*;

#[test]
fn writes_outside_writable_roots_fail_and_inside_succeed() {
    require_sandbox!();
    let w = Ws::new();
    let out = sh(
        &w.ws,
        &workspace_only("restricted"),
        &[],
        &format!(
            "echo in > inside.txt && cat inside.txt; (echo out > {0}/f) 2>/dev/null || echo denied; \
             touch /etc/codexbox-escape 2>/dev/null || echo denied",
            w.outside.display()
        ),
    );
    assert!(out.status.success());
    assert_eq!(stdout(&out), "in\ndenied\ndenied\n");
    assert!(w.ws.join("inside.txt").exists());
    assert!(!w.outside.join("f").exists());
    assert!(!std::path::Path::new("/etc/codexbox-escape").exists());
}

#[test]
fn read_only_profile_denies_every_write() {
    require_sandbox!();
    let w = Ws::new();
    let out = sh(&w.ws, "read-only", &[], "echo x > f");
    assert!(!out.status.success());
    assert!(!w.ws.join("f").exists());
}

#[test]
fn git_config_and_codex_writes_are_denied_and_leave_nothing() {
    require_sandbox!();
    let w = Ws::new();
    w.write(".git/config", "[core]\n");
    let out = sh(
        &w.ws,
        &workspace_only("restricted"),
        &[],
        "(echo evil >> .git/config) 2>/dev/null || echo a-denied; mkdir -p .codex/x 2>/dev/null || echo b-denied; \
         (echo x > .codex/config.toml) 2>/dev/null || echo c-denied; mv .codex gone 2>/dev/null || echo d-denied; \
         rmdir .agents 2>/dev/null || echo e-denied; git status >/dev/null 2>&1; echo ok",
    );
    assert!(out.status.success());
    let s = stdout(&out);
    for marker in [
        "a-denied", "b-denied", "c-denied", "d-denied", "e-denied", "ok",
    ] {
        assert!(s.contains(marker), "{marker} missing in {s}");
    }
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_eq!(w.listing(), vec![".git".to_owned()], "no mount points left");
}

/// A `.codex` symlink in the workspace cannot be protected (a mount holds
/// the target, never the link the command could swap): the sandbox is
/// refused and the command never runs, as the reference refuses it, with
/// either launcher; `.git` and `.agents` likewise.
#[test]
fn symlinked_metadata_refuses_the_sandbox_with_either_launcher() {
    require_sandbox!();
    let mut launchers = vec!["builtin"];
    if crate::common::host::host_has(
        "bubblewrap on PATH",
        crate::common::host::runs("bwrap", &["--version"]),
    ) {
        launchers.push("system");
    }
    for name in [".codex", ".git", ".agents"] {
        for launcher in &launchers {
            let w = Ws::new();
            std::fs::create_dir_all(w.ws.join("decoy")).unwrap();
            std::os::unix::fs::symlink("decoy", w.ws.join(name)).unwrap();
            let script =
                format!("rm {name} && mkdir {name} && echo pwned > {name}/config; echo ran > ran");
            let out = std::process::Command::new(BIN)
                .arg("linux-sandbox")
                .arg("--sandbox-policy-cwd")
                .arg(&w.ws)
                .arg("--permission-profile")
                .arg(workspace_only("restricted"))
                .args(["--backend", "bwrap", "--", "sh", "-c", &script])
                .current_dir(&w.ws)
                .env("CODEXBOX_BWRAP", launcher)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let what = format!("{name} with the {launcher} launcher");
            assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(&out));
            let expected = format!(
                "error building bubblewrap command: cannot enforce sandbox read-only path {0} because it crosses writable symlink {0}",
                w.ws.join(name).display()
            );
            assert!(stderr(&out).contains(&expected), "{what}: {}", stderr(&out));
            assert!(!stderr(&out).contains("panicked"), "{what}");
            assert!(!w.ws.join("ran").exists(), "{what}: the command never ran");
            assert_eq!(
                std::fs::read_link(w.ws.join(name)).unwrap(),
                std::path::PathBuf::from("decoy"),
                "{what}"
            );
            assert_eq!(
                w.listing(),
                vec![name.to_owned(), "decoy".to_owned()],
                "{what}"
            );
        }
    }
}

#[test]
fn deny_carve_outs_and_reopened_writable_children() {
    require_sandbox!();
    let w = Ws::new();
    w.write("blocked/secret.txt", "s3cret");
    std::fs::create_dir_all(w.ws.join("blocked/allowed")).unwrap();
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
        &[],
        "cat blocked/secret.txt 2>/dev/null || echo r-denied; (echo x > blocked/new) 2>/dev/null || echo w-denied; \
         echo ok > blocked/allowed/f && cat blocked/allowed/f",
    );
    let s = stdout(&out);
    assert!(!s.contains("s3cret"), "{s}");
    assert!(
        s.contains("r-denied") && s.contains("w-denied") && s.contains("ok"),
        "{s}"
    );
    assert!(!w.ws.join("blocked/new").exists());
    assert_eq!(
        std::fs::read_to_string(w.ws.join("blocked/allowed/f")).unwrap(),
        "ok\n"
    );
}

#[test]
fn glob_denied_and_denied_files_are_unreadable() {
    require_sandbox!();
    let w = Ws::new();
    w.write("a/b/.env", "TOKEN=1");
    w.write("key.pem", "PRIVATE");
    w.write("a/readme.txt", "public");
    let p = profile(
        &[
            special("root", "read"),
            glob_entry("**/*.env", "deny"),
            glob_entry("**/.env", "deny"),
            path_entry(&w.ws.join("key.pem"), "deny"),
        ],
        "restricted",
    );
    let out = sh(
        &w.ws,
        &p,
        &[],
        "cat a/b/.env; cat key.pem; cat a/readme.txt",
    );
    let s = stdout(&out);
    assert!(s.contains("public"), "{s}");
    assert!(!s.contains("TOKEN") && !s.contains("PRIVATE"), "{s}");
}

#[test]
fn network_egress_fails_tcp_udp_dns() {
    require_sandbox!();
    let w = Ws::new();
    let out = sh(
        &w.ws,
        "read-only",
        &[],
        "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo TCP-OPEN; \
         getent hosts example.com >/dev/null && echo DNS-OK; \
         curl -s -m 2 http://1.1.1.1 >/dev/null 2>&1 && echo CURL-OK; echo done",
    );
    let s = stdout(&out);
    assert_eq!(s, "done\n", "{s}");
    if !crate::common::host::python3() {
        return;
    }
    let script = r#"
import socket
for fam, typ in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),
                 (socket.AF_INET6, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW),
                 (socket.AF_PACKET, socket.SOCK_RAW)]:
    try:
        s = socket.socket(fam, typ)
        try:
            s.sendto(b"x", ("1.1.1.1", 53)) if typ == socket.SOCK_DGRAM else None
            print("OPEN", fam, typ)
        except OSError:
            print("blocked-send", fam)
    except OSError:
        print("blocked", fam)
"#;
    let out = sh(&w.ws, "read-only", &[], &format!("python3 -c '{script}'"));
    assert!(!stdout(&out).contains("OPEN"), "{}", stdout(&out));
}

#[test]
fn host_unix_socket_is_unreachable_but_socketpair_works() {
    require_sandbox!();
    if !crate::common::host::python3() {
        return;
    }
    let w = Ws::new();
    let sock = w.outside.join("host.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
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
    let out = sh(&w.ws, "read-only", &[], &format!("python3 -c \"{script}\""));
    let s = stdout(&out);
    assert!(!s.contains("CONNECTED"), "{s}");
    assert!(s.contains("refused"), "{s}");
    assert!(s.contains("ping"), "local IPC must work: {s}");
    assert!(s.contains("sockopt"), "{s}");
    assert!(s.contains("asyncio 0"), "{s}");
}

#[test]
fn host_processes_are_invisible_unsignalable_and_unptraceable() {
    require_sandbox!();
    let w = Ws::new();
    let mut host = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let pid = host.id();
    let out = sh(
        &w.ws,
        "read-only",
        &[],
        &format!(
            "kill -0 {pid} 2>/dev/null && echo SIGNALLED; ls /proc | grep -qx {pid} && echo VISIBLE; \
             ls /proc | grep -c '^[0-9]' ; echo done"
        ),
    );
    let s = stdout(&out);
    assert!(!s.contains("SIGNALLED") && !s.contains("VISIBLE"), "{s}");
    assert!(s.ends_with("done\n"));
    if crate::common::host::python3() {
        let out = sh(
            &w.ws,
            "read-only",
            &[],
            "python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); \
             print(\"ptrace\", l.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno())'",
        );
        assert!(stdout(&out).contains("ptrace -1"), "{}", stdout(&out));
    }
    let _ = host.kill();
    let _ = host.wait();
}

#[test]
fn nested_user_namespaces_mounts_and_sysctl_fail() {
    require_sandbox!();
    let w = Ws::new();
    let out = sh(
        &w.ws,
        "read-only",
        &[],
        "unshare -U true 2>/dev/null && echo USERNS; unshare -Ur true 2>/dev/null && echo USERNS-ROOT; \
         mount -t tmpfs none /mnt 2>/dev/null && echo MOUNTED; \
         mount -o remount,rw / 2>/dev/null && echo REMOUNTED; \
         umount -l /proc 2>/dev/null && echo UMOUNTED; \
         echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo SYSCTL; \
         echo 1 > /sys/kernel/mm/ksm/run 2>/dev/null && echo SYSFS; echo done",
    );
    assert_eq!(stdout(&out), "done\n");
}

#[test]
fn command_holds_no_capabilities_and_no_new_privs_even_for_root() {
    require_sandbox!();
    let w = Ws::new();
    for network in ["restricted", "enabled"] {
        let out = sh(
            &w.ws,
            &workspace_only(network),
            &[],
            "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status",
        );
        let s = stdout(&out);
        for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert!(
                s.contains(&format!("{cap}:\t0000000000000000")),
                "{network}: {s}"
            );
        }
        assert!(s.contains("NoNewPrivs:\t1"), "{network}: {s}");
        assert!(s.contains("Seccomp:\t2"), "{network}: {s}");
    }
}

#[test]
fn dev_nodes_proc_and_tty_basics_work() {
    require_sandbox!();
    let w = Ws::new();
    let out = sh(
        &w.ws,
        "read-only",
        &[],
        "for n in null zero full random urandom tty; do test -c /dev/$n || echo MISSING-$n; done; \
         echo x > /dev/null && head -c 4 /dev/zero | wc -c; test -r /proc/self/status && echo proc; \
         test -d /proc/1 && echo pid1; echo $$",
    );
    let s = stdout(&out);
    assert!(!s.contains("MISSING"), "{s}");
    assert!(s.contains("4\nproc\npid1\n"), "{s}");
}

#[test]
fn no_proc_hides_the_host_proc_instead_of_exposing_it() {
    require_sandbox!();
    let w = Ws::new();
    let out = sh(
        &w.ws,
        "read-only",
        &["--no-proc"],
        "ls /proc | grep -c '^[0-9]'; echo ok",
    );
    assert_eq!(stdout(&out), "0\nok\n");
}

#[test]
#[cfg(target_arch = "x86_64")] // syscall numbers below are x86_64's
fn io_uring_and_process_vm_are_denied() {
    require_sandbox!();
    if !crate::common::host::python3() {
        return;
    }
    let w = Ws::new();
    let out = sh(
        &w.ws,
        "read-only",
        &[],
        "python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); p=ctypes.create_string_buffer(120); \
         print(\"uring\", l.syscall(425, 4, p), ctypes.get_errno()); \
         print(\"vm\", l.syscall(310, 1, p, 1, p, 1, 0), ctypes.get_errno())'",
    );
    let s = stdout(&out);
    assert!(s.contains("uring -1 1\n"), "{s}");
    assert!(s.contains("vm -1 1\n"), "{s}");
}

#[test]
fn caller_file_descriptors_do_not_leak_into_the_sandbox() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    require_sandbox!();
    let w = Ws::new();
    let dir = std::fs::File::open(&w.outside).unwrap();
    let raw = dir.as_raw_fd();
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("linux-sandbox")
        .arg("--sandbox-policy-cwd")
        .arg(&w.ws)
        .args(["--permission-profile", "read-only", "--", "sh", "-c"])
        .arg("ls /proc/self/fd | tr '\\n' ' '");
    // SAFETY: dup2 in the child before exec; no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 9) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_eq!(stdout(&out), "0 1 2 3 ", "{}", stderr(&out));
}
