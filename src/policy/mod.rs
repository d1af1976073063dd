//! Sandbox policy model: the JSON shapes the reference helper accepts
//! (`PermissionProfile`, `FileSystemSandboxPolicy`, `NetworkSandboxPolicy`,
//! legacy `SandboxPolicy`), their conversions, the named profiles people use,
//! and resolution of a policy against a cwd into concrete roots.
//!
//! Pure data plus the few filesystem reads resolution needs (does `.git`
//! exist, where does a `gitdir:` file point, what does `$TMPDIR` say). It does
//! not build bubblewrap arguments (`sandbox::bwrap_args`) nor enforce anything.
//!
//! Rules (docs/sandbox.md): the access of a path is that of the entry with
//! the most path components among those that contain it, ties going to the
//! strongest (`deny > write > read`), and no entry means denied. Inside a
//! writable entry, `.git`, `.agents` and `.codex` stay read-only unless an
//! explicit write entry names them, except under full-disk write. A grant
//! reached through a symlink lying inside a place where an earlier sandboxed
//! command could have written grants nothing (`planted`).

// Dependencies run one way: model <- planted <- resolve <- runtime <- legacy
// <- profile.
mod legacy;
mod model;
mod planted;
mod profile;
mod resolve;
mod runtime;
#[cfg(test)]
mod tests;

pub use legacy::*;
pub use model::*;
pub use planted::*;
pub use profile::*;
pub use resolve::*;
pub use runtime::*;
