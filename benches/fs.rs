//! Filesystem figures through the exec-server, each beside a baseline
//! measured in the same run: `fs/readFile` and `fs/writeFile` of 64 MiB
//! (MB/s) against reading and writing the file directly, a 64 MiB streaming
//! upload (`fs/open` + `fs/writeBlock` in 1 MiB blocks + `fs/close`, which
//! syncs) against writing and syncing the file directly, and sandboxed
//! `fs/getMetadata` through a warm helper against a one-request helper
//! spawned per call (the reference's way), median latency.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use codexbox::client::{ConnectOptions, ExecServerClient};
use codexbox::protocol::fs::OpenMode;
use codexbox::protocol::sandbox::FileSystemSandboxContext;
use serde_json::json;

use crate::common::{ms, quantile, ratio_at_most, Report, Server, Value, BIN};

type BenchResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

const FILE_BYTES: usize = 64 << 20;
const UPLOAD_BLOCK_BYTES: usize = 1 << 20;
const THROUGHPUT_RUNS: usize = 5;
const WARM_RUNS: usize = 300;
const COLD_RUNS: usize = 20;

/// Runs every filesystem figure.
pub fn run(report: &mut Report) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return report.failed("fs", &format!("tokio runtime: {err}")),
    };
    // 64 MiB of file data is ~90 MB of base64: within the default limit.
    let server = match Server::start(&[]) {
        Ok(server) => server,
        Err(err) => return report.failed("fs", &format!("exec-server: {err}")),
    };
    let dir = match tempfile::Builder::new()
        .prefix("codexbox-fs-bench-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(err) => return report.failed("fs", &format!("tempdir: {err}")),
    };
    let root = std::fs::canonicalize(dir.path()).unwrap_or_else(|_| dir.path().to_path_buf());
    if let Err(err) = runtime.block_on(throughput(report, &server.url, &root)) {
        report.failed("fs/readFile and fs/writeFile throughput", &err.to_string());
    }
    if let Err(err) = runtime.block_on(sandboxed_metadata(report, &server.url, &root)) {
        report.failed("sandboxed fs/getMetadata", &err.to_string());
    }
}

/// A call that fails instead of hanging when the server never answers.
async fn call(
    client: &ExecServerClient,
    method: &str,
    params: serde_json::Value,
) -> BenchResult<serde_json::Value> {
    match tokio::time::timeout(Duration::from_secs(120), client.call(method, params)).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(format!("{method}: no answer within 120 s").into()),
    }
}

fn mb_per_s(bytes: usize, duration: Duration) -> f64 {
    bytes as f64 / 1e6 / duration.as_secs_f64().max(1e-9)
}

async fn throughput(report: &mut Report, url: &str, root: &Path) -> BenchResult {
    let client =
        ExecServerClient::connect_and_initialize(ConnectOptions::new(url), "fs-bench").await?;
    let data: Vec<u8> = (0..FILE_BYTES).map(|i| (i % 251) as u8).collect();
    let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
    let path = root.join("big.bin");
    let (mut direct_write, mut direct_read, mut rpc_write, mut rpc_read) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..THROUGHPUT_RUNS {
        let start = Instant::now();
        std::fs::write(&path, &data)?;
        direct_write.push(start.elapsed());
        let start = Instant::now();
        let back = std::fs::read(&path)?;
        direct_read.push(start.elapsed());
        if back.len() != FILE_BYTES {
            return Err("short direct read".into());
        }
        let start = Instant::now();
        call(
            &client,
            "fs/writeFile",
            json!({"path": path, "dataBase64": encoded}),
        )
        .await?;
        rpc_write.push(start.elapsed());
        let start = Instant::now();
        let answer = call(&client, "fs/readFile", json!({"path": path})).await?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(answer["dataBase64"].as_str().unwrap_or_default())?;
        rpc_read.push(start.elapsed());
        if decoded != data {
            return Err("fs/readFile returned different bytes".into());
        }
    }
    let figure = |report: &mut Report,
                  name: &str,
                  rpc: &mut [Duration],
                  base_name: &str,
                  base: &mut [Duration]| {
        let measured = mb_per_s(FILE_BYTES, quantile(rpc, 0.5));
        let baseline = mb_per_s(FILE_BYTES, quantile(base, 0.5));
        let ratio = measured / baseline.max(1e-9);
        report.figure(
            Value::new(name, measured, "MB/s"),
            Value::new(base_name, baseline, "MB/s"),
            &format!("ratio {ratio:.2} (no target; payload incl. base64 and WebSocket)"),
        );
    };
    figure(
        report,
        "fs/writeFile 64 MiB (median of 5)",
        &mut rpc_write,
        "std::fs::write",
        &mut direct_write,
    );
    figure(
        report,
        "fs/readFile 64 MiB (median of 5)",
        &mut rpc_read,
        "std::fs::read",
        &mut direct_read,
    );
    let (mut rpc_upload, mut direct_synced) = (Vec::new(), Vec::new());
    for run in 0..THROUGHPUT_RUNS {
        let start = Instant::now();
        let mut file = std::fs::File::create(&path)?;
        file.write_all(&data)?;
        file.sync_data()?;
        direct_synced.push(start.elapsed());
        let handle = format!("up{run}");
        let target = path.display().to_string();
        let start = Instant::now();
        client
            .fs_open_mode(&handle, &target, OpenMode::Truncate, None)
            .await?;
        for (i, block) in data.chunks(UPLOAD_BLOCK_BYTES).enumerate() {
            let offset = u64::try_from(i * UPLOAD_BLOCK_BYTES)?;
            client.fs_write_block(&handle, offset, block).await?;
        }
        client.fs_close(&handle).await?;
        rpc_upload.push(start.elapsed());
        if std::fs::read(&path)? != data {
            return Err("the streamed upload wrote different bytes".into());
        }
    }
    figure(
        report,
        "fs/writeBlock upload 64 MiB, 1 MiB blocks (median of 5)",
        &mut rpc_upload,
        "std::fs::write + fdatasync",
        &mut direct_synced,
    );
    Ok(())
}

/// The profile JSON and cwd a helper for `ctx` runs with, as the server
/// computes them.
fn helper_command_parts(ctx: &FileSystemSandboxContext) -> BenchResult<(String, PathBuf)> {
    let resolved = ctx.resolve()?;
    let exe_dir = Path::new(BIN)
        .parent()
        .map(Path::to_path_buf)
        .ok_or("binary has no parent directory")?;
    let profile = resolved.helper_profile(&[exe_dir]);
    Ok((profile.to_json(), resolved.helper_cwd()?))
}

async fn sandboxed_metadata(report: &mut Report, url: &str, root: &Path) -> BenchResult {
    std::fs::write(root.join("meta.txt"), b"meta")?;
    let sandbox = json!({
        "permissions": {"type": "managed", "file_system": {"type": "restricted", "entries": [
            {"path": {"type": "path", "path": root}, "access": "read"}]}, "network": "restricted"},
        "cwd": root, "workspaceRoots": [root], "windowsSandboxLevel": "disabled",
    });
    let params = json!({"path": root.join("meta.txt"), "sandbox": sandbox});
    let client =
        ExecServerClient::connect_and_initialize(ConnectOptions::new(url), "fs-bench").await?;
    // The first call starts the helper.
    call(&client, "fs/getMetadata", params.clone()).await?;
    let mut warm = Vec::with_capacity(WARM_RUNS);
    for _ in 0..WARM_RUNS {
        let start = Instant::now();
        call(&client, "fs/getMetadata", params.clone()).await?;
        warm.push(start.elapsed());
    }
    let ctx: FileSystemSandboxContext = serde_json::from_value(sandbox)?;
    let (profile_json, cwd) = helper_command_parts(&ctx)?;
    let request = json!({"operation": "fs/getMetadata", "params": {"path": root.join("meta.txt"), "sandbox": null}}).to_string();
    let mut cold = Vec::with_capacity(COLD_RUNS);
    for _ in 0..COLD_RUNS {
        let start = Instant::now();
        let mut child = Command::new(BIN)
            .args(["linux-sandbox", "--sandbox-policy-cwd"])
            .arg(&cwd)
            .arg("--command-cwd")
            .arg(&cwd)
            .arg("--permission-profile")
            .arg(&profile_json)
            .arg("--")
            .arg(BIN)
            .arg("--codex-run-as-fs-helper")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .ok_or("no stdin")?
            .write_all(request.as_bytes())?;
        let out = child.wait_with_output()?;
        cold.push(start.elapsed());
        if !out.status.success() || !out.stdout.starts_with(b"{\"status\":\"ok\"") {
            return Err(format!(
                "one-request helper failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
    }
    let warm_median = ms(quantile(&mut warm, 0.5));
    let cold_median = ms(quantile(&mut cold, 0.5));
    let verdict = format!(
        "{}; target warm <= 1 ms: {}",
        ratio_at_most(warm_median, cold_median, 1.0),
        if warm_median <= 1.0 { "ok" } else { "MISSED" }
    );
    report.figure(
        Value::new(
            "sandboxed fs/getMetadata, warm helper (median)",
            warm_median,
            "ms",
        ),
        Value::new("one-request helper per call (median)", cold_median, "ms"),
        &verdict,
    );
    Ok(())
}
