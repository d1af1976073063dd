//! Built-in bwrap start-up beside the system bubblewrap, same argv, same run
//! (target in docs/performance.md: at most 1.1× the system bwrap). Runs alternate between the two
//! so that machine load affects both alike; medians are compared.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Report, Value};

/// The bubblewrap the built-in mode is measured against.
const SYSTEM_BWRAP: &str = "/usr/bin/bwrap";

/// A typical sandbox: read-only root, every namespace, fresh /dev and /proc.
const ARGV: &[&str] = &[
    "--ro-bind",
    "/",
    "/",
    "--unshare-all",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "true",
];

/// Measured runs per launcher (after a few warm-up runs).
const RUNS: usize = 200;
const WARM_UP_RUNS: usize = 10;

fn launch(builtin: bool) -> std::io::Result<Duration> {
    let mut cmd = if builtin {
        let mut cmd = Command::new(common::BIN);
        cmd.arg0("bwrap");
        cmd
    } else {
        Command::new(SYSTEM_BWRAP)
    };
    cmd.args(ARGV)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let start = Instant::now();
    let status = cmd.status()?;
    let elapsed = start.elapsed();
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "{} exited with {status}",
            if builtin {
                "built-in bwrap"
            } else {
                SYSTEM_BWRAP
            }
        )));
    }
    Ok(elapsed)
}

/// Adds the "built-in bwrap start-up" figure to the report.
pub fn run(report: &mut Report) {
    const NAME: &str = "builtin bwrap start-up";
    if !Path::new(SYSTEM_BWRAP).exists() {
        report.failed(
            NAME,
            "no system bubblewrap at /usr/bin/bwrap to compare with",
        );
        return;
    }
    let mut builtin = Vec::with_capacity(RUNS);
    let mut system = Vec::with_capacity(RUNS);
    for round in 0..WARM_UP_RUNS + RUNS {
        let pair = launch(false).and_then(|sys| Ok((sys, launch(true)?)));
        match pair {
            Ok((sys, own)) if round >= WARM_UP_RUNS => {
                system.push(sys);
                builtin.push(own);
            }
            Ok(_) => {}
            Err(err) => {
                report.failed(NAME, &err.to_string());
                return;
            }
        }
    }
    let builtin_ms = common::ms(common::quantile(&mut builtin, 0.5));
    let system_ms = common::ms(common::quantile(&mut system, 0.5));
    report.figure(
        Value::new(NAME, builtin_ms, "ms"),
        Value::new("system bwrap", system_ms, "ms"),
        &common::ratio_at_most(builtin_ms, system_ms, 1.1),
    );
}
