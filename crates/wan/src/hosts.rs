//! The testbed's hosts: their names, namespaces and addresses.
//!
//! One pair (the default) is the original two-host testbed: `a` (namespace `hetch-a`,
//! 10.77.0.1) and `b` (`hetch-b`, 10.77.0.2), names and addresses that scripts and
//! documents use. N pairs (2 to [`MAX_PAIRS`]) are source hosts `a1`..`aN` at
//! 10.77.0.1..N and destination hosts `b1`..`bN` at 10.77.0.101..100+N, in
//! namespaces `hetch-a1`.. and `hetch-b1`..: the number in a name is the last
//! byte of its address (plus 100 for b's), so either can be read from the other.
//! All of them share one /24, reached through each host's [`crate::testbed::DEVICE`].

use std::net::Ipv4Addr;

/// Most pairs of hosts: enough to measure scaling on a small machine, and the b's
/// addresses (101..108) stay clear of the a's.
pub const MAX_PAIRS: u8 = 8;

/// The prefix every namespace of the testbed has (how `down` finds what a crash left).
pub const NETNS_PREFIX: &str = "hetch-";

/// The network every host is on, and its prefix length.
pub const NETWORK: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 77, 0, 0), 24);

/// Added to a destination host's number to make its address's last byte.
const B_OFFSET: u8 = 100;

/// A host of the testbed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Short name used on the command line (`a`, `b`, `a1`, `b3`, ...).
    pub name: String,
    /// Its network namespace (`hetch-` and the name).
    pub netns: String,
    /// Its address on the emulated network.
    pub addr: Ipv4Addr,
}

impl Host {
    /// The host called `name` in some testbed (`a`, `b`, or `a`/`b` and a number from 1
    /// to [`MAX_PAIRS`]), whether or not that testbed is up.
    pub fn named(name: &str) -> Option<Host> {
        let (side, number) = name.split_at_checked(1)?;
        let last = match (side, number) {
            ("a", "") => 1,
            ("b", "") => 2,
            // Plain digits only: `u8` parsing would take `+1` and `01` as 1 too.
            (_, n) if n.starts_with('0') || !n.bytes().all(|b| b.is_ascii_digit()) => return None,
            ("a", n) => n.parse().ok().filter(|n| (1..=MAX_PAIRS).contains(n))?,
            ("b", n) => B_OFFSET + n.parse().ok().filter(|n| (1..=MAX_PAIRS).contains(n))?,
            _ => return None,
        };
        let [net, b, c, _] = NETWORK.0.octets();
        Some(Host {
            name: name.to_string(),
            netns: format!("{NETNS_PREFIX}{name}"),
            addr: Ipv4Addr::new(net, b, c, last),
        })
    }

    /// The host whose namespace is `netns`, if it is one of the testbed's.
    pub fn of_netns(netns: &str) -> Option<Host> {
        Host::named(netns.strip_prefix(NETNS_PREFIX)?)
    }
}

/// The hosts of a testbed of `pairs` pairs: the sources (a's), then the destinations
/// (b's), each in number order. `pairs` is clamped to 1..=[`MAX_PAIRS`].
pub fn hosts(pairs: u8) -> Vec<Host> {
    let pairs = pairs.clamp(1, MAX_PAIRS);
    let names: Vec<String> = if pairs == 1 {
        vec!["a".into(), "b".into()]
    } else {
        let side = |s: char| (1..=pairs).map(move |i| format!("{s}{i}"));
        side('a').chain(side('b')).collect()
    };
    names
        .iter()
        .map(|n| Host::named(n).expect("a name this module makes"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn one_pair_is_the_original_two_hosts() {
        let h = hosts(1);
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].name.as_str(), h[0].netns.as_str()), ("a", "hetch-a"));
        assert_eq!((h[1].name.as_str(), h[1].netns.as_str()), ("b", "hetch-b"));
        assert_eq!(
            (h[0].addr, h[1].addr),
            (addr("10.77.0.1"), addr("10.77.0.2"))
        );
    }

    #[test]
    fn n_pairs_number_the_sources_from_1_and_the_destinations_from_101() {
        let h = hosts(3);
        let got: Vec<_> = h
            .iter()
            .map(|h| (h.name.as_str(), h.netns.as_str(), h.addr.to_string()))
            .collect();
        let want = [
            ("a1", "hetch-a1", "10.77.0.1"),
            ("a2", "hetch-a2", "10.77.0.2"),
            ("a3", "hetch-a3", "10.77.0.3"),
            ("b1", "hetch-b1", "10.77.0.101"),
            ("b2", "hetch-b2", "10.77.0.102"),
            ("b3", "hetch-b3", "10.77.0.103"),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(n, ns, a)| (*n, *ns, a.to_string()))
            .collect();
        assert_eq!(got, want);
        let all = hosts(MAX_PAIRS);
        assert_eq!(all.len(), 2 * MAX_PAIRS as usize);
        assert_eq!(all.last().unwrap().addr, addr("10.77.0.108"));
        assert_eq!(hosts(0), hosts(1), "clamped");
        assert_eq!(hosts(200), all, "clamped");
    }

    #[test]
    fn every_address_is_distinct_and_on_the_network() {
        for pairs in 1..=MAX_PAIRS {
            let all = hosts(pairs);
            for h in &all {
                assert_eq!(h.addr.octets()[..3], NETWORK.0.octets()[..3], "{h:?}");
                assert_eq!(Host::named(&h.name).as_ref(), Some(h), "a name says it all");
            }
            // Within one testbed, two hosts never share an address or a namespace.
            for (i, x) in all.iter().enumerate() {
                for y in &all[i + 1..] {
                    assert!(x.addr != y.addr && x.netns != y.netns, "{x:?} {y:?}");
                }
            }
        }
    }

    #[test]
    fn names_parse_only_within_the_testbed() {
        assert_eq!(Host::named("b3").unwrap().addr, addr("10.77.0.103"));
        assert_eq!(Host::named("a8").unwrap().netns, "hetch-a8");
        for bad in [
            "", "c", "a0", "a9", "b01", "a-1", "a+1", "ab", "a 1", "hetch-a",
        ] {
            assert_eq!(Host::named(bad), None, "{bad:?}");
        }
        assert_eq!(Host::of_netns("hetch-b2").unwrap().name, "b2");
        assert_eq!(Host::of_netns("hetch-b").unwrap().name, "b");
        assert_eq!(Host::of_netns("hetch-probe"), None);
        assert_eq!(Host::of_netns("a1"), None);
    }
}
