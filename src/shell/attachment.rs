//! One remote process attached to this terminal, for `exec` and `attach`:
//! its output goes to our stdout and stderr as it comes (a PTY's all to
//! stdout), our stdin goes to it (`process/write` with write ids, EOF as
//! `closeStdin`), our signals reach it (`process/signal`) or, for a
//! watcher, end the watch, and our window size follows it
//! (`process/resize` on SIGWINCH). Ordering, resume and backfill after a
//! dropped connection are the client's ([`RemoteExecServerClient`]); this
//! loop only sees one ordered stream of events.

use std::io::Read;

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
    let signal_or_detach = |name: &'static str, signo: i32, last_seq: u64| {
        if attachment.forward_signals {
            forward(name);
            None
        } else {
            Some(Outcome::Detached {
                signal: signo,
                after_seq: last_seq,
            })
        }
    };
    loop {
        let detached = tokio::select! {
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
            _ = next(&mut signals.interrupt) => signal_or_detach("interrupt", libc::SIGINT, last_seq),
            _ = next(&mut signals.terminate) => signal_or_detach("terminate", libc::SIGTERM, last_seq),
            _ = next(&mut signals.hangup) => signal_or_detach("hangup", libc::SIGHUP, last_seq),
            _ = next(&mut signals.quit) => signal_or_detach("quit", libc::SIGQUIT, last_seq),
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
        };
        if let Some(outcome) = detached {
            return outcome;
        }
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
