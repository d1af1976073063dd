//! The project's benchmark (`scripts/bench`, or `cargo bench --bench bench`):
//! prints every figure of docs/performance.md beside a baseline measured in the same run,
//! one line each. Each area adds a module with a `run(&mut Report)`;
//! `scripts/bench process sandbox` runs only the named areas.

mod bwrap;
mod common;
mod deny_index;
mod fleet;
mod fs;
mod net;
mod outside;
mod process;
mod relay;
mod sandbox;
mod shell;

/// One benchmark area: it adds its figures to the report.
type Area = fn(&mut common::Report);

fn main() {
    // `cargo test --all-targets` runs this binary too, without `--bench`:
    // measuring a debug build there would only cost time.
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("benchmark skipped: run scripts/bench (cargo bench --bench bench)");
        return;
    }
    // An area may have several entries: they run in this order.
    let areas: [(&str, Area); 9] = [
        ("process", process::run),
        ("sandbox", sandbox::run),
        ("sandbox", deny_index::run),
        ("bwrap", bwrap::run),
        ("fs", fs::run),
        ("relay", relay::run),
        ("net", net::run),
        ("shell", shell::run),
        // Thousands of sockets and minutes: only when named.
        ("fleet", fleet::run),
    ];
    let chosen: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    if let Some(unknown) = chosen
        .iter()
        .find(|name| !areas.iter().any(|(area, _)| area == name))
    {
        eprintln!(
            "bench: unknown area {unknown:?} (process, sandbox, bwrap, fs, net, relay, shell, fleet)"
        );
        std::process::exit(2);
    }
    let mut report = common::Report::default();
    println!("codexbox benchmark (release build, {} CPUs)", cpus());
    if std::env::var_os(common::SERVER_ENV).is_some() {
        println!(
            "exec-server: {} (from {})",
            common::server_binary(),
            common::SERVER_ENV
        );
    }
    for (area, run) in areas {
        let named = chosen.iter().any(|name| name == area);
        if named || (chosen.is_empty() && area != "fleet") {
            run(&mut report);
        }
    }
    if report.is_empty() {
        println!("no figures measured");
    } else {
        println!("{} figures", report.len());
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
