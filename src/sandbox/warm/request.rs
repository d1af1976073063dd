//! What the exec-server asks of the sandbox helper's reuse roles, and what
//! a keeper answers: encoded here, on both sides, as length-prefixed
//! binary (paths need not be UTF-8). The descriptors travel beside the
//! bytes, in the order the role documents.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use crate::sandbox::glob::GlobExpansion;
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

impl LaunchRequest {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.0.extend_from_slice(&self.expected);
        write_matches(&mut w, self.expansion.as_ref());
        w.0
    }

    pub fn decode(bytes: &[u8]) -> Option<LaunchRequest> {
        let mut r = Reader(bytes);
        let expected = r.array::<32>()?;
        let expansion = read_matches(&mut r)?;
        r.end()?;
        Some(LaunchRequest {
            expected,
            expansion,
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
        };
        assert_eq!(
            LaunchRequest::decode(&launch.encode()),
            Some(launch.clone())
        );
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
    }
}
