//! The ChatGPT Cloudflare affinity cookies of `http/request`, kept as the
//! reference keeps them: one store for the whole process, holding only
//! Cloudflare's infrastructure cookies (`__cflb`, `__cf_bm`, `_cfuvid`,
//! `cf_clearance`, …) set by `https` responses of the ChatGPT hosts, and
//! replayed only to those hosts. Its purpose is load-balancer affinity:
//! after `chatgpt.com` sets `__cflb=west`, later requests there carry
//! `cookie: __cflb=west`. Nothing else is ever kept (no session, account
//! or auth cookie: the store is shared by every client of the server), and
//! nothing is sent to any other host.
//!
//! Within those bounds the cookies follow RFC 6265: `Domain` (host-only
//! without it; a domain that is not a ChatGPT host is refused), `Path`
//! (the request's directory without it), `Max-Age` before `Expires`, an
//! expired cookie deletes its namesake, `Secure`. The store is bounded.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use http::header::HeaderValue;
use http::Uri;

use crate::net::client::CookieStore;

/// Exact hosts whose Cloudflare cookies are kept.
const CHATGPT_HOSTS: [&str; 3] = ["chatgpt.com", "chat.openai.com", "chatgpt-staging.com"];
/// Hosts below these are ChatGPT hosts too.
const CHATGPT_SUFFIXES: [&str; 2] = [".chatgpt.com", ".chatgpt-staging.com"];
/// Cloudflare's service cookies (and every `cf_chl_*` challenge cookie).
const CLOUDFLARE_COOKIES: [&str; 9] = [
    "__cf_bm",
    "__cflb",
    "__cfruid",
    "__cfseq",
    "__cfwaitingroom",
    "_cfuvid",
    "cf_clearance",
    "cf_ob_info",
    "cf_use_ob",
];
/// Cookies kept at most; the least recently set go first.
const MAX_COOKIES: usize = 64;
/// Longest `name=value` kept.
const MAX_COOKIE_BYTES: usize = 4096;

/// Whether `host` is a ChatGPT host (no suffix tricks: `evilchatgpt.com`
/// and `chatgpt.com.evil.example` are not).
pub fn is_chatgpt_host(host: &str) -> bool {
    CHATGPT_HOSTS.contains(&host) || CHATGPT_SUFFIXES.iter().any(|s| host.ends_with(s))
}

/// Whether `name` is one of Cloudflare's service cookies.
pub fn is_cloudflare_cookie(name: &str) -> bool {
    CLOUDFLARE_COOKIES.contains(&name) || name.starts_with("cf_chl_")
}

/// The host of an `https` URI of a ChatGPT host, lower-cased.
fn chatgpt_host(uri: &Uri) -> Option<String> {
    if uri.scheme_str() != Some("https") {
        return None;
    }
    let host = uri.host()?.to_ascii_lowercase();
    is_chatgpt_host(&host).then_some(host)
}

/// One stored cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cookie {
    name: String,
    value: String,
    /// Lower-cased, without a leading dot.
    domain: String,
    /// Sent to `domain` only (no `Domain` attribute), not to its subdomains.
    host_only: bool,
    path: String,
    secure: bool,
    /// `None`: kept for the life of the process.
    expires: Option<SystemTime>,
    /// Order of first setting, for the `Cookie` header's order.
    created: u64,
}

impl Cookie {
    fn same_slot(&self, other: &Cookie) -> bool {
        self.name == other.name && self.domain == other.domain && self.path == other.path
    }

    fn is_expired(&self, now: SystemTime) -> bool {
        self.expires.is_some_and(|at| at <= now)
    }

    fn matches(&self, host: &str, path: &str, now: SystemTime) -> bool {
        let domain_ok = host == self.domain
            || (!self.host_only && host.ends_with(&format!(".{}", self.domain)));
        // Every URI here is https, which a `Secure` cookie needs.
        domain_ok && path_matches(path, &self.path) && !self.is_expired(now)
    }
}

/// Longest lifetime kept, whatever `Max-Age` says (RFC 6265bis: 400 days).
const MAX_AGE_SECS: u64 = 400 * 24 * 3600;

/// RFC 6265 §5.1.4 path-match.
fn path_matches(request: &str, cookie: &str) -> bool {
    request
        .strip_prefix(cookie)
        .is_some_and(|rest| rest.is_empty() || cookie.ends_with('/') || rest.starts_with('/'))
}

/// RFC 6265 §5.1.4 default path: the request path up to its last `/`.
fn default_path(request: &str) -> String {
    match request.rsplit_once('/') {
        Some((dir, _)) if !dir.is_empty() => dir.to_owned(),
        _ => "/".to_owned(),
    }
}

/// Parses one `Set-Cookie` value received from `host` at `path`; `None`
/// when it is malformed or not to be kept.
fn parse(header: &HeaderValue, host: &str, path: &str, now: SystemTime) -> Option<Cookie> {
    let text = header.to_str().ok()?;
    let mut parts = text.split(';');
    let (name, value) = parts.next()?.split_once('=')?;
    let (name, value) = (name.trim(), value.trim());
    if name.is_empty() || !is_cloudflare_cookie(name) || name.len() + value.len() > MAX_COOKIE_BYTES
    {
        return None;
    }
    let mut cookie = Cookie {
        name: name.to_owned(),
        value: value.to_owned(),
        domain: host.to_owned(),
        host_only: true,
        path: default_path(path),
        secure: false,
        expires: None,
        created: 0,
    };
    let mut max_age = None;
    for attribute in parts {
        let (key, val) = match attribute.split_once('=') {
            Some((key, val)) => (key.trim(), val.trim()),
            None => (attribute.trim(), ""),
        };
        match key.to_ascii_lowercase().as_str() {
            "domain" => {
                let domain = val.trim_start_matches('.').to_ascii_lowercase();
                if domain.is_empty() {
                    continue;
                }
                let covers_host = host == domain || host.ends_with(&format!(".{domain}"));
                if !covers_host || !is_chatgpt_host(&domain) {
                    return None;
                }
                cookie.domain = domain;
                cookie.host_only = false;
            }
            "path" if val.starts_with('/') => cookie.path = val.to_owned(),
            "secure" => cookie.secure = true,
            "max-age" => max_age = val.parse::<i64>().ok(),
            "expires" => {
                if let Ok(at) = httpdate::parse_http_date(val) {
                    cookie.expires = Some(at);
                }
            }
            _ => {}
        }
    }
    if let Some(seconds) = max_age {
        cookie.expires = match u64::try_from(seconds) {
            Ok(seconds) if seconds > 0 => {
                now.checked_add(Duration::from_secs(seconds.min(MAX_AGE_SECS)))
            }
            _ => Some(SystemTime::UNIX_EPOCH),
        };
    }
    Some(cookie)
}

/// The store: see the module documentation.
#[derive(Debug, Default)]
pub struct CloudflareCookies {
    state: Mutex<Jar>,
}

#[derive(Debug, Default)]
struct Jar {
    cookies: Vec<Cookie>,
    next: u64,
}

impl CloudflareCookies {
    /// The store of this process.
    pub fn global() -> &'static CloudflareCookies {
        static STORE: OnceLock<CloudflareCookies> = OnceLock::new();
        STORE.get_or_init(CloudflareCookies::default)
    }

    fn jar(&self) -> std::sync::MutexGuard<'_, Jar> {
        // A panic elsewhere cannot leave a jar half-updated in a way that
        // matters: every update is one push or remove.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn store_at(
        &self,
        uri: &Uri,
        set_cookies: &mut dyn Iterator<Item = &HeaderValue>,
        now: SystemTime,
    ) {
        let Some(host) = chatgpt_host(uri) else {
            return;
        };
        let mut jar = self.jar();
        for header in set_cookies {
            let Some(mut cookie) = parse(header, &host, uri.path(), now) else {
                continue;
            };
            let old = jar.cookies.iter().position(|c| c.same_slot(&cookie));
            let created = match old {
                Some(index) => jar.cookies.remove(index).created,
                None => {
                    jar.next += 1;
                    jar.next
                }
            };
            if cookie.is_expired(now) {
                continue;
            }
            cookie.created = created;
            jar.cookies.retain(|c| !c.is_expired(now));
            if jar.cookies.len() >= MAX_COOKIES {
                jar.cookies.remove(0);
            }
            jar.cookies.push(cookie);
        }
    }

    fn header_at(&self, uri: &Uri, now: SystemTime) -> Option<HeaderValue> {
        let host = chatgpt_host(uri)?;
        let jar = self.jar();
        let mut matching: Vec<&Cookie> = jar
            .cookies
            .iter()
            .filter(|c| c.matches(&host, uri.path(), now))
            .collect();
        // Longer paths first, then the older cookie (RFC 6265 §5.4).
        matching.sort_by(|a, b| {
            b.path
                .len()
                .cmp(&a.path.len())
                .then(a.created.cmp(&b.created))
        });
        let text = matching
            .iter()
            .map(|c| format!("{}={}", c.name, c.value))
            .collect::<Vec<_>>()
            .join("; ");
        HeaderValue::from_str(&text)
            .ok()
            .filter(|_| !text.is_empty())
    }
}

impl CookieStore for CloudflareCookies {
    fn store(&self, uri: &Uri, set_cookies: &mut dyn Iterator<Item = &HeaderValue>) {
        self.store_at(uri, set_cookies, SystemTime::now());
    }

    fn cookie_header(&self, uri: &Uri) -> Option<HeaderValue> {
        self.header_at(uri, SystemTime::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> Uri {
        text.parse().unwrap()
    }

    fn set(store: &CloudflareCookies, url: &str, headers: &[&str], now: SystemTime) {
        let values: Vec<HeaderValue> = headers
            .iter()
            .map(|h| HeaderValue::from_str(h).unwrap())
            .collect();
        store.store_at(&uri(url), &mut values.iter(), now);
    }

    fn header(store: &CloudflareCookies, url: &str, now: SystemTime) -> Option<String> {
        store
            .header_at(&uri(url), now)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    const CHATGPT: &str = "https://chatgpt.com/backend-api/codex/responses";

    #[test]
    fn only_cloudflare_cookies_of_chatgpt_hosts_are_kept_and_replayed_there() {
        let store = CloudflareCookies::default();
        let now = SystemTime::now();
        set(
            &store,
            CHATGPT,
            &[
                "__cflb=west; Path=/; Secure; HttpOnly",
                "chatgpt_session=secret; Path=/; Secure",
                "_cfuvid=visitor; Path=/; Secure",
                "__Secure-next-auth.session-token=x; Path=/",
            ],
            now,
        );
        assert_eq!(
            header(&store, CHATGPT, now).as_deref(),
            Some("__cflb=west; _cfuvid=visitor")
        );
        assert_eq!(
            header(&store, "https://api.openai.com/v1/responses", now),
            None
        );
        assert_eq!(
            header(&store, "http://chatgpt.com/x", now),
            None,
            "https only"
        );
        assert_eq!(header(&store, "https://evilchatgpt.com/x", now), None);
        // Host-only: not sent to a subdomain.
        assert_eq!(header(&store, "https://ab.chatgpt.com/x", now), None);
        set(&store, CHATGPT, &["__cflb=central; Path=/"], now);
        assert_eq!(
            header(&store, CHATGPT, now).as_deref(),
            Some("__cflb=central; _cfuvid=visitor"),
            "replaced in place"
        );
    }

    #[test]
    fn nothing_is_kept_from_other_hosts_or_plain_http() {
        let store = CloudflareCookies::default();
        let now = SystemTime::now();
        set(
            &store,
            "https://api.openai.com/v1",
            &["_cfuvid=v; Path=/"],
            now,
        );
        set(&store, "http://chatgpt.com/x", &["_cfuvid=v; Path=/"], now);
        assert_eq!(header(&store, CHATGPT, now), None);
        assert_eq!(header(&store, "https://api.openai.com/v1", now), None);
    }

    #[test]
    fn domain_path_and_expiry_follow_rfc_6265() {
        let store = CloudflareCookies::default();
        let now = SystemTime::now();
        set(
            &store,
            "https://ab.chatgpt.com/a/b",
            &[
                "__cf_bm=d; Domain=.chatgpt.com; Path=/",
                "__cfruid=p",
                "cf_clearance=x; Domain=openai.com",
                "__cfseq=y; Domain=example.com",
            ],
            now,
        );
        assert_eq!(header(&store, CHATGPT, now).as_deref(), Some("__cf_bm=d"));
        assert_eq!(
            header(&store, "https://ab.chatgpt.com/a/c", now).as_deref(),
            Some("__cfruid=p; __cf_bm=d"),
            "the default path /a, longer paths first"
        );
        assert_eq!(
            header(&store, "https://ab.chatgpt.com/ab", now).as_deref(),
            Some("__cf_bm=d")
        );
        set(
            &store,
            CHATGPT,
            &["__cf_bm=gone; Domain=chatgpt.com; Path=/; Max-Age=0"],
            now,
        );
        assert_eq!(
            header(&store, CHATGPT, now),
            None,
            "an expired cookie deletes"
        );
        set(
            &store,
            CHATGPT,
            &["__cflb=soon; Max-Age=60; Expires=Thu, 01 Jan 1970 00:00:00 GMT"],
            now,
        );
        assert_eq!(
            header(&store, CHATGPT, now).as_deref(),
            Some("__cflb=soon"),
            "Max-Age wins"
        );
        let later = now + Duration::from_secs(61);
        assert_eq!(header(&store, CHATGPT, later), None);
    }

    #[test]
    fn the_store_is_bounded() {
        let store = CloudflareCookies::default();
        let now = SystemTime::now();
        for i in 0..(MAX_COOKIES + 10) {
            set(
                &store,
                &format!("https://chatgpt.com/p{i}/x"),
                &["__cflb=v"],
                now,
            );
        }
        assert_eq!(store.jar().cookies.len(), MAX_COOKIES);
        let long = format!("__cflb={}", "v".repeat(MAX_COOKIE_BYTES));
        set(&store, "https://chatgpt.com/z/x", &[long.as_str()], now);
        assert_eq!(header(&store, "https://chatgpt.com/z/x", now), None);
    }
}
