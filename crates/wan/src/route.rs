//! Which host a packet is for: the forwarder is the router of a star, every host's
//! link meeting in it, so a packet goes to the host its IPv4 destination address names.
//! Anything else (IPv6, which the testbed does not address, or an address no host
//! has) is dropped by the caller and counted.

use std::net::Ipv4Addr;

/// The hosts' addresses, in the forwarder's port order.
#[derive(Debug, Clone)]
pub struct Routes {
    addrs: Vec<Ipv4Addr>,
}

impl Routes {
    /// Routes to hosts with these addresses: port `i` is `addrs[i]`.
    pub fn new(addrs: Vec<Ipv4Addr>) -> Routes {
        Routes { addrs }
    }

    /// The port of the host `packet` is addressed to, if any. A linear search: a
    /// testbed has at most 16 hosts.
    pub fn port_for(&self, packet: &[u8]) -> Option<usize> {
        let dest = ipv4_destination(packet)?;
        self.addrs.iter().position(|a| *a == dest)
    }
}

/// The destination address of an IPv4 packet; `None` for anything else or a packet
/// shorter than an IPv4 header.
pub fn ipv4_destination(packet: &[u8]) -> Option<Ipv4Addr> {
    if packet.len() < 20 || packet[0] >> 4 != 4 {
        return None;
    }
    let d: [u8; 4] = packet[16..20].try_into().ok()?;
    Some(Ipv4Addr::from(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal IPv4 header from `src` to `dst`, and a few bytes of payload.
    fn packet(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p
    }

    #[test]
    fn a_packet_goes_to_the_host_its_destination_names() {
        let hosts = crate::hosts::hosts(2);
        let r = Routes::new(hosts.iter().map(|h| h.addr).collect());
        // Ports: a1, a2, b1, b2.
        assert_eq!(
            r.port_for(&packet([10, 77, 0, 1], [10, 77, 0, 102])),
            Some(3)
        );
        assert_eq!(
            r.port_for(&packet([10, 77, 0, 102], [10, 77, 0, 1])),
            Some(0)
        );
        assert_eq!(r.port_for(&packet([10, 77, 0, 1], [10, 77, 0, 2])), Some(1));
        assert_eq!(
            r.port_for(&packet([10, 77, 0, 2], [10, 77, 0, 101])),
            Some(2)
        );
    }

    #[test]
    fn unknown_destinations_and_other_protocols_have_no_port() {
        let r = Routes::new(vec![[10, 77, 0, 1].into(), [10, 77, 0, 2].into()]);
        // An address on the network that no host has, and one off it.
        assert_eq!(r.port_for(&packet([10, 77, 0, 1], [10, 77, 0, 3])), None);
        assert_eq!(r.port_for(&packet([10, 77, 0, 1], [8, 8, 8, 8])), None);
        // IPv6 (a router solicitation the kernel sends when the device comes up).
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[24..28].copy_from_slice(&[10, 77, 0, 2]);
        assert_eq!(r.port_for(&v6), None);
        // Truncated, and empty.
        assert_eq!(
            r.port_for(&packet([10, 77, 0, 1], [10, 77, 0, 2])[..19]),
            None
        );
        assert_eq!(r.port_for(&[]), None);
    }
}
