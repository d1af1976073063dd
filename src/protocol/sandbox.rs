//! The `sandbox` object of fs requests and `process/start` (SPEC §3.6, §4.2;
//! reference notes §11–§12): [`FileSystemSandboxContext`] with its
//! [`ExecPermissionProfile`] (paths as `file:` URIs or native paths), the
//! older `{sandboxPolicy, sandboxPolicyCwd}` shape and its conversion, and
//! materialization into the native permission-profile JSON that
//! `codex-linux-sandbox --permission-profile` takes.
//!
//! This module only decides and converts; it never touches the sandbox
//! itself. Enforcement is the linux-sandbox mode's job.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::path::WirePath;
use crate::sandbox::policy::{normalize, PermissionProfile, SandboxPolicy};

/// Windows sandbox level; accepted and ignored on Linux.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum WindowsSandboxLevel {
    #[default]
    Disabled,
    RestrictedToken,
    Elevated,
}

/// Network side of a profile.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkAccess {
    #[default]
    Restricted,
    Enabled,
}

/// Access of one entry. `none` is accepted as an alias of `deny`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AccessMode {
    Read,
    Write,
    #[serde(alias = "none")]
    Deny,
}

/// A special path token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SpecialPath {
    Root,
    Minimal,
    #[serde(alias = "current_working_directory")]
    ProjectRoots {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subpath: Option<String>,
    },
    Tmpdir,
    SlashTmp,
    Unknown {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subpath: Option<String>,
    },
}

/// The path of an entry. `path` carries a `file:` URI or a native path on
/// the wire and a native path once materialized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EntryPath {
    Path { path: String },
    GlobPattern { pattern: String },
    Special { value: SpecialPath },
}

/// One filesystem entry of a restricted profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxEntry {
    pub path: EntryPath,
    pub access: AccessMode,
}

/// Filesystem part of a managed profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ManagedFileSystem {
    Restricted {
        #[serde(default)]
        entries: Vec<SandboxEntry>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        glob_scan_max_depth: Option<std::num::NonZeroUsize>,
    },
    Unrestricted,
}

/// The permission profile of the exec wire (tag `type`, snake_case keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecPermissionProfile {
    Managed {
        file_system: ManagedFileSystem,
        #[serde(default)]
        network: NetworkAccess,
    },
    Disabled,
    External {
        #[serde(default)]
        network: NetworkAccess,
    },
}

/// The `sandbox` object of fs requests and `process/start`.
///
/// Either `permissions` (the current shape) or `sandboxPolicy` (the older
/// shape, with `sandboxPolicyCwd`) must be present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSystemSandboxContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<ExecPermissionProfile>,
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
    #[error("sandbox requires `permissions` or `sandboxPolicy`")]
    MissingPermissions,
    #[error("invalid sandbox permission path URI: {0}")]
    PermissionPath(String),
    #[error("{error}")]
    Cwd { uri: String, error: String },
    #[error("file system sandbox workspace root is not native to this exec-server host: {error}")]
    WorkspaceRoot { uri: String, error: String },
    #[error("file system sandbox context with dynamic permissions requires cwd")]
    DynamicPermissionsRequireCwd,
    #[error("cannot convert the permission profile: {0}")]
    Convert(String),
    #[error("cannot determine the server's current directory: {0}")]
    ServerCwd(String),
}

/// A context with native cwd and roots and a profile whose `path` entries
/// are native; `project_roots` entries are still symbolic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSandbox {
    pub profile: ExecPermissionProfile,
    pub cwd: Option<PathBuf>,
    pub workspace_roots: Vec<PathBuf>,
    pub use_legacy_landlock: bool,
}

impl FileSystemSandboxContext {
    /// A context from a profile, with `workspaceRoots = [cwd]` when a cwd is given.
    pub fn from_permissions(profile: ExecPermissionProfile, cwd: Option<&Path>) -> Self {
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
            (Some(profile), _) => native_profile(profile)?,
            (None, Some(legacy)) => {
                if workspace_roots.is_empty() {
                    workspace_roots.extend(cwd.iter().cloned());
                }
                let profile = match cwd.as_deref() {
                    Some(cwd) => PermissionProfile::from_legacy_for_cwd(legacy, cwd),
                    None => PermissionProfile::from_legacy(legacy),
                };
                from_policy_profile(&profile)?
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

/// The sandbox policy type of a profile whose paths are native.
pub fn to_policy_profile(
    profile: &ExecPermissionProfile,
) -> Result<PermissionProfile, SandboxContextError> {
    serde_json::to_value(profile)
        .and_then(serde_json::from_value)
        .map_err(|err| SandboxContextError::Convert(err.to_string()))
}

/// The wire profile of a sandbox policy profile.
pub fn from_policy_profile(
    profile: &PermissionProfile,
) -> Result<ExecPermissionProfile, SandboxContextError> {
    serde_json::to_value(profile)
        .and_then(serde_json::from_value)
        .map_err(|err| SandboxContextError::Convert(err.to_string()))
}

/// The profile with every `path` entry converted to a native path.
fn native_profile(
    profile: &ExecPermissionProfile,
) -> Result<ExecPermissionProfile, SandboxContextError> {
    let mut profile = profile.clone();
    if let ExecPermissionProfile::Managed {
        file_system: ManagedFileSystem::Restricted { entries, .. },
        ..
    } = &mut profile
    {
        for entry in entries.iter_mut() {
            if let EntryPath::Path { path } = &mut entry.path {
                let native = WirePath::parse(path)
                    .map_err(|err| SandboxContextError::PermissionPath(err.to_string()))?;
                *path = native.path().to_string_lossy().into_owned();
            }
        }
    }
    Ok(profile)
}

fn special(value: SpecialPath, access: AccessMode) -> SandboxEntry {
    SandboxEntry {
        path: EntryPath::Special { value },
        access,
    }
}

fn path_entry(path: &Path, access: AccessMode) -> SandboxEntry {
    SandboxEntry {
        path: EntryPath::Path {
            path: path.to_string_lossy().into_owned(),
        },
        access,
    }
}

/// Whether a subpath (of `project_roots`) is safe to join: relative, no `..`.
fn join_subpath(root: &Path, subpath: Option<&str>) -> PathBuf {
    match subpath {
        None | Some("") | Some(".") => root.to_path_buf(),
        Some(sub) => normalize(&root.join(sub.trim_start_matches('/'))),
    }
}

/// Prefix of a glob expanded once per workspace root.
pub const PROJECT_ROOTS_GLOB_PREFIX: &str = "codex-project-roots://";

impl ResolvedSandbox {
    fn entries(&self) -> &[SandboxEntry] {
        match &self.profile {
            ExecPermissionProfile::Managed {
                file_system: ManagedFileSystem::Restricted { entries, .. },
                ..
            } => entries,
            _ => &[],
        }
    }

    /// Whether an entry depends on the cwd: a `project_roots` special or a
    /// relative glob pattern.
    pub fn has_dynamic_entries(&self) -> bool {
        self.entries().iter().any(|entry| match &entry.path {
            EntryPath::Special {
                value: SpecialPath::ProjectRoots { .. },
            } => true,
            EntryPath::GlobPattern { pattern } => {
                !pattern.starts_with('/') && !pattern.starts_with(PROJECT_ROOTS_GLOB_PREFIX)
            }
            _ => false,
        })
    }

    /// Full-disk read: unrestricted/external/disabled, or a readable `:root`
    /// and no deny entry at all (decided by [`crate::sandbox::policy`]).
    pub fn has_full_disk_read_access(&self) -> bool {
        to_policy_profile(&self.profile)
            .map(|profile| profile.to_runtime().0.has_full_disk_read_access())
            .unwrap_or(false)
    }

    /// Full-disk write: a writable `:root` and no narrowing entry (decided by
    /// [`crate::sandbox::policy`]).
    pub fn has_full_disk_write_access(&self) -> bool {
        to_policy_profile(&self.profile)
            .map(|profile| profile.has_full_disk_write_access())
            .unwrap_or(false)
    }

    /// SPEC §4.2: an fs request runs in a sandboxed helper iff the profile is
    /// managed-restricted without full-disk write access.
    pub fn requires_helper(&self) -> bool {
        matches!(
            self.profile,
            ExecPermissionProfile::Managed {
                file_system: ManagedFileSystem::Restricted { .. },
                ..
            }
        ) && !self.has_full_disk_write_access()
    }

    /// The profile with `project_roots` entries replaced by one entry per
    /// workspace root (none when there are no roots) and
    /// `codex-project-roots://` globs expanded likewise.
    pub fn materialized_profile(&self) -> ExecPermissionProfile {
        let mut profile = self.profile.clone();
        if let ExecPermissionProfile::Managed {
            file_system: ManagedFileSystem::Restricted { entries, .. },
            ..
        } = &mut profile
        {
            let mut out = Vec::with_capacity(entries.len());
            for entry in entries.drain(..) {
                match &entry.path {
                    EntryPath::Special {
                        value: SpecialPath::ProjectRoots { subpath },
                    } => {
                        for root in &self.workspace_roots {
                            out.push(path_entry(
                                &join_subpath(root, subpath.as_deref()),
                                entry.access,
                            ));
                        }
                    }
                    EntryPath::GlobPattern { pattern }
                        if pattern.starts_with(PROJECT_ROOTS_GLOB_PREFIX) =>
                    {
                        let sub = &pattern[PROJECT_ROOTS_GLOB_PREFIX.len()..];
                        for root in &self.workspace_roots {
                            out.push(SandboxEntry {
                                path: EntryPath::GlobPattern {
                                    pattern: format!(
                                        "{}/{}",
                                        root.to_string_lossy().trim_end_matches('/'),
                                        sub.trim_start_matches('/')
                                    ),
                                },
                                access: entry.access,
                            });
                        }
                    }
                    _ => out.push(entry),
                }
            }
            *entries = out;
        }
        profile
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
    pub fn helper_profile(&self, exe_dirs: &[PathBuf]) -> ExecPermissionProfile {
        let full_read = self.has_full_disk_read_access();
        let mut profile = self.materialized_profile();
        if let ExecPermissionProfile::Managed {
            file_system: ManagedFileSystem::Restricted { entries, .. },
            network,
        } = &mut profile
        {
            *network = NetworkAccess::Restricted;
            if !full_read {
                entries.push(special(SpecialPath::Minimal, AccessMode::Read));
                if !self.use_legacy_landlock {
                    add_readable_dirs(entries, exe_dirs);
                }
            }
        }
        profile
    }

    /// The profile a sandboxed process runs under: materialized, with the
    /// executables' directories readable.
    pub fn process_profile(&self, exe_dirs: &[PathBuf]) -> ExecPermissionProfile {
        let full_read = self.has_full_disk_read_access();
        let mut profile = self.materialized_profile();
        if let ExecPermissionProfile::Managed {
            file_system: ManagedFileSystem::Restricted { entries, .. },
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

fn add_readable_dirs(entries: &mut Vec<SandboxEntry>, dirs: &[PathBuf]) {
    for dir in dirs {
        let listed = entries.iter().any(|entry| {
            entry.access != AccessMode::Deny
                && matches!(&entry.path, EntryPath::Path { path } if Path::new(path) == dir)
        });
        if !listed {
            entries.push(path_entry(dir, AccessMode::Read));
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
        assert_eq!(
            ctx.resolve().unwrap().profile,
            ExecPermissionProfile::Disabled
        );
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
        let ctx = context(json!({
            "permissions": {"type":"managed","file_system":{"type":"restricted","entries":[
                {"path":{"type":"path","path":"file://server/x"},"access":"read"}]},"network":"restricted"}
        }));
        assert_eq!(
            ctx.resolve().unwrap_err().to_string(),
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
