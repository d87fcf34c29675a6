//! The findings for one path: what on this host keeps a transfer below the path's
//! rate, worst first, each with the commands that fix it.

use std::time::Duration;

use serde::Serialize;

use crate::host::{Host, Triple};
use crate::window;

/// The path a transfer is to take.
#[derive(Debug, Clone, Copy)]
pub struct Path {
    /// Its rate, bytes per second.
    pub rate: u64,
    /// Its round-trip time.
    pub rtt: Duration,
    /// Data streams the transfer is to use.
    pub streams: u32,
}

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
    pub limited_by: &'static str,
    /// The findings, the lowest limit first, then those without one.
    pub findings: Vec<Finding>,
}

/// Checks `host` for a transfer over `path`.
pub fn check(host: &Host, path: Path) -> Report {
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
        limited_by,
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
    path: Path,
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
        if self.findings.is_empty() {
            out.push_str("nothing on this host keeps such a transfer below the path's rate\n");
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
                "sysctl -w net.ipv4.tcp_wmem=\"4096 16384 12582912\"",
                "hetch cp --streams 12 ...",
            ]
        );
        assert_eq!(
            r.findings[1].fix[0],
            "sysctl -w net.ipv4.tcp_rmem=\"4096 131072 12582912\""
        );
        assert_eq!(
            (r.predicted, r.limited_by),
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
        assert_eq!((r.predicted, r.limited_by), (PATH.rate, "path"));
        assert!(r.to_text().contains("nothing on this host"));
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
}
