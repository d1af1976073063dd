//! Streaming file access (`fs/open`, `fs/readBlock`, `fs/writeBlock`,
//! `fs/close`; reads as the reference's, writes new): a table of
//! open files. A handle pins the file it opened, so renaming or replacing
//! the path does not affect the stream. Reads (`pread`) and writes
//! (`pwrite`) are positional, in any order; a read or write error closes
//! the handle. Closing a write handle waits for its data to reach the disk
//! (`fdatasync`) and reports an error met there.
//!
//! The server keeps one table per connection for handles it opens itself;
//! a sandboxed fs-helper in its persistent form keeps one for handles opened
//! in its sandbox ([`run`] is its entry point). Which table a handle lives
//! in, and the per-connection limits across both, are the server's business
//! (`server::fs_methods`); the checks and messages are shared from here.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use base64::Engine;
use serde_json::Value;

use super::error::{FsError, Result};
use super::ops::{decode_params, not_a_file, open_regular_file};
use crate::protocol::fs::{
    method, CloseParams, EmptyResponse, OpenMode, OpenParams, OpenResponse, ReadBlockParams,
    ReadBlockResponse, WriteBlockParams, MAX_HANDLE_ID_BYTES, MAX_OPEN_HANDLES, MAX_READ_BLOCK_LEN,
    MAX_WRITE_BLOCK_BYTES,
};

/// An open handle: the file and what it may be used for.
#[derive(Debug)]
struct Stream {
    file: File,
    /// `None` for a read handle; for a write handle, the file offset block
    /// offsets count from (the length at open in `append` mode, else 0).
    write_base: Option<u64>,
}

/// A table of open handles. Cheap to clone; clones share the table.
#[derive(Debug, Clone, Default)]
pub struct FileStreams {
    handles: Arc<Mutex<HashMap<String, Arc<Stream>>>>,
}

/// `read` or `write`, as the messages name a handle.
fn noun(write: bool) -> &'static str {
    if write {
        "write"
    } else {
        "read"
    }
}

/// Refuses a handle id longer than 32 bytes.
pub fn check_handle_id(id: &str, mode: OpenMode) -> Result<()> {
    if id.len() > MAX_HANDLE_ID_BYTES {
        return Err(FsError::InvalidRequest(format!(
            "file {} handle ID must not exceed {MAX_HANDLE_ID_BYTES} bytes",
            noun(mode.is_write())
        )));
    }
    Ok(())
}

/// Whether a new handle `id` fits a table of `open` handles where
/// `taken` says whether `id` is already one of them.
pub fn check_room(id: &str, mode: OpenMode, taken: bool, open: usize) -> Result<()> {
    if taken {
        return Err(FsError::InvalidRequest(format!(
            "file {} handle `{id}` already exists",
            noun(mode.is_write())
        )));
    }
    if open >= MAX_OPEN_HANDLES {
        return Err(FsError::InvalidRequest(if mode.is_write() {
            format!("at most {MAX_OPEN_HANDLES} file reads and writes may be open per connection")
        } else {
            format!("at most {MAX_OPEN_HANDLES} file reads may be open per connection")
        }));
    }
    Ok(())
}

/// The error for a handle id that is not open.
pub fn unknown_handle(id: &str, write: bool) -> FsError {
    FsError::NotFound(format!("unknown file {} handle `{id}`", noun(write)))
}

/// The error for a read of a write handle or the other way round.
pub fn wrong_access(id: &str, write: bool) -> FsError {
    FsError::InvalidRequest(format!(
        "file handle `{id}` is not open for {}",
        if write { "writing" } else { "reading" }
    ))
}

/// Refuses a `fs/readBlock` length outside 1..=1 MiB.
pub fn check_read_len(len: usize) -> Result<()> {
    if len == 0 || len > MAX_READ_BLOCK_LEN {
        return Err(FsError::InvalidRequest(format!(
            "file read block length must be between 1 and {MAX_READ_BLOCK_LEN}"
        )));
    }
    Ok(())
}

/// The checks of a `fs/writeBlock` made before its handle is looked at:
/// valid base64, at most 1 MiB, and an end offset the kernel accepts
/// (≤ `i64::MAX`). Returns the bytes.
pub fn validate_write(params: &WriteBlockParams) -> Result<Vec<u8>> {
    let too_large = || {
        FsError::InvalidRequest(format!(
            "file write block must not exceed {MAX_WRITE_BLOCK_BYTES} bytes"
        ))
    };
    // Checked on the text first, so an oversized block is never decoded.
    if params.data_base64.len() / 4 * 3 > MAX_WRITE_BLOCK_BYTES + 2 {
        return Err(too_large());
    }
    let data = crate::protocol::base64()
        .decode(params.data_base64.as_bytes())
        .map_err(|err| {
            FsError::InvalidRequest(format!(
                "fs/writeBlock requires valid base64 dataBase64: {err}"
            ))
        })?;
    if data.len() > MAX_WRITE_BLOCK_BYTES {
        return Err(too_large());
    }
    if end_offset(params.offset, data.len()).is_none() {
        return Err(FsError::InvalidRequest(format!(
            "file write offset {} is out of range",
            params.offset
        )));
    }
    Ok(data)
}

/// `offset + len` when it fits the kernel's file offsets (`i64`).
fn end_offset(offset: u64, len: usize) -> Option<u64> {
    let end = offset.checked_add(u64::try_from(len).ok()?)?;
    i64::try_from(end).ok().map(|_| end)
}

/// Opens `params.path` as `mode` asks, refusing anything that is not a
/// regular file and never blocking on a FIFO.
fn open_file(params: &OpenParams) -> Result<Stream> {
    let path = params.path.path();
    let mode = params.mode();
    if mode == OpenMode::Read {
        let (file, _) = open_regular_file(path)?;
        return Ok(Stream {
            file,
            write_base: None,
        });
    }
    let mut options = OpenOptions::new();
    options
        .write(true)
        .mode(0o666)
        .custom_flags(libc::O_NONBLOCK);
    match mode {
        OpenMode::Create => options.create_new(true),
        OpenMode::Truncate => options.create(true).truncate(true),
        OpenMode::Append | OpenMode::Read => options.create(true),
    };
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_a_file(path));
    }
    let write_base = if mode == OpenMode::Append {
        meta.len()
    } else {
        0
    };
    Ok(Stream {
        file,
        write_base: Some(write_base),
    })
}

impl FileStreams {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn table(&self) -> MutexGuard<'_, HashMap<String, Arc<Stream>>> {
        // A poisoned table still holds valid handles.
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Number of open handles.
    pub fn len(&self) -> usize {
        self.table().len()
    }

    /// Whether no handle is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether handle `id` is open.
    pub fn contains(&self, id: &str) -> bool {
        self.table().contains_key(id)
    }

    fn room_for(&self, id: &str, mode: OpenMode) -> Result<()> {
        let table = self.table();
        check_room(id, mode, table.contains_key(id), table.len())
    }

    /// `fs/open`: opens the file as `mode` asks and files it under the id.
    pub fn open(&self, params: &OpenParams) -> Result<OpenResponse> {
        let id = &params.handle_id;
        let mode = params.mode();
        check_handle_id(id, mode)?;
        self.room_for(id, mode)?;
        let stream = open_file(params)?;
        let mut table = self.table();
        // Checked again: another request may have raced us while opening.
        check_room(id, mode, table.contains_key(id), table.len())?;
        table.insert(id.clone(), Arc::new(stream));
        Ok(OpenResponse {
            handle_id: id.clone(),
        })
    }

    /// The handle `id`, which must be open for `write`.
    fn stream(&self, id: &str, write: bool) -> Result<Arc<Stream>> {
        let stream = self
            .table()
            .get(id)
            .cloned()
            .ok_or_else(|| unknown_handle(id, write))?;
        if stream.write_base.is_some() != write {
            return Err(wrong_access(id, write));
        }
        Ok(stream)
    }

    /// Runs `io` on the handle; an I/O error closes it.
    fn closing_on_error<T>(&self, id: &str, io: io::Result<T>) -> Result<T> {
        io.map_err(|err| {
            self.table().remove(id);
            err.into()
        })
    }

    /// `fs/readBlock`: up to `len` bytes at `offset`; `eof` when fewer came.
    pub fn read_block(&self, params: &ReadBlockParams) -> Result<ReadBlockResponse> {
        check_read_len(params.len)?;
        let stream = self.stream(&params.handle_id, false)?;
        let mut buf = vec![0u8; params.len];
        let n = self.closing_on_error(
            &params.handle_id,
            read_at_most(&stream.file, &mut buf, params.offset),
        )?;
        buf.truncate(n);
        Ok(ReadBlockResponse {
            chunk: crate::protocol::base64().encode(&buf),
            eof: n < params.len,
        })
    }

    /// `fs/writeBlock`: every byte of the block at `offset` (counted from
    /// the handle's base), or an error.
    pub fn write_block(&self, params: &WriteBlockParams) -> Result<EmptyResponse> {
        let data = validate_write(params)?;
        let stream = self.stream(&params.handle_id, true)?;
        // An `append` base can push the end past what the kernel takes.
        let at = stream
            .write_base
            .and_then(|base| base.checked_add(params.offset))
            .filter(|at| end_offset(*at, data.len()).is_some())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG));
        let written = at.and_then(|at| stream.file.write_all_at(&data, at));
        self.closing_on_error(&params.handle_id, written)?;
        Ok(EmptyResponse {})
    }

    /// `fs/close`: unknown ids are fine. A write handle is synced to disk
    /// first; an error there is the answer (the handle is closed anyway).
    pub fn close(&self, params: &CloseParams) -> Result<EmptyResponse> {
        let Some(stream) = self.table().remove(&params.handle_id) else {
            return Ok(EmptyResponse {});
        };
        if stream.write_base.is_some() {
            stream.file.sync_data()?;
        }
        Ok(EmptyResponse {})
    }

    /// Closes every handle (connection shutdown).
    pub fn close_all(&self) {
        self.table().clear();
    }
}

fn read_at_most(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut filled = 0;
    while let Some(rest) = buf.get_mut(filled..).filter(|rest| !rest.is_empty()) {
        let at = u64::try_from(filled)
            .ok()
            .and_then(|filled| offset.checked_add(filled))
            .unwrap_or(u64::MAX);
        match file.read_at(rest, at) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

/// Runs a streaming operation on undecoded params against `streams` (the
/// fs-helper's entry point; the server calls the typed methods).
pub fn run(streams: &FileStreams, operation: &str, params: Value) -> Result<Value> {
    fn to_value<T: serde::Serialize>(value: T) -> Result<Value> {
        serde_json::to_value(value).map_err(|err| FsError::Internal(err.to_string()))
    }
    match operation {
        method::OPEN => to_value(streams.open(&decode_params(params)?)?),
        method::READ_BLOCK => to_value(streams.read_block(&decode_params(params)?)?),
        method::WRITE_BLOCK => to_value(streams.write_block(&decode_params(params)?)?),
        method::CLOSE => to_value(streams.close(&decode_params(params)?)?),
        other => Err(FsError::InvalidRequest(format!(
            "unsupported fs operation `{other}`"
        ))),
    }
}
