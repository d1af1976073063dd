//! Escape attempts against the filesystem half of the sandbox, through the
//! real binary (`codexbox linux-sandbox`), as root, with the system
//! bubblewrap, the built-in bubblewrap and (where it claims the rule) the
//! Landlock backend: mount-table tricks, protected metadata swaps,
//! `gitdir:` targets, hard and symbolic links out of writable roots, deny
//! masks and deny globs. Each probe pairs the attacks with controls that
//! must succeed, and the host tree is checked afterwards.

use crate::common::redteam::*;

fn mount_table_tricks(l: Launcher) {
    let t = Tree::new();
    t.put("ws/.git/config", "[core]\n");
    t.put("ws/sub/keep", "keep");
    let ws = t.ws.display();
    let out_dir = t.outside.display();
    let script = format!(
        "{PRELUDE}\
         try bind-ws-over-outside mount --bind {ws} {out_dir}\n\
         try bind-outside-into-ws mount --bind {out_dir} {ws}/sub\n\
         try umount-codex-mask umount {ws}/.codex\n\
         try umount-lazy-git umount -l {ws}/.git\n\
         try remount-git-rw mount -o remount,rw,bind {ws}/.git\n\
         try remount-root-rw mount -o remount,rw /\n\
         try remount-outside-rw mount -o remount,rw,bind {out_dir}\n\
         try tmpfs-over-git mount -t tmpfs none {ws}/.git\n\
         try move-git-mount mount --move {ws}/.git {ws}/sub\n\
         try fresh-proc mount -t proc proc {ws}/sub\n\
         try git-config sh -c 'echo evil >> .git/config'\n\
         try outside-write sh -c 'echo x > {out_dir}/planted'\n\
         must ws-write sh -c 'echo fine > sub/new && test \"$(cat sub/new)\" = fine'\n\
         must mountinfo grep -q . /proc/self/mountinfo\n"
    );
    let out = sh(l, &t.ws, &workspace(&[], "restricted"), &[], &script);
    assert_markers(
        &out,
        &[
            "bind-ws-over-outside",
            "umount-codex-mask",
            "umount-lazy-git",
            "remount-git-rw",
            "remount-root-rw",
            "tmpfs-over-git",
            "move-git-mount",
            "git-config",
            "outside-write",
        ],
        &["ws-write", "mountinfo"],
    );
    assert_eq!(t.read("ws/.git/config").as_deref(), Some("[core]\n"));
    assert!(t.names("outside").is_empty(), "{:?}", t.names("outside"));
    assert_eq!(
        t.names("ws"),
        [".git", "sub"],
        "nothing left in the workspace"
    );
    assert_eq!(t.read("ws/sub/keep").as_deref(), Some("keep"));
}

against!(mount_table_tricks: system, builtin, landlock);

fn metadata_swaps(l: Launcher) {
    let t = Tree::new();
    t.put("ws/.git/config", "[core]\n");
    t.put("ws/.git/HEAD", "ref: refs/heads/main\n");
    t.put("ws/.git/hooks/README", "hooks\n");
    t.put("ws/decoy/config.toml", "decoy\n");
    t.put("ws/sub/d1/f", "x");
    let script = format!(
        "{PRELUDE}\
         try mv-git-away mv .git gitold\n\
         try rm-git rm -rf .git\n\
         try rename-dir-over-git mv -T decoy .git\n\
         try exchange-git python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); sys.exit(0 if l.renameat2(-100,b\"decoy\",-100,b\".git\",2)==0 else 1)'\n\
         try rename-dir-to-codex mv -T decoy .codex\n\
         try symlink-codex ln -s decoy .codex\n\
         try symlink-agents ln -s decoy .agents\n\
         try mkdir-codex sh -c 'mkdir -p .codex && echo x > .codex/config.toml'\n\
         try mkdir-agents sh -c 'mkdir -p .agents/skills && echo x > .agents/skills/s.md'\n\
         try hook sh -c 'echo \"#!/bin/sh\" > .git/hooks/pre-commit'\n\
         try hardlink-git-config sh -c 'ln .git/config sub/cfg && echo evil >> sub/cfg'\n\
         try touch-git-index touch .git/index.lock\n\
         must mv-normal-dir mv sub/d1 sub/d2\n\
         must hardlink-in-ws sh -c 'echo a > sub/a && ln sub/a sub/b'\n\
         must symlink-in-ws ln -s a sub/c\n\
         must read-git grep -q core .git/config\n"
    );
    let out = sh(l, &t.ws, &workspace(&[], "restricted"), &[], &script);
    assert_markers(
        &out,
        &[
            "mv-git-away",
            "rm-git",
            "rename-dir-over-git",
            "rename-dir-to-codex",
            "symlink-codex",
            "symlink-agents",
            "mkdir-codex",
            "mkdir-agents",
            "hook",
            "hardlink-git-config",
            "touch-git-index",
        ],
        &[
            "mv-normal-dir",
            "hardlink-in-ws",
            "symlink-in-ws",
            "read-git",
        ],
    );
    assert_eq!(t.read("ws/.git/config").as_deref(), Some("[core]\n"));
    assert!(t.read("ws/.git/hooks/pre-commit").is_none());
    assert_eq!(t.names("ws"), [".git", "decoy", "sub"]);
    assert_eq!(t.names("ws/.git"), ["HEAD", "config", "hooks"]);
    assert_eq!(t.read("ws/decoy/config.toml").as_deref(), Some("decoy\n"));
}

against!(metadata_swaps: system, builtin, landlock);

/// A linked worktree whose `gitdir:` target lies in another writable root
/// (the project root sits inside a larger writable directory): the
/// resolved gitdir is protected too.
fn gitdir_target_in_an_outer_writable_root(l: Launcher) {
    let t = Tree::new();
    t.put("realgit/config", "[core]\n");
    t.put("realgit/HEAD", "ref: refs/heads/main\n");
    t.put("ws/.git", "gitdir: ../realgit\n");
    t.put("other/keep", "");
    t.put("ws/src/keep", "");
    let profile = workspace(&[entry(&t.root, "write")], "restricted");
    let script = format!(
        "{PRELUDE}\
         try gitdir-config sh -c 'echo evil >> ../realgit/config'\n\
         try gitdir-hook sh -c 'mkdir -p ../realgit/hooks && echo x > ../realgit/hooks/pre-commit'\n\
         try gitdir-head sh -c 'echo ref: refs/heads/evil > ../realgit/HEAD'\n\
         try git-file sh -c 'echo gitdir: /tmp > .git'\n\
         must outer-root-write sh -c 'echo ok > ../other/fine'\n\
         must ws-write sh -c 'echo ok > src/f'\n"
    );
    let out = sh(l, &t.ws, &profile, &[], &script);
    assert_markers(
        &out,
        &["gitdir-config", "gitdir-hook", "gitdir-head", "git-file"],
        &["outer-root-write", "ws-write"],
    );
    assert_eq!(t.read("realgit/config").as_deref(), Some("[core]\n"));
    assert_eq!(t.names("realgit"), ["HEAD", "config"]);
    assert_eq!(t.read("ws/.git").as_deref(), Some("gitdir: ../realgit\n"));
}

against!(gitdir_target_in_an_outer_writable_root:
    system,
    builtin,
    landlock);

fn gitdir_target_inside_the_root(l: Launcher) {
    let t = Tree::new();
    t.put("ws/modules/realgit/config", "[core]\n");
    t.put("ws/.git", "gitdir: modules/realgit\n");
    t.put("ws/modules/lib/keep", "");
    let script = format!(
        "{PRELUDE}\
         try gitdir-config sh -c 'echo evil >> modules/realgit/config'\n\
         try gitdir-new sh -c 'echo x > modules/realgit/index.lock'\n\
         try gitdir-rename mv modules/realgit modules/moved\n\
         must sibling-write sh -c 'echo ok > modules/lib/other'\n"
    );
    let out = sh(l, &t.ws, &workspace(&[], "restricted"), &[], &script);
    assert_markers(
        &out,
        &["gitdir-config", "gitdir-new", "gitdir-rename"],
        &["sibling-write"],
    );
    assert_eq!(
        t.read("ws/modules/realgit/config").as_deref(),
        Some("[core]\n")
    );
    assert_eq!(t.names("ws/modules/realgit"), ["config"]);
}

against!(gitdir_target_inside_the_root: system, builtin, landlock);

fn links_out_of_writable_roots(l: Launcher) {
    let t = Tree::new();
    t.put("outside/f", "orig");
    t.put("ws/sub/x", "x");
    let o = t.outside.display();
    let script = format!(
        "{PRELUDE}\
         try hardlink-out sh -c 'ln {o}/f sub/h && echo evil >> sub/h'\n\
         try symlink-write sh -c 'ln -s {o}/f sub/l && echo evil >> sub/l'\n\
         try symlink-dir-write sh -c 'ln -s {o} sub/od && echo x > sub/od/planted'\n\
         try rename-in mv {o}/f sub/stolen\n\
         try copy-over cp sub/x {o}/f\n\
         try truncate truncate -s 0 {o}/f\n\
         must hardlink-in sh -c 'echo a > sub/a && ln sub/a sub/b && test -f sub/b'\n\
         must read-out grep -q orig {o}/f\n"
    );
    let out = sh(l, &t.ws, &workspace(&[], "restricted"), &[], &script);
    assert_markers(
        &out,
        &[
            "hardlink-out",
            "symlink-write",
            "symlink-dir-write",
            "rename-in",
            "copy-over",
            "truncate",
        ],
        &["hardlink-in", "read-out"],
    );
    assert_eq!(t.read("outside/f").as_deref(), Some("orig"));
    assert_eq!(t.names("outside"), ["f"]);
}

against!(links_out_of_writable_roots: system, builtin, landlock);

/// Denied paths inside a writable root: every way around the mask.
fn deny_masks_hold(l: Launcher) {
    let t = Tree::new();
    t.put("ws/secret.txt", "S3CRET");
    t.put("ws/vault/key", "K3Y");
    t.put("ws/sub/public", "public");
    let ws = t.ws.display();
    let profile = workspace(
        &[
            entry(&t.ws.join("secret.txt"), "deny"),
            entry(&t.ws.join("vault"), "none"),
        ],
        "restricted",
    );
    let script = format!(
        "{PRELUDE}\
         try cat-secret grep -q S3CRET secret.txt\n\
         try chmod-secret sh -c 'chmod 644 secret.txt; grep -q S3CRET secret.txt'\n\
         try hardlink-secret sh -c 'ln secret.txt sub/s2 && grep -q S3CRET sub/s2'\n\
         try symlink-secret sh -c 'ln -s ../secret.txt sub/s3 && grep -q S3CRET sub/s3'\n\
         try mv-secret sh -c 'mv secret.txt sub/s4 && grep -q S3CRET sub/s4'\n\
         try cp-secret sh -c 'cp secret.txt sub/s5 && grep -q S3CRET sub/s5'\n\
         try dotdot-secret grep -q S3CRET sub/../secret.txt\n\
         try proc-root-secret grep -q S3CRET /proc/self/root{ws}/secret.txt\n\
         try proc1-root-secret grep -q S3CRET /proc/1/root{ws}/secret.txt\n\
         try replace-secret sh -c 'rm -f secret.txt; echo planted > secret.txt; grep -q planted secret.txt'\n\
         try cat-vault grep -q K3Y vault/key\n\
         try chmod-vault sh -c 'chmod 755 vault; grep -q K3Y vault/key'\n\
         try mv-vault sh -c 'mv vault sub/v && grep -q K3Y sub/v/key'\n\
         must public grep -q public sub/public\n\
         must write-sibling sh -c 'echo ok > sub/new'\n{listing}",
        listing = if l.is_bwrap() {
            "try ls-vault sh -c 'ls vault | grep -q key'\n\
             try find-vault sh -c 'find . -name key | grep -q key'\n"
        } else {
            ""
        }
    );
    let out = sh(l, &t.ws, &profile, &[], &script);
    let mut held = vec![
        "cat-secret",
        "chmod-secret",
        "hardlink-secret",
        "symlink-secret",
        "mv-secret",
        "cp-secret",
        "dotdot-secret",
        "proc-root-secret",
        "replace-secret",
        "cat-vault",
        "chmod-vault",
        "mv-vault",
    ];
    if l.is_bwrap() {
        // The Landlock backend documents that names in a denied directory
        // stay listable.
        held.extend(["ls-vault", "find-vault"]);
    }
    assert_markers(&out, &held, &["public", "write-sibling"]);
    let s = stdout(&out) + &stderr(&out);
    assert!(!s.contains("S3CRET") && !s.contains("K3Y"), "{s}");
    assert_eq!(t.read("ws/secret.txt").as_deref(), Some("S3CRET"));
    assert_eq!(t.read("ws/vault/key").as_deref(), Some("K3Y"));
}

against!(deny_masks_hold: system, builtin, landlock);

/// Deny globs (a start-up snapshot): every way around the masks of the
/// files that existed when the command started.
fn deny_globs_hold(l: Launcher) {
    let t = Tree::new();
    t.put("ws/a/.env", "TOKEN=1");
    t.put("ws/a/b/prod.pem", "PRIVATE");
    t.put("ws/a/readme", "public");
    let profile = workspace(
        &[glob("**/.env", "deny"), glob("a/**/*.pem", "deny")],
        "restricted",
    );
    let script = format!(
        "{PRELUDE}\
         try cat-env grep -q TOKEN a/.env\n\
         try symlink-env sh -c 'ln -s a/.env l && grep -q TOKEN l'\n\
         try hardlink-env sh -c 'ln a/.env h && grep -q TOKEN h'\n\
         try cp-env sh -c 'cp a/.env c && grep -q TOKEN c'\n\
         try dotdot-env grep -q TOKEN a/b/../.env\n\
         try mv-dir sh -c 'mv a a2; r=1; grep -q TOKEN a2/.env && r=0; mv a2 a; exit $r'\n\
         try find-exec sh -c 'find . -name .env -exec cat {{}} + | grep -q TOKEN'\n\
         try pem grep -q PRIVATE a/b/prod.pem\n\
         try pem-chmod sh -c 'chmod 644 a/b/prod.pem; grep -q PRIVATE a/b/prod.pem'\n\
         must readme grep -q public a/readme\n"
    );
    let out = sh(l, &t.ws, &profile, &[], &script);
    assert_markers(
        &out,
        &[
            "cat-env",
            "symlink-env",
            "hardlink-env",
            "cp-env",
            "dotdot-env",
            "mv-dir",
            "find-exec",
            "pem",
            "pem-chmod",
        ],
        &["readme"],
    );
    let s = stdout(&out) + &stderr(&out);
    assert!(!s.contains("TOKEN") && !s.contains("PRIVATE"), "{s}");
    assert_eq!(t.read("ws/a/.env").as_deref(), Some("TOKEN=1"));
}

against!(deny_globs_hold: system, builtin);

/// chmod, chown, utimes and extended attributes of read-only paths: the
/// files' metadata is host state too (a setuid bit on a root-owned binary
/// would outlive the sandbox).
fn read_only_metadata_is_unchangeable(l: Launcher) {
    let t = Tree::new();
    let f = t.put("outside/tool", "#!/bin/sh\n");
    t.put("ws/.git/config", "[core]\n");
    t.put("ws/sub/script.sh", "#!/bin/sh\necho hi\n");
    let o = t.outside.display();
    let script = format!(
        "{PRELUDE}\
         try chmod-outside chmod 666 {o}/tool\n\
         try setuid-outside chmod 4755 {o}/tool\n\
         try chmod-outside-dir chmod 777 {o}\n\
         try chmod-git chmod 777 .git\n\
         try chmod-git-config chmod 666 .git/config\n\
         try chown-outside chown 65534 {o}/tool\n\
         try utime-outside touch -d 2000-01-01 {o}/tool\n\
         try xattr-outside python3 -c 'import os; os.setxattr(\"{o}/tool\", \"user.x\", b\"1\")'\n\
         must chmod-in-ws chmod +x sub/script.sh\n\
         must touch-in-ws touch -d 2000-01-01 sub/script.sh\n"
    );
    use std::os::unix::fs::MetadataExt;
    let stat = |p: &std::path::Path| {
        let m = std::fs::metadata(p).expect("stat");
        (m.mode(), m.uid(), m.mtime())
    };
    let before = (stat(&f), stat(&t.outside), stat(&t.ws.join(".git")));
    let out = sh(l, &t.ws, &workspace(&[], "restricted"), &[], &script);
    assert_markers(
        &out,
        &[
            "chmod-outside",
            "setuid-outside",
            "chmod-outside-dir",
            "chmod-git",
            "chmod-git-config",
            "chown-outside",
            "utime-outside",
            "xattr-outside",
        ],
        &["chmod-in-ws", "touch-in-ws"],
    );
    let after = (stat(&f), stat(&t.outside), stat(&t.ws.join(".git")));
    assert_eq!(before, after, "metadata of read-only paths changed");
}

against!(read_only_metadata_is_unchangeable:
    system,
    builtin,
    #[ignore = "LIMITATION: under the Landlock backend the caller can still chmod (set-id bits excepted) and set the times of read-only files it owns: Landlock has no right for metadata; set-id bits and xattrs are denied by seccomp, chown by the dropped capabilities"] landlock);

/// A deny glob that names a directory (`**/.ssh`) must hide what is inside
/// it: ripgrep's `--files` lists only files, so a directory match masks
/// nothing and `.ssh/id_rsa` stays readable.
fn deny_glob_naming_a_directory_hides_its_contents(l: Launcher) {
    let t = Tree::new();
    t.put("ws/a/.ssh/id_rsa", "PRIVKEY");
    t.put("ws/a/readme", "public");
    let profile = workspace(&[glob("**/.ssh", "deny")], "restricted");
    // Landlock cannot refuse listing a directory below a listable one
    // (READ_DIR is inherited): only its contents are held there.
    let list = if l.is_bwrap() {
        "try list-dir sh -c 'ls a/.ssh | grep -q id_rsa'\n"
    } else {
        ""
    };
    let script = format!(
        "{PRELUDE}\
         try read-key grep -q PRIVKEY a/.ssh/id_rsa\n\
         {list}\
         must readme grep -q public a/readme\n"
    );
    let out = sh(l, &t.ws, &profile, &[], &script);
    let held: &[&str] = if l.is_bwrap() {
        &["read-key", "list-dir"]
    } else {
        &["read-key"]
    };
    let s = stdout(&out);
    assert!(!s.contains("PRIVKEY"), "{s}");
    assert_markers(&out, held, &["readme"]);
}

against!(deny_glob_naming_a_directory_hides_its_contents:
    system,
    builtin,
    landlock);

/// A writable root that does not exist yet and lies inside another
/// writable root (`ws/cache` beside the project root `ws`): one run plants
/// it as a symlink to a read-only place, the next run must not make the
/// symlink's target writable (the bwrap argv binds the canonical target;
/// Landlock grants the opened target).
fn planted_writable_root_symlink_grants_nothing(l: Launcher) {
    let t = Tree::new();
    t.put("outside/f", "orig");
    t.put("ws/src/keep", "");
    let profile = workspace(&[entry(&t.ws.join("cache"), "write")], "restricted");
    let o = t.outside.display();
    let plant = format!("ln -s {o} cache && echo planted");
    let out = sh(l, &t.ws, &profile, &[], &plant);
    assert!(
        stdout(&out).contains("planted"),
        "control: the project root is writable"
    );
    let script = format!(
        "{PRELUDE}\
         try through-link sh -c 'echo pwned >> cache/f'\n\
         try direct sh -c 'echo pwned >> {o}/f'\n\
         try new-file sh -c 'echo x > {o}/planted'\n\
         must ws-write sh -c 'echo ok > src/new'\n"
    );
    let out = sh(l, &t.ws, &profile, &[], &script);
    assert_markers(&out, &["through-link", "direct", "new-file"], &["ws-write"]);
    assert_eq!(t.read("outside/f").as_deref(), Some("orig"));
    assert_eq!(t.names("outside"), ["f"]);
}

against!(planted_writable_root_symlink_grants_nothing:
    system,
    builtin,
    #[ignore = "LIMITATION: under Landlock a root with carve-outs is granted per existing child, so the control run cannot create the link at the top of the workspace (the rule itself is shared with bwrap: ResolvedPolicy::writable_roots)"] landlock);

/// The read-side twin: with restricted reads (`:minimal`), a readable
/// entry inside a writable root that a previous run replaced by a symlink
/// must not expose the symlink's target.
fn planted_readable_root_symlink_exposes_nothing(l: Launcher) {
    let t = Tree::new();
    t.put("private/key", "PRIVKEY");
    t.put("ws/src/keep", "");
    let profile = managed(
        &[
            special("minimal", "read"),
            special("project_roots", "write"),
            entry(&t.ws.join("docs"), "read"),
        ],
        "restricted",
    );
    // A previous run (any profile writing the workspace) planted the link.
    std::os::unix::fs::symlink(t.root.join("private"), t.ws.join("docs")).expect("symlink");
    let p = t.root.join("private").display().to_string();
    let script = format!(
        "{PRELUDE}\
         try through-link grep -q PRIVKEY docs/key\n\
         try direct grep -q PRIVKEY {p}/key\n\
         must ws-read test -f src/keep\n"
    );
    let out = sh(l, &t.ws, &profile, &[], &script);
    assert_markers(&out, &["through-link", "direct"], &["ws-read"]);
    assert!(!stdout(&out).contains("PRIVKEY"));
}

against!(planted_readable_root_symlink_exposes_nothing:
    system,
    builtin,
    landlock);

/// The policy cwd given through a symlinked alias of the workspace: the
/// metadata of the real directory stays protected.
fn symlinked_cwd_keeps_metadata_protected(l: Launcher) {
    let t = Tree::new();
    t.put("ws/.git/config", "[core]\n");
    t.put("ws/sub/keep", "");
    let alias = t.root.join("alias");
    std::os::unix::fs::symlink("ws", &alias).expect("symlink");
    let script = format!(
        "{PRELUDE}\
         try git-config sh -c 'echo evil >> .git/config'\n\
         try codex sh -c 'mkdir -p .codex && echo x > .codex/config.toml'\n\
         try real-git sh -c 'echo evil >> {}/.git/config'\n\
         must write sh -c 'echo ok > sub/f'\n",
        t.ws.display()
    );
    let out = sh(l, &alias, &workspace(&[], "restricted"), &[], &script);
    assert_markers(&out, &["git-config", "codex", "real-git"], &["write"]);
    assert_eq!(t.read("ws/.git/config").as_deref(), Some("[core]\n"));
    assert_eq!(t.names("ws"), [".git", "sub"]);
}

against!(symlinked_cwd_keeps_metadata_protected: system, builtin, landlock);
