//! Who may call the registry: bearer tokens from `--tokens FILE`, one
//! `TOKEN ENVIRONMENT-ID|* executor|harness|both|metrics` per line, `#`
//! comments (`metrics` reads `GET /metrics` and nothing else; it covers
//! every environment, so only a `*` line grants it).
//! The file is parsed whole (a bad line names its number and nothing
//! changes) and can be reloaded while serving (SIGHUP). Without a token
//! file the table holds the two tokens the rendezvous generated
//! ([`TokenTable::from_entries`]); only `--insecure-no-auth` lets every
//! caller in.

use std::path::Path;

use crate::server::transport::http::{bearer_token, token_matches};

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Executor,
    Harness,
    /// Executor and harness.
    Both,
    /// Reads the metrics of the whole rendezvous.
    Metrics,
}

impl Grant {
    fn allows(self, wanted: Grant) -> bool {
        self == wanted || (self == Grant::Both && wanted != Grant::Metrics)
    }
}

/// The environment a metrics check names: only a `*` line matches it.
pub const EVERY_ENVIRONMENT: &str = "*";

/// One line of the token file.
#[derive(Clone, PartialEq, Eq)]
struct Entry {
    token: String,
    /// `None` for `*`.
    environment: Option<String>,
    grant: Grant,
}

/// Why the token file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: expected `TOKEN ENVIRONMENT-ID|* executor|harness|both|metrics`")]
    Syntax { path: String, line: usize },
}

/// Why a caller was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No token, or one nobody issued (401).
    Unauthenticated,
    /// A valid token without this environment or role (403).
    Forbidden,
}

/// The parsed token file.
#[derive(Clone, Default)]
pub struct TokenTable {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenTable({} tokens)", self.entries.len())
    }
}

impl TokenTable {
    /// A table of `(token, grant)` pairs valid for every environment.
    pub fn from_entries(entries: Vec<(String, Grant)>) -> Self {
        let entries = entries
            .into_iter()
            .map(|(token, grant)| Entry {
                token,
                environment: None,
                grant,
            })
            .collect();
        Self { entries }
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses the text of a token file.
    pub fn parse(text: &str, path: &str) -> Result<Self, TokenFileError> {
        let mut entries = Vec::new();
        for (number, line) in (1..).zip(text.lines()) {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let syntax = || TokenFileError::Syntax {
                path: path.to_owned(),
                line: number,
            };
            let [token, environment, grant] = words[..] else {
                return Err(syntax());
            };
            let grant = match grant {
                "executor" => Grant::Executor,
                "harness" => Grant::Harness,
                "both" => Grant::Both,
                "metrics" => Grant::Metrics,
                _ => return Err(syntax()),
            };
            entries.push(Entry {
                token: token.to_owned(),
                environment: (environment != "*").then(|| environment.to_owned()),
                grant,
            });
        }
        Ok(Self { entries })
    }

    /// Whether `authorization` (the header value) may act as `wanted` on
    /// `environment_id`. Every entry is compared in constant time.
    pub fn check(
        &self,
        authorization: Option<&str>,
        environment_id: &str,
        wanted: Grant,
    ) -> Result<(), Refusal> {
        let presented = authorization
            .and_then(bearer_token)
            .ok_or(Refusal::Unauthenticated)?;
        let mut known = false;
        let mut allowed = false;
        for entry in &self.entries {
            if token_matches(&entry.token, presented) {
                known = true;
                let env_ok = entry
                    .environment
                    .as_deref()
                    .is_none_or(|env| env == environment_id);
                allowed |= env_ok && entry.grant.allows(wanted);
            }
        }
        match (known, allowed) {
            (_, true) => Ok(()),
            (true, false) => Err(Refusal::Forbidden),
            (false, false) => Err(Refusal::Unauthenticated),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
# who may do what
exec-tok env-1 executor
harn-tok env-1 harness   # trailing comment
ops-tok  *     both
scrape   *     metrics
scoped   env-1 metrics
";

    #[test]
    fn tokens_grant_roles_per_environment() {
        let table = TokenTable::parse(FILE, "tokens").unwrap();
        let check = |token: &str, env: &str, grant| {
            table.check(Some(&format!("Bearer {token}")), env, grant)
        };
        assert_eq!(check("exec-tok", "env-1", Grant::Executor), Ok(()));
        assert_eq!(
            check("exec-tok", "env-1", Grant::Harness),
            Err(Refusal::Forbidden)
        );
        assert_eq!(
            check("exec-tok", "env-2", Grant::Executor),
            Err(Refusal::Forbidden)
        );
        assert_eq!(check("harn-tok", "env-1", Grant::Harness), Ok(()));
        assert_eq!(check("ops-tok", "any", Grant::Executor), Ok(()));
        assert_eq!(check("ops-tok", "any", Grant::Harness), Ok(()));
        assert_eq!(
            check("ops-tok", EVERY_ENVIRONMENT, Grant::Metrics),
            Err(Refusal::Forbidden)
        );
        assert_eq!(check("scrape", EVERY_ENVIRONMENT, Grant::Metrics), Ok(()));
        assert_eq!(
            check("scrape", "env-1", Grant::Harness),
            Err(Refusal::Forbidden)
        );
        assert_eq!(
            check("scoped", EVERY_ENVIRONMENT, Grant::Metrics),
            Err(Refusal::Forbidden)
        );
        assert_eq!(
            check("nope", "env-1", Grant::Harness),
            Err(Refusal::Unauthenticated)
        );
        assert_eq!(
            table.check(None, "env-1", Grant::Harness),
            Err(Refusal::Unauthenticated)
        );
        assert_eq!(
            table.check(Some("Basic x"), "env-1", Grant::Harness),
            Err(Refusal::Unauthenticated)
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let err = TokenTable::parse("ok * both\nbroken line\n", "t").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t:2: expected `TOKEN ENVIRONMENT-ID|* executor|harness|both|metrics`"
        );
        assert!(TokenTable::parse("a b admin", "t").is_err());
    }
}
