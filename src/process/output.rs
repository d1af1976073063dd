//! The output pump of one managed process: a single task reads stdout,
//! stderr (or the PTY) and the supervisor's status pipe, numbers every event
//! with the process's sequence counter, retains output, and sends the
//! notifications in seq order to the attached connection. Sending waits for
//! room in the connection's bounded queue (the child then blocks on a full
//! pipe, as on a slow terminal); while detached, output only goes to retention.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use tokio::io::unix::AsyncFd;

use super::fd::read_record;
use super::kill::signal_name;
use super::record::{EventRoute, ExitInfo, Record};
use super::retention::{Chunk, Retention};
use super::supervisor::decode_wait_status;
use crate::protocol::envelope::encode_notification;
use crate::protocol::process::{
    encode_output_notification, ClosedNotification, ExitedNotification, StreamKind, NOTIFY_CLOSED,
    NOTIFY_EXITED,
};
use crate::sync::lock;

/// Largest chunk read at once.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// A closed process stays readable this long, then its id is forgotten.
pub const CLOSED_PROCESS_TTL: Duration = Duration::from_secs(30);
/// How long a sandboxed process's late output is awaited before judging `sandboxDenied`.
pub const SANDBOX_LATE_OUTPUT_GRACE: Duration = Duration::from_millis(20);
/// At most this many chunks per stream are drained when the exit arrives.
const DRAIN_CHUNKS: usize = 64;

/// The server's ends of a process's descriptors, owned by the pump.
pub(crate) struct Streams {
    pub stdout: Option<AsyncFd<OwnedFd>>,
    pub stderr: Option<AsyncFd<OwnedFd>>,
    pub pty: Option<Arc<AsyncFd<OwnedFd>>>,
    pub status: Option<AsyncFd<OwnedFd>>,
}

impl Streams {
    fn outputs_closed(&self) -> bool {
        self.stdout.is_none() && self.stderr.is_none() && self.pty.is_none()
    }
    fn close(&mut self, kind: StreamKind) {
        match kind {
            StreamKind::Stdout => self.stdout = None,
            StreamKind::Stderr => self.stderr = None,
            StreamKind::Pty => self.pty = None,
        }
    }
}

enum Event {
    Data(StreamKind, Vec<u8>),
    Eof(StreamKind),
    /// The raw wait status, or `None` when the supervisor vanished without one.
    Exit(Option<i32>),
}

/// What one [`read_chunk`] got.
struct ReadChunk {
    data: Vec<u8>,
    /// The descriptor was seen empty: no need to try it again before the
    /// reactor reports new data.
    drained: bool,
}

/// Reads what is available, up to [`CHUNK_BYTES`], coalescing several short
/// reads (a PTY hands out a few KiB at a time) into one chunk: `Some(chunk)`,
/// `None` at EOF, or `WouldBlock` when nothing was readable. The kernel
/// writes straight into the chunk that is then retained and encoded, so a
/// byte is copied once on its way in.
fn read_chunk(fd: &OwnedFd, kind: StreamKind) -> io::Result<Option<ReadChunk>> {
    let mut data: Vec<u8> = Vec::with_capacity(CHUNK_BYTES);
    let mut drained = false;
    while data.len() < CHUNK_BYTES {
        let room = CHUNK_BYTES - data.len();
        match read_into_spare(fd, &mut data) {
            Ok(0) => break,
            // A pipe hands out everything it holds at once: a short read
            // leaves it empty, so another read would only say EAGAIN. (A PTY
            // master returns a few KiB at a time; it is read until EAGAIN.)
            Ok(n) if n < room && kind != StreamKind::Pty => {
                drained = true;
                break;
            }
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) if data.is_empty() => return Err(io::ErrorKind::WouldBlock.into()),
            Err(Errno::EAGAIN) => {
                drained = true;
                break;
            }
            // EIO on a PTY master means every slave descriptor is closed.
            Err(Errno::EIO) if kind == StreamKind::Pty => break,
            Err(err) if data.is_empty() => return Err(err.into()),
            Err(_) => break,
        }
    }
    // EOF (or an error) with nothing read: the stream is done. With data,
    // the next read reports the EOF again.
    if data.is_empty() {
        return Ok(None);
    }
    // Retention counts bytes, not capacity: a short read keeps no 64 KiB
    // allocation alive.
    if data.len() < CHUNK_BYTES / 2 {
        data.shrink_to_fit();
    }
    Ok(Some(ReadChunk { data, drained }))
}

/// One read(2) into the unused capacity of `chunk`; returns the bytes added.
fn read_into_spare(fd: &OwnedFd, chunk: &mut Vec<u8>) -> Result<usize, Errno> {
    let filled = chunk.len();
    let spare = chunk.spare_capacity_mut();
    let room = spare.len();
    // SAFETY: the kernel writes at most `room` bytes into memory that
    // `chunk` owns and does not otherwise touch during the call.
    let read = unsafe { libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), room) };
    let read = usize::try_from(read).map_err(|_| Errno::last())?.min(room);
    let len = filled + read;
    // SAFETY: read(2) initialized the first `read` bytes of the spare
    // capacity, so the first `len` bytes of `chunk` are initialized.
    unsafe { chunk.set_len(len) };
    Ok(read)
}

async fn next_output(fd: Option<&AsyncFd<OwnedFd>>, kind: StreamKind) -> Event {
    let Some(fd) = fd else {
        return std::future::pending().await;
    };
    loop {
        let mut guard = match fd.readable().await {
            Ok(guard) => guard,
            Err(_) => return Event::Eof(kind),
        };
        match guard.try_io(|inner| read_chunk(inner.get_ref(), kind)) {
            Ok(Ok(Some(chunk))) => {
                if chunk.drained {
                    // Edge-triggered: the next write to the pipe or terminal
                    // raises readiness again, so no empty read is needed to
                    // learn that it is empty now.
                    guard.clear_ready();
                }
                return Event::Data(kind, chunk.data);
            }
            Ok(Ok(None)) | Ok(Err(_)) => return Event::Eof(kind),
            Err(_would_block) => continue,
        }
    }
}

async fn next_status(fd: Option<&AsyncFd<OwnedFd>>) -> Event {
    match fd {
        Some(fd) => Event::Exit(read_record(fd).await),
        None => std::future::pending().await,
    }
}

/// The next event of any open stream (and of the status pipe, when asked).
/// Every branch is cancel-safe: data is only taken by a completed read.
async fn next_event(streams: &Streams, with_status: bool) -> Event {
    tokio::select! {
        ev = next_output(streams.stdout.as_ref(), StreamKind::Stdout) => ev,
        ev = next_output(streams.stderr.as_ref(), StreamKind::Stderr) => ev,
        ev = next_output(streams.pty.as_deref(), StreamKind::Pty) => ev,
        ev = next_status(streams.status.as_ref().filter(|_| with_status)) => ev,
    }
}

/// Runs until the process is closed, then forgets it after [`CLOSED_PROCESS_TTL`].
///
/// `on_closed` runs once `closed` is out (the server drops its stdin and
/// PTY descriptors then).
pub(crate) async fn pump(
    process: Arc<Record>,
    mut streams: Streams,
    route: EventRoute,
    on_closed: Box<dyn FnOnce() + Send>,
    on_evict: Box<dyn FnOnce() + Send>,
    release_on_close: bool,
) {
    let mut exited = false;
    while !(exited && streams.outputs_closed()) {
        match next_event(&streams, !exited).await {
            Event::Data(kind, data) => emit_output(&process, &route, kind, data).await,
            Event::Eof(kind) => streams.close(kind),
            Event::Exit(status) => {
                streams.status = None;
                drain(&process, &route, &mut streams).await;
                let (code, signal) = status.map_or((-1, None), decode_wait_status);
                let mut denied = false;
                if process.is_sandboxed() && code != 0 {
                    late_output_grace(&process, &route, &mut streams).await;
                    denied = sandbox_denied(&lock(&process.state).retention, code);
                }
                emit_exit(&process, &route, code, signal, denied).await;
                exited = true;
            }
        }
    }
    process.tree_kills_settled().await;
    emit_closed(&process, &route).await;
    on_closed();
    if release_on_close {
        super::reaper::release();
    }
    tokio::time::sleep(CLOSED_PROCESS_TTL).await;
    on_evict();
}

/// Emits what is readable right now on every open stream.
async fn drain(process: &Record, route: &EventRoute, streams: &mut Streams) {
    for kind in [StreamKind::Stdout, StreamKind::Stderr, StreamKind::Pty] {
        for _ in 0..DRAIN_CHUNKS {
            let fd = match kind {
                StreamKind::Stdout => streams.stdout.as_ref(),
                StreamKind::Stderr => streams.stderr.as_ref(),
                StreamKind::Pty => streams.pty.as_deref(),
            };
            let Some(fd) = fd else { break };
            match read_chunk(fd.get_ref(), kind) {
                Ok(Some(chunk)) => emit_output(process, route, kind, chunk.data).await,
                Ok(None) => {
                    streams.close(kind);
                    break;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    streams.close(kind);
                    break;
                }
            }
        }
    }
}

async fn late_output_grace(process: &Record, route: &EventRoute, streams: &mut Streams) {
    let deadline = tokio::time::Instant::now() + SANDBOX_LATE_OUTPUT_GRACE;
    while !streams.outputs_closed() {
        match tokio::time::timeout_at(deadline, next_event(streams, false)).await {
            Ok(Event::Data(kind, data)) => emit_output(process, route, kind, data).await,
            Ok(Event::Eof(kind)) => streams.close(kind),
            Ok(Event::Exit(_)) | Err(_) => break,
        }
    }
}

async fn emit_output(process: &Record, route: &EventRoute, kind: StreamKind, data: Vec<u8>) {
    let sender = route.current();
    // Only the pump advances `next_seq`, so reading it first is race-free.
    let seq = lock(&process.state).next_seq;
    let text = sender.as_ref().map(|_| {
        let mut text = String::new();
        encode_output_notification(&mut text, process.id(), seq, kind, &data);
        text
    });
    {
        let mut state = lock(&process.state);
        state.next_seq = seq + 1;
        state.retention.push(Chunk {
            seq,
            stream: kind,
            data,
        });
    }
    process.changed.notify_waiters();
    if let (Some(sender), Some(text)) = (sender, text) {
        let _ = sender.send(text).await;
    }
}

async fn emit_exit(
    process: &Record,
    route: &EventRoute,
    code: i32,
    signal: Option<i32>,
    denied: bool,
) {
    let seq = {
        let mut state = lock(&process.state);
        let seq = state.next_seq;
        state.next_seq += 1;
        state.exit = Some(ExitInfo { code, signal, seq });
        state.sandbox_denied = denied;
        seq
    };
    process.changed.notify_waiters();
    if let Some(sender) = route.current() {
        let name = signal.map(signal_name);
        let text = encode_notification(
            NOTIFY_EXITED,
            &ExitedNotification {
                process_id: process.id(),
                seq,
                exit_code: code,
                signal: name.as_deref(),
                sandbox_denied: denied,
            },
        );
        let _ = sender.send(text).await;
    }
}

async fn emit_closed(process: &Record, route: &EventRoute) {
    let seq = {
        let mut state = lock(&process.state);
        let seq = state.next_seq;
        state.next_seq += 1;
        state.closed = true;
        seq
    };
    process.changed.notify_waiters();
    if let Some(sender) = route.current() {
        let text = encode_notification(
            NOTIFY_CLOSED,
            &ClosedNotification {
                process_id: process.id(),
                seq,
            },
        );
        let _ = sender.send(text).await;
    }
}

/// Words in a sandboxed process's output that suggest the sandbox refused it.
const DENIAL_MARKERS: &[&str] = &[
    "operation not permitted",
    "permission denied",
    "read-only file system",
    "seccomp",
    "sandbox",
    "landlock",
    "failed to write file",
];

/// The reference's heuristic over the retained output (docs/protocol.md).
pub fn sandbox_denied(retention: &Retention, code: i32) -> bool {
    if code == 0 {
        return false;
    }
    // The aggregate (stdout, then stderr) contains every marker either part
    // does, so it is the only text searched.
    let mut all = Vec::new();
    let mut stderr = Vec::new();
    for chunk in retention.iter() {
        match chunk.stream {
            StreamKind::Stderr => stderr.extend_from_slice(&chunk.data),
            StreamKind::Stdout | StreamKind::Pty => all.extend_from_slice(&chunk.data),
        }
    }
    all.append(&mut stderr);
    let text = String::from_utf8_lossy(&all).to_lowercase();
    if DENIAL_MARKERS.iter().any(|m| text.contains(m)) {
        return true;
    }
    if matches!(code, 2 | 126 | 127) {
        return false;
    }
    code == 128 + libc::SIGSYS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retention_with(stream: StreamKind, text: &str) -> Retention {
        let mut r = Retention::new(1 << 20, 100);
        r.push(Chunk {
            seq: 1,
            stream,
            data: text.as_bytes().to_vec(),
        });
        r
    }

    fn pipe() -> (OwnedFd, std::fs::File) {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK).unwrap();
        (read, std::fs::File::from(write))
    }

    #[test]
    fn a_short_pipe_read_is_one_drained_chunk_and_eof_follows() {
        use std::io::Write;
        let (read, mut write) = pipe();
        write.write_all(b"hello").unwrap();
        drop(write);
        let chunk = read_chunk(&read, StreamKind::Stdout).unwrap().unwrap();
        assert_eq!(chunk.data, b"hello");
        assert!(chunk.drained, "a short pipe read leaves the pipe empty");
        assert!(
            chunk.data.capacity() < CHUNK_BYTES,
            "no 64 KiB kept for 5 bytes"
        );
        assert!(read_chunk(&read, StreamKind::Stdout).unwrap().is_none());
    }

    #[test]
    fn a_full_pipe_gives_whole_chunks_then_would_block() {
        use std::io::Write;
        let (read, mut write) = pipe();
        let data: Vec<u8> = (0..CHUNK_BYTES).map(|i| (i % 251) as u8).collect();
        write.write_all(&data).unwrap();
        let chunk = read_chunk(&read, StreamKind::Stdout).unwrap().unwrap();
        assert_eq!(chunk.data, data);
        assert!(
            !chunk.drained,
            "a full chunk says nothing about what is left"
        );
        let empty = read_chunk(&read, StreamKind::Stdout)
            .err()
            .map(|e| e.kind());
        assert_eq!(empty, Some(io::ErrorKind::WouldBlock));
    }

    #[test]
    fn sandbox_denial_heuristic_follows_the_reference() {
        let denied = retention_with(StreamKind::Stderr, "touch: Read-only File System");
        assert!(sandbox_denied(&denied, 1));
        assert!(!sandbox_denied(&denied, 0));
        let plain = retention_with(StreamKind::Stdout, "ordinary failure");
        assert!(!sandbox_denied(&plain, 1));
        assert!(!sandbox_denied(&plain, 127));
        assert!(sandbox_denied(&plain, 159));
    }
}
