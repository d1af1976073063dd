//! The building blocks of a policy: access modes, the paths an entry can
//! name (absolute paths, globs, special locations) and their serde, the
//! network switch, the kind of a filesystem policy, and the lexical path
//! normalisation everything else relies on. Depends on no other part of the
//! policy model.

use std::path::{Component, Path, PathBuf};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::wire_path::WirePath;

pub const PROTECTED_METADATA_NAMES: [&str; 3] = [".git", ".agents", ".codex"];

/// Prefix of a glob pattern expanded once per project (workspace) root, as
/// the Codex config writes `:workspace_roots` globs.
pub const PROJECT_ROOTS_GLOB_PREFIX: &str = "codex-project-roots://";

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileSystemPath {
    /// An absolute path (native or `file:` URI on input), lexically normalised.
    Path {
        #[cfg_attr(feature = "schema", schemars(with = "crate::wire_path::WirePath"))]
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
    pub(crate) fn special(value: FileSystemSpecialPath) -> Self {
        Self::Special { value }
    }
    pub(crate) fn project_subpath(sub: &str) -> Self {
        Self::special(FileSystemSpecialPath::ProjectRoots {
            subpath: Some(PathBuf::from(sub)),
        })
    }
}

/// One rule of a filesystem policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
            None => s.serialize_str(&crate::wire_path::to_file_uri(path.as_os_str())),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(D::Error::custom)
    }

    /// Parses one absolute wire path.
    pub fn parse(text: &str) -> Result<PathBuf, String> {
        let wire = WirePath::parse(text)
            .map_err(|e| format!("invalid sandbox permission path URI: {e}"))?;
        Ok(normalize(wire.path()))
    }

    pub(crate) mod vec {
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

pub(crate) fn depth(path: &Path) -> usize {
    path.components().count()
}

pub(crate) fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', ']'])
}

/// `pattern` below `base` (a leading `./` dropped).
pub(crate) fn join_pattern(base: &Path, pattern: &str) -> String {
    let base = base.to_string_lossy();
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    if base.ends_with('/') {
        format!("{base}{pattern}")
    } else {
        format!("{base}/{pattern}")
    }
}

/// Whether the sandboxed command may use the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// Which kind of filesystem policy applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum FileSystemSandboxKind {
    #[default]
    Restricted,
    Unrestricted,
    ExternalSandbox,
}
