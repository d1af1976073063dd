//! The `sandbox` object of fs requests and `process/start` (docs/protocol.md and
//! docs/filesystem.md): [`FileSystemSandboxContext`], whose
//! `permissions` is the policy model's own [`PermissionProfile`] (paths as
//! `file:` URIs or native paths on input), the older `{sandboxPolicy,
//! sandboxPolicyCwd}` shape and its conversion, and the profiles a
//! sandboxed process or fs-helper runs under.
//!
//! This module only decides and converts; it never touches the sandbox
//! itself. Enforcement is the linux-sandbox mode's job.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::envelope::{RequestFamily, RpcError};
use crate::policy::{
    FileSystemAccessMode, FileSystemPath, FileSystemSandboxEntry, FileSystemSpecialPath,
    ManagedFileSystemPermissions, NetworkSandboxPolicy, PermissionProfile, SandboxPolicy,
    PROJECT_ROOTS_GLOB_PREFIX,
};
use crate::wire_path::WirePath;

/// Windows sandbox level; accepted and ignored on Linux.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum WindowsSandboxLevel {
    #[default]
    Disabled,
    RestrictedToken,
    Elevated,
}

/// The `sandbox` object of fs requests and `process/start`.
///
/// Either `permissions` (the current shape) or `sandboxPolicy` (the older
/// shape, with `sandboxPolicyCwd`) must be present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", schemars(extend("anyOf" = [
    {"required": ["permissions"], "properties": {"permissions": {"type": "object"}}},
    {"required": ["sandboxPolicy"], "properties": {"sandboxPolicy": {"type": "object"}}}
])))]
pub struct FileSystemSandboxContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionProfile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workspace_roots: Vec<String>,
    #[serde(default)]
    pub windows_sandbox_level: WindowsSandboxLevel,
    #[serde(default)]
    pub windows_sandbox_private_desktop: bool,
    #[serde(default)]
    pub use_legacy_landlock: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_policy: Option<SandboxPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_policy_cwd: Option<String>,
}

/// Why a sandbox context cannot be used. Messages follow the reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxContextError {
    /// The context does not decode (a wrong shape, not a bad path).
    #[error("{0}")]
    Malformed(String),
    /// A path of a permission entry (or a legacy policy's roots) is not
    /// one this host can use.
    #[error("invalid sandbox permission path URI: {error}")]
    PermissionPath { uri: String, error: String },
    #[error("sandbox requires `permissions` or `sandboxPolicy`")]
    MissingPermissions,
    #[error("{error}")]
    Cwd { uri: String, error: String },
    #[error("file system sandbox workspace root is not native to this exec-server host: {error}")]
    WorkspaceRoot { uri: String, error: String },
    #[error("file system sandbox context with dynamic permissions requires cwd")]
    DynamicPermissionsRequireCwd,
    #[error("cannot determine the server's current directory: {0}")]
    ServerCwd(String),
}

/// A context with native cwd and roots and a profile whose `path` entries
/// are native; `project_roots` entries are still symbolic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSandbox {
    pub profile: PermissionProfile,
    pub cwd: Option<PathBuf>,
    pub workspace_roots: Vec<PathBuf>,
    pub use_legacy_landlock: bool,
}

impl SandboxContextError {
    /// The JSON-RPC error of this failure in a request of `family`: a shape
    /// error is always ‑32602; everything else, a path the host cannot use
    /// first, gets the family's code ([`RequestFamily::path_error`]) and,
    /// in `process/start`, the reference's wording for that method.
    pub fn to_rpc(&self, family: RequestFamily) -> RpcError {
        let message = match (family, self) {
            (RequestFamily::Filesystem, SandboxContextError::Malformed(_)) => {
                return RpcError::invalid_params(self.to_string())
            }
            (RequestFamily::Process, SandboxContextError::Malformed(_)) => {
                return RpcError::invalid_params(format!("invalid sandbox: {self}"))
            }
            (RequestFamily::Filesystem, _) => self.to_string(),
            (RequestFamily::Process, SandboxContextError::PermissionPath { .. }) => {
                format!("invalid sandbox: {self}")
            }
            (RequestFamily::Process, SandboxContextError::Cwd { uri, error }) => {
                format!("sandbox cwd URI `{uri}` is not valid on this exec-server host: {error}")
            }
            (RequestFamily::Process, SandboxContextError::WorkspaceRoot { uri, error }) => {
                format!(
                    "sandbox workspace root URI `{uri}` is not valid on this exec-server host: {error}"
                )
            }
            (RequestFamily::Process, other) => {
                format!("failed to prepare process sandbox: {other}")
            }
        };
        family.path_error(message)
    }
}

/// Member names of the legacy shapes whose value is a list of absolute
/// paths (`writable_roots`, `readable_roots`; the untagged profile's
/// `read` and `write`).
const PATH_LIST_MEMBERS: [&str; 4] = ["writable_roots", "readable_roots", "read", "write"];

/// The first path in a context's policy (a `{"type":"path","path":…}`
/// entry, or an element of a legacy path list) that is a string but not a
/// wire path this host can use. Found before the context is decoded, so
/// such a path is told apart from a wrong shape.
fn first_unusable_policy_path(value: &Value) -> Option<SandboxContextError> {
    let unusable = |text: &str| {
        WirePath::parse(text)
            .err()
            .map(|err| SandboxContextError::PermissionPath {
                uri: text.to_owned(),
                error: err.to_string(),
            })
    };
    match value {
        Value::Object(members) => {
            let entry_path = members
                .get("type")
                .filter(|kind| *kind == "path")
                .and_then(|_| members.get("path"))
                .and_then(Value::as_str)
                .and_then(unusable);
            entry_path
                .or_else(|| {
                    PATH_LIST_MEMBERS
                        .iter()
                        .filter_map(|name| members.get(*name).and_then(Value::as_array))
                        .flatten()
                        .filter_map(Value::as_str)
                        .find_map(unusable)
                })
                .or_else(|| members.values().find_map(first_unusable_policy_path))
        }
        Value::Array(items) => items.iter().find_map(first_unusable_policy_path),
        _ => None,
    }
}

impl FileSystemSandboxContext {
    /// Decodes the `sandbox` member of a request: a path of the policy that
    /// this host cannot use is [`SandboxContextError::PermissionPath`], any
    /// other decoding failure [`SandboxContextError::Malformed`]. `null` is
    /// no sandbox.
    pub fn decode(value: &Value) -> Result<Option<Self>, SandboxContextError> {
        if value.is_null() {
            return Ok(None);
        }
        for member in ["permissions", "sandboxPolicy"] {
            if let Some(err) = value.get(member).and_then(first_unusable_policy_path) {
                return Err(err);
            }
        }
        Self::deserialize(value)
            .map(Some)
            .map_err(|err| SandboxContextError::Malformed(err.to_string()))
    }

    /// A context from a profile, with `workspaceRoots = [cwd]` when a cwd is given.
    pub fn from_permissions(profile: PermissionProfile, cwd: Option<&Path>) -> Self {
        let cwd = cwd.map(|cwd| cwd.to_string_lossy().into_owned());
        Self {
            permissions: Some(profile),
            workspace_roots: cwd.iter().cloned().collect(),
            cwd,
            windows_sandbox_level: WindowsSandboxLevel::Disabled,
            windows_sandbox_private_desktop: false,
            use_legacy_landlock: false,
            sandbox_policy: None,
            sandbox_policy_cwd: None,
        }
    }

    /// Decodes a context from its JSON value.
    pub fn deserialize_value(value: &serde_json::Value) -> Result<Self, serde_json::Error> {
        Self::deserialize(value)
    }

    /// Converts wire paths to native ones and the legacy shape to a profile.
    pub fn resolve(&self) -> Result<ResolvedSandbox, SandboxContextError> {
        let parse_cwd = |text: &str| {
            WirePath::parse(text)
                .map(WirePath::into_path)
                .map_err(|err| SandboxContextError::Cwd {
                    uri: text.to_owned(),
                    error: err.to_string(),
                })
        };
        let cwd = match self.cwd.as_deref().or(self.sandbox_policy_cwd.as_deref()) {
            Some(text) => Some(parse_cwd(text)?),
            None => None,
        };
        let mut workspace_roots = self
            .workspace_roots
            .iter()
            .map(|root| {
                WirePath::parse(root)
                    .map(WirePath::into_path)
                    .map_err(|err| SandboxContextError::WorkspaceRoot {
                        uri: root.clone(),
                        error: err.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let profile = match (&self.permissions, &self.sandbox_policy) {
            (Some(profile), _) => profile.clone(),
            (None, Some(legacy)) => {
                if workspace_roots.is_empty() {
                    workspace_roots.extend(cwd.iter().cloned());
                }
                match cwd.as_deref() {
                    Some(cwd) => PermissionProfile::from_legacy_for_cwd(legacy, cwd),
                    None => PermissionProfile::from_legacy(legacy),
                }
            }
            (None, None) => return Err(SandboxContextError::MissingPermissions),
        };
        Ok(ResolvedSandbox {
            profile,
            cwd,
            workspace_roots,
            use_legacy_landlock: self.use_legacy_landlock,
        })
    }
}

impl ResolvedSandbox {
    fn entries(&self) -> &[FileSystemSandboxEntry] {
        match &self.profile {
            PermissionProfile::Managed {
                file_system: ManagedFileSystemPermissions::Restricted { entries, .. },
                ..
            } => entries,
            _ => &[],
        }
    }

    /// Whether an entry depends on the cwd: a `project_roots` special or a
    /// relative glob pattern.
    pub fn has_dynamic_entries(&self) -> bool {
        self.entries().iter().any(|entry| match &entry.path {
            FileSystemPath::Special {
                value: FileSystemSpecialPath::ProjectRoots { .. },
            } => true,
            FileSystemPath::GlobPattern { pattern } => {
                !pattern.starts_with('/') && !pattern.starts_with(PROJECT_ROOTS_GLOB_PREFIX)
            }
            _ => false,
        })
    }

    /// Full-disk read: unrestricted/external/disabled, or a readable `:root`
    /// and no deny entry at all.
    pub fn has_full_disk_read_access(&self) -> bool {
        self.profile.to_runtime().0.has_full_disk_read_access()
    }

    /// Full-disk write: a writable `:root` and no narrowing entry.
    pub fn has_full_disk_write_access(&self) -> bool {
        self.profile.has_full_disk_write_access()
    }

    /// An fs request runs in a sandboxed helper iff the profile is
    /// managed-restricted without full-disk write access.
    pub fn requires_helper(&self) -> bool {
        matches!(
            self.profile,
            PermissionProfile::Managed {
                file_system: ManagedFileSystemPermissions::Restricted { .. },
                ..
            }
        ) && !self.has_full_disk_write_access()
    }

    /// The profile with `project_roots` entries and `codex-project-roots://`
    /// globs made absolute for each workspace root (none when there are no
    /// roots).
    pub fn materialized_profile(&self) -> PermissionProfile {
        self.profile
            .materialize_project_roots(&self.workspace_roots)
    }

    /// The policy cwd for a fs-helper: `cwd`, or the server's current
    /// directory when no entry depends on it.
    pub fn helper_cwd(&self) -> Result<PathBuf, SandboxContextError> {
        if let Some(cwd) = &self.cwd {
            return Ok(cwd.clone());
        }
        if self.has_dynamic_entries() {
            return Err(SandboxContextError::DynamicPermissionsRequireCwd);
        }
        std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map_err(|err| SandboxContextError::ServerCwd(err.to_string()))
    }

    /// The profile a fs-helper runs under: materialized, `minimal` readable
    /// when the profile lacks full-disk read, the executables' directories
    /// readable (unless legacy Landlock), network always restricted.
    pub fn helper_profile(&self, exe_dirs: &[PathBuf]) -> PermissionProfile {
        let full_read = self.has_full_disk_read_access();
        let mut profile = self.materialized_profile();
        if let PermissionProfile::Managed {
            file_system: ManagedFileSystemPermissions::Restricted { entries, .. },
            network,
        } = &mut profile
        {
            *network = NetworkSandboxPolicy::Restricted;
            if !full_read {
                entries.push(FileSystemSandboxEntry::special(
                    FileSystemSpecialPath::Minimal,
                    FileSystemAccessMode::Read,
                ));
                if !self.use_legacy_landlock {
                    add_readable_dirs(entries, exe_dirs);
                }
            }
        }
        profile
    }

    /// The profile a sandboxed process runs under: materialized, with the
    /// executables' directories readable.
    pub fn process_profile(&self, exe_dirs: &[PathBuf]) -> PermissionProfile {
        let full_read = self.has_full_disk_read_access();
        let mut profile = self.materialized_profile();
        if let PermissionProfile::Managed {
            file_system: ManagedFileSystemPermissions::Restricted { entries, .. },
            ..
        } = &mut profile
        {
            if !full_read {
                add_readable_dirs(entries, exe_dirs);
            }
        }
        profile
    }
}

fn add_readable_dirs(entries: &mut Vec<FileSystemSandboxEntry>, dirs: &[PathBuf]) {
    for dir in dirs {
        let listed = entries.iter().any(|entry| {
            entry.access != FileSystemAccessMode::Deny
                && matches!(&entry.path, FileSystemPath::Path { path } if path == dir)
        });
        if !listed {
            entries.push(FileSystemSandboxEntry::path(
                dir.clone(),
                FileSystemAccessMode::Read,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn context(value: serde_json::Value) -> FileSystemSandboxContext {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn wire_profile_round_trips_with_uri_paths() {
        let ctx = context(json!({
            "permissions": {"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"path","path":"file:///srv/a%20b"},"access":"write"},
                {"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read"},
                {"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"none"}
            ]},"network":"restricted"},
            "cwd": "file:///srv",
            "workspaceRoots": ["/srv"],
            "windowsSandboxLevel": "disabled"
        }));
        let resolved = ctx.resolve().unwrap();
        assert_eq!(resolved.cwd.as_deref(), Some(Path::new("/srv")));
        let json = serde_json::to_value(resolved.materialized_profile()).unwrap();
        assert_eq!(
            json["file_system"]["entries"],
            json!([
                {"path":{"type":"path","path":"/srv/a b"},"access":"write"},
                {"path":{"type":"path","path":"/srv/.git"},"access":"read"},
                {"path":{"type":"path","path":"/srv"},"access":"deny"}
            ])
        );
    }

    #[test]
    fn empty_workspace_roots_grant_nothing() {
        let ctx = context(json!({
            "permissions": {"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"}
            ]},"network":"restricted"},
            "cwd": "/srv"
        }));
        let resolved = ctx.resolve().unwrap();
        let json = serde_json::to_value(resolved.materialized_profile()).unwrap();
        assert_eq!(json["file_system"]["entries"], json!([]));
    }

    #[test]
    fn dynamic_permissions_without_cwd_are_refused() {
        let ctx = context(json!({
            "permissions": {"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"read"}
            ]},"network":"restricted"}
        }));
        let err = ctx.resolve().unwrap().helper_cwd().unwrap_err();
        assert_eq!(
            err.to_string(),
            "file system sandbox context with dynamic permissions requires cwd"
        );
    }

    #[test]
    fn direct_or_helper_follows_the_full_disk_write_rule() {
        let direct = [
            json!({"type":"disabled"}),
            json!({"type":"external","network":"restricted"}),
            json!({"type":"managed","file_system":{"type":"unrestricted"},"network":"enabled"}),
            json!({"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"special","value":{"kind":"root"}},"access":"write"}]},"network":"restricted"}),
        ];
        for permissions in direct {
            let ctx = context(json!({ "permissions": permissions }));
            assert!(!ctx.resolve().unwrap().requires_helper(), "{permissions}");
        }
        let helper = [
            json!({"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"special","value":{"kind":"root"}},"access":"read"}]},"network":"restricted"}),
            json!({"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"special","value":{"kind":"root"}},"access":"write"},
                {"path":{"type":"path","path":"/etc"},"access":"read"}]},"network":"restricted"}),
        ];
        for permissions in helper {
            let ctx = context(json!({ "permissions": permissions }));
            assert!(ctx.resolve().unwrap().requires_helper(), "{permissions}");
        }
    }

    #[test]
    fn legacy_policies_convert_like_the_reference() {
        let ctx =
            context(json!({"sandboxPolicy":{"type":"danger-full-access"},"sandboxPolicyCwd":"/"}));
        assert_eq!(ctx.resolve().unwrap().profile, PermissionProfile::Disabled);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(".git")).unwrap();
        let ctx = context(json!({
            "sandboxPolicy":{"type":"workspace-write","network_access":false,"exclude_slash_tmp":true},
            "sandboxPolicyCwd": dir.path()
        }));
        let resolved = ctx.resolve().unwrap();
        assert_eq!(resolved.workspace_roots, vec![dir.path().to_path_buf()]);
        let json = serde_json::to_value(resolved.materialized_profile()).unwrap();
        let entries = json["file_system"]["entries"].as_array().unwrap();
        let root = dir.path().to_string_lossy();
        assert!(entries.contains(&json!({"path":{"type":"path","path":root},"access":"write"})));
        assert!(entries.contains(
            &json!({"path":{"type":"path","path":format!("{root}/.git")},"access":"read"})
        ));
        assert!(!entries.contains(
            &json!({"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"})
        ));
        assert!(resolved.requires_helper());
    }

    #[test]
    fn helper_profile_adds_minimal_and_exe_dir_and_restricts_network() {
        let ctx = context(json!({
            "permissions": {"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"path","path":"/srv"},"access":"read"}]},"network":"enabled"},
            "cwd": "/srv"
        }));
        let profile = ctx
            .resolve()
            .unwrap()
            .helper_profile(&[PathBuf::from("/opt/bin")]);
        let json = serde_json::to_value(profile).unwrap();
        assert_eq!(json["network"], "restricted");
        let entries = json["file_system"]["entries"].as_array().unwrap();
        assert!(entries.contains(
            &json!({"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"})
        ));
        assert!(
            entries.contains(&json!({"path":{"type":"path","path":"/opt/bin"},"access":"read"}))
        );
    }

    #[test]
    fn bad_permission_paths_and_roots_have_the_reference_messages() {
        let err = serde_json::from_value::<FileSystemSandboxContext>(json!({
            "permissions": {"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"path","path":"file://server/x"},"access":"read"}]},"network":"restricted"}
        }))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid sandbox permission path URI: 'file://server/x' is invalid on 'linux'"
        );
        let ctx =
            context(json!({"permissions":{"type":"disabled"},"workspaceRoots":["file://h/r"]}));
        assert_eq!(
            ctx.resolve().unwrap_err().to_string(),
            "file system sandbox workspace root is not native to this exec-server host: 'file://h/r' is invalid on 'linux'"
        );
        let ctx = context(json!({"permissions":{"type":"disabled"},"cwd":"file://h/r"}));
        assert_eq!(
            ctx.resolve().unwrap_err().to_string(),
            "'file://h/r' is invalid on 'linux'"
        );
    }
}
