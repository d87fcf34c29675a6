//! The findings for one path: what on this host keeps a transfer below the path's
//! rate, worst first, each with the commands that fix it.

use std::time::Duration;

use serde::Serialize;

use crate::host::{Host, Triple};
use crate::window;

/// The path a transfer is to take.
#[derive(Debug, Clone)]
pub struct Path {
    /// Its rate, bytes per second.
    pub rate: u64,
    /// Its round-trip time.
    pub rtt: Duration,
    /// Data streams the transfer is to use.
    pub streams: u32,
    /// What a connection to the peer showed, when the doctor made one.
    pub probe: Option<Probe>,
}

/// What a TCP connection to the peer showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The interface this host sends to the peer through (IPv4 routes only).
    pub interface: Option<String>,
    /// The connection's maximum segment size: the payload of the largest packet the
    /// path carries, as both ends agreed on it.
    pub mss: u32,
    /// Whether the connection was over IPv6 (40 bytes of IP header instead of 20).
    pub ipv6: bool,
}

impl Probe {
    /// The packet size the path carries: the segment and its IP and TCP headers (with
    /// the timestamp option Linux uses): 1448 bytes of payload in a 1500-byte IPv4
    /// packet.
    pub fn packet(&self) -> u32 {
        self.mss + if self.ipv6 { 72 } else { 52 }
    }
}

/// Round trips from which a loss-based congestion control is worth a finding.
const LONG_PATH: Duration = Duration::from_millis(10);

/// One thing that limits a transfer, or may.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The link of the chain: `receive window`, `send window`, `cpu frequency`.
    pub link: &'static str,
    /// The rate it allows, bytes per second (`None`: not computed, only a risk).
    pub limit: Option<u64>,
    /// What is wrong, in one line.
    pub finding: String,
    /// Commands that fix it, the first preferred; none when nothing here can.
    pub fix: Vec<String>,
}

/// What the doctor found for a path.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The path's rate, bytes per second.
    pub rate: u64,
    /// Its round-trip time, milliseconds.
    pub rtt_ms: f64,
    /// Bytes in flight that fill it.
    pub bdp: u64,
    /// Streams the transfer uses.
    pub streams: u32,
    /// The rate this host allows such a transfer (the path's own when nothing here
    /// limits it), bytes per second.
    pub predicted: u64,
    /// The link that sets `predicted` (`path` when it is the path itself).
    pub limited_by: String,
    /// The links whose capacity was measured (storage, hashing, ...).
    pub measured: Vec<Capacity>,
    /// The findings, the lowest limit first, then those without one.
    pub findings: Vec<Finding>,
}

/// A link of the chain, measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    /// What was measured: `storage write /data`, `hashing (blake3, per core)`.
    pub link: String,
    /// Bytes per second it moved.
    pub rate: u64,
    /// How, in a few words.
    pub how: String,
}

impl Report {
    /// Adds a measured link; the prediction drops to it when it is the slowest.
    pub fn add_capacity(&mut self, c: Capacity) {
        if c.rate < self.predicted {
            self.predicted = c.rate;
            self.limited_by = c.link.clone();
        }
        self.measured.push(c);
    }
}

/// Checks `host` for a transfer over `path`.
pub fn check(host: &Host, path: Path) -> Report {
    let path = &path;
    let streams = path.streams.clamp(1, window::MAX_STREAMS);
    let bdp = window::bdp(path.rate, path.rtt);
    let mut findings = Vec::new();
    let buffers = [
        (
            "receive window",
            "tcp_rmem",
            "receiving on",
            host.tcp_rmem(),
        ),
        ("send window", "tcp_wmem", "sending from", host.tcp_wmem()),
    ];
    for (link, key, side, limits) in buffers {
        let limits = match limits {
            Ok(l) => l,
            Err(e) => {
                findings.push(Finding {
                    link,
                    limit: None,
                    finding: format!("cannot tell the window: {e}"),
                    fix: Vec::new(),
                });
                continue;
            }
        };
        if let Some(f) = window_finding(link, key, side, limits, path, streams, bdp) {
            findings.push(f);
        }
    }
    let slow: Vec<String> = host
        .governors()
        .into_iter()
        .filter(|(_, g)| g != "performance")
        .map(|(cpu, g)| format!("{cpu} {g}"))
        .collect();
    if !slow.is_empty() {
        findings.push(Finding {
            link: "cpu frequency",
            limit: None,
            finding: format!(
                "CPU frequency governor not `performance` ({}): hashing and encryption \
                 slow down while the clock ramps up",
                slow.join(", ")
            ),
            fix: vec![
                "for g in /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor; do echo performance > \"$g\"; done".into(),
            ],
        });
    }
    findings.extend(congestion_finding(host, path));
    findings.extend(mtu_findings(host, path));
    if let Ok(used) = host.swap_used() {
        if used > 0 {
            findings.push(Finding {
                link: "memory",
                limit: None,
                finding: format!(
                    "{} of swap in use: a transfer's buffers or the page cache it reads \
                     through may be paged out and stall it",
                    mib(used)
                ),
                fix: vec![
                    "swapoff -a && swapon -a".into(),
                    "hetch cp --buffer-memory 32M ...".into(),
                ],
            });
        }
    }
    findings.sort_by_key(|f| f.limit.unwrap_or(u64::MAX));
    let worst = findings.iter().find_map(|f| f.limit.map(|l| (l, f.link)));
    let (predicted, limited_by) = match worst {
        Some((l, link)) if l < path.rate => (l, link),
        _ => (path.rate, "path"),
    };
    Report {
        rate: path.rate,
        rtt_ms: path.rtt.as_secs_f64() * 1000.0,
        bdp,
        streams,
        predicted,
        limited_by: limited_by.to_string(),
        measured: Vec::new(),
        findings,
    }
}

/// The finding for one direction's buffer limits, if they keep `streams` streams
/// below the path's rate.
fn window_finding(
    link: &'static str,
    key: &str,
    side: &str,
    limits: Triple,
    path: &Path,
    streams: u32,
    bdp: u64,
) -> Option<Finding> {
    let [min, default, max] = limits;
    let per_stream = window::window(max);
    let reach = window::rate_of(per_stream, streams, path.rtt);
    if reach >= path.rate {
        return None;
    }
    let need = window::buffer_for(bdp, streams).max(max);
    let more = window::streams_for(bdp, per_stream);
    let mut fix = vec![format!(
        "sysctl -w net.ipv4.{key}=\"{min} {default} {need}\""
    )];
    if more > streams {
        fix.push(format!("hetch cp --streams {more} ..."));
    }
    Some(Finding {
        link,
        limit: Some(reach),
        finding: format!(
            "{side} this host, net.ipv4.{key} lets a stream grow to {} ({} of window): \
             {streams} streams carry at most {}/s over {:.0} ms, {:.0}% of the path's {}/s",
            mib(max),
            mib(per_stream),
            mb(reach),
            path.rtt.as_secs_f64() * 1000.0,
            100.0 * reach as f64 / path.rate as f64,
            mb(path.rate),
        ),
        fix,
    })
}

/// A loss-based congestion control (cubic, reno) on a long path: one loss halves the
/// window, which then takes many round trips to regrow.
fn congestion_finding(host: &Host, path: &Path) -> Option<Finding> {
    if path.rtt < LONG_PATH {
        return None;
    }
    let (now, available) = host.congestion().ok()?;
    if now == "bbr" {
        return None;
    }
    let set = "sysctl -w net.ipv4.tcp_congestion_control=bbr".to_string();
    let fix = match available.iter().any(|a| a == "bbr") {
        true => vec![set, "hetch cp --cc bbr ...".into()],
        false => vec![format!("modprobe tcp_bbr && {set}")],
    };
    Some(Finding {
        link: "congestion",
        limit: None,
        finding: format!(
            "congestion control `{now}` halves a stream's window at each loss; over {:.0} ms \
             it regrows slowly, and BBR (model-based) keeps the rate through sparse losses",
            path.rtt.as_secs_f64() * 1000.0
        ),
        fix,
    })
}

/// Interfaces below the Ethernet MTU (more packets, more CPU per byte), and a path that
/// carries smaller packets than this host's interface is set for (an MTU mismatch:
/// the peer, or a hop, is set lower).
fn mtu_findings(host: &Host, path: &Path) -> Vec<Finding> {
    let mut out = Vec::new();
    let probed = path.probe.as_ref();
    let interfaces: Vec<(String, u32)> = match probed.and_then(|p| p.interface.clone()) {
        Some(i) => host.mtu(&i).map(|m| (i, m)).into_iter().collect(),
        None => host.interfaces(),
    };
    for (name, mtu) in interfaces {
        // Only the interface the probe went through is compared with it.
        let toward = probed.filter(|p| p.interface.is_some() && p.packet() < mtu);
        if let Some(p) = toward {
            let carried = p.packet();
            out.push(Finding {
                link: "mtu",
                limit: None,
                finding: format!(
                    "MTU mismatch: {name} is set to {mtu} but the path to the peer carries \
                     {carried}-byte packets (MSS {}): the peer or a hop is set lower, and \
                     each packet carries {:.0}% of what {name} could",
                    p.mss,
                    100.0 * carried as f64 / mtu as f64
                ),
                fix: vec![
                    format!("on the peer: ip link set dev IFACE mtu {mtu}"),
                    format!("ip link set dev {name} mtu {carried}"),
                ],
            });
        } else if mtu < 1500 {
            out.push(Finding {
                link: "mtu",
                limit: None,
                finding: format!(
                    "{name} has an MTU of {mtu}, below Ethernet's 1500: more packets, and \
                     CPU, per byte (fine if the network below allows no more)"
                ),
                fix: vec![format!("ip link set dev {name} mtu 1500")],
            });
        }
    }
    out
}

fn mib(n: u64) -> String {
    hetch_units::human_bytes(n as f64)
}

fn mb(n: u64) -> String {
    format!("{:.1} MB", n as f64 / 1e6)
}

impl Report {
    /// The report for a terminal: a line on the path, then a short table, the worst
    /// link first, each finding followed by its fixes.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "hetch doctor: a path of {}/s ({:.2} Gbit/s) and {:.0} ms RTT needs {} in \
             flight; {} streams\n",
            mb(self.rate),
            self.rate as f64 * 8.0 / 1e9,
            self.rtt_ms,
            mib(self.bdp),
            self.streams
        );
        for c in &self.measured {
            out.push_str(&format!(
                "measured: {:<30} {:>10}/s  ({})\n",
                c.link,
                mb(c.rate),
                c.how
            ));
        }
        if self.findings.is_empty() {
            match self.limited_by.as_str() {
                "path" => out
                    .push_str("nothing on this host keeps such a transfer below the path's rate\n"),
                by => out.push_str(&format!(
                    "predicted: {}/s, limited by {by}; no setting here to change\n",
                    mb(self.predicted)
                )),
            }
            return out;
        }
        out.push_str(&format!(
            "predicted: {}/s, limited by the {}\n\n{:<12} {:<15} finding\n",
            mb(self.predicted),
            self.limited_by,
            "limit",
            "link"
        ));
        for f in &self.findings {
            let limit = f.limit.map_or("-".to_string(), |l| format!("{}/s", mb(l)));
            out.push_str(&format!("{limit:<12} {:<15} {}\n", f.link, f.finding));
            for (i, fix) in f.fix.iter().enumerate() {
                let lead = if i == 0 { "fix:" } else { "or: " };
                out.push_str(&format!("{:<28} {lead} {fix}\n", ""));
            }
        }
        out
    }
}

/// The round trip [`host_findings`] assumes: a path across a region, where this
/// host's windows start to matter.
pub const SUMMARY_RTT: Duration = Duration::from_millis(20);

/// This host's findings, one line each, for a transfer at the autotuning target rate
/// over [`SUMMARY_RTT`] on autotuning's most streams: what a service shows of its
/// nodes, which have no one path.
pub fn host_findings(host: &Host) -> Vec<String> {
    let path = Path {
        rate: crate::tune::TARGET_RATE,
        rtt: SUMMARY_RTT,
        streams: crate::tune::MAX_AUTO_STREAMS,
        probe: None,
    };
    check(host, path)
        .findings
        .into_iter()
        .map(|f| format!("{}: {}", f.link, f.finding))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::tests::fake;

    const MS: Duration = Duration::from_millis(1);
    /// 2 Gbit/s at 100 ms, 4 streams.
    const PATH: Path = Path {
        rate: 250_000_000,
        rtt: Duration::from_millis(100),
        streams: 4,
        probe: None,
    };

    fn host(rmem_max: u64, wmem_max: u64) -> (tempfile::TempDir, Host) {
        let r = format!("4096 131072 {rmem_max}");
        let w = format!("4096 16384 {wmem_max}");
        fake(&[
            ("proc/sys/net/ipv4/tcp_rmem", &r),
            ("proc/sys/net/ipv4/tcp_wmem", &w),
        ])
    }

    #[test]
    fn default_limits_at_100_ms_are_found_with_sysctl_lines_sized_from_the_bdp() {
        let (_t, h) = host(6 << 20, 4 << 20);
        let r = check(&h, PATH);
        assert_eq!(r.bdp, 25_000_000);
        // The send side (4 MiB: 2 MiB per stream) is the worse: first.
        let links: Vec<_> = r.findings.iter().map(|f| f.link).collect();
        assert_eq!(links, ["send window", "receive window"]);
        let send = &r.findings[0];
        assert_eq!(send.limit, Some(window::rate_of(2 << 20, 4, 100 * MS)));
        assert_eq!(
            send.fix,
            [
                "sysctl -w net.ipv4.tcp_wmem=\"4096 16384 15728640\"",
                "hetch cp --streams 12 ...",
            ]
        );
        assert_eq!(
            r.findings[1].fix[0],
            "sysctl -w net.ipv4.tcp_rmem=\"4096 131072 15728640\""
        );
        assert_eq!(
            (r.predicted, r.limited_by.as_str()),
            (send.limit.unwrap(), "send window")
        );
        let text = r.to_text();
        assert!(text.contains("limited by the send window"), "{text}");
        assert!(text.contains("fix: sysctl -w net.ipv4.tcp_wmem"), "{text}");
    }

    #[test]
    fn limits_sized_as_printed_leave_nothing_to_find() {
        let (_t, h) = host(12 << 20, 12 << 20);
        let r = check(&h, PATH);
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        assert_eq!((r.predicted, r.limited_by.as_str()), (PATH.rate, "path"));
        assert!(r.to_text().contains("nothing on this host"));
        // A measured link below the path's rate sets the prediction.
        let mut r = r;
        r.add_capacity(Capacity {
            link: "storage write /d".into(),
            rate: 100_000_000,
            how: "256 MiB".into(),
        });
        r.add_capacity(Capacity {
            link: "hashing".into(),
            rate: 900_000_000,
            how: "blake3".into(),
        });
        assert_eq!(
            (r.predicted, r.limited_by.as_str()),
            (100_000_000, "storage write /d")
        );
        let text = r.to_text();
        assert!(text.contains("limited by storage write /d"), "{text}");
        assert!(text.contains("measured: hashing"), "{text}");
        // More streams need less per stream.
        let (_t, h) = host(6 << 20, 6 << 20);
        let wide = Path {
            streams: 16,
            ..PATH
        };
        assert!(check(&h, wide).findings.is_empty());
        // On loopback (no RTT) no window is too small.
        let lan = Path {
            rtt: Duration::ZERO,
            ..PATH
        };
        let (_t, h) = host(1 << 20, 1 << 20);
        assert!(check(&h, lan).findings.is_empty());
    }

    #[test]
    fn unreadable_limits_and_slow_governors_are_findings_without_a_limit() {
        let (_t, h) = fake(&[
            ("proc/sys/net/ipv4/tcp_rmem", "4096 131072 67108864"),
            (
                "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                "powersave",
            ),
        ]);
        let r = check(&h, PATH);
        let links: Vec<_> = r.findings.iter().map(|f| (f.link, f.limit)).collect();
        assert_eq!(links, [("send window", None), ("cpu frequency", None)]);
        assert!(r.findings[0].finding.contains("tcp_wmem"));
        assert!(r.findings[1].finding.contains("cpu0 powersave"));
        assert_eq!(r.limited_by, "path");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["findings"][1]["link"], "cpu frequency");
        assert_eq!(json["bdp"], 25_000_000);
    }

    #[test]
    fn loss_based_congestion_low_and_mismatched_mtus_and_swap_are_found() {
        let (_t, h) = fake(&[
            ("proc/sys/net/ipv4/tcp_rmem", "4096 131072 67108864"),
            ("proc/sys/net/ipv4/tcp_wmem", "4096 16384 67108864"),
            ("proc/sys/net/ipv4/tcp_congestion_control", "cubic"),
            (
                "proc/sys/net/ipv4/tcp_available_congestion_control",
                "reno cubic",
            ),
            ("proc/meminfo", "SwapTotal: 4096 kB\nSwapFree: 0 kB\n"),
            ("sys/class/net/eth0/mtu", "1280"),
            ("sys/class/net/eth0/operstate", "up"),
            ("sys/class/net/jumbo0/mtu", "9000"),
            ("sys/class/net/jumbo0/operstate", "up"),
        ]);
        let r = check(&h, PATH);
        let links: Vec<_> = r.findings.iter().map(|f| f.link).collect();
        assert_eq!(links, ["congestion", "mtu", "memory"], "{r:?}");
        // bbr is not loaded: the fix loads it first.
        assert_eq!(
            r.findings[0].fix,
            ["modprobe tcp_bbr && sysctl -w net.ipv4.tcp_congestion_control=bbr"]
        );
        assert!(r.findings[1].finding.contains("eth0 has an MTU of 1280"));
        assert_eq!(r.findings[1].fix, ["ip link set dev eth0 mtu 1500"]);
        assert!(r.findings[2].finding.contains("4.00 MiB of swap"));
        // A short path needs no other congestion control.
        let lan = Path {
            rtt: Duration::from_millis(1),
            ..PATH
        };
        assert!(check(&h, lan)
            .findings
            .iter()
            .all(|f| f.link != "congestion"));
        // Probed: only the interface toward the peer, which carries 1500-byte packets
        // while jumbo0 is set to 9000.
        let probed = Path {
            probe: Some(Probe {
                interface: Some("jumbo0".into()),
                mss: 1448,
                ipv6: false,
            }),
            ..PATH
        };
        let r = check(&h, probed);
        let mtu: Vec<_> = r.findings.iter().filter(|f| f.link == "mtu").collect();
        assert_eq!(mtu.len(), 1, "{r:?}");
        assert!(
            mtu[0]
                .finding
                .contains("MTU mismatch: jumbo0 is set to 9000"),
            "{:?}",
            mtu[0]
        );
        assert!(mtu[0].finding.contains("1500-byte packets"), "{:?}", mtu[0]);
        assert_eq!(
            mtu[0].fix,
            [
                "on the peer: ip link set dev IFACE mtu 9000",
                "ip link set dev jumbo0 mtu 1500"
            ]
        );
    }
}
