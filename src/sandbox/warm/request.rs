//! What the exec-server asks of the sandbox helper's reuse roles, and what
//! a keeper answers: encoded here, on both sides, as length-prefixed
//! binary (paths need not be UTF-8). The descriptors travel beside the
//! bytes, in the order the role documents.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

pub use super::command::{GO_AHEAD, MAX_GO_AHEAD_BYTES};
use super::launch::CommandSetup;
use crate::sandbox::glob::GlobExpansion;
use crate::sandbox::seccomp::SeccompMode;
use crate::wire::{Reader, Writer};

/// Run one command in a prepared sandbox. Descriptors: the prepared
/// sandbox's stale notice and its in-use marker (write ends; the helper
/// holds the marker until it exits), its user namespace, its mount
/// namespace, and its network namespace when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRequest {
    /// The digest the prepared sandbox was built for.
    pub expected: [u8; 32],
    /// The deny-glob matches now (`None`: the helper scans).
    pub expansion: Option<DenyMatches>,
    /// The server decides while the helper starts and sends its verdict
    /// ([`encode_verdict`]) on a pipe (the descriptor after the mount
    /// namespace); `false`: the helper decides.
    pub verdict_piped: bool,
}

/// A command the exec-server found a one-shot run would sandbox exactly
/// as the prepared sandbox is (`super::decide_ahead`): the helper only
/// launches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub setup: CommandSetup,
    /// What a one-shot run prints before the command starts.
    pub warnings: Vec<String>,
}

/// The deny-glob matches the server keeps current, with the patterns and
/// depth they are the matches of: the helper uses them only for exactly
/// the patterns and depth it resolves itself, and scans otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyMatches {
    pub patterns: Vec<String>,
    pub max_depth: Option<usize>,
    pub expansion: GlobExpansion,
}

/// Prepare a sandbox for the command line and keep it. Descriptors: the
/// keeper's end of its control socket, and the read end of the sandbox's
/// in-use marker (EOF once no command's helper holds it any more).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareRequest {
    /// The commands run on a terminal (`/dev/console`).
    pub console: bool,
    /// The deny-glob matches now (`None`: the keeper scans).
    pub expansion: Option<DenyMatches>,
}

/// Stand by in a prepared sandbox: enter it, make the next command's pid 1
/// with its own namespaces and mounts, and wait on the control socket for
/// the command ([`Go`]). Descriptors: the standby's end of the control
/// socket, the prepared sandbox's in-use marker (write end), its user
/// namespace, its mount namespace, and its network namespace when the
/// commands join it (restricted network).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StandbyRequest {
    /// The seccomp filter of the commands it takes: restricted (joins the
    /// prepared network namespace) or network enabled (the host's).
    pub seccomp: SeccompMode,
}

/// The command a standing-by pid 1 starts, with the whole environment it
/// runs with. Descriptors: its stdin, stdout and stderr. The command takes
/// every step but its exec, then waits on the control socket for the
/// server's go-ahead ([`go_ahead`]): the server may send the command while
/// it still decides, with the setup it expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Go {
    pub setup: CommandSetup,
    pub env: Vec<(OsString, OsString)>,
}

/// A standby's word on its control socket that its pid 1 is ready.
pub const STANDING_BY: u8 = 1;

/// The server's go-ahead for a standby's command: [`GO_AHEAD`], then the
/// decision's warnings, which the command writes on its stderr before it
/// execs, as a one-shot run prints them. `None` when they do not fit.
pub fn go_ahead(warnings: &[String]) -> Option<Vec<u8>> {
    let mut said = vec![GO_AHEAD];
    for line in warnings {
        said.extend_from_slice(line.as_bytes());
        said.push(b'\n');
    }
    (said.len() <= MAX_GO_AHEAD_BYTES).then_some(said)
}

/// A keeper's answer on its control socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareAnswer {
    /// Ready; the namespaces come with the message (user, mount, network).
    Ready { digest: [u8; 32], net: bool },
    /// This command line gets one-shot sandboxes only.
    NotReusable(String),
    /// Preparing failed.
    Failed(String),
}

fn write_matches(w: &mut Writer, matches: Option<&DenyMatches>) {
    let Some(matches) = matches else {
        w.byte(0);
        return;
    };
    w.byte(1);
    write_strings(w, &matches.patterns);
    match matches.max_depth {
        Some(depth) => {
            w.byte(1);
            w.count(depth);
        }
        None => w.byte(0),
    }
    w.count(matches.expansion.paths.len());
    for path in &matches.expansion.paths {
        w.bytes(path.as_os_str().as_bytes());
    }
    write_strings(w, &matches.expansion.skipped);
}

fn write_strings(w: &mut Writer, strings: &[String]) {
    w.count(strings.len());
    for string in strings {
        w.bytes(string.as_bytes());
    }
}

fn read_matches(r: &mut Reader) -> Option<Option<DenyMatches>> {
    if r.byte()? == 0 {
        return Some(None);
    }
    let patterns = read_strings(r)?;
    let max_depth = match r.byte()? {
        0 => None,
        _ => Some(r.count()?),
    };
    let mut paths = BTreeSet::new();
    for _ in 0..r.count()? {
        paths.insert(PathBuf::from(OsString::from_vec(r.bytes()?)));
    }
    let skipped = read_strings(r)?;
    Some(Some(DenyMatches {
        patterns,
        max_depth,
        expansion: GlobExpansion { paths, skipped },
    }))
}

fn read_strings(r: &mut Reader) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for _ in 0..r.count()? {
        out.push(String::from_utf8(r.bytes()?).ok()?);
    }
    Some(out)
}

fn write_os_string(w: &mut Writer, value: Option<&std::ffi::OsStr>) {
    match value {
        Some(value) => {
            w.byte(1);
            w.bytes(value.as_bytes());
        }
        None => w.byte(0),
    }
}

fn read_os_string(r: &mut Reader) -> Option<Option<OsString>> {
    match r.byte()? {
        0 => Some(None),
        1 => Some(Some(OsString::from_vec(r.bytes()?))),
        _ => None,
    }
}

fn write_seccomp(w: &mut Writer, mode: SeccompMode) {
    w.byte(match mode {
        SeccompMode::Restricted => 0,
        SeccompMode::ProxyRouted => 1,
        SeccompMode::NetworkEnabled => 2,
    });
}

fn read_seccomp(r: &mut Reader) -> Option<SeccompMode> {
    match r.byte()? {
        0 => Some(SeccompMode::Restricted),
        1 => Some(SeccompMode::ProxyRouted),
        2 => Some(SeccompMode::NetworkEnabled),
        _ => None,
    }
}

fn write_setup(w: &mut Writer, setup: &CommandSetup) {
    w.count(setup.command.len());
    for word in &setup.command {
        w.bytes(word.as_bytes());
    }
    write_os_string(w, setup.arg0.as_deref());
    w.bytes(setup.chdir.as_bytes());
    w.bytes(setup.command_cwd.as_os_str().as_bytes());
    write_seccomp(w, setup.seccomp);
    w.byte(u8::from(setup.console));
}

fn read_setup(r: &mut Reader) -> Option<CommandSetup> {
    let mut command = Vec::new();
    for _ in 0..r.count()? {
        command.push(OsString::from_vec(r.bytes()?));
    }
    let arg0 = read_os_string(r)?;
    let chdir = OsString::from_vec(r.bytes()?);
    let command_cwd = PathBuf::from(OsString::from_vec(r.bytes()?));
    let seccomp = read_seccomp(r)?;
    let console = r.byte()? == 1;
    Some(CommandSetup {
        command,
        arg0,
        chdir,
        command_cwd,
        seccomp,
        console,
    })
}

fn write_decided(w: &mut Writer, decided: Option<&Decided>) {
    let Some(Decided { setup, warnings }) = decided else {
        w.byte(0);
        return;
    };
    w.byte(1);
    write_setup(w, setup);
    write_strings(w, warnings);
}

fn read_decided(r: &mut Reader) -> Option<Option<Decided>> {
    if r.byte()? == 0 {
        return Some(None);
    }
    let setup = read_setup(r)?;
    let warnings = read_strings(r)?;
    Some(Some(Decided { setup, warnings }))
}

/// The server's verdict on a piped launch: the command as decided, or
/// `None`: run it on a one-shot sandbox (the prepared one is outdated, or
/// the server leaves it to a one-shot run to fail and say why).
pub fn encode_verdict(decided: Option<&Decided>) -> Vec<u8> {
    let mut w = Writer::default();
    write_decided(&mut w, decided);
    w.0
}

/// The verdict [`encode_verdict`] wrote; anything else (nothing at all
/// included: the server went away) reads as a one-shot run.
pub fn decode_verdict(bytes: &[u8]) -> Option<Decided> {
    let mut r = Reader(bytes);
    let decided = read_decided(&mut r)?;
    r.end()?;
    decided
}

impl LaunchRequest {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.0.extend_from_slice(&self.expected);
        write_matches(&mut w, self.expansion.as_ref());
        w.byte(u8::from(self.verdict_piped));
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Option<LaunchRequest> {
        let mut r = Reader(bytes);
        let expected = r.array::<32>()?;
        let expansion = read_matches(&mut r)?;
        let verdict_piped = match r.byte()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        r.end()?;
        Some(LaunchRequest {
            expected,
            expansion,
            verdict_piped,
        })
    }
}

impl PrepareRequest {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(vec![u8::from(self.console)]);
        write_matches(&mut w, self.expansion.as_ref());
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Option<PrepareRequest> {
        let mut r = Reader(bytes);
        let console = r.byte()? == 1;
        let expansion = read_matches(&mut r)?;
        r.end()?;
        Some(PrepareRequest { console, expansion })
    }
}

impl StandbyRequest {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        write_seccomp(&mut w, self.seccomp);
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Option<StandbyRequest> {
        let mut r = Reader(bytes);
        let seccomp = read_seccomp(&mut r)?;
        r.end()?;
        Some(StandbyRequest { seccomp })
    }
}

impl Go {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        write_setup(&mut w, &self.setup);
        w.count(self.env.len());
        for (key, value) in &self.env {
            w.bytes(key.as_bytes());
            w.bytes(value.as_bytes());
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Option<Go> {
        let mut r = Reader(bytes);
        let setup = read_setup(&mut r)?;
        let count = r.count()?;
        let mut env = Vec::with_capacity(count.min(4096));
        for _ in 0..count {
            let key = OsString::from_vec(r.bytes()?);
            let value = OsString::from_vec(r.bytes()?);
            env.push((key, value));
        }
        r.end()?;
        Some(Go { setup, env })
    }
}

impl PrepareAnswer {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            PrepareAnswer::Ready { digest, net } => {
                w.byte(1);
                w.0.extend_from_slice(digest);
                w.byte(u8::from(*net));
            }
            PrepareAnswer::NotReusable(why) => {
                w.byte(2);
                w.bytes(why.as_bytes());
            }
            PrepareAnswer::Failed(why) => {
                w.byte(3);
                w.bytes(why.as_bytes());
            }
        }
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Option<PrepareAnswer> {
        let mut r = Reader(bytes);
        let answer = match r.byte()? {
            1 => PrepareAnswer::Ready {
                digest: r.array::<32>()?,
                net: r.byte()? == 1,
            },
            2 => PrepareAnswer::NotReusable(String::from_utf8_lossy(&r.bytes()?).into_owned()),
            3 => PrepareAnswer::Failed(String::from_utf8_lossy(&r.bytes()?).into_owned()),
            _ => return None,
        };
        r.end()?;
        Some(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_round_trip_and_refuse_garbage() {
        let expansion = GlobExpansion {
            paths: [PathBuf::from(OsString::from_vec(b"/w/\xff.env".to_vec()))]
                .into_iter()
                .collect(),
            skipped: vec!["/**/*.key".into()],
        };
        let launch = LaunchRequest {
            expected: [7; 32],
            expansion: Some(DenyMatches {
                patterns: vec!["**/*.env".into(), "/**/*.key".into()],
                max_depth: Some(3),
                expansion,
            }),
            verdict_piped: false,
        };
        assert_eq!(
            LaunchRequest::decode(&launch.encode()),
            Some(launch.clone())
        );
        let piped = LaunchRequest {
            expected: [3; 32],
            expansion: None,
            verdict_piped: true,
        };
        assert_eq!(LaunchRequest::decode(&piped.encode()), Some(piped));
        let decided = Decided {
            setup: CommandSetup {
                command: vec!["sh".into(), OsString::from_vec(b"-c\xff".to_vec())],
                arg0: Some("bash".into()),
                chdir: "/w".into(),
                command_cwd: "/w/sub".into(),
                seccomp: SeccompMode::NetworkEnabled,
                console: true,
            },
            warnings: vec!["codex-linux-sandbox: warning: x".into()],
        };
        let verdict = encode_verdict(Some(&decided));
        assert_eq!(decode_verdict(&verdict), Some(decided.clone()));
        assert_eq!(decode_verdict(&encode_verdict(None)), None);
        assert_eq!(decode_verdict(&[]), None, "nothing said: one-shot");
        assert_eq!(decode_verdict(&verdict[..verdict.len() - 1]), None);
        let mut bad_mode = verdict.clone();
        // The seccomp mode: before the console byte and the warnings (a
        // count, then one length and its text).
        let warnings = 4 + 4 + "codex-linux-sandbox: warning: x".len();
        let at = bad_mode.len() - warnings - 2;
        bad_mode[at] = 9;
        assert_eq!(decode_verdict(&bad_mode), None);
        let mut longer = launch.encode();
        longer.push(0);
        assert_eq!(LaunchRequest::decode(&longer), None);
        assert_eq!(LaunchRequest::decode(&launch.encode()[..40]), None);
        let prepare = PrepareRequest {
            console: true,
            expansion: None,
        };
        assert_eq!(PrepareRequest::decode(&prepare.encode()), Some(prepare));
        let prepare = PrepareRequest {
            console: false,
            expansion: launch.expansion.clone().map(|mut matches| {
                matches.max_depth = None;
                matches
            }),
        };
        assert_eq!(PrepareRequest::decode(&prepare.encode()), Some(prepare));
        for answer in [
            PrepareAnswer::Ready {
                digest: [1; 32],
                net: true,
            },
            PrepareAnswer::NotReusable("why".into()),
            PrepareAnswer::Failed("bad".into()),
        ] {
            assert_eq!(PrepareAnswer::decode(&answer.encode()), Some(answer));
        }
        assert_eq!(PrepareAnswer::decode(&[9]), None);
        let standby = StandbyRequest {
            seccomp: SeccompMode::Restricted,
        };
        assert_eq!(StandbyRequest::decode(&standby.encode()), Some(standby));
        assert_eq!(StandbyRequest::decode(&[7]), None);
        assert_eq!(StandbyRequest::decode(&[0, 0]), None);
        let go = Go {
            setup: decided.setup.clone(),
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                (OsString::from_vec(b"K\xfe".to_vec()), "a=b".into()),
            ],
        };
        let said = go.encode();
        assert_eq!(Go::decode(&said), Some(go));
        assert_eq!(Go::decode(&said[..said.len() - 1]), None);
        assert_eq!(Go::decode(&[]), None, "no command");
        assert_eq!(
            go_ahead(&decided.warnings).as_deref(),
            Some(&b"\x01codex-linux-sandbox: warning: x\n"[..])
        );
        assert_eq!(go_ahead(&[]), Some(vec![GO_AHEAD]));
        assert_eq!(go_ahead(&["w".repeat(MAX_GO_AHEAD_BYTES)]), None);
    }
}
