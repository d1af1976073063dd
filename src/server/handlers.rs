//! Handlers of `initialize`, `environment/*` and `process/*`: validation,
//! error codes and messages, and the calls into [`crate::process`].

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::config::AUTH_TOKEN_ENV;
use super::connection::{resumed_elsewhere, Connection};
use super::process_sandbox;
use super::reply::{to_json, Deferred};
use super::session::{ProcessInfo, Registry, Session};
use crate::metrics::exec::ExecMetrics;
use crate::process::env_policy::child_env;
use crate::process::kill::parse_signal;
use crate::process::{LaunchSpec, ManagedProcess, ProcessOptions, SpawnError};
use crate::protocol::environment::{EnvironmentInfo, EnvironmentStatus, ShellInfo};
use crate::protocol::process::{
    ReadParams, ResizeParams, SignalParams, StartParams, StartResult, TerminateParams,
    TerminateResult, WriteParams, WriteResult, WriteStatus,
};
use crate::protocol::session::SessionListResult;
use crate::protocol::{InitializeParams, InitializeResult, RequestId, RpcError};
use crate::wire_path::to_file_uri;

/// `initialize`: a new session, or the resumed one (taken over from a
/// connection that is gone), with the grace period asked for.
pub async fn initialize(
    conn: &Connection,
    params: InitializeParams,
) -> Result<InitializeResult, RpcError> {
    if conn.is_initialized() {
        return Err(RpcError::invalid_request(
            "initialize may only be sent once per connection",
        ));
    }
    let registry = &conn.shared.registry;
    let config = &conn.shared.config;
    // Part of the holder: denials follow whichever connection holds the session.
    conn.set_wants_denials(params.capabilities.network_denials);
    let (session, epoch) = match params.resume_session_id.as_deref() {
        Some(id) => {
            let probe = config.takeover_probe;
            let resumed = registry
                .resume(id, conn.holder(), conn.out.clone(), probe)
                .await;
            conn.shared.metrics.session_resume(resumed.is_ok());
            resumed?
        }
        None => registry.create(conn.holder(), conn.out.clone()),
    };
    let session_grace_secs = params.session_grace_secs.map(|asked| {
        let granted = Duration::from_secs(asked).min(config.max_session_grace);
        session.set_grace(granted);
        granted.as_secs()
    });
    let result = InitializeResult {
        session_id: session.id().to_owned(),
        session_grace_secs,
    };
    conn.bind(session, epoch);
    Ok(result)
}

/// `session/list`: every session of the server. Whoever may connect may
/// start any command as the server's user, and resume any session by id,
/// so every connection sees every session.
pub fn list_sessions(conn: &Connection) -> SessionListResult {
    SessionListResult {
        sessions: conn.shared.registry.list(conn.id),
    }
}

/// `environment/info`.
pub fn environment_info() -> EnvironmentInfo {
    let shell_path = std::env::var("SHELL")
        .ok()
        .filter(|s| s.starts_with('/'))
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.shell.to_string_lossy().into_owned())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/bin/sh".to_owned());
    let base = shell_path.rsplit('/').next().unwrap_or("sh");
    let name = match base {
        "zsh" | "bash" | "sh" | "powershell" | "cmd" => base,
        "pwsh" => "powershell",
        _ => "sh",
    };
    let mut capabilities = Map::new();
    capabilities.insert("networkProxyLaunch".into(), Value::Bool(true));
    EnvironmentInfo {
        shell: ShellInfo {
            name: name.to_owned(),
            path: shell_path,
        },
        cwd: std::env::current_dir()
            .ok()
            .map(|cwd| to_file_uri(cwd.as_os_str())),
        capabilities,
    }
}

/// `environment/status`.
pub fn environment_status() -> EnvironmentStatus {
    EnvironmentStatus { status: "ready" }
}

/// `process/start`.
pub async fn start(
    conn: &Connection,
    session: &Arc<Session>,
    params: StartParams,
) -> Result<StartResult, RpcError> {
    if conn.shared.registry.is_draining() {
        return Err(RpcError::invalid_request(
            "the exec-server is shutting down: no new processes are started",
        ));
    }
    // The server's token never reaches a child through `envPolicy`.
    let server_env = std::env::vars_os().filter(|(name, _)| name != AUTH_TOKEN_ENV);
    let mut env = child_env(&params.env, params.env_policy.as_ref(), server_env);
    // Before the sandbox and duplicate-id checks, as the reference orders it.
    let proxy = match &params.network_proxy {
        Some(launch) => Some(super::network_proxy::launch(launch, &mut env).await?),
        None => None,
    };
    let info = ProcessInfo {
        argv: params.argv.clone(),
        tty: params.tty,
        started_at: std::time::SystemTime::now(),
    };
    let launch_began = std::time::Instant::now();
    let mut spec = LaunchSpec {
        argv: params.argv.iter().map(OsString::from).collect(),
        arg0: params.arg0.map(OsString::from),
        cwd: params.cwd.into_path(),
        env,
        tty: params.tty.then(|| params.size.unwrap_or_default()),
        pipe_stdin: params.pipe_stdin && !params.tty,
        sandboxed: false,
        helper: None,
        standby: None,
    };
    let sandbox = process_sandbox::prepare(
        params.sandbox.as_ref(),
        &mut spec,
        &conn.shared.paths,
        &conn.shared.guard,
        params.enforce_managed_network,
    )?;
    if spec.argv.is_empty() {
        return Err(RpcError::invalid_params("argv must not be empty"));
    }
    let id = params.process_id;
    if session.contains(&id) {
        return Err(RpcError::invalid_request(format!(
            "process {id} already exists"
        )));
    }
    let max = conn.shared.config.max_processes;
    if session.live_processes() >= max {
        return Err(RpcError::invalid_request(format!(
            "too many processes: this session already runs the maximum of {max}"
        )));
    }
    if let Some(request) = &sandbox {
        conn.shared
            .reuse
            .attach(session.sandboxes(), request, &mut spec)
            .await;
    }
    let options = ProcessOptions {
        retained_bytes: conn.shared.config.retained_output_bytes,
        reaper_exe: Some(conn.shared.paths.codex_self_exe.clone()),
        sandboxed_roots: conn.shared.sandboxed_roots.clone(),
        tasks: conn.shared.process_tasks.clone(),
    };
    let weak = Registry::weak_session(session);
    let evict_id = id.clone();
    let on_evict = Box::new(move || {
        if let Some(session) = weak.upgrade() {
            session.evict(&evict_id);
        }
    });
    let process = ManagedProcess::start(
        id.clone(),
        &spec,
        &options,
        session.route().clone(),
        on_evict,
    )
    .await
    .map_err(|err| {
        tracing::debug!(process = %id, "spawn failed: {err}");
        conn.shared.metrics.process_failed_to_start();
        match err {
            SpawnError::EmptyArgv => RpcError::invalid_params(err.to_string()),
            other => RpcError::internal(other.to_string()),
        }
    })?;
    count_process(
        &conn.shared.metrics,
        &process,
        spec.sandboxed.then(|| launch_began.elapsed()),
    );
    session.insert(process.clone(), info, proxy.as_ref().map(|p| p.log()));
    if let Some(proxy) = proxy {
        super::network_proxy::attach(
            session,
            &process,
            proxy,
            conn.shared.metrics.clone(),
            &conn.shared.process_tasks,
        );
    }
    Ok(StartResult { process_id: id })
}

/// Counts a started process now and its exit once it is known.
fn count_process(
    metrics: &Arc<ExecMetrics>,
    process: &Arc<ManagedProcess>,
    sandbox_start: Option<Duration>,
) {
    metrics.process_started(sandbox_start);
    let (metrics, process) = (metrics.clone(), process.clone());
    tokio::spawn(async move {
        let (exit, denied) = process.record().exited().await;
        metrics.process_exited(exit.code, exit.signal, denied);
    });
}

fn unknown_process(id: &str) -> RpcError {
    RpcError::invalid_request(format!("unknown process id {id}"))
}

/// `process/read`: answers now when there is something to return (or no
/// wait was asked), otherwise long-polls in its own task.
pub async fn read(
    conn: &Arc<Connection>,
    id: &RequestId,
    session: Arc<Session>,
    epoch: u64,
    params: ReadParams,
) -> Result<Deferred, RpcError> {
    let (process, network) = session
        .process_with_network(&params.process_id)
        .ok_or_else(|| unknown_process(&params.process_id))?;
    let after = params.after_seq.unwrap_or(0);
    let wait = Duration::from_millis(params.wait_ms.unwrap_or(0));
    let with_denials = move |mut result: crate::protocol::process::ReadResult| {
        if let Some(log) = &network {
            result.network_denials = super::network_proxy::denials(log);
        }
        result
    };
    let (result, ready) = process.snapshot(after, params.max_bytes);
    if ready || wait.is_zero() {
        return to_json(&with_denials(result)).map(Deferred::Now);
    }
    let Ok(permit) = conn.deferred.clone().acquire_owned().await else {
        return Err(RpcError::internal("connection is shutting down"));
    };
    let conn = conn.clone();
    let id = id.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let deadline = tokio::time::Instant::now() + wait;
        let outcome = loop {
            let changed = process.record().changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (result, ready) = process.snapshot(after, params.max_bytes);
            if ready || tokio::time::Instant::now() >= deadline {
                break Ok(result);
            }
            tokio::select! {
                _ = &mut changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = session.taken_over(epoch) => break Err(resumed_elsewhere()),
            }
        };
        match outcome.and_then(|result| to_json(&with_denials(result))) {
            Ok(text) => conn.reply_raw(&id, text).await,
            Err(error) => conn.reply(&id, Err(error)).await,
        }
    });
    Ok(Deferred::Later)
}

/// `process/write` in both dialects.
pub async fn write(session: &Session, params: WriteParams) -> Result<WriteResult, RpcError> {
    let id = &params.process_id;
    match params.write_id {
        Some(write_id) => {
            if write_id.is_empty() {
                return Err(RpcError::invalid_params("writeId must not be empty"));
            }
            let Some(process) = session.process(id) else {
                return Ok(WriteResult {
                    status: WriteStatus::UnknownProcess,
                });
            };
            let outcome = process
                .write(params.chunk, Some(write_id), params.close_stdin)
                .await;
            Ok(WriteResult {
                status: outcome.into(),
            })
        }
        None => {
            let process = session.process(id).ok_or_else(|| unknown_process(id))?;
            if !process.is_writable() {
                return Err(RpcError::invalid_request(format!(
                    "process {id} does not accept stdin writes (start it with tty or pipeStdin, and do not close its stdin)"
                )));
            }
            let outcome = process.write(params.chunk, None, params.close_stdin).await;
            Ok(WriteResult {
                status: outcome.into(),
            })
        }
    }
}

/// `process/signal`.
pub fn signal(session: &Session, params: SignalParams) -> Result<(), RpcError> {
    let signal = parse_signal(&params.signal)
        .ok_or_else(|| RpcError::invalid_params(format!("unknown signal `{}`", params.signal)))?;
    if let Some(process) = session.process(&params.process_id) {
        process.signal(signal);
    }
    Ok(())
}

/// `process/resize`.
pub fn resize(session: &Session, params: ResizeParams) -> Result<(), RpcError> {
    let id = &params.process_id;
    let process = session.process(id).ok_or_else(|| unknown_process(id))?;
    let size = crate::protocol::process::PtySize {
        rows: params.rows,
        cols: params.cols,
    };
    if !process.resize(size) {
        return Err(RpcError::invalid_request(format!(
            "process {id} has no terminal to resize (started without tty)"
        )));
    }
    Ok(())
}

/// `process/terminate`.
pub fn terminate(session: &Session, params: TerminateParams) -> TerminateResult {
    let running = session
        .process(&params.process_id)
        .is_some_and(|p| p.terminate());
    TerminateResult { running }
}
