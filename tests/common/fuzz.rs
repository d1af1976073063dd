//! The property-based fuzzing harness of `tests/fuzz.rs`: runs one target
//! (a proptest strategy and a property) for a bounded number of cases in the
//! test suite, or for a time budget under `scripts/fuzz`, and prints what ran.
//!
//! - Default: `default_cases` cases from a seed fixed per target, so the
//!   suite's run is reproducible; `PROPTEST_CASES` overrides the count.
//! - `CODEXBOX_FUZZ_SECONDS=S`: batches of cases, each batch from a fresh
//!   seed, until S seconds have passed for this target (`scripts/fuzz`).
//! - `CODEXBOX_FUZZ_SEED=N`: the first batch's seed (to replay a failure).
//!
//! A failing case is shrunk by proptest and reported with its seed; it
//! becomes a named regression test next to its target.
#![allow(dead_code)]

use std::fmt::Debug;
use std::time::{Duration, Instant};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestCaseResult, TestError, TestRunner};

/// Cases per batch when running for a time budget.
const BATCH_CASES: u32 = 256;

/// How long and from which seed a target runs.
#[derive(Debug, Clone, Copy)]
struct Budget {
    cases: u32,
    deadline: Option<Instant>,
    seed: u64,
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    let text = std::env::var(name).ok()?;
    match text.trim().parse() {
        Ok(value) => Some(value),
        Err(_) => panic!("{name}={text:?} is not a number"),
    }
}

/// A seed that depends only on the target's name (FNV-1a).
fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    })
}

fn budget(name: &str, default_cases: u32) -> Budget {
    let seconds: Option<f64> = env_number("CODEXBOX_FUZZ_SECONDS");
    let seed = env_number("CODEXBOX_FUZZ_SEED").unwrap_or_else(|| name_seed(name));
    match seconds {
        Some(seconds) => Budget {
            cases: default_cases.clamp(1, BATCH_CASES),
            deadline: Some(Instant::now() + Duration::from_secs_f64(seconds.max(0.0))),
            seed,
        },
        None => Budget {
            cases: env_number("PROPTEST_CASES").unwrap_or(default_cases),
            deadline: None,
            seed,
        },
    }
}

/// Points this test process's stdin at /dev/null, once. In-process targets
/// feed parsers that read descriptors named on their command line (`--args
/// 0` reads fd 0); from a terminal, fd 0 would be the caller's.
fn detach_stdin() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let null = std::fs::File::open("/dev/null").expect("open /dev/null");
        // SAFETY: dup2 onto fd 0 with a descriptor we own; fd 0 is not
        // owned by any Rust object in the test harness.
        let done = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 0) };
        assert_eq!(done, 0, "dup2 /dev/null onto stdin");
    });
}

/// Runs `property` on values of `strategy`: `default_cases` cases in the
/// test suite, or batches until the `CODEXBOX_FUZZ_SECONDS` budget is spent.
/// Panics with the shrunk input and its seed when a case fails.
pub fn run<S>(
    name: &str,
    default_cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> TestCaseResult,
) where
    S: Strategy,
    S::Value: Debug,
{
    detach_stdin();
    let budget = budget(name, default_cases);
    let started = Instant::now();
    let mut cases = 0u64;
    let mut batch = 0u64;
    loop {
        let seed = budget.seed.wrapping_add(batch);
        let config = Config {
            cases: budget.cases,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed),
            // Shrinking a server round trip is slow; keep it bounded.
            max_shrink_iters: 2048,
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        match runner.run(&strategy, &property) {
            Ok(()) => {}
            Err(TestError::Fail(reason, input)) => panic!(
                "fuzz {name}: property failed after {cases} earlier cases \
                 (replay: CODEXBOX_FUZZ_SEED={seed}): {reason}\nminimal input: {input:#?}"
            ),
            Err(TestError::Abort(reason)) => {
                panic!("fuzz {name}: aborted (seed {seed}): {reason}")
            }
        }
        cases += u64::from(budget.cases);
        batch += 1;
        match budget.deadline {
            Some(deadline) if Instant::now() < deadline => continue,
            _ => break,
        }
    }
    println!(
        "fuzz {name}: {cases} cases in {:.1} s, first seed {}",
        started.elapsed().as_secs_f64(),
        budget.seed
    );
}

/// Whether the run has a time budget (`scripts/fuzz`) rather than the test
/// suite's bounded count.
pub fn is_long_run() -> bool {
    std::env::var_os("CODEXBOX_FUZZ_SECONDS").is_some()
}

/// Runs the binary under test with `args` (NUL bytes, which no argv word
/// can hold, become `0`) in `dir`, writing `input` to its stdin; returns
/// its output once it exits.
///
/// As root it runs in a private pid and mount namespace with its own
/// `/proc`: a generated bwrap command line such as `--proc /proc --chmod 0
/// /proc` is obeyed by a root caller (as bubblewrap obeys it), and without
/// this the mode change would land on the host's procfs, which every
/// later user namespace would then find unreadable.
pub fn run_binary(
    args: &[std::ffi::OsString],
    input: &[u8],
    dir: &std::path::Path,
) -> std::process::Output {
    use std::io::Write;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::process::{Command, Stdio};
    let args: Vec<std::ffi::OsString> = args
        .iter()
        .map(|a| {
            let bytes = a.as_bytes().iter().map(|&b| if b == 0 { b'0' } else { b });
            std::ffi::OsString::from_vec(bytes.collect())
        })
        .collect();
    let bin = super::client::BIN;
    // SAFETY: geteuid has no preconditions.
    let mut command = if unsafe { libc::geteuid() } == 0 {
        let mut command = Command::new("unshare");
        command
            .args(["--pid", "--fork", "--mount", "--mount-proc", "--", bin])
            .args(&args);
        command
    } else {
        let mut command = Command::new(bin);
        command.args(&args);
        command
    };
    let mut child = match command
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => panic!("spawn {bin}: {err}"),
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    match child.wait_with_output() {
        Ok(output) => output,
        Err(err) => panic!("wait {bin}: {err}"),
    }
}
