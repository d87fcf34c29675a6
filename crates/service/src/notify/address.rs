//! Where a webhook may point. The service POSTs where a token holder tells it, so
//! unless the operator allows it, a webhook may not reach the service's own machine
//! or network: loopback, link-local (cloud metadata at 169.254.169.254), private,
//! site-local, shared (CGNAT), unspecified, multicast, documentation and other
//! reserved addresses are refused, and so is an IPv6 address that carries one of
//! those in an IPv4 it embeds (IPv4-mapped and -compatible, NAT64, 6to4, Teredo):
//! whatever translates it on the way would deliver it there.
//!
//! The host is the one the HTTP client connects to: the URL is read by the same
//! parser the client uses ([`url::Url`], which turns an internationalized name into
//! its punycode form and `１２７.1` into `127.0.0.1`), and every address a name
//! resolves to is checked by the client's own resolver ([`super::resolve`]), so a
//! name is never checked in one spelling and connected to in another.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` may not be a webhook's address, if it may not: what follows the address
/// in a message ("a loopback address", "an IPv6 address embedding 10.0.0.1, a private
/// address").
pub fn refused(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4).map(|why| format!("a {why} address")),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, d] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        Some("private")
    } else if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || a == 0 {
        Some("not a host's")
    } else if ip.is_documentation()
        || a >= 240
        // Benchmarking (RFC 2544), often a lab's internal network.
        || (a == 198 && (18..20).contains(&b))
        // IETF protocol assignments, but for the two anycast services in them.
        || (a == 192 && b == 0 && c == 0 && !matches!(d, 9 | 10))
    {
        Some("reserved")
    } else {
        None
    }
}

fn refused_v6(ip: Ipv6Addr) -> Option<String> {
    let s = ip.segments();
    let plain = |why: &str| Some(format!("a {why} address"));
    if ip.is_loopback() {
        return plain("loopback");
    }
    if ip.is_unspecified() || ip.is_multicast() {
        return plain("not a host's");
    }
    if let Some(v4) = embedded_v4(ip) {
        return v4.into_iter().find_map(|v4| {
            refused_v4(v4).map(|why| format!("an IPv6 address embedding {v4}, a {why} address"))
        });
    }
    let first = s[0];
    if first & 0xffc0 == 0xfe80 {
        plain("link-local")
    } else if first & 0xffc0 == 0xfec0 {
        plain("site-local")
    } else if first & 0xfe00 == 0xfc00 {
        plain("private")
    } else if s[..3] == [0x64, 0xff9b, 1] {
        // Local-use NAT64 (RFC 8215): the operator's own translator, which may place
        // the IPv4 at any of RFC 6052's offsets: the whole prefix is refused.
        plain("local-use NAT64")
    } else if (first == 0x2001 && s[1] == 0x0db8) || s[..4] == [0x100, 0, 0, 0] {
        // Documentation (RFC 3849), discard-only (RFC 6666).
        plain("reserved")
    } else {
        None
    }
}

/// The IPv4 addresses an IPv6 address carries for a translator or tunnel to deliver
/// to, if it is of a form that does (each is checked: a Teredo address names a relay
/// and a client).
fn embedded_v4(ip: Ipv6Addr) -> Option<Vec<Ipv4Addr>> {
    let s = ip.segments();
    let o = ip.octets();
    let last = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let forms = match s {
        // IPv4-mapped ::ffff:a.b.c.d, IPv4-compatible ::a.b.c.d (deprecated, but a
        // stack may still route it over IPv4), IPv4-translated ::ffff:0:a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff, ..] | [0, 0, 0, 0, 0, 0, ..] | [0, 0, 0, 0, 0xffff, 0, ..] => {
            vec![last]
        }
        // NAT64's well-known prefix 64:ff9b::/96 (RFC 6052).
        [0x64, 0xff9b, 0, 0, 0, 0, ..] => vec![last],
        // 6to4 (RFC 3056): 2002:AABB:CCDD::/48 is the site behind a.b.c.d.
        [0x2002, ..] => vec![Ipv4Addr::new(o[2], o[3], o[4], o[5])],
        // Teredo (RFC 4380): 2001:0:SERVER:FLAGS:PORT:CLIENT, the client's address
        // with every bit flipped.
        [0x2001, 0, ..] => vec![
            Ipv4Addr::from(!u32::from(last)),
            Ipv4Addr::new(o[4], o[5], o[6], o[7]),
        ],
        _ => return None,
    };
    Some(forms)
}

/// A webhook's host, as the HTTP client will connect to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A literal address: connected to as it is, never resolved.
    Ip(IpAddr),
    /// A name in its ASCII (punycode) form, lower case: what the resolver is asked.
    Name(String),
}

/// The host of `url` as the HTTP client reads it; a line saying why it has none.
pub fn host(url: &str) -> Result<Host, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("webhook url {url:?}: {e}"))?;
    match parsed.host() {
        Some(url::Host::Ipv4(v4)) => Ok(Host::Ip(v4.into())),
        Some(url::Host::Ipv6(v6)) => Ok(Host::Ip(v6.into())),
        Some(url::Host::Domain(name)) if !name.is_empty() => Ok(Host::Name(name.to_string())),
        _ => Err(format!("webhook url {url:?} has no host")),
    }
}

/// Whether `url` may be a webhook as submitted: refused when its host is a literal
/// address [`refused`] refuses, or `localhost` (names are checked again when
/// resolved, at delivery). A line naming the field.
pub fn check_submitted(url: &str) -> Result<(), String> {
    let allow = "(the operator may allow it with --webhook-allow-private)";
    match host(url)? {
        Host::Name(name) => {
            let name = name.trim_end_matches('.');
            if name == "localhost" || name.ends_with(".localhost") {
                return Err(format!("webhook url {url:?} is on this machine {allow}"));
            }
            Ok(())
        }
        Host::Ip(ip) => match refused(ip) {
            Some(why) => Err(format!("webhook url {url:?}: {ip} is {why} {allow}")),
            None => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_loopback_and_link_local_addresses_are_refused_public_ones_not() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "198.18.0.1",
            "192.0.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::",
            "224.0.0.1",
            "ff02::1",
            "2001:db8::1",
            "100::1",
        ] {
            assert!(refused(bad.parse().unwrap()).is_some(), "{bad}");
        }
        for good in [
            "1.1.1.1",
            "93.184.216.34",
            "2606:4700::1111",
            "172.32.0.1",
            "192.0.0.9",
        ] {
            assert_eq!(refused(good.parse().unwrap()), None, "{good}");
        }
    }

    /// Each IPv6 form that carries an IPv4 address is refused for the IPv4's reason
    /// when that one is refused, and allowed when it is public.
    #[test]
    fn ipv6_forms_embedding_a_refused_ipv4_are_refused_and_site_local_too() {
        for (bad, why) in [
            ("::ffff:127.0.0.1", "embedding 127.0.0.1, a loopback"),
            ("::127.0.0.1", "embedding 127.0.0.1, a loopback"),
            (
                "::169.254.169.254",
                "embedding 169.254.169.254, a link-local",
            ),
            ("::ffff:0:10.0.0.1", "embedding 10.0.0.1, a private"),
            ("64:ff9b::127.0.0.1", "embedding 127.0.0.1, a loopback"),
            (
                "64:ff9b::a9fe:a9fe",
                "embedding 169.254.169.254, a link-local",
            ),
            ("64:ff9b::192.168.0.1", "embedding 192.168.0.1, a private"),
            ("64:ff9b:1::1.1.1.1", "local-use NAT64"),
            ("64:ff9b:1:7f00:1::", "local-use NAT64"),
            ("2002:7f00:1::1", "embedding 127.0.0.1, a loopback"),
            ("2002:a00:1:5::1", "embedding 10.0.0.1, a private"),
            // Teredo: server 65.54.227.120, client 127.0.0.1 (bits flipped).
            (
                "2001:0:4136:e378:8000:63bf:80ff:fffe",
                "embedding 127.0.0.1, a loopback",
            ),
            // Teredo through a relay on this network (the server's address).
            ("2001:0:a00:1:8000:63bf:fefe:fefe", "embedding 10.0.0.1"),
            ("fec0::1", "site-local"),
            ("feff::1", "site-local"),
        ] {
            let got = refused(bad.parse().unwrap());
            assert!(
                got.as_deref().is_some_and(|g| g.contains(why)),
                "{bad}: {got:?}"
            );
        }
        for good in [
            "::ffff:1.1.1.1",
            "::1.1.1.1",
            "64:ff9b::1.1.1.1",
            "2002:101:101::1",
            // Teredo: server 65.54.227.120, client 1.1.1.1.
            "2001:0:4136:e378:8000:63bf:fefe:fefe",
        ] {
            assert_eq!(refused(good.parse().unwrap()), None, "{good}");
        }
    }

    #[test]
    fn the_host_is_read_as_the_http_client_reads_it() {
        let name = |h: &str| Ok(Host::Name(h.to_string()));
        let ip = |h: &str| Ok(Host::Ip(h.parse().unwrap()));
        assert_eq!(
            host("https://Hooks.example.org/x?y"),
            name("hooks.example.org")
        );
        assert_eq!(
            host("https://bücher.example/h"),
            name("xn--bcher-kva.example")
        );
        assert_eq!(
            host("https://BÜCHER.example:8443/h"),
            name("xn--bcher-kva.example")
        );
        assert_eq!(host("https://127.0.0.1:8443/x"), ip("127.0.0.1"));
        // What a lookup of the name as typed would make of it, the parser makes too.
        assert_eq!(host("https://127.1/"), ip("127.0.0.1"));
        assert_eq!(host("https://0x7f000001/"), ip("127.0.0.1"));
        assert_eq!(host("https://１２７.0.0.1/"), ip("127.0.0.1"));
        assert_eq!(host("https://%31%32%37.0.0.1/"), ip("127.0.0.1"));
        assert_eq!(host("https://user@[::1]:9/x"), ip("::1"));
        assert!(host("https://[::1]x/").is_err());
        assert!(host("https://h:notaport/").is_err());
        assert!(host("https://:443/x").is_err());
        // As the client reads it: the slashes of a special scheme are one.
        assert_eq!(host("https:///x"), name("x"));
        assert!(check_submitted("https://10.0.0.1/").is_err());
        assert!(check_submitted("https://[::1]/").is_err());
        assert!(check_submitted("https://[64:ff9b::7f00:1]/").is_err());
        assert!(check_submitted("https://127.1/").is_err());
        assert!(check_submitted("https://localhost:8443/").is_err());
        assert!(check_submitted("https://LocalHost./").is_err());
        assert!(check_submitted("https://ｌｏｃａｌｈｏｓｔ/").is_err());
        assert!(check_submitted("https://a.localhost/").is_err());
        assert!(check_submitted("https://hooks.example.org/").is_ok());
        assert!(check_submitted("https://bücher.example/").is_ok());
    }
}
