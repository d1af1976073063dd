//! The front ends for people, each figure beside a baseline measured in the
//! same run: `codexbox exec -- true` wall time (connect, start, stream,
//! exit) against spawning `true` here; `codexbox exec -- cat FILE` into a
//! pipe (MB/s) against `cat FILE` here; and `codexbox cp` of one 64 MiB
//! file up and down (MB/s) against `std::fs::copy` of the same file.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{ms, quantile, Report, Server, Value, BIN};

type BenchResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

const FILE_BYTES: usize = 64 << 20;
const LATENCY_RUNS: usize = 40;
const THROUGHPUT_RUNS: usize = 3;

/// Runs every front-end figure.
pub fn run(report: &mut Report) {
    let server = match Server::start(&[]) {
        Ok(server) => server,
        Err(err) => return report.failed("shell", &format!("exec-server: {err}")),
    };
    let dir = match tempfile::Builder::new()
        .prefix("codexbox-shell-bench-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(err) => return report.failed("shell", &format!("tempdir: {err}")),
    };
    let root = std::fs::canonicalize(dir.path()).unwrap_or_else(|_| dir.path().to_path_buf());
    if let Err(err) = latency(report, &server.url) {
        report.failed("codexbox exec -- true", &err.to_string());
    }
    if let Err(err) = throughput(report, &server.url, &root) {
        report.failed("codexbox exec/cp throughput", &err.to_string());
    }
}

/// Runs `command` with stdout into a pipe that is read to the end;
/// returns the wall time and the bytes read.
fn timed(command: &mut Command) -> BenchResult<(Duration, usize)> {
    let start = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut read = 0;
    if let Some(mut stdout) = child.stdout.take() {
        let mut buffer = vec![0u8; 1 << 16];
        loop {
            let n = stdout.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            read += n;
        }
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("{command:?} failed: {status}").into());
    }
    Ok((start.elapsed(), read))
}

fn latency(report: &mut Report, url: &str) -> BenchResult {
    let (mut remote, mut local) = (Vec::new(), Vec::new());
    // Alternating, so load drifts over both.
    for _ in 0..LATENCY_RUNS {
        remote.push(timed(Command::new(BIN).args(["exec", "--url", url, "--", "true"]))?.0);
        local.push(timed(&mut Command::new("true"))?.0);
    }
    report.figure(
        Value::new(
            "codexbox exec -- true, wall p50",
            ms(quantile(&mut remote, 0.5)),
            "ms",
        ),
        Value::new("spawn true here, p50", ms(quantile(&mut local, 0.5)), "ms"),
        "(informational: includes codexbox's own start-up and the connection)",
    );
    Ok(())
}

fn mb_per_s(bytes: usize, duration: Duration) -> f64 {
    bytes as f64 / duration.as_secs_f64().max(1e-9) / 1e6
}

fn best(samples: &mut [Duration]) -> Duration {
    samples.sort_unstable();
    samples.first().copied().unwrap_or_default()
}

fn throughput(report: &mut Report, url: &str, root: &Path) -> BenchResult {
    let file = root.join("data.bin");
    let data: Vec<u8> = (0..FILE_BYTES)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &data)?;
    let path = file.to_str().ok_or("non-UTF-8 temp path")?;
    let (mut exec, mut cat, mut up, mut down, mut copy) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..THROUGHPUT_RUNS {
        let (took, read) =
            timed(Command::new(BIN).args(["exec", "--url", url, "--", "cat", path]))?;
        if read != FILE_BYTES {
            return Err(format!("exec cat gave {read} bytes").into());
        }
        exec.push(took);
        cat.push(timed(Command::new("cat").arg(path))?.0);
        let remote_copy = root.join(format!("up-{run}.bin"));
        let target = format!("remote:{}", remote_copy.display());
        up.push(timed(Command::new(BIN).args(["cp", "--url", url, path, &target]))?.0);
        let back = root.join(format!("down-{run}.bin"));
        let back_text = back.to_str().ok_or("non-UTF-8 temp path")?;
        down.push(timed(Command::new(BIN).args(["cp", "--url", url, &target, back_text]))?.0);
        let start = Instant::now();
        std::fs::copy(&file, root.join(format!("copy-{run}.bin")))?;
        copy.push(start.elapsed());
        for name in [remote_copy, back, root.join(format!("copy-{run}.bin"))] {
            let _ = std::fs::remove_file(name);
        }
    }
    let informational = "(informational: every byte base64 in JSON over a WebSocket)";
    report.figure(
        Value::new(
            "codexbox exec -- cat 64 MiB into a pipe, best of 3",
            mb_per_s(FILE_BYTES, best(&mut exec)),
            "MB/s",
        ),
        Value::new("cat here", mb_per_s(FILE_BYTES, best(&mut cat)), "MB/s"),
        informational,
    );
    report.figure(
        Value::new(
            "codexbox cp 64 MiB up, best of 3",
            mb_per_s(FILE_BYTES, best(&mut up)),
            "MB/s",
        ),
        Value::new(
            "std::fs::copy",
            mb_per_s(FILE_BYTES, best(&mut copy)),
            "MB/s",
        ),
        informational,
    );
    report.figure(
        Value::new(
            "codexbox cp 64 MiB down, best of 3",
            mb_per_s(FILE_BYTES, best(&mut down)),
            "MB/s",
        ),
        Value::new(
            "std::fs::copy",
            mb_per_s(FILE_BYTES, best(&mut copy)),
            "MB/s",
        ),
        informational,
    );
    Ok(())
}
