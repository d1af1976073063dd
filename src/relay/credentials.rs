//! Where the executor's registry credentials come from, in the reference's
//! order: `CODEX_ACCESS_TOKEN` with `--use-agent-identity-auth`, else
//! `CODEX_API_KEY`, else the Codex login state in `$CODEX_HOME/auth.json`
//! (default `~/.codex`): its API key, or its ChatGPT access token with the
//! account id. API keys go only to loopback registries or `https://`
//! `openai.com`/`openai.org` hosts (the reference's rule), and no token is
//! ever sent to a non-loopback `http://` registry. Without any credential
//! the executor registers without one of its own: a registry on a literal
//! loopback address then gets the token a codexbox rendezvous there
//! published (see [`super::registry_client`]), any other none.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::registry_client::AuthHeaders;
use crate::web_url::{redact, WebUrl};

/// The environment variable of an API key.
pub const API_KEY_ENV: &str = "CODEX_API_KEY";
/// The environment variable of an access token (Agent Identity or personal).
pub const ACCESS_TOKEN_ENV: &str = "CODEX_ACCESS_TOKEN";
/// The Codex home directory variable.
pub const CODEX_HOME_ENV: &str = "CODEX_HOME";

/// Why no usable credential could be built.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("CODEX_ACCESS_TOKEN is required when --use-agent-identity-auth is set")]
    MissingAccessToken,
    #[error("invalid remote exec-server registration URL: {0}")]
    InvalidUrl(String),
    #[error(
        "refusing to send a registry token to the non-loopback http:// registry {0}; use https://"
    )]
    TokenOverPlainHttp(String),
    #[error("remote exec-server API-key authentication is restricted to HTTPS openai.com and openai.org hosts and subdomains or loopback hosts")]
    ApiKeyHost,
    #[error("cannot read {path}: {source}")]
    AuthFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {source}")]
    AuthFileSyntax {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

/// `auth.json` as Codex writes it (other members ignored).
#[derive(Debug, Deserialize)]
struct AuthDotJson {
    #[serde(rename = "OPENAI_API_KEY", default)]
    api_key: Option<String>,
    #[serde(default)]
    tokens: Option<Tokens>,
}

#[derive(Debug, Deserialize)]
struct Tokens {
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    account_id: Option<String>,
}

/// The kind of credential found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Credential {
    None,
    ApiKey(String),
    /// A ChatGPT access token (or an Agent Identity token) and its account.
    Token {
        token: String,
        account: Option<String>,
    },
}

/// Reads the environment and `auth.json`.
pub fn load(
    registry_url: &str,
    use_agent_identity: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AuthHeaders, CredentialError> {
    let nonempty = |name: &str| {
        env(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let credential = if use_agent_identity {
        let token = nonempty(ACCESS_TOKEN_ENV).ok_or(CredentialError::MissingAccessToken)?;
        Credential::Token {
            token,
            account: None,
        }
    } else if let Some(key) = nonempty(API_KEY_ENV) {
        Credential::ApiKey(key)
    } else {
        let home = nonempty(CODEX_HOME_ENV)
            .map(PathBuf::from)
            .or_else(|| nonempty("HOME").map(|home| Path::new(&home).join(".codex")));
        match home {
            Some(home) => from_auth_file(&home.join("auth.json"))?,
            None => Credential::None,
        }
    };
    let target = WebUrl::parse(registry_url.trim())
        .map_err(|err| CredentialError::InvalidUrl(err.to_string()))?;
    match credential {
        Credential::None => Ok(AuthHeaders::default()),
        Credential::ApiKey(key) => {
            let openai = target.is_secure() && is_openai_host(target.host());
            if !target.is_loopback() && !openai {
                return Err(CredentialError::ApiKeyHost);
            }
            Ok(AuthHeaders::bearer(&key))
        }
        Credential::Token { token, account } => {
            harness_auth(registry_url, Some(&token), account.as_deref())
        }
    }
}

/// Registry URL of the harness's environment variable configuration.
pub const NOISE_REGISTRY_URL_ENV: &str = "CODEX_EXEC_SERVER_NOISE_REGISTRY_URL";
/// Environment id of the harness's environment variable configuration.
pub const NOISE_ENVIRONMENT_ID_ENV: &str = "CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID";
/// Bearer token of the harness's environment variable configuration.
pub const NOISE_AUTH_TOKEN_ENV: &str = "CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN";
/// Optional ChatGPT account id sent with the harness's calls.
pub const NOISE_ACCOUNT_ID_ENV: &str = "CODEX_EXEC_SERVER_NOISE_CHATGPT_ACCOUNT_ID";

/// A harness's headers: `Authorization: Bearer TOKEN` and, when given,
/// `chatgpt-account-id`. The token never goes to a non-loopback `http://`
/// registry.
pub fn harness_auth(
    registry_url: &str,
    token: Option<&str>,
    account_id: Option<&str>,
) -> Result<AuthHeaders, CredentialError> {
    let token = token.map(str::trim).filter(|t| !t.is_empty());
    let Some(token) = token else {
        return Ok(AuthHeaders::default());
    };
    let target = WebUrl::parse(registry_url.trim())
        .map_err(|err| CredentialError::InvalidUrl(err.to_string()))?;
    if !target.is_secure() && !target.is_loopback() {
        return Err(CredentialError::TokenOverPlainHttp(redact(
            registry_url.trim(),
        )));
    }
    let mut headers = AuthHeaders::bearer(token);
    if let Some(account) = account_id.map(str::trim).filter(|a| !a.is_empty()) {
        headers
            .0
            .push(("chatgpt-account-id".into(), account.to_owned()));
    }
    Ok(headers)
}

/// `openai.com`, `openai.org` or a subdomain of either.
fn is_openai_host(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    ["openai.com", "openai.org"]
        .iter()
        .any(|domain| host == *domain || host.ends_with(&format!(".{domain}")))
}

fn from_auth_file(path: &Path) -> Result<Credential, CredentialError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Credential::None),
        Err(source) => {
            return Err(CredentialError::AuthFile {
                path: path.display().to_string(),
                source,
            })
        }
    };
    let auth: AuthDotJson =
        serde_json::from_str(&text).map_err(|source| CredentialError::AuthFileSyntax {
            path: path.display().to_string(),
            source,
        })?;
    let trimmed = |v: Option<String>| v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    if let Some(key) = trimmed(auth.api_key) {
        return Ok(Credential::ApiKey(key));
    }
    let Some(tokens) = auth.tokens else {
        return Ok(Credential::None);
    };
    match trimmed(tokens.access_token) {
        Some(token) => Ok(Credential::Token {
            token,
            account: trimmed(tokens.account_id),
        }),
        None => Ok(Credential::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn header(headers: &AuthHeaders, name: &str) -> Option<String> {
        headers
            .0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn api_key_goes_only_to_loopback_registries() {
        let vars = env(&[("CODEX_API_KEY", " k1 "), ("CODEX_HOME", "/nonexistent")]);
        let headers = load("http://127.0.0.1:9", false, &vars).unwrap();
        assert_eq!(
            header(&headers, "authorization").as_deref(),
            Some("Bearer k1")
        );
        assert!(matches!(
            load("http://registry.example:9", false, &vars),
            Err(CredentialError::ApiKeyHost)
        ));
        assert!(matches!(
            load("https://registry.example:9", false, &vars),
            Err(CredentialError::ApiKeyHost)
        ));
        assert!(load("https://api.openai.com/x", false, &vars).is_ok());
        assert!(matches!(
            load("http://api.openai.com/x", false, &vars),
            Err(CredentialError::ApiKeyHost)
        ));
    }

    #[test]
    fn login_state_is_read_from_codex_home() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("auth.json"),
            r#"{"OPENAI_API_KEY":null,"tokens":{"access_token":"at","account_id":"acct","id_token":"x"},"last_refresh":"y"}"#,
        )
        .unwrap();
        let home = dir.path().to_string_lossy().into_owned();
        let vars = env(&[("CODEX_HOME", &home)]);
        let headers = load("http://localhost:1", false, &vars).unwrap();
        assert_eq!(
            header(&headers, "authorization").as_deref(),
            Some("Bearer at")
        );
        assert_eq!(
            header(&headers, "chatgpt-account-id").as_deref(),
            Some("acct")
        );
        assert!(matches!(
            load("http://10.0.0.1:1", false, &vars),
            Err(CredentialError::TokenOverPlainHttp(_))
        ));
    }

    #[test]
    fn harness_tokens_never_go_to_plain_http_elsewhere() {
        let headers = harness_auth("http://127.0.0.1:1", Some(" tok "), Some("acct")).unwrap();
        assert_eq!(
            header(&headers, "authorization").as_deref(),
            Some("Bearer tok")
        );
        assert_eq!(
            header(&headers, "chatgpt-account-id").as_deref(),
            Some("acct")
        );
        assert!(matches!(
            harness_auth("http://registry.example", Some("tok"), None),
            Err(CredentialError::TokenOverPlainHttp(_))
        ));
        assert!(harness_auth("http://registry.example", None, None)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn agent_identity_needs_the_access_token_and_nothing_means_no_header() {
        let none = env(&[("CODEX_HOME", "/nonexistent")]);
        assert!(matches!(
            load("http://127.0.0.1:1", true, &none),
            Err(CredentialError::MissingAccessToken)
        ));
        assert!(load("http://registry.example", false, &none)
            .unwrap()
            .is_empty());
        let vars = env(&[("CODEX_ACCESS_TOKEN", "jwt")]);
        let headers = load("http://127.0.0.1:1", true, &vars).unwrap();
        assert_eq!(
            header(&headers, "authorization").as_deref(),
            Some("Bearer jwt")
        );
    }
}
