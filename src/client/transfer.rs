//! Streaming file transfers over `fs/open` handles, in bounded memory: a
//! download reads 1 MiB blocks with `fs/readBlock`, an upload writes them
//! with `fs/writeBlock`, each keeping a few blocks in flight so a relayed
//! connection's round trips overlap. Memory stays at about
//! [`BLOCKS_IN_FLIGHT`] blocks whatever the file's size.
//!
//! What to copy, and where, is the caller's business (`codexbox cp` walks
//! trees in `crate::shell::cp`); this module moves the bytes of one file.

use futures_util::stream::{FuturesOrdered, FuturesUnordered};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{ClientError, ExecServerClient};
use crate::protocol::fs::{OpenMode, MAX_READ_BLOCK_LEN, MAX_WRITE_BLOCK_BYTES};

/// Bytes per block (the protocol's maximum for both directions).
pub const BLOCK_BYTES: usize = if MAX_READ_BLOCK_LEN < MAX_WRITE_BLOCK_BYTES {
    MAX_READ_BLOCK_LEN
} else {
    MAX_WRITE_BLOCK_BYTES
};
/// Blocks requested ahead of the one being consumed.
pub const BLOCKS_IN_FLIGHT: usize = 4;

/// Why a transfer failed, and on which side.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The exec-server refused or failed (its message names the cause).
    #[error("{0}")]
    Remote(#[from] ClientError),
    /// The local reader or writer failed.
    #[error("{0}")]
    Local(#[source] std::io::Error),
}

impl ExecServerClient {
    /// Streams the remote regular file at `path` into `sink` through the
    /// handle `handle_id` (closed on every path out), calling `progress`
    /// with each block's length. Returns the bytes copied.
    pub async fn download<W>(
        &self,
        handle_id: &str,
        path: &str,
        sink: &mut W,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, TransferError>
    where
        W: AsyncWrite + Unpin,
    {
        self.fs_open(handle_id, path, None).await?;
        let copied = self.read_blocks(handle_id, sink, progress).await;
        let copied = self.close_after(handle_id, copied).await?;
        sink.flush().await.map_err(TransferError::Local)?;
        Ok(copied)
    }

    /// Closes `handle_id` whatever `outcome` was; the first error wins.
    async fn close_after(
        &self,
        handle_id: &str,
        outcome: Result<u64, TransferError>,
    ) -> Result<u64, TransferError> {
        let closed = self.fs_close(handle_id).await;
        let copied = outcome?;
        closed?;
        Ok(copied)
    }

    async fn read_blocks<W>(
        &self,
        handle_id: &str,
        sink: &mut W,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, TransferError>
    where
        W: AsyncWrite + Unpin,
    {
        let block = u64::try_from(BLOCK_BYTES).unwrap_or(u64::MAX);
        let mut in_flight = FuturesOrdered::new();
        let mut next_offset = 0u64;
        let mut at_end = false;
        let mut copied = 0u64;
        loop {
            while !at_end && in_flight.len() < BLOCKS_IN_FLIGHT {
                in_flight.push_back(self.fs_read_block(handle_id, next_offset, BLOCK_BYTES));
                next_offset = next_offset.saturating_add(block);
            }
            let Some(result) = in_flight.next().await else {
                return Ok(copied);
            };
            let (chunk, eof) = result?;
            // Blocks asked for past the end are answered empty (or, if the
            // file grew meanwhile, with bytes the copy does not include).
            if at_end {
                continue;
            }
            sink.write_all(&chunk).await.map_err(TransferError::Local)?;
            let len = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
            copied = copied.saturating_add(len);
            progress(len);
            at_end = eof || chunk.len() < BLOCK_BYTES;
        }
    }

    /// Streams `source` into the remote file at `path`, opened with `mode`
    /// (`Create`, `Truncate` or `Append`) as `handle_id`, and closes it
    /// (which syncs it to disk). Calls `progress` as blocks are written.
    /// Returns the bytes copied.
    pub async fn upload<R>(
        &self,
        handle_id: &str,
        path: &str,
        mode: OpenMode,
        source: &mut R,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, TransferError>
    where
        R: AsyncRead + Unpin,
    {
        self.fs_open_mode(handle_id, path, mode, None).await?;
        let copied = self.write_blocks(handle_id, source, progress).await;
        self.close_after(handle_id, copied).await
    }

    async fn write_blocks<R>(
        &self,
        handle_id: &str,
        source: &mut R,
        progress: &mut dyn FnMut(u64),
    ) -> Result<u64, TransferError>
    where
        R: AsyncRead + Unpin,
    {
        let mut in_flight = FuturesUnordered::new();
        let mut offset = 0u64;
        let mut at_end = false;
        loop {
            while !at_end && in_flight.len() < BLOCKS_IN_FLIGHT {
                let data = read_block(source).await.map_err(TransferError::Local)?;
                if data.is_empty() {
                    at_end = true;
                    break;
                }
                let at = offset;
                let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
                offset = offset.saturating_add(len);
                at_end = data.len() < BLOCK_BYTES;
                in_flight.push(async move {
                    self.fs_write_block(handle_id, at, &data)
                        .await
                        .map(|()| len)
                });
            }
            match in_flight.next().await {
                Some(written) => progress(written?),
                None => return Ok(offset),
            }
        }
    }
}

/// Reads up to one block, short only at the end of `source`.
async fn read_block<R: AsyncRead + Unpin>(source: &mut R) -> std::io::Result<Vec<u8>> {
    let mut data = vec![0u8; BLOCK_BYTES];
    let mut filled = 0;
    while filled < BLOCK_BYTES {
        let n = source.read(&mut data[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    data.truncate(filled);
    Ok(data)
}
