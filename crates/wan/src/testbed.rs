//! The emulated hosts ([`crate::hosts`]): a network namespace each, with a TUN device
//! `wan0` addressed on one /24, joined by the forwarder's delay lines.
//!
//! Only the network is per host: namespaces leave the file system alone, so every host
//! sees the same directories, as nodes on a shared file system do.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::delay::LinkConfig;
use crate::forward::Port;
use crate::hosts::{hosts, Host, NETWORK};
use crate::netns::{in_namespace, ip, run};
use crate::tun::Tun;

/// The TUN device inside each namespace.
pub const DEVICE: &str = "wan0";

/// The link as the user asked for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Round-trip time between any two hosts (each one-way trip gets half).
    pub rtt: Duration,
    /// Bytes per second each host may send (its uplink; with two hosts, each direction
    /// of the link); 0 = unlimited.
    pub rate: u64,
    /// Loss probability per packet on each host's uplink.
    pub loss: f64,
    /// Probability per TCP segment, on each host's uplink, that its payload is damaged
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
    /// One direction's delay-line settings (one host's uplink). The queue holds one RTT's worth of bytes
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

/// Removes every namespace the testbed makes, whatever the number of pairs it was up
/// with, and their configuration under `/etc/netns` (found by name, so that what a crash
/// left behind goes too); missing ones are fine.
pub fn remove_namespaces() {
    for netns in testbed_entries(Path::new("/run/netns")) {
        let _ = ip(&["netns", "del", &netns]);
    }
    for netns in testbed_entries(Path::new("/etc/netns")) {
        let _ = std::fs::remove_dir_all(netns_etc(&netns));
    }
    // Only if empty: other namespaces' configuration may live there too.
    let _ = std::fs::remove_dir("/etc/netns");
}

/// The testbed's namespaces that exist now (by name, sorted).
pub fn existing_namespaces() -> Vec<String> {
    testbed_entries(Path::new("/run/netns"))
}

/// The names in `dir` that are testbed namespaces, sorted.
fn testbed_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| Host::of_netns(n).is_some())
        .collect();
    names.sort();
    names
}

/// `ip netns exec` bind-mounts the files of `/etc/netns/NAME/` over `/etc` for what it
/// runs: the hosts' own configuration lives there.
fn netns_etc(netns: &str) -> PathBuf {
    Path::new("/etc/netns").join(netns)
}

/// Gives host `me` a hosts file naming every host of the testbed by its namespace
/// (`hetch-a`, `hetch-b1`, ...), on top of the machine's own: servers that look up a
/// name for their own address (GridFTP does, and exits when that needs DNS, which the
/// namespaces cannot reach) find it there.
fn write_hosts_file(me: &Host, all: &[Host]) -> std::io::Result<()> {
    let mut text = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for h in all {
        text.push_str(&format!("{} {}\n", h.addr, h.netns));
    }
    let dir = netns_etc(&me.netns);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("hosts"), text)
}

/// Creates the namespaces of `pairs` pairs of hosts ([`hosts`]) with a TUN device each,
/// and returns the devices, in that order, for the forwarder.
pub fn create(pairs: u8, link: &Link) -> std::io::Result<Vec<Port>> {
    remove_namespaces();
    let all = hosts(pairs);
    let mut ports = Vec::new();
    for me in &all {
        ip(&["netns", "add", &me.netns])?;
        let tun = in_namespace(&me.netns, || Tun::open(DEVICE))?;
        add_host(me, &all, link)?;
        ports.push(Port { tun, addr: me.addr });
    }
    Ok(ports)
}

/// Addresses host `me`'s end of the link ([`DEVICE`], already in its namespace) on the
/// testbed's network, brings it and loopback up, writes its hosts file (naming `all`)
/// and tunes the host if asked: the same whether the link is a TUN delay line or a
/// netem-shaped veth pair. The whole /24 is reached through the device, so that the
/// kernel hands every other host's packets to the forwarder.
pub(crate) fn add_host(me: &Host, all: &[Host], link: &Link) -> std::io::Result<()> {
    let ns = me.netns.as_str();
    let mtu = link.mtu.to_string();
    let addr = format!("{}/{}", me.addr, NETWORK.1);
    ip(&["-n", ns, "addr", "add", &addr, "dev", DEVICE])?;
    ip(&["-n", ns, "link", "set", DEVICE, "mtu", &mtu, "up"])?;
    ip(&["-n", ns, "link", "set", "lo", "up"])?;
    write_hosts_file(me, all)?;
    if link.tuned {
        tune(ns)?;
    }
    Ok(())
}

/// Raises the TCP buffer limits inside namespace `ns` (these sysctls are per namespace;
/// `net.core.rmem_max` is not, and is left alone).
fn tune(ns: &str) -> std::io::Result<()> {
    let [rmem, wmem] = ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"]
        .map(|key| format!("{key}=4096 131072 {TUNED_TCP_MEM_MAX}"));
    // One command for both: starting processes is most of the time `up` takes.
    run(
        "ip",
        &["netns", "exec", ns, "sysctl", "-q", "-w", &rmem, &wmem],
    )
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
