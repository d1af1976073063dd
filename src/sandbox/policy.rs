//! Sandbox policy model: the JSON shapes the reference helper accepts
//! (`PermissionProfile`, `FileSystemSandboxPolicy`, `NetworkSandboxPolicy`,
//! legacy `SandboxPolicy`), their conversions, the named profiles people use,
//! and resolution of a policy against a cwd into concrete roots.
//!
//! Pure data plus the few filesystem reads resolution needs (does `.git`
//! exist, where does a `gitdir:` file point, what does `$TMPDIR` say). It does
//! not build bubblewrap arguments (`sandbox::bwrap_args`) nor enforce anything.
//!
//! Rules (reference notes §3): the access of a path is that of the entry with
//! the most path components among those that contain it, ties going to the
//! strongest (`deny > write > read`), and no entry means denied. Inside a
//! writable entry, `.git`, `.agents` and `.codex` stay read-only unless an
//! explicit write entry names them, except under full-disk write.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::path::{Component, Path, PathBuf};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::protocol::path::WirePath;

/// Names of workspace metadata kept read-only inside writable roots.
pub const PROTECTED_METADATA_NAMES: [&str; 3] = [".git", ".agents", ".codex"];

/// Directories made readable by a `:minimal` entry, when they exist.
pub const PLATFORM_DEFAULT_READ_ROOTS: [&str; 8] = [
    "/bin",
    "/sbin",
    "/usr",
    "/etc",
    "/lib",
    "/lib64",
    "/nix/store",
    "/run/current-system/sw",
];

/// Errors of the policy model.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown permission profile `{0}` (expected read-only, workspace, danger-full-access or a JSON profile)")]
    UnknownProfile(String),
    #[error("invalid permission profile JSON: {0}")]
    InvalidJson(#[from] serde_json::Error),
}

// ---------------------------------------------------------------------------
// Access modes, paths and entries

/// What an entry grants. Ordered by strength for ties: `deny > write > read`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum FileSystemAccessMode {
    Read,
    Write,
    /// Also accepted as `none` (legacy spelling).
    #[serde(alias = "none")]
    Deny,
}

impl FileSystemAccessMode {
    pub fn can_read(self) -> bool {
        self != Self::Deny
    }
    pub fn can_write(self) -> bool {
        self == Self::Write
    }
}

/// A symbolic location resolved at run time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileSystemSpecialPath {
    /// The filesystem root (`/`).
    Root,
    /// The platform's minimal runtime directories (`/usr`, `/etc`, …).
    Minimal,
    /// The project (workspace) roots, or a relative path below each of them.
    /// JSON input alias: `current_working_directory`.
    ProjectRoots { subpath: Option<PathBuf> },
    /// `$TMPDIR` of the helper, when set and non-empty.
    Tmpdir,
    /// `/tmp`, when it is a directory.
    SlashTmp,
    /// A token this version does not know: preserved and ignored.
    Unknown {
        path: String,
        subpath: Option<PathBuf>,
    },
}

#[derive(Serialize, Deserialize)]
struct RawSpecial {
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    subpath: Option<PathBuf>,
}

/// A subpath must be a plain relative descent: no root, no `..`.
fn check_subpath(subpath: Option<PathBuf>) -> Result<Option<PathBuf>, String> {
    let Some(sub) = subpath else { return Ok(None) };
    let mut clean = PathBuf::new();
    for comp in sub.components() {
        match comp {
            Component::Normal(c) => clean.push(c),
            Component::CurDir => {}
            _ => {
                return Err(format!(
                    "subpath `{}` must be a relative path below the root, without `..`",
                    sub.display()
                ))
            }
        }
    }
    Ok(if clean.as_os_str().is_empty() {
        None
    } else {
        Some(clean)
    })
}

impl Serialize for FileSystemSpecialPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (kind, path, subpath) = match self {
            Self::Root => ("root", None, None),
            Self::Minimal => ("minimal", None, None),
            Self::ProjectRoots { subpath } => ("project_roots", None, subpath.clone()),
            Self::Tmpdir => ("tmpdir", None, None),
            Self::SlashTmp => ("slash_tmp", None, None),
            Self::Unknown { path, subpath } => ("unknown", Some(path.clone()), subpath.clone()),
        };
        RawSpecial {
            kind: kind.to_owned(),
            path,
            subpath,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for FileSystemSpecialPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawSpecial::deserialize(d)?;
        let subpath = check_subpath(raw.subpath).map_err(D::Error::custom)?;
        Ok(match raw.kind.as_str() {
            "root" => Self::Root,
            "minimal" => Self::Minimal,
            "project_roots" | "current_working_directory" => Self::ProjectRoots { subpath },
            "tmpdir" => Self::Tmpdir,
            "slash_tmp" => Self::SlashTmp,
            "unknown" => Self::Unknown {
                path: raw.path.unwrap_or_default(),
                subpath,
            },
            other => Self::Unknown {
                path: format!(":{other}"),
                subpath,
            },
        })
    }
}

/// Where an entry applies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileSystemPath {
    /// An absolute path (native or `file:` URI on input), lexically normalised.
    Path {
        #[schemars(with = "crate::protocol::path::WirePath")]
        #[serde(with = "abs_path")]
        path: PathBuf,
    },
    /// A glob (`* ? [ ]`); only meaningful with `deny`. Relative patterns are
    /// resolved against the policy cwd (or each project root).
    GlobPattern { pattern: String },
    /// A symbolic location.
    Special { value: FileSystemSpecialPath },
}

impl FileSystemPath {
    fn special(value: FileSystemSpecialPath) -> Self {
        Self::Special { value }
    }
    fn project_subpath(sub: &str) -> Self {
        Self::special(FileSystemSpecialPath::ProjectRoots {
            subpath: Some(PathBuf::from(sub)),
        })
    }
}

/// One rule of a filesystem policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileSystemSandboxEntry {
    pub path: FileSystemPath,
    pub access: FileSystemAccessMode,
}

impl FileSystemSandboxEntry {
    pub fn new(path: FileSystemPath, access: FileSystemAccessMode) -> Self {
        Self { path, access }
    }
    pub fn path(path: impl Into<PathBuf>, access: FileSystemAccessMode) -> Self {
        Self::new(
            FileSystemPath::Path {
                path: normalize(&path.into()),
            },
            access,
        )
    }
    pub fn special(value: FileSystemSpecialPath, access: FileSystemAccessMode) -> Self {
        Self::new(FileSystemPath::special(value), access)
    }
}

/// Serde for absolute paths: accepts a native absolute path or a `file:` URI,
/// normalises it lexically, writes a native path (a `file:` URI when the path
/// is not UTF-8, so nothing is lost).
pub mod abs_path {
    use super::*;

    pub fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
        match path.to_str() {
            Some(text) => s.serialize_str(text),
            None => s.serialize_str(&crate::protocol::path::to_file_uri(path.as_os_str())),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(D::Error::custom)
    }

    /// Parses one absolute wire path.
    pub fn parse(text: &str) -> Result<PathBuf, String> {
        let wire = WirePath::parse(text).map_err(|e| e.to_string())?;
        Ok(normalize(wire.path()))
    }

    pub(super) mod vec {
        use super::*;
        pub fn serialize<S: Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeSeq;
            let mut seq = s.serialize_seq(Some(paths.len()))?;
            for p in paths {
                seq.serialize_element(&Wrapped(p))?;
            }
            seq.end()
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
            let texts = Vec::<String>::deserialize(d)?;
            texts
                .iter()
                .map(|t| parse(t).map_err(D::Error::custom))
                .collect()
        }
        struct Wrapped<'a>(&'a PathBuf);
        impl Serialize for Wrapped<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                super::serialize(self.0, s)
            }
        }
    }
}

/// Lexical normalisation: drops `.`, `..` pops a component (never above `/`).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for comp in path.components() {
        match comp {
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(c) => out.push(c),
            Component::Prefix(_) => {}
        }
    }
    out
}

fn depth(path: &Path) -> usize {
    path.components().count()
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', ']'])
}

// ---------------------------------------------------------------------------
// Network and profiles

/// Whether the sandboxed command may use the network.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkSandboxPolicy {
    #[default]
    Restricted,
    Enabled,
}

impl NetworkSandboxPolicy {
    pub fn is_enabled(self) -> bool {
        self == Self::Enabled
    }
}

/// The filesystem half of a managed profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ManagedFileSystemPermissions {
    Restricted {
        #[serde(default)]
        entries: Vec<FileSystemSandboxEntry>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        glob_scan_max_depth: Option<NonZeroUsize>,
    },
    Unrestricted,
}

/// The canonical permission profile the helper receives
/// (`--permission-profile JSON`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PermissionProfile {
    /// codexbox enforces the filesystem and network rules.
    Managed {
        file_system: ManagedFileSystemPermissions,
        network: NetworkSandboxPolicy,
    },
    /// No sandbox at all (network enabled).
    Disabled,
    /// The caller provides filesystem isolation; only network is ours.
    External { network: NetworkSandboxPolicy },
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum TaggedProfile {
    Managed {
        file_system: ManagedFileSystemPermissions,
        #[serde(default)]
        network: NetworkSandboxPolicy,
    },
    Disabled,
    External {
        #[serde(default)]
        network: NetworkSandboxPolicy,
    },
}

/// The untagged rollout shape older writers produced.
#[derive(Deserialize)]
struct LegacyProfile {
    #[serde(default)]
    network: Option<LegacyNetwork>,
    #[serde(default)]
    file_system: Option<LegacyFileSystem>,
}

#[derive(Deserialize)]
struct LegacyNetwork {
    #[serde(default)]
    enabled: bool,
}

#[derive(Deserialize)]
struct LegacyFileSystem {
    #[serde(default)]
    entries: Vec<FileSystemSandboxEntry>,
    #[serde(default)]
    glob_scan_max_depth: Option<NonZeroUsize>,
    #[serde(default, with = "abs_path::vec")]
    read: Vec<PathBuf>,
    #[serde(default, with = "abs_path::vec")]
    write: Vec<PathBuf>,
}

impl<'de> Deserialize<'de> for PermissionProfile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        if value.get("type").is_some() {
            let tagged = TaggedProfile::deserialize(value).map_err(D::Error::custom)?;
            return Ok(match tagged {
                TaggedProfile::Managed {
                    file_system,
                    network,
                } => Self::Managed {
                    file_system,
                    network,
                },
                TaggedProfile::Disabled => Self::Disabled,
                TaggedProfile::External { network } => Self::External { network },
            });
        }
        let legacy = LegacyProfile::deserialize(value).map_err(D::Error::custom)?;
        let network = match legacy.network {
            Some(LegacyNetwork { enabled: true }) => NetworkSandboxPolicy::Enabled,
            _ => NetworkSandboxPolicy::Restricted,
        };
        let (mut entries, glob_scan_max_depth) = match legacy.file_system {
            Some(fs) => {
                let mut entries = fs.entries;
                for p in fs.read {
                    entries.push(FileSystemSandboxEntry::path(p, FileSystemAccessMode::Read));
                }
                for p in fs.write {
                    entries.push(FileSystemSandboxEntry::path(p, FileSystemAccessMode::Write));
                }
                (entries, fs.glob_scan_max_depth)
            }
            None => (Vec::new(), None),
        };
        entries.dedup();
        Ok(Self::Managed {
            file_system: ManagedFileSystemPermissions::Restricted {
                entries,
                glob_scan_max_depth,
            },
            network,
        })
    }
}

impl PermissionProfile {
    /// Read everything, write nothing, no network.
    pub fn read_only() -> Self {
        Self::Managed {
            file_system: ManagedFileSystemPermissions::Restricted {
                entries: FileSystemSandboxPolicy::read_only().entries,
                glob_scan_max_depth: None,
            },
            network: NetworkSandboxPolicy::Restricted,
        }
    }

    /// Read everything; write the project roots, `/tmp` and `$TMPDIR`,
    /// except their `.git`, `.agents` and `.codex`; no network.
    pub fn workspace_write() -> Self {
        let fs = FileSystemSandboxPolicy::workspace_write(&[], false, false);
        Self::Managed {
            file_system: ManagedFileSystemPermissions::Restricted {
                entries: fs.entries,
                glob_scan_max_depth: None,
            },
            network: NetworkSandboxPolicy::Restricted,
        }
    }

    /// No sandbox.
    pub fn danger_full_access() -> Self {
        Self::Disabled
    }

    /// A named profile: `read-only`, `workspace` (alias `workspace-write`) or
    /// `danger-full-access`, with or without the config's leading `:`.
    pub fn named(name: &str) -> Option<Self> {
        match name.strip_prefix(':').unwrap_or(name) {
            "read-only" => Some(Self::read_only()),
            "workspace" | "workspace-write" => Some(Self::workspace_write()),
            "danger-full-access" => Some(Self::danger_full_access()),
            _ => None,
        }
    }

    /// A named profile or a JSON document.
    pub fn parse(text: &str) -> Result<Self, PolicyError> {
        if let Some(p) = Self::named(text.trim()) {
            return Ok(p);
        }
        if text.trim_start().starts_with('{') {
            return Ok(serde_json::from_str(text)?);
        }
        Err(PolicyError::UnknownProfile(text.to_owned()))
    }

    /// Converts a legacy policy like the reference (`disabled` for full
    /// access, `external` for external sandboxes, `managed` otherwise).
    pub fn from_legacy(policy: &SandboxPolicy) -> Self {
        Self::from_legacy_inner(policy, None)
    }

    /// Like [`Self::from_legacy`], also adding the cwd's protected metadata
    /// as absolute read entries (`.codex` always).
    pub fn from_legacy_for_cwd(policy: &SandboxPolicy, cwd: &Path) -> Self {
        Self::from_legacy_inner(policy, Some(cwd))
    }

    fn from_legacy_inner(policy: &SandboxPolicy, cwd: Option<&Path>) -> Self {
        match policy {
            SandboxPolicy::DangerFullAccess => Self::Disabled,
            SandboxPolicy::ExternalSandbox { network_access } => Self::External {
                network: *network_access,
            },
            _ => {
                let mut fs = FileSystemSandboxPolicy::from(policy);
                if let (Some(cwd), SandboxPolicy::WorkspaceWrite { .. }) = (cwd, policy) {
                    for p in default_read_only_subpaths(&normalize(cwd), true) {
                        fs.push_unique(FileSystemSandboxEntry::path(p, FileSystemAccessMode::Read));
                    }
                }
                Self::Managed {
                    file_system: ManagedFileSystemPermissions::Restricted {
                        entries: fs.entries,
                        glob_scan_max_depth: None,
                    },
                    network: policy.network(),
                }
            }
        }
    }

    /// The runtime (filesystem, network) pair.
    pub fn to_runtime(&self) -> (FileSystemSandboxPolicy, NetworkSandboxPolicy) {
        match self {
            Self::Managed {
                file_system,
                network,
            } => {
                let fs = match file_system {
                    ManagedFileSystemPermissions::Restricted {
                        entries,
                        glob_scan_max_depth,
                    } => FileSystemSandboxPolicy {
                        kind: FileSystemSandboxKind::Restricted,
                        glob_scan_max_depth: *glob_scan_max_depth,
                        entries: entries.clone(),
                    },
                    ManagedFileSystemPermissions::Unrestricted => {
                        FileSystemSandboxPolicy::unrestricted()
                    }
                };
                (fs, *network)
            }
            Self::Disabled => (
                FileSystemSandboxPolicy::unrestricted(),
                NetworkSandboxPolicy::Enabled,
            ),
            Self::External { network } => (
                FileSystemSandboxPolicy {
                    kind: FileSystemSandboxKind::ExternalSandbox,
                    glob_scan_max_depth: None,
                    entries: Vec::new(),
                },
                *network,
            ),
        }
    }

    /// Builds a managed profile from runtime policies.
    pub fn from_runtime(fs: &FileSystemSandboxPolicy, network: NetworkSandboxPolicy) -> Self {
        match fs.kind {
            FileSystemSandboxKind::Unrestricted if network.is_enabled() => Self::Disabled,
            FileSystemSandboxKind::Unrestricted => Self::Managed {
                file_system: ManagedFileSystemPermissions::Unrestricted,
                network,
            },
            FileSystemSandboxKind::ExternalSandbox => Self::External { network },
            FileSystemSandboxKind::Restricted => Self::Managed {
                file_system: ManagedFileSystemPermissions::Restricted {
                    entries: fs.entries.clone(),
                    glob_scan_max_depth: fs.glob_scan_max_depth,
                },
                network,
            },
        }
    }

    pub fn network(&self) -> NetworkSandboxPolicy {
        self.to_runtime().1
    }

    /// True when codexbox enforces nothing on the filesystem: `disabled`,
    /// `external`, `unrestricted`, or a restricted policy writing `/` with no
    /// narrowing entry. (The server then does fs operations itself.)
    pub fn has_full_disk_write_access(&self) -> bool {
        self.to_runtime().0.has_full_disk_write_access()
    }

    /// True when the profile resolves differently for another cwd.
    pub fn depends_on_cwd(&self) -> bool {
        self.to_runtime().0.depends_on_cwd()
    }

    /// Replaces `project_roots` entries (and relative deny globs) with
    /// absolute entries for each of `roots`. No roots: unchanged.
    pub fn materialize_project_roots(&self, roots: &[PathBuf]) -> Self {
        match self {
            Self::Managed {
                file_system:
                    ManagedFileSystemPermissions::Restricted {
                        entries,
                        glob_scan_max_depth,
                    },
                network,
            } => Self::Managed {
                file_system: ManagedFileSystemPermissions::Restricted {
                    entries: materialize_entries(entries, roots),
                    glob_scan_max_depth: *glob_scan_max_depth,
                },
                network: *network,
            },
            other => other.clone(),
        }
    }

    /// Makes `paths` writable (e.g. `--writable-root`), for managed profiles.
    pub fn with_writable_roots(&self, paths: &[PathBuf]) -> Self {
        match self {
            Self::Managed {
                file_system:
                    ManagedFileSystemPermissions::Restricted {
                        entries,
                        glob_scan_max_depth,
                    },
                network,
            } => {
                let mut entries = entries.clone();
                for p in paths {
                    let e = FileSystemSandboxEntry::path(p.clone(), FileSystemAccessMode::Write);
                    if !entries.contains(&e) {
                        entries.push(e);
                    }
                }
                Self::Managed {
                    file_system: ManagedFileSystemPermissions::Restricted {
                        entries,
                        glob_scan_max_depth: *glob_scan_max_depth,
                    },
                    network: *network,
                }
            }
            other => other.clone(),
        }
    }

    /// The same profile with network `enabled` (`disabled` stays as is).
    pub fn with_network(&self, network: NetworkSandboxPolicy) -> Self {
        match self {
            Self::Managed { file_system, .. } => Self::Managed {
                file_system: file_system.clone(),
                network,
            },
            Self::External { .. } => Self::External { network },
            Self::Disabled => Self::Disabled,
        }
    }

    /// Compact JSON (what goes on the helper's command line).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{\"type\":\"disabled\"}"))
    }
}

fn materialize_entries(
    entries: &[FileSystemSandboxEntry],
    roots: &[PathBuf],
) -> Vec<FileSystemSandboxEntry> {
    if roots.is_empty() {
        return entries.to_vec();
    }
    let mut out: Vec<FileSystemSandboxEntry> = Vec::new();
    let mut push = |e: FileSystemSandboxEntry| {
        if !out.contains(&e) {
            out.push(e);
        }
    };
    for entry in entries {
        match &entry.path {
            FileSystemPath::Special {
                value: FileSystemSpecialPath::ProjectRoots { subpath },
            } => {
                for root in roots {
                    let p = match subpath {
                        Some(sub) => root.join(sub),
                        None => root.clone(),
                    };
                    push(FileSystemSandboxEntry::path(p, entry.access));
                }
            }
            FileSystemPath::GlobPattern { pattern } if !pattern.starts_with('/') => {
                for root in roots {
                    push(FileSystemSandboxEntry::new(
                        FileSystemPath::GlobPattern {
                            pattern: join_pattern(root, pattern),
                        },
                        entry.access,
                    ));
                }
            }
            _ => push(entry.clone()),
        }
    }
    out
}

fn join_pattern(base: &Path, pattern: &str) -> String {
    let base = base.to_string_lossy();
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    if base.ends_with('/') {
        format!("{base}{pattern}")
    } else {
        format!("{base}/{pattern}")
    }
}

// ---------------------------------------------------------------------------
// Runtime filesystem policy

/// Which kind of filesystem policy applies.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum FileSystemSandboxKind {
    #[default]
    Restricted,
    Unrestricted,
    ExternalSandbox,
}

/// The runtime filesystem policy (`--file-system-sandbox-policy JSON`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FileSystemSandboxPolicy {
    pub kind: FileSystemSandboxKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob_scan_max_depth: Option<NonZeroUsize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<FileSystemSandboxEntry>,
}

impl FileSystemSandboxPolicy {
    pub fn unrestricted() -> Self {
        Self {
            kind: FileSystemSandboxKind::Unrestricted,
            ..Self::default()
        }
    }

    pub fn read_only() -> Self {
        Self {
            kind: FileSystemSandboxKind::Restricted,
            glob_scan_max_depth: None,
            entries: vec![FileSystemSandboxEntry::special(
                FileSystemSpecialPath::Root,
                FileSystemAccessMode::Read,
            )],
        }
    }

    /// The reference's workspace-write policy.
    pub fn workspace_write(
        writable_roots: &[PathBuf],
        exclude_tmpdir_env_var: bool,
        exclude_slash_tmp: bool,
    ) -> Self {
        use FileSystemAccessMode::{Read, Write};
        let mut policy = Self::read_only();
        policy.push_unique(FileSystemSandboxEntry::special(
            FileSystemSpecialPath::ProjectRoots { subpath: None },
            Write,
        ));
        if !exclude_slash_tmp {
            policy.push_unique(FileSystemSandboxEntry::special(
                FileSystemSpecialPath::SlashTmp,
                Write,
            ));
        }
        if !exclude_tmpdir_env_var {
            policy.push_unique(FileSystemSandboxEntry::special(
                FileSystemSpecialPath::Tmpdir,
                Write,
            ));
        }
        for root in writable_roots {
            policy.push_unique(FileSystemSandboxEntry::path(root.clone(), Write));
        }
        for name in PROTECTED_METADATA_NAMES {
            policy.push_unique(FileSystemSandboxEntry::new(
                FileSystemPath::project_subpath(name),
                Read,
            ));
        }
        for root in writable_roots {
            for sub in default_read_only_subpaths(&normalize(root), false) {
                policy.push_unique(FileSystemSandboxEntry::path(sub, Read));
            }
        }
        policy
    }

    /// Adds `entry` unless an entry with the same target exists.
    fn push_unique(&mut self, entry: FileSystemSandboxEntry) {
        if !self.entries.iter().any(|e| e.path == entry.path) {
            self.entries.push(entry);
        }
    }

    /// True when some entry resolves relative to the cwd.
    pub fn depends_on_cwd(&self) -> bool {
        self.kind == FileSystemSandboxKind::Restricted
            && self.entries.iter().any(|e| match &e.path {
                FileSystemPath::Special {
                    value: FileSystemSpecialPath::ProjectRoots { .. },
                } => true,
                FileSystemPath::GlobPattern { pattern } => !pattern.starts_with('/'),
                _ => false,
            })
    }

    /// Full-disk write without narrowing (see module docs).
    pub fn has_full_disk_write_access(&self) -> bool {
        use FileSystemAccessMode::Write;
        match self.kind {
            FileSystemSandboxKind::Unrestricted | FileSystemSandboxKind::ExternalSandbox => {
                return true
            }
            FileSystemSandboxKind::Restricted => {}
        }
        let root_write = self.entries.iter().any(|e| {
            e.access == Write
                && matches!(
                    e.path,
                    FileSystemPath::Special {
                        value: FileSystemSpecialPath::Root
                    }
                )
        });
        if !root_write {
            return false;
        }
        self.entries.iter().all(|e| match &e.path {
            _ if e.access == Write => true,
            FileSystemPath::Path { path } => self.entries.iter().any(|o| {
                o.access == Write
                    && matches!(&o.path, FileSystemPath::Path { path: p } if p == path)
            }),
            FileSystemPath::GlobPattern { .. } => false,
            FileSystemPath::Special { value } => match value {
                FileSystemSpecialPath::Root => e.access == FileSystemAccessMode::Read,
                FileSystemSpecialPath::Minimal | FileSystemSpecialPath::Unknown { .. } => true,
                _ => false,
            },
        })
    }

    /// Full-disk read: readable `/` and no deny entry at all.
    pub fn has_full_disk_read_access(&self) -> bool {
        match self.kind {
            FileSystemSandboxKind::Unrestricted | FileSystemSandboxKind::ExternalSandbox => true,
            FileSystemSandboxKind::Restricted => {
                self.entries.iter().any(|e| {
                    e.access.can_read()
                        && matches!(
                            e.path,
                            FileSystemPath::Special {
                                value: FileSystemSpecialPath::Root
                            }
                        )
                }) && !self
                    .entries
                    .iter()
                    .any(|e| e.access == FileSystemAccessMode::Deny)
            }
        }
    }

    /// Resolves against `cwd` with the helper's `$TMPDIR`.
    pub fn resolve(&self, cwd: &Path) -> ResolvedPolicy {
        let tmpdir = std::env::var_os("TMPDIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        self.resolve_with(&ResolveContext {
            cwd: cwd.to_path_buf(),
            tmpdir,
            project_roots: Vec::new(),
        })
    }

    /// Resolves against an explicit context (tests, callers with several roots).
    pub fn resolve_with(&self, ctx: &ResolveContext) -> ResolvedPolicy {
        let cwd = normalize(&ctx.cwd);
        let roots: Vec<PathBuf> = if ctx.project_roots.is_empty() {
            vec![cwd.clone()]
        } else {
            ctx.project_roots.iter().map(|r| normalize(r)).collect()
        };
        let mut entries = Vec::new();
        let mut deny_globs = BTreeSet::new();
        let mut minimal = false;
        for entry in &self.entries {
            match &entry.path {
                FileSystemPath::Path { path } => entries.push((normalize(path), entry.access)),
                FileSystemPath::GlobPattern { pattern } => {
                    if entry.access != FileSystemAccessMode::Deny {
                        continue; // globs cannot grant access
                    }
                    if pattern.starts_with('/') {
                        deny_globs.insert(pattern.clone());
                    } else {
                        for root in &roots {
                            deny_globs.insert(join_pattern(root, pattern));
                        }
                    }
                }
                FileSystemPath::Special { value } => match value {
                    FileSystemSpecialPath::Root => entries.push((PathBuf::from("/"), entry.access)),
                    FileSystemSpecialPath::Minimal => minimal |= entry.access.can_read(),
                    FileSystemSpecialPath::ProjectRoots { subpath } => {
                        for root in &roots {
                            let p = match subpath {
                                Some(sub) => normalize(&root.join(sub)),
                                None => root.clone(),
                            };
                            entries.push((p, entry.access));
                        }
                    }
                    FileSystemSpecialPath::Tmpdir => {
                        if let Some(t) = &ctx.tmpdir {
                            entries.push((normalize(&cwd.join(t)), entry.access));
                        }
                    }
                    FileSystemSpecialPath::SlashTmp => {
                        if Path::new("/tmp").is_dir() {
                            entries.push((PathBuf::from("/tmp"), entry.access));
                        }
                    }
                    FileSystemSpecialPath::Unknown { .. } => {}
                },
            }
        }
        // A path element that is itself a pure "glob" string (no wildcard)
        // would never match anything: treat it as an exact deny path instead.
        let deny_globs = deny_globs
            .into_iter()
            .filter_map(|g| {
                if is_glob(&g) {
                    Some(g)
                } else {
                    entries.push((normalize(Path::new(&g)), FileSystemAccessMode::Deny));
                    None
                }
            })
            .collect();
        entries.sort();
        entries.dedup();
        ResolvedPolicy {
            kind: self.kind,
            full_write: self.has_full_disk_write_access(),
            full_read: self.has_full_disk_read_access(),
            include_platform_defaults: minimal,
            glob_scan_max_depth: self.glob_scan_max_depth,
            cwd,
            entries,
            deny_globs,
        }
    }
}

/// What resolution needs to know about the run.
#[derive(Debug, Clone, Default)]
pub struct ResolveContext {
    /// The policy cwd (`--sandbox-policy-cwd`).
    pub cwd: PathBuf,
    /// `$TMPDIR` (None: `:tmpdir` entries are ignored).
    pub tmpdir: Option<PathBuf>,
    /// Project roots; empty = the cwd.
    pub project_roots: Vec<PathBuf>,
}

/// Default protected subpaths of a writable root: `.git` (and its `gitdir:`
/// target), `.agents` when a directory, `.codex` when a directory or when
/// the root is the cwd (so its first creation is blocked too).
pub fn default_read_only_subpaths(root: &Path, root_is_cwd: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let git = root.join(".git");
    if git.is_dir() {
        out.push(git);
    } else if git.is_file() {
        out.push(git.clone());
        if let Some(target) = gitdir_target(&git) {
            out.push(target);
        }
    }
    let agents = root.join(".agents");
    if agents.is_dir() {
        out.push(agents);
    }
    let codex = root.join(".codex");
    if root_is_cwd || codex.is_dir() {
        out.push(codex);
    }
    out
}

/// The directory a `.git` file points to (`gitdir: PATH`), when it exists.
pub fn gitdir_target(git_file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(git_file).ok()?;
    let rest = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    if rest.is_empty() {
        return None;
    }
    let base = git_file.parent()?;
    let target = normalize(&base.join(rest));
    target.exists().then_some(target)
}

// ---------------------------------------------------------------------------
// Resolved policy

/// A writable root with what stays read-only below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritableRoot {
    pub root: PathBuf,
    /// Paths under `root` that must not be writable (sorted).
    pub read_only_subpaths: Vec<PathBuf>,
    /// Of `.git`, `.agents`, `.codex`: those not explicitly writable here.
    pub protected_metadata_names: Vec<&'static str>,
}

/// A filesystem policy resolved against a cwd: concrete paths only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPolicy {
    pub kind: FileSystemSandboxKind,
    pub full_write: bool,
    pub full_read: bool,
    /// A readable `:minimal` entry (only meaningful without full read).
    pub include_platform_defaults: bool,
    pub glob_scan_max_depth: Option<NonZeroUsize>,
    pub cwd: PathBuf,
    /// Concrete (path, access) entries, sorted.
    pub entries: Vec<(PathBuf, FileSystemAccessMode)>,
    /// Absolute deny glob patterns, sorted.
    pub deny_globs: Vec<String>,
}

impl ResolvedPolicy {
    /// The most specific entry containing `path` (ties: strongest access).
    fn governing(&self, path: &Path) -> Option<(&Path, FileSystemAccessMode)> {
        self.entries
            .iter()
            .filter(|(root, _)| path.starts_with(root))
            .max_by_key(|(root, access)| (depth(root), *access))
            .map(|(root, access)| (root.as_path(), *access))
    }

    /// The effective access to `path` (lexical; symlinks are not followed).
    pub fn access(&self, path: &Path) -> FileSystemAccessMode {
        if self.kind != FileSystemSandboxKind::Restricted {
            return FileSystemAccessMode::Write;
        }
        let path = normalize(path);
        let Some((root, access)) = self.governing(&path) else {
            return FileSystemAccessMode::Deny;
        };
        if access == FileSystemAccessMode::Write && !self.full_write {
            if let Ok(rest) = path.strip_prefix(root) {
                if let Some(Component::Normal(first)) = rest.components().next() {
                    let meta = PROTECTED_METADATA_NAMES.iter().any(|n| first == *n);
                    if meta && !self.is_explicit_write(&root.join(first)) {
                        return FileSystemAccessMode::Read;
                    }
                }
            }
        }
        access
    }

    fn is_explicit_write(&self, path: &Path) -> bool {
        self.entries
            .iter()
            .any(|(p, a)| p == path && *a == FileSystemAccessMode::Write)
    }

    pub fn can_read(&self, path: &Path) -> bool {
        self.access(path).can_read()
    }

    pub fn can_write(&self, path: &Path) -> bool {
        self.access(path).can_write()
    }

    /// Readable roots (when not full-read), deduplicated, sorted; plus the
    /// platform defaults that exist when `:minimal` is readable.
    pub fn readable_roots(&self) -> Vec<PathBuf> {
        let mut out = BTreeSet::new();
        if self.full_read {
            out.insert(PathBuf::from("/"));
            return out.into_iter().collect();
        }
        let writable = self.lexical_writable_roots();
        for (path, access) in &self.entries {
            if access.can_read() && self.can_read(path) && !crosses_planted_link(path, &writable) {
                out.insert(path.clone());
            }
        }
        if self.include_platform_defaults {
            for p in PLATFORM_DEFAULT_READ_ROOTS {
                if Path::new(p).exists() {
                    out.insert(PathBuf::from(p));
                }
            }
        }
        out.into_iter().collect()
    }

    /// Every path a write entry grants, lexically (before the symlink rule).
    fn lexical_writable_roots(&self) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = self
            .entries
            .iter()
            .filter(|(p, a)| a.can_write() && self.can_write(p))
            .map(|(p, _)| p.clone())
            .collect();
        roots.sort();
        roots.dedup();
        roots
    }

    /// Adds a read entry for each of `paths` that exists and is writable
    /// (a read-only subpath of its writable root). Nothing for a policy
    /// without a filesystem sandbox.
    pub fn keep_read_only(&mut self, paths: &[PathBuf]) {
        if self.kind != FileSystemSandboxKind::Restricted || self.full_write {
            return;
        }
        for p in paths {
            let p = normalize(p);
            if p.symlink_metadata().is_ok() && self.can_write(&p) {
                self.entries.push((p, FileSystemAccessMode::Read));
            }
        }
        self.entries.sort();
        self.entries.dedup();
    }

    /// Grants left out because they pass through a symlink inside a
    /// writable root ([`crosses_planted_link`]), for the caller to be told.
    pub fn grants_through_links(&self) -> Vec<PathBuf> {
        let writable = self.lexical_writable_roots();
        let mut out: Vec<PathBuf> = self
            .entries
            .iter()
            .filter(|(p, a)| a.can_read() && self.can_read(p) && crosses_planted_link(p, &writable))
            .map(|(p, _)| p.clone())
            .collect();
        out.dedup();
        out
    }

    /// Writable roots with their read-only subpaths and protected names.
    /// A root reached through a symlink inside another writable root is left
    /// out: a sandboxed command could have planted that link (see
    /// [`crosses_planted_link`]).
    pub fn writable_roots(&self) -> Vec<WritableRoot> {
        let lexical = self.lexical_writable_roots();
        lexical
            .iter()
            .filter(|root| !crosses_planted_link(root, &lexical))
            .cloned()
            .map(|root| {
                let mut subs = BTreeSet::new();
                let mut names = Vec::new();
                if !self.full_write {
                    for name in PROTECTED_METADATA_NAMES {
                        if !self.is_explicit_write(&root.join(name)) {
                            names.push(name);
                        }
                    }
                    for sub in default_read_only_subpaths(&root, root == self.cwd) {
                        if !self.is_explicit_write(&sub) {
                            subs.insert(sub);
                        }
                    }
                }
                for (path, access) in &self.entries {
                    if path != &root && path.starts_with(&root) && !access.can_write() {
                        subs.insert(path.clone());
                    }
                }
                WritableRoot {
                    root,
                    read_only_subpaths: subs.into_iter().collect(),
                    protected_metadata_names: names,
                }
            })
            .collect()
    }

    /// Deny entries that are effectively unreadable (never `/` itself).
    pub fn unreadable_roots(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .entries
            .iter()
            .filter(|(p, a)| {
                *a == FileSystemAccessMode::Deny && p != Path::new("/") && !self.can_read(p)
            })
            .map(|(p, _)| p.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Absolute deny glob patterns, sorted and deduplicated.
    pub fn unreadable_globs(&self) -> &[String] {
        &self.deny_globs
    }
}

// ---------------------------------------------------------------------------
// Legacy SandboxPolicy

fn is_false(b: &bool) -> bool {
    !*b
}

/// Does `path` pass through a symlink lying strictly inside one of
/// `writable` (in either spelling)? Such a link may have been planted by an
/// earlier sandboxed run, so a grant reached through it must grant nothing
/// (the same rule the launcher applies to read-only subpaths: it protects
/// the link's target but never opens it). Lexical prefixes only; the check
/// runs on the host before the sandbox starts.
pub fn crosses_planted_link(path: &Path, writable: &[PathBuf]) -> bool {
    let spellings: Vec<PathBuf> = writable
        .iter()
        .flat_map(|w| [w.clone(), w.canonicalize().unwrap_or_else(|_| w.clone())])
        .collect();
    let mut prefix = PathBuf::new();
    for c in normalize(path).components() {
        prefix.push(c);
        let strictly_inside = spellings
            .iter()
            .any(|w| prefix.starts_with(w) && prefix != *w);
        if strictly_inside && prefix.symlink_metadata().is_ok_and(|m| m.is_symlink()) {
            return true;
        }
    }
    false
}

/// The legacy policy (`--sandbox-policy JSON`, `sandboxPolicy` on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SandboxPolicy {
    DangerFullAccess,
    ReadOnly {
        #[serde(default, skip_serializing_if = "is_false")]
        network_access: bool,
        /// Historical read restriction (honoured, never dropped).
        #[schemars(skip)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        access: Option<LegacyReadAccess>,
    },
    ExternalSandbox {
        #[serde(default)]
        network_access: NetworkSandboxPolicy,
    },
    WorkspaceWrite {
        #[schemars(with = "Vec<crate::protocol::path::WirePath>")]
        #[serde(default, with = "abs_path::vec")]
        writable_roots: Vec<PathBuf>,
        #[serde(default)]
        network_access: bool,
        #[serde(default)]
        exclude_tmpdir_env_var: bool,
        #[serde(default)]
        exclude_slash_tmp: bool,
        /// Historical read restriction (honoured, never dropped).
        #[schemars(skip)]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        read_only_access: Option<LegacyReadAccess>,
    },
}

/// The historical read-access field of the legacy policy (`access` of
/// read-only, `read_only_access` of workspace-write). An unknown `type`
/// is a parse error: a restriction is never silently widened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum LegacyReadAccess {
    FullAccess,
    Restricted {
        #[serde(default)]
        include_platform_defaults: bool,
        #[serde(default, with = "abs_path::vec")]
        readable_roots: Vec<PathBuf>,
    },
}

impl LegacyReadAccess {
    /// Replaces the full-read `/` entry of `policy` by this restriction.
    fn restrict(
        access: Option<&Self>,
        mut policy: FileSystemSandboxPolicy,
    ) -> FileSystemSandboxPolicy {
        let Some(Self::Restricted {
            include_platform_defaults,
            readable_roots,
        }) = access
        else {
            return policy;
        };
        let root = FileSystemSandboxEntry::special(
            FileSystemSpecialPath::Root,
            FileSystemAccessMode::Read,
        );
        policy.entries.retain(|e| *e != root);
        let mut reads = Vec::new();
        if *include_platform_defaults {
            reads.push(FileSystemSandboxEntry::special(
                FileSystemSpecialPath::Minimal,
                FileSystemAccessMode::Read,
            ));
        }
        for r in readable_roots {
            reads.push(FileSystemSandboxEntry::path(
                r.clone(),
                FileSystemAccessMode::Read,
            ));
        }
        reads.append(&mut policy.entries);
        policy.entries = reads;
        policy
    }
}

impl SandboxPolicy {
    pub fn network(&self) -> NetworkSandboxPolicy {
        let enabled = match self {
            Self::DangerFullAccess => true,
            Self::ReadOnly { network_access, .. } => *network_access,
            Self::ExternalSandbox { network_access } => network_access.is_enabled(),
            Self::WorkspaceWrite { network_access, .. } => *network_access,
        };
        if enabled {
            NetworkSandboxPolicy::Enabled
        } else {
            NetworkSandboxPolicy::Restricted
        }
    }
}

impl From<&SandboxPolicy> for FileSystemSandboxPolicy {
    fn from(policy: &SandboxPolicy) -> Self {
        match policy {
            SandboxPolicy::DangerFullAccess => Self::unrestricted(),
            SandboxPolicy::ExternalSandbox { .. } => Self {
                kind: FileSystemSandboxKind::ExternalSandbox,
                ..Self::default()
            },
            SandboxPolicy::ReadOnly { access, .. } => {
                LegacyReadAccess::restrict(access.as_ref(), Self::read_only())
            }
            SandboxPolicy::WorkspaceWrite {
                writable_roots,
                exclude_tmpdir_env_var,
                exclude_slash_tmp,
                read_only_access,
                ..
            } => LegacyReadAccess::restrict(
                read_only_access.as_ref(),
                Self::workspace_write(writable_roots, *exclude_tmpdir_env_var, *exclude_slash_tmp),
            ),
        }
    }
}

// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
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
        assert!(policy.resolve(Path::new("/w")).entries.is_empty());
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
            serde_json::from_str(r#"{"type":"external-sandbox","network_access":"enabled"}"#)
                .unwrap();
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
            serde_json::from_str(r#"{"type":"read-only","access":{"type":"full-access"}}"#)
                .unwrap();
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
        let r = fs.resolve(&ws);
        let roots: Vec<PathBuf> = r.writable_roots().into_iter().map(|w| w.root).collect();
        assert_eq!(roots, vec![ws.clone()]);
        assert!(!r.readable_roots().contains(&ws.join("cache/sub")));
        assert!(r.readable_roots().contains(&ws.join("src")));
        assert_eq!(
            r.grants_through_links(),
            vec![ws.join("cache"), ws.join("cache/sub")]
        );
        assert!(crosses_planted_link(
            &ws.join("cache"),
            std::slice::from_ref(&ws)
        ));
        assert!(!crosses_planted_link(&ws, std::slice::from_ref(&ws)));
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
        let r = fs.resolve(Path::new("/"));
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
        assert_eq!(p.materialize_project_roots(&[]), p);
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
}
