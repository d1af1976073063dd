//! Unit tests of the policy model, conversions and resolution.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::*;
use FileSystemAccessMode::{Deny, Read, Write};

fn json(v: &impl Serialize) -> String {
    serde_json::to_string(v).unwrap()
}

const WORKSPACE_JSON: &str = r#"{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},{"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},{"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"},{"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots","subpath":".agents"}},"access":"read"},{"path":{"type":"special","value":{"kind":"project_roots","subpath":".codex"}},"access":"read"}]},"network":"restricted"}"#;

#[test]
fn read_only_profile_matches_reference_json() {
    assert_eq!(
        json(&PermissionProfile::read_only()),
        r#"{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"}"#
    );
}

#[test]
fn workspace_profile_matches_reference_json_and_round_trips() {
    let p = PermissionProfile::workspace_write();
    assert_eq!(json(&p), WORKSPACE_JSON);
    let back: PermissionProfile = serde_json::from_str(WORKSPACE_JSON).unwrap();
    assert_eq!(back, p);
}

#[test]
fn shipped_profile_files_match_builtins() {
    for (text, name) in [
        (
            include_str!("../../resources/profiles/read-only.json"),
            "read-only",
        ),
        (
            include_str!("../../resources/profiles/workspace.json"),
            "workspace",
        ),
        (
            include_str!("../../resources/profiles/danger-full-access.json"),
            "danger-full-access",
        ),
    ] {
        let parsed: PermissionProfile = serde_json::from_str(text).unwrap();
        assert_eq!(Some(parsed), PermissionProfile::named(name), "{name}");
    }
}

#[test]
fn disabled_and_external_round_trip() {
    for text in [
        r#"{"type":"disabled"}"#,
        r#"{"type":"external","network":"enabled"}"#,
        r#"{"type":"managed","file_system":{"type":"unrestricted"},"network":"enabled"}"#,
    ] {
        let p: PermissionProfile = serde_json::from_str(text).unwrap();
        assert_eq!(json(&p), text);
    }
}

#[test]
fn none_is_an_alias_of_deny_and_cwd_alias_of_project_roots() {
    let e: FileSystemSandboxEntry = serde_json::from_str(
        r#"{"path":{"type":"special","value":{"kind":"current_working_directory","subpath":"a"}},"access":"none"}"#,
    )
    .unwrap();
    assert_eq!(e.access, Deny);
    assert_eq!(
        e.path,
        FileSystemPath::project_subpath("a"),
        "alias maps to project_roots"
    );
    assert_eq!(
        json(&e),
        r#"{"path":{"type":"special","value":{"kind":"project_roots","subpath":"a"}},"access":"deny"}"#
    );
}

#[test]
fn unknown_special_kinds_are_preserved_and_ignored() {
    let e: FileSystemSandboxEntry = serde_json::from_str(
        r#"{"path":{"type":"special","value":{"kind":"future_thing"}},"access":"write"}"#,
    )
    .unwrap();
    assert_eq!(
        json(&e.path),
        r#"{"type":"special","value":{"kind":"unknown","path":":future_thing"}}"#
    );
    let policy = FileSystemSandboxPolicy {
        entries: vec![e],
        ..Default::default()
    };
    assert!(policy.resolve(Path::new("/w"), &[]).entries.is_empty());
}

#[test]
fn paths_must_be_absolute_and_are_normalised_uris_accepted() {
    let bad = serde_json::from_str::<FileSystemSandboxEntry>(
        r#"{"path":{"type":"path","path":"rel/x"},"access":"read"}"#,
    );
    assert!(bad.is_err());
    let e: FileSystemSandboxEntry = serde_json::from_str(
        r#"{"path":{"type":"path","path":"file:///a/./b/../c"},"access":"read"}"#,
    )
    .unwrap();
    assert_eq!(
        e.path,
        FileSystemPath::Path {
            path: PathBuf::from("/a/c")
        }
    );
    let bad_sub = serde_json::from_str::<FileSystemSandboxEntry>(
        r#"{"path":{"type":"special","value":{"kind":"project_roots","subpath":"../x"}},"access":"read"}"#,
    );
    assert!(bad_sub.is_err());
}

#[test]
fn legacy_untagged_profile_shapes_are_managed() {
    let p: PermissionProfile = serde_json::from_str(
        r#"{"network":{"enabled":true},"file_system":{"read":["/r"],"write":["/w"]}}"#,
    )
    .unwrap();
    assert_eq!(
        p,
        PermissionProfile::Managed {
            file_system: ManagedFileSystemPermissions::Restricted {
                entries: vec![
                    FileSystemSandboxEntry::path("/r", Read),
                    FileSystemSandboxEntry::path("/w", Write)
                ],
                glob_scan_max_depth: None
            },
            network: NetworkSandboxPolicy::Enabled
        }
    );
    let p: PermissionProfile = serde_json::from_str(
        r#"{"network":{"enabled":false},"file_system":{"entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}],"glob_scan_max_depth":2}}"#,
    )
    .unwrap();
    assert_eq!(p.network(), NetworkSandboxPolicy::Restricted);
    assert_eq!(p.to_runtime().0.glob_scan_max_depth, NonZeroUsize::new(2));
}

#[test]
fn runtime_policy_json_shape() {
    let fs = FileSystemSandboxPolicy::read_only();
    assert_eq!(
        json(&fs),
        r#"{"kind":"restricted","entries":[{"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]}"#
    );
    assert_eq!(
        json(&FileSystemSandboxPolicy::unrestricted()),
        r#"{"kind":"unrestricted"}"#
    );
    let ext: FileSystemSandboxPolicy =
        serde_json::from_str(r#"{"kind":"external-sandbox"}"#).unwrap();
    assert!(ext.has_full_disk_write_access());
    assert_eq!(json(&NetworkSandboxPolicy::Enabled), r#""enabled""#);
}

#[test]
fn legacy_policies_parse_and_convert() {
    let p: SandboxPolicy = serde_json::from_str(r#"{"type":"danger-full-access"}"#).unwrap();
    assert_eq!(
        PermissionProfile::from_legacy(&p),
        PermissionProfile::Disabled
    );
    let p: SandboxPolicy =
        serde_json::from_str(r#"{"type":"read-only","network_access":true}"#).unwrap();
    assert_eq!(json(&p), r#"{"type":"read-only","network_access":true}"#);
    assert_eq!(
        PermissionProfile::from_legacy(&p),
        PermissionProfile::read_only().with_network(NetworkSandboxPolicy::Enabled)
    );
    let p: SandboxPolicy =
        serde_json::from_str(r#"{"type":"external-sandbox","network_access":"enabled"}"#).unwrap();
    assert_eq!(
        PermissionProfile::from_legacy(&p),
        PermissionProfile::External {
            network: NetworkSandboxPolicy::Enabled
        }
    );
    let p: SandboxPolicy = serde_json::from_str(r#"{"type":"workspace-write"}"#).unwrap();
    assert_eq!(
        PermissionProfile::from_legacy(&p),
        PermissionProfile::workspace_write()
    );
    // Historical full access changes nothing; a restriction is kept.
    let p: SandboxPolicy =
        serde_json::from_str(r#"{"type":"read-only","access":{"type":"full-access"}}"#).unwrap();
    assert_eq!(
        PermissionProfile::from_legacy(&p),
        PermissionProfile::read_only()
    );
    let p: SandboxPolicy = serde_json::from_str(
        r#"{"type":"read-only","access":{"type":"restricted","include_platform_defaults":true,"readable_roots":["/usr"]}}"#,
    )
    .unwrap();
    assert_eq!(
        FileSystemSandboxPolicy::from(&p).entries,
        vec![
            FileSystemSandboxEntry::special(FileSystemSpecialPath::Minimal, Read),
            FileSystemSandboxEntry::path("/usr", Read),
        ]
    );
    assert!(serde_json::from_str::<SandboxPolicy>(
        r#"{"type":"read-only","access":{"type":"something-new"}}"#
    )
    .is_err());
}

#[test]
fn a_grant_through_a_link_inside_a_writable_root_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::os::unix::fs::symlink(root.join("outside"), ws.join("cache")).unwrap();
    let fs = FileSystemSandboxPolicy {
        kind: FileSystemSandboxKind::Restricted,
        glob_scan_max_depth: None,
        entries: vec![
            FileSystemSandboxEntry::path(&ws, Write),
            FileSystemSandboxEntry::path(ws.join("cache"), Write),
            FileSystemSandboxEntry::path(ws.join("cache/sub"), Read),
            FileSystemSandboxEntry::path(ws.join("src"), Read),
        ],
    };
    let r = fs.resolve_with(&ctx(Path::new("/elsewhere")));
    let roots: Vec<PathBuf> = r.writable_roots().into_iter().map(|w| w.root).collect();
    assert_eq!(roots, vec![ws.clone()]);
    assert!(!r.readable_roots().contains(&ws.join("cache/sub")));
    assert!(r.readable_roots().contains(&ws.join("src")));
    let dropped: Vec<(PathBuf, PathBuf)> = r
        .dropped_grants()
        .into_iter()
        .map(|d| (d.path, d.link.link))
        .collect();
    assert_eq!(
        dropped,
        vec![
            (ws.join("cache"), ws.join("cache")),
            (ws.join("cache/sub"), ws.join("cache")),
        ]
    );
    // Looked up together, each way walked once, the answers are the same.
    assert_eq!(
        r.host_view(),
        HostView {
            readable_roots: r.readable_roots(),
            writable_roots: r.writable_roots(),
            dropped_grants: r.dropped_grants(),
        }
    );
}

/// The issue the places exist for: only `ws/out` is writable, but `ws` is
/// the project root, so an earlier command could have planted the link.
#[test]
fn a_grant_through_a_link_inside_a_project_root_or_place_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let tmp = root.join("tmp");
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    std::os::unix::fs::symlink(root.join("outside"), ws.join("out")).unwrap();
    std::os::unix::fs::symlink(root.join("outside"), tmp.join("cache")).unwrap();
    let fs = FileSystemSandboxPolicy {
        entries: vec![
            FileSystemSandboxEntry::special(FileSystemSpecialPath::Root, Read),
            FileSystemSandboxEntry::path(ws.join("out"), Write),
            FileSystemSandboxEntry::path(tmp.join("cache"), Write),
        ],
        ..FileSystemSandboxPolicy::read_only()
    };
    let elsewhere = fs.resolve_with(&ctx(Path::new("/elsewhere")));
    assert_eq!(
        elsewhere.writable_roots().len(),
        2,
        "no place holds the links"
    );
    let r = fs.resolve_with(&ResolveContext {
        plantable: vec![tmp.clone(), PathBuf::from("/")],
        ..ctx(&ws)
    });
    assert!(r.writable_roots().is_empty());
    assert_eq!(r.plantable, [tmp.clone(), ws.clone()]);
    assert_eq!(
        r.untrusted_dirs(),
        [tmp.join("cache"), ws.join("out"), tmp.clone(), ws.clone()]
    );
    let text: Vec<String> = r.dropped_grants().iter().map(|d| d.to_string()).collect();
    assert_eq!(
        text[0],
        format!(
            "{0}/cache grants nothing: it is reached through the symlink {0}/cache inside {0}, where an earlier sandboxed command could have planted it",
            tmp.display()
        )
    );
    assert!(text[1].starts_with(&format!("{}/out grants nothing", ws.display())));
}

#[test]
fn the_walk_resolves_like_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let out = root.join("outside");
    std::fs::create_dir_all(out.join("b")).unwrap();
    std::fs::create_dir_all(ws.join("real/b")).unwrap();
    let link = |target: &Path, at: &Path| std::os::unix::fs::symlink(target, at).unwrap();
    link(&out, &ws.join("a")); // an intermediate component
    link(Path::new("../outside"), &ws.join("rel")); // relative, with `..`
    link(&root.join("hop"), &ws.join("chain")); // to a link outside the place
    link(&out, &root.join("hop"));
    link(&ws, &root.join("alias")); // the user's own alias of the place
    link(Path::new("real"), &ws.join("inner")); // inside the place
    let places = Places::new(std::slice::from_ref(&ws));
    let found = |p: &Path| places.first_planted_link(p).map(|l| l.link);
    assert_eq!(found(&ws.join("a/b")), Some(ws.join("a")));
    assert_eq!(found(&ws.join("rel")), Some(ws.join("rel")));
    assert_eq!(found(&ws.join("chain/b")), Some(ws.join("chain")));
    assert_eq!(found(&root.join("alias/a/b")), Some(ws.join("a")));
    assert_eq!(found(&root.join("alias/inner/b")), Some(ws.join("inner")));
    assert_eq!(found(&root.join("hop/b")), None, "outside every place");
    assert_eq!(found(&root.join("alias/real/b")), None, "the place itself");
    assert_eq!(found(&ws.join("missing/x")), None);
    assert_eq!(
        places.first_planted_link(&ws.join("a")).map(|l| l.place),
        Some(ws.clone())
    );
    // Through the place's other spelling.
    let by_alias = Places::new(&[root.join("alias")]);
    assert_eq!(
        by_alias.first_planted_link(&ws.join("a")).map(|l| l.place),
        Some(root.join("alias"))
    );
    assert_eq!(usable_place(Path::new("/x/..")), None);
    assert_eq!(usable_place(Path::new("rel")), None);
}

#[test]
fn legacy_workspace_write_with_roots_and_exclusions() {
    let dir = tempfile::tempdir().unwrap();
    let extra = dir.path().join("extra");
    std::fs::create_dir_all(extra.join(".git")).unwrap();
    let p = SandboxPolicy::WorkspaceWrite {
        writable_roots: vec![extra.clone()],
        network_access: false,
        exclude_tmpdir_env_var: true,
        exclude_slash_tmp: true,
        read_only_access: None,
    };
    let fs = FileSystemSandboxPolicy::from(&p);
    let expected = vec![
        FileSystemSandboxEntry::special(FileSystemSpecialPath::Root, Read),
        FileSystemSandboxEntry::special(
            FileSystemSpecialPath::ProjectRoots { subpath: None },
            Write,
        ),
        FileSystemSandboxEntry::path(extra.clone(), Write),
        FileSystemSandboxEntry::new(FileSystemPath::project_subpath(".git"), Read),
        FileSystemSandboxEntry::new(FileSystemPath::project_subpath(".agents"), Read),
        FileSystemSandboxEntry::new(FileSystemPath::project_subpath(".codex"), Read),
        FileSystemSandboxEntry::path(extra.join(".git"), Read),
    ];
    assert_eq!(fs.entries, expected);
    let cwd = dir.path().join("cwd");
    let with_cwd = PermissionProfile::from_legacy_for_cwd(&p, &cwd);
    let (fs2, _) = with_cwd.to_runtime();
    assert!(fs2
        .entries
        .contains(&FileSystemSandboxEntry::path(cwd.join(".codex"), Read)));
}

fn ctx(cwd: &Path) -> ResolveContext {
    ResolveContext {
        cwd: cwd.to_path_buf(),
        tmpdir: None,
        project_roots: Vec::new(),
        plantable: Vec::new(),
    }
}

#[test]
fn most_specific_entry_wins_and_ties_go_to_deny() {
    let fs = FileSystemSandboxPolicy {
        entries: vec![
            FileSystemSandboxEntry::path("/repo", Write),
            FileSystemSandboxEntry::path("/repo/a", Deny),
            FileSystemSandboxEntry::path("/repo/a/b", Write),
            FileSystemSandboxEntry::path("/x", Read),
            FileSystemSandboxEntry::path("/x", Deny),
        ],
        ..Default::default()
    };
    let r = fs.resolve_with(&ctx(Path::new("/elsewhere")));
    assert_eq!(r.access(Path::new("/repo/f")), Write);
    assert_eq!(r.access(Path::new("/repo/a/f")), Deny);
    assert_eq!(r.access(Path::new("/repo/a/b/f")), Write);
    assert_eq!(r.access(Path::new("/x/y")), Deny);
    assert_eq!(r.access(Path::new("/other")), Deny);
    assert_eq!(
        r.unreadable_roots(),
        vec![PathBuf::from("/repo/a"), PathBuf::from("/x")]
    );
}

#[test]
fn metadata_is_read_only_inside_writable_roots_unless_explicit() {
    let fs = FileSystemSandboxPolicy {
        entries: vec![
            FileSystemSandboxEntry::special(FileSystemSpecialPath::Root, Read),
            FileSystemSandboxEntry::path("/w", Write),
            FileSystemSandboxEntry::path("/v", Write),
            FileSystemSandboxEntry::path("/v/.git", Write),
        ],
        ..Default::default()
    };
    let r = fs.resolve_with(&ctx(Path::new("/nowhere")));
    assert_eq!(r.access(Path::new("/w/.git/config")), Read);
    assert_eq!(r.access(Path::new("/w/.codex")), Read);
    assert_eq!(r.access(Path::new("/w/src/.git")), Write);
    assert_eq!(r.access(Path::new("/v/.git/config")), Write);
    let roots = r.writable_roots();
    assert_eq!(roots[0].root, PathBuf::from("/v"));
    assert_eq!(roots[0].protected_metadata_names, vec![".agents", ".codex"]);
    assert_eq!(
        roots[1].protected_metadata_names,
        vec![".git", ".agents", ".codex"]
    );
}

#[test]
fn full_disk_write_detection() {
    let root_write = FileSystemSandboxEntry::special(FileSystemSpecialPath::Root, Write);
    let mut fs = FileSystemSandboxPolicy {
        entries: vec![root_write.clone()],
        ..Default::default()
    };
    assert!(fs.has_full_disk_write_access());
    let r = fs.resolve(Path::new("/"), &[]);
    assert_eq!(r.access(Path::new("/w/.git/config")), Write);
    fs.entries.push(FileSystemSandboxEntry::path("/etc", Read));
    assert!(!fs.has_full_disk_write_access(), "read carve-out narrows");
    fs.entries = vec![
        root_write.clone(),
        FileSystemSandboxEntry::new(
            FileSystemPath::GlobPattern {
                pattern: "**/*.env".into(),
            },
            Deny,
        ),
    ];
    assert!(!fs.has_full_disk_write_access(), "glob narrows");
    assert!(!PermissionProfile::workspace_write().has_full_disk_write_access());
    assert!(PermissionProfile::Disabled.has_full_disk_write_access());
    assert!(PermissionProfile::External {
        network: NetworkSandboxPolicy::Restricted
    }
    .has_full_disk_write_access());
}

#[test]
fn full_disk_read_is_lost_with_any_deny() {
    let mut fs = FileSystemSandboxPolicy::read_only();
    assert!(fs.has_full_disk_read_access());
    fs.entries.push(FileSystemSandboxEntry::new(
        FileSystemPath::GlobPattern {
            pattern: "*.pem".into(),
        },
        Deny,
    ));
    assert!(!fs.has_full_disk_read_access());
}

#[test]
fn workspace_resolution_protects_git_gitdir_and_cwd_codex() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let real_git = dir.path().join("gitdirs/repo");
    std::fs::create_dir_all(&real_git).unwrap();
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join(".git"), "gitdir: ../gitdirs/repo\n").unwrap();
    let (fs, _) = PermissionProfile::workspace_write()
        .with_writable_roots(&[dir.path().join("gitdirs")])
        .to_runtime();
    let r = fs.resolve_with(&ResolveContext {
        cwd: repo.clone(),
        tmpdir: None,
        project_roots: Vec::new(),
        plantable: Vec::new(),
    });
    let w = r
        .writable_roots()
        .into_iter()
        .find(|w| w.root == repo)
        .unwrap();
    assert!(w.read_only_subpaths.contains(&repo.join(".git")));
    assert!(w.read_only_subpaths.contains(&real_git));
    assert!(w.read_only_subpaths.contains(&repo.join(".codex")));
    assert!(!r.can_write(&repo.join(".git")));
    assert!(r.can_write(&repo.join("src/main.rs")));
    assert!(!r.can_write(Path::new("/usr/x")));
}

#[test]
fn tmpdir_and_relative_globs_resolve_against_cwd() {
    let fs = FileSystemSandboxPolicy {
        entries: vec![
            FileSystemSandboxEntry::special(FileSystemSpecialPath::Tmpdir, Write),
            FileSystemSandboxEntry::new(
                FileSystemPath::GlobPattern {
                    pattern: "**/*.env".into(),
                },
                Deny,
            ),
        ],
        ..Default::default()
    };
    assert!(fs.depends_on_cwd());
    let r = fs.resolve_with(&ResolveContext {
        cwd: PathBuf::from("/w"),
        tmpdir: Some(PathBuf::from("/t/x/../y")),
        project_roots: Vec::new(),
        plantable: Vec::new(),
    });
    assert_eq!(r.entries, vec![(PathBuf::from("/t/y"), Write)]);
    assert_eq!(r.unreadable_globs(), ["/w/**/*.env".to_owned()]);
}

#[test]
fn materialize_project_roots_expands_each_root() {
    let p = PermissionProfile::workspace_write();
    assert!(p.depends_on_cwd());
    let m = p.materialize_project_roots(&[PathBuf::from("/a"), PathBuf::from("/b")]);
    assert!(!m.depends_on_cwd());
    let (fs, _) = m.to_runtime();
    assert!(fs
        .entries
        .contains(&FileSystemSandboxEntry::path("/a", Write)));
    assert!(fs
        .entries
        .contains(&FileSystemSandboxEntry::path("/b/.codex", Read)));
    // No roots: project-root entries grant nothing (the exec-server's rule).
    let none = p.materialize_project_roots(&[]);
    assert!(!none.depends_on_cwd());
    let (fs, _) = none.to_runtime();
    assert!(fs.entries.iter().all(|e| !matches!(
        e.path,
        FileSystemPath::Special {
            value: FileSystemSpecialPath::ProjectRoots { .. }
        }
    )));
    // `codex-project-roots://` globs expand per root; other relative globs stay.
    let globs = PermissionProfile::Managed {
        file_system: ManagedFileSystemPermissions::Restricted {
            entries: vec![
                FileSystemSandboxEntry::new(
                    FileSystemPath::GlobPattern {
                        pattern: "codex-project-roots://**/*.pem".into(),
                    },
                    Deny,
                ),
                FileSystemSandboxEntry::new(
                    FileSystemPath::GlobPattern {
                        pattern: "*.key".into(),
                    },
                    Deny,
                ),
            ],
            glob_scan_max_depth: None,
        },
        network: NetworkSandboxPolicy::Restricted,
    };
    let (fs, _) = globs
        .materialize_project_roots(&[PathBuf::from("/a"), PathBuf::from("/b/")])
        .to_runtime();
    let patterns: Vec<&str> = fs
        .entries
        .iter()
        .filter_map(|e| match &e.path {
            FileSystemPath::GlobPattern { pattern } => Some(pattern.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(patterns, ["/a/**/*.pem", "/b/**/*.pem", "*.key"]);
}

#[test]
fn named_profiles_and_parse() {
    assert_eq!(
        PermissionProfile::parse(":workspace").unwrap(),
        PermissionProfile::workspace_write()
    );
    assert!(PermissionProfile::parse("bogus").is_err());
    assert!(PermissionProfile::parse("{\"type\":\"nope\"}").is_err());
    assert_eq!(
        PermissionProfile::parse("{\"type\":\"disabled\"}").unwrap(),
        PermissionProfile::Disabled
    );
}
