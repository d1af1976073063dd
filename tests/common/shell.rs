//! Helpers for the front-end tests (`tests/shell_*.rs`): run the real
//! `codexbox exec|attach|cp` with a given stdin, collect its output and exit
//! status (and peak memory), each run bounded by a watchdog that kills it
//! when something is broken; a `tmux` server for terminal tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::BIN;

/// How long one front-end run may take before it is killed (a safety net;
/// the 200 MiB copies of a debug build take a good part of it).
pub const RUN_LIMIT: Duration = Duration::from_secs(240);

/// What a run produced.
#[derive(Debug)]
pub struct Run {
    /// The exit code (128+N for a signal N).
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// Peak resident memory of the process's own image, in KiB.
    pub max_rss_kib: u64,
}

impl Run {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// The binary with no credential from the test's own environment.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("CODEXBOX_AUTH_TOKEN")
        .env_remove("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN")
        .env_remove("CODEX_EXEC_SERVER_NOISE_REGISTRY_URL")
        .env_remove("CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID");
    command
}

/// Runs `codexbox ARGS…` with `stdin` (or `/dev/null`) and waits for it.
pub fn run(args: &[&str], stdin: Option<Vec<u8>>) -> Run {
    let mut command = command(args);
    finish(&mut command, stdin, &format!("{args:?}"))
}

/// A directory holding `codexbox` (a symlink to the binary under test), to
/// put first on `PATH` when running a command line codexbox printed.
fn codexbox_on_path() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("codexbox-on-path");
        std::fs::create_dir_all(&dir).expect("mkdir");
        // Made aside and renamed into place: test processes may race here.
        let fresh = dir.join(format!("codexbox.{}", std::process::id()));
        let _ = std::fs::remove_file(&fresh);
        std::os::unix::fs::symlink(BIN, &fresh).expect("symlink codexbox");
        std::fs::rename(&fresh, dir.join("codexbox")).expect("rename codexbox");
        dir
    })
    .clone()
}

/// `sh -c LINE` with the binary under test as `codexbox` on `PATH`: a
/// command line codexbox printed for a person, pasted into a shell.
pub fn pasted(line: &str) -> Command {
    let path = format!(
        "{}:{}",
        codexbox_on_path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("sh");
    command
        .args(["-c", line])
        .env("PATH", path)
        .env_remove("CODEXBOX_AUTH_TOKEN")
        .env_remove("CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN")
        .env_remove("CODEX_EXEC_SERVER_NOISE_REGISTRY_URL")
        .env_remove("CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID");
    command
}

/// Runs a prepared command to its end, feeding `stdin`.
// Reaped by waitpid in `wait_measured`, which clippy cannot see.
#[allow(clippy::zombie_processes)]
pub fn finish(command: &mut Command, stdin: Option<Vec<u8>>, what: &str) -> Run {
    let mut child = spawn_piped(command, stdin.is_some(), what);
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        });
    }
    let stdout = reader(child.stdout.take());
    let stderr = reader(child.stderr.take());
    let (code, max_rss_kib) = wait_measured(&child, what);
    let stdout = stdout.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
    Run {
        code,
        stdout,
        stderr,
        max_rss_kib,
    }
}

/// Spawns `command` with stdout and stderr piped, stdin piped or `/dev/null`.
fn spawn_piped(command: &mut Command, stdin_pipe: bool, what: &str) -> Child {
    command
        .stdin(if stdin_pipe {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
        .spawn()
        .unwrap_or_else(|err| panic!("spawn {what}: {err}"))
}

fn reader<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut data = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut data);
        }
        data
    })
}

/// Watches a running child: kills it if it is still running after `limit`,
/// and samples the peak resident memory of its own image (`VmHWM`, which
/// starts afresh at exec). `wait4`'s `ru_maxrss` cannot serve: Linux folds
/// the spawning process's peak into it at exec, so a child of a large test
/// process would seem large.
struct Monitor {
    done: Arc<AtomicBool>,
    peak_kib: Arc<std::sync::atomic::AtomicU64>,
}

impl Monitor {
    fn start(pid: u32, limit: Duration) -> Monitor {
        let done = Arc::new(AtomicBool::new(false));
        let peak_kib = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (flag, peak) = (done.clone(), peak_kib.clone());
        std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            let status = format!("/proc/{pid}/status");
            while !flag.load(Ordering::SeqCst) {
                if let Some(kib) = std::fs::read_to_string(&status)
                    .ok()
                    .as_deref()
                    .and_then(high_water_kib)
                {
                    peak.fetch_max(kib, Ordering::SeqCst);
                }
                if Instant::now() >= deadline {
                    // SAFETY: kill takes a pid and a signal number, no pointers.
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Monitor { done, peak_kib }
    }

    /// Stops watching; returns the peak resident memory seen, in KiB.
    fn stop(self) -> u64 {
        self.done.store(true, Ordering::SeqCst);
        self.peak_kib.load(Ordering::SeqCst)
    }
}

/// `VmHWM` of a `/proc/PID/status` text, in KiB.
fn high_water_kib(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Waits for `child` (reaping it with wait4) and returns its exit code and
/// the peak resident memory of its image in KiB (sampled every few
/// milliseconds while it runs; the high-water mark only grows, so a late
/// sample holds everything before it).
pub fn wait_measured(child: &Child, what: &str) -> (i32, u64) {
    let pid = child.id() as i32;
    let monitor = Monitor::start(child.id(), RUN_LIMIT);
    let mut status = 0;
    let reaped = loop {
        // SAFETY: waitpid writes the status through a pointer to a live
        // local of the right type.
        let reaped = unsafe { libc::waitpid(pid, &mut status, 0) };
        if reaped == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break reaped;
    };
    let peak_kib = monitor.stop();
    assert_eq!(reaped, pid, "waitpid of {what} failed");
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        assert_ne!(signal, libc::SIGKILL, "{what} was killed by the watchdog");
        128 + signal
    } else {
        -1
    };
    (code, peak_kib)
}

/// Runs a prepared command with stderr on a terminal `cols` columns wide
/// (stdin and stdout on `/dev/null`) and returns its exit code and every
/// byte it wrote to the terminal, escape sequences included.
// The child is reaped by waitpid in `wait_measured`, which clippy cannot see.
#[allow(clippy::zombie_processes)]
pub fn stderr_on_terminal(mut command: Command, cols: u16, what: &str) -> (i32, Vec<u8>) {
    let size = nix::pty::Winsize {
        ws_row: 24,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::from(pty.slave)));
    let child = command.spawn().expect("spawn on a terminal");
    // Our copy of the terminal's other side goes with `command`.
    drop(command);
    let mut master = std::fs::File::from(pty.master);
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut chunk = [0u8; 4096];
        // EIO once the last holder of the terminal's other side is gone.
        while let Ok(n) = master.read(&mut chunk) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&chunk[..n]);
        }
        seen
    });
    let (code, _) = wait_measured(&child, what);
    (code, reader.join().expect("terminal reader"))
}

/// Whether tmux is installed (the one skip rule of [`super::host`]).
pub fn have_tmux() -> bool {
    super::host::tmux()
}

/// A private tmux server with one session running `sh`, killed on drop.
pub struct Tmux {
    socket: String,
    pub target: String,
}

impl Tmux {
    /// A session of `cols`×`rows` (no status line) running `sh` with
    /// `local$ ` as its prompt, in `dir`.
    pub fn start(cols: u16, rows: u16, dir: &std::path::Path) -> Tmux {
        let socket = format!("codexbox-test-{}-{}", std::process::id(), unique());
        let tmux = Tmux {
            socket,
            target: "t".into(),
        };
        tmux.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            "-c",
            &dir.to_string_lossy(),
            "env PS1='local$ ' TERM=xterm sh",
        ]);
        tmux.run(&["set-option", "-t", "t", "status", "off"]);
        tmux.wait_for_prompt("local$");
        tmux
    }

    /// Waits (bounded) until the last non-empty line of the pane is
    /// `prompt` (trailing spaces are not captured), i.e. a shell waits.
    pub fn wait_for_prompt(&self, prompt: &str) -> String {
        self.wait_until(prompt, |screen| {
            screen
                .lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .is_some_and(|line| line.trim_end() == prompt)
        })
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` literally, then Enter.
    pub fn type_line(&self, text: &str) {
        self.run(&["send-keys", "-t", &self.target, "-l", text]);
        self.run(&["send-keys", "-t", &self.target, "Enter"]);
    }

    /// Sends tmux key names (`q`, `C-c`, …).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.target];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    /// What the pane shows.
    pub fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", &self.target])
    }

    /// Waits (bounded) until the pane shows `needle`; returns the screen.
    pub fn wait_for(&self, needle: &str) -> String {
        self.wait_until(needle, |screen| screen.contains(needle))
    }

    /// Waits (bounded) until `done(screen)` holds.
    pub fn wait_until(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the pane never showed {what:?}; it shows:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Resizes the window (the pane's foreground process gets SIGWINCH).
    pub fn resize(&self, cols: u16, rows: u16) {
        self.run(&[
            "resize-window",
            "-t",
            &self.target,
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
        ]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

fn unique() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

/// A front end running in the background, its output collected as it comes.
pub struct Streaming {
    pub child: Child,
    stdout: Arc<std::sync::Mutex<Vec<u8>>>,
    stderr: Arc<std::sync::Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    what: String,
    /// Set once `finish` reaped the child (Drop must not signal its pid then).
    reaped: bool,
}

impl Drop for Streaming {
    /// A test that failed half-way leaves nothing running.
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn collect<R: Read + Send + 'static>(
    pipe: Option<R>,
    sink: Arc<std::sync::Mutex<Vec<u8>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let Some(mut pipe) = pipe else { return };
        let mut chunk = [0u8; 65536];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            if let Ok(mut data) = sink.lock() {
                data.extend_from_slice(&chunk[..n]);
            }
        }
    })
}

impl Streaming {
    /// Starts `codexbox ARGS…` with stdin from `/dev/null` (or a pipe kept
    /// open when `stdin_pipe`). Reaped in `finish` (wait4) or on drop.
    pub fn start(args: &[&str], stdin_pipe: bool) -> Streaming {
        Self::spawn(command(args), stdin_pipe, &format!("{args:?}"))
    }

    /// Starts a prepared command (see [`start`](Self::start)).
    pub fn spawn(mut command: Command, stdin_pipe: bool, what: &str) -> Streaming {
        let mut child = spawn_piped(&mut command, stdin_pipe, what);
        let stdout = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stderr = Arc::new(std::sync::Mutex::new(Vec::new()));
        let readers = vec![
            collect(child.stdout.take(), stdout.clone()),
            collect(child.stderr.take(), stderr.clone()),
        ];
        Streaming {
            child,
            stdout,
            stderr,
            readers,
            what: what.to_owned(),
            reaped: false,
        }
    }

    pub fn stdout(&self) -> Vec<u8> {
        self.stdout.lock().map(|d| d.clone()).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().map(|d| d.clone()).unwrap_or_default())
            .into_owned()
    }

    /// Waits (bounded) until stdout holds `needle`.
    pub fn wait_for(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if String::from_utf8_lossy(&self.stdout()).contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: stdout never showed {needle:?}; stdout {:?}; stderr {}",
                self.what,
                String::from_utf8_lossy(&self.stdout()),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (bounded) until stderr holds `needle`.
    pub fn wait_for_stderr(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.stderr().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "{}: stderr never showed {needle:?}; stderr {}",
                self.what,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` to the front end itself.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill takes a pid and a signal number, no pointers.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Waits for the end and returns what it produced.
    pub fn finish(mut self) -> Run {
        drop(self.child.stdin.take());
        let (code, max_rss_kib) = wait_measured(&self.child, &self.what);
        self.reaped = true;
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        Run {
            code,
            stdout: self.stdout(),
            stderr: self.stderr(),
            max_rss_kib,
        }
    }
}

/// Waits (bounded) until process `pid` no longer runs (blocking).
pub fn wait_gone_blocking(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !super::client::is_gone(pid) {
        assert!(Instant::now() < deadline, "process {pid} is still running");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Opens the FIFO at `path` for writing and writes `data` (bounded: the
/// reader must open it within the guard time).
pub fn release(path: &std::path::Path, data: &[u8]) {
    let (path, data) = (path.to_path_buf(), data.to_vec());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let written = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut file| file.write_all(&data));
        let _ = tx.send(written.map_err(|err| err.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(())) => {}
        other => panic!("writing the fifo failed: {other:?}"),
    }
}
