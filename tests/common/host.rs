//! The one skip rule. A test that needs something this host may lack (user
//! namespaces, Landlock, bubblewrap, tmux, python3, a network namespace)
//! asks [`host_has`]: when the need is not met the test skips out loud, and
//! under `CODEXBOX_REQUIRE_SANDBOX=1` (CI) it fails instead, so a run cannot
//! pass by skipping. Skips where the test's subject does not exist here (a
//! root-only test run by a user, a kernel interface this kernel lacks) go
//! through [`not_applicable`] and never fail.

use std::path::Path;
use std::process::{Command, Stdio};

/// Whether missing host support fails the run instead of skipping.
pub fn sandbox_required() -> bool {
    std::env::var_os("CODEXBOX_REQUIRE_SANDBOX").is_some_and(|v| v == "1")
}

/// Whether `need` is met (`check` is `Err(why)` when it is not). An unmet
/// need skips out loud, or panics under `CODEXBOX_REQUIRE_SANDBOX=1`.
pub fn host_has(need: &str, check: Result<(), String>) -> bool {
    let Err(why) = check else {
        return true;
    };
    if sandbox_required() {
        panic!("CODEXBOX_REQUIRE_SANDBOX=1 but this host lacks {need}: {why}");
    }
    record_skip(&format!("this host lacks {need}: {why}"));
    false
}

/// A skip that is right even in CI: what the test checks does not exist for
/// this caller or kernel (a root-only test run by a user, an attack on a
/// kernel interface this kernel lacks). Says so out loud, never fails.
pub fn not_applicable(why: &str) {
    record_skip(why);
}

/// Says out loud that the running test skips, and why: on stderr (which
/// libtest shows with `--nocapture` or on failure) and, when
/// `CODEXBOX_SKIP_LOG` names a file, as one line `binary test: why` appended
/// to it, so `scripts/test` can list every skip at the end of a run.
fn record_skip(why: &str) {
    eprintln!("SKIP: {why}");
    let Some(log) = std::env::var_os("CODEXBOX_SKIP_LOG") else {
        return;
    };
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| {
            stem.rsplit_once('-')
                .map_or(stem.clone(), |(name, _)| name.to_owned())
        })
        .unwrap_or_default();
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let line = format!("{binary} {test}: {}\n", why.replace('\n', " "));
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut file| std::io::Write::write_all(&mut file, line.as_bytes()));
    if let Err(err) = appended {
        eprintln!("cannot record the skip in {}: {err}", log.to_string_lossy());
    }
}

/// Whether `program args…` runs and exits 0.
pub fn runs(program: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("`{program}` exited with {status}")),
        Err(err) => Err(format!("cannot run `{program}`: {err}")),
    }
}

/// Whether `path` exists.
pub fn exists(path: &str) -> Result<(), String> {
    if Path::new(path).exists() {
        Ok(())
    } else {
        Err(format!("{path} is not installed"))
    }
}

/// python3 on PATH.
pub fn python3() -> bool {
    host_has("python3", runs("python3", &["-c", "pass"]))
}

/// tmux on PATH (the terminal tests drive a real terminal through it).
pub fn tmux() -> bool {
    host_has("tmux", runs("tmux", &["-V"]))
}

/// Landlock enabled in this kernel.
pub fn landlock() -> bool {
    host_has(
        "Landlock",
        codexbox::sandbox::probe::landlock_abi()
            .map(|_| ())
            .map_err(|err| err.to_string()),
    )
}

/// Unprivileged user namespaces (what every bubblewrap launch needs).
pub fn user_namespaces() -> Result<(), String> {
    runs("unshare", &["--user", "--map-root-user", "true"])
}

/// A private directory that no named profile makes writable: not under
/// `/tmp` or `$TMPDIR` (which `:workspace` grants), wherever the checkout
/// and its target directory are.
pub fn dir_outside_tmp(prefix: &str) -> tempfile::TempDir {
    let writable: Vec<std::path::PathBuf> = ["/tmp".into(), std::env::temp_dir()]
        .iter()
        .filter_map(|p: &std::path::PathBuf| p.canonicalize().ok())
        .collect();
    let base = [
        env!("CARGO_TARGET_TMPDIR"),
        "/var/tmp",
        env!("CARGO_MANIFEST_DIR"),
    ]
    .into_iter()
    .filter_map(|p| std::path::Path::new(p).canonicalize().ok())
    .find(|p| !writable.iter().any(|w| p.starts_with(w)))
    .expect("a directory outside /tmp and $TMPDIR");
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(base)
        .expect("tempdir")
}
