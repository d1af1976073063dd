//! What the long-running modes (exec-server, rendezvous, connect, proxy) do
//! once dispatch chose them and their flags are parsed ([`crate::cli`]):
//! build their tokio runtime (dispatch runs before any runtime exists),
//! tune the allocator, take over SIGINT and SIGTERM and print their one
//! stdout line.

use std::io::Write;

/// How many threads run a mode's async tasks (blocking work always goes to
/// tokio's blocking pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// One: tasks that hand work to each other (a process's output pump and
    /// its connection's writer) do it without waking another thread.
    One,
    /// One per CPU: for modes that relay many independent connections.
    PerCpu,
}

/// The runtime of a serving mode; on failure prints `{name}: …` and
/// returns `None` (the caller exits 1).
pub fn runtime(name: &str, threads: Threads) -> Option<tokio::runtime::Runtime> {
    let mut builder = match threads {
        Threads::One => tokio::runtime::Builder::new_current_thread(),
        Threads::PerCpu => tokio::runtime::Builder::new_multi_thread(),
    };
    match builder.enable_all().build() {
        Ok(runtime) => Some(runtime),
        Err(err) => {
            eprintln!("{name}: cannot start the runtime: {err}");
            None
        }
    }
}

/// Prints the one stdout line (the bound URL) and flushes it.
pub fn announce(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// How a mode's allocator treats large buffers (glibc only; elsewhere the
/// allocator's defaults stand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Keep freed memory for reuse: a server handles the same large
    /// messages over and over.
    Reuse,
    /// Return large buffers to the kernel when freed and use few arenas:
    /// a front end's peak stays near what it holds (`cp` of any size file
    /// in a few MiB).
    Lean,
}

/// Freed heap memory a reusing allocator keeps before returning it.
#[cfg(target_env = "gnu")]
const HEAP_TRIM_THRESHOLD: libc::c_int = 4 << 20;
/// From this size on a reusing allocator maps each allocation. Setting the
/// trim threshold turns off glibc's own raising of this limit, so it is set
/// to the highest value glibc would raise it to: below it, repeated large
/// messages (1 MiB `fs/writeBlock` blocks) reuse heap memory instead of
/// mapping and faulting in fresh pages each time. (Streaming output
/// allocates and frees a chunk and its message, 64 and 87 KiB, per read:
/// with glibc's defaults every free at the top of the heap gave the pages
/// back and the next message faulted them in again, a quarter of the
/// server's CPU time.)
#[cfg(target_env = "gnu")]
const REUSE_MMAP_THRESHOLD: libc::c_int = 32 << 20;
/// From this size on a lean allocator maps each allocation, so freeing a
/// transfer block unmaps it; fixing it stops glibc from raising it after
/// the first free, which would move blocks into fragmenting arenas.
#[cfg(target_env = "gnu")]
const LEAN_MMAP_THRESHOLD: libc::c_int = 256 << 10;
/// Arenas of a lean allocator: blocks are allocated on one thread and freed
/// on another (tokio's blocking pool writes files), and each extra arena
/// keeps its own freed memory.
#[cfg(target_env = "gnu")]
const LEAN_ARENAS: libc::c_int = 2;

/// Sets the allocator up for `memory`. Call before the runtime starts any
/// other thread.
pub fn tune_allocator(memory: Memory) {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets allocator parameters; the caller runs it
    // before any other thread exists.
    unsafe {
        match memory {
            Memory::Reuse => {
                libc::mallopt(libc::M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD);
                libc::mallopt(libc::M_MMAP_THRESHOLD, REUSE_MMAP_THRESHOLD);
            }
            Memory::Lean => {
                libc::mallopt(libc::M_MMAP_THRESHOLD, LEAN_MMAP_THRESHOLD);
                libc::mallopt(libc::M_ARENA_MAX, LEAN_ARENAS);
            }
        }
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = memory;
}

/// How a stop was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT: stop at once.
    Now,
    /// SIGTERM: stop after draining, where the mode drains.
    Drain,
}

/// A shutdown future completing with `()` means [`Stop::Now`].
impl From<()> for Stop {
    fn from((): ()) -> Self {
        Stop::Now
    }
}

/// Completes on SIGINT ([`Stop::Now`]) or SIGTERM ([`Stop::Drain`]).
///
/// The handlers are installed when this is called, not when the future is
/// first polled: a mode calls it before it prints its stdout line, so a
/// signal sent by whoever read that line never meets the default action
/// (which would end the process before it cleans up). Must be called
/// inside a Tokio runtime.
pub fn stop_signal() -> impl std::future::Future<Output = Stop> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    );
    async move {
        let (Ok(mut int), Ok(mut term)) = handlers else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => Stop::Now,
            _ = term.recv() => Stop::Drain,
        }
    }
}
