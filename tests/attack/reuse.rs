//! Reused sandboxes (`exec-server --sandbox-reuse on`, the default): commands
//! run one after another and side by side in one prepared sandbox must not
//! reach each other (`/dev/shm`, SysV IPC, background processes, abstract
//! sockets), and a change on the host between them (a file under a deny
//! glob, protected metadata appearing, disappearing or replaced, a link
//! planted by an earlier command, a mount) must be seen by the next command
//! as a fresh sandbox would see it. Every command is checked for no
//! capabilities and the seccomp filter. Killing the server leaves no
//! prepared sandbox behind. Each test proves that its commands really ran
//! in a reused sandbox: they share its network namespace.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::client::{sleepers, unb64, Raw, Server};
use crate::common::fs::eventually;
use crate::common::redteam::request::{ctx, managed, path_entry, read_only, special, workspace};
use crate::common::redteam::{available, reused_and_one_shot, Launcher, Reuse, Tree};

fn ready() -> bool {
    available(Launcher::Builtin)
}

/// A server and one session on it.
struct Session {
    server: Server,
    raw: Raw,
    next: usize,
}

impl Session {
    async fn start(extra: &[&str]) -> Session {
        Self::on(Server::start(extra)).await
    }

    async fn on(server: Server) -> Session {
        let (raw, _) = server.session().await;
        Session {
            server,
            raw,
            next: 0,
        }
    }

    fn id(&mut self) -> String {
        self.next += 1;
        format!("p{}", self.next)
    }

    /// Starts `script` in `sandbox` (cwd: the sandbox's); returns its id.
    async fn start_script(&mut self, sandbox: &Value, script: &str) -> String {
        self.start_script_with(sandbox, script, json!({"PATH": "/usr/bin:/bin"}))
            .await
    }

    /// [`Self::start_script`] with the environment `env`.
    async fn start_script_with(&mut self, sandbox: &Value, script: &str, env: Value) -> String {
        let id = self.id();
        let cwd = sandbox["cwd"].clone();
        self.raw
            .call(
                "process/start",
                json!({"processId": id, "argv": ["sh", "-c", script], "cwd": cwd,
                       "env": env, "tty": false, "sandbox": sandbox}),
            )
            .await;
        id
    }

    /// (exit code, stdout and stderr) of a started process once closed.
    async fn finish(&mut self, id: &str) -> (i64, String) {
        let read = self.raw.read_until_closed(id, 0).await;
        let output: String = read["chunks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                String::from_utf8_lossy(&unb64(c["chunk"].as_str().unwrap_or(""))).into_owned()
            })
            .collect();
        (read["exitCode"].as_i64().unwrap_or(-1), output)
    }

    async fn run(&mut self, sandbox: &Value, script: &str) -> (i64, String) {
        let id = self.start_script(sandbox, script).await;
        self.finish(&id).await
    }

    /// Proves that commands of `sandbox` run in one reused sandbox now:
    /// two of them alive at once share its network namespace (two one-shot
    /// sandboxes alive at once never do). Returns that namespace.
    async fn assert_reused(&mut self, sandbox: &Value) -> String {
        self.assert_reused_with(sandbox, json!({"PATH": "/usr/bin:/bin"}))
            .await
    }

    /// [`Self::assert_reused`] for commands with the environment `env`.
    async fn assert_reused_with(&mut self, sandbox: &Value, env: Value) -> String {
        let holder = self.id();
        self.raw
            .call(
                "process/start",
                json!({"processId": holder, "argv": ["sh", "-c", format!("{NETNS}read line")],
                       "cwd": sandbox["cwd"], "env": env, "tty": false,
                       "pipeStdin": true, "sandbox": sandbox}),
            )
            .await;
        let id = self.start_script_with(sandbox, NETNS, env).await;
        let (_, second) = self.finish(&id).await;
        self.raw
            .call(
                "process/write",
                json!({"processId": holder, "chunk": crate::common::client::b64(b"go\n"), "closeStdin": true}),
            )
            .await;
        let (_, first) = self.finish(&holder).await;
        assert_eq!(
            netns(&first),
            netns(&second),
            "not one reused sandbox: {first:?} {second:?}"
        );
        netns(&first)
    }
}

/// The `net:[…]` line a command printed with `readlink /proc/self/ns/net`.
fn netns(output: &str) -> String {
    output
        .lines()
        .find(|line| line.starts_with("net:["))
        .unwrap_or_else(|| panic!("no netns line in {output}"))
        .to_owned()
}

const NETNS: &str = "readlink /proc/self/ns/net; ";

/// Commands one after another in one prepared sandbox: what the first one
/// leaves in `/dev/shm`, SysV IPC and its background processes is gone for
/// the second; an abstract socket cannot even be bound.
#[tokio::test]
async fn commands_in_turn_leave_nothing_to_each_other() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&[]).await;
    let net = s.assert_reused(&sandbox).await;
    let marker = format!("9{}", std::process::id());
    let (_, first) = s
        .run(
            &sandbox,
            &format!(
                "{NETNS}echo left > /dev/shm/left && echo shm:made; \
                 ipcmk -M 4096 >/dev/null && echo sysv:made; \
                 ipcmk -Q >/dev/null && echo queue:made; \
                 python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"\\0codexbox-reuse\"); print(\"abstract:bound\")' 2>/dev/null; \
                 (setsid sleep {marker} >/dev/null 2>&1 &); echo background:started"
            ),
        )
        .await;
    for made in ["shm:made", "sysv:made", "queue:made", "background:started"] {
        assert!(first.contains(made), "control {made}: {first}");
    }
    assert!(!first.contains("abstract:bound"), "{first}");
    assert!(
        eventually(|| sleepers(&marker).is_empty()).await,
        "the background process outlived its command"
    );
    let (_, second) = s
        .run(
            &sandbox,
            "readlink /proc/self/ns/net; ls -A /dev/shm; echo shm:listed; \
             ipcs -m | grep -c '^0x'; ipcs -q | grep -c '^0x'; \
             ps -eo comm | grep -c '^sleep$'",
        )
        .await;
    assert_eq!(netns(&first), net, "not the reused sandbox");
    assert_eq!(netns(&second), net, "not the reused sandbox");
    assert!(second.contains("shm:listed"), "control: {second}");
    assert!(!second.contains("left"), "{second}");
    let counts: Vec<&str> = second
        .lines()
        .filter(|line| line.chars().all(|c| c.is_ascii_digit()) && !line.is_empty())
        .collect();
    assert_eq!(counts, ["0", "0", "0"], "ipc and processes seen: {second}");
}

/// Two commands running at once in one prepared sandbox: the second sees
/// none of the first's `/dev/shm`, SysV IPC or processes.
#[tokio::test]
async fn commands_side_by_side_share_nothing() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&[]).await;
    let wait_for = |file: &str| {
        format!("i=0; while [ ! -e {file} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; ")
    };
    let first = s
        .start_script(
            &sandbox,
            &format!(
                "{NETNS}echo a > /dev/shm/a; ipcmk -M 4096 >/dev/null; sleep 1000 & \
                 touch a.ready; {}kill $!",
                wait_for("b.done")
            ),
        )
        .await;
    let (_, second) = s
        .run(
            &sandbox,
            &format!(
                "{NETNS}{}ls -A /dev/shm; echo shm:listed; ipcs -m | grep -c '^0x'; \
                 ps -eo comm | grep -c '^sleep$'; touch b.done",
                wait_for("a.ready")
            ),
        )
        .await;
    let (_, first) = s.finish(&first).await;
    // Alive at once, in one network namespace: one reused sandbox.
    assert_eq!(netns(&first), netns(&second), "not one reused sandbox");
    assert!(second.contains("shm:listed"), "control: {second}");
    assert!(!second.lines().any(|l| l == "a"), "{second}");
    let counts: Vec<&str> = second
        .lines()
        .filter(|line| !line.is_empty() && line.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(counts, ["0", "0"], "ipc or processes seen: {second}");
}

/// Every command, the first, the ones after and the ones side by side,
/// holds no capability, runs under the seccomp filter with no_new_privs,
/// and cannot create a user namespace.
#[tokio::test]
async fn every_command_is_confined() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&[]).await;
    let probe =
        "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|Seccomp|NoNewPrivs):' /proc/self/status; \
                 unshare -U true 2>/dev/null && echo userns:made; echo probe:done";
    let mut outputs = Vec::new();
    for _ in 0..3 {
        outputs.push(s.run(&sandbox, probe).await.1);
    }
    let together: Vec<String> = {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(s.start_script(&sandbox, probe).await);
        }
        let mut out = Vec::new();
        for id in ids {
            out.push(s.finish(&id).await.1);
        }
        out
    };
    outputs.extend(together);
    for output in outputs {
        assert!(output.contains("probe:done"), "{output}");
        assert!(!output.contains("userns:made"), "{output}");
        for line in output.lines().filter(|l| l.starts_with("Cap")) {
            assert!(line.ends_with("0000000000000000"), "{line} in {output}");
        }
        assert!(output.contains("Seccomp:\t2"), "{output}");
        assert!(output.contains("NoNewPrivs:\t1"), "{output}");
    }
}

/// A matched file the host replaces (or moves away and brings back) while
/// nothing else changes stays masked for the next command: the server
/// takes what an earlier decision found of paths in the workspace as true
/// only while the deny-glob index saw nothing happen there, and a replaced
/// file's mask on the prepared tree went with the old one.
#[tokio::test]
async fn a_matched_file_replaced_on_the_host_stays_masked() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/a/b/secret.env", "OLD-SECRET");
    t.put("ws/a/plain.txt", "PLAIN");
    let deny = json!({"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"});
    let sandbox = ctx(workspace(vec![deny]), &t.ws);
    let mut s = Session::start(&[]).await;
    type Swap<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let swaps: [Swap; 3] = [
        (
            "replaced",
            Box::new(|| {
                std::fs::remove_file(t.ws.join("a/b/secret.env")).expect("rm");
                t.put("ws/a/b/secret.env", "NEW-SECRET");
            }),
        ),
        (
            "renamed over",
            Box::new(|| {
                t.put("ws/a/b/next", "NEW-SECRET");
                std::fs::rename(t.ws.join("a/b/next"), t.ws.join("a/b/secret.env")).expect("mv");
            }),
        ),
        (
            "directory swapped",
            Box::new(|| {
                std::fs::rename(t.ws.join("a/b"), t.ws.join("a/old")).expect("mv dir");
                t.put("ws/a/b/secret.env", "NEW-SECRET");
            }),
        ),
    ];
    for (what, swap) in &swaps {
        // Two commands with nothing changed: the second one decides with
        // what the first one found.
        for _ in 0..2 {
            let (_, read) = s.run(&sandbox, "cat a/b/secret.env; cat a/plain.txt").await;
            assert!(!read.contains("SECRET"), "{what}, before: {read}");
            assert!(read.contains("PLAIN"), "control: {read}");
        }
        s.assert_reused(&sandbox).await;
        swap();
        let (_, read) = s.run(&sandbox, "cat a/b/secret.env; cat a/plain.txt").await;
        assert!(!read.contains("NEW-SECRET"), "{what}: {read}");
        assert!(read.contains("PLAIN"), "control: {read}");
        s.assert_reused(&sandbox).await;
    }
}

/// A file made under a deny glob, by an earlier command or by the host,
/// is denied to the next command.
#[tokio::test]
async fn deny_glob_matches_made_later_are_denied() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/sub/plain.txt", "PLAIN");
    let deny = json!({"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"});
    let sandbox = ctx(workspace(vec![deny]), &t.ws);
    let mut s = Session::start(&[]).await;
    s.assert_reused(&sandbox).await;
    let (_, made) = s
        .run(&sandbox, "echo CMD-SECRET > sub/new.env && echo made")
        .await;
    assert!(made.contains("made"), "control: {made}");
    let (_, read) = s.run(&sandbox, "cat sub/new.env; cat sub/plain.txt").await;
    assert!(!read.contains("CMD-SECRET"), "{read}");
    assert!(read.contains("PLAIN"), "control: {read}");
    t.put("ws/host.env", "HOST-SECRET");
    let (_, read) = s.run(&sandbox, "cat host.env").await;
    assert!(!read.contains("HOST-SECRET"), "{read}");
    // And a sandbox is reused again once rebuilt, still denying both.
    s.assert_reused(&sandbox).await;
    let (_, read) = s.run(&sandbox, "cat host.env sub/new.env").await;
    assert!(!read.contains("SECRET"), "{read}");
}

/// Protected metadata appearing, replaced and disappearing on the host
/// between commands is protected in the next one as in a fresh sandbox.
#[tokio::test]
async fn protected_metadata_changes_on_the_host_are_seen() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&[]).await;
    s.assert_reused(&sandbox).await;
    let (_, first) = s.run(&sandbox, "mkdir .git 2>/dev/null && echo made").await;
    assert!(!first.contains("made"), "{first}");

    // Appears.
    t.put("ws/.git/config", "[core]\n");
    let write = "echo x >> .git/config && echo wrote; echo ok > file && echo control";
    let (_, out) = s.run(&sandbox, write).await;
    assert!(out.contains("control") && !out.contains("wrote"), "{out}");
    s.assert_reused(&sandbox).await;

    // Replaced by another directory (the sandbox's read-only mask was on
    // the old one).
    std::fs::remove_dir_all(t.ws.join(".git")).expect("remove .git");
    t.put("ws/.git/config", "[core]\n");
    let (_, out) = s.run(&sandbox, write).await;
    assert!(out.contains("control") && !out.contains("wrote"), "{out}");
    assert_eq!(t.read("ws/.git/config").as_deref(), Some("[core]\n"));

    // Disappears.
    std::fs::remove_dir_all(t.ws.join(".git")).expect("remove .git");
    let (_, out) = s
        .run(&sandbox, "mkdir .git 2>/dev/null && echo made; echo done")
        .await;
    assert!(out.contains("done") && !out.contains("made"), "{out}");

    // Becomes a symlink to a decoy (in place of the empty directory the
    // prepared sandbox keeps as the mount point of its mask): refused, as
    // a fresh sandbox refuses it; the command never runs.
    t.put("decoy/config.toml", "decoy");
    let _ = std::fs::remove_dir(t.ws.join(".codex"));
    std::os::unix::fs::symlink(t.root.join("decoy"), t.ws.join(".codex")).expect("symlink");
    let (code, out) = s
        .run(
            &sandbox,
            "echo x >> .codex/config.toml && echo wrote; echo done",
        )
        .await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("crosses writable symlink"), "{out}");
    assert!(!out.contains("done") && !out.contains("wrote"), "{out}");
    assert_eq!(t.read("decoy/config.toml").as_deref(), Some("decoy"));
}

/// A sandbox prepared while `ws/out` was a directory it may write; an
/// earlier command (another shape) then replaces it with a link to
/// `outside`: the next command of the first shape writes nothing there
/// and is told why.
#[tokio::test]
async fn links_planted_by_an_earlier_command_grant_nothing() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/out/keep", "");
    let narrow = ctx(
        managed(vec![
            special("root", "read"),
            path_entry(&t.ws.join("out"), "write"),
        ]),
        &t.ws,
    );
    let writer = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&[]).await;
    s.assert_reused(&narrow).await;
    let (_, first) = s.run(&narrow, "echo ok > out/first && echo wrote").await;
    assert!(first.contains("wrote"), "control: {first}");
    let (_, planted) = s
        .run(
            &writer,
            &format!(
                "rm -rf out && ln -s {} out && echo planted",
                t.outside.display()
            ),
        )
        .await;
    assert!(planted.contains("planted"), "control: {planted}");
    let (_, out) = s
        .run(&narrow, "echo pwned > out/new && echo ESCAPE; echo done")
        .await;
    assert!(out.contains("done") && !out.contains("ESCAPE"), "{out}");
    assert!(out.contains("grants nothing"), "no warning: {out}");
    assert_eq!(t.names("outside"), Vec::<String>::new());
}

/// Another workspace or profile in between does not mix up grants.
#[tokio::test]
async fn workspaces_and_profiles_in_sequence_keep_their_own_grants() {
    if !ready() {
        return;
    }
    let one = Tree::new();
    let two = Tree::new();
    let mut s = Session::start(&[]).await;
    let write = |dir: &Path, name: &str| {
        format!("echo x > {}/{name} && echo wrote:{name}; ", dir.display())
    };
    let ws1 = ctx(workspace(vec![]), &one.ws);
    let ws2 = ctx(workspace(vec![]), &two.ws);
    let ro1 = ctx(read_only(), &one.ws);
    for round in 0..2 {
        let (_, out) = s
            .run(
                &ws1,
                &(write(&one.ws, &format!("a{round}")) + &write(&two.ws, "x")),
            )
            .await;
        assert!(out.contains(&format!("wrote:a{round}")), "{out}");
        assert!(!out.contains("wrote:x"), "{out}");
        let (_, out) = s
            .run(
                &ws2,
                &(write(&two.ws, &format!("b{round}")) + &write(&one.ws, "y")),
            )
            .await;
        assert!(out.contains(&format!("wrote:b{round}")), "{out}");
        assert!(!out.contains("wrote:y"), "{out}");
        let (_, out) = s.run(&ro1, &write(&one.ws, "z")).await;
        assert!(!out.contains("wrote:z"), "{out}");
    }
    // Besides the mount points the prepared sandboxes keep.
    let written = |t: &Tree| -> Vec<String> {
        t.names("ws")
            .into_iter()
            .filter(|n| ![".git", ".codex", ".agents"].contains(&n.as_str()))
            .collect()
    };
    assert_eq!(written(&one), ["a0", "a1"]);
    assert_eq!(written(&two), ["b0", "b1"]);
}

/// The sandbox is decided with the command's environment, not the
/// server's: a grant through a link inside the command's own `$TMPDIR` (a
/// place where an earlier command could have planted it) is dropped, and
/// honoured when `$TMPDIR` is elsewhere; either way in a reused sandbox.
#[tokio::test]
async fn the_commands_own_tmpdir_decides_which_links_count_as_planted() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let planted_in = t.root.join("tmp-one");
    let elsewhere = t.root.join("tmp-two");
    for dir in [&planted_in, &elsewhere] {
        std::fs::create_dir_all(dir).expect("mkdir tmpdir");
    }
    let link = planted_in.join("link");
    std::os::unix::fs::symlink(&t.outside, &link).expect("symlink");
    let sandbox = ctx(workspace(vec![path_entry(&link, "write")]), &t.ws);
    let mut s = Session::start(&[]).await;
    let mut namespaces = Vec::new();
    for (round, tmpdir) in [&planted_in, &planted_in, &elsewhere, &elsewhere]
        .into_iter()
        .enumerate()
    {
        let name = format!("r{round}");
        let script = format!("echo x > {}/{name} && echo wrote", link.display());
        let env = json!({"PATH": "/usr/bin:/bin", "TMPDIR": tmpdir.to_string_lossy()});
        let id = s.start_script_with(&sandbox, &script, env.clone()).await;
        let (_, out) = s.finish(&id).await;
        if tmpdir == &planted_in {
            assert!(!out.contains("wrote"), "round {round}: {out}");
            assert!(out.contains("warning"), "round {round}: {out}");
        } else {
            assert!(out.contains("wrote"), "round {round}: {out}");
        }
        namespaces.push(s.assert_reused_with(&sandbox, env).await);
    }
    let written: Vec<String> = t
        .names("outside")
        .into_iter()
        .filter(|n| ![".git", ".codex", ".agents"].contains(&n.as_str()))
        .collect();
    assert_eq!(written, ["r2", "r3"]);
    // One prepared sandbox per `$TMPDIR`, kept while the other is used.
    assert_eq!(namespaces[0], namespaces[1], "{namespaces:?}");
    assert_eq!(namespaces[2], namespaces[3], "{namespaces:?}");
    assert_ne!(namespaces[1], namespaces[2], "{namespaces:?}");
}

/// A tmpfs the host mounts after the sandbox was prepared is not writable
/// from it (the server runs in a mount namespace of its own, where the
/// test mounts it).
#[tokio::test]
async fn a_host_mount_made_after_preparing_is_not_writable() {
    if !ready() {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        crate::common::host::not_applicable("mounting on the host needs root");
        return;
    }
    let t = Tree::new();
    std::fs::create_dir(t.outside.join("mnt")).expect("mkdir");
    let mut command = std::process::Command::new("unshare");
    command
        .args([
            "--mount",
            "--propagation",
            "private",
            crate::common::client::BIN,
        ])
        .args(["exec-server", "--listen", "ws://127.0.0.1:0"])
        .args(crate::common::wire::TRACE_ARGS)
        .env(
            crate::common::wire::TRACE_ENV.0,
            crate::common::wire::TRACE_ENV.1,
        );
    let server = Server::start_command(command, "in a mount namespace of its own");
    let pid = server.pid().to_string();
    let mut s = Session::on(server).await;
    let sandbox = ctx(workspace(vec![]), &t.ws);
    s.assert_reused(&sandbox).await;
    let mnt = t.outside.join("mnt");
    let mounted = std::process::Command::new("nsenter")
        .args(["-t", &pid, "-m", "mount", "-t", "tmpfs", "none"])
        .arg(&mnt)
        .status()
        .expect("nsenter");
    assert!(mounted.success(), "mount failed");
    let (_, out) = s
        .run(
            &sandbox,
            &format!(
                "echo x > {0}/f && echo wrote; mkdir {0}/d && echo made; echo done",
                mnt.display()
            ),
        )
        .await;
    assert!(out.contains("done"), "control: {out}");
    assert!(!out.contains("wrote") && !out.contains("made"), "{out}");
}

/// SIGKILL of the server: no process of a prepared sandbox, and no process
/// in its namespaces, stays behind.
#[tokio::test]
async fn killing_the_server_leaves_no_prepared_sandbox() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&[]).await;
    let net = s.assert_reused(&sandbox).await;
    let keepers = || processes_where(|cmdline| cmdline.contains(&t.ws.display().to_string()));
    assert!(
        !keepers().is_empty(),
        "no keeper found while the server runs"
    );
    s.server.kill_hard();
    assert!(
        eventually(|| keepers().is_empty()).await,
        "left behind: {:?}",
        keepers()
    );
    assert!(
        eventually(|| processes_in_netns(&net).is_empty()).await,
        "processes left in the prepared network namespace: {:?}",
        processes_in_netns(&net)
    );
}

/// Pids whose command line (NUL-separated words joined by spaces) matches.
fn processes_where(matches: impl Fn(&str) -> bool) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|raw| {
                let text = String::from_utf8_lossy(&raw).replace('\0', " ");
                matches(&text)
            })
        })
        .filter(|&pid| !crate::common::client::is_gone(pid))
        .collect()
}

/// Pids in the network namespace `net` (`net:[N]`).
fn processes_in_netns(net: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|link| link.to_string_lossy() == net)
        })
        .collect()
}

/// When its session ends, a prepared sandbox goes, and the mount points it
/// kept on the host with it.
#[tokio::test]
async fn the_session_takes_its_prepared_sandboxes_along() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/src/main.rs", "fn main() {}\n");
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&["--session-grace-secs", "0"]).await;
    s.assert_reused(&sandbox).await;
    assert!(t.names("ws").len() > 1, "mount points expected while kept");
    let Session { server, raw, .. } = s;
    drop(raw);
    assert!(
        eventually(|| t.names("ws") == ["src"]).await,
        "left on the host: {:?}",
        t.names("ws")
    );
    drop(server);
}

/// An unused prepared sandbox goes after the idle time.
#[tokio::test]
async fn an_idle_prepared_sandbox_goes() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/src/main.rs", "fn main() {}\n");
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&["--sandbox-reuse-idle-secs", "1"]).await;
    s.assert_reused(&sandbox).await;
    let keepers = || processes_where(|cmdline| cmdline.contains(&t.ws.display().to_string()));
    assert!(!keepers().is_empty(), "no keeper found");
    assert!(
        eventually(|| keepers().is_empty() && t.names("ws") == ["src"]).await,
        "kept: {:?}, left on the host: {:?}",
        keepers(),
        t.names("ws")
    );
    s.assert_reused(&sandbox).await;
}

/// Commands are handed to standbys, each a pid 1 made ahead in the
/// prepared sandbox: while a command runs, its helper is a standby (`ps`
/// shows `codexbox-sandbox-standby`) with the command below it, no more
/// than two wait beside it for the next commands, and their pids 1 hold
/// no capability and run under no_new_privs and the seccomp filter.
#[tokio::test]
async fn commands_run_on_standbys_made_ahead() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&[]).await;
    s.assert_reused(&sandbox).await;
    let ws = t.ws.display().to_string();
    // A standby's helper (its pid 1 shows the same title, below it).
    let standbys = || {
        let titled =
            processes_where(|cmdline| cmdline.starts_with(STANDBY_TITLE) && cmdline.contains(&ws));
        let helpers = titled.iter().copied().filter(|&pid| {
            !titled
                .iter()
                .any(|&other| descendants(other).contains(&pid))
        });
        helpers.collect::<Vec<u32>>()
    };
    // Two commands in turn: the second finds the first's directories.
    for _ in 0..2 {
        let (code, _) = s.run(&sandbox, "true").await;
        assert_eq!(code, 0);
    }
    let holder = s.id();
    start_reading(
        &mut s.raw,
        &holder,
        &sandbox,
        "touch held; read line; echo went",
    )
    .await;
    assert!(
        eventually(|| t.ws.join("held").exists()).await,
        "the command did not start"
    );
    let running: Vec<u32> = standbys()
        .into_iter()
        .filter(|&pid| descendants(pid).iter().any(|&d| comm(d) == "sh"))
        .collect();
    assert_eq!(
        running.len(),
        1,
        "the command runs on no standby: {:?}",
        standbys()
    );
    assert!(
        eventually(|| standbys().len() <= 3).await,
        "standbys beside the running one: {:?}",
        standbys()
    );
    // Each waiting pid 1 took the command's confinement already.
    let confined = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(str::trim)
                .map(str::to_owned)
        };
        field("CapEff:").as_deref() == Some("0000000000000000")
            && field("CapPrm:").as_deref() == Some("0000000000000000")
            && field("NoNewPrivs:").as_deref() == Some("1")
            && field("Seccomp:").as_deref() == Some("2")
    };
    let waiting_pid1s = || -> Vec<u32> {
        standbys()
            .into_iter()
            .filter(|pid| !running.contains(pid))
            .flat_map(descendants)
            .collect()
    };
    assert!(
        eventually(|| {
            let pid1s = waiting_pid1s();
            !pid1s.is_empty() && pid1s.iter().all(|&pid| confined(pid))
        })
        .await,
        "a waiting pid 1 is not confined: {:?}",
        waiting_pid1s()
    );
    go(&mut s.raw, &holder).await;
    let (code, output) = s.finish(&holder).await;
    assert_eq!((code, output.trim()), (0, "went"));
}

/// A command a standby started while its sandbox was decided runs only
/// once the decision agreed. When the host changed in between (a file
/// made under a deny glob), it is called off before its exec and started
/// the other way: it runs once, and the file stays masked.
#[tokio::test]
async fn a_command_called_off_runs_once_and_as_decided() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let deny = json!({"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"});
    let sandbox = ctx(workspace(vec![deny]), &t.ws);
    let mut s = Session::start(&[]).await;
    s.assert_reused(&sandbox).await;
    for _ in 0..2 {
        let (code, _) = s.run(&sandbox, "true").await;
        assert_eq!(code, 0);
    }
    t.put("ws/late.env", "LATE-SECRET");
    let (code, output) = s
        .run(&sandbox, "echo ran >> runs.log; cat late.env; echo done")
        .await;
    assert!(output.contains("done"), "control: {output}");
    assert!(!output.contains("LATE-SECRET"), "{output}");
    assert_ne!(code, -1);
    let runs = std::fs::read_to_string(t.ws.join("runs.log")).unwrap_or_default();
    assert_eq!(
        runs,
        "ran\n",
        "the command ran {} times",
        runs.lines().count()
    );
    // The next one, on a sandbox prepared anew, is denied the file too.
    let (_, output) = s.run(&sandbox, "cat late.env; echo done").await;
    assert!(
        output.contains("done") && !output.contains("LATE-SECRET"),
        "{output}"
    );
}

/// A command line too long for a pipe's buffer (its verdict, which only a
/// fallback launch would read, included) still starts on a standby, again
/// and again.
#[tokio::test]
async fn a_long_command_line_starts_on_a_standby() {
    if !ready() {
        return;
    }
    let t = Tree::new();
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let mut s = Session::start(&[]).await;
    s.assert_reused(&sandbox).await;
    let long = "x".repeat(100 * 1024);
    for _ in 0..3 {
        let id = s.id();
        s.raw
            .call(
                "process/start",
                json!({"processId": id, "argv": ["sh", "-c", "echo ${#1}", "sh", long],
                       "cwd": sandbox["cwd"], "env": {"PATH": "/usr/bin:/bin"},
                       "tty": false, "sandbox": sandbox}),
            )
            .await;
        let (code, output) = s.finish(&id).await;
        assert_eq!((code, output.trim()), (0, "102400"));
    }
}

/// What `ps` shows first for a standby.
const STANDBY_TITLE: &str = "codexbox-sandbox-standby";

/// Every process below `pid` (by parent pid).
fn descendants(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            let after = stat.get(stat.rfind(')')? + 2..)?;
            let parent = after.split(' ').nth(1)?.parse().ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while let Some(&current) = found.get(i) {
        found.extend(
            parents
                .iter()
                .filter(|(_, parent)| *parent == current)
                .map(|(child, _)| *child),
        );
        i += 1;
    }
    found.split_off(1)
}

/// A process's command name (`comm`).
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Starts `script` with a stdin pipe in `sandbox` on `raw`.
async fn start_reading(raw: &mut Raw, id: &str, sandbox: &Value, script: &str) {
    raw.call(
        "process/start",
        json!({"processId": id, "argv": ["sh", "-c", script], "cwd": sandbox["cwd"],
               "env": {"PATH": "/usr/bin:/bin"}, "tty": false, "pipeStdin": true,
               "sandbox": sandbox}),
    )
    .await;
}

/// Lets a command started by [`start_reading`] go on.
async fn go(raw: &mut Raw, id: &str) {
    raw.call(
        "process/write",
        json!({"processId": id, "chunk": crate::common::client::b64(b"go\n"), "closeStdin": true}),
    )
    .await;
}

/// A mount point one sandbox made on the host (the empty `.codex` its
/// read-only mask needs) stays while another sandbox binds it: when its
/// maker ends first, the other's mask must not go with it (removing a
/// directory that is a mount point elsewhere detaches that mount), or the
/// command could make `.codex` its own.
async fn a_mount_point_stays_while_another_sandbox_binds_it(reuse: Reuse) {
    if !ready() {
        return;
    }
    let t = Tree::new();
    t.put("ws/src/main.rs", "fn main() {}\n");
    let sandbox = ctx(workspace(vec![]), &t.ws);
    let server = Server::start(&reuse.with(&["--session-grace-secs", "0"]));
    let (mut maker, _) = server.session().await;
    start_reading(&mut maker, "maker", &sandbox, "read line").await;
    assert!(
        eventually(|| t.names("ws").contains(&".codex".to_owned())).await,
        "no mount point made: {:?}",
        t.names("ws")
    );
    // The maker's sandbox: its helper (and keeper), named by the workspace.
    let makers = processes_where(|cmdline| cmdline.contains(&t.ws.display().to_string()));
    assert!(!makers.is_empty(), "the maker's sandbox not found");
    let (mut victim, _) = server.session().await;
    start_reading(
        &mut victim,
        "victim",
        &sandbox,
        "touch src/up; read line; mkdir -p .codex/planted && echo PLANTED; true",
    )
    .await;
    assert!(
        eventually(|| t.ws.join("src/up").exists()).await,
        "the victim did not start"
    );
    go(&mut maker, "maker").await;
    maker.read_until_closed("maker", 0).await;
    drop(maker);
    assert!(
        eventually(|| makers
            .iter()
            .all(|&pid| crate::common::client::is_gone(pid)))
        .await,
        "the maker's sandbox did not end"
    );
    go(&mut victim, "victim").await;
    let read = victim.read_until_closed("victim", 0).await;
    let output: String = read["chunks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| String::from_utf8_lossy(&unb64(c["chunk"].as_str().unwrap_or(""))).into_owned())
        .collect();
    assert!(!output.contains("PLANTED"), "{output}");
    assert!(!t.ws.join(".codex/planted").exists(), "planted on the host");
    drop(server);
}

reused_and_one_shot!(a_mount_point_stays_while_another_sandbox_binds_it);
