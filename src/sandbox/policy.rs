//! Sandbox policy types (PermissionProfile, FileSystemSandboxPolicy, legacy SandboxPolicy) and their resolution.
