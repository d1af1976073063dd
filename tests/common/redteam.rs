//! Helpers for the escape battery (`tests/attack_*.rs`): private trees
//! outside `/tmp`, profiles, runs of the real binary as
//! `codexbox linux-sandbox` with a chosen launcher, and probe scripts whose
//! output is one marker line per attempt.
#![allow(dead_code)] // each attack file uses a subset

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const BIN: &str = env!("CARGO_BIN_EXE_codexbox");

/// How the sandbox is enforced for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// The system bubblewrap (`CODEXBOX_BWRAP=system`, `--backend bwrap`).
    System,
    /// The built-in bubblewrap (`CODEXBOX_BWRAP=builtin`, `--backend bwrap`).
    Builtin,
    /// `--backend landlock`.
    Landlock,
}

impl Launcher {
    pub fn named(name: &str) -> Launcher {
        match name {
            "system" => Launcher::System,
            "builtin" => Launcher::Builtin,
            "landlock" => Launcher::Landlock,
            other => panic!("unknown launcher {other}"),
        }
    }

    /// Adds the backend flags to a `linux-sandbox` command line.
    pub fn flags(self) -> Vec<&'static str> {
        match self {
            Launcher::System | Launcher::Builtin => vec!["--backend", "bwrap"],
            Launcher::Landlock => vec!["--backend", "landlock"],
        }
    }

    pub fn apply(self, cmd: &mut Command) {
        match self {
            Launcher::System => {
                cmd.env("CODEXBOX_BWRAP", "system");
            }
            Launcher::Builtin => {
                cmd.env("CODEXBOX_BWRAP", "builtin");
            }
            Launcher::Landlock => {}
        }
    }

    pub fn is_bwrap(self) -> bool {
        self != Launcher::Landlock
    }
}

/// A private tree for one test under cargo's target tmp dir (never `/tmp`,
/// which some profiles make writable): `root/ws` is the workspace,
/// `root/outside` a read-only sibling.
pub struct Tree {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub ws: PathBuf,
    pub outside: PathBuf,
}

impl Tree {
    pub fn new() -> Tree {
        // Outside /tmp and $TMPDIR wherever the checkout is: a link there
        // is one an earlier command could have planted, which grants
        // nothing, and the trees' own aliases must be the user's.
        let dir = super::host::dir_outside_tmp("attack-");
        let root = dir.path().canonicalize().expect("canonical tempdir");
        let ws = root.join("ws");
        let outside = root.join("outside");
        std::fs::create_dir_all(&ws).expect("mkdir ws");
        std::fs::create_dir_all(&outside).expect("mkdir outside");
        Tree {
            _dir: dir,
            root,
            ws,
            outside,
        }
    }

    /// Writes `rel` (relative to the tree root) with `text`.
    pub fn put(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
        p
    }

    pub fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel)).ok()
    }

    /// Names directly in `dir` (relative to the root), sorted.
    pub fn names(&self, dir: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.root.join(dir))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// One profile entry for a path.
pub fn entry(path: &Path, access: &str) -> String {
    format!(
        r#"{{"path":{{"type":"path","path":"{}"}},"access":"{access}"}}"#,
        path.display()
    )
}

#[allow(unused_imports)] // each attack file uses a subset
pub use super::sandbox::{
    glob_entry as glob, profile as managed, special, workspace_with as workspace,
};

/// Marks every fd >= 3 close-on-exec in the child just before it execs, so
/// only stdio (plus fds a test adds with a later `pre_exec`) reaches the
/// launched program: fds this test process inherited from its caller (a
/// shell or CI harness) would otherwise be passed through the sandbox, as
/// bubblewrap passes inherited fds on.
pub fn only_std_fds(cmd: &mut Command) -> &mut Command {
    // SAFETY: close_range and fcntl are async-signal-safe, allocate nothing
    // and run in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let flag = libc::CLOSE_RANGE_CLOEXEC as libc::c_long;
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, flag) != 0 {
                // Kernels before 5.11: mark them one by one.
                let max = match libc::sysconf(libc::_SC_OPEN_MAX) {
                    n if n > 0 => n.min(1 << 16) as libc::c_int,
                    _ => 1024,
                };
                for fd in 3..max {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            Ok(())
        });
    }
    cmd
}

/// The `linux-sandbox` command for `argv` in `cwd` (not yet run).
pub fn command(
    launcher: Launcher,
    cwd: &Path,
    profile: &str,
    extra: &[&str],
    argv: &[&str],
) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("linux-sandbox")
        .arg("--sandbox-policy-cwd")
        .arg(cwd)
        .arg("--permission-profile")
        .arg(profile)
        .args(launcher.flags())
        .args(extra)
        .arg("--")
        .args(argv)
        .current_dir(cwd)
        .stdin(Stdio::null());
    only_std_fds(&mut cmd);
    launcher.apply(&mut cmd);
    cmd
}

/// Runs `sh -c script` in the sandbox and logs what happened.
/// Runs `sh -c script` (`$0` is the codexbox binary) under `codexbox
/// sandbox -P workspace --network` in `tree`'s workspace with `launcher`:
/// a sandboxed command that can reach loopback, as an attacker.
pub fn networked_workspace_sh(
    tree: &Tree,
    launcher: Launcher,
    script: &str,
    what: &str,
) -> super::shell::Run {
    let mut attack = super::shell::command(&["sandbox", "-P", "workspace", "--network", "-C"]);
    attack
        .arg(&tree.ws)
        .args(launcher.flags())
        .args(["--", "sh", "-c", script, BIN]);
    launcher.apply(&mut attack);
    super::shell::finish(&mut attack, None, what)
}

pub fn sh(launcher: Launcher, cwd: &Path, profile: &str, extra: &[&str], script: &str) -> Output {
    let out = command(launcher, cwd, profile, extra, &["sh", "-c", script])
        .output()
        .expect("run codexbox linux-sandbox");
    log(launcher, script, &out);
    out
}

/// Runs `python3 -c code` in the sandbox.
pub fn py(launcher: Launcher, cwd: &Path, profile: &str, code: &str) -> Output {
    let out = command(launcher, cwd, profile, &[], &["python3", "-c", code])
        .output()
        .expect("run codexbox linux-sandbox");
    log(launcher, code, &out);
    out
}

pub fn log(launcher: Launcher, what: &str, out: &Output) {
    eprintln!(
        "--- [{launcher:?}] {what}\nstatus: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A shell prelude defining `try NAME CMD…`: prints `ESCAPE:NAME` when the
/// command succeeds and `held:NAME` when it fails, and `must NAME CMD…`:
/// prints `ok:NAME` when the command succeeds and `BROKEN:NAME` otherwise.
pub const PRELUDE: &str = "try() { n=$1; shift; if ( \"$@\" ) >/dev/null 2>&1; then echo ESCAPE:$n; else echo held:$n; fi; }\n\
must() { n=$1; shift; if ( \"$@\" ) >/dev/null 2>&1; then echo ok:$n; else echo BROKEN:$n; fi; }\n";

/// Asserts a probe's markers: no `ESCAPE:`/`BROKEN:` line, every `held`
/// and `ok` name present (so a probe that died early cannot pass).
pub fn assert_markers(out: &Output, held: &[&str], ok: &[&str]) {
    assert_marker_lines(&stdout(out), &stderr(out), held, ok);
}

/// [`assert_markers`] on a probe's output text; `context` (its stderr, the
/// run it came from) goes into the failure message.
pub fn assert_marker_lines(s: &str, context: &str, held: &[&str], ok: &[&str]) {
    let escapes: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with("ESCAPE:") || l.starts_with("BROKEN:"))
        .collect();
    assert!(
        escapes.is_empty(),
        "attacks succeeded or controls failed: {escapes:?}\n{s}\n{context}"
    );
    for n in held {
        assert!(
            s.lines().any(|l| l == format!("held:{n}")),
            "no result for attack {n}:\n{s}\n{context}"
        );
    }
    for n in ok {
        assert!(
            s.lines().any(|l| l == format!("ok:{n}")),
            "control {n} did not run:\n{s}\n{context}"
        );
    }
}

/// Whether this launcher can run a sandboxed `true` here. Skips out loud
/// when user namespaces or Landlock are unavailable, unless
/// `CODEXBOX_REQUIRE_SANDBOX=1`. A launcher that exists but fails is NOT a
/// skip: the test then fails on its controls.
pub fn available(launcher: Launcher) -> bool {
    let reason = match launcher {
        Launcher::Landlock => {
            // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns
            // the ABI number; no memory is passed.
            let abi = unsafe {
                libc::syscall(
                    libc::SYS_landlock_create_ruleset,
                    std::ptr::null::<u8>(),
                    0usize,
                    1u32,
                )
            };
            if abi >= 1 {
                return true;
            }
            "Landlock is not enabled in this kernel".to_owned()
        }
        _ => {
            let ok = super::host::user_namespaces().is_ok();
            let bwrap = launcher == Launcher::Builtin || which("bwrap").is_some();
            if ok && bwrap {
                return true;
            }
            format!("user namespaces usable: {ok}, bubblewrap found: {bwrap}")
        }
    };
    super::host::host_has(&format!("a usable {launcher:?} launcher"), Err(reason))
}

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// One `#[test]` per launcher: `against!(case: system, builtin, landlock)`.
#[allow(unused_macros)]
macro_rules! against {
    ($case:ident: $( $(#[$m:meta])* $launcher:ident ),+ $(,)?) => {
        mod $case {
            $(
                $(#[$m])*
                #[test]
                fn $launcher() {
                    let l = super::Launcher::named(stringify!($launcher));
                    if super::available(l) {
                        super::$case(l);
                    }
                }
            )+
        }
    };
}
#[allow(unused_imports)] // not every attack file runs a case per launcher
pub(crate) use against;

/// Whether the server reuses prepared sandboxes (its default) or gives
/// every command a one-shot sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    On,
    Off,
}

impl Reuse {
    /// The server flags that choose it.
    pub fn flags(self) -> [&'static str; 2] {
        match self {
            Reuse::On => ["--sandbox-reuse", "on"],
            Reuse::Off => ["--sandbox-reuse", "off"],
        }
    }

    /// `flags()` followed by `extra`.
    pub fn with<'a>(self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut all: Vec<&str> = self.flags().to_vec();
        all.extend_from_slice(extra);
        all
    }
}

/// `mod case { reused, one_shot }`: runs `async fn case(reuse: Reuse)`
/// through a server that reuses sandboxes and through one that does not.
#[allow(unused_macros)]
macro_rules! reused_and_one_shot {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                #[tokio::test]
                async fn reused() {
                    super::$case(crate::common::redteam::Reuse::On).await;
                }

                #[tokio::test]
                async fn one_shot() {
                    super::$case(crate::common::redteam::Reuse::Off).await;
                }
            }
        )+
    };
}
#[allow(unused_imports)] // not every test binary parametrises server cases
pub(crate) use reused_and_one_shot;

/// The same profiles as JSON values, and the `sandbox` context of an
/// exec-server request, for the attacks made through the server.
pub mod request {
    use std::path::Path;

    use serde_json::{json, Value};

    /// The value of a profile or entry the string builders wrote.
    fn value(text: String) -> Value {
        serde_json::from_str(&text).expect("the profile builders write JSON")
    }

    fn texts(entries: Vec<Value>) -> Vec<String> {
        entries.iter().map(Value::to_string).collect()
    }

    pub fn special(kind: &str, access: &str) -> Value {
        value(super::special(kind, access))
    }

    pub fn path_entry(path: &Path, access: &str) -> Value {
        json!({"path": {"type": "path", "path": path.to_string_lossy()}, "access": access})
    }

    pub fn managed(entries: Vec<Value>) -> Value {
        value(super::managed(&texts(entries), "restricted"))
    }

    /// Read everything, write the workspace (metadata protected), plus `extra`.
    pub fn workspace(extra: Vec<Value>) -> Value {
        value(super::workspace(&texts(extra), "restricted"))
    }

    pub fn read_only() -> Value {
        managed(vec![special("root", "read")])
    }

    /// The `sandbox` field of a request: `permissions` with `ws` as cwd
    /// and workspace root.
    pub fn ctx(permissions: Value, ws: &Path) -> Value {
        json!({
            "permissions": permissions,
            "cwd": ws.to_string_lossy(),
            "workspaceRoots": [ws.to_string_lossy()],
            "windowsSandboxLevel": "disabled",
        })
    }
}
