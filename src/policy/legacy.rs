//! The legacy `SandboxPolicy` JSON (`--sandbox-policy`, the older
//! `sandboxPolicy` of the exec wire) and its conversion to the runtime
//! policy, as the reference converts it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::model::{
    abs_path, FileSystemAccessMode, FileSystemSandboxEntry, FileSystemSandboxKind,
    FileSystemSpecialPath, NetworkSandboxPolicy,
};
use super::runtime::FileSystemSandboxPolicy;

fn is_false(b: &bool) -> bool {
    !*b
}

/// The legacy policy (`--sandbox-policy JSON`, `sandboxPolicy` on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum SandboxPolicy {
    DangerFullAccess,
    ReadOnly {
        #[serde(default, skip_serializing_if = "is_false")]
        network_access: bool,
        /// Historical read restriction (honoured, never dropped).
        #[cfg_attr(feature = "schema", schemars(skip))]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        access: Option<LegacyReadAccess>,
    },
    ExternalSandbox {
        #[serde(default)]
        network_access: NetworkSandboxPolicy,
    },
    WorkspaceWrite {
        #[cfg_attr(feature = "schema", schemars(with = "Vec<crate::wire_path::WirePath>"))]
        #[serde(default, with = "abs_path::vec")]
        writable_roots: Vec<PathBuf>,
        #[serde(default)]
        network_access: bool,
        #[serde(default)]
        exclude_tmpdir_env_var: bool,
        #[serde(default)]
        exclude_slash_tmp: bool,
        /// Historical read restriction (honoured, never dropped).
        #[cfg_attr(feature = "schema", schemars(skip))]
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
