//! The proxy's destinations (`net::destination`, `net::policy`): every
//! spelling of one address gets the decision its canonical form gets,
//! whatever the allow and deny lists; no text a wildcard name entry covers
//! is an address; whatever parses is canonical (its text parses back to
//! itself) and nothing panics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use codexbox::net::destination::Host;
use codexbox::net::policy::{HostVerdict, Mode, Policy};
use proptest::prelude::*;

use crate::common::fuzz;

/// Addresses near the ones policies name, and anything else.
fn address() -> BoxedStrategy<IpAddr> {
    prop_oneof![
        2 => prop::sample::select(vec![
            "100.128.0.2", "100.128.0.3", "127.0.0.1", "10.0.0.1", "8.8.8.8", "0.0.0.0",
            "255.255.255.255", "2001:2::1", "2001:db8::1", "::1", "fe80::1", "64:ff9b::6480:2",
            "2002:6480:2::1", "::6480:2", "2606:4700::1",
        ])
        .prop_map(|text| text.parse::<IpAddr>().unwrap()),
        1 => any::<u32>().prop_map(|n| IpAddr::V4(Ipv4Addr::from(n))),
        1 => any::<[u16; 8]>().prop_map(|s| IpAddr::V6(Ipv6Addr::from(s))),
    ]
    .boxed()
}

/// One `inet_aton` part for `value`: decimal, octal (leading zeros) or
/// hexadecimal (either case of `0x` and of the digits).
fn part(value: u32, style: u8) -> String {
    match style % 5 {
        0 => value.to_string(),
        1 => format!("0{value:o}"),
        2 => format!("0x{value:x}"),
        3 => format!("0X{value:X}"),
        _ => format!("0x000{value:x}"),
    }
}

/// A spelling of an IPv4 address chosen by `choice`: one to four parts,
/// each in its own radix, maybe a trailing dot, or an IPv4-mapped IPv6
/// form.
fn spell_v4(v4: Ipv4Addr, choice: &[u8; 8]) -> String {
    let n = u32::from(v4);
    let [a, b, c, d] = v4.octets();
    let text = match choice[0] % 6 {
        0 => part(n, choice[1]),
        1 => format!(
            "{}.{}",
            part(a.into(), choice[1]),
            part(n & 0xff_ffff, choice[2])
        ),
        2 => format!(
            "{}.{}.{}",
            part(a.into(), choice[1]),
            part(b.into(), choice[2]),
            part(n & 0xffff, choice[3])
        ),
        3 => format!(
            "{}.{}.{}.{}",
            part(a.into(), choice[1]),
            part(b.into(), choice[2]),
            part(c.into(), choice[3]),
            part(d.into(), choice[4])
        ),
        4 => return format!("[::ffff:{v4}]"),
        _ => {
            let mapped = v4.to_ipv6_mapped();
            return spell_v6(mapped, choice);
        }
    };
    if choice[5].is_multiple_of(2) {
        format!("{text}.")
    } else {
        text
    }
}

/// A spelling of an IPv6 address chosen by `choice`: bracketed or not,
/// each group zero-padded or not, upper or lower case, `::` over any run
/// of zero groups (or none).
fn spell_v6(v6: Ipv6Addr, choice: &[u8; 8]) -> String {
    let groups: Vec<String> = v6
        .segments()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pad = choice[i % 8].is_multiple_of(2);
            let upper = choice[(i + 3) % 8].is_multiple_of(3);
            match (pad, upper) {
                (true, true) => format!("{s:04X}"),
                (true, false) => format!("{s:04x}"),
                (false, true) => format!("{s:X}"),
                (false, false) => format!("{s:x}"),
            }
        })
        .collect();
    // Zero runs; `::` replaces the one `choice` picks, if any.
    let segments = v6.segments();
    let mut runs = Vec::new();
    let mut i = 0;
    while i < 8 {
        if segments[i] == 0 {
            let start = i;
            while i < 8 && segments[i] == 0 {
                i += 1;
            }
            runs.push((start, i));
        } else {
            i += 1;
        }
    }
    let text = match runs.get(usize::from(choice[6]) % (runs.len() + 1)) {
        Some(&(start, end)) => {
            format!("{}::{}", groups[..start].join(":"), groups[end..].join(":"))
        }
        None => groups.join(":"),
    };
    if choice[7].is_multiple_of(4) {
        text
    } else {
        format!("[{text}]")
    }
}

fn spell(ip: IpAddr, choice: &[u8; 8]) -> String {
    match ip {
        IpAddr::V4(v4) => spell_v4(v4, choice),
        IpAddr::V6(v6) => spell_v6(v6, choice),
    }
}

/// Entries around `ip`: the address itself in some spelling, its
/// neighbours, wildcards, globs over address text, names.
fn entry(ip: IpAddr, kind: u8, choice: [u8; 8]) -> String {
    match kind % 8 {
        0 => spell(ip, &choice),
        1 => "*".to_owned(),
        2 => "100.128.*".to_owned(),
        3 => "*.allowed.test".to_owned(),
        4 => "[2001:2::1]".to_owned(),
        5 => "10.0.0.1".to_owned(),
        6 => {
            // A port needs brackets around IPv6.
            let text = spell(ip, &choice);
            if text.contains(':') && !text.starts_with('[') {
                format!("[{text}]:443")
            } else {
                format!("{text}:443")
            }
        }
        _ => "localhost".to_owned(),
    }
}

/// A policy over entries near an address, and spellings of the address.
#[derive(Debug, Clone)]
struct Case {
    ip: IpAddr,
    allow: Vec<String>,
    deny: Vec<String>,
    allow_local_binding: bool,
    port: u16,
    /// Choices of [`spell`].
    spellings: Vec<[u8; 8]>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        address(),
        prop::collection::vec((any::<u8>(), any::<[u8; 8]>()), 0..4),
        prop::collection::vec((any::<u8>(), any::<[u8; 8]>()), 0..3),
        any::<bool>(),
        prop::sample::select(vec![80u16, 443, 8080]),
        prop::collection::vec(any::<[u8; 8]>(), 1..8),
    )
        .prop_map(
            |(ip, allow, deny, allow_local_binding, port, spellings)| Case {
                ip,
                allow: allow
                    .into_iter()
                    .map(|(kind, choice)| entry(ip, kind, choice))
                    .collect(),
                // `*` is refused as a deny entry; the others stand.
                deny: deny
                    .into_iter()
                    .map(|(kind, choice)| entry(ip, kind, choice))
                    .filter(|entry| entry != "*")
                    .collect(),
                allow_local_binding,
                port,
                spellings,
            },
        )
}

#[test]
fn every_spelling_of_an_address_gets_the_decision_of_its_canonical_form() {
    fuzz::run("destination_spellings", 1024, case(), |case| {
        let Case {
            ip,
            allow,
            deny,
            allow_local_binding,
            port,
            spellings,
        } = case;
        let policy = match Policy::new(&allow, &deny, Mode::Full, allow_local_binding) {
            Ok(policy) => policy,
            Err(err) => {
                return Err(TestCaseError::fail(format!(
                    "entries {allow:?} {deny:?} refused: {err}"
                )))
            }
        };
        let canonical = Host::from_ip(ip);
        let expected = policy.check(&canonical, port);
        if let HostVerdict::Literal { ip: dialed, .. } = &expected {
            prop_assert_eq!(*dialed, canonical_ip(ip));
        }
        for choice in &spellings {
            let text = spell(ip, choice);
            prop_assert_eq!(
                Host::parse(&text),
                Ok(canonical.clone()),
                "{} does not spell {}",
                text,
                ip
            );
            prop_assert_eq!(
                policy.check_host(&text, port),
                expected.clone(),
                "{} vs {} under allow {:?} deny {:?}",
                text,
                canonical,
                allow,
                deny
            );
        }
        Ok(())
    });
}

fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Host-shaped text: labels of digits, hex, letters, punctuation a parser
/// might split on, percent escapes, brackets, Unicode look-alikes.
fn host_text() -> BoxedStrategy<String> {
    let piece = prop_oneof![
        "[0-9]{1,4}",
        "0[xX][0-9a-fA-F]{0,4}",
        "[a-zA-Z0-9_-]{1,6}",
        prop::sample::select(vec![
            ".",
            "..",
            "%",
            "%25",
            "%2e",
            "@",
            ":",
            "::",
            "[",
            "]",
            "\\",
            " ",
            "\t",
            "\0",
            "*",
            "allowed.test",
            ".allowed.test",
            "ffff",
            "\u{3002}",
            "\u{ff0e}",
            "é",
            "xn--",
        ])
        .prop_map(str::to_owned),
    ];
    prop_oneof![
        4 => prop::collection::vec(piece, 1..8).prop_map(|pieces| pieces.concat()),
        1 => "\\PC{0,40}",
    ]
    .boxed()
}

#[test]
fn no_text_a_wildcard_name_entry_covers_is_an_address() {
    let policy = Policy::new(["*.allowed.test"], [""; 0], Mode::Full, true).unwrap();
    fuzz::run("destination_wildcard", 2048, host_text(), |text| {
        match policy.check_host(&text, 443) {
            HostVerdict::Deny(_) => {}
            HostVerdict::Name { name, .. } => {
                prop_assert!(
                    name.as_str().ends_with(".allowed.test"),
                    "{text:?} -> {name}"
                );
            }
            other => {
                return Err(TestCaseError::fail(format!("{text:?} -> {other:?}")));
            }
        }
        Ok(())
    });
}

#[test]
fn whatever_parses_is_canonical_and_parses_back_to_itself() {
    fuzz::run("destination_parse", 2048, host_text(), |text| {
        let Ok(host) = Host::parse(&text) else {
            return Ok(());
        };
        match &host {
            Host::Name(name) => {
                let name = name.as_str();
                prop_assert!(name.len() <= 253, "{text:?}");
                prop_assert!(
                    name.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || matches!(b, b'-' | b'_' | b'.')),
                    "{text:?} -> {name:?}"
                );
            }
            Host::Ip(IpAddr::V6(v6)) => {
                prop_assert!(v6.to_ipv4_mapped().is_none(), "{text:?}");
            }
            Host::Ip(IpAddr::V4(_)) => {}
        }
        let again = match &host {
            Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
            other => other.to_string(),
        };
        prop_assert_eq!(Host::parse(&again), Ok(host.clone()), "{:?}", text);
        Ok(())
    });
}
