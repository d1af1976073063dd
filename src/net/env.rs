//! The proxy variables a child gets (docs/network.md) and the names that
//! count as proxy configuration.
//! Pure: callers apply the list to whatever environment they build.

use std::net::SocketAddr;

/// Keys set to the HTTP proxy URL.
const HTTP_PROXY_KEYS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "YARN_HTTP_PROXY",
    "YARN_HTTPS_PROXY",
    "npm_config_http_proxy",
    "npm_config_https_proxy",
    "npm_config_proxy",
    "NPM_CONFIG_HTTP_PROXY",
    "NPM_CONFIG_HTTPS_PROXY",
    "NPM_CONFIG_PROXY",
    "BUNDLE_HTTP_PROXY",
    "BUNDLE_HTTPS_PROXY",
    "PIP_PROXY",
    "DOCKER_HTTP_PROXY",
    "DOCKER_HTTPS_PROXY",
    "WS_PROXY",
    "WSS_PROXY",
    "ws_proxy",
    "wss_proxy",
];

/// Keys set to the SOCKS5 URL when SOCKS5 is on, else the HTTP URL.
const ALL_PROXY_KEYS: &[&str] = &["ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy"];

/// Keys set to [`NO_PROXY_VALUE`].
pub const NO_PROXY_KEYS: &[&str] = &[
    "NO_PROXY",
    "no_proxy",
    "npm_config_noproxy",
    "NPM_CONFIG_NOPROXY",
    "YARN_NO_PROXY",
    "BUNDLE_NO_PROXY",
];

/// What `NO_PROXY` says: loopback and private ranges go direct.
pub const NO_PROXY_VALUE: &str = "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16";

/// Keys removed from a child's environment (an inherited attribution token
/// or credential-broker marker would only break the connection).
pub const REMOVED_KEYS: &[&str] = &[
    "CODEX_NETWORK_PROXY_ATTRIBUTION",
    "CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE",
    "CODEX_NETWORK_PROXY_BROKERED_CREDENTIALS",
];

/// Whether `key` (any case) names a proxy URL variable: what managed
/// routing rewrites and what counts as "a proxy is configured" (reference
/// `PROXY_URL_ENV_KEYS`: the keys a child is given a proxy URL in).
pub fn is_proxy_url_key(key: &str) -> bool {
    HTTP_PROXY_KEYS
        .iter()
        .chain(ALL_PROXY_KEYS)
        .any(|k| k.eq_ignore_ascii_case(key))
}

/// A `NO_PROXY` value reduced to the entries that can still be reached
/// directly from a network namespace whose only interface is loopback
/// (`localhost`, `*.localhost`, `127.0.0.1`, `::1`): anything else would
/// only make clients bypass the proxy and fail.
pub fn loopback_no_proxy(value: &str) -> String {
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| {
            let host = entry.trim_start_matches('.').to_ascii_lowercase();
            matches!(host.as_str(), "localhost" | "127.0.0.1" | "::1" | "[::1]")
                || host.ends_with(".localhost")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `http://127.0.0.1:PORT`.
pub fn http_proxy_url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

/// `socks5h://127.0.0.1:PORT`.
pub fn socks5_proxy_url(addr: SocketAddr) -> String {
    format!("socks5h://{addr}")
}

/// The variables to set, in a fixed order, for a proxy listening on
/// `http` (and `socks5`). Existing values of these keys are to be replaced.
pub fn proxy_env(
    http: SocketAddr,
    socks5: Option<SocketAddr>,
    allow_local_binding: bool,
) -> Vec<(&'static str, String)> {
    let http_url = http_proxy_url(http);
    let all_url = socks5.map_or_else(|| http_url.clone(), socks5_proxy_url);
    let mut out = Vec::with_capacity(40);
    out.extend(HTTP_PROXY_KEYS.iter().map(|k| (*k, http_url.clone())));
    out.extend(ALL_PROXY_KEYS.iter().map(|k| (*k, all_url.clone())));
    out.extend(
        NO_PROXY_KEYS
            .iter()
            .map(|k| (*k, NO_PROXY_VALUE.to_owned())),
    );
    out.push(("CODEX_NETWORK_PROXY_ACTIVE", "1".to_owned()));
    out.push((
        "CODEX_NETWORK_ALLOW_LOCAL_BINDING",
        if allow_local_binding { "1" } else { "0" }.to_owned(),
    ));
    out.push(("ELECTRON_GET_USE_PROXY", "true".to_owned()));
    out.push(("NODE_USE_ENV_PROXY", "1".to_owned()));
    out
}

/// Applies [`proxy_env`] and [`REMOVED_KEYS`] to an environment list.
pub fn apply_proxy_env(
    env: &mut Vec<(std::ffi::OsString, std::ffi::OsString)>,
    http: SocketAddr,
    socks5: Option<SocketAddr>,
    allow_local_binding: bool,
) {
    let set = proxy_env(http, socks5, allow_local_binding);
    env.retain(|(key, _)| {
        let key = key.to_string_lossy();
        !REMOVED_KEYS.contains(&key.as_ref()) && !set.iter().any(|(k, _)| *k == key)
    });
    env.extend(set.into_iter().map(|(k, v)| (k.into(), v.into())));
    env.sort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_every_tool_variable_and_replaces_stale_ones() {
        let http: SocketAddr = "127.0.0.1:3128".parse().unwrap();
        let socks: SocketAddr = "127.0.0.1:8081".parse().unwrap();
        let mut env = vec![
            ("HTTP_PROXY".into(), "http://127.0.0.1:9".into()),
            ("CODEX_NETWORK_PROXY_ATTRIBUTION".into(), "tok".into()),
            ("PATH".into(), "/bin".into()),
        ];
        apply_proxy_env(&mut env, http, Some(socks), false);
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.to_str().unwrap())
        };
        assert_eq!(get("HTTP_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("WSS_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("ALL_PROXY"), Some("socks5h://127.0.0.1:8081"));
        assert_eq!(get("no_proxy"), Some(NO_PROXY_VALUE));
        assert_eq!(get("CODEX_NETWORK_ALLOW_LOCAL_BINDING"), Some("0"));
        assert_eq!(get("NODE_USE_ENV_PROXY"), Some("1"));
        assert_eq!(get("CODEX_NETWORK_PROXY_ATTRIBUTION"), None);
        assert_eq!(get("PATH"), Some("/bin"));
        assert_eq!(env.iter().filter(|(k, _)| k == "HTTP_PROXY").count(), 1);
        assert_eq!(proxy_env(http, None, true).len(), 35);
    }

    #[test]
    fn no_proxy_keeps_only_loopback_entries() {
        assert_eq!(loopback_no_proxy(NO_PROXY_VALUE), "localhost,127.0.0.1,::1");
        assert_eq!(
            loopback_no_proxy(" .corp, app.localhost ,[::1]"),
            "app.localhost,[::1]"
        );
    }

    #[test]
    fn all_proxy_falls_back_to_http_without_socks() {
        let env = proxy_env("127.0.0.1:1".parse().unwrap(), None, false);
        assert!(env.contains(&("all_proxy", "http://127.0.0.1:1".to_owned())));
        assert!(is_proxy_url_key("npm_config_proxy"));
        assert!(is_proxy_url_key("wss_proxy"));
        assert!(!is_proxy_url_key("NO_PROXY"));
    }
}
