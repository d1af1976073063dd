//! The job message: a launch encoded by the server and decoded by a warm
//! supervisor (`tty, cwd, arg0?, argc, argv…, envc, KEY=VALUE…, helper
//! kind (0: none), helper data`, each variable-length field with a
//! little-endian `u32` length prefix). The helper's descriptors follow the
//! four of every job.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use crate::process::launch::{HelperKind, LaunchSpec};
use crate::wire::Reader;

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// `tty, cwd, arg0?, argc, argv…, envc, KEY=VALUE…` with length prefixes.
pub(super) fn encode(spec: &LaunchSpec) -> Vec<u8> {
    let mut out = Vec::with_capacity(1024);
    out.push(u8::from(spec.tty.is_some()));
    push_bytes(&mut out, spec.cwd.as_os_str().as_bytes());
    match &spec.arg0 {
        Some(arg0) => {
            out.push(1);
            push_bytes(&mut out, arg0.as_bytes());
        }
        None => out.push(0),
    }
    out.extend_from_slice(&(spec.argv.len() as u32).to_le_bytes());
    for arg in &spec.argv {
        push_bytes(&mut out, arg.as_bytes());
    }
    out.extend_from_slice(&(spec.env.len() as u32).to_le_bytes());
    for (key, value) in &spec.env {
        let mut pair = key.as_bytes().to_vec();
        pair.push(b'=');
        pair.extend_from_slice(value.as_bytes());
        push_bytes(&mut out, &pair);
    }
    match &spec.helper {
        Some(helper) => {
            out.push(helper.kind.code());
            push_bytes(&mut out, &helper.data);
        }
        None => out.push(0),
    }
    out
}

/// A decoded job, in the zygote.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Job {
    pub tty: bool,
    pub cwd: PathBuf,
    pub arg0: Option<OsString>,
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// The sandbox helper's reuse role and its request.
    pub helper: Option<(HelperKind, Vec<u8>)>,
}

pub(super) fn decode(bytes: &[u8]) -> Option<Job> {
    let mut r = Reader(bytes);
    let tty = r.byte()? == 1;
    let cwd = PathBuf::from(OsString::from_vec(r.bytes()?));
    let arg0 = match r.byte()? {
        1 => Some(OsString::from_vec(r.bytes()?)),
        _ => None,
    };
    let argc = r.count()?;
    let mut argv = Vec::with_capacity(argc.min(4096));
    for _ in 0..argc {
        argv.push(OsString::from_vec(r.bytes()?));
    }
    let envc = r.count()?;
    let mut env = Vec::with_capacity(envc.min(4096));
    for _ in 0..envc {
        let pair = r.bytes()?;
        let eq = pair.iter().position(|&b| b == b'=')?;
        let value = pair.get(eq + 1..)?.to_vec();
        let mut key = pair;
        key.truncate(eq);
        env.push((OsString::from_vec(key), OsString::from_vec(value)));
    }
    let helper = match r.byte()? {
        0 => None,
        code => Some((HelperKind::from_code(code)?, r.bytes()?)),
    };
    Some(Job {
        tty,
        cwd,
        arg0,
        argv,
        env,
        helper,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_round_trip() {
        let spec = LaunchSpec {
            argv: vec!["sh".into(), "-c".into(), "echo =".into()],
            arg0: Some("x".into()),
            cwd: "/tmp".into(),
            env: vec![("A".into(), "b=c".into())],
            tty: Some(Default::default()),
            pipe_stdin: false,
            sandboxed: false,
            helper: None,
            standby: None,
        };
        let job = decode(&encode(&spec)).unwrap();
        assert_eq!(
            job,
            Job {
                tty: true,
                cwd: "/tmp".into(),
                arg0: Some("x".into()),
                argv: spec.argv.clone(),
                env: spec.env.clone(),
                helper: None,
            }
        );
        assert!(decode(&encode(&spec)[..5]).is_none());
        let with_helper = LaunchSpec {
            helper: Some(crate::process::launch::HelperJob {
                kind: HelperKind::Prepare,
                data: b"req".to_vec(),
                fds: Vec::new(),
            }),
            ..spec
        };
        let job = decode(&encode(&with_helper)).unwrap();
        assert_eq!(job.helper, Some((HelperKind::Prepare, b"req".to_vec())));
    }
}
