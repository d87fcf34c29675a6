//! The kernel's own link emulation, where it exists: the two hosts joined by a veth
//! pair, each end shaped by a `netem` qdisc (half the RTT, the rate, the loss). Many
//! kernels (this project's CI machine among them) lack `sch_netem`; [`available`]
//! probes for it so that `hetch-lab wan up` can fall back to the userspace delay line.

use crate::hosts::hosts;
use crate::netns::{ip, run};
use crate::testbed::{add_host, remove_namespaces, Link, DEVICE};

/// The namespace the probe uses (removed again at once).
const PROBE_NS: &str = "hetch-probe";

/// Whether this kernel can attach a `netem` qdisc: tried on a veth pair in a
/// throwaway namespace, so the host's own interfaces are never touched.
pub fn available() -> bool {
    let _ = ip(&["netns", "del", PROBE_NS]);
    let ok = ip(&["netns", "add", PROBE_NS]).is_ok()
        && ip(&[
            "-n", PROBE_NS, "link", "add", "p0", "type", "veth", "peer", "name", "p1",
        ])
        .is_ok()
        && tc(
            PROBE_NS,
            &["qdisc", "add", "dev", "p0", "root", "netem", "delay", "1ms"],
        )
        .is_ok();
    let _ = ip(&["netns", "del", PROBE_NS]);
    ok
}

/// Creates hosts a and b (one pair: a veth pair joins two hosts only) joined by a veth
/// pair named [`DEVICE`] on both sides, with a netem qdisc on each end.
pub fn create(link: &Link) -> std::io::Result<()> {
    remove_namespaces();
    let all = hosts(1);
    let [a, b] = [&all[0], &all[1]];
    for h in &all {
        ip(&["netns", "add", &h.netns])?;
    }
    ip(&[
        "link", "add", DEVICE, "netns", &a.netns, "type", "veth", "peer", "name", DEVICE, "netns",
        &b.netns,
    ])?;
    for me in &all {
        let args = qdisc_args(link);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tc(&me.netns, &args)?;
        add_host(me, &all, link)?;
    }
    Ok(())
}

/// The `tc` arguments that shape one direction: `qdisc add dev wan0 root netem delay
/// RTT/2 [rate R] [loss P%] limit N`, where the queue limit (in packets) holds a
/// bandwidth-delay product, as the delay line's queue does.
pub fn qdisc_args(link: &Link) -> Vec<String> {
    let dir = link.direction();
    let mut a: Vec<String> = ["qdisc", "add", "dev", DEVICE, "root", "netem", "delay"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.push(format!("{}us", dir.delay.as_micros()));
    if dir.rate > 0 {
        a.push("rate".into());
        a.push(format!("{}bit", dir.rate * 8));
    }
    if dir.loss > 0.0 {
        a.push("loss".into());
        a.push(format!("{}%", dir.loss * 100.0));
    }
    let packets = (dir.queue_bytes / u64::from(link.mtu.max(576))).max(1000);
    a.push("limit".into());
    a.push(packets.to_string());
    a
}

fn tc(ns: &str, args: &[&str]) -> std::io::Result<()> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    run("tc", &all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn qdisc_has_half_the_rtt_the_rate_in_bits_the_loss_in_percent_and_a_bdp_limit() {
        let l = Link {
            rtt: Duration::from_millis(100),
            rate: 250_000_000,
            loss: 0.001,
            corrupt: 0.0,
            mtu: 9000,
            tuned: true,
        };
        assert_eq!(
            qdisc_args(&l).join(" "),
            "qdisc add dev wan0 root netem delay 50000us rate 2000000000bit loss 0.1% limit 2777"
        );
        let plain = Link {
            rate: 0,
            loss: 0.0,
            corrupt: 0.0,
            rtt: Duration::from_millis(10),
            ..l
        };
        assert_eq!(
            qdisc_args(&plain).join(" "),
            "qdisc add dev wan0 root netem delay 5000us limit 1000"
        );
    }
}
