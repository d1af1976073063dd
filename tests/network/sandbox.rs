//! Managed proxy routing for sandboxed commands, with the system bubblewrap
//! and the built-in one: `codexbox sandbox --allow-domain` reaches an
//! allowed origin with curl and Python urllib (HTTP, and HTTPS through
//! CONNECT to a local TLS origin), refuses a denied one with its reason and
//! names it at exit, cannot connect to anything directly, cannot open a new
//! Unix socket, resolves only allowed names through the DNS stub (for every
//! launcher, started by root and by uid 65534, the command holding no
//! capability), and leaves no bridge behind.
//! Origins are servers this file starts on 127.0.0.1; names reach them
//! through `--resolve`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::common::bwrap::{callers, tempdir_for, Caller, NOBODY};
use crate::common::net::{Origin, TlsOrigin, PROXY_VARS};
use crate::common::sandbox::{require_sandbox, stderr, stdout, Ws};

const BIN: &str = env!("CARGO_BIN_EXE_codexbox");

/// Which bubblewrap the helper uses.
#[derive(Debug, Clone, Copy)]
enum Launcher {
    System,
    Builtin,
}

impl Launcher {
    fn env(self) -> &'static str {
        match self {
            Launcher::System => "system",
            Launcher::Builtin => "builtin",
        }
    }

    fn usable(self) -> bool {
        match self {
            Launcher::System => {
                crate::common::bwrap::have_system_bwrap("managed routing with system bwrap")
            }
            Launcher::Builtin => true,
        }
    }
}

/// `codexbox sandbox [args] -- sh -c SCRIPT` in `cwd` with `launcher`.
fn sandbox(launcher: Launcher, cwd: &Path, args: &[&str], script: &str) -> Output {
    sandbox_as(launcher, Caller::Current, cwd, args, script)
}

/// [`sandbox`] started by `caller` (uid 65534 through `setpriv`, with no
/// runtime directory and no home, as a service account has).
fn sandbox_as(
    launcher: Launcher,
    caller: Caller,
    cwd: &Path,
    args: &[&str],
    script: &str,
) -> Output {
    let mut cmd = match caller {
        Caller::Current => Command::new(BIN),
        Caller::Nobody => {
            let id = NOBODY.to_string();
            let mut cmd = Command::new("setpriv");
            cmd.args(["--reuid", &id, "--regid", &id, "--clear-groups", BIN])
                .env_remove("XDG_RUNTIME_DIR")
                .env("HOME", "/nonexistent");
            cmd
        }
    };
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    cmd.arg("sandbox")
        .arg("-C")
        .arg(cwd)
        .args(args)
        .args(["--", "sh", "-c", script])
        .env("CODEXBOX_BWRAP", launcher.env())
        .stdin(Stdio::null());
    let out = cmd.output().expect("run codexbox sandbox");
    eprintln!(
        "--- {launcher:?} as {caller:?} {args:?} sh -c {script:?}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

/// The host's lowest unprivileged port, which no sandbox may change.
fn host_port_start() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Prints the command's capability sets, one `Cap…:` line each.
const CAPS_SCRIPT: &str = "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status";

/// Asserts that every capability set printed by [`CAPS_SCRIPT`] is empty.
fn assert_no_capability(text: &str, what: &str) {
    let sets: Vec<&str> = text.lines().filter(|l| l.starts_with("Cap")).collect();
    assert_eq!(sets.len(), 5, "{what}: {text}");
    for line in sets {
        assert!(line.ends_with("\t0000000000000000"), "{what}: {line}");
    }
}

fn value<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {out}"))
}

fn allowed_and_denied_destinations(launcher: Launcher) {
    require_sandbox!();
    if !launcher.usable() || !crate::common::host::python3() {
        return;
    }
    let ws = Ws::new();
    let (origin, tls) = (Origin::start(), TlsOrigin::start());
    let cert = tls.cert.display().to_string();
    let script = format!(
        "curl -s -o /dev/null -w 'http=%{{http_code}}\\n' http://origin.test:{http}/a; \
         curl -s --cacert {cert} -w '\\nhttps=%{{http_code}}\\n' https://origin.test:{tls}/b; \
         python3 -c 'import ssl,urllib.request as u; \
print(\"py_http=\" + u.urlopen(\"http://origin.test:{http}/c\").read().decode()); \
c = ssl.create_default_context(cafile=\"{cert}\"); \
print(\"py_https=\" + u.urlopen(\"https://origin.test:{tls}/d\", context=c).read().decode())'; \
         curl -s -w '\\ndenied=%{{http_code}}\\n' http://evil.test/; \
         curl -s -o /dev/null --noproxy '*' -m 5 http://127.0.0.1:{http}/direct; echo direct_exit=$?",
        http = origin.port(),
        tls = tls.addr.port(),
    );
    let out = sandbox(
        launcher,
        &ws.ws,
        &[
            "--allow-domain",
            "origin.test",
            "--allow-local-binding",
            "--resolve",
            "origin.test=127.0.0.1",
        ],
        &script,
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(value(&text, "http="), "200");
    assert!(text.contains("tls origin\nhttps=200"), "{text}");
    assert_eq!(
        value(&text, "py_http="),
        format!("origin {} GET /c", origin.port())
    );
    assert_eq!(value(&text, "py_https="), "tls origin");
    assert_eq!(value(&text, "denied="), "403");
    assert!(text.contains(r#""reason":"not_allowed""#), "{text}");
    assert_ne!(value(&text, "direct_exit="), "0");
    assert!(!origin
        .heads
        .lock()
        .unwrap()
        .iter()
        .any(|h| h.contains("/direct")));
    assert!(
        stderr(&out).contains("codexbox: blocked evil.test:80 (not in allowlist)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn system_bwrap_reaches_allowed_origins_and_refuses_others() {
    allowed_and_denied_destinations(Launcher::System);
}

#[test]
fn builtin_bwrap_reaches_allowed_origins_and_refuses_others() {
    allowed_and_denied_destinations(Launcher::Builtin);
}

fn confinement_inside(launcher: Launcher) {
    require_sandbox!();
    if !launcher.usable() || !crate::common::host::python3() {
        return;
    }
    let ws = Ws::new();
    let script = "python3 -c '\n\
import socket\n\
try:\n    socket.socket(socket.AF_UNIX); print(\"unix=allowed\")\n\
except PermissionError: print(\"unix=refused\")\n\
a, b = socket.socketpair(); a.send(b\"x\"); print(\"pair=\" + b.recv(1).decode())\n'; \
         getent hosts allowed.test; echo allowed_lookup=$?; \
         getent hosts other.test; echo other_lookup=$?; \
         env | grep -i _proxy= | sort";
    let out = sandbox(
        launcher,
        &ws.ws,
        &[
            "--allow-domain",
            "allowed.test",
            "--resolve",
            "allowed.test=192.0.2.7",
            "--audit-log",
            ws.root.join("audit.jsonl").to_str().unwrap(),
        ],
        script,
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(value(&text, "unix="), "refused");
    assert_eq!(value(&text, "pair="), "x");
    // A private answer for an allowed name stays refused without
    // --allow-local-binding; a public one is answered.
    assert_ne!(value(&text, "allowed_lookup="), "0");
    assert_ne!(value(&text, "other_lookup="), "0");
    for key in ["HTTP_PROXY=", "https_proxy=", "WSS_PROXY=", "ws_proxy="] {
        assert!(
            value(&text, key).starts_with("http://127.0.0.1:"),
            "{key} {text}"
        );
    }
    assert!(value(&text, "ALL_PROXY=").starts_with("socks5h://127.0.0.1:"));
    assert!(!stderr(&out).contains("no DNS inside the sandbox"));
    let audit = std::fs::read_to_string(ws.root.join("audit.jsonl")).unwrap();
    assert!(
        audit.contains(r#""host":"other.test","port":53,"protocol":"dns""#),
        "{audit}"
    );
    assert!(audit
        .contains(r#""host":"allowed.test","port":53,"protocol":"dns","method":"none","client""#));
    assert!(stderr(&out).contains("codexbox: blocked other.test (name lookup; not in allowlist)"));
}

#[test]
fn system_bwrap_refuses_unix_sockets_and_answers_only_allowed_names() {
    confinement_inside(Launcher::System);
}

#[test]
fn builtin_bwrap_refuses_unix_sockets_and_answers_only_allowed_names() {
    confinement_inside(Launcher::Builtin);
}

/// The DNS stub answers allowed names with the proxy's addresses and
/// refuses the others, whichever launcher runs the sandbox and whoever
/// starts it; the command holds no capability, and the host's lowest
/// unprivileged port is unchanged.
fn dns_stub_answers_only_allowed_names(launcher: Launcher, caller: Caller) {
    require_sandbox!();
    if !launcher.usable() || !callers().contains(&caller) {
        return;
    }
    let dir = tempdir_for(caller);
    let audit = dir.path().join("audit.jsonl");
    let port_start = host_port_start();
    let script = format!(
        "echo uid=$(id -u); \
         echo pypi=$(getent ahostsv4 pypi.test | head -1 | cut -d' ' -f1); \
         echo hosted=$(getent ahostsv4 files.hosted.test | head -1 | cut -d' ' -f1); \
         getent hosts evil.test; echo evil=$?; {CAPS_SCRIPT}"
    );
    let out = sandbox_as(
        launcher,
        caller,
        dir.path(),
        &[
            "--allow-domain",
            "pypi.test",
            "--allow-domain",
            "*.hosted.test",
            "--allow-local-binding",
            "--resolve",
            "pypi.test=127.0.0.1",
            "--resolve",
            "files.hosted.test=10.1.2.3",
            "--audit-log",
            audit.to_str().unwrap(),
        ],
        &script,
    );
    let text = stdout(&out);
    let what = format!("{launcher:?} as {caller:?}");
    assert!(out.status.success(), "{what}: {}", stderr(&out));
    let uid = match caller {
        Caller::Current => nix::unistd::getuid().as_raw(),
        Caller::Nobody => NOBODY,
    };
    assert_eq!(value(&text, "uid="), uid.to_string(), "{what}");
    assert_eq!(value(&text, "pypi="), "127.0.0.1", "{what}");
    assert_eq!(value(&text, "hosted="), "10.1.2.3", "{what}");
    assert_eq!(value(&text, "evil="), "2", "{what}");
    assert_no_capability(&text, &what);
    assert!(
        !stderr(&out).contains("no DNS inside the sandbox"),
        "{what}: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("codexbox: blocked evil.test (name lookup; not in allowlist)"),
        "{what}: {}",
        stderr(&out)
    );
    let audit = std::fs::read_to_string(&audit).unwrap();
    assert!(
        audit.contains(r#""host":"evil.test","port":53,"protocol":"dns""#),
        "{what}: {audit}"
    );
    assert_eq!(host_port_start(), port_start, "{what}");
}

#[test]
fn system_bwrap_dns_stub_for_root() {
    dns_stub_answers_only_allowed_names(Launcher::System, Caller::Current);
}

#[test]
fn system_bwrap_dns_stub_for_an_unprivileged_caller() {
    dns_stub_answers_only_allowed_names(Launcher::System, Caller::Nobody);
}

#[test]
fn builtin_bwrap_dns_stub_for_root() {
    dns_stub_answers_only_allowed_names(Launcher::Builtin, Caller::Current);
}

#[test]
fn builtin_bwrap_dns_stub_for_an_unprivileged_caller() {
    dns_stub_answers_only_allowed_names(Launcher::Builtin, Caller::Nobody);
}

/// Where the namespace for the stub cannot be made (here: `/proc/sys/net`
/// read-only, as in many containers), the sandbox runs in bubblewrap's own
/// network namespace without a stub, says why, and is still cut off.
#[test]
fn without_a_writable_proc_sys_there_is_no_stub_and_a_warning_says_why() {
    require_sandbox!();
    if !nix::unistd::getuid().is_root() {
        crate::common::host::not_applicable("needs root to make /proc/sys/net read-only");
        return;
    }
    if !crate::common::host::host_has(
        "unshare(1)",
        crate::common::host::runs("unshare", &["--version"]),
    ) {
        return;
    }
    let ws = Ws::new();
    let origin = Origin::start();
    let mut cmd = Command::new("unshare");
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    let inner = format!(
        "getent hosts allowed.test; echo lookup=$?; \
         curl -s -o /dev/null -w 'proxied=%{{http_code}}\\n' http://allowed.test:{port}/; \
         curl -s -o /dev/null --noproxy '*' -m 5 http://127.0.0.1:{port}/; echo direct_exit=$?",
        port = origin.port()
    );
    let out = cmd
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount --bind /proc/sys/net /proc/sys/net && mount -o remount,bind,ro /proc/sys/net \
             && exec \"$0\" \"$@\"",
        )
        .arg(BIN)
        .arg("sandbox")
        .arg("-C")
        .arg(&ws.ws)
        .args([
            "--allow-domain",
            "allowed.test",
            "--allow-local-binding",
            "--resolve",
            "allowed.test=127.0.0.1",
            "--",
            "sh",
            "-c",
            &inner,
        ])
        .env("CODEXBOX_BWRAP", "builtin")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = stdout(&out);
    eprintln!("{text}\n{}", stderr(&out));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "warning: no DNS inside the sandbox (cannot set net.ipv4.ip_unprivileged_port_start \
             in a new network namespace: Read-only file system"
        ),
        "{}",
        stderr(&out)
    );
    assert_ne!(value(&text, "lookup="), "0");
    assert_eq!(value(&text, "proxied="), "200");
    assert_ne!(value(&text, "direct_exit="), "0");
}

/// Processes whose command line mentions `marker`.
fn processes_mentioning(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(marker) {
                found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

fn nothing_left_behind(launcher: Launcher) {
    require_sandbox!();
    if !launcher.usable() {
        return;
    }
    let ws = Ws::new();
    let marker = ws.ws.display().to_string();
    for (name, script) in [("exit", "exit 3"), ("sigkill", "kill -9 $$")] {
        let out = sandbox(launcher, &ws.ws, &["--allow-domain", "x.test"], script);
        let expected = if name == "exit" { 3 } else { 137 };
        assert_eq!(out.status.code(), Some(expected), "{name}");
        assert_eq!(
            processes_mentioning(&marker),
            Vec::<String>::new(),
            "{name}"
        );
    }
}

#[test]
fn system_bwrap_leaves_no_bridge_behind() {
    nothing_left_behind(Launcher::System);
}

#[test]
fn builtin_bwrap_leaves_no_bridge_behind() {
    nothing_left_behind(Launcher::Builtin);
}

#[test]
fn managed_mode_fails_closed_without_proxy_variables_and_refuses_landlock() {
    let ws = Ws::new();
    let mut cmd = Command::new(BIN);
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    let out = cmd
        .args(["linux-sandbox", "--sandbox-policy-cwd"])
        .arg(&ws.ws)
        .args([
            "--permission-profile",
            "read-only",
            "--allow-network-for-proxy",
            "--",
            "touch",
        ])
        .arg(ws.ws.join("ran"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("managed proxy mode requires proxy environment variables"),
        "{}",
        stderr(&out)
    );
    let out = Command::new(BIN)
        .args(["linux-sandbox", "--sandbox-policy-cwd"])
        .arg(&ws.ws)
        .args([
            "--permission-profile",
            "read-only",
            "--allow-network-for-proxy",
            "--backend",
            "landlock",
            "--",
            "touch",
        ])
        .arg(ws.ws.join("ran"))
        .env("HTTP_PROXY", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the Landlock backend cannot confine the command to the proxy"));
    let out = Command::new(BIN)
        .args(["linux-sandbox", "--sandbox-policy-cwd"])
        .arg(&ws.ws)
        .args([
            "--permission-profile",
            "read-only",
            "--proxy-route-spec",
            "{}",
            "--",
            "touch",
        ])
        .arg(ws.ws.join("ran"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!ws.ws.join("ran").exists());
}

#[test]
fn network_flag_and_domain_policy_do_not_mix() {
    let ws = Ws::new();
    let out = sandbox(
        Launcher::Builtin,
        &ws.ws,
        &["--network", "--allow-domain", "a.test"],
        "true",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot be combined"));
}

#[test]
fn a_normal_user_is_confined_the_same_way() {
    require_sandbox!();
    if !callers().contains(&Caller::Nobody) {
        return;
    }
    let origin = Origin::start();
    for launcher in [Launcher::System, Launcher::Builtin] {
        if !launcher.usable() {
            continue;
        }
        let script = format!(
            "id -u; curl -s -o /dev/null -w 'allowed=%{{http_code}}\\n' http://origin.test:{port}/; \
             curl -s -o /dev/null -w 'denied=%{{http_code}}\\n' http://evil.test/; \
             curl -s -o /dev/null --noproxy '*' -m 5 http://127.0.0.1:{port}/; echo direct_exit=$?",
            port = origin.port()
        );
        let out = sandbox_as(
            launcher,
            Caller::Nobody,
            Path::new("/tmp"),
            &[
                "--allow-domain",
                "origin.test",
                "--allow-local-binding",
                "--resolve",
                "origin.test=127.0.0.1",
            ],
            &script,
        );
        let text = stdout(&out);
        assert!(out.status.success(), "{launcher:?}: {}", stderr(&out));
        assert_eq!(text.lines().next(), Some("65534"));
        assert_eq!(value(&text, "allowed="), "200", "{launcher:?}");
        assert_eq!(value(&text, "denied="), "403", "{launcher:?}");
        assert_ne!(value(&text, "direct_exit="), "0", "{launcher:?}");
        assert!(stderr(&out).contains("codexbox: blocked evil.test:80 (not in allowlist)"));
    }
}
