//! The proxy's destination policy as data: host patterns, the allow and deny
//! lists, the mode, and the pure decision for a canonical destination
//! (`net::destination::Host`) before any name is resolved.
//!
//! Pattern forms (matched case-insensitively against the canonical host):
//! `example.com` (that host), `*.example.com` (strict subdomains),
//! `**.example.com` (apex and subdomains), `*` (every host; allowlist only),
//! other glob syntax (`?`, `[a-z]`, `{a,b}`, `*` crossing dots), IP
//! addresses (`10.0.0.1`, `[::1]`, any spelling `net::destination` reads),
//! each optionally scoped to one port (`example.com:8443`, `[::1]:8080`).
//! An entry without glob syntax is canonicalised like a request host (and
//! refused when it names none); globs match the canonical text only (an
//! address as dotted-quad or RFC 5952 text), never the spelling asked for,
//! so `*.example.com` covers no address. Deny always wins over allow; a deny
//! entry for an IPv4 address also covers the IPv6 addresses carrying it
//! (`net::address::embedded_ipv4`).
//!
//! Local and private destinations (`localhost`, loopback and non-public
//! addresses) are refused unless `allow_local_binding` is set, except an IP
//! address or `localhost` named by an exact allow entry, which is reachable
//! as such. Names are never resolved here: [`Policy::check`] says whether a
//! name may be resolved at all and hands back the one name to resolve;
//! `net::resolve` resolves it and refuses private answers, `net::dial`
//! dials only the checked addresses.

use std::net::{IpAddr, Ipv4Addr};

use super::address::{embedded_ipv4, is_non_public};
use super::decision::DenyReason;
use super::destination::{shown, DnsName, Host, HostError};
use crate::glob_pattern::TextGlob;

/// Why a pattern list cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid value for network.denied_domains: {0} (allowed exact hosts or scoped wildcards like *.example.com or **.example.com)")]
    GlobalWildcardDenied(String),
    #[error("invalid glob pattern: {0}")]
    InvalidGlob(String),
    #[error("invalid port in pattern: {0}")]
    InvalidPort(String),
    /// The error says which text and why.
    #[error("invalid host pattern: {0}")]
    InvalidHost(HostError),
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
        let host = host.to_ascii_lowercase();
        let host = host.trim_end_matches('.');
        if host.is_empty() {
            return Err(PolicyError::InvalidGlob(source));
        }
        let global = matches!(host, "*" | "**" | "[*]" | "**.*" | "**.[*]");
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
        let exact = !host.contains(['*', '?', '[', '{']);
        if exact {
            // The same canonical form as a request host: any spelling of
            // an address, one trailing dot, no zone id.
            let canonical = Host::parse(host).map_err(PolicyError::InvalidHost)?;
            return Ok(Self {
                globs: vec![TextGlob::new(&canonical.to_string())],
                source,
                port,
                exact: true,
                global: false,
            });
        }
        if !host.is_ascii() {
            return Err(PolicyError::InvalidHost(HostError::NonAscii(shown(host))));
        }
        let mut globs = Vec::new();
        for alternative in
            expand_braces(host).ok_or_else(|| PolicyError::InvalidGlob(source.clone()))?
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
        Ok(Self {
            source,
            globs: globs.iter().map(|glob| TextGlob::new(glob)).collect(),
            port,
            exact: false,
            global: false,
        })
    }

    /// Whether this entry covers the canonical host text `host` within
    /// `scope`: one port, or (for name lookups, where no port is known) a
    /// deny entry must cover every port while an allow entry may cover any.
    fn covers(&self, host: &str, scope: PortScope) -> bool {
        match (scope, self.port) {
            (PortScope::Port(port), Some(p)) if p != port => return false,
            (PortScope::EveryPort, Some(_)) => return false,
            _ => {}
        }
        self.global || self.globs.iter().any(|glob| glob.matches(host))
    }

    /// Whether this is an exact (wildcard-free) entry for `host` in `scope`.
    fn names_exactly(&self, host: &str, scope: PortScope) -> bool {
        self.exact && self.covers(host, scope)
    }
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

/// Which ports a check is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortScope {
    Port(u16),
    /// Entries without a port only.
    EveryPort,
    /// Any entry, whatever its port.
    AnyPort,
}

/// What a destination needs before a dial, according to the lists alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostVerdict {
    /// Refused.
    Deny(DenyReason),
    /// An IP address that may be dialed; `local_ok` lets the dial reach a
    /// non-public address.
    Literal { ip: IpAddr, local_ok: bool },
    /// An allowed name: resolve this one; private answers are refused
    /// unless `local_ok` (always set for `localhost` when it is allowed).
    Name { name: DnsName, local_ok: bool },
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

    /// The decision for a destination before resolution.
    pub fn check(&self, host: &Host, port: u16) -> HostVerdict {
        let scope = PortScope::Port(port);
        self.decide(host, scope, scope)
    }

    /// [`Policy::check`] for host text in any spelling (`Example.COM.`,
    /// `[::1]`, `0x7f.1`); text that names no destination is not allowed.
    pub fn check_host(&self, host: &str, port: u16) -> HostVerdict {
        match Host::parse(host) {
            Ok(host) => self.check(&host, port),
            Err(_) => HostVerdict::Deny(DenyReason::NotAllowed),
        }
    }

    /// The decision for a name lookup (no port known): denied only by an
    /// entry covering every port, allowed by an entry for any port.
    pub fn check_name(&self, name: &DnsName) -> HostVerdict {
        self.decide(
            &Host::Name(name.clone()),
            PortScope::EveryPort,
            PortScope::AnyPort,
        )
    }

    fn decide(&self, host: &Host, deny_scope: PortScope, allow_scope: PortScope) -> HostVerdict {
        let text = host.to_string();
        let carried: Option<Ipv4Addr> = match host {
            Host::Ip(IpAddr::V6(v6)) => embedded_ipv4(*v6),
            _ => None,
        };
        let denied = |form: &str| self.deny.iter().any(|p| p.covers(form, deny_scope));
        if denied(&text) || carried.is_some_and(|v4| denied(&v4.to_string())) {
            return HostVerdict::Deny(DenyReason::Denied);
        }
        let allowed = self.allow.iter().any(|p| p.covers(&text, allow_scope));
        let is_local = match host {
            Host::Name(name) => name.as_str() == "localhost",
            Host::Ip(ip) => is_non_public(*ip),
        };
        if is_local {
            let reachable = self
                .allow
                .iter()
                .any(|p| p.names_exactly(&text, allow_scope))
                || (self.allow_local_binding && allowed);
            return match (reachable, host) {
                (false, _) => HostVerdict::Deny(DenyReason::NotAllowedLocal),
                (true, Host::Ip(ip)) => HostVerdict::Literal {
                    ip: *ip,
                    local_ok: true,
                },
                (true, Host::Name(name)) => HostVerdict::Name {
                    name: name.clone(),
                    local_ok: true,
                },
            };
        }
        if !allowed {
            return HostVerdict::Deny(DenyReason::NotAllowed);
        }
        match host {
            Host::Ip(ip) => HostVerdict::Literal {
                ip: *ip,
                local_ok: self.allow_local_binding,
            },
            Host::Name(name) => HostVerdict::Name {
                name: name.clone(),
                local_ok: self.allow_local_binding,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns(text: &str) -> DnsName {
        DnsName::parse(text).unwrap()
    }

    fn policy(allow: &[&str], deny: &[&str]) -> Policy {
        Policy::new(allow, deny, Mode::Full, false).unwrap()
    }

    fn name(host: &str, local_ok: bool) -> HostVerdict {
        HostVerdict::Name {
            name: DnsName::parse(host).unwrap(),
            local_ok,
        }
    }

    #[test]
    fn exact_pattern_matches_only_that_host_case_insensitively() {
        let p = policy(&["Example.COM."], &[]);
        assert_eq!(p.check_host("example.com", 443), name("example.com", false));
        assert_eq!(p.check_host("EXAMPLE.com.", 80), name("example.com", false));
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
        assert_eq!(
            p.check_host("a.example.com", 443),
            name("a.example.com", false)
        );
        assert_eq!(
            p.check_host("a.b.example.com", 443),
            name("a.b.example.com", false)
        );
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
        assert_eq!(p.check_host("example.com", 443), name("example.com", false));
        assert_eq!(
            p.check_host("x.y.example.com", 443),
            name("x.y.example.com", false)
        );
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
        assert_eq!(
            p.check_host("region1.v2.tunnel.com", 1),
            name("region1.v2.tunnel.com", false)
        );
        assert_eq!(
            p.check_host("region.v2.tunnel.com", 1),
            name("region.v2.tunnel.com", false)
        );
        assert_eq!(
            p.check_host("xregion1.v2.tunnel.com", 1),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        assert_eq!(p.check_host("b.x.com", 1), name("b.x.com", false));
        assert_eq!(
            p.check_host("c.x.com", 1),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        assert_eq!(p.check_host("h7.y.com", 1), name("h7.y.com", false));
        assert_eq!(
            p.check_host("hx.y.com", 1),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
    }

    #[test]
    fn global_wildcard_is_allowlist_only() {
        let p = policy(&["*"], &["evil.com"]);
        assert_eq!(
            p.check_host("anything.org", 443),
            name("anything.org", false)
        );
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
        assert_eq!(
            p.check_host("cdn.openai.com", 443),
            name("cdn.openai.com", false)
        );
    }

    #[test]
    fn port_scoped_entries_cover_one_port() {
        let p = policy(&["a.com:8443", "[::1]:8080"], &["b.com:22"]);
        assert_eq!(p.check_host("a.com", 8443), name("a.com", false));
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
        assert_eq!(q.check_host("b.com", 443), name("b.com", false));
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
        assert_eq!(exact.check_host("LOCALHOST.", 80), name("localhost", true));
        assert_eq!(
            exact.check_host("10.0.0.2", 80),
            HostVerdict::Deny(DenyReason::NotAllowedLocal)
        );
        let binding = Policy::new(["*"], [""; 0], Mode::Full, true).unwrap();
        assert_eq!(
            binding.check_host("127.0.0.1", 80),
            HostVerdict::Literal { ip, local_ok: true }
        );
        assert_eq!(binding.check_host("x.com", 80), name("x.com", true));
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
    fn zone_ids_are_refused_in_entries_and_in_requests() {
        for entry in ["[fe80::1%25lo0]", "fe80::1%eth0", "[fd00::1%25eth0]:80"] {
            assert!(
                matches!(
                    HostPattern::parse(entry, false),
                    Err(PolicyError::InvalidHost(_))
                ),
                "{entry}"
            );
        }
        let p = policy(&["*"], &["fd00::1"]);
        for host in ["fd00::1%eth0", "[fd00::1%eth0]", "[fd00::1%25eth0]"] {
            assert_eq!(
                p.check_host(host, 80),
                HostVerdict::Deny(DenyReason::NotAllowed),
                "{host}"
            );
        }
    }

    #[test]
    fn a_wildcard_never_covers_an_address_hidden_in_a_name() {
        let p = Policy::new(["*.allowed.test"], [""; 0], Mode::Full, true).unwrap();
        for host in [
            "[100.128.0.2%25.allowed.test]",
            "100.128.0.2%.allowed.test",
            "[2001:db8::1%25.allowed.test]",
            "[127.0.0.1%25.allowed.test]",
            "127.0.0.1.allowed.test.1",
            "evil.test@x.allowed.test",
            "x.allowed.test@evil.test",
            "x%2eallowed.test",
            "x.allowed.test%00",
        ] {
            assert_eq!(
                p.check_host(host, 8080),
                HostVerdict::Deny(DenyReason::NotAllowed),
                "{host}"
            );
        }
        assert_eq!(
            p.check_host("X.Allowed.TEST.", 8080),
            name("x.allowed.test", true)
        );
        // Globs see the canonical text, not the spelling.
        let digits = policy(&["16*", "9.9.*"], &[]);
        assert_eq!(
            digits.check_host("16843009", 80),
            HostVerdict::Deny(DenyReason::NotAllowed)
        );
        let ip = "9.9.9.9".parse().unwrap();
        assert_eq!(
            digits.check_host("151587081", 80),
            HostVerdict::Literal {
                ip,
                local_ok: false
            }
        );
    }

    #[test]
    fn ip_entries_cover_every_spelling_of_their_address() {
        let p = Policy::new(["*"], ["100.128.0.2", "[2001:2::1]"], Mode::Full, true).unwrap();
        for host in [
            "100.128.0.2",
            "1686110210",
            "0x64800002",
            "100.128.2",
            "0144.0200.0.2",
            "100.128.0.2.",
            "[::ffff:100.128.0.2]",
            "[::ffff:6480:2]",
            "[::100.128.0.2]",
            "[64:ff9b::6480:2]",
            "[2002:6480:2::1]",
            "[2001:0002::0001]",
            "[2001:2:0::1]",
        ] {
            assert_eq!(
                p.check_host(host, 443),
                HostVerdict::Deny(DenyReason::Denied),
                "{host}"
            );
        }
        let ip = "100.128.0.3".parse().unwrap();
        assert_eq!(
            p.check_host("0x64800003", 443),
            HostVerdict::Literal { ip, local_ok: true }
        );
        // Entries may be spelled oddly too.
        let odd = policy(&["0x7f.1"], &[]);
        let loopback = "127.0.0.1".parse().unwrap();
        for host in ["127.0.0.1", "2130706433", "[::ffff:127.0.0.1]"] {
            assert_eq!(
                odd.check_host(host, 80),
                HostVerdict::Literal {
                    ip: loopback,
                    local_ok: true
                },
                "{host}"
            );
        }
        // An allow entry for IPv4 does not allow the IPv6 addresses
        // carrying it.
        assert_eq!(
            odd.check_host("[64:ff9b::7f00:1]", 80),
            HostVerdict::Deny(DenyReason::NotAllowedLocal)
        );
    }

    #[test]
    fn entries_that_name_no_host_are_refused() {
        for entry in [
            "bücher.test",
            "a b.test",
            "1.2.3.999",
            "a..test",
            "x%2ey.test",
        ] {
            assert!(
                matches!(
                    HostPattern::parse(entry, false),
                    Err(PolicyError::InvalidHost(_))
                ),
                "{entry}"
            );
        }
        assert_eq!(
            HostPattern::parse("*.bücher.test", true)
                .unwrap_err()
                .to_string(),
            "invalid host pattern: *.b\\u{fc}cher.test: non-ASCII names are not accepted; write the xn-- (punycode) form"
        );
    }

    #[test]
    fn name_lookups_ignore_ports_but_honour_port_less_denials() {
        let p = policy(&["svc.test:8443"], &["svc.test:22", "bad.test"]);
        assert_eq!(p.check_name(&dns("svc.test")), name("svc.test", false));
        assert_eq!(
            p.check_name(&dns("bad.test")),
            HostVerdict::Deny(DenyReason::Denied)
        );
        assert_eq!(
            p.check_name(&dns("other.test")),
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
}
