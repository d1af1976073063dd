//! The permission profile (`--permission-profile JSON`, and the
//! `permissions` of the exec wire): managed, disabled or external, its
//! older untagged shape, the named profiles people use, and the
//! transformations callers apply before a run (writable roots, network,
//! project roots).

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use super::legacy::SandboxPolicy;
use super::model::{
    abs_path, join_pattern, normalize, FileSystemAccessMode, FileSystemPath,
    FileSystemSandboxEntry, FileSystemSandboxKind, FileSystemSpecialPath, NetworkSandboxPolicy,
    PolicyError, PROJECT_ROOTS_GLOB_PREFIX,
};
use super::resolve::default_read_only_subpaths;
use super::runtime::FileSystemSandboxPolicy;

/// Adds the untagged shape older writers produced to the schema of
/// [`PermissionProfile`], whose `Deserialize` takes it (an object
/// without `type`: `network.enabled`, `file_system.entries`, `read`,
/// `write`; a managed, restricted profile).
#[cfg(feature = "schema")]
fn add_legacy_profile_shape(schema: &mut schemars::Schema) {
    use schemars::JsonSchema as _;
    use serde_json::{json, Value};

    use crate::wire_path::WirePath;

    let legacy = json!({
        "description": "The untagged shape of older writers (no `type`): a managed, restricted profile whose entries are `entries` plus `read` and `write` paths.",
        "type": "object",
        "not": { "required": ["type"] },
        "properties": {
            "network": {
                "type": ["object", "null"],
                "properties": { "enabled": { "type": "boolean", "default": false } }
            },
            "file_system": {
                "type": ["object", "null"],
                "properties": {
                    "entries": { "type": "array", "items": { "$ref": "#/$defs/FileSystemSandboxEntry" } },
                    "glob_scan_max_depth": { "type": ["integer", "null"], "minimum": 1 },
                    "read": { "type": "array", "items": WirePath::json_schema(&mut schemars::SchemaGenerator::default()) },
                    "write": { "type": "array", "items": WirePath::json_schema(&mut schemars::SchemaGenerator::default()) }
                }
            }
        }
    });
    if let Some(Value::Array(branches)) = schema.get_mut("oneOf") {
        branches.push(legacy);
    }
}

/// The filesystem half of a managed profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
#[cfg_attr(feature = "schema", schemars(transform = add_legacy_profile_shape))]
pub enum PermissionProfile {
    /// codexbox enforces the filesystem and network rules.
    Managed {
        file_system: ManagedFileSystemPermissions,
        /// `restricted` when absent.
        #[serde(default)]
        network: NetworkSandboxPolicy,
    },
    /// No sandbox at all (network enabled).
    Disabled,
    /// The caller provides filesystem isolation; only network is ours.
    External {
        /// `restricted` when absent.
        #[serde(default)]
        network: NetworkSandboxPolicy,
    },
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

    /// Replaces `project_roots` entries and `codex-project-roots://` globs
    /// with absolute entries for each of `roots`; with no roots they grant
    /// nothing (the exec-server's rule). Other entries, relative globs
    /// included (resolved against the policy cwd), are kept.
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
            FileSystemPath::GlobPattern { pattern } => {
                match pattern.strip_prefix(PROJECT_ROOTS_GLOB_PREFIX) {
                    Some(below) => {
                        for root in roots {
                            push(FileSystemSandboxEntry::new(
                                FileSystemPath::GlobPattern {
                                    pattern: join_pattern(root, below.trim_start_matches('/')),
                                },
                                entry.access,
                            ));
                        }
                    }
                    None => push(entry.clone()),
                }
            }
            _ => push(entry.clone()),
        }
    }
    out
}
