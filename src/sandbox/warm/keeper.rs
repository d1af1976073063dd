//! The keeper of a prepared sandbox: the sandbox helper in its `Prepare`
//! role, a process outside the sandbox that decides the sandbox as a
//! one-shot run would ([`super::plan::decide`]), registers the mount points
//! it creates on the host (`sandbox::state`, as a one-shot run does for its
//! lifetime), builds the namespaces with the built-in launcher's setup
//! (`bwrap::prepared`) and hands them to the exec-server over its control
//! socket. It then waits: when the server closes the socket (the sandbox
//! is dropped, its session ended, or the server died), it removes the
//! mount points nobody else uses and exits. Killed outright, it leaves them
//! to the next run's janitor, as a killed one-shot helper does.
//!
//! The digest it answers is that of the plan decided once the sandbox
//! stands, mount points included: what a command's helper decides later
//! when nothing changed. The host paths the plan names are checked not to
//! have changed while the sandbox was built.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

use super::plan::{self, fingerprint, named_host_paths};
use super::request::{PrepareAnswer, PrepareRequest};
use crate::bwrap::prepared::{self, PrepareOptions, PreparedNamespaces};
use crate::sandbox::cli::{Args, PREFIX};
use crate::sandbox::orchestrate;
use crate::sandbox::read_only_links;
use crate::sandbox::state::{self, Registration};
use crate::sys::scm;

/// The keeper's life; returns its exit status.
pub fn run(argv: &[OsString], request: &[u8], control: OwnedFd, in_use: OwnedFd) -> i32 {
    let prepared = match (
        crate::cli::parse::<Args>(argv, PREFIX),
        PrepareRequest::decode(request),
    ) {
        (Ok(args), Some(request)) => prepare(&args, &request),
        (Err(crate::cli::ParseExit::Print(text) | crate::cli::ParseExit::Usage(text)), _) => {
            Err(PrepareAnswer::Failed(text))
        }
        (_, None) => Err(PrepareAnswer::Failed("malformed request".into())),
    };
    let (namespaces, digest, registration) = match prepared {
        Ok(ready) => ready,
        Err(answer) => {
            let _ = scm::send_with_fds(control.as_raw_fd(), &answer.encode(), &[]);
            return 0;
        }
    };
    let answer = PrepareAnswer::Ready {
        digest,
        net: namespaces.net.is_some(),
    };
    let mut fds = vec![namespaces.user.as_raw_fd(), namespaces.mnt.as_raw_fd()];
    fds.extend(namespaces.net.as_ref().map(AsRawFd::as_raw_fd));
    if scm::send_with_fds(control.as_raw_fd(), &answer.encode(), &fds).is_ok() {
        drop(namespaces);
        // Until the server lets go (EOF) or is gone.
        let mut buf = [0u8; 64];
        while let Ok(Some(_)) = scm::recv_with_fds(control.as_raw_fd(), &mut buf) {}
    }
    drop(control);
    // Until no command of the sandbox is left: a mask of theirs would
    // go with a mount point removed from the host.
    let _ = crate::sys::fds::read_all(in_use.as_raw_fd());
    registration.cleanup();
    0
}

/// Decides, registers, builds, checks; the namespaces, the digest and the
/// registration of the mount points, or the answer saying why not.
fn prepare(
    args: &Args,
    request: &PrepareRequest,
) -> Result<(PreparedNamespaces, [u8; 32], Registration), PrepareAnswer> {
    // As a one-shot run: what killed helpers left goes before the host is
    // looked at.
    if let Ok(dir) = state::state_dir() {
        state::tidy(&dir);
    }
    let env = plan::DecisionEnv::of_process();
    let decide = || match plan::decide(args, &env, request.expansion.as_ref(), request.console) {
        Ok(Ok(plan)) => Ok(plan),
        Ok(Err(why)) => Err(PrepareAnswer::NotReusable(why.to_string())),
        Err(failure) => Err(PrepareAnswer::Failed(failure.message)),
    };
    let failed = |what: String| PrepareAnswer::Failed(what);
    if orchestrate::is_wsl1() {
        return Err(PrepareAnswer::NotReusable(
            "WSL1 cannot create user namespaces".into(),
        ));
    }
    let plan = decide()?;
    let registration = state::register(
        &plan.state_dir,
        &plan.built.synthetic_targets,
        &read_only_links::protected_metadata_paths(&plan.prepared.host.writable_roots),
    )
    .map_err(|e| failed(e.to_string()))?;
    let built = build(&plan.built, request.console);
    let outcome = built.and_then(|namespaces| {
        let after = decide()?;
        Ok((namespaces, after.digest))
    });
    match outcome {
        Ok((namespaces, digest)) => Ok((namespaces, digest, registration)),
        Err(answer) => {
            registration.cleanup();
            Err(answer)
        }
    }
}

/// Builds the sandbox part of `built` with the built-in launcher's setup,
/// checking that the host paths it names did not change meanwhile.
fn build(
    built: &crate::sandbox::bwrap_args::BwrapCommand,
    console: bool,
) -> Result<PreparedNamespaces, PrepareAnswer> {
    let failed = |what: String| PrepareAnswer::Failed(what);
    let named: Vec<PathBuf> = named_host_paths(built);
    let before = fingerprint(named.iter().map(PathBuf::as_path));
    let mut masks = Vec::with_capacity(built.fd_count());
    for _ in 0..built.fd_count() {
        let null = std::fs::File::open("/dev/null").map_err(|e| failed(e.to_string()))?;
        masks.push(OwnedFd::from(null));
    }
    let numbers: Vec<i32> = masks.iter().map(AsRawFd::as_raw_fd).collect();
    let mut argv = built.render(&numbers);
    argv.truncate(built.tail_start);
    argv.extend(["--".into(), "true".into()]);
    let namespaces = prepared::prepare(&argv, PrepareOptions { console })
        .map_err(|e| failed(format!("bwrap: {e}")))?;
    drop(masks);
    if fingerprint(named.iter().map(PathBuf::as_path)) != before {
        return Err(failed(
            "the host paths of the sandbox changed while it was built".into(),
        ));
    }
    Ok(namespaces)
}
