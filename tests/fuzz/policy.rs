//! The permission-profile and legacy policy JSON (`policy`,
//! `protocol::sandbox`): every document is accepted or refused without a
//! panic; what is accepted matches the shipped schema, serializes and parses
//! back to the same value, and resolves; deny globs match in bounded time.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use codexbox::glob_pattern::glob_match;
use codexbox::policy::{FileSystemSandboxPolicy, PermissionProfile, SandboxPolicy};
use codexbox::protocol::sandbox::{FileSystemSandboxContext, SandboxContextError};
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::common::fuzz;
use crate::common::schema::{load, validate};
use crate::gen::{self, Pool};

/// Paths a policy may name, all valid in some dialect; nothing here acts
/// on them.
fn pool() -> Pool {
    Pool {
        paths: [
            "/",
            "/tmp",
            "/srv/app",
            "/srv/app/../x/./y",
            "file:///srv/a%20b",
            "file://localhost/etc",
            "file:///C%3A/x",
            "/C:/x",
            "/nonexistent/fuzz",
        ]
        .map(str::to_owned)
        .to_vec(),
        values: vec![(
            "subpath",
            [".git", "a/b", "./x", ""].map(Value::from).to_vec(),
        )],
        ..Pool::default()
    }
}

/// Documents for the type of schema file `name` (see [`gen::documents`]).
fn documents(name: &str) -> BoxedStrategy<(Value, bool)> {
    gen::documents(&load(name), &pool())
}

/// A generated document valid against the shipped schema is accepted; an
/// accepted document matches it, and the value it decodes to serializes
/// and decodes back to itself.
fn accepted_round_trips<T>(
    schema: &Value,
    (document, mutated): &(Value, bool),
) -> Result<Option<T>, TestCaseError>
where
    T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug + Accept,
{
    let valid = validate(schema, document);
    let decoded = serde_json::from_value::<T>(document.clone())
        .map_err(|err| err.to_string())
        .and_then(|value| value.accept().map(|()| value));
    let value = match decoded {
        Ok(value) => value,
        Err(err) if !mutated && valid.is_ok() => {
            return Err(TestCaseError::fail(format!(
                "valid against its schema but refused: {err}\n{document}"
            )))
        }
        Err(_) => return Ok(None),
    };
    if let Err(err) = valid {
        if !crate::common::schema::is_serde_leniency(&err) {
            return Err(TestCaseError::fail(format!(
                "accepted but not valid against its schema: {err}\n{document}"
            )));
        }
    }
    let text = serde_json::to_string(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: T = serde_json::from_str(&text)
        .map_err(|e| TestCaseError::fail(format!("{text} does not decode back: {e}")))?;
    prop_assert_eq!(&back, &value, "{}", text);
    Ok(Some(value))
}

/// The checks a receiver makes after decoding, before it uses the value.
trait Accept {
    fn accept(&self) -> Result<(), String> {
        Ok(())
    }
}

impl Accept for PermissionProfile {}
impl Accept for SandboxPolicy {}
impl Accept for FileSystemSandboxPolicy {}

/// A context needs `permissions` or `sandboxPolicy` (checked when resolved).
impl Accept for FileSystemSandboxContext {
    fn accept(&self) -> Result<(), String> {
        match self.resolve() {
            Err(SandboxContextError::MissingPermissions) => {
                Err(SandboxContextError::MissingPermissions.to_string())
            }
            _ => Ok(()),
        }
    }
}

#[test]
fn permission_profiles_round_trip_and_match_their_schema() {
    let schema = load("PermissionProfile.json");
    fuzz::run(
        "policy_profile",
        512,
        documents("PermissionProfile.json"),
        |document| {
            let Some(profile) = accepted_round_trips::<PermissionProfile>(&schema, &document)?
            else {
                return Ok(());
            };
            // The text form (`--permission-profile`) reads the same.
            let parsed = PermissionProfile::parse(&profile.to_json())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&parsed, &profile);
            let (fs, network) = profile.to_runtime();
            let _ = PermissionProfile::from_runtime(&fs, network);
            let _ = fs
                .resolve(Path::new("/nonexistent/fuzz"), &[])
                .dropped_grants();
            let _ = profile.materialize_project_roots(&[Path::new("/srv/app").to_path_buf()]);
            Ok(())
        },
    );
}

#[test]
fn legacy_and_runtime_policies_round_trip_and_match_their_schemas() {
    let legacy = load("SandboxPolicy.json");
    let runtime = load("FileSystemSandboxPolicy.json");
    let strategy = (
        documents("SandboxPolicy.json"),
        documents("FileSystemSandboxPolicy.json"),
    );
    fuzz::run("policy_legacy", 512, strategy, |(old, split)| {
        if let Some(policy) = accepted_round_trips::<SandboxPolicy>(&legacy, &old)? {
            let profile = PermissionProfile::from_legacy(&policy);
            let _ = PermissionProfile::from_legacy_for_cwd(&policy, Path::new("/srv/app"));
            let _ = profile.to_runtime();
        }
        if let Some(policy) = accepted_round_trips::<FileSystemSandboxPolicy>(&runtime, &split)? {
            let _ = policy.resolve(Path::new("/srv/app"), &[]).dropped_grants();
        }
        Ok(())
    });
}

#[test]
fn sandbox_contexts_resolve_or_refuse_and_match_their_schema() {
    let schema = load("FileSystemSandboxContext.json");
    let exe_dirs = [Path::new("/opt/codexbox").to_path_buf()];
    fuzz::run(
        "policy_context",
        512,
        documents("FileSystemSandboxContext.json"),
        |document| {
            let Some(context) =
                accepted_round_trips::<FileSystemSandboxContext>(&schema, &document)?
            else {
                return Ok(());
            };
            if let Ok(resolved) = context.resolve() {
                let _ = resolved.requires_helper();
                let _ = resolved.helper_profile(&exe_dirs);
                let _ = resolved.process_profile(&exe_dirs);
                if resolved.has_dynamic_entries() && resolved.cwd.is_none() {
                    prop_assert!(resolved.helper_cwd().is_err());
                }
            }
            Ok(())
        },
    );
}

/// Profile text as `--permission-profile` takes it: a name, JSON, junk.
#[test]
fn profile_text_is_a_name_a_document_or_an_error() {
    let text = prop_oneof![
        prop::sample::select(vec![
            "read-only",
            ":workspace",
            "workspace-write",
            " danger-full-access ",
            ":nope",
            "{",
            "{}",
            "{\"type\":\"managed\"}",
            "{\"type\":\"disabled\",\"type\":\"external\"}",
        ])
        .prop_map(str::to_owned),
        documents("PermissionProfile.json").prop_map(|(v, _)| v.to_string()),
        "\\PC{0,40}",
    ];
    fuzz::run("policy_text", 512, text, |text| {
        if let Ok(profile) = PermissionProfile::parse(&text) {
            prop_assert_eq!(
                PermissionProfile::parse(&profile.to_json()).ok(),
                Some(profile)
            );
        }
        Ok(())
    });
}

/// The glob matcher as it was first written: plain backtracking. Exact but
/// exponential, so only fed short inputs here, as the oracle of the
/// matcher the product uses.
fn backtracking_match(glob: &str, text: &str) -> bool {
    fn class_end(p: &[char], start: usize) -> Option<usize> {
        let mut i = start + 1;
        if i < p.len() && (p[i] == '!' || p[i] == '^') {
            i += 1;
        }
        if i < p.len() && p[i] == ']' {
            i += 1;
        }
        (i..p.len()).find(|&j| p[j] == ']')
    }
    fn class_matches(class: &[char], c: char) -> bool {
        let (negate, body) = match class.first() {
            Some('!' | '^') => (true, &class[1..]),
            _ => (false, class),
        };
        let mut found = false;
        let mut i = 0;
        while i < body.len() {
            if i + 2 < body.len() && body[i + 1] == '-' {
                found |= body[i] <= c && c <= body[i + 2];
                i += 3;
            } else {
                found |= body[i] == c;
                i += 1;
            }
        }
        found != negate
    }
    fn from(p: &[char], pi: usize, t: &[char], ti: usize) -> bool {
        let Some(&c) = p.get(pi) else {
            return ti == t.len();
        };
        match c {
            '*' if p.get(pi + 1) == Some(&'*') => {
                let mut rest = pi + 2;
                if p.get(rest) == Some(&'/') {
                    rest += 1;
                }
                if rest >= p.len() {
                    return true;
                }
                let mut k = ti;
                loop {
                    if from(p, rest, t, k) {
                        return true;
                    }
                    match t[k..].iter().position(|c| *c == '/') {
                        Some(off) => k += off + 1,
                        None => return false,
                    }
                }
            }
            '*' => (ti..=t.len())
                .take_while(|&k| k == ti || t[k - 1] != '/')
                .any(|k| from(p, pi + 1, t, k)),
            '?' => ti < t.len() && t[ti] != '/' && from(p, pi + 1, t, ti + 1),
            '[' => match class_end(p, pi) {
                Some(end) => {
                    ti < t.len()
                        && t[ti] != '/'
                        && class_matches(&p[pi + 1..end], t[ti])
                        && from(p, end + 1, t, ti + 1)
                }
                None => t.get(ti) == Some(&'[') && from(p, pi + 1, t, ti + 1),
            },
            '\\' if pi + 1 < p.len() => t.get(ti) == Some(&p[pi + 1]) && from(p, pi + 2, t, ti + 1),
            c => t.get(ti) == Some(&c) && from(p, pi + 1, t, ti + 1),
        }
    }
    let pattern: Vec<char> = if glob.contains('/') {
        glob.trim_start_matches('/').chars().collect()
    } else {
        format!("**/{glob}").chars().collect()
    };
    let text: Vec<char> = text.chars().collect();
    from(&pattern, 0, &text, 0)
}

fn glob_text(alphabet: &'static str, max: usize) -> BoxedStrategy<String> {
    let chars: Vec<char> = alphabet.chars().collect();
    prop::collection::vec(prop::sample::select(chars), 0..max)
        .prop_map(|chars| chars.into_iter().collect())
        .boxed()
}

#[test]
fn deny_globs_match_like_the_backtracking_definition() {
    let strategy = (glob_text("ab/*?[]!^-\\.", 10), glob_text("ab/.[-", 12));
    fuzz::run("policy_glob", 1024, strategy, |(glob, text)| {
        prop_assert_eq!(
            glob_match(&glob, &text),
            backtracking_match(&glob, &text),
            "glob {:?} text {:?}",
            glob,
            text
        );
        Ok(())
    });
}

/// Runs `work` on its own thread (default stack) and waits for it with a
/// generous safety deadline: an exponential or unbounded matcher never
/// answers, a linear one answers at once.
fn finishes<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the glob matcher did not finish")
}

/// `*a*a*a…b` against `aaa…`: plain backtracking tries every split.
#[test]
fn a_glob_of_many_stars_matches_in_bounded_time() {
    let glob = format!("{}b", "*a".repeat(30));
    let text = "a".repeat(60);
    assert!(!finishes(move || glob_match(&glob, &text)));
    let glob = format!("{}x", "**/".repeat(40));
    let text = "a/".repeat(60);
    assert!(!finishes(move || glob_match(&glob, &text)));
}

/// A policy's glob may be as long as a message: matching it must not
/// recurse once per pattern character.
#[test]
fn a_very_long_glob_does_not_exhaust_the_stack() {
    let glob = "*?".repeat(200_000);
    let text = "a".repeat(64);
    assert!(!finishes(move || glob_match(&glob, &text)));
}
