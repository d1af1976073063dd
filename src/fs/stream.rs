//! Streaming reads (`fs/open`, `fs/readBlock`, `fs/close`, reference notes
//! §8.9): a per-connection table of open files. A handle pins the file it
//! opened, so renaming or replacing the path does not affect the stream.
//! Reads are positional (`pread`), in any order.
//!
//! Sandboxed streaming is refused, as in the reference: a handle would have
//! to live in a helper process for its whole lifetime.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use base64::Engine;

use super::error::{FsError, Result};
use super::ops::open_regular_file;
use crate::protocol::fs::{
    CloseParams, EmptyResponse, OpenParams, OpenResponse, ReadBlockParams, ReadBlockResponse,
    MAX_HANDLE_ID_BYTES, MAX_OPEN_HANDLES, MAX_READ_BLOCK_LEN,
};

/// Message for a sandboxed `fs/open`.
pub const SANDBOXED_STREAM_MESSAGE: &str =
    "streaming file reads do not support platform sandboxing";

/// The open streams of one connection. Cheap to clone; clones share the table.
#[derive(Debug, Clone, Default)]
pub struct FileStreams {
    handles: Arc<Mutex<HashMap<String, Arc<File>>>>,
}

impl FileStreams {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<File>>> {
        // A poisoned table still holds valid handles.
        self.handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Number of open handles.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// Whether no handle is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `fs/open`. `sandboxed` is whether the request needs a platform sandbox.
    pub fn open(&self, params: &OpenParams, sandboxed: bool) -> Result<OpenResponse> {
        let id = &params.handle_id;
        if id.len() > MAX_HANDLE_ID_BYTES {
            return Err(FsError::InvalidRequest(format!(
                "file read handle ID must not exceed {MAX_HANDLE_ID_BYTES} bytes"
            )));
        }
        can_add(&self.table(), id)?;
        if sandboxed {
            return Err(FsError::InvalidRequest(SANDBOXED_STREAM_MESSAGE.into()));
        }
        let (file, _) = open_regular_file(params.path.path())?;
        let mut table = self.table();
        // Checked again: another request may have raced us while opening.
        can_add(&table, id)?;
        table.insert(id.clone(), Arc::new(file));
        Ok(OpenResponse {
            handle_id: id.clone(),
        })
    }

    /// `fs/readBlock`: up to `len` bytes at `offset`; `eof` when fewer came.
    /// A read error closes the handle.
    pub fn read_block(&self, params: &ReadBlockParams) -> Result<ReadBlockResponse> {
        if params.len == 0 || params.len > MAX_READ_BLOCK_LEN {
            return Err(FsError::InvalidRequest(format!(
                "file read block length must be between 1 and {MAX_READ_BLOCK_LEN}"
            )));
        }
        let file = self
            .table()
            .get(&params.handle_id)
            .cloned()
            .ok_or_else(|| {
                FsError::NotFound(format!("unknown file read handle `{}`", params.handle_id))
            })?;
        let mut buf = vec![0u8; params.len];
        match read_at_most(&file, &mut buf, params.offset) {
            Ok(n) => {
                buf.truncate(n);
                Ok(ReadBlockResponse {
                    chunk: base64::engine::general_purpose::STANDARD.encode(&buf),
                    eof: n < params.len,
                })
            }
            Err(err) => {
                self.table().remove(&params.handle_id);
                Err(err.into())
            }
        }
    }

    /// `fs/close`: unknown ids are fine.
    pub fn close(&self, params: &CloseParams) -> EmptyResponse {
        self.table().remove(&params.handle_id);
        EmptyResponse {}
    }

    /// Closes every handle (connection shutdown).
    pub fn close_all(&self) {
        self.table().clear();
    }
}

/// Whether handle `id` can be added to `table`: it is not taken and the
/// table has room.
fn can_add(table: &HashMap<String, Arc<File>>, id: &str) -> Result<()> {
    if table.contains_key(id) {
        return Err(FsError::InvalidRequest(format!(
            "file read handle `{id}` already exists"
        )));
    }
    if table.len() >= MAX_OPEN_HANDLES {
        return Err(FsError::InvalidRequest(format!(
            "at most {MAX_OPEN_HANDLES} file reads may be open per connection"
        )));
    }
    Ok(())
}

fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let at = offset.saturating_add(filled as u64);
        match file.read_at(&mut buf[filled..], at) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}
