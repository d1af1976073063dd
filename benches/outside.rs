//! The outside client of the benchmark: `scripts/exec_client.py`, a
//! standard-library Python client with its own minimal WebSocket, run as a
//! separate process. It sees what a client written in another language sees
//! (its own process, its own socket buffers, `json.loads` on every message),
//! which the in-process Rust client could hide.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

use crate::process::BenchResult;

/// The client script, from the source tree.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/exec_client.py");

/// `latency` mode: one sample per run, in milliseconds.
#[derive(Debug, Deserialize)]
pub struct Latency {
    pub samples_ms: Vec<f64>,
    pub responses_ms: Vec<f64>,
}

/// `stream` mode: payload bytes counted until `process/closed`.
#[derive(Debug, Deserialize)]
pub struct Streamed {
    pub bytes: u64,
    pub chunks: u64,
    pub seconds: f64,
    pub cpu_seconds: f64,
}

impl Streamed {
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

/// The Python interpreter, or why there is none.
pub fn python() -> BenchResult<String> {
    Ok(which::which("python3")
        .map_err(|_| "python3 is not installed")?
        .to_string_lossy()
        .into_owned())
}

fn run<T: serde::de::DeserializeOwned>(args: &[&str]) -> BenchResult<T> {
    let output = Command::new(python()?)
        .arg(SCRIPT)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "exec_client.py {}: {}",
            args.get(1).copied().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// `runs` start->closed round trips of `program` after `warmup` unmeasured ones.
pub fn latency(url: &str, program: &str, runs: usize, warmup: usize) -> BenchResult<Latency> {
    let (runs, warmup) = (runs.to_string(), warmup.to_string());
    run(&[url, "latency", program, &runs, &warmup])
}

/// Streams `argv`'s output (on a PTY when `tty`), expecting `bytes` of payload.
pub fn stream(url: &str, tty: bool, bytes: u64, argv: &[&str]) -> BenchResult<Streamed> {
    let bytes = bytes.to_string();
    let mut args = vec![url, "stream", if tty { "tty" } else { "pipe" }, &bytes];
    args.extend_from_slice(argv);
    run(&args)
}

/// Milliseconds as a duration (for the shared quantile helper).
pub fn from_ms(samples: &[f64]) -> Vec<Duration> {
    samples
        .iter()
        .map(|&ms| Duration::from_secs_f64(ms.max(0.0) / 1e3))
        .collect()
}
