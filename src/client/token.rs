//! The bearer token a front end passes on: read from `--token-file` (one
//! token, surrounding whitespace trimmed) or else from an environment
//! variable. Shared by `exec`/`attach`/`ps`/`cp` and `codexbox connect`.

use std::path::{Path, PathBuf};

/// Why the token file gave no token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read --token-file {}: {source}", .path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the token in {} is empty", .path.display())]
    Empty { path: PathBuf },
}

impl TokenError {
    /// 1 for what went wrong on this host, 2 (usage) for an empty token.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Unreadable { .. } => 1,
            Self::Empty { .. } => 2,
        }
    }
}

/// The token in `file` (trimmed), or else in the variable `env_name`
/// (`env` reads variables).
pub fn read_token(
    file: Option<&Path>,
    env_name: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, TokenError> {
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| TokenError::Unreadable {
                path: path.to_path_buf(),
                source,
            })?;
            let token = text.trim();
            if token.is_empty() {
                return Err(TokenError::Empty {
                    path: path.to_path_buf(),
                });
            }
            Ok(Some(token.to_owned()))
        }
        None => Ok(env(env_name)
            .map(|token| token.trim().to_owned())
            .filter(|token| !token.is_empty())),
    }
}
