//! The child's environment (docs/protocol.md): `env` alone is the whole environment;
//! with `envPolicy` the reference's inherit → default excludes → exclude →
//! set → includeOnly pipeline runs over the server's environment and `env` is
//! laid on top. Pure: the server environment is passed in.

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::protocol::process::{EnvInherit, EnvPolicy};

/// Variables kept by `inherit: "core"` (matched case-insensitively).
const CORE_VARS: &[&str] = &[
    "PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME",
    "USER",
];

/// Names dropped unless `ignoreDefaultExcludes`.
const DEFAULT_EXCLUDES: &[&str] = &["*KEY*", "*SECRET*", "*TOKEN*"];

/// Builds the child's environment.
pub fn child_env(
    env: &BTreeMap<String, String>,
    policy: Option<&EnvPolicy>,
    server_env: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let mut out: BTreeMap<OsString, OsString> = BTreeMap::new();
    if let Some(policy) = policy {
        for (name, value) in server_env {
            let keep = match policy.inherit {
                EnvInherit::All => true,
                EnvInherit::None => false,
                EnvInherit::Core => name
                    .to_str()
                    .is_some_and(|n| CORE_VARS.iter().any(|c| c.eq_ignore_ascii_case(n))),
            };
            if keep {
                out.insert(name, value);
            }
        }
        let matches_any = |name: &OsString, patterns: &[&str]| {
            let name = name.to_string_lossy();
            patterns.iter().any(|p| wildcard_match(p, &name))
        };
        if !policy.ignore_default_excludes {
            out.retain(|name, _| !matches_any(name, DEFAULT_EXCLUDES));
        }
        let excludes: Vec<&str> = policy.exclude.iter().map(String::as_str).collect();
        out.retain(|name, _| !matches_any(name, &excludes));
        for (name, value) in &policy.set {
            out.insert(name.into(), value.into());
        }
        if !policy.include_only.is_empty() {
            let include: Vec<&str> = policy.include_only.iter().map(String::as_str).collect();
            out.retain(|name, _| matches_any(name, &include));
        }
    }
    for (name, value) in env {
        out.insert(name.into(), value.into());
    }
    out.into_iter().collect()
}

/// Case-insensitive glob with `*` (any run) and `?` (one character).
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().flat_map(char::to_lowercase).collect();
    let t: Vec<char> = text.chars().flat_map(char::to_lowercase).collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("API_KEY", "k"),
            ("GH_TOKEN", "t"),
            ("FOO", "f"),
            ("BAR", "b"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        env.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn env_without_policy_is_the_whole_environment() {
        let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
        assert_eq!(names(&child_env(&env, None, server())), ["A"]);
    }

    #[test]
    fn core_inherit_drops_secrets_and_env_wins() {
        let env = BTreeMap::from([("HOME".to_string(), "/h".to_string())]);
        let policy = EnvPolicy::default();
        let out = child_env(&env, Some(&policy), server());
        assert_eq!(names(&out), ["HOME", "PATH"]);
        assert_eq!(out[0].1, OsString::from("/h"));
    }

    #[test]
    fn all_inherit_applies_excludes_set_and_include_only() {
        let policy = EnvPolicy {
            inherit: EnvInherit::All,
            ignore_default_excludes: false,
            exclude: vec!["b?r".into()],
            set: BTreeMap::from([("NEW".into(), "n".into())]),
            include_only: vec!["*o*".into(), "new".into(), "path".into()],
        };
        let out = child_env(&BTreeMap::new(), Some(&policy), server());
        assert_eq!(names(&out), ["FOO", "HOME", "NEW", "PATH"]);
        let policy = EnvPolicy {
            inherit: EnvInherit::All,
            ignore_default_excludes: true,
            ..EnvPolicy::default()
        };
        assert_eq!(
            child_env(&BTreeMap::new(), Some(&policy), server()).len(),
            6
        );
    }

    #[test]
    fn wildcards_are_case_insensitive() {
        assert!(wildcard_match("*key*", "MY_API_KEY_X"));
        assert!(wildcard_match("a?c", "ABC"));
        assert!(!wildcard_match("a?c", "abbc"));
        assert!(wildcard_match("*", ""));
    }
}
