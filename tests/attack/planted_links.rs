//! Grants reached through a symlink an earlier sandboxed command planted.
//! An earlier run that could write a workspace, `/tmp` or `$TMPDIR`
//! replaces a path a later, narrower profile grants by a symlink to a
//! directory outside; the later run must not reach the outside through it,
//! however the link is spelled (the grant itself, an intermediate
//! component, a relative target with `..`, a link to a link, a link reached
//! through the user's own alias) and whether the grant writes or reads;
//! nor may a `bwrap` or `rg` planted on `PATH` there run outside the sandbox.
//! Through `codexbox sandbox`, `codexbox linux-sandbox` (each launcher and
//! Landlock) and the exec-server (`process/start` and `fs/writeFile`, with
//! the system and the built-in bubblewrap). The host tree is checked
//! afterwards; the warning naming the grant and the link is checked too.
//!
//! Under Landlock a workspace root with protected metadata cannot get new
//! top-level entries (see docs/sandbox.md), so there the earlier run plants
//! its link one directory down (`ws/sub/…`).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::common::client::{unb64, Raw, Server};
use crate::common::redteam::*;

/// Where the earlier run can create entries under this launcher.
fn nest(l: Launcher) -> &'static str {
    if l.is_bwrap() {
        ""
    } else {
        "sub/"
    }
}

/// Root read, plus `extra`: nothing else writable.
fn narrow(extra: &[String]) -> String {
    let mut entries = vec![special("root", "read")];
    entries.extend_from_slice(extra);
    managed(&entries, "restricted")
}

/// Runs `script` under `linux-sandbox` with `env` added.
fn sh_env(l: Launcher, cwd: &Path, profile: &str, env: &[(&str, &Path)], script: &str) -> Output {
    let mut cmd = command(l, cwd, profile, &[], &["sh", "-c", script]);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = cmd.output().expect("run codexbox linux-sandbox");
    log(l, script, &out);
    out
}

/// The earlier run: `script` (which ends by printing `planted`) under
/// `profile`, which must let it succeed.
fn plant(l: Launcher, cwd: &Path, profile: &str, env: &[(&str, &Path)], script: &str) {
    let out = sh_env(l, cwd, profile, env, &format!("{script} && echo planted"));
    assert!(
        stdout(&out).contains("planted"),
        "control: the earlier run could not plant its link\n{}",
        stderr(&out)
    );
}

/// Asserts the warning for `grant` reached through `link`.
fn assert_warned(out: &Output, grant: &Path, link: &Path) {
    let line = format!(
        "codex-linux-sandbox: warning: {} grants nothing: it is reached through the symlink {} inside ",
        grant.display(),
        link.display()
    );
    let err = stderr(out);
    assert!(err.contains(&line), "no warning {line:?} in:\n{err}");
}

/// The outside directory holds exactly `f` with its original text.
fn assert_outside_untouched(t: &Tree) {
    assert_eq!(t.read("outside/f").as_deref(), Some("orig"));
    assert_eq!(t.names("outside"), ["f"]);
}

/// A tree with `outside/f`, `ws/sub/keep` and `ws/real/keep`.
fn tree() -> Tree {
    let t = Tree::new();
    t.put("outside/f", "orig");
    t.put("ws/sub/keep", "");
    t.put("ws/real/keep", "");
    t
}

/// The write attempts through `dir` (relative to the workspace) and the
/// control that a grant without a link still works (`real` is granted).
fn write_probe(dir: &str, outside: &Path) -> String {
    let o = outside.display();
    format!(
        "{PRELUDE}\
         try through-link sh -c 'echo pwned > {dir}/new'\n\
         try append-through-link sh -c 'echo pwned >> {dir}/f'\n\
         try direct sh -c 'echo pwned > {o}/direct'\n\
         must real-write sh -c 'echo ok > real/new'\n"
    )
}

const WRITE_HELD: [&str; 3] = ["through-link", "append-through-link", "direct"];

/// `codexbox sandbox …` in `cwd` with this launcher.
fn oneshot(l: Launcher, cwd: &Path, profile: &str, script: &str) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["sandbox", "-P", profile, "-C"])
        .arg(cwd)
        .args(["--backend", if l.is_bwrap() { "bwrap" } else { "landlock" }])
        .args(["--", "sh", "-c", script])
        .current_dir(cwd)
        .stdin(Stdio::null());
    only_std_fds(&mut cmd);
    l.apply(&mut cmd);
    let out = cmd.output().expect("run codexbox sandbox");
    log(l, script, &out);
    out
}

/// The attack as reported: an earlier workspace-write `codexbox sandbox`
/// replaces `ws/out` by a symlink to a directory outside; a later one whose
/// profile writes only `ws/out` must not write there.
fn earlier_workspace_run_redirects_a_narrow_grant(l: Launcher) {
    let t = tree();
    let out = format!("{}out", nest(l));
    let o = t.outside.display();
    let planted = oneshot(
        l,
        &t.ws,
        "workspace",
        &format!("ln -s {o} {out} && echo planted"),
    );
    assert!(stdout(&planted).contains("planted"), "control: planting");
    let grant = t.ws.join(&out);
    let profile = narrow(&[entry(&grant, "write"), entry(&t.ws.join("real"), "write")]);
    let run = oneshot(l, &t.ws, &profile, &write_probe(&out, &t.outside));
    assert_markers(&run, &WRITE_HELD, &["real-write"]);
    assert_warned(&run, &grant, &grant);
    assert_outside_untouched(&t);
}

against!(earlier_workspace_run_redirects_a_narrow_grant: system, builtin, landlock);

/// The link lies in `/tmp` (in a directory of its own there, which
/// Landlock needs), which the earlier profile could write; the later
/// profile writes only the link's own path there.
fn link_planted_in_slash_tmp(l: Launcher) {
    let t = tree();
    let dir = tempfile::Builder::new()
        .prefix("codexbox-planted-")
        .tempdir_in("/tmp")
        .expect("tempdir in /tmp");
    let link = &dir.path().join("out");
    let earlier = workspace(&[special("slash_tmp", "write")], "restricted");
    plant(
        l,
        &t.ws,
        &earlier,
        &[],
        &format!("ln -s {} {}", t.outside.display(), link.display()),
    );
    let profile = narrow(&[entry(link, "write"), entry(&t.ws.join("real"), "write")]);
    let run = sh_env(
        l,
        &t.ws,
        &profile,
        &[],
        &write_probe(&link.display().to_string(), &t.outside),
    );
    assert_markers(&run, &WRITE_HELD, &["real-write"]);
    assert_warned(&run, link, link);
    assert_outside_untouched(&t);
}

against!(link_planted_in_slash_tmp: system, builtin, landlock);

/// The link lies in `$TMPDIR`; the later profile writes only the link's
/// path there.
fn link_planted_in_tmpdir(l: Launcher) {
    let t = tree();
    let tmpdir = t.root.join("tmpdir");
    std::fs::create_dir_all(tmpdir.join("sub")).expect("mkdir tmpdir");
    let env = [("TMPDIR", tmpdir.as_path())];
    let link = tmpdir.join(format!("{}cache", nest(l)));
    let earlier = workspace(&[special("tmpdir", "write")], "restricted");
    plant(
        l,
        &t.ws,
        &earlier,
        &env,
        &format!("ln -s {} {}", t.outside.display(), link.display()),
    );
    let profile = narrow(&[entry(&link, "write"), entry(&t.ws.join("real"), "write")]);
    let run = sh_env(
        l,
        &t.ws,
        &profile,
        &env,
        &write_probe(&link.display().to_string(), &t.outside),
    );
    assert_markers(&run, &WRITE_HELD, &["real-write"]);
    assert_warned(&run, &link, &link);
    assert_outside_untouched(&t);
}

against!(link_planted_in_tmpdir: system, builtin, landlock);

/// The link is an intermediate component: `ws/a -> outside`, grant `ws/a/b`.
fn link_as_an_intermediate_component(l: Launcher) {
    let t = tree();
    t.put("outside/b/g", "orig");
    let a = format!("{}a", nest(l));
    plant(
        l,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        &format!("ln -s {} {a}", t.outside.display()),
    );
    let grant = t.ws.join(&a).join("b");
    let profile = narrow(&[entry(&grant, "write"), entry(&t.ws.join("real"), "write")]);
    let o = t.outside.display();
    let script = format!(
        "{PRELUDE}\
         try through-link sh -c 'echo pwned > {a}/b/new'\n\
         try append-through-link sh -c 'echo pwned >> {a}/b/g'\n\
         try direct sh -c 'echo pwned > {o}/b/direct'\n\
         must real-write sh -c 'echo ok > real/new'\n"
    );
    let run = sh_env(l, &t.ws, &profile, &[], &script);
    assert_markers(&run, &WRITE_HELD, &["real-write"]);
    assert_warned(&run, &grant, &t.ws.join(&a));
    assert_eq!(t.read("outside/b/g").as_deref(), Some("orig"));
    assert_eq!(t.names("outside/b"), ["g"]);
}

against!(link_as_an_intermediate_component: system, builtin, landlock);

/// A link to another link (`ws/out -> hop -> outside`, `hop` the user's,
/// outside every place), and the planted link reached through the user's
/// own alias of the workspace (`alias -> ws`, grant `alias/out2`).
fn link_to_a_link_and_through_an_alias(l: Launcher) {
    let t = tree();
    let hop = t.root.join("hop");
    let alias = t.root.join("alias");
    std::os::unix::fs::symlink(&t.outside, &hop).expect("hop");
    std::os::unix::fs::symlink(&t.ws, &alias).expect("alias");
    let out = format!("{}out", nest(l));
    let out2 = format!("{}out2", nest(l));
    plant(
        l,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        &format!(
            "ln -s {} {out} && ln -s {} {out2}",
            hop.display(),
            t.outside.display()
        ),
    );
    let chained = t.ws.join(&out);
    let aliased = alias.join(&out2);
    let profile = narrow(&[
        entry(&chained, "write"),
        entry(&aliased, "write"),
        entry(&t.ws.join("real"), "write"),
    ]);
    let o = t.outside.display();
    let a = alias.display();
    let script = format!(
        "{PRELUDE}\
         try through-chain sh -c 'echo pwned > {out}/new'\n\
         try through-alias sh -c 'echo pwned > {a}/{out2}/new2'\n\
         try direct sh -c 'echo pwned > {o}/direct'\n\
         must real-write sh -c 'echo ok > real/new'\n"
    );
    let run = sh_env(l, &t.ws, &profile, &[], &script);
    assert_markers(
        &run,
        &["through-chain", "through-alias", "direct"],
        &["real-write"],
    );
    assert_warned(&run, &chained, &chained);
    assert_warned(&run, &aliased, &t.ws.join(&out2));
    assert_outside_untouched(&t);
}

against!(link_to_a_link_and_through_an_alias: system, builtin, landlock);

/// A relative link climbing out with `..`.
fn relative_link_with_dotdot(l: Launcher) {
    let t = tree();
    let out = format!("{}out", nest(l));
    let up = if l.is_bwrap() {
        "../outside"
    } else {
        "../../outside"
    };
    plant(
        l,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        &format!("ln -s {up} {out}"),
    );
    let grant = t.ws.join(&out);
    let profile = narrow(&[entry(&grant, "write"), entry(&t.ws.join("real"), "write")]);
    let run = sh_env(l, &t.ws, &profile, &[], &write_probe(&out, &t.outside));
    assert_markers(&run, &WRITE_HELD, &["real-write"]);
    assert_warned(&run, &grant, &grant);
    assert_outside_untouched(&t);
}

against!(relative_link_with_dotdot: system, builtin, landlock);

/// A granted file whose own last component was replaced by a link to a
/// file outside.
fn granted_file_replaced_by_a_link(l: Launcher) {
    let t = tree();
    let log_rel = format!("{}app.log", nest(l));
    t.put(&format!("ws/{log_rel}"), "log\n");
    let f = t.outside.join("f");
    plant(
        l,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        &format!("rm {log_rel} && ln -s {} {log_rel}", f.display()),
    );
    let grant = t.ws.join(&log_rel);
    let profile = narrow(&[entry(&grant, "write"), entry(&t.ws.join("real"), "write")]);
    let script = format!(
        "{PRELUDE}\
         try append-through-link sh -c 'echo pwned >> {log_rel}'\n\
         try truncate-through-link truncate -s 0 {log_rel}\n\
         must real-write sh -c 'echo ok > real/new'\n"
    );
    let run = sh_env(l, &t.ws, &profile, &[], &script);
    assert_markers(
        &run,
        &["append-through-link", "truncate-through-link"],
        &["real-write"],
    );
    assert_warned(&run, &grant, &grant);
    assert_outside_untouched(&t);
}

against!(granted_file_replaced_by_a_link: system, builtin, landlock);

/// A read grant through a planted link, with reads restricted to the
/// platform and the grant: the secret outside stays unreadable.
fn read_grant_through_a_planted_link(l: Launcher) {
    let t = tree();
    t.put("private/key", "PRIVKEY");
    let docs = format!("{}docs", nest(l));
    plant(
        l,
        &t.ws,
        &workspace(&[], "restricted"),
        &[],
        &format!("ln -s {} {docs}", t.root.join("private").display()),
    );
    let grant = t.ws.join(&docs);
    let profile = managed(
        &[special("minimal", "read"), entry(&grant, "read")],
        "restricted",
    );
    // Nothing of the workspace is visible: the command runs in `/`.
    let p = t.root.join("private").display().to_string();
    let script = format!(
        "{PRELUDE}\
         try through-link grep -q PRIVKEY {}/key\n\
         try direct grep -q PRIVKEY {p}/key\n\
         must platform-read test -r /etc/passwd\n",
        grant.display()
    );
    let run = command(
        l,
        &t.ws,
        &profile,
        &["--command-cwd", "/"],
        &["sh", "-c", &script],
    )
    .output()
    .expect("run codexbox linux-sandbox");
    log(l, &script, &run);
    assert_markers(&run, &["through-link", "direct"], &["platform-read"]);
    assert!(!stdout(&run).contains("PRIVKEY"));
    assert_warned(&run, &grant, &grant);
}

against!(read_grant_through_a_planted_link: system, builtin, landlock);

/// What runs outside the sandbox is never taken from a place an earlier
/// sandboxed command could write: an earlier run with `/tmp` writable
/// plants a `bwrap` (the launcher) and an `rg` (the deny-glob scanner)
/// that write outside and then do their job, in a directory a later run,
/// with deny globs and nothing writable, has first on its `PATH`.
fn tools_planted_on_path_never_run_outside(l: Launcher) {
    let t = tree();
    t.put("ws/sub/a.secret", "S3CRET");
    let Some(rg) = which("rg") else {
        crate::common::host::host_has("ripgrep", Err("no rg on PATH".into()));
        return;
    };
    // Only the system launcher looks for one on PATH.
    let bwrap = which("bwrap").unwrap_or_else(|| "/bin/false".into());
    let dir = tempfile::Builder::new()
        .prefix("codexbox-planted-")
        .tempdir_in("/tmp")
        .expect("tempdir in /tmp");
    let bin = dir.path().join("bin");
    let f = t.outside.join("f");
    let fake = |real: &Path| {
        format!(
            "printf '#!/bin/sh\\necho pwned >> {}\\nexec {} \"$@\"\\n'",
            f.display(),
            real.display()
        )
    };
    let earlier = workspace(&[special("slash_tmp", "write")], "restricted");
    plant(
        l,
        &t.ws,
        &earlier,
        &[],
        &format!(
            "mkdir {b} && {} > {b}/bwrap && {} > {b}/rg && chmod +x {b}/bwrap {b}/rg",
            fake(&bwrap),
            fake(&rg),
            b = bin.display()
        ),
    );
    let profile = narrow(&[glob("**/*.secret", "deny")]);
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let script = format!(
        "{PRELUDE}\
         try secret grep -q S3CRET sub/a.secret\n\
         must ran test -f sub/keep\n"
    );
    let run = sh_env(l, &t.ws, &profile, &[("PATH", Path::new(&path))], &script);
    assert_markers(&run, &["secret"], &["ran"]);
    assert_outside_untouched(&t);
}

against!(tools_planted_on_path_never_run_outside: system, builtin, landlock);

// Through the exec-server.

/// The launcher a server's sandboxes use: a process gets it from its
/// request's environment, a fs helper from the server's `PATH` (without a
/// system bubblewrap there, the built-in one).
fn server_for(l: Launcher) -> Server {
    match l {
        Launcher::Builtin => {
            Server::start_listen("ws://127.0.0.1:0", &[], &[("PATH", "/nonexistent")])
        }
        _ => Server::start(&[]),
    }
}

fn request_env(l: Launcher) -> Value {
    let launcher = if l == Launcher::Builtin {
        "builtin"
    } else {
        "system"
    };
    json!({"PATH": "/usr/bin:/bin", "CODEXBOX_BWRAP": launcher})
}

fn path_entry(path: &Path, access: &str) -> Value {
    json!({"path": {"type": "path", "path": path.to_string_lossy()}, "access": access})
}

fn special_entry(kind: &str, access: &str) -> Value {
    json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access})
}

fn managed_json(entries: Vec<Value>) -> Value {
    json!({"type": "managed", "file_system": {"type": "restricted", "entries": entries}, "network": "restricted"})
}

fn context(permissions: Value, cwd: &Path, roots: &[&Path]) -> Value {
    json!({
        "permissions": permissions,
        "cwd": cwd.to_string_lossy(),
        "workspaceRoots": roots.iter().map(|r| r.to_string_lossy()).collect::<Vec<_>>(),
        "windowsSandboxLevel": "disabled",
    })
}

/// Runs `script` as a sandboxed process; returns (exit code, output).
async fn process(
    ws: &mut Raw,
    l: Launcher,
    id: &str,
    cwd: &Path,
    sandbox: Value,
    script: &str,
) -> (i64, String) {
    ws.call(
        "process/start",
        json!({"processId": id, "argv": ["sh", "-c", script], "cwd": cwd,
               "env": request_env(l), "tty": false, "sandbox": sandbox}),
    )
    .await;
    let read = ws.read_until_closed(id, 0).await;
    let output: String = read["chunks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| String::from_utf8_lossy(&unb64(c["chunk"].as_str().unwrap_or(""))).into_owned())
        .collect();
    (read["exitCode"].as_i64().unwrap_or(-1), output)
}

/// The earlier workspace-write process plants `ws/out`; later requests
/// granting only `ws/out` must not write outside: a process (told why on
/// its stderr) and `fs/writeFile` (told why in the error), whether the
/// later request names the workspace as a root or only the server
/// remembers that an earlier sandbox could write it.
async fn server_attack(l: Launcher) {
    let t = tree();
    t.put("other/keep", "");
    let other = t.root.join("other");
    let server = server_for(l);
    let mut ws = Raw::connect(&server.url).await;
    ws.handshake().await;
    let write_ws = managed_json(vec![
        special_entry("root", "read"),
        special_entry("project_roots", "write"),
    ]);
    let o = t.outside.display();
    let (code, output) = process(
        &mut ws,
        l,
        "plant",
        &t.ws,
        context(write_ws, &t.ws, &[&t.ws]),
        &format!("ln -s {o} out && echo planted"),
    )
    .await;
    assert!(output.contains("planted"), "control: {code} {output}");

    let grant = t.ws.join("out");
    let narrow = managed_json(vec![
        special_entry("root", "read"),
        path_entry(&grant, "write"),
        path_entry(&t.ws.join("real"), "write"),
    ]);
    let warning = format!(
        "codex-linux-sandbox: warning: {0} grants nothing: it is reached through the symlink {0} inside ",
        grant.display()
    );
    // Named as the workspace root, and known to the server only.
    let contexts = [
        context(narrow.clone(), &t.ws, &[&t.ws]),
        context(narrow, &other, &[&other]),
    ];
    for (i, sandbox) in contexts.into_iter().enumerate() {
        let script = format!(
            "echo pwned > {0}/new && echo ESCAPE:new; echo pwned >> {0}/f && echo ESCAPE:append; \
             echo ok > {1}/new{i} && echo ok:real",
            grant.display(),
            t.ws.join("real").display()
        );
        let (_, output) = process(
            &mut ws,
            l,
            &format!("later{i}"),
            &t.ws,
            sandbox.clone(),
            &script,
        )
        .await;
        assert!(!output.contains("ESCAPE"), "{output}");
        assert!(output.contains("ok:real"), "control: {output}");
        assert!(output.contains(&warning), "no warning in {output}");

        let (code, message) = ws
            .call_err(
                "fs/writeFile",
                json!({"path": grant.join(format!("fs{i}")), "dataBase64": "cHduZWQ=", "sandbox": sandbox}),
            )
            .await;
        assert!(message.contains(&warning), "{code} {message}");
        let control = ws
            .call(
                "fs/writeFile",
                json!({"path": t.ws.join("real").join(format!("fs{i}")), "dataBase64": "b2s=", "sandbox": sandbox}),
            )
            .await;
        assert_eq!(control, json!({}));
    }
    assert_outside_untouched(&t);
    assert_eq!(t.read("ws/real/fs1").as_deref(), Some("ok"));
}

#[tokio::test]
async fn server_attack_system() {
    if available(Launcher::System) {
        server_attack(Launcher::System).await;
    }
}

#[tokio::test]
async fn server_attack_builtin() {
    if available(Launcher::Builtin) {
        server_attack(Launcher::Builtin).await;
    }
}
