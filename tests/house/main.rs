//! The shape of the tree, checked: module imports in `src/` run one way (no
//! module reaches back, through any chain of `crate::`/`super::` paths, to a
//! module that imports it), the top-level modules keep the layers of
//! `docs/architecture.md`, the library surface is the modules `src/lib.rs`
//! documents, every Rust file opens with a doc comment saying
//! what it owns, every `unsafe` block or impl in `src/` has a `// SAFETY:`
//! comment just above it, every test skip goes through the one rule in
//! `tests/common/host.rs`, and no tracked file points outside the project
//! for what it is meant to do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Every file under `dir` that `keep` accepts, in directories `keep`
/// accepts too, sorted.
fn files_under(dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("dir entry").path();
            if !keep(&path) {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    files_under(dir, &|path| {
        path.is_dir() || path.extension().is_some_and(|e| e == "rs")
    })
}

/// The files git tracks in this checkout; without git (an unpacked
/// tarball), every file outside `.git` and `target`.
fn tracked_files() -> Vec<PathBuf> {
    let listed = std::process::Command::new("git")
        .args(["-C", ROOT, "ls-files", "-z"])
        .output()
        .ok()
        .filter(|out| out.status.success());
    match listed {
        Some(out) => out
            .stdout
            .split(|byte| *byte == 0)
            .filter(|name| !name.is_empty())
            .map(|name| Path::new(ROOT).join(String::from_utf8_lossy(name).as_ref()))
            // Deleted in the work tree but not yet in the index.
            .filter(|path| path.is_file())
            .collect(),
        None => files_under(Path::new(ROOT), &|path| {
            !path.ends_with(".git") && !path.ends_with("target")
        }),
    }
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `src/lib.rs` is the root.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts.join("::")
}

/// The code of a file without its comment lines and its unit tests (a
/// `#[cfg(test)]` module may use anything it tests).
fn code_of(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The identifier path that follows each occurrence of `prefix` in `code`
/// (`crate::a::b::C` gives `["a", "b", "C"]`).
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
            continue;
        }
        let mut path = Vec::new();
        let mut tail = rest;
        loop {
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if end == 0 {
                break;
            }
            path.push(&tail[..end]);
            match tail[end..].strip_prefix("::") {
                Some(next) => tail = next,
                None => break,
            }
        }
        paths.push(path);
    }
    paths
}

/// The module graph of `src/`: which modules each module imports.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(ROOT).join("src");
    let sources: BTreeMap<String, String> = rust_files(&src)
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("read source");
            (module_of(&src, file), code_of(&text))
        })
        .collect();
    let longest_module = |parts: &[&str]| {
        (1..=parts.len())
            .rev()
            .map(|n| parts[..n].join("::"))
            .find(|candidate| sources.contains_key(candidate))
    };
    let mut graph = BTreeMap::new();
    for (module, code) in &sources {
        let mut imports = BTreeSet::new();
        for path in paths_after(code, "crate::") {
            imports.extend(longest_module(&path));
        }
        let parent: Vec<&str> = module.split("::").collect();
        let parent = &parent[..parent.len().saturating_sub(1)];
        for path in paths_after(code, "super::") {
            let mut full: Vec<&str> = parent.to_vec();
            full.extend(path.iter().take(1));
            imports.extend(longest_module(&full).filter(|m| m.len() > parent.join("::").len()));
        }
        imports.remove(module);
        imports.remove("");
        graph.insert(module.clone(), imports);
    }
    graph
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        let n = state.index.len();
        state.index.insert(node, n);
        state.low.insert(node, n);
        state.stack.push(node);
        state.on_stack.insert(node);
        let graph = state.graph;
        for next in graph.get(node).into_iter().flatten() {
            let next = next.as_str();
            if !graph.contains_key(next) {
                continue;
            }
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

#[test]
fn module_imports_run_one_way() {
    let graph = module_graph();
    assert!(
        graph.len() > 50,
        "the scan found too few modules: {graph:?}"
    );
    assert!(
        graph["server::router"].contains("server::connection"),
        "the scan misses imports: {:?}",
        graph["server::router"]
    );
    let found = cycles(&graph);
    let described: Vec<String> = found
        .iter()
        .map(|component| {
            let edges: Vec<String> = component
                .iter()
                .map(|m| {
                    let inside: Vec<&str> = graph[m]
                        .iter()
                        .filter(|n| component.contains(n))
                        .map(String::as_str)
                        .collect();
                    format!("{m} -> {}", inside.join(", "))
                })
                .collect();
            edges.join("\n  ")
        })
        .collect();
    assert!(
        found.is_empty(),
        "import cycles:\n  {}",
        described.join("\n\n  ")
    );
}

/// The layers of `docs/architecture.md`, lowest first: the top-level
/// modules each numbered line of its "Layers" section names before its `:`.
fn documented_layers() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/architecture.md"))
        .expect("read docs/architecture.md");
    let section = doc
        .split("## Layers, lowest first")
        .nth(1)
        .expect("docs/architecture.md has a `## Layers, lowest first` section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut layers = Vec::new();
    for line in section.lines() {
        let Some((number, mut rest)) = line.split_once(". ") else {
            continue;
        };
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let mut modules = Vec::new();
        while let Some(named) = rest.strip_prefix('`') {
            let (name, after) = named.split_once('`').expect("a closed `name`");
            modules.push(name.to_owned());
            rest = after.strip_prefix(", ").unwrap_or(after);
            if rest.starts_with(':') {
                break;
            }
        }
        assert!(!modules.is_empty(), "a layer without modules: {line}");
        layers.push(modules);
    }
    layers
}

/// The top-level modules of `src/` (`src/x.rs` and `src/x/`).
fn top_level_modules() -> BTreeSet<String> {
    std::fs::read_dir(Path::new(ROOT).join("src"))
        .expect("read src")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.is_dir() || path.extension().is_some_and(|e| e == "rs"))
        .map(|path| {
            path.file_stem()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name != "lib")
        .collect()
}

/// The top-level module each `crate::`/`super::` path of `module`'s `code`
/// names, with the path as written.
fn top_level_imports(module: &str, code: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for path in paths_after(code, "crate::") {
        if let Some(first) = path.first() {
            found.push((first.to_string(), format!("crate::{}", path.join("::"))));
        }
    }
    let parts: Vec<&str> = module.split("::").collect();
    for path in paths_after(code, "super::") {
        let ups = 1 + path.iter().take_while(|p| **p == "super").count();
        let rest = &path[ups - 1..];
        let Some(kept) = parts.len().checked_sub(ups) else {
            continue;
        };
        let target = parts[..kept].first().copied().or(rest.first().copied());
        if let Some(target) = target {
            let written = format!("{}{}", "super::".repeat(ups), rest.join("::"));
            found.push((target.to_owned(), written));
        }
    }
    found
}

/// Every import of `sources` (module name, code) that runs against
/// `layers`: from a module to one of its own layer or a higher one.
fn imports_against(layers: &[Vec<String>], sources: &[(String, String, String)]) -> Vec<String> {
    let layer_of: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(n, modules)| modules.iter().map(move |m| (m.as_str(), n)))
        .collect();
    let mut against = Vec::new();
    for (file, module, code) in sources {
        let Some(top) = module.split("::").next() else {
            continue;
        };
        let Some(&from) = layer_of.get(top) else {
            continue;
        };
        for (target, written) in top_level_imports(module, code) {
            if target == top {
                continue;
            }
            let Some(&to) = layer_of.get(target.as_str()) else {
                continue;
            };
            if to >= from {
                against.push(format!(
                    "{file}: {written} ({top}, layer {}, uses {target}, layer {})",
                    from + 1,
                    to + 1
                ));
            }
        }
    }
    against.sort();
    against.dedup();
    against
}

/// Imports against the layers that are still being moved: (from, to).
/// Temporary; it must end empty.
const KNOWN_AGAINST_THE_LAYERS: &[(&str, &str)] = &[];

#[test]
fn top_level_modules_keep_their_layers() {
    let layers = documented_layers();
    let placed: Vec<&String> = layers.iter().flatten().collect();
    let placed_set: BTreeSet<String> = placed.iter().map(|m| m.to_string()).collect();
    assert_eq!(
        placed.len(),
        placed_set.len(),
        "a module in two layers: {layers:?}"
    );
    let modules = top_level_modules();
    assert_eq!(
        placed_set, modules,
        "docs/architecture.md must place every top-level module of src/, and only those"
    );
    let src = Path::new(ROOT).join("src");
    let sources: Vec<(String, String, String)> = rust_files(&src)
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("read source");
            let shown = file
                .strip_prefix(ROOT)
                .unwrap_or(file)
                .display()
                .to_string();
            (shown, module_of(&src, file), code_of(&text))
        })
        .collect();
    let against = imports_against(&layers, &sources);
    let known = |line: &String| {
        KNOWN_AGAINST_THE_LAYERS.iter().any(|(from, to)| {
            line.contains(&format!("({from}, ")) && line.contains(&format!("uses {to}, "))
        })
    };
    let unknown: Vec<&String> = against.iter().filter(|line| !known(line)).collect();
    assert!(
        unknown.is_empty(),
        "imports against the layers of docs/architecture.md:\n{}",
        unknown
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let stale: Vec<&(&str, &str)> = KNOWN_AGAINST_THE_LAYERS
        .iter()
        .filter(|(from, to)| {
            !against
                .iter()
                .any(|l| l.contains(&format!("({from}, ")) && l.contains(&format!("uses {to}, ")))
        })
        .collect();
    assert!(stale.is_empty(), "known imports that are gone: {stale:?}");
}

#[test]
fn the_layer_check_finds_imports_against_the_layers() {
    let layers = vec![
        vec!["low".to_owned()],
        vec!["high".to_owned(), "peer".to_owned()],
    ];
    let source = |file: &str, module: &str, code: &str| {
        (file.to_owned(), module.to_owned(), code.to_owned())
    };
    let sources = vec![
        source(
            "src/high/a.rs",
            "high::a",
            "use crate::low::X;\nuse super::b::Y;",
        ),
        source("src/high/b.rs", "high::b", "use crate::peer::Z;"),
        source("src/low/mod.rs", "low", "use super::high::W;"),
        source(
            "src/low/c.rs",
            "low::c",
            "use super::super::high::V;\nuse super::d;",
        ),
    ];
    assert_eq!(
        imports_against(&layers, &sources),
        vec![
            "src/high/b.rs: crate::peer::Z (high, layer 2, uses peer, layer 2)",
            "src/low/c.rs: super::super::high::V (low, layer 1, uses high, layer 2)",
            "src/low/mod.rs: super::high::W (low, layer 1, uses high, layer 2)",
        ]
    );
}

/// The library surface: the top-level modules `src/lib.rs` makes public and
/// documents (docs/library.md describes them).
const LIBRARY_SURFACE: &[&str] = &[
    "client",
    "policy",
    "protocol",
    "runtime_paths",
    "server",
    "wire_path",
];

/// Top-level modules public only so this crate's tests, benchmarks and
/// examples can reach them, hidden from the documentation. Only shrinks.
const HIDDEN_FOR_TESTS: &[&str] = &[
    "backoff",
    "bwrap",
    "cli",
    "commands",
    "fs",
    "fs_helper",
    "glob_pattern",
    "listener_token",
    "net",
    "process",
    "relay",
    "rendezvous",
    "sandbox",
    "sys",
    "terminal_text",
];

#[test]
fn the_library_surface_is_what_lib_rs_documents() {
    let lib = std::fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).expect("read lib.rs");
    let (mut documented, mut hidden, mut other) = (Vec::new(), Vec::new(), Vec::new());
    let mut previous = "";
    for line in lib.lines().map(str::trim) {
        if let Some(name) = line
            .strip_prefix("pub mod ")
            .and_then(|l| l.strip_suffix(';'))
        {
            if previous == "#[doc(hidden)]" {
                hidden.push(name);
            } else {
                documented.push(name);
            }
        } else if line.starts_with("pub ") && !line.starts_with("pub(crate) ") {
            other.push(line);
        }
        previous = line;
    }
    assert_eq!(
        documented, LIBRARY_SURFACE,
        "documented `pub mod`s of src/lib.rs"
    );
    assert_eq!(
        hidden, HIDDEN_FOR_TESTS,
        "`#[doc(hidden)] pub mod`s of src/lib.rs"
    );
    assert_eq!(
        other,
        ["pub use arg0::dispatch;"],
        "other public items of src/lib.rs"
    );
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c"]]);
}

#[test]
fn every_skip_goes_through_the_one_rule() {
    let tests = Path::new(ROOT).join("tests");
    let host = tests.join("common").join("host.rs");
    let mut offenders = Vec::new();
    for file in rust_files(&tests) {
        if file == host || file.ends_with("house/main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read test");
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let prints_skip = lower.contains("eprintln!(\"skip");
            let reads_requirement = line.contains("\"CODEXBOX_REQUIRE_SANDBOX\"");
            if prints_skip || reads_requirement {
                offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "skips outside tests/common/host.rs:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn every_rust_file_says_what_it_owns() {
    let mut missing = Vec::new();
    for dir in ["src", "bin", "benches", "tests"] {
        for file in rust_files(&Path::new(ROOT).join(dir)) {
            let text = std::fs::read_to_string(&file).expect("read source");
            if !text.starts_with("//!") {
                missing.push(file.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "files without a `//!` header:\n{}",
        missing.join("\n")
    );
}

/// Lines above an `unsafe` block that its `// SAFETY:` comment may start
/// in (a comment over a statement that spans a few lines).
const SAFETY_COMMENT_REACH: usize = 6;

#[test]
fn every_unsafe_block_says_why_it_is_sound() {
    let mut unexplained = Vec::new();
    for file in rust_files(&Path::new(ROOT).join("src")) {
        let text = std::fs::read_to_string(&file).expect("read source");
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            let opens_unsafe = ["unsafe {", "unsafe impl"]
                .iter()
                .any(|form| code.contains(form));
            let explained = lines[n.saturating_sub(SAFETY_COMMENT_REACH)..=n]
                .iter()
                .any(|above| above.contains("SAFETY:"));
            if opens_unsafe && !explained {
                unexplained.push(format!("{}:{}: {code}", file.display(), n + 1));
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "unsafe without a `// SAFETY:` comment:\n{}",
        unexplained.join("\n")
    );
}

/// What the project's files never mention, matched in lower case: they
/// speak of the project only and point at its own docs, not at sections of
/// documents it does not hold (a specification, notes on another
/// implementation, a section of another page). Spelled in pieces so this
/// file does not match itself.
const OUTSIDE_REFERENCES: &[&str] = &[
    concat!("spec", ".md"),
    concat!("spec", " §"),
    concat!("notes", " §"),
    concat!("reference", " §"),
    concat!(".md", " §"),
    concat!("/work", "/shared"),
];

#[test]
fn no_tracked_file_points_outside_the_project() {
    let files = tracked_files();
    assert!(
        files.iter().any(|f| f.ends_with("house/main.rs")),
        "the listing holds this file: {} files",
        files.len()
    );
    let mut offenders = Vec::new();
    for file in files {
        let bytes = std::fs::read(&file).expect("read tracked file");
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            if let Some(needle) = OUTSIDE_REFERENCES.iter().find(|n| lower.contains(**n)) {
                offenders.push(format!(
                    "{}:{}: {needle}: {}",
                    file.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "mentions of material outside the project (name the project's own docs instead):\n{}",
        offenders.join("\n")
    );
}
