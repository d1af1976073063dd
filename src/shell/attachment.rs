//! One remote process attached to this terminal, for `exec` and `attach`:
//! its output goes to our stdout and stderr as it comes (a PTY's all to
//! stdout), our stdin goes to it (`process/write` with write ids, EOF as
//! `closeStdin`), our signals reach it (`process/signal`) or, for a
//! watcher, end the watch, and our window size follows it
//! (`process/resize` on SIGWINCH). Ordering, resume and backfill after a
//! dropped connection are the client's ([`RemoteExecServerClient`]); this
//! loop only sees one ordered stream of events.
//!
//! It can always be left: for an interactive attachment the first SIGINT
//! goes to the process and the second leaves; SIGTERM and SIGHUP leave —
//! for the owner of the process (`exec`) after passing the signal on and
//! giving the process [`Attachment::stop_grace`] to end, so the caller ends
//! what is left ([`Outcome::Stopped`]); otherwise at once, leaving the
//! process running ([`Outcome::Detached`]).

use std::io::Read;
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::mpsc;

use super::terminal;
use crate::client::remote::{NOTIFY_CONNECTION_LOST, NOTIFY_OUTPUT_TRUNCATED};
use crate::client::{Notification, ProcessEvent, ReadParams, RemoteExecServerClient, StreamKind};
use crate::protocol::process::WriteStatus;

/// Chunks of stdin read ahead of `process/write`.
const INPUT_QUEUE: usize = 16;
/// Bytes of stdin per `process/write`.
const INPUT_CHUNK_BYTES: usize = 16 * 1024;

/// How a process is attached.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub process_id: String,
    /// The process runs on a PTY: its window follows ours.
    pub tty: bool,
    /// Our stdin goes to the process.
    pub stdin: bool,
    /// Our SIGINT, SIGTERM, SIGHUP and SIGQUIT go to the process; otherwise
    /// they only end the watch.
    pub forward_signals: bool,
    /// The process lives and dies with this attachment (`exec`): leaving
    /// ends it. Otherwise leaving lets it run on.
    pub owns_process: bool,
    /// How long a process that was passed SIGTERM or SIGHUP gets to end
    /// before the attachment stops waiting for it.
    pub stop_grace: Duration,
    /// The local terminal is in raw mode (line ends need a carriage return).
    pub raw: bool,
    /// The last event already shown (output before it is not repeated).
    pub after_seq: u64,
}

/// How an attachment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The process closed.
    Closed {
        exit_code: i32,
        sandbox_denied: bool,
    },
    /// The watch ended on `signal`; the process goes on.
    Detached { signal: i32, after_seq: u64 },
    /// The owner was told to stop by `signal` before the process closed:
    /// what is left of it should be ended.
    Stopped { signal: i32, after_seq: u64 },
    /// The connection is gone and could not be recovered.
    Lost { message: String, after_seq: u64 },
}

/// The signals an attachment listens to (a listener that cannot be
/// installed never fires).
struct Signals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
    hangup: Option<Signal>,
    quit: Option<Signal>,
    window: Option<Signal>,
}

impl Signals {
    fn install(tty: bool) -> Self {
        let listen = |kind| signal(kind).ok();
        Self {
            interrupt: listen(SignalKind::interrupt()),
            terminate: listen(SignalKind::terminate()),
            hangup: listen(SignalKind::hangup()),
            quit: listen(SignalKind::quit()),
            window: if tty {
                listen(SignalKind::window_change())
            } else {
                None
            },
        }
    }
}

async fn next(signal: &mut Option<Signal>) {
    match signal {
        Some(signal) => {
            if signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Runs the attachment until the process closes, the watch is ended, or the
/// connection is lost for good.
pub async fn run(
    client: &RemoteExecServerClient,
    events: &mut mpsc::Receiver<Notification>,
    attachment: &Attachment,
) -> Outcome {
    let mut signals = Signals::install(attachment.tty);
    if attachment.stdin {
        let (tx, rx) = mpsc::channel(INPUT_QUEUE);
        spawn_stdin_reader(tx);
        tokio::spawn(forward_input(
            client.clone(),
            attachment.process_id.clone(),
            rx,
        ));
    }
    let mut output = Output::new(attachment.raw);
    let mut last_seq = attachment.after_seq;
    let mut exit: Option<(i32, bool)> = None;
    let forward = |name: &'static str| {
        let (client, id) = (client.clone(), attachment.process_id.clone());
        tokio::spawn(async move {
            if let Err(err) = client.process_signal(&id, name).await {
                tracing::debug!("cannot send {name} to {id}: {err}");
            }
        });
    };
    let mut leaving = Leaving::new(attachment);
    loop {
        let stop_at = leaving.deadline();
        let decided = tokio::select! {
            notification = events.recv() => {
                let Some(notification) = notification else {
                    return Outcome::Lost { message: "the client stopped".into(), after_seq: last_seq };
                };
                match notification.method.as_str() {
                    NOTIFY_CONNECTION_LOST => {
                        let message = notification.params["message"].as_str().unwrap_or("connection lost").to_owned();
                        return Outcome::Lost { message, after_seq: last_seq };
                    }
                    NOTIFY_OUTPUT_TRUNCATED
                        if notification.params["processId"] == attachment.process_id.as_str() =>
                    {
                        output.notice("some output was lost: the server no longer had it").await;
                        None
                    }
                    _ => match ProcessEvent::from_notification(&notification) {
                        Some(event) if event.process_id() == attachment.process_id => {
                            last_seq = last_seq.max(event.seq());
                            match event {
                                ProcessEvent::Output { stream, chunk, .. } => {
                                    if output.write(stream, &chunk).await {
                                        // Our stdout is gone: the remote writer gets SIGPIPE too.
                                        forward("SIGPIPE");
                                    }
                                    None
                                }
                                ProcessEvent::Exited { exit_code, sandbox_denied, .. } => {
                                    exit = Some((exit_code, sandbox_denied));
                                    None
                                }
                                ProcessEvent::Closed { .. } => {
                                    let (exit_code, sandbox_denied) = match exit {
                                        Some(exit) => exit,
                                        None => exit_after_close(client, &attachment.process_id).await,
                                    };
                                    return Outcome::Closed { exit_code, sandbox_denied };
                                }
                            }
                        }
                        _ => None,
                    },
                }
            }
            _ = next(&mut signals.interrupt) => leaving.signal(Received::Interrupt, &forward),
            _ = next(&mut signals.terminate) => leaving.signal(Received::Terminate, &forward),
            _ = next(&mut signals.hangup) => leaving.signal(Received::Hangup, &forward),
            _ = next(&mut signals.quit) => leaving.signal(Received::Quit, &forward),
            _ = next(&mut signals.window) => {
                if let Some(size) = terminal::window_size() {
                    let (client, id) = (client.clone(), attachment.process_id.clone());
                    tokio::spawn(async move {
                        if let Err(err) = client.process_resize(&id, size).await {
                            tracing::debug!("cannot resize {id}: {err}");
                        }
                    });
                }
                None
            }
            _ = sleep_until(stop_at) => leaving.grace_over(),
        };
        if let Some(leave) = decided {
            return leave.outcome(last_seq);
        }
    }
}

/// A signal the attachment listens to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Received {
    Interrupt,
    Terminate,
    Hangup,
    Quit,
}

impl Received {
    fn signo(self) -> i32 {
        match self {
            Self::Interrupt => libc::SIGINT,
            Self::Terminate => libc::SIGTERM,
            Self::Hangup => libc::SIGHUP,
            Self::Quit => libc::SIGQUIT,
        }
    }

    /// The `process/signal` name it is passed on as.
    fn wire_name(self) -> &'static str {
        match self {
            Self::Interrupt => "interrupt",
            Self::Terminate => "terminate",
            Self::Hangup => "hangup",
            Self::Quit => "quit",
        }
    }
}

/// How the attachment is to end, decided from the signals it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leave {
    Detach(i32),
    Stop(i32),
}

impl Leave {
    fn outcome(self, after_seq: u64) -> Outcome {
        match self {
            Self::Detach(signal) => Outcome::Detached { signal, after_seq },
            Self::Stop(signal) => Outcome::Stopped { signal, after_seq },
        }
    }
}

/// The signal policy of one attachment (see the module documentation).
#[derive(Debug)]
struct Leaving {
    forward_signals: bool,
    owns_process: bool,
    stop_grace: Duration,
    /// A SIGINT was passed on already.
    interrupted: bool,
    /// A SIGTERM or SIGHUP was passed on: the signal and when the process's
    /// time to end is over.
    stopping: Option<(i32, tokio::time::Instant)>,
}

impl Leaving {
    fn new(attachment: &Attachment) -> Self {
        Self {
            forward_signals: attachment.forward_signals,
            owns_process: attachment.owns_process,
            stop_grace: attachment.stop_grace,
            interrupted: false,
            stopping: None,
        }
    }

    /// Leaving now, as the owner or not.
    fn now(&self, signo: i32) -> Leave {
        if self.owns_process {
            Leave::Stop(signo)
        } else {
            Leave::Detach(signo)
        }
    }

    /// What `received` does: passed on (via `forward`), or the end.
    fn signal(&mut self, received: Received, forward: &dyn Fn(&'static str)) -> Option<Leave> {
        let signo = received.signo();
        if !self.forward_signals {
            return Some(Leave::Detach(signo));
        }
        // A second request to stop is obeyed at once.
        if let Some((first, _)) = self.stopping {
            return (received != Received::Quit).then_some(Leave::Stop(first));
        }
        match received {
            Received::Quit => {
                forward(received.wire_name());
                None
            }
            Received::Interrupt if !self.interrupted => {
                forward(received.wire_name());
                self.interrupted = true;
                None
            }
            Received::Interrupt => Some(self.now(signo)),
            Received::Terminate | Received::Hangup if self.owns_process => {
                forward(received.wire_name());
                self.stopping = Some((signo, tokio::time::Instant::now() + self.stop_grace));
                None
            }
            Received::Terminate | Received::Hangup => Some(Leave::Detach(signo)),
        }
    }

    /// When the process's time to end after a passed-on signal is over.
    fn deadline(&self) -> Option<tokio::time::Instant> {
        self.stopping.map(|(_, at)| at)
    }

    /// That time is over: stop waiting.
    fn grace_over(&self) -> Option<Leave> {
        self.stopping.map(|(signo, _)| Leave::Stop(signo))
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The exit code of a process whose close came without its exit (the exit
/// was evicted with the output around it): asked of the server.
async fn exit_after_close(client: &RemoteExecServerClient, process_id: &str) -> (i32, bool) {
    let read = client
        .process_read(&ReadParams {
            process_id: process_id.to_owned(),
            after_seq: Some(u64::MAX),
            max_bytes: None,
            wait_ms: Some(0),
        })
        .await;
    match read {
        Ok(read) => (read.exit_code.unwrap_or(-1), read.sandbox_denied),
        Err(_) => (-1, false),
    }
}

/// Our stdout and stderr.
struct Output {
    stdout: tokio::io::Stdout,
    stderr: tokio::io::Stderr,
    raw: bool,
    /// Stdout's reader went away: output is dropped from then on.
    stdout_gone: bool,
}

impl Output {
    fn new(raw: bool) -> Self {
        Self {
            stdout: tokio::io::stdout(),
            stderr: tokio::io::stderr(),
            raw,
            stdout_gone: false,
        }
    }

    /// Writes one chunk; true the first time stdout turns out to be gone.
    async fn write(&mut self, stream: StreamKind, chunk: &[u8]) -> bool {
        match stream {
            StreamKind::Stderr => {
                let _ = write_all(&mut self.stderr, chunk).await;
                false
            }
            StreamKind::Stdout | StreamKind::Pty => {
                if self.stdout_gone {
                    return false;
                }
                match write_all(&mut self.stdout, chunk).await {
                    Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
                        self.stdout_gone = true;
                        true
                    }
                    _ => false,
                }
            }
        }
    }

    /// A line of our own on stderr.
    async fn notice(&mut self, text: &str) {
        let end = if self.raw { "\r\n" } else { "\n" };
        let line = format!("codexbox: {}{end}", crate::terminal_text::Escaped(text));
        let _ = write_all(&mut self.stderr, line.as_bytes()).await;
    }
}

async fn write_all<W: AsyncWrite + Unpin>(sink: &mut W, data: &[u8]) -> std::io::Result<()> {
    sink.write_all(data).await?;
    sink.flush().await
}

/// Reads our stdin on a thread of its own (a blocking read that may never
/// return), handing chunks over until EOF, which it signals by dropping `tx`.
fn spawn_stdin_reader(tx: mpsc::Sender<Vec<u8>>) {
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buffer = vec![0u8; INPUT_CHUNK_BYTES];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) => return,
                Ok(n) => {
                    let chunk = buffer.get(..n).unwrap_or_default().to_vec();
                    if tx.blocking_send(chunk).is_err() {
                        return;
                    }
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    });
}

/// Writes stdin to the process in order; EOF closes its stdin.
async fn forward_input(
    client: RemoteExecServerClient,
    process_id: String,
    mut input: mpsc::Receiver<Vec<u8>>,
) {
    while let Some(chunk) = input.recv().await {
        match client.process_write(&process_id, &chunk, false).await {
            Ok(result) if result.status == WriteStatus::Accepted => {}
            // The process is gone or its stdin closed: nothing more to send.
            Ok(_) | Err(_) => return,
        }
    }
    let _ = client.process_write(&process_id, &[], true).await;
}
