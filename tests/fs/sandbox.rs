//! Sandboxed filesystem requests (docs/filesystem.md): through the real server, in a
//! warm fs-helper under the Linux sandbox. Every denied operation must leave
//! the disk exactly as it was.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::common::fs::{
    b64, canonical, eventually, restricted, sandbox, sandbox_available, snapshot, special, unb64,
    workdir, Dialect, Server, DIALECTS,
};
use serde_json::{json, Value};

/// A denial as the reference tests accept it: InvalidInput/PermissionDenied
/// with an EPERM/EACCES text, NotFound, or EROFS.
fn assert_denied(result: Result<Value, crate::common::fs::RpcErr>, what: &str) {
    let err = match result {
        Ok(value) => panic!("{what}: expected a denial, got {value}"),
        Err(err) => err,
    };
    // `File exists`: creating under a link whose target the sandbox hides
    // finds the dangling link itself in the way.
    let denied = err.code == -32004
        || err.message.contains("File exists")
        || err.message.contains("Operation not permitted")
        || err.message.contains("Permission denied")
        || err.message.contains("Read-only file system");
    assert!(denied, "{what}: not a denial: {err:?}");
}

/// A snapshot without the sandbox's mask mount points (empty top-level
/// `.git`, `.codex`, `.agents` directories that exist only while a helper
/// runs and are removed when it exits).
fn unmasked(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let masks = [".git/", ".codex/", ".agents/"];
    snapshot(dir)
        .into_iter()
        .filter(|(name, _)| {
            !masks.contains(&name.as_str())
                || dir
                    .join(name.trim_end_matches('/'))
                    .read_dir()
                    .map(|mut d| d.next().is_some())
                    .unwrap_or(true)
        })
        .collect()
}

struct Setup {
    _work: tempfile::TempDir,
    _outside: tempfile::TempDir,
    work: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn setup() -> Setup {
    let work_dir = workdir();
    let outside_dir = workdir();
    let work = canonical(&work_dir);
    let outside = canonical(&outside_dir);
    std::fs::write(work.join("inside.txt"), b"inside").unwrap();
    std::fs::write(outside.join("secret.txt"), b"secret").unwrap();
    std::fs::create_dir(outside.join("subdir")).unwrap();
    Setup {
        _work: work_dir,
        _outside: outside_dir,
        work,
        outside,
    }
}

#[tokio::test]
async fn reads_are_allowed_under_readable_roots_only() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    let ctx = sandbox(restricted(&[(&s.work, "read")], &[]), &s.work);
    for d in DIALECTS {
        let read = client
            .ok(
                "fs/readFile",
                json!({"path": d.path(&s.work.join("inside.txt")), "sandbox": ctx}),
            )
            .await;
        assert_eq!(unb64(&read["dataBase64"]), b"inside");
        let meta = client
            .ok(
                "fs/getMetadata",
                json!({"path": d.path(&s.work.join("inside.txt")), "sandbox": ctx}),
            )
            .await;
        assert_eq!(meta["size"], 6);
        let listing = client
            .ok(
                "fs/readDirectory",
                json!({"path": d.path(&s.work), "sandbox": ctx}),
            )
            .await;
        assert_eq!(listing["entries"][0]["fileName"], "inside.txt");
        let walked = client
            .ok("fs/walk", json!({"path": d.path(&s.work), "sandbox": ctx, "options":
                {"maxDepth": 2, "maxDirectories": 10, "maxEntries": 10, "followDirectorySymlinks": false}}))
            .await;
        assert_eq!(
            walked["entries"][0]["path"],
            json!(d.path(&s.work.join("inside.txt")))
        );
        assert_denied(
            client
                .call(
                    "fs/readFile",
                    json!({"path": d.path(&s.outside.join("secret.txt")), "sandbox": ctx}),
                )
                .await,
            "read outside",
        );
        // Read-only root: no write.
        let before = snapshot(&s.work);
        assert_denied(
            client
                .call("fs/writeFile", json!({"path": d.path(&s.work.join("new")), "dataBase64": b64(b"x"), "sandbox": ctx}))
                .await,
            "write in a read-only root",
        );
        assert_eq!(snapshot(&s.work), before);
    }
}

#[tokio::test]
async fn writes_are_allowed_only_under_writable_roots_and_git_stays_read_only() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    std::fs::create_dir(s.work.join(".git")).unwrap();
    std::fs::write(s.work.join(".git/config"), b"[core]").unwrap();
    // Workspace-style: read everything, write the project root.
    let profile = restricted(
        &[],
        &[
            special("root", "read"),
            json!({"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "write"}),
            json!({"path": {"type": "special", "value": {"kind": "project_roots", "subpath": ".git"}}, "access": "read"}),
        ],
    );
    let ctx = sandbox(profile, &s.work);
    for d in DIALECTS {
        let target = s.work.join(format!("written-{d:?}"));
        client
            .ok(
                "fs/writeFile",
                json!({"path": d.path(&target), "dataBase64": b64(b"ok"), "sandbox": ctx}),
            )
            .await;
        assert_eq!(std::fs::read(&target).unwrap(), b"ok");
        client
            .ok(
                "fs/createDirectory",
                json!({"path": d.path(&s.work.join(format!("dir-{d:?}/x"))), "sandbox": ctx}),
            )
            .await;
        let before_out = snapshot(&s.outside);
        let before_work = unmasked(&s.work);
        assert_denied(
            client
                .call("fs/writeFile", json!({"path": d.path(&s.outside.join("new.txt")), "dataBase64": b64(b"x"), "sandbox": ctx}))
                .await,
            "write outside",
        );
        assert_denied(
            client
                .call("fs/writeFile", json!({"path": d.path(&s.work.join(".git/config")), "dataBase64": b64(b"pwned"), "sandbox": ctx}))
                .await,
            "write .git/config",
        );
        assert_denied(
            client
                .call(
                    "fs/createDirectory",
                    json!({"path": d.path(&s.work.join(".git/hooks")), "sandbox": ctx}),
                )
                .await,
            "mkdir in .git",
        );
        assert_denied(
            client
                .call(
                    "fs/remove",
                    json!({"path": d.path(&s.work.join(".git")), "sandbox": ctx}),
                )
                .await,
            "remove .git",
        );
        assert_denied(
            client
                .call(
                    "fs/remove",
                    json!({"path": d.path(&s.outside.join("secret.txt")), "sandbox": ctx}),
                )
                .await,
            "remove outside",
        );
        assert_eq!(snapshot(&s.outside), before_out);
        assert_eq!(unmasked(&s.work), before_work);
    }
}

#[tokio::test]
async fn every_symlink_escape_is_denied_and_changes_nothing() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    std::os::unix::fs::symlink(&s.outside, s.work.join("escape")).unwrap();
    std::os::unix::fs::symlink(s.outside.join("secret.txt"), s.work.join("secret-link")).unwrap();
    let ctx = sandbox(restricted(&[(&s.work, "write")], &[]), &s.work);
    let readable_ctx = sandbox(
        restricted(&[(&s.work, "write")], &[special("root", "read")]),
        &s.work,
    );
    let before_out = snapshot(&s.outside);
    let before_work = snapshot(&s.work);
    let esc = s.work.join("escape");
    let dotdot = s.work.join(format!(
        "../{}/secret.txt",
        s.outside.file_name().unwrap().to_string_lossy()
    ));
    for d in DIALECTS {
        let p = |path: &Path| d.path(path);
        // Reads: the outside is neither readable nor writable.
        let reads = vec![
            (
                "read via dir link",
                "fs/readFile",
                json!({"path": p(&esc.join("secret.txt"))}),
            ),
            (
                "read via file link",
                "fs/readFile",
                json!({"path": p(&s.work.join("secret-link"))}),
            ),
            ("read via ..", "fs/readFile", json!({"path": p(&dotdot)})),
            (
                "readdir via link",
                "fs/readDirectory",
                json!({"path": p(&esc)}),
            ),
            (
                "metadata via link",
                "fs/getMetadata",
                json!({"path": p(&esc.join("secret.txt"))}),
            ),
            (
                "copy source via link",
                "fs/copy",
                json!({"sourcePath": p(&esc.join("secret.txt")), "destinationPath": p(&s.work.join("stolen.txt")), "recursive": false}),
            ),
            (
                "copy tree source via link",
                "fs/copy",
                json!({"sourcePath": p(&esc.join("subdir")), "destinationPath": p(&s.work.join("stolen-dir")), "recursive": true}),
            ),
        ];
        // Mutations: tried both where the outside is invisible and where it
        // is readable but not writable.
        let writes = [
            (
                "write via dir link",
                "fs/writeFile",
                json!({"path": p(&esc.join("new.txt")), "dataBase64": b64(b"x")}),
            ),
            (
                "overwrite via file link",
                "fs/writeFile",
                json!({"path": p(&s.work.join("secret-link")), "dataBase64": b64(b"x")}),
            ),
            (
                "mkdir via link",
                "fs/createDirectory",
                json!({"path": p(&esc.join("newdir"))}),
            ),
            (
                "copy destination via link",
                "fs/copy",
                json!({"sourcePath": p(&s.work.join("inside.txt")), "destinationPath": p(&esc.join("planted.txt")), "recursive": false}),
            ),
            (
                "remove via link",
                "fs/remove",
                json!({"path": p(&esc.join("secret.txt")), "force": false}),
            ),
            (
                "remove dir via link",
                "fs/remove",
                json!({"path": p(&esc.join("subdir")), "force": false}),
            ),
        ];
        let cases = reads
            .into_iter()
            .map(|case| (case, &ctx))
            .chain(writes.iter().cloned().map(|case| (case, &ctx)))
            .chain(writes.iter().cloned().map(|case| (case, &readable_ctx)));
        for ((what, method, mut params), context) in cases {
            params["sandbox"] = context.clone();
            assert_denied(client.call(method, params).await, what);
            assert_eq!(
                snapshot(&s.outside),
                before_out,
                "{what} changed the outside"
            );
            assert_eq!(
                unmasked(&s.work),
                before_work,
                "{what} changed the workspace"
            );
        }
    }
    // The link itself is inside the writable root: removing it removes the link only.
    client
        .ok(
            "fs/remove",
            json!({"path": s.work.join("escape"), "sandbox": ctx}),
        )
        .await;
    assert!(std::fs::symlink_metadata(s.work.join("escape")).is_err());
    assert_eq!(snapshot(&s.outside), before_out);
    // Once the helpers are gone, not even the sandbox's masks remain.
    drop(client);
    drop(server);
    let mut expected = before_work.clone();
    expected.retain(|(name, _)| !name.starts_with("escape"));
    assert!(
        eventually(|| snapshot(&s.work) == expected).await,
        "left behind: {:?}",
        snapshot(&s.work)
    );
}

#[tokio::test]
async fn sandboxed_writes_preserve_hard_links_and_canonicalize_resolves_links() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    std::fs::write(s.work.join("target"), b"old").unwrap();
    std::fs::hard_link(s.work.join("target"), s.work.join("hard")).unwrap();
    std::fs::create_dir(s.work.join("real")).unwrap();
    std::os::unix::fs::symlink(s.work.join("real"), s.work.join("alias")).unwrap();
    let inode = std::fs::metadata(s.work.join("target")).unwrap().ino();
    let ctx = sandbox(restricted(&[(&s.work, "write")], &[]), &s.work);
    client
        .ok(
            "fs/writeFile",
            json!({"path": s.work.join("hard"), "dataBase64": b64(b"new"), "sandbox": ctx}),
        )
        .await;
    assert_eq!(std::fs::read(s.work.join("target")).unwrap(), b"new");
    assert_eq!(std::fs::metadata(s.work.join("hard")).unwrap().ino(), inode);
    assert_eq!(std::fs::metadata(s.work.join("hard")).unwrap().nlink(), 2);
    for d in DIALECTS {
        let answer = client
            .ok(
                "fs/canonicalize",
                json!({"path": d.path(&s.work.join("alias")), "sandbox": ctx}),
            )
            .await;
        assert_eq!(answer["path"], json!(d.path(&s.work.join("real"))));
    }
}

#[tokio::test]
async fn workspace_roots_are_materialized_and_empty_roots_grant_nothing() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    let profile = restricted(
        &[],
        &[
            json!({"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "read"}),
        ],
    );
    let uri = |p: &Path| Dialect::Uri.path(p);
    let ctx = json!({"permissions": profile, "cwd": uri(&s.work), "workspaceRoots": [uri(&s.work)], "windowsSandboxLevel": "disabled"});
    let read = client
        .ok(
            "fs/readFile",
            json!({"path": uri(&s.work.join("inside.txt")), "sandbox": ctx}),
        )
        .await;
    assert_eq!(unb64(&read["dataBase64"]), b"inside");
    assert_denied(
        client
            .call(
                "fs/readFile",
                json!({"path": uri(&s.outside.join("secret.txt")), "sandbox": ctx}),
            )
            .await,
        "read outside the workspace root",
    );
    let empty =
        json!({"permissions": profile, "cwd": uri(&s.work), "windowsSandboxLevel": "disabled"});
    assert_denied(
        client
            .call(
                "fs/readFile",
                json!({"path": uri(&s.work.join("inside.txt")), "sandbox": empty}),
            )
            .await,
        "read with empty workspaceRoots",
    );
    let no_cwd = json!({"permissions": profile});
    let err = client
        .err(
            "fs/readFile",
            json!({"path": s.work.join("inside.txt"), "sandbox": no_cwd}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            -32600,
            "file system sandbox context with dynamic permissions requires cwd"
        )
    );
    let foreign = json!({"permissions": profile, "cwd": "file://host/share"});
    let err = client
        .err(
            "fs/readFile",
            json!({"path": s.work.join("inside.txt"), "sandbox": foreign}),
        )
        .await;
    assert_eq!(
        (err.code, err.message.as_str()),
        (-32600, "'file://host/share' is invalid on 'linux'")
    );
}

#[tokio::test]
async fn the_legacy_sandbox_policy_shape_is_accepted() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    let ctx = json!({
        "sandboxPolicy": {"type": "workspace-write", "network_access": false, "exclude_slash_tmp": true, "exclude_tmpdir_env_var": true},
        "sandboxPolicyCwd": s.work,
    });
    client
        .ok(
            "fs/writeFile",
            json!({"path": s.work.join("legacy.txt"), "dataBase64": b64(b"ok"), "sandbox": ctx}),
        )
        .await;
    assert_eq!(std::fs::read(s.work.join("legacy.txt")).unwrap(), b"ok");
    let before = snapshot(&s.outside);
    assert_denied(
        client
            .call(
                "fs/writeFile",
                json!({"path": s.outside.join("x"), "dataBase64": b64(b"x"), "sandbox": ctx}),
            )
            .await,
        "legacy write outside",
    );
    assert_eq!(snapshot(&s.outside), before);
    // danger-full-access runs directly.
    let full = json!({"sandboxPolicy": {"type": "danger-full-access"}, "sandboxPolicyCwd": s.work});
    client
        .ok(
            "fs/writeFile",
            json!({"path": s.outside.join("direct.txt"), "dataBase64": b64(b"d"), "sandbox": full}),
        )
        .await;
    assert!(s.outside.join("direct.txt").exists());
}

#[tokio::test]
async fn use_legacy_landlock_runs_the_helper_under_landlock() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    let mut ctx = sandbox(
        restricted(&[(&s.work, "write")], &[special("root", "read")]),
        &s.work,
    );
    ctx["useLegacyLandlock"] = json!(true);
    // The Landlock backend keeps `.git` & co read-only by granting write on
    // each existing entry of the root, so write inside a subdirectory.
    std::fs::create_dir(s.work.join("sub")).unwrap();
    client
        .ok(
            "fs/writeFile",
            json!({"path": s.work.join("sub/landlock.txt"), "dataBase64": b64(b"ok"), "sandbox": ctx}),
        )
        .await;
    assert_eq!(
        std::fs::read(s.work.join("sub/landlock.txt")).unwrap(),
        b"ok"
    );
    let before = snapshot(&s.outside);
    assert_denied(
        client
            .call(
                "fs/writeFile",
                json!({"path": s.outside.join("x"), "dataBase64": b64(b"x"), "sandbox": ctx}),
            )
            .await,
        "landlock write outside",
    );
    assert_eq!(snapshot(&s.outside), before);
}

#[tokio::test]
async fn a_writable_root_given_through_a_symlink_alias_is_writable() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    std::fs::create_dir(s.work.join("real")).unwrap();
    let alias = s.outside.join("alias");
    std::os::unix::fs::symlink(s.work.join("real"), &alias).unwrap();
    let ctx = sandbox(
        restricted(&[(&alias, "write")], &[special("root", "read")]),
        &s.work,
    );
    for d in DIALECTS {
        let name = format!("via-alias-{d:?}");
        client
            .ok(
                "fs/writeFile",
                json!({"path": d.path(&alias.join(&name)), "dataBase64": b64(b"a"), "sandbox": ctx}),
            )
            .await;
        assert_eq!(
            std::fs::read(s.work.join("real").join(&name)).unwrap(),
            b"a"
        );
    }
}

#[tokio::test]
async fn walk_reports_denied_directories_as_errors() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let s = setup();
    std::fs::create_dir(s.work.join("denied")).unwrap();
    std::fs::write(s.work.join("denied/hidden.txt"), b"no").unwrap();
    let ctx = sandbox(
        restricted(&[(&s.work, "read"), (&s.work.join("denied"), "deny")], &[]),
        &s.work,
    );
    for d in DIALECTS {
        let walked = client
            .ok(
                "fs/walk",
                json!({"path": d.path(&s.work), "sandbox": ctx, "options":
                    {"maxDepth": 4, "maxDirectories": 10, "maxEntries": 10, "followDirectorySymlinks": false}}),
            )
            .await;
        let paths: Vec<&str> = walked["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["path"].as_str().unwrap())
            .collect();
        assert!(
            !paths.iter().any(|path| path.contains("hidden.txt")),
            "denied content listed: {walked}"
        );
        assert_eq!(
            walked["errors"][0]["path"],
            json!(d.path(&s.work.join("denied"))),
            "{walked}"
        );
        assert!(
            walked["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("Permission denied"),
            "{walked}"
        );
        assert_denied(
            client
                .call(
                    "fs/readFile",
                    json!({"path": d.path(&s.work.join("denied/hidden.txt")), "sandbox": ctx}),
                )
                .await,
            "read a denied file",
        );
    }
}
