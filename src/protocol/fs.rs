//! Wire types of the `fs/*` methods (docs/filesystem.md): params
//! and results in the reference's camelCase shapes. Paths are [`WirePath`]s,
//! so a request may use native paths or `file:` URIs and results answer in the
//! request's dialect. The operations themselves live in [`crate::fs`].

use serde::{Deserialize, Serialize};

use super::sandbox::FileSystemSandboxContext;
use crate::wire_path::WirePath;

/// Method names of the filesystem API.
pub mod method {
    pub const READ_FILE: &str = "fs/readFile";
    pub const WRITE_FILE: &str = "fs/writeFile";
    pub const CREATE_DIRECTORY: &str = "fs/createDirectory";
    pub const GET_METADATA: &str = "fs/getMetadata";
    pub const CANONICALIZE: &str = "fs/canonicalize";
    pub const READ_DIRECTORY: &str = "fs/readDirectory";
    pub const WALK: &str = "fs/walk";
    pub const REMOVE: &str = "fs/remove";
    pub const COPY: &str = "fs/copy";
    pub const OPEN: &str = "fs/open";
    pub const READ_BLOCK: &str = "fs/readBlock";
    pub const WRITE_BLOCK: &str = "fs/writeBlock";
    pub const CLOSE: &str = "fs/close";
    pub const SET_PERMISSIONS: &str = "fs/setPermissions";
    pub const CREATE_SYMLINK: &str = "fs/createSymlink";

    /// The streaming operations: they act on a handle table, so a fs-helper
    /// runs them only in its persistent (`--serve`) form.
    /// Whether `operation` only reads (running it twice changes nothing).
    pub fn is_read_only(operation: &str) -> bool {
        matches!(
            operation,
            READ_FILE | GET_METADATA | CANONICALIZE | READ_DIRECTORY | WALK
        )
    }

    pub const STREAM_OPERATIONS: [&str; 4] = [OPEN, READ_BLOCK, WRITE_BLOCK, CLOSE];

    /// The one-shot operations a fs-helper can run (no streaming).
    pub const HELPER_OPERATIONS: [&str; 11] = [
        READ_FILE,
        WRITE_FILE,
        CREATE_DIRECTORY,
        GET_METADATA,
        CANONICALIZE,
        READ_DIRECTORY,
        WALK,
        REMOVE,
        COPY,
        SET_PERMISSIONS,
        CREATE_SYMLINK,
    ];
}

/// Largest file `fs/readFile` returns: 512 MiB.
pub const READ_FILE_MAX_BYTES: u64 = 512 * 1024 * 1024;
/// Largest directory `fs/readDirectory` lists.
pub const READ_DIRECTORY_MAX_ENTRIES: usize = 50_000;
/// Longest `fs/open` handle id, in bytes.
pub const MAX_HANDLE_ID_BYTES: usize = 32;
/// Open `fs/open` handles per connection.
pub const MAX_OPEN_HANDLES: usize = 128;
/// Largest `fs/readBlock` length: 1 MiB.
pub const MAX_READ_BLOCK_LEN: usize = 1024 * 1024;
/// Largest `fs/writeBlock` payload (decoded): 1 MiB, like a read block.
pub const MAX_WRITE_BLOCK_BYTES: usize = 1024 * 1024;
/// `fs/walk` maximums.
pub const WALK_MAX_DEPTH: usize = 64;
pub const WALK_MAX_DIRECTORIES: usize = 10_000;
pub const WALK_MAX_ENTRIES: usize = 50_000;
/// `fs/walk` response budget and per-item overhead.
pub const WALK_RESPONSE_BUDGET: usize = 4 * 1024 * 1024;
pub const WALK_ITEM_OVERHEAD: usize = 64;

/// `fs/readFile` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReadFileParams {
    pub path: WirePath,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// `fs/readFile` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReadFileResponse {
    #[cfg_attr(feature = "schema", schemars(extend("contentEncoding" = "base64")))]
    pub data_base64: String,
}

/// `fs/writeFile` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WriteFileParams {
    pub path: WirePath,
    #[cfg_attr(feature = "schema", schemars(extend("contentEncoding" = "base64")))]
    pub data_base64: String,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// `fs/createDirectory` params (`recursive` defaults to true).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CreateDirectoryParams {
    pub path: WirePath,
    #[serde(default)]
    pub recursive: Option<bool>,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// Params of the methods that take only a path (`fs/canonicalize`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PathParams {
    pub path: WirePath,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

pub type CanonicalizeParams = PathParams;

/// Params of `fs/getMetadata` and `fs/readDirectory`: a path, and whether
/// a symlink is described by what it points to (the default, the
/// reference's behaviour) or as itself (`followSymlinks: false`, new).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct EntryParams {
    pub path: WirePath,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

impl EntryParams {
    /// Whether symlinks are followed (true when absent).
    pub fn follows_symlinks(&self) -> bool {
        self.follow_symlinks.unwrap_or(true)
    }
}

pub type GetMetadataParams = EntryParams;
pub type ReadDirectoryParams = EntryParams;

/// `fs/getMetadata` result: `isDirectory`/`isFile`/`size`/`mode` describe
/// what a symlink points to unless `followSymlinks` is false, `isSymlink`
/// the path itself; timestamps in ms since the epoch, 0 if unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct GetMetadataResponse {
    pub is_directory: bool,
    pub is_file: bool,
    pub is_symlink: bool,
    pub size: u64,
    pub created_at_ms: i64,
    pub modified_at_ms: i64,
    /// Permission bits (`st_mode & 0o7777`; new, absent from the reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// What the symlink at `path` contains, when it is one and the text is
    /// UTF-8 (new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
}

/// `fs/canonicalize` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CanonicalizeResponse {
    pub path: WirePath,
}

/// One `fs/readDirectory` entry. The optional members are present only
/// with `followSymlinks: false`, where the entry is described as itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DirectoryEntry {
    pub file_name: String,
    pub is_directory: bool,
    pub is_file: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_symlink: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
}

/// `fs/readDirectory` result (sorted by name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReadDirectoryResponse {
    pub entries: Vec<DirectoryEntry>,
}

/// `fs/walk` limits and switches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WalkOptions {
    pub max_depth: usize,
    pub max_directories: usize,
    pub max_entries: usize,
    pub follow_directory_symlinks: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prune_hidden_directories: bool,
}

/// `fs/walk` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WalkParams {
    pub path: WirePath,
    pub options: WalkOptions,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// Kind of a walked entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum WalkEntryKind {
    Directory,
    File,
}

/// One walked entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WalkEntry {
    pub path: WirePath,
    pub kind: WalkEntryKind,
}

/// A path the walk could not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WalkError {
    pub path: WirePath,
    pub message: String,
}

/// `fs/walk` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WalkResponse {
    pub entries: Vec<WalkEntry>,
    pub errors: Vec<WalkError>,
    pub truncated: bool,
}

/// `fs/remove` params (`recursive` and `force` default to true).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RemoveParams {
    pub path: WirePath,
    #[serde(default)]
    pub recursive: Option<bool>,
    #[serde(default)]
    pub force: Option<bool>,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// `fs/copy` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CopyParams {
    pub source_path: WirePath,
    pub destination_path: WirePath,
    pub recursive: bool,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// Mode bits `fs/setPermissions` may set: the permission bits and the
/// sticky bit, never set-user-ID or set-group-ID.
pub const SETTABLE_MODE_BITS: u32 = 0o1777;

/// `fs/setPermissions` params (new): `chmod` of `path`, which must not be a
/// symlink, to `mode` (within [`SETTABLE_MODE_BITS`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SetPermissionsParams {
    pub path: WirePath,
    pub mode: u32,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// `fs/createSymlink` params (new): a symlink at `path` (which must not
/// exist) containing `target`, taken as it is (relative or absolute).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CreateSymlinkParams {
    pub path: WirePath,
    pub target: String,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// How `fs/open` opens its file. Absent or `null` is `read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum OpenMode {
    /// An existing regular file, for `fs/readBlock`.
    #[default]
    Read,
    /// A new file, for `fs/writeBlock`; fails when the path exists (even as
    /// a symlink).
    Create,
    /// Created or truncated, for `fs/writeBlock`; follows symlinks and hard
    /// links like `fs/writeFile`.
    Truncate,
    /// Created or kept, for `fs/writeBlock`; block offsets count from the
    /// file's length when it was opened.
    Append,
}

impl OpenMode {
    /// Whether the handle is written (`fs/writeBlock`) rather than read.
    pub fn is_write(self) -> bool {
        self != OpenMode::Read
    }
}

/// `fs/open` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct OpenParams {
    pub handle_id: String,
    pub path: WirePath,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<OpenMode>,
    #[serde(default)]
    pub sandbox: Option<FileSystemSandboxContext>,
}

impl OpenParams {
    /// The mode, `read` when absent.
    pub fn mode(&self) -> OpenMode {
        self.mode.unwrap_or_default()
    }
}

/// `fs/open` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct OpenResponse {
    pub handle_id: String,
}

/// `fs/readBlock` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReadBlockParams {
    pub handle_id: String,
    pub offset: u64,
    pub len: usize,
}

/// `fs/readBlock` result: `eof` is true when fewer than `len` bytes were read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReadBlockResponse {
    #[cfg_attr(feature = "schema", schemars(extend("contentEncoding" = "base64")))]
    pub chunk: String,
    pub eof: bool,
}

/// `fs/writeBlock` params: writes `dataBase64` (at most 1 MiB decoded) at
/// `offset` of a handle opened for writing; positional, any order. The
/// result is `{}` once every byte is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WriteBlockParams {
    pub handle_id: String,
    pub offset: u64,
    #[cfg_attr(feature = "schema", schemars(extend("contentEncoding" = "base64")))]
    pub data_base64: String,
}

/// `fs/close` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CloseParams {
    pub handle_id: String,
}

/// The empty result `{}` of writeFile, createDirectory, remove, copy,
/// writeBlock, close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EmptyResponse {}

/// The wire-path fields a fs request can carry, decoded leniently so a bad
/// path can be reported with the fs error code (‑32600) rather than as a
/// generic params error.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathFieldsProbe {
    #[serde(default)]
    pub path: Option<serde_json::Value>,
    #[serde(default)]
    pub source_path: Option<serde_json::Value>,
    #[serde(default)]
    pub destination_path: Option<serde_json::Value>,
}

impl PathFieldsProbe {
    /// The first path field that is a string but not a valid wire path.
    pub fn first_invalid(&self) -> Option<crate::wire_path::PathError> {
        [&self.path, &self.source_path, &self.destination_path]
            .into_iter()
            .flatten()
            .filter_map(|value| value.as_str())
            .find_map(|text| WirePath::parse(text).err())
    }
}
