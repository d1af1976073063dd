//! The one canonical form of a destination host, and the parsing of every
//! spelling the proxy is handed (an HTTP authority, a `Host` header, a
//! SOCKS5 name, a DNS question, an allow or deny entry) into it.
//!
//! A [`Host`] is either a [`DnsName`] — lowercase ASCII letters, digits,
//! `-` and `_`, labels of 1 to 63 bytes not starting or ending with `-`, at
//! most 253 bytes, one trailing dot dropped — or an [`IpAddr`] without a
//! zone id, IPv4-mapped IPv6 addresses folded into IPv4. Everything else is
//! refused ([`HostError`]). Policy decisions, name resolution, dialing and
//! the audit log all use this one value, so no part of the proxy can read a
//! different destination into the same text.
//!
//! IPv4 is read as `inet_aton` reads it (what glibc's resolver and most
//! clients do with these spellings): one to four parts, each decimal, octal
//! (leading `0`) or hexadecimal (`0x`), the last filling the remaining
//! bytes (`1686110210`, `0x64800002`, `100.128.2`, `0144.0200.0.2` are all
//! `100.128.0.2`). A name whose last label is a number (digits, or `0x`
//! and hex digits) is read as IPv4 or refused, never resolved: no resolver
//! would look it up as a name. IPv6 is read as RFC 4291 writes it, inside
//! brackets when it comes with a port; a zone id (`%eth0`, `%25eth0`) is
//! refused, since the proxy never dials through a chosen interface.
//! Non-ASCII names are refused (write the `xn--` form), as are
//! percent-encoded and bracketed non-IPv6 hosts.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Longest DNS name, without its trailing dot (RFC 1035 §2.3.4).
pub const MAX_NAME_BYTES: usize = 253;
/// Longest DNS label (RFC 1035 §2.3.4).
pub const MAX_LABEL_BYTES: usize = 63;
/// Most characters of a refused host kept for messages and logs.
const MAX_SHOWN_CHARS: usize = 300;

/// Why a text names no destination.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("empty host")]
    Empty,
    #[error("{0}: IPv6 zone ids are not accepted")]
    ZoneId(String),
    #[error("{0}: not an IPv6 address inside brackets")]
    Bracketed(String),
    #[error("{0}: not an IPv6 address")]
    Ipv6(String),
    #[error("{0}: ends in a number but is not an IPv4 address")]
    Ipv4(String),
    #[error("{0}: non-ASCII names are not accepted; write the xn-- (punycode) form")]
    NonAscii(String),
    #[error("{0}: longer than {MAX_NAME_BYTES} bytes")]
    TooLong(String),
    #[error("{0}: not a DNS name (letters, digits, '-', '_' in dot-separated labels of 1 to {MAX_LABEL_BYTES} bytes)")]
    Name(String),
}

impl HostError {
    /// The refused text, escaped and shortened (safe to log or print).
    pub fn shown(&self) -> &str {
        match self {
            HostError::Empty => "",
            HostError::ZoneId(text)
            | HostError::Bracketed(text)
            | HostError::Ipv6(text)
            | HostError::Ipv4(text)
            | HostError::NonAscii(text)
            | HostError::TooLong(text)
            | HostError::Name(text) => text,
        }
    }
}

/// `text` with control, quote, backslash and non-ASCII characters escaped
/// and cut to `MAX_SHOWN_CHARS`: what a refused host looks like in a log
/// line or on a terminal.
pub fn shown(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if out.len() >= MAX_SHOWN_CHARS {
            out.push('…');
            break;
        }
        match c {
            ' '..='~' if c != '\\' && c != '"' => out.push(c),
            _ => out.extend(c.escape_default()),
        }
    }
    out
}

/// What a log line or a refusal shows for a parsed host: its canonical
/// text, or the refused text escaped.
pub fn shown_parsed<T: fmt::Display>(parsed: &Result<T, HostError>) -> String {
    match parsed {
        Ok(host) => host.to_string(),
        Err(err) => err.shown().to_owned(),
    }
}

/// A validated DNS name (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DnsName(String);

impl DnsName {
    /// Validates `text` as a name (one trailing dot and upper case allowed).
    /// IP spellings are refused here: use [`Host::parse`] to accept both.
    pub fn parse(text: &str) -> Result<Self, HostError> {
        match Host::parse(text)? {
            Host::Name(name) => Ok(name),
            Host::Ip(_) => Err(HostError::Name(shown(text))),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DnsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A destination host in its canonical form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    Name(DnsName),
    /// Never an IPv4-mapped IPv6 address.
    Ip(IpAddr),
}

impl Host {
    /// The canonical host `text` names: a bracketed IPv6 address, an
    /// unbracketed one (SOCKS5 names, entries), an IPv4 address in any
    /// `inet_aton` spelling, or a DNS name.
    pub fn parse(text: &str) -> Result<Self, HostError> {
        if text.is_empty() {
            return Err(HostError::Empty);
        }
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .filter(|inner| inner.contains(':'))
                .ok_or_else(|| HostError::Bracketed(shown(text)))?;
            return parse_ipv6(inner, text).map(|v6| Host::from_ip(v6.into()));
        }
        if text.contains(':') {
            return parse_ipv6(text, text).map(|v6| Host::from_ip(v6.into()));
        }
        if !text.is_ascii() {
            return Err(HostError::NonAscii(shown(text)));
        }
        let lower = text.to_ascii_lowercase();
        let name = lower.strip_suffix('.').unwrap_or(&lower);
        if ends_in_number(name) {
            return parse_ipv4(name)
                .map(|v4| Host::Ip(v4.into()))
                .ok_or_else(|| HostError::Ipv4(shown(text)));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(HostError::TooLong(shown(text)));
        }
        if !name.split('.').all(is_label) {
            return Err(HostError::Name(shown(text)));
        }
        Ok(Host::Name(DnsName(name.to_owned())))
    }

    /// The canonical host of an address (IPv4-mapped IPv6 becomes IPv4).
    pub fn from_ip(ip: IpAddr) -> Self {
        Host::Ip(canonical_ip(ip))
    }

    /// `host:port`, with brackets around IPv6.
    pub fn with_port(&self, port: u16) -> String {
        match self {
            Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
            other => format!("{other}:{port}"),
        }
    }
}

impl fmt::Display for Host {
    /// The name, or the address (IPv6 without brackets, RFC 5952 form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => name.fmt(f),
            Host::Ip(ip) => ip.fmt(f),
        }
    }
}

/// `ip` with an IPv4-mapped IPv6 address folded into IPv4.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn parse_ipv6(text: &str, original: &str) -> Result<Ipv6Addr, HostError> {
    if text.contains('%') {
        return Err(HostError::ZoneId(shown(original)));
    }
    Ipv6Addr::from_str(text).map_err(|_| HostError::Ipv6(shown(original)))
}

/// One LDH label (RFC 5890), underscores allowed (`_dmarc`, legacy hosts).
fn is_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= MAX_LABEL_BYTES
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Whether the last label of `name` is a number `inet_aton` would read
/// (the WHATWG URL "ends in a number" test): digits, or `0x` and hex
/// digits (possibly none).
fn ends_in_number(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last.strip_prefix("0x")
        .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// IPv4 as `inet_aton` reads it (see the module documentation); `text` is
/// lowercase. `None` when it is not one.
pub fn parse_ipv4(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u32> = text
        .split('.')
        .map(parse_ipv4_part)
        .collect::<Option<_>>()?;
    let (last, leading) = parts.split_last()?;
    if leading.len() > 3 || leading.iter().any(|part| *part > 0xff) {
        return None;
    }
    // The last part fills the bytes the leading parts leave.
    let spare_bits = 8 * (4 - u32::try_from(leading.len()).ok()?);
    if spare_bits < 32 && *last >> spare_bits != 0 {
        return None;
    }
    let high = leading.iter().enumerate().fold(0u32, |acc, (index, part)| {
        acc | part << (24 - 8 * u32::try_from(index).unwrap_or(0))
    });
    Some(Ipv4Addr::from(high | last))
}

/// One `inet_aton` part: `0x…` hexadecimal (no digits is 0), `0…` octal,
/// decimal otherwise; at most 32 bits.
fn parse_ipv4_part(part: &str) -> Option<u32> {
    let (digits, radix) = if let Some(hex) = part.strip_prefix("0x") {
        if hex.is_empty() {
            return Some(0);
        }
        (hex, 16)
    } else if let Some(octal) = part.strip_prefix('0').filter(|rest| !rest.is_empty()) {
        (octal, 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

/// Why an authority's port is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error("invalid port {0:?} (1 to 65535)")]
    Invalid(String),
}

/// Splits an authority (`host`, `host:port`, `[v6]:port`) into its host
/// text and its port (`None` when absent or empty: the scheme's default).
/// The host text still has to pass [`Host::parse`]; a port that is not a
/// number from 1 to 65535 is refused, never read as the default.
pub fn split_authority(authority: &str) -> Result<(&str, Option<u16>), PortError> {
    // A colon inside the brackets of an IPv6 address is not the port's.
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !authority.starts_with('[') || host.ends_with(']') => (host, port),
        _ => (authority, ""),
    };
    if port.is_empty() {
        return Ok((host, None));
    }
    let invalid = || PortError::Invalid(shown(port));
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    match port.trim_start_matches('0').parse::<u16>() {
        Ok(0) | Err(_) => Err(invalid()),
        Ok(port) => Ok((host, Some(port))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Host {
        Host::Ip(text.parse().unwrap())
    }

    fn name(text: &str) -> Host {
        Host::Name(DnsName(text.to_owned()))
    }

    #[test]
    fn every_inet_aton_spelling_of_an_ipv4_address_is_that_address() {
        for spelling in [
            "100.128.0.2",
            "1686110210",
            "0x64800002",
            "0X64800002",
            "100.128.2",
            "100.8388610",
            "0144.0200.0.2",
            "0x64.0x80.0x0.0x2",
            "0x64.128.0.02",
            "100.128.0.2.",
            "0144.0200.00000.2",
        ] {
            assert_eq!(Host::parse(spelling), Ok(ip("100.128.0.2")), "{spelling}");
        }
        assert_eq!(Host::parse("0x"), Ok(ip("0.0.0.0")));
        assert_eq!(Host::parse("127.1"), Ok(ip("127.0.0.1")));
        assert_eq!(Host::parse("4294967295"), Ok(ip("255.255.255.255")));
    }

    #[test]
    fn names_ending_in_a_number_that_is_no_ipv4_address_are_refused() {
        for text in [
            "4294967296",
            "1.2.3.256",
            "1.2.65536",
            "1.16777216",
            "256.1",
            "1.2.3.4.5",
            "1.2.3.4.5.",
            "08",
            "0x1g.2",
            "1..2",
            "a.0x",
            "example.123",
            "99999999999999999999",
        ] {
            assert!(
                matches!(Host::parse(text), Err(HostError::Ipv4(_))),
                "{text}: {:?}",
                Host::parse(text)
            );
        }
    }

    #[test]
    fn ipv6_spellings_are_one_address_and_mapped_ipv4_is_ipv4() {
        for spelling in [
            "[2001:0002::0001]",
            "[2001:2:0::1]",
            "2001:2::1",
            "[2001:2:0:0:0:0:0:1]",
        ] {
            assert_eq!(Host::parse(spelling), Ok(ip("2001:2::1")), "{spelling}");
        }
        for spelling in [
            "[::ffff:100.128.0.2]",
            "[::ffff:6480:2]",
            "[::FFFF:6480:0002]",
        ] {
            assert_eq!(Host::parse(spelling), Ok(ip("100.128.0.2")), "{spelling}");
        }
        assert_eq!(Host::parse("[::100.128.0.2]"), Ok(ip("::6480:2")));
        assert_eq!(
            Host::from_ip("::ffff:127.0.0.1".parse().unwrap()),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn zone_ids_and_non_ipv6_brackets_are_refused() {
        for text in [
            "[100.128.0.2%25.allowed.test]",
            "[2001:db8::1%25.allowed.test]",
            "[127.0.0.1%25.allowed.test]",
            "[fe80::1%25eth0]",
            "[fe80::1%eth0]",
            "fe80::1%eth0",
            "[2001:2:0::1%25x]",
        ] {
            assert!(Host::parse(text).is_err(), "{text}");
        }
        assert!(matches!(
            Host::parse("[fe80::1%25eth0]"),
            Err(HostError::ZoneId(_))
        ));
        for text in [
            "[100.128.0.2]",
            "[example.com]",
            "[]",
            "[::1",
            "::1]",
            "[::1]x",
        ] {
            assert!(Host::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn names_are_lowercase_ldh_labels_with_one_trailing_dot_at_most() {
        assert_eq!(Host::parse("Example.COM."), Ok(name("example.com")));
        assert_eq!(Host::parse("_dmarc.a-b.test"), Ok(name("_dmarc.a-b.test")));
        assert_eq!(
            Host::parse("xn--bcher-kva.test"),
            Ok(name("xn--bcher-kva.test"))
        );
        assert_eq!(Host::parse("localhost"), Ok(name("localhost")));
        assert_eq!(
            Host::parse("0x7f.example.com"),
            Ok(name("0x7f.example.com"))
        );
        assert_eq!(Host::parse("1e3"), Ok(name("1e3")));
        assert_eq!(Host::parse("1.2.3.4.example"), Ok(name("1.2.3.4.example")));
        for text in [
            "100.128.0.2%.allowed.test",
            "a%2eb.test",
            "allowed.test@evil.test",
            "a\\b.test",
            "a b.test",
            " a.test",
            "a.test\n",
            "a..test",
            ".a.test",
            "a.test..",
            "1.2.3.4..",
            ".",
            "-a.test",
            "a-.test",
            "a*.test",
            "a/b",
            "bücher.test",
            "ex\u{ff0e}test",
        ] {
            assert!(Host::parse(text).is_err(), "{text:?}");
        }
        assert!(matches!(
            Host::parse("bücher.test"),
            Err(HostError::NonAscii(_))
        ));
        assert_eq!(Host::parse(""), Err(HostError::Empty));
    }

    #[test]
    fn names_are_at_most_253_bytes_in_labels_of_at_most_63() {
        let label = "a".repeat(63);
        let longest = [label.as_str(); 4].join(".")[..253].to_owned();
        assert!(Host::parse(&longest).is_ok());
        assert!(Host::parse(&format!("{longest}.")).is_ok());
        assert!(matches!(
            Host::parse(&format!("{longest}a")),
            Err(HostError::TooLong(_))
        ));
        assert!(Host::parse(&format!("{}.test", "a".repeat(64))).is_err());
    }

    #[test]
    fn dns_names_refuse_ip_spellings() {
        assert!(DnsName::parse("a.test").is_ok());
        assert!(DnsName::parse("1686110210").is_err());
        assert!(DnsName::parse("[::1]").is_err());
    }

    #[test]
    fn refused_hosts_are_shown_escaped_and_short() {
        assert_eq!(shown("a\u{1b}[31m\"\\"), "a\\u{1b}[31m\\\"\\\\");
        assert_eq!(
            shown(&"x".repeat(1000)).chars().count(),
            MAX_SHOWN_CHARS + 1
        );
        assert_eq!(
            Host::parse("a\u{7}.test").unwrap_err().shown(),
            "a\\u{7}.test"
        );
    }

    #[test]
    fn display_and_with_port_are_canonical() {
        let v6 = Host::parse("[2001:0DB8::0001]").unwrap();
        assert_eq!(v6.to_string(), "2001:db8::1");
        assert_eq!(v6.with_port(443), "[2001:db8::1]:443");
        assert_eq!(Host::parse("A.Test.").unwrap().with_port(80), "a.test:80");
    }

    #[test]
    fn authorities_split_with_strict_ports() {
        assert_eq!(split_authority("a.test:8080"), Ok(("a.test", Some(8080))));
        assert_eq!(split_authority("a.test"), Ok(("a.test", None)));
        assert_eq!(split_authority("a.test:"), Ok(("a.test", None)));
        assert_eq!(split_authority("[::1]:443"), Ok(("[::1]", Some(443))));
        assert_eq!(split_authority("[::1]"), Ok(("[::1]", None)));
        assert_eq!(split_authority("a.test:00080"), Ok(("a.test", Some(80))));
        for port in [
            "73616",
            "65536",
            "0",
            "000",
            "-1",
            "+80",
            "8o",
            "99999999999999999999",
        ] {
            assert_eq!(
                split_authority(&format!("a.test:{port}")),
                Err(PortError::Invalid(port.to_owned())),
                "{port}"
            );
        }
        // The host part is left for Host::parse to refuse.
        assert_eq!(
            split_authority("[100.128.0.2%25.allowed.test]:8080"),
            Ok(("[100.128.0.2%25.allowed.test]", Some(8080)))
        );
        assert_eq!(
            split_authority("user@a.test:80"),
            Ok(("user@a.test", Some(80)))
        );
    }
}
