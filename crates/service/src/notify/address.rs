//! Where a webhook may point. The service POSTs where a token holder tells it, so
//! unless the operator allows it, a webhook may not reach the service's own machine
//! or network: loopback, link-local (cloud metadata at 169.254.169.254), private,
//! shared (CGNAT), unspecified, multicast and documentation addresses are refused, at
//! submission for a literal address and at each delivery for every address the name
//! resolves to (and the connection goes to a checked address only, so a name that
//! resolves differently the second time cannot slip past).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` may not be a webhook's address, if it may not.
pub fn refused(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => refused_v4(v4),
            None => refused_v6(v6),
        },
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        Some("private")
    } else if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() || a == 0 {
        Some("not a host's")
    } else if ip.is_documentation() || a >= 240 {
        Some("reserved")
    } else {
        None
    }
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if first & 0xfe00 == 0xfc00 {
        Some("private")
    } else if ip.is_unspecified() || ip.is_multicast() {
        Some("not a host's")
    } else if first == 0x2001 && ip.segments()[1] == 0x0db8 {
        Some("reserved")
    } else {
        None
    }
}

/// The host of an `https://` URL (brackets of an IPv6 literal removed), and its port
/// (443 if none).
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, after) = v6.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().ok()?,
                None if after.is_empty() => 443,
                None => return None,
            };
            (h.to_string(), port)
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().ok()?),
            None => (authority.to_string(), 443),
        },
    };
    (!host.is_empty()).then_some((host.to_ascii_lowercase(), port))
}

/// Whether `url` may be a webhook as submitted: refused when its host is a literal
/// address [`refused`] refuses, or `localhost` (names are checked again when
/// resolved, at delivery). A line naming the field.
pub fn check_submitted(url: &str) -> Result<(), String> {
    let (host, _) = host_port(url).ok_or_else(|| format!("webhook url {url:?} has no host"))?;
    if host == "localhost" || host.ends_with(".localhost") {
        return Err(format!(
            "webhook url {url:?} is on this machine (the operator may allow it with \
             --webhook-allow-private)"
        ));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        if let Some(why) = refused(ip) {
            return Err(format!(
                "webhook url {url:?}: {ip} is a {why} address (the operator may allow \
                 it with --webhook-allow-private)"
            ));
        }
    }
    Ok(())
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
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::",
            "224.0.0.1",
        ] {
            assert!(refused(bad.parse().unwrap()).is_some(), "{bad}");
        }
        for good in ["1.1.1.1", "93.184.216.34", "2606:4700::1111", "172.32.0.1"] {
            assert_eq!(refused(good.parse().unwrap()), None, "{good}");
        }
    }

    #[test]
    fn hosts_and_ports_are_read_from_urls() {
        assert_eq!(
            host_port("https://Hooks.example.org/x?y"),
            Some(("hooks.example.org".into(), 443))
        );
        assert_eq!(
            host_port("https://127.0.0.1:8443/x"),
            Some(("127.0.0.1".into(), 8443))
        );
        assert_eq!(host_port("https://[::1]:9/x"), Some(("::1".into(), 9)));
        assert_eq!(host_port("https://[::1]x/"), None);
        assert_eq!(host_port("https://h:notaport/"), None);
        assert!(check_submitted("https://10.0.0.1/").is_err());
        assert!(check_submitted("https://[::1]/").is_err());
        assert!(check_submitted("https://localhost:8443/").is_err());
        assert!(check_submitted("https://hooks.example.org/").is_ok());
    }
}
