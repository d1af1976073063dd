//! The project's benchmark (`scripts/bench`, or `cargo bench --bench bench`):
//! prints every SPEC §8 figure beside a baseline measured in the same run,
//! one line each. Each area adds a module with a `run(&mut Report)`.

mod bwrap;
mod common;
mod fs;
mod process;
mod sandbox;

fn main() {
    // `cargo test --all-targets` runs this binary too, without `--bench`:
    // measuring a debug build there would only cost time.
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("benchmark skipped: run scripts/bench (cargo bench --bench bench)");
        return;
    }
    let mut report = common::Report::default();
    println!("codexbox benchmark (release build, {} CPUs)", cpus());
    process::run(&mut report);
    sandbox::run(&mut report);
    bwrap::run(&mut report);
    fs::run(&mut report);
    if report.is_empty() {
        println!("no figures measured");
    } else {
        println!("{} figures", report.len());
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
