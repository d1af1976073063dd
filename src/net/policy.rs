//! The proxy's destination policy as data: host patterns, the allow and deny
//! lists, the mode, and the pure decision for a `(host, port)` before any
//! name is resolved.
//!
//! Pattern forms (matched case-insensitively on the normalized host):
//! `example.com` (that host), `*.example.com` (strict subdomains),
//! `**.example.com` (apex and subdomains), `*` (every host; allowlist only),
//! other glob syntax (`?`, `[a-z]`, `{a,b}`, `*` crossing dots), IP literals
//! (`10.0.0.1`, `[::1]`, `fe80::1%eth0`), each optionally scoped to one port
//! (`example.com:8443`, `[::1]:8080`). Deny always wins over allow.
//!
//! Local and private destinations (`localhost`, loopback and non-public
//! addresses) are refused unless `allow_local_binding` is set, except an IP
//! literal or `localhost` named by an exact allow entry, which is reachable
//! as such. Names are never resolved here: [`Policy::check_host`] says
//! whether a name may be resolved at all; `net::resolve` resolves it and
//! refuses private answers, `net::dial` dials only the checked addresses.

use std::net::IpAddr;

use super::address::is_non_public;
use super::decision::DenyReason;
use crate::sandbox::glob::TextGlob;

/// Why a pattern list cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid value for network.denied_domains: {0} (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)")]
    GlobalWildcardDenied(String),
    #[error("invalid glob pattern: {0}")]
    InvalidGlob(String),
    #[error("invalid port in pattern: {0}")]
    InvalidPort(String),
}

/// `full` (every method, CONNECT, SOCKS5) or `limited` (plain-HTTP `GET`,
/// `HEAD`, `OPTIONS` only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Full,
    Limited,
}

impl Mode {
    /// The wire and CLI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Limited => "limited",
        }
    }

    /// Whether a plain-HTTP request with this method may pass.
    pub fn allows_method(self, method: &str) -> bool {
        match self {
            Mode::Full => true,
            Mode::Limited => matches!(method, "GET" | "HEAD" | "OPTIONS"),
        }
    }
}

/// One compiled allow or deny entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    /// The entry as written (for messages).
    pub source: String,
    /// Lowercase globs; the entry matches when any of them does.
    globs: Vec<TextGlob>,
    /// `Some(port)`: the entry covers that port only.
    port: Option<u16>,
    /// No wildcard: the entry names exactly one host.
    exact: bool,
    /// `*`: every host.
    global: bool,
}

impl HostPattern {
    /// Compiles one entry. `is_deny` rejects the global wildcard.
    pub fn parse(entry: &str, is_deny: bool) -> Result<Self, PolicyError> {
        let source = entry.trim().to_owned();
        let (host, port) = split_pattern_port(&source)?;
        let host = normalize_host(host);
        if host.is_empty() {
            return Err(PolicyError::InvalidGlob(source));
        }
        let global = matches!(host.as_str(), "*" | "**" | "[*]" | "**.*" | "**.[*]");
        if global {
            if is_deny {
                return Err(PolicyError::GlobalWildcardDenied(source));
            }
            return Ok(Self {
                source,
                globs: vec![TextGlob::new("*")],
                port,
                exact: false,
                global: true,
            });
        }
        let mut globs = Vec::new();
        for alternative in
            expand_braces(&host).ok_or_else(|| PolicyError::InvalidGlob(source.clone()))?
        {
            if let Some(rest) = alternative.strip_prefix("**.") {
                globs.push(rest.to_owned());
                globs.push(format!("?*.{rest}"));
            } else if let Some(rest) = alternative.strip_prefix("*.") {
                globs.push(format!("?*.{rest}"));
            } else {
                globs.push(alternative);
            }
        }
        if globs.iter().any(|glob| !is_valid_glob(glob)) {
            return Err(PolicyError::InvalidGlob(source));
        }
        let exact = !host.contains(['*', '?', '[', '{']);
        Ok(Self {
            source,
            globs: globs.iter().map(|glob| TextGlob::new(glob)).collect(),
            port,
            exact,
            global: false,
        })
    }

    /// Whether this entry covers `host` within `scope`: one port, or (for
    /// name lookups, where no port is known) a deny entry must cover every
    /// port while an allow entry may cover any.
    fn covers(&self, host: &str, scope: PortScope) -> bool {
        match (scope, self.port) {
            (PortScope::Port(port), Some(p)) if p != port => return false,
            (PortScope::EveryPort, Some(_)) => return false,
            _ => {}
        }
        if self.global {
            return true;
        }
        host_forms(host).any(|form| self.globs.iter().any(|glob| glob.matches(form)))
    }

    /// Whether this is an exact (wildcard-free) entry for `host` in `scope`.
    fn names_exactly(&self, host: &str, scope: PortScope) -> bool {
        self.exact && self.covers(host, scope)
    }
}

/// The host forms a pattern is matched against: the host, and for a scoped
/// IPv6 literal also its unscoped address (an unscoped entry covers every
/// scope).
fn host_forms(host: &str) -> impl Iterator<Item = &str> {
    let unscoped = host
        .split_once('%')
        .filter(|(addr, _)| addr.contains(':'))
        .map(|(addr, _)| addr);
    std::iter::once(host).chain(unscoped)
}

/// Splits `host:port`, `[v6]:port`, `[v6]`; an unbracketed IPv6 literal has
/// no port. `:*` means every port.
fn split_pattern_port(entry: &str) -> Result<(&str, Option<u16>), PolicyError> {
    let parse_port = |port: &str| -> Result<Option<u16>, PolicyError> {
        if port == "*" {
            return Ok(None);
        }
        match port.parse::<u16>() {
            Ok(0) | Err(_) => Err(PolicyError::InvalidPort(entry.to_owned())),
            Ok(port) => Ok(Some(port)),
        }
    };
    if let Some(rest) = entry.strip_prefix('[') {
        if let Some((inside, after)) = rest.split_once(']') {
            if inside == "*" {
                return Ok((entry, None));
            }
            return match after.strip_prefix(':') {
                Some(port) => Ok((inside, parse_port(port)?)),
                None if after.is_empty() => Ok((inside, None)),
                None => Err(PolicyError::InvalidGlob(entry.to_owned())),
            };
        }
    }
    if entry.matches(':').count() == 1 {
        if let Some((host, port)) = entry.split_once(':') {
            return Ok((host, parse_port(port)?));
        }
    }
    Ok((entry, None))
}

/// `{a,b}` alternatives, expanded (no nesting). `None`: unbalanced.
fn expand_braces(pattern: &str) -> Option<Vec<String>> {
    let Some(open) = pattern.find('{') else {
        return (!pattern.contains('}')).then(|| vec![pattern.to_owned()]);
    };
    let close = open + pattern.get(open..)?.find('}')?;
    let (head, inner, tail) = (
        pattern.get(..open)?,
        pattern.get(open + 1..close)?,
        pattern.get(close + 1..)?,
    );
    if inner.contains('{') {
        return None;
    }
    let mut out = Vec::new();
    for alternative in inner.split(',') {
        for rest in expand_braces(tail)? {
            out.push(format!("{head}{alternative}{rest}"));
        }
    }
    Some(out)
}

/// Every `[` opens a class that closes.
fn is_valid_glob(glob: &str) -> bool {
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '[' {
            if matches!(chars.peek(), Some('!' | '^')) {
                chars.next();
            }
            if chars.peek() == Some(&']') {
                chars.next();
            }
            if !chars.by_ref().any(|c| c == ']') {
                return false;
            }
        } else if c == ']' {
            return false;
        }
    }
    true
}

/// Host normalization shared by patterns and request hosts: trim, strip
/// `[...]`, drop a `:port` when there is exactly one colon, lowercase,
/// strip trailing dots, `%25` → `%` in IPv6 scopes.
pub fn normalize_host(host: &str) -> String {
    let mut host = host.trim();
    if let Some(inside) = host.strip_prefix('[').and_then(|h| h.split_once(']')) {
        host = inside.0;
    } else if host.matches(':').count() == 1 {
        host = host.split(':').next().unwrap_or(host);
    }
    let mut out = host.to_ascii_lowercase().replace("%25", "%");
    while out.ends_with('.') {
        out.pop();
    }
    out
}

/// Which ports a check is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortScope {
    Port(u16),
    /// Entries without a port only.
    EveryPort,
    /// Any entry, whatever its port.
    AnyPort,
}

/// What a host needs before a dial, according to the lists alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostVerdict {
    /// Refused.
    Deny(DenyReason),
    /// An IP literal that may be dialed; `local_ok` lets the dial reach a
    /// non-public address.
    Literal { ip: IpAddr, local_ok: bool },
    /// `localhost`, named exactly by an allow entry (or allowed with local
    /// binding): resolve it, private answers allowed.
    Localhost,
    /// An allowed name: resolve it; private answers are refused unless
    /// `local_ok`.
    Name { local_ok: bool },
}

/// The compiled destination policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub allow: Vec<HostPattern>,
    pub deny: Vec<HostPattern>,
    pub mode: Mode,
    pub allow_local_binding: bool,
}

impl Policy {
    /// Compiles the lists (deny entries are checked first, so an invalid deny
    /// list is reported before an invalid allow list).
    pub fn new<A, D>(
        allow: A,
        deny: D,
        mode: Mode,
        allow_local_binding: bool,
    ) -> Result<Self, PolicyError>
    where
        A: IntoIterator,
        A::Item: AsRef<str>,
        D: IntoIterator,
        D::Item: AsRef<str>,
    {
        let deny = deny
            .into_iter()
            .map(|entry| HostPattern::parse(entry.as_ref(), true))
            .collect::<Result<Vec<_>, _>>()?;
        let allow = allow
            .into_iter()
            .map(|entry| HostPattern::parse(entry.as_ref(), false))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            allow,
            deny,
            mode,
            allow_local_binding,
        })
    }

    /// The decision for a destination before resolution. `host` may be
    /// unnormalized (`Example.COM.`, `[::1]`).
    pub fn check_host(&self, host: &str, port: u16) -> HostVerdict {
        let scope = PortScope::Port(port);
        self.check(host, scope, scope)
    }

    /// The decision for a name lookup (no port known): denied only by an
    /// entry covering every port, allowed by an entry for any port.
    pub fn check_name(&self, host: &str) -> HostVerdict {
        self.check(host, PortScope::EveryPort, PortScope::AnyPort)
    }

    fn check(&self, host: &str, deny_scope: PortScope, allow_scope: PortScope) -> HostVerdict {
        let host = normalize_host(host);
        if host.is_empty() {
            return HostVerdict::Deny(DenyReason::NotAllowed);
        }
        if self.deny.iter().any(|p| p.covers(&host, deny_scope)) {
            return HostVerdict::Deny(DenyReason::Denied);
        }
        let allowed = self.allow.iter().any(|p| p.covers(&host, allow_scope));
        let literal = parse_ip_literal(&host);
        let is_localhost = host == "localhost";
        let is_local = is_localhost || literal.is_some_and(is_non_public);
        if is_local {
            let reachable = self
                .allow
                .iter()
                .any(|p| p.names_exactly(&host, allow_scope))
                || (self.allow_local_binding && allowed);
            return match (reachable, literal) {
                (false, _) => HostVerdict::Deny(DenyReason::NotAllowedLocal),
                (true, Some(ip)) => HostVerdict::Literal { ip, local_ok: true },
                (true, None) => HostVerdict::Localhost,
            };
        }
        if !allowed {
            return HostVerdict::Deny(DenyReason::NotAllowed);
        }
        match literal {
            Some(ip) => HostVerdict::Literal {
                ip,
                local_ok: self.allow_local_binding,
            },
            None => HostVerdict::Name {
                local_ok: self.allow_local_binding,
            },
        }
    }
}

/// An IP literal host (normalized, possibly with an IPv6 scope, which the
/// dial ignores).
pub fn parse_ip_literal(host: &str) -> Option<IpAddr> {
    let addr = host.split('%').next().unwrap_or(host);
    addr.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> Policy {
        Policy::new(allow, deny, Mode::Full, false).unwrap()
    }

    fn name(local_ok: bool) -> HostVerdict {
        HostVerdict::Name { local_ok }
    }

    #[test]
    fn exact_pattern_matches_only_that_host_case_insensitively() {
        let p = policy(&["Example.COM."], &[]);
        assert_eq!(p.check_host("example.com", 443), name(false));
        assert_eq!(p.check_host("EXAMPLE.com.", 80), name(false));
        assert_eq!(
            p.check_host("a.example.com", 443),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        assert_eq!(
            p.check_host("evilexample.com", 443),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
    }

    #[test]
    fn single_star_covers_strict_subdomains_only() {
        let p = policy(&["*.example.com"], &[]);
        assert_eq!(p.check_host("a.example.com", 443), name(false));
        assert_eq!(p.check_host("a.b.example.com", 443), name(false));
        assert_eq!(
            p.check_host("example.com", 443),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        assert_eq!(
            p.check_host("evilexample.com", 443),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
    }

    #[test]
    fn double_star_covers_apex_and_subdomains() {
        let p = policy(&["**.example.com"], &[]);
        assert_eq!(p.check_host("example.com", 443), name(false));
        assert_eq!(p.check_host("x.y.example.com", 443), name(false));
        assert_eq!(
            p.check_host("xexample.com", 443),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
    }

    #[test]
    fn mid_label_wildcards_braces_and_classes_work() {
        let p = policy(
            &["region*.v2.tunnel.com", "{a,b}.x.com", "h[0-9].y.com"],
            &[],
        );
        assert_eq!(p.check_host("region1.v2.tunnel.com", 1), name(false));
        assert_eq!(p.check_host("region.v2.tunnel.com", 1), name(false));
        assert_eq!(
            p.check_host("xregion1.v2.tunnel.com", 1),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        assert_eq!(p.check_host("b.x.com", 1), name(false));
        assert_eq!(
            p.check_host("c.x.com", 1),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        assert_eq!(p.check_host("h7.y.com", 1), name(false));
        assert_eq!(
            p.check_host("hx.y.com", 1),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
    }

    #[test]
    fn global_wildcard_is_allowlist_only() {
        let p = policy(&["*"], &["evil.com"]);
        assert_eq!(p.check_host("anything.org", 443), name(false));
        assert_eq!(
            p.check_host("evil.com", 443),
            HostVerdict::Deny(DenyReason::Denied)
        );
        for global in ["*", "[*]", "**.[*]"] {
            assert_eq!(
                Policy::new::<[&str; 0], _>([], [global], Mode::Full, false).unwrap_err(),
                PolicyError::GlobalWildcardDenied(global.to_owned())
            );
        }
        assert_eq!(
            PolicyError::GlobalWildcardDenied("*".into()).to_string(),
            "invalid value for network.denied_domains: * (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)"
        );
    }

    #[test]
    fn invalid_globs_and_ports_are_refused() {
        assert_eq!(
            HostPattern::parse("[", false).unwrap_err().to_string(),
            "invalid glob pattern: ["
        );
        assert!(HostPattern::parse("a{b", false).is_err());
        assert!(HostPattern::parse("a.com:0", false).is_err());
        assert!(HostPattern::parse("a.com:http", false).is_err());
    }

    #[test]
    fn deny_wins_over_allow() {
        let p = policy(&["**.openai.com"], &["api.openai.com"]);
        assert_eq!(
            p.check_host("api.openai.com", 443),
            HostVerdict::Deny(DenyReason::Denied)
        );
        assert_eq!(p.check_host("cdn.openai.com", 443), name(false));
    }

    #[test]
    fn port_scoped_entries_cover_one_port() {
        let p = policy(&["a.com:8443", "[::1]:8080"], &["b.com:22"]);
        assert_eq!(p.check_host("a.com", 8443), name(false));
        assert_eq!(
            p.check_host("a.com", 443),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        let ip = "::1".parse().unwrap();
        assert_eq!(
            p.check_host("[::1]", 8080),
            HostVerdict::Literal { ip, local_ok: true }
        );
        assert_eq!(
            p.check_host("::1", 8081),
            HostVerdict::Deny(DenyReason::NotAllowedLocal)
        );
        let q = policy(&["*"], &["b.com:22"]);
        assert_eq!(
            q.check_host("b.com", 22),
            HostVerdict::Deny(DenyReason::Denied)
        );
        assert_eq!(q.check_host("b.com", 443), name(false));
    }

    #[test]
    fn local_literals_need_an_exact_entry_or_local_binding() {
        let p = policy(&["*", "**.corp"], &[]);
        for host in [
            "127.0.0.1",
            "localhost",
            "10.1.2.3",
            "[::1]",
            "169.254.1.1",
            "fd00::1",
        ] {
            assert_eq!(
                p.check_host(host, 80),
                HostVerdict::Deny(DenyReason::NotAllowedLocal),
                "{host}"
            );
        }
        let exact = policy(&["127.0.0.1", "localhost", "10.0.0.1"], &[]);
        let ip = "127.0.0.1".parse().unwrap();
        assert_eq!(
            exact.check_host("127.0.0.1", 80),
            HostVerdict::Literal { ip, local_ok: true }
        );
        assert_eq!(exact.check_host("LOCALHOST.", 80), HostVerdict::Localhost);
        assert_eq!(
            exact.check_host("10.0.0.2", 80),
            HostVerdict::Deny(DenyReason::NotAllowedLocal)
        );
        let binding = Policy::new(["*"], [""; 0], Mode::Full, true).unwrap();
        assert_eq!(
            binding.check_host("127.0.0.1", 80),
            HostVerdict::Literal { ip, local_ok: true }
        );
        assert_eq!(binding.check_host("x.com", 80), name(true));
        let empty = Policy::new([""; 0], [""; 0], Mode::Full, true).unwrap();
        assert_eq!(
            empty.check_host("127.0.0.1", 80),
            HostVerdict::Deny(DenyReason::NotAllowedLocal)
        );
    }

    #[test]
    fn public_literals_follow_the_allowlist() {
        let p = policy(&["8.8.8.8"], &[]);
        let ip = "8.8.8.8".parse().unwrap();
        assert_eq!(
            p.check_host("8.8.8.8", 53),
            HostVerdict::Literal {
                ip,
                local_ok: false
            }
        );
        assert_eq!(
            p.check_host("1.1.1.1", 53),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
    }

    #[test]
    fn scoped_ipv6_literals_match_exactly_or_unscoped() {
        let p = policy(&["[fe80::1%25lo0]"], &["fd00::1"]);
        let ip = "fe80::1".parse().unwrap();
        assert_eq!(
            p.check_host("fe80::1%lo0", 80),
            HostVerdict::Literal { ip, local_ok: true }
        );
        assert_eq!(
            p.check_host("fe80::1%eth0", 80),
            HostVerdict::Deny(DenyReason::NotAllowedLocal)
        );
        for host in ["fd00::1%eth0", "[fd00::1%eth0]", "[fd00::1%25eth0]"] {
            assert_eq!(
                p.check_host(host, 80),
                HostVerdict::Deny(DenyReason::Denied),
                "{host}"
            );
        }
    }

    #[test]
    fn name_lookups_ignore_ports_but_honour_port_less_denials() {
        let p = policy(&["svc.test:8443"], &["svc.test:22", "bad.test"]);
        assert_eq!(p.check_name("svc.test"), name(false));
        assert_eq!(
            p.check_name("bad.test"),
            HostVerdict::Deny(DenyReason::Denied)
        );
        assert_eq!(
            p.check_name("other.test"),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
    }

    #[test]
    fn empty_allowlist_blocks_everything() {
        let p = policy(&[], &[]);
        assert_eq!(
            p.check_host("example.com", 443),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        assert_eq!(
            p.check_host("", 443),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
    }

    #[test]
    fn limited_mode_allows_only_safe_methods() {
        for method in ["GET", "HEAD", "OPTIONS"] {
            assert!(Mode::Limited.allows_method(method));
        }
        for method in ["POST", "PUT", "CONNECT", "DELETE", "get"] {
            assert!(!Mode::Limited.allows_method(method));
            assert!(Mode::Full.allows_method(method));
        }
    }

    #[test]
    fn normalize_host_handles_ports_brackets_dots_and_scopes() {
        assert_eq!(normalize_host(" Example.COM:8080 "), "example.com");
        assert_eq!(normalize_host("example.com."), "example.com");
        assert_eq!(normalize_host("[::1]:443"), "::1");
        assert_eq!(normalize_host("fe80::1%25lo0"), "fe80::1%lo0");
        assert_eq!(normalize_host("2001:db8::1"), "2001:db8::1");
    }
}
