//! Address classification for the proxy: which addresses are local,
//! private or otherwise not globally reachable (docs/network.md, and
//! the IANA special-purpose registries) and so need an explicit
//! allowance, and which IPv4 address an IPv6 address carries.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is loopback, private, link-local, CGNAT, documentation,
/// benchmarking, multicast, broadcast, reserved, unspecified, or any other
/// address not globally reachable. An IPv6 address that carries an IPv4
/// address (see [`embedded_ipv4`]) is judged by it.
pub fn is_non_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_non_public_v4(v4),
        IpAddr::V6(v6) => is_non_public_v6(v6),
    }
}

fn is_non_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..=127).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || (a == 198 && (18..=19).contains(&b))
        || a >= 240
}

/// The IPv4 address an IPv6 address delivers to: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated; not `::`
/// or `::1`), NAT64 with the well-known prefix (`64:ff9b::a.b.c.d`,
/// RFC 6052) and 6to4 (`2002:AABB:CCDD::/48`, RFC 3056).
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = ip.segments();
    let low = || {
        let [a, b] = segments[6].to_be_bytes();
        let [c, d] = segments[7].to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if segments[..6].iter().all(|s| *s == 0) && !ip.is_loopback() && !ip.is_unspecified() {
        return Some(low());
    }
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low());
    }
    if segments[0] == 0x2002 {
        let [a, b] = segments[1].to_be_bytes();
        let [c, d] = segments[2].to_be_bytes();
        return Some(Ipv4Addr::new(a, b, c, d));
    }
    None
}

fn is_non_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_ipv4(ip) {
        return is_non_public_v4(v4);
    }
    let s = ip.segments();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // Unique local fc00::/7, link-local fe80::/10, site-local fec0::/10.
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
        // Discard-only 100::/64 and dummy 100:0:0:1::/64.
        || (s[0] == 0x100 && s[1] == 0 && s[2] == 0 && s[3] <= 1)
        // Local-use NAT64 64:ff9b:1::/48 (RFC 8215).
        || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1)
        || is_non_global_protocol_assignment(s)
        // Documentation 2001:db8::/32 and 3fff::/20 (RFC 9637).
        || (s[0] == 0x2001 && s[1] == 0xdb8)
        || (s[0] == 0x3fff && s[1] < 0x1000)
        // Segment routing SIDs 5f00::/16 (RFC 9602).
        || s[0] == 0x5f00
}

/// 2001::/23 (IETF protocol assignments: Teredo, benchmarking, ORCHID…)
/// except the blocks IANA lists as globally reachable: the PCP, TURN and
/// DNS-SD anycast addresses, AMT 2001:3::/32, AS112 2001:4:112::/48,
/// ORCHIDv2 2001:20::/28 and drone remote ID 2001:30::/28.
fn is_non_global_protocol_assignment(s: [u16; 8]) -> bool {
    if s[0] != 0x2001 || s[1] >= 0x200 {
        return false;
    }
    let anycast = s[1] == 1 && s[2..7].iter().all(|x| *x == 0) && (1..=3).contains(&s[7]);
    let global =
        anycast || s[1] == 3 || (s[1] == 4 && s[2] == 0x112) || (0x20..=0x3f).contains(&s[1]);
    !global
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_ranges_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.1.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "0.1.2.3",
            "100.64.0.1",
            "192.0.0.8",
            "192.0.2.1",
            "198.51.100.1",
            "203.0.113.1",
            "198.18.0.1",
            "198.19.255.1",
            "240.0.0.1",
            "::1",
            "::",
            "ff02::1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::10.0.0.1",
            "2001:db8::1",
            "3fff::1",
            "3fff:fff::1",
            "2002:a00:1::1",
            "2002:7f00:1::",
            "64:ff9b::a00:1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::8.8.8.8",
            "fec0::1",
            "100::1",
            "100:0:0:1::1",
            "2001::1",
            "2001:2::1",
            "2001:10::1",
            "2001:1::4",
            "5f00::1",
        ] {
            assert!(is_non_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "93.184.216.34",
            "100.128.0.1",
            "2001:4860::8888",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
            "64:ff9b::808:808",
            "2001:1::1",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "4000::1",
            "3ffe::1",
            "3fff:1000::1",
        ] {
            assert!(!is_non_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn embedded_ipv4_addresses_are_found_in_every_carrier() {
        let v4 = Some(Ipv4Addr::new(100, 128, 0, 2));
        for carrier in [
            "::ffff:100.128.0.2",
            "::100.128.0.2",
            "64:ff9b::6480:2",
            "2002:6480:2::1",
            "2002:6480:2:ffff::",
        ] {
            assert_eq!(embedded_ipv4(carrier.parse().unwrap()), v4, "{carrier}");
        }
        for plain in ["::1", "::", "2001:db8::6480:2", "64:ff9b:1::6480:2"] {
            assert_eq!(embedded_ipv4(plain.parse().unwrap()), None, "{plain}");
        }
    }
}
