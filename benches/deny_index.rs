//! The incremental deny-glob index (run with `scripts/bench sandbox`): on
//! generated workspaces of 1k, 50k and 200k files, a refresh when nothing
//! changed and one after a matching file was created, each beside a full
//! cold scan (`glob::expand`) of the same workspace in the same run; the
//! build, the watches it holds and the memory they cost.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use codexbox::sandbox::deny_index::DenyIndex;
use codexbox::sandbox::glob::{self, Scanner};

use crate::common::{ms, quantile, ratio_at_most, rss_kib, Report, Value};
use crate::process::BenchResult;

/// Workspace sizes, in files.
pub const SIZES: [usize; 3] = [1_000, 50_000, 200_000];
const FILES_PER_DIR: usize = 25;
const DIRS_PER_TOP_DIR: usize = 40;
/// One file in this many matches the glob.
const MATCH_EVERY: usize = 997;
const REFRESH_RUNS: usize = 1000;
const CHANGED_RUNS: usize = 200;
/// A refresh on the largest workspace may cost at most this many times
/// what it costs on the smallest: the cost does not grow with the workspace.
const GROWTH_TARGET: f64 = 2.0;

/// Adds the deny-glob index figures to the report.
pub fn run(report: &mut Report) {
    let mut steady = Vec::new();
    for files in SIZES {
        match measure(report, files) {
            Ok(p50) => steady.push((files, p50)),
            Err(err) => report.failed(&format!("deny-glob index, {files} files"), &err.to_string()),
        }
    }
    if let (Some(&(small, base)), Some(&(large, top))) = (steady.first(), steady.last()) {
        if large > small {
            report.figure(
                Value::new(
                    &format!(
                        "deny index refresh, nothing changed, {}k files, p50",
                        large / 1000
                    ),
                    top,
                    "µs",
                ),
                Value::new(&format!("the same, {}k files", small / 1000), base, "µs"),
                &ratio_at_most(top, base, GROWTH_TARGET),
            );
        }
    }
}

/// Measures one workspace size; returns the steady refresh p50 in µs.
fn measure(report: &mut Report, files: usize) -> BenchResult<f64> {
    let dir = tempfile::Builder::new()
        .prefix("codexbox-deny-index-bench-")
        .tempdir()?;
    let ws = dir.path().canonicalize()?;
    let deepest = make_workspace(&ws, files)?;
    let patterns = vec![format!("{}/**/*.env", ws.display())];
    let cold_runs = (2_000_000 / files.max(1)).clamp(5, 50);
    let builtin = time_runs(cold_runs, || {
        glob::expand(&patterns, None, &Scanner::BuiltIn).map(drop)
    })?;
    let ripgrep = match Scanner::detect(Path::new("/"), &[]) {
        scanner @ Scanner::Ripgrep(_) => Some(time_runs(cold_runs, || {
            glob::expand(&patterns, None, &scanner).map(drop)
        })?),
        Scanner::BuiltIn => None,
    };

    let rss_before = rss_kib(std::process::id());
    let started = Instant::now();
    let mut index = DenyIndex::build(&patterns, None)?;
    let build = started.elapsed();
    let rss_after = rss_kib(std::process::id());
    let watches = index.stats().watches;
    if index.rescan_reason().is_some() {
        return Err(format!(
            "the index fell back to rescans: {:?}",
            index.rescan_reason()
        )
        .into());
    }

    let steady = time_runs(REFRESH_RUNS, || index.refresh().map(drop))? * 1e3;
    // A file made, then removed, before each timed refresh.
    let probe = deepest.join("probe.env");
    let mut samples = Vec::with_capacity(CHANGED_RUNS);
    for run in 0..CHANGED_RUNS {
        if run % 2 == 0 {
            std::fs::write(&probe, "")?;
        } else {
            std::fs::remove_file(&probe)?;
        }
        let started = Instant::now();
        let found = index.refresh()?.paths.contains(&probe);
        samples.push(started.elapsed());
        if found != (run % 2 == 0) {
            return Err(format!("refresh {run} missed the change to {}", probe.display()).into());
        }
    }
    let changed = us(quantile(&mut samples, 0.5));

    let size = format!("{}k files", files / 1000);
    let builtin_name = format!("full scan (built-in walker, the index's rules), {size}, p50");
    let (cold_name, cold) = match ripgrep {
        Some(ripgrep) => (
            format!("full scan (ripgrep, today's cold path), {size}, p50"),
            ripgrep,
        ),
        None => (builtin_name.clone(), builtin),
    };
    report.figure(
        Value::new(
            &format!("deny index refresh, nothing changed, {size}, p50"),
            steady,
            "µs",
        ),
        Value::new(&cold_name, cold, "ms"),
        &format!("{:.0}× less", cold * 1e3 / steady.max(1e-3)),
    );
    report.figure(
        Value::new(
            &format!("deny index refresh after a file was made or removed, {size}, p50"),
            changed,
            "µs",
        ),
        Value::new(&builtin_name, builtin, "ms"),
        &format!("{:.0}× less", builtin * 1e3 / changed.max(1e-3)),
    );
    let memory = match (rss_before, rss_after) {
        // Below a thousand watches the growth is lost in the allocator's slack.
        (Some(before), Some(after)) if watches >= 1000 => format!(
            "{watches} watches, about {} B of this process per watch (RSS growth)",
            after.saturating_sub(before) * 1024 / u64::try_from(watches).unwrap_or(u64::MAX)
        ),
        _ => format!("{watches} watches"),
    };
    report.figure(
        Value::new(&format!("deny index build, {size}"), ms(build), "ms"),
        Value::new(&builtin_name, builtin, "ms"),
        &memory,
    );
    Ok(steady)
}

/// Makes `files` files under `root`, `FILES_PER_DIR` a directory, two
/// directory levels deep, one in `MATCH_EVERY` named `*.env`; returns the
/// last directory made.
pub fn make_workspace(root: &Path, files: usize) -> std::io::Result<PathBuf> {
    let mut dir = root.to_path_buf();
    for n in 0..files {
        let leaf = n / FILES_PER_DIR;
        if n % FILES_PER_DIR == 0 {
            dir = root
                .join(format!("p{}", leaf / DIRS_PER_TOP_DIR))
                .join(format!("d{}", leaf % DIRS_PER_TOP_DIR));
            std::fs::create_dir_all(&dir)?;
        }
        let name = if n % MATCH_EVERY == 0 {
            format!("secret{n}.env")
        } else {
            format!("f{n}.rs")
        };
        std::fs::File::create(dir.join(name))?;
    }
    Ok(dir)
}

/// The p50 of `runs` calls of `f`, in ms (`time_runs`) or µs (`us`).
fn time_runs<E: Into<Box<dyn std::error::Error>>>(
    runs: usize,
    mut f: impl FnMut() -> Result<(), E>,
) -> BenchResult<f64> {
    let mut samples: Vec<Duration> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        f().map_err(Into::into)?;
        samples.push(started.elapsed());
    }
    Ok(ms(quantile(&mut samples, 0.5)))
}

fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
