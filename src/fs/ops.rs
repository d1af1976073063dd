//! The one-shot filesystem operations (docs/filesystem.md) on native paths,
//! with the reference's defaults, limits and messages. Both the server's
//! direct path and the fs-helper call [`run`]; nothing here knows about
//! sandboxes, connections or transports.

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use base64::Engine;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::{FsError, Result};
use super::{copy, remove, walk};
use crate::protocol::fs::{
    method, CanonicalizeResponse, CreateDirectoryParams, CreateSymlinkParams, DirectoryEntry,
    EmptyResponse, EntryParams, GetMetadataResponse, PathFieldsProbe, PathParams,
    ReadDirectoryResponse, ReadFileParams, ReadFileResponse, SetPermissionsParams, WriteFileParams,
    READ_DIRECTORY_MAX_ENTRIES, READ_FILE_MAX_BYTES, SETTABLE_MODE_BITS,
};
use crate::protocol::method::{
    FsCanonicalize, FsCopy, FsCreateDirectory, FsCreateSymlink, FsGetMetadata, FsReadDirectory,
    FsReadFile, FsRemove, FsSetPermissions, FsWalk, FsWriteFile, Method,
};

/// Null params as `{}`, refusing params by position (‑32602) and a bad
/// wire path with ‑32600 naming the path (docs/protocol.md, Paths). The probe only looks
/// at the path fields, so a large `dataBase64` is not copied.
pub fn check_paths(params: Value) -> Result<Value> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        Value::Array(_) => {
            return Err(FsError::InvalidParams(
                crate::protocol::envelope::POSITIONAL_PARAMS.into(),
            ))
        }
        params => params,
    };
    if let Some(path_err) = PathFieldsProbe::deserialize(&params)
        .ok()
        .and_then(|probe| probe.first_invalid())
    {
        return Err(FsError::InvalidPath(path_err));
    }
    Ok(params)
}

/// Decodes fs params: a bad wire path is ‑32600 naming the path (docs/protocol.md,
/// Paths), any other shape problem ‑32602.
pub fn decode_params<T: DeserializeOwned>(params: Value) -> Result<T> {
    let params = check_paths(params)?;
    serde_json::from_value(params).map_err(|err| FsError::InvalidParams(err.to_string()))
}

fn to_value<T: Serialize>(value: T) -> Result<Value> {
    serde_json::to_value(value).map_err(|err| FsError::Internal(err.to_string()))
}

/// Checks that `params`, already passed through [`check_paths`], decode for
/// `operation`, without running or copying them (the server does this
/// before handing a request to a helper).
pub fn validate(operation: &str, params: &Value) -> Result<()> {
    fn check<M: Method>(params: &Value) -> Result<()> {
        M::Params::deserialize(params)
            .map(drop)
            .map_err(|err| FsError::InvalidParams(err.to_string()))
    }
    match operation {
        method::READ_FILE => check::<FsReadFile>(params),
        method::WRITE_FILE => check::<FsWriteFile>(params),
        method::CREATE_DIRECTORY => check::<FsCreateDirectory>(params),
        method::GET_METADATA => check::<FsGetMetadata>(params),
        method::READ_DIRECTORY => check::<FsReadDirectory>(params),
        method::CANONICALIZE => check::<FsCanonicalize>(params),
        method::WALK => check::<FsWalk>(params),
        method::REMOVE => check::<FsRemove>(params),
        method::COPY => check::<FsCopy>(params),
        method::SET_PERMISSIONS => check::<FsSetPermissions>(params),
        method::CREATE_SYMLINK => check::<FsCreateSymlink>(params),
        other => Err(FsError::InvalidRequest(format!(
            "unsupported fs operation `{other}`"
        ))),
    }
}

/// Decodes the params of method `M` the way [`decode_params`] does.
pub fn decode<M: Method>(params: Value) -> Result<M::Params> {
    decode_params(params)
}

/// Runs one of the one-shot operations (`fs/readFile` … `fs/copy`) on
/// undecoded params and returns its JSON result. The `sandbox` field is not
/// looked at: the caller has already decided where this runs.
pub fn run(operation: &str, params: Value) -> Result<Value> {
    match operation {
        // Built by hand so the (possibly 700 MB) base64 text is moved, not copied.
        method::READ_FILE => Ok(serde_json::json!({
            "dataBase64": read_file(&decode::<FsReadFile>(params)?)?.data_base64
        })),
        method::WRITE_FILE => to_value(write_file(&decode::<FsWriteFile>(params)?)?),
        method::CREATE_DIRECTORY => {
            to_value(create_directory(&decode::<FsCreateDirectory>(params)?)?)
        }
        method::GET_METADATA => to_value(get_metadata(&decode::<FsGetMetadata>(params)?)?),
        method::CANONICALIZE => to_value(canonicalize(&decode::<FsCanonicalize>(params)?)?),
        method::READ_DIRECTORY => to_value(read_directory(&decode::<FsReadDirectory>(params)?)?),
        method::WALK => to_value(walk::walk(&decode::<FsWalk>(params)?)?),
        method::REMOVE => to_value(remove::remove(&decode::<FsRemove>(params)?)?),
        method::COPY => to_value(copy::copy(&decode::<FsCopy>(params)?)?),
        method::SET_PERMISSIONS => to_value(set_permissions(&decode::<FsSetPermissions>(params)?)?),
        method::CREATE_SYMLINK => to_value(create_symlink(&decode::<FsCreateSymlink>(params)?)?),
        other => Err(FsError::InvalidRequest(format!(
            "unsupported fs operation `{other}`"
        ))),
    }
}

/// ``path `{p}` is not a file``.
pub fn not_a_file(path: &Path) -> FsError {
    FsError::InvalidRequest(format!("path `{}` is not a file", path.display()))
}

/// Opens a regular file for reading without ever blocking on a FIFO
/// (`O_NONBLOCK`), refusing anything that is not a regular file. Returns the
/// file with its metadata.
pub fn open_regular_file(path: &Path) -> Result<(File, Metadata)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_a_file(path));
    }
    Ok((file, meta))
}

/// `fs/readFile`: the whole regular file, at most 512 MiB.
pub fn read_file(params: &ReadFileParams) -> Result<ReadFileResponse> {
    let path = params.path.path();
    let (file, meta) = open_regular_file(path)?;
    let too_large = || {
        FsError::InvalidRequest(format!(
            "file is too large to read: limit is {READ_FILE_MAX_BYTES} bytes"
        ))
    };
    let size = meta.len();
    if size > READ_FILE_MAX_BYTES {
        return Err(too_large());
    }
    let capacity = usize::try_from(size).unwrap_or(0);
    let mut data = Vec::with_capacity(capacity);
    // Read one byte past the cap so a file growing under us is still refused.
    file.take(READ_FILE_MAX_BYTES + 1).read_to_end(&mut data)?;
    if data.len() as u64 > READ_FILE_MAX_BYTES {
        return Err(too_large());
    }
    Ok(ReadFileResponse {
        data_base64: crate::protocol::base64().encode(&data),
    })
}

/// `fs/writeFile`: create or truncate, following symlinks and hard links,
/// never creating parents.
pub fn write_file(params: &WriteFileParams) -> Result<EmptyResponse> {
    let data = crate::protocol::base64()
        .decode(params.data_base64.as_bytes())
        .map_err(|err| {
            FsError::InvalidRequest(format!(
                "fs/writeFile requires valid base64 dataBase64: {err}"
            ))
        })?;
    fs::write(params.path.path(), data)?;
    Ok(EmptyResponse {})
}

/// `fs/createDirectory`: recursive (the default) succeeds when it exists.
pub fn create_directory(params: &CreateDirectoryParams) -> Result<EmptyResponse> {
    if params.recursive.unwrap_or(true) {
        create_directory_all(params.path.path())?;
    } else {
        fs::create_dir(params.path.path())?;
    }
    Ok(EmptyResponse {})
}

/// `mkdir -p`: creates each missing component in turn, each one resolved
/// by the kernel (so `a/../b` creates `a` and `b`, `new/.` creates `new`,
/// and an existing symlink to a directory counts as that directory).
pub(super) fn create_directory_all(path: &Path) -> io::Result<()> {
    let exists_as_directory = |result: io::Result<()>, at: &Path| match result {
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists && at.is_dir() => Ok(()),
        other => other,
    };
    match exists_as_directory(fs::create_dir(path), path) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        done => return done,
    }
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        if let Component::Normal(_) = component {
            exists_as_directory(fs::create_dir(&prefix), &prefix)?;
        }
    }
    // `components()` drops a trailing `.`; the kernel sees it once more.
    exists_as_directory(fs::create_dir(path), path)
}

fn millis(time: io::Result<SystemTime>) -> i64 {
    time.ok()
        .and_then(|time| time.duration_since(SystemTime::UNIX_EPOCH).ok())
        .and_then(|duration| i64::try_from(duration.as_millis()).ok())
        .unwrap_or(0)
}

fn metadata_response(
    described: &Metadata,
    is_symlink: bool,
    symlink_target: Option<String>,
) -> GetMetadataResponse {
    GetMetadataResponse {
        is_directory: described.is_dir(),
        is_file: described.is_file(),
        is_symlink,
        size: described.len(),
        created_at_ms: millis(described.created()),
        modified_at_ms: millis(described.modified()),
        mode: Some(described.permissions().mode() & 0o7777),
        symlink_target,
    }
}

/// The text of the symlink at `path` when it is UTF-8 (`None` otherwise).
fn link_text(path: &Path) -> Result<Option<String>> {
    Ok(fs::read_link(path)?.into_os_string().into_string().ok())
}

/// `fs/getMetadata`: `lstat` for `isSymlink` and `symlinkTarget`; `stat`
/// for the rest unless `followSymlinks` is false.
pub fn get_metadata(params: &EntryParams) -> Result<GetMetadataResponse> {
    let path = params.path.path();
    let link = fs::symlink_metadata(path)?;
    let is_symlink = link.file_type().is_symlink();
    let described = if is_symlink && params.follows_symlinks() {
        fs::metadata(path)?
    } else {
        link
    };
    let target = if is_symlink { link_text(path)? } else { None };
    Ok(metadata_response(&described, is_symlink, target))
}

/// `fs/canonicalize`: the real path, in the request's dialect.
pub fn canonicalize(params: &PathParams) -> Result<CanonicalizeResponse> {
    let real = fs::canonicalize(params.path.path())?;
    Ok(CanonicalizeResponse {
        path: params.path.sibling(real),
    })
}

/// `fs/readDirectory`: entries sorted by name, at most 50,000. By default
/// kinds follow symlinks and entries whose `stat` fails are skipped (the
/// reference's behaviour); with `followSymlinks: false` every entry is
/// described as itself (`lstat`), with `isSymlink`, `size`, `mode` and
/// `symlinkTarget`.
pub fn read_directory(params: &EntryParams) -> Result<ReadDirectoryResponse> {
    let dir = params.path.path();
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        names.push(entry?.file_name());
    }
    if names.len() > READ_DIRECTORY_MAX_ENTRIES {
        return Err(FsError::Internal(format!(
            "fs/readDirectory returned {} entries; limit is {READ_DIRECTORY_MAX_ENTRIES}",
            names.len()
        )));
    }
    names.sort();
    let follow = params.follows_symlinks();
    let entries = names
        .into_iter()
        .filter_map(|name| {
            let path = dir.join(&name);
            let file_name = name.to_string_lossy().into_owned();
            if follow {
                let meta = fs::metadata(&path).ok()?;
                return Some(DirectoryEntry {
                    file_name,
                    is_directory: meta.is_dir(),
                    is_file: meta.is_file(),
                    is_symlink: None,
                    size: None,
                    mode: None,
                    symlink_target: None,
                });
            }
            let meta = fs::symlink_metadata(&path).ok()?;
            let is_symlink = meta.file_type().is_symlink();
            let symlink_target = if is_symlink {
                link_text(&path).ok().flatten()
            } else {
                None
            };
            Some(DirectoryEntry {
                file_name,
                is_directory: meta.is_dir(),
                is_file: meta.is_file(),
                is_symlink: Some(is_symlink),
                size: Some(meta.len()),
                mode: Some(meta.permissions().mode() & 0o7777),
                symlink_target,
            })
        })
        .collect();
    Ok(ReadDirectoryResponse { entries })
}

/// `fs/setPermissions`: sets the permission bits of `path`, never through a
/// symlink (the kernel checks the last component without following it).
pub fn set_permissions(params: &SetPermissionsParams) -> Result<EmptyResponse> {
    let path = params.path.path();
    if params.mode & !SETTABLE_MODE_BITS != 0 {
        return Err(FsError::InvalidRequest(format!(
            "fs/setPermissions refuses mode {:o}: only the permission bits and the sticky bit ({SETTABLE_MODE_BITS:o}) can be set",
            params.mode
        )));
    }
    let mode = nix::sys::stat::Mode::from_bits_truncate(params.mode);
    match nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        path,
        mode,
        nix::sys::stat::FchmodatFlags::NoFollowSymlink,
    ) {
        Ok(()) => Ok(EmptyResponse {}),
        Err(nix::errno::Errno::EOPNOTSUPP) => Err(FsError::InvalidRequest(format!(
            "fs/setPermissions refuses `{}`: it is a symlink, and a symlink has no mode of its own",
            path.display()
        ))),
        Err(errno) => Err(errno.into()),
    }
}

/// `fs/createSymlink`: a new symlink at `path` holding `target` as given;
/// fails when `path` exists (even as a dangling symlink).
pub fn create_symlink(params: &CreateSymlinkParams) -> Result<EmptyResponse> {
    if params.target.is_empty() {
        return Err(FsError::InvalidRequest(
            "fs/createSymlink requires a non-empty target".into(),
        ));
    }
    std::os::unix::fs::symlink(&params.target, params.path.path())?;
    Ok(EmptyResponse {})
}
