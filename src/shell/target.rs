//! Where the front ends (`exec`, `attach`, `cp`) find the exec-server: a
//! direct `--url` (`ws://…`, `unix://…`, with the server's bearer token) or
//! an environment behind a registry (`--registry URL --environment-id ID`,
//! or the reference client's `CODEX_EXEC_SERVER_NOISE_*` variables), turned
//! into [`ConnectOptions`].

use std::path::PathBuf;

use crate::client::remote::{harness_config, RemoteConfigError};
use crate::client::token::{read_token, TokenError};
use crate::client::ConnectOptions;
use crate::relay::credentials::{
    NOISE_ACCOUNT_ID_ENV, NOISE_AUTH_TOKEN_ENV, NOISE_ENVIRONMENT_ID_ENV, NOISE_REGISTRY_URL_ENV,
};
use crate::server::config::AUTH_TOKEN_ENV;

/// The flags naming the exec-server.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// The exec-server: ws://HOST:PORT or unix:///PATH.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The environment registry (or set CODEX_EXEC_SERVER_NOISE_REGISTRY_URL).
    #[arg(long, value_name = "URL")]
    pub registry: Option<String>,
    /// The environment to reach through the registry (or set
    /// CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID).
    #[arg(long, value_name = "ID")]
    pub environment_id: Option<String>,
    /// File holding the bearer token: the exec-server's with --url (else
    /// CODEXBOX_AUTH_TOKEN), the registry's otherwise (else
    /// CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

/// Why the exec-server could not be named.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("no exec-server given: pass --url ws://HOST:PORT (or unix:///PATH), or --registry URL --environment-id ID (or set CODEX_EXEC_SERVER_NOISE_REGISTRY_URL and CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID)")]
    Missing,
    #[error("--url and --registry name two different ways in; give one")]
    Both,
    #[error("--registry needs --environment-id ID (or CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID)")]
    NoEnvironment,
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Harness(#[from] RemoteConfigError),
}

impl TargetError {
    /// 1 for what went wrong on this host, 2 (usage) for the settings.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Token(err) => err.exit_code(),
            Self::Harness(err) => err.exit_code(),
            _ => 2,
        }
    }
}

/// The exec-server as the flags and variables name it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Named {
    Url(String),
    Registry {
        registry: String,
        environment: String,
    },
}

impl TargetArgs {
    /// Which server: flags first, then the variables (`env` reads them).
    fn named(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Named, TargetError> {
        let from_env = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        if let Some(url) = &self.url {
            if self.registry.is_some() || self.environment_id.is_some() {
                return Err(TargetError::Both);
            }
            return Ok(Named::Url(url.clone()));
        }
        let registry = self
            .registry
            .clone()
            .or_else(|| from_env(NOISE_REGISTRY_URL_ENV))
            .ok_or(TargetError::Missing)?;
        let environment = self
            .environment_id
            .clone()
            .or_else(|| from_env(NOISE_ENVIRONMENT_ID_ENV))
            .ok_or(TargetError::NoEnvironment)?;
        Ok(Named::Registry {
            registry: registry.trim().to_owned(),
            environment: environment.trim().to_owned(),
        })
    }

    /// How to connect: flags first, then the variables (`env` reads them).
    pub fn connect_options(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ConnectOptions, TargetError> {
        match self.named(env)? {
            Named::Url(url) => {
                let mut options = ConnectOptions::new(url);
                if let Some(token) = read_token(self.token_file.as_deref(), AUTH_TOKEN_ENV, env)? {
                    options = options.auth_token(token);
                }
                Ok(options)
            }
            Named::Registry {
                registry,
                environment,
            } => {
                let token = read_token(self.token_file.as_deref(), NOISE_AUTH_TOKEN_ENV, env)?;
                let account = env(NOISE_ACCOUNT_ID_ENV).filter(|value| !value.trim().is_empty());
                let config = harness_config(
                    &registry,
                    &environment,
                    token.as_deref(),
                    account.as_deref(),
                    true,
                )?;
                Ok(ConnectOptions::relay(config))
            }
        }
    }

    /// The flags that name the same server from any shell: `--url URL`, or
    /// `--registry URL --environment-id ID` (also when they came from the
    /// variables), and `--token-file` as an absolute path when one was
    /// given. A token from a variable is never written out: the same
    /// variable must be set where the flags are used.
    pub fn flags(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<String>, TargetError> {
        let mut flags = match self.named(env)? {
            Named::Url(url) => vec!["--url".to_owned(), url],
            Named::Registry {
                registry,
                environment,
            } => vec![
                "--registry".to_owned(),
                registry,
                "--environment-id".to_owned(),
                environment,
            ],
        };
        if let Some(file) = &self.token_file {
            let absolute = std::path::absolute(file).unwrap_or_else(|_| file.clone());
            flags.push("--token-file".to_owned());
            flags.push(absolute.to_string_lossy().into_owned());
        }
        Ok(flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: Option<&str>, registry: Option<&str>, environment: Option<&str>) -> TargetArgs {
        TargetArgs {
            url: url.map(str::to_owned),
            registry: registry.map(str::to_owned),
            environment_id: environment.map(str::to_owned),
            token_file: None,
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_url_or_a_registry_names_the_server() {
        let direct = args(Some("ws://127.0.0.1:1"), None, None)
            .connect_options(&no_env)
            .map(|o| o.url);
        assert_eq!(direct.ok().as_deref(), Some("ws://127.0.0.1:1"));
        let relayed = args(None, Some("http://127.0.0.1:9"), Some("dev"))
            .connect_options(&no_env)
            .map(|o| o.relay.is_some());
        assert!(matches!(relayed, Ok(true)));
        let from_variables = args(None, None, None)
            .connect_options(&|name| match name {
                NOISE_REGISTRY_URL_ENV => Some("http://127.0.0.1:9".into()),
                NOISE_ENVIRONMENT_ID_ENV => Some("dev".into()),
                _ => None,
            })
            .map(|o| o.relay.is_some());
        assert!(matches!(from_variables, Ok(true)));
    }

    #[test]
    fn missing_or_conflicting_targets_are_usage_errors() {
        let none = args(None, None, None).connect_options(&no_env);
        assert!(matches!(none, Err(TargetError::Missing)));
        let both = args(Some("ws://x:1"), Some("http://y"), None).connect_options(&no_env);
        assert!(matches!(both, Err(TargetError::Both)));
        let half = args(None, Some("http://127.0.0.1:9"), None).connect_options(&no_env);
        assert!(matches!(half, Err(TargetError::NoEnvironment)));
        for err in [
            TargetError::Missing,
            TargetError::Both,
            TargetError::NoEnvironment,
        ] {
            assert_eq!(err.exit_code(), 2);
        }
    }

    #[test]
    fn the_flags_name_the_same_server_wherever_it_came_from() {
        let direct = args(Some("ws://127.0.0.1:1"), None, None).flags(&no_env);
        assert_eq!(
            direct.ok(),
            Some(vec!["--url".into(), "ws://127.0.0.1:1".into()])
        );
        let from_variables = args(None, None, None).flags(&|name| match name {
            NOISE_REGISTRY_URL_ENV => Some(" http://127.0.0.1:9 ".into()),
            NOISE_ENVIRONMENT_ID_ENV => Some("dev".into()),
            NOISE_AUTH_TOKEN_ENV => Some("secret".into()),
            _ => None,
        });
        assert_eq!(
            from_variables.ok(),
            Some(vec![
                "--registry".into(),
                "http://127.0.0.1:9".into(),
                "--environment-id".into(),
                "dev".into()
            ])
        );
        let with_file = TargetArgs {
            token_file: Some(PathBuf::from("token")),
            ..args(Some("ws://127.0.0.1:1"), None, None)
        }
        .flags(&no_env)
        .unwrap_or_default();
        let file = with_file.last().map(PathBuf::from).unwrap_or_default();
        assert!(
            file.is_absolute() && file.ends_with("token"),
            "{with_file:?}"
        );
    }

    #[test]
    fn a_registry_token_never_goes_to_a_remote_plain_http_registry() {
        let err = TargetArgs {
            token_file: None,
            ..args(None, Some("http://registry.example:80"), Some("dev"))
        }
        .connect_options(&|name| (name == NOISE_AUTH_TOKEN_ENV).then(|| "secret".to_owned()));
        assert!(matches!(err, Err(TargetError::Harness(_))), "{err:?}");
    }
}
