//! Manual check of the delay line (root): `cargo run -p hetch-wan --example link -- 50`
//! makes namespaces hetch-a (10.77.0.1) and hetch-b (10.77.0.2) joined by a link of the
//! given RTT in ms, and forwards until killed; then try
//! `ip netns exec hetch-a ping 10.77.0.2`. Remove with `ip netns del hetch-a hetch-b`.

use std::time::Duration;

use hetch_wan::{forward, netns, tun::Tun, LinkConfig};

fn main() -> std::io::Result<()> {
    let rtt_ms: u64 = std::env::args()
        .nth(1)
        .map_or(50, |s| s.parse().expect("RTT in ms"));
    let mut tuns = Vec::new();
    for (ns, me, peer) in [
        ("hetch-a", "10.77.0.1", "10.77.0.2"),
        ("hetch-b", "10.77.0.2", "10.77.0.1"),
    ] {
        let _ = netns::ip(&["netns", "del", ns]);
        netns::ip(&["netns", "add", ns])?;
        let tun = netns::in_namespace(ns, || Tun::open("wan0"))?;
        netns::ip(&["-n", ns, "addr", "add", me, "peer", peer, "dev", "wan0"])?;
        netns::ip(&["-n", ns, "link", "set", "wan0", "mtu", "9000", "up"])?;
        netns::ip(&["-n", ns, "link", "set", "lo", "up"])?;
        tuns.push(tun);
    }
    let b = tuns.pop().expect("two");
    let a = tuns.pop().expect("two");
    let cfg = LinkConfig {
        rate: 0,
        delay: Duration::from_millis(rtt_ms) / 2,
        loss: 0.0,
        queue_bytes: 64 << 20,
    };
    let counters = forward::start(a, b, cfg, 1);
    loop {
        std::thread::sleep(Duration::from_secs(5));
        eprintln!(
            "a->b delivered {} dropped {}; b->a delivered {} dropped {}",
            counters[0]
                .delivered
                .load(std::sync::atomic::Ordering::Relaxed),
            counters[0]
                .dropped
                .load(std::sync::atomic::Ordering::Relaxed),
            counters[1]
                .delivered
                .load(std::sync::atomic::Ordering::Relaxed),
            counters[1]
                .dropped
                .load(std::sync::atomic::Ordering::Relaxed),
        );
    }
}
