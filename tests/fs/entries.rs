//! What `codexbox cp` needs from the filesystem API beyond the reference's
//! methods, through the real server: modes and symlink targets in
//! `fs/getMetadata`, `followSymlinks: false` on `fs/getMetadata` and
//! `fs/readDirectory`, `fs/setPermissions` and `fs/createSymlink`, direct and
//! sandboxed.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::fs::{
    canonical, restricted, sandbox, sandbox_available, special, workdir, Server, DIALECTS,
};
use serde_json::json;

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn metadata_carries_the_mode_and_the_symlink_target() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::write(root.join("f"), b"12345").unwrap();
    std::fs::set_permissions(root.join("f"), std::fs::Permissions::from_mode(0o751)).unwrap();
    std::os::unix::fs::symlink("f", root.join("lf")).unwrap();
    std::os::unix::fs::symlink("../nowhere", root.join("dangling")).unwrap();
    for d in DIALECTS {
        let meta = client
            .ok("fs/getMetadata", json!({"path": d.path(&root.join("f"))}))
            .await;
        assert_eq!(meta["mode"], 0o751);
        assert!(meta.get("symlinkTarget").is_none(), "{meta}");
        // Followed (the default): the target's kind and mode, the link's text.
        let meta = client
            .ok("fs/getMetadata", json!({"path": d.path(&root.join("lf"))}))
            .await;
        assert_eq!(
            (&meta["isSymlink"], &meta["isFile"], &meta["mode"]),
            (&json!(true), &json!(true), &json!(0o751))
        );
        assert_eq!(meta["symlinkTarget"], "f");
        // Not followed: the link itself, dangling or not.
        let meta = client
            .ok(
                "fs/getMetadata",
                json!({"path": d.path(&root.join("dangling")), "followSymlinks": false}),
            )
            .await;
        assert_eq!(
            (&meta["isSymlink"], &meta["isFile"], &meta["isDirectory"]),
            (&json!(true), &json!(false), &json!(false))
        );
        assert_eq!(meta["symlinkTarget"], "../nowhere");
        assert_eq!(meta["size"], "../nowhere".len());
    }
}

#[tokio::test]
async fn read_directory_without_following_lists_every_entry_as_itself() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::set_permissions(root.join("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(root.join("f"), b"abc").unwrap();
    std::os::unix::fs::symlink("d", root.join("ld")).unwrap();
    std::os::unix::fs::symlink("missing", root.join("x-dangling")).unwrap();
    // The reference's listing: followed kinds, the dangling link skipped,
    // no new members.
    let followed = client
        .ok("fs/readDirectory", json!({"path": root.to_str()}))
        .await;
    assert_eq!(
        followed["entries"],
        json!([
            {"fileName": "d", "isDirectory": true, "isFile": false},
            {"fileName": "f", "isDirectory": false, "isFile": true},
            {"fileName": "ld", "isDirectory": true, "isFile": false},
        ])
    );
    let own = client
        .ok(
            "fs/readDirectory",
            json!({"path": root.to_str(), "followSymlinks": false}),
        )
        .await;
    assert_eq!(
        own["entries"],
        json!([
            {"fileName": "d", "isDirectory": true, "isFile": false, "isSymlink": false,
             "size": std::fs::symlink_metadata(root.join("d")).unwrap().len(), "mode": 0o700},
            {"fileName": "f", "isDirectory": false, "isFile": true, "isSymlink": false,
             "size": 3, "mode": mode_of(&root.join("f"))},
            {"fileName": "ld", "isDirectory": false, "isFile": false, "isSymlink": true,
             "size": 1, "mode": 0o777, "symlinkTarget": "d"},
            {"fileName": "x-dangling", "isDirectory": false, "isFile": false, "isSymlink": true,
             "size": 7, "mode": 0o777, "symlinkTarget": "missing"},
        ])
    );
}

#[tokio::test]
async fn set_permissions_sets_modes_but_never_set_id_bits_or_through_a_link() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    let file = root.join("f");
    std::fs::write(&file, b"x").unwrap();
    std::os::unix::fs::symlink(&file, root.join("link")).unwrap();
    for (d, mode) in DIALECTS.into_iter().zip([0o640, 0o1755]) {
        client
            .ok(
                "fs/setPermissions",
                json!({"path": d.path(&file), "mode": mode}),
            )
            .await;
        assert_eq!(mode_of(&file), mode);
    }
    for mode in [0o4755, 0o2755, 0o10644] {
        let err = client
            .err(
                "fs/setPermissions",
                json!({"path": file.to_str(), "mode": mode}),
            )
            .await;
        assert_eq!(err.code, -32600);
        assert!(err.message.contains("only the permission bits"), "{err:?}");
        assert_eq!(mode_of(&file), 0o1755, "a refused mode changed nothing");
    }
    let err = client
        .err(
            "fs/setPermissions",
            json!({"path": root.join("link").to_str(), "mode": 0o600}),
        )
        .await;
    assert_eq!(err.code, -32600);
    assert!(err.message.contains("it is a symlink"), "{err:?}");
    assert_eq!(mode_of(&file), 0o1755, "the link's target is untouched");
    let err = client
        .err(
            "fs/setPermissions",
            json!({"path": root.join("missing").to_str(), "mode": 0o600}),
        )
        .await;
    assert_eq!(err.code, -32004);
}

#[tokio::test]
async fn create_symlink_makes_a_new_link_and_never_replaces_anything() {
    let server = Server::start();
    let client = server.connect().await;
    let dir = workdir();
    let root = canonical(&dir);
    for d in DIALECTS {
        let link = root.join(format!("link-{d:?}"));
        client
            .ok(
                "fs/createSymlink",
                json!({"path": d.path(&link), "target": "../some where/x"}),
            )
            .await;
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../some where/x")
        );
        let err = client
            .err(
                "fs/createSymlink",
                json!({"path": d.path(&link), "target": "other"}),
            )
            .await;
        assert!(err.message.contains("File exists"), "{err:?}");
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../some where/x")
        );
    }
    let err = client
        .err(
            "fs/createSymlink",
            json!({"path": root.join("empty").to_str(), "target": ""}),
        )
        .await;
    assert_eq!(err.code, -32600);
    assert!(!root.join("empty").exists());
}

#[tokio::test]
async fn sandboxed_mode_and_link_changes_stay_inside_writable_roots() {
    if !sandbox_available() {
        return;
    }
    let server = Server::start();
    let client = server.connect().await;
    let work_dir = workdir();
    let outside_dir = workdir();
    let work = canonical(&work_dir);
    let outside = canonical(&outside_dir);
    std::fs::write(work.join("mine"), b"m").unwrap();
    std::fs::write(outside.join("theirs"), b"t").unwrap();
    std::fs::set_permissions(
        outside.join("theirs"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let profile = restricted(
        &[],
        &[special("root", "read"), special("project_roots", "write")],
    );
    let ctx = sandbox(profile, &work);
    client
        .ok(
            "fs/setPermissions",
            json!({"path": work.join("mine").to_str(), "mode": 0o600, "sandbox": ctx}),
        )
        .await;
    assert_eq!(mode_of(&work.join("mine")), 0o600);
    client
        .ok(
            "fs/createSymlink",
            json!({"path": work.join("l").to_str(), "target": "mine", "sandbox": ctx}),
        )
        .await;
    assert_eq!(
        std::fs::read_link(work.join("l")).unwrap(),
        Path::new("mine")
    );
    let denied = client
        .err(
            "fs/setPermissions",
            json!({"path": outside.join("theirs").to_str(), "mode": 0o600, "sandbox": ctx}),
        )
        .await;
    assert!(
        denied.message.contains("Read-only file system")
            || denied.message.contains("Operation not permitted")
            || denied.message.contains("Permission denied"),
        "{denied:?}"
    );
    assert_eq!(mode_of(&outside.join("theirs")), 0o644);
    let denied = client
        .err(
            "fs/createSymlink",
            json!({"path": outside.join("l").to_str(), "target": "x", "sandbox": ctx}),
        )
        .await;
    assert!(!denied.message.is_empty());
    assert!(std::fs::symlink_metadata(outside.join("l")).is_err());
}
