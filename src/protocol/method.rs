//! The method table: every request method's wire name with the type the
//! server decodes its params into and the type it writes its result from.
//! The router and the fs operations decode through [`Method::Params`], and
//! the shipped JSON Schemas are generated from the same table
//! (`protocol::schema::files`, with the `schema` feature, through
//! [`for_each_method!`]), so a schema cannot describe params the server
//! does not decode that way. Schema
//! generation stays out of this module: the table names types, the
//! `JsonSchema` bounds are asked only where schemas are made.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{capability, environment as env, fs, http, process as proc, session};

/// A request method: its name, the params the server decodes and the
/// result it answers with.
pub trait Method {
    /// The wire name (`process/start`).
    const NAME: &'static str;
    /// What the server decodes `params` into.
    type Params: DeserializeOwned;
    /// What the server answers.
    type Result: Serialize;
}

/// Calls `$callback!(Type)` for each method type of the table, in the
/// order of the shipped index.
#[macro_export]
#[doc(hidden)]
macro_rules! __for_each_method {
    ($callback:ident) => {
        $callback!(
            Initialize,
            ProcessStart,
            ProcessRead,
            ProcessWrite,
            ProcessSignal,
            ProcessTerminate,
            ProcessResize,
            EnvironmentInfo,
            EnvironmentStatus,
            SessionList,
            HttpRequest,
            CapabilityRootsDiscover,
            FsReadFile,
            FsWriteFile,
            FsCreateDirectory,
            FsGetMetadata,
            FsCanonicalize,
            FsReadDirectory,
            FsWalk,
            FsRemove,
            FsCopy,
            FsOpen,
            FsReadBlock,
            FsWriteBlock,
            FsClose,
            FsSetPermissions,
            FsCreateSymlink
        )
    };
}
pub use crate::__for_each_method as for_each_method;

macro_rules! methods {
    ($($(#[$doc:meta])* $ty:ident = $name:expr, $params:ty => $result:ty;)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            pub struct $ty;
            impl Method for $ty {
                const NAME: &'static str = $name;
                type Params = $params;
                type Result = $result;
            }
        )*
    };
}

methods! {
    /// `initialize`.
    Initialize = super::METHOD_INITIALIZE, super::InitializeParams => super::InitializeResult;
    /// `process/start`.
    ProcessStart = proc::METHOD_START, proc::StartParams => proc::StartResult;
    /// `process/read`.
    ProcessRead = proc::METHOD_READ, proc::ReadParams => proc::ReadResult;
    /// `process/write`.
    ProcessWrite = proc::METHOD_WRITE, proc::WriteParams => proc::WriteResult;
    /// `process/signal`.
    ProcessSignal = proc::METHOD_SIGNAL, proc::SignalParams => fs::EmptyResponse;
    /// `process/terminate`.
    ProcessTerminate = proc::METHOD_TERMINATE, proc::TerminateParams => proc::TerminateResult;
    /// `process/resize`.
    ProcessResize = proc::METHOD_RESIZE, proc::ResizeParams => fs::EmptyResponse;
    /// `environment/info` (no params: absent, `null` or an object).
    EnvironmentInfo = env::METHOD_INFO, super::NoParams => env::EnvironmentInfo;
    /// `environment/status`.
    EnvironmentStatus = env::METHOD_STATUS, super::NoParams => env::EnvironmentStatus;
    /// `session/list`: the server's sessions and their processes.
    SessionList = session::METHOD_LIST, super::NoParams => session::SessionListResult;
    /// `http/request`.
    HttpRequest = http::METHOD_HTTP_REQUEST, http::HttpRequestParams => http::HttpRequestResult;
    /// `capabilityRoots/discoverV1`.
    CapabilityRootsDiscover = capability::METHOD_DISCOVER, capability::DiscoverParams => capability::DiscoverResponse;
    /// `fs/readFile`.
    FsReadFile = fs::method::READ_FILE, fs::ReadFileParams => fs::ReadFileResponse;
    /// `fs/writeFile`.
    FsWriteFile = fs::method::WRITE_FILE, fs::WriteFileParams => fs::EmptyResponse;
    /// `fs/createDirectory`.
    FsCreateDirectory = fs::method::CREATE_DIRECTORY, fs::CreateDirectoryParams => fs::EmptyResponse;
    /// `fs/getMetadata`.
    FsGetMetadata = fs::method::GET_METADATA, fs::EntryParams => fs::GetMetadataResponse;
    /// `fs/canonicalize`.
    FsCanonicalize = fs::method::CANONICALIZE, fs::PathParams => fs::CanonicalizeResponse;
    /// `fs/readDirectory`.
    FsReadDirectory = fs::method::READ_DIRECTORY, fs::EntryParams => fs::ReadDirectoryResponse;
    /// `fs/walk`.
    FsWalk = fs::method::WALK, fs::WalkParams => fs::WalkResponse;
    /// `fs/remove`.
    FsRemove = fs::method::REMOVE, fs::RemoveParams => fs::EmptyResponse;
    /// `fs/copy`.
    FsCopy = fs::method::COPY, fs::CopyParams => fs::EmptyResponse;
    /// `fs/open`.
    FsOpen = fs::method::OPEN, fs::OpenParams => fs::OpenResponse;
    /// `fs/readBlock`.
    FsReadBlock = fs::method::READ_BLOCK, fs::ReadBlockParams => fs::ReadBlockResponse;
    /// `fs/writeBlock`.
    FsWriteBlock = fs::method::WRITE_BLOCK, fs::WriteBlockParams => fs::EmptyResponse;
    /// `fs/close`.
    FsClose = fs::method::CLOSE, fs::CloseParams => fs::EmptyResponse;
    /// `fs/setPermissions`.
    FsSetPermissions = fs::method::SET_PERMISSIONS, fs::SetPermissionsParams => fs::EmptyResponse;
    /// `fs/createSymlink`.
    FsCreateSymlink = fs::method::CREATE_SYMLINK, fs::CreateSymlinkParams => fs::EmptyResponse;
}

macro_rules! names {
    ($($ty:ident),*) => {
        &[$(<$ty as Method>::NAME),*]
    };
}
/// Every request method's name, in table order.
pub const REQUEST_METHODS: &[&str] = for_each_method!(names);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_listed_once() {
        let mut names = REQUEST_METHODS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), REQUEST_METHODS.len());
        assert!(REQUEST_METHODS.contains(&"capabilityRoots/discoverV1"));
    }
}
