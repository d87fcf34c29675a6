//! The two emulated hosts: network namespaces `hetch-a` and `hetch-b`, each with a TUN
//! device `wan0`, joined by the forwarder's delay lines.

use std::time::Duration;

use crate::delay::LinkConfig;
use crate::netns::{in_namespace, ip, run};
use crate::tun::Tun;

/// A host of the testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// Short name used on the command line (`a` or `b`).
    pub name: &'static str,
    /// Its network namespace.
    pub netns: &'static str,
    /// Its address on the emulated link.
    pub addr: &'static str,
}

/// Host `a`.
pub const A: Host = Host {
    name: "a",
    netns: "hetch-a",
    addr: "10.77.0.1",
};
/// Host `b`.
pub const B: Host = Host {
    name: "b",
    netns: "hetch-b",
    addr: "10.77.0.2",
};
/// Both hosts.
pub const HOSTS: [Host; 2] = [A, B];
/// The TUN device inside each namespace.
pub const DEVICE: &str = "wan0";

/// The link as the user asked for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Round-trip time (each direction gets half).
    pub rtt: Duration,
    /// Bytes per second in each direction (0 = unlimited).
    pub rate: u64,
    /// Loss probability per packet in each direction.
    pub loss: f64,
    /// Probability per TCP segment, in each direction, that its payload is damaged
    /// and its checksum fixed (delay-line links only).
    pub corrupt: f64,
    /// MTU of the link.
    pub mtu: u32,
    /// Raise the hosts' TCP buffer limits (`tcp_rmem`/`tcp_wmem` maximum to
    /// [`TUNED_TCP_MEM_MAX`]) as data transfer nodes are tuned; otherwise the namespaces
    /// keep the limits they start with.
    pub tuned: bool,
}

/// The TCP buffer maximum of tuned hosts: enough for 5 Gbit/s at 100 ms.
pub const TUNED_TCP_MEM_MAX: u64 = 64 << 20;

impl Link {
    /// One direction's delay-line settings. The queue holds one RTT's worth of bytes
    /// at the link rate (a bandwidth-delay product, as a well-sized router buffer),
    /// and at least 1 MiB.
    pub fn direction(&self) -> LinkConfig {
        let bdp = (self.rate as u128 * self.rtt.as_nanos() / 1_000_000_000) as u64;
        LinkConfig {
            rate: self.rate,
            delay: self.rtt / 2,
            loss: self.loss,
            corrupt: self.corrupt,
            queue_bytes: bdp.max(1 << 20),
        }
    }
}

/// Removes the namespaces (and with them anything left inside); missing ones are fine.
pub fn remove_namespaces() {
    for h in HOSTS {
        let _ = ip(&["netns", "del", h.netns]);
        let _ = std::fs::remove_dir_all(netns_etc(h));
    }
    // Only if empty: other namespaces' configuration may live there too.
    let _ = std::fs::remove_dir("/etc/netns");
}

/// `ip netns exec` bind-mounts the files of `/etc/netns/NAME/` over `/etc` for what it
/// runs: the hosts' own configuration lives there.
fn netns_etc(h: Host) -> std::path::PathBuf {
    std::path::Path::new("/etc/netns").join(h.netns)
}

/// Gives host `me` a hosts file naming both hosts (`hetch-a`, `hetch-b`), on top of the
/// machine's own: servers that look up a name for their own address (GridFTP does,
/// and exits when that needs DNS, which the namespaces cannot reach) find it there.
fn write_hosts_file(me: Host) -> std::io::Result<()> {
    let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for h in HOSTS {
        text.push_str(&format!("{} {}\n", h.addr, h.netns));
    }
    let dir = netns_etc(me);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("hosts"), text)
}

/// Creates both namespaces with a TUN device each, addressed point to point, and
/// returns the devices (a's, then b's) for the forwarder.
pub fn create(link: &Link) -> std::io::Result<(Tun, Tun)> {
    remove_namespaces();
    let mut tuns = Vec::new();
    for (me, peer) in [(A, B), (B, A)] {
        ip(&["netns", "add", me.netns])?;
        tuns.push(in_namespace(me.netns, || Tun::open(DEVICE))?);
        add_host(me, peer, link)?;
    }
    let b = tuns.pop().expect("two devices");
    let a = tuns.pop().expect("two devices");
    Ok((a, b))
}

/// Addresses host `me`'s end of the link ([`DEVICE`], already in its namespace) point
/// to point towards `peer`, brings it and loopback up, and tunes the host if asked:
/// the same whether the link is a TUN delay line or a netem-shaped veth pair.
pub(crate) fn add_host(me: Host, peer: Host, link: &Link) -> std::io::Result<()> {
    let mtu = link.mtu.to_string();
    ip(&[
        "-n", me.netns, "addr", "add", me.addr, "peer", peer.addr, "dev", DEVICE,
    ])?;
    ip(&["-n", me.netns, "link", "set", DEVICE, "mtu", &mtu, "up"])?;
    ip(&["-n", me.netns, "link", "set", "lo", "up"])?;
    write_hosts_file(me)?;
    if link.tuned {
        tune(me.netns)?;
    }
    Ok(())
}

/// Raises the TCP buffer limits inside namespace `ns` (these sysctls are per namespace;
/// `net.core.rmem_max` is not, and is left alone).
fn tune(ns: &str) -> std::io::Result<()> {
    for key in ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"] {
        let setting = format!("{key}=4096 131072 {TUNED_TCP_MEM_MAX}");
        run("ip", &["netns", "exec", ns, "sysctl", "-q", "-w", &setting])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_direction_gets_half_the_rtt_and_a_bdp_queue() {
        let l = Link {
            rtt: Duration::from_millis(100),
            rate: 250_000_000,
            loss: 0.001,
            corrupt: 0.0,
            mtu: 9000,
            tuned: true,
        };
        let d = l.direction();
        assert_eq!(d.delay, Duration::from_millis(50));
        assert_eq!(d.queue_bytes, 25_000_000);
        assert_eq!((d.rate, d.loss), (250_000_000, 0.001));
        let unlimited = Link { rate: 0, ..l }.direction();
        assert_eq!(unlimited.queue_bytes, 1 << 20);
    }
}
