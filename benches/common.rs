//! Shared pieces of the benchmark: the [`Report`] printer (one line per
//! figure, each beside the baseline measured in the same run), a running
//! exec-server, and small statistics helpers.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The release binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_codexbox");

/// Prints figures as they are measured and remembers them.
#[derive(Default)]
pub struct Report {
    lines: Vec<String>,
}

/// One measured value with its unit.
#[derive(Clone, Copy, Debug)]
pub struct Value<'a> {
    pub name: &'a str,
    pub value: f64,
    pub unit: &'a str,
}

impl<'a> Value<'a> {
    pub fn new(name: &'a str, value: f64, unit: &'a str) -> Self {
        Self { name, value, unit }
    }
}

impl Report {
    /// Prints `<name>: <value> <unit> | baseline <name>: <value> <unit> | <verdict>`.
    pub fn figure(&mut self, measured: Value<'_>, baseline: Value<'_>, verdict: &str) {
        let line = format!(
            "{}: {} {} | baseline {}: {} {} | {}",
            measured.name,
            format_number(measured.value),
            measured.unit,
            baseline.name,
            format_number(baseline.value),
            baseline.unit,
            verdict
        );
        println!("{line}");
        self.lines.push(line);
    }

    /// A figure that could not be measured, with the reason.
    pub fn failed(&mut self, name: &str, reason: &str) {
        let line = format!("{name}: FAILED | {reason}");
        println!("{line}");
        self.lines.push(line);
    }

    /// How many figures were printed.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether nothing was printed.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

fn format_number(value: f64) -> String {
    if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// `ratio X (target ≤ T): ok|MISSED` for "smaller is better" figures.
pub fn ratio_at_most(measured: f64, baseline: f64, target: f64) -> String {
    let ratio = if baseline > 0.0 {
        measured / baseline
    } else {
        f64::INFINITY
    };
    let verdict = if ratio <= target { "ok" } else { "MISSED" };
    format!("ratio {ratio:.2} (target <= {target}): {verdict}")
}

/// `ratio X | target ≥ T unit: ok|MISSED` for "bigger is better" figures.
pub fn at_least(measured: f64, baseline: f64, target: f64, unit: &str) -> String {
    let ratio = if baseline > 0.0 {
        measured / baseline
    } else {
        0.0
    };
    let verdict = if measured >= target { "ok" } else { "MISSED" };
    format!("ratio {ratio:.2} | target >= {target} {unit}: {verdict}")
}

/// The `q`-quantile (0..=1) of `samples` (sorted in place).
pub fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let index = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[index.min(samples.len() - 1)]
}

/// Milliseconds as a float.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// Names another codexbox binary to run as the exec-server (e.g. a build of
/// an earlier commit), so one run of this benchmark compares two builds.
pub const SERVER_ENV: &str = "CODEXBOX_BENCH_SERVER";

/// The binary run as the exec-server: [`SERVER_ENV`], or the one under test.
pub fn server_binary() -> String {
    std::env::var(SERVER_ENV).unwrap_or_else(|_| BIN.to_owned())
}

/// A running `codexbox exec-server` on an ephemeral loopback port.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Server {
    pub fn start(extra: &[&str]) -> std::io::Result<Server> {
        let mut child = Command::new(server_binary())
            .args(["exec-server", "--listen", "ws://127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        if !line.starts_with("ws://") {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other(format!(
                "exec-server printed {line:?} instead of its URL"
            )));
        }
        Ok(Server {
            child,
            url: line.trim_end().to_owned(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (user + system) consumed so far by `pid`, its exited threads
/// included (clock-tick resolution).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime), counted from after comm.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u64::try_from(per_second).ok().filter(|&t| t > 0)?;
    Some(Duration::from_millis(ticks * 1000 / per_second))
}

/// VmRSS of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// `pid` and all its descendants (from `/proc/*/stat`).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![pid];
    };
    let parents: Vec<(u32, u32)> = dir
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            let rest = stat.get(stat.rfind(')')? + 2..)?;
            let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((child, ppid))
        })
        .collect();
    let mut tree = vec![pid];
    let mut index = 0;
    while index < tree.len() {
        let parent = tree[index];
        tree.extend(
            parents
                .iter()
                .filter(|&&(_, ppid)| ppid == parent)
                .map(|&(child, _)| child),
        );
        index += 1;
    }
    tree
}
