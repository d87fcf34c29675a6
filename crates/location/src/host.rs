//! `HOST[:PORT]` as operands and flags write a server: a DNS name or IPv4 address, or
//! an IPv6 address in brackets (`[::1]:7878`), with a port other than 0 or the
//! default one. What `hetch://` operands, `hetch job --service` and a job's
//! destination all parse, so that a malformed address is refused where it is typed,
//! not later by whatever connects to it.

use std::net::Ipv6Addr;

/// `s` (`HOST`, `HOST:PORT`, `[IPV6]` or `[IPV6]:PORT`) as `HOST:PORT`, the form
/// connections and the known-hosts file use: `default_port` added when `s` has none;
/// IPv6 addresses stay in brackets. The error says what is wrong, without `s` itself
/// (the caller names the operand it came from).
pub fn host_port(s: &str, default_port: u16) -> Result<String, String> {
    let (host, port) = match s.strip_prefix('[') {
        Some(rest) => {
            let (addr, after) = rest
                .split_once(']')
                .ok_or("no ']' after the IPv6 address")?;
            addr.parse::<Ipv6Addr>()
                .map_err(|_| format!("'{addr}' is not an IPv6 address"))?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or_else(|| {
                    format!("'{after}' after the IPv6 address, where ':PORT' was expected")
                })?),
            };
            (&s[..addr.len() + 2], port)
        }
        None => match s.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err("an IPv6 address goes in brackets: [ADDRESS]:PORT".into())
            }
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        },
    };
    let name_char = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
    if host.is_empty() {
        return Err("no host".into());
    }
    if !host.starts_with('[') && !host.chars().all(name_char) {
        return Err(format!("'{host}' is not a host name or address"));
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(format!("bad port '{p}' (1 to 65535)")),
        },
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::host_port;

    #[test]
    fn hosts_get_the_default_port_and_keep_their_own() {
        for (given, want) in [
            ("h", "h:7"),
            ("h:9", "h:9"),
            ("dtn-1.example.org", "dtn-1.example.org:7"),
            ("10.0.0.5:65535", "10.0.0.5:65535"),
            ("[::1]", "[::1]:7"),
            ("[::1]:9", "[::1]:9"),
            ("[fe80::1%eth0]:9", ""),
        ] {
            match want {
                "" => assert!(host_port(given, 7).is_err(), "{given}"),
                _ => assert_eq!(host_port(given, 7).as_deref(), Ok(want), "{given}"),
            }
        }
    }

    #[test]
    fn malformed_addresses_are_refused_saying_why() {
        for (bad, why) in [
            ("", "no host"),
            (":9", "no host"),
            ("h:0", "bad port '0'"),
            ("h:", "bad port ''"),
            ("h:port", "bad port 'port'"),
            ("h:65536", "bad port '65536'"),
            ("[::1", "no ']'"),
            ("[::1]x", "where ':PORT' was expected"),
            ("[::1]:0", "bad port '0'"),
            ("[nope]:9", "'nope' is not an IPv6 address"),
            ("::1", "in brackets"),
            ("a b", "not a host name"),
            ("h/x", "not a host name"),
            ("user@h", "not a host name"),
        ] {
            let e = host_port(bad, 7).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }
}
