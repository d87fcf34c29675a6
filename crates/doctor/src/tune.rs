//! Autotuning: the data streams a session opens, chosen from the round trip measured
//! while connecting and this host's socket-buffer limits.
//!
//! One autotuned stream carries at most one window per round trip, and the kernel
//! caps that window by `tcp_rmem`/`tcp_wmem` (see [`crate::window`]). On a long path
//! an untuned host therefore needs several streams where a tuned one needs few: at
//! 100 ms under Debian's 6 MiB/4 MiB limits one stream carries about 20 MB/s. The
//! tuner opens enough streams for [`TARGET_RATE`], never fewer than the default and
//! never more than [`MAX_AUTO_STREAMS`].
//!
//! The peer's limits are not known when the streams are opened (they are opened
//! while the server answers the hello, to save round trips), so the smaller of this
//! host's two limits stands for both ends: the common case of two hosts of one
//! distribution. Socket buffers are left to the kernel's autotuning: setting
//! `SO_RCVBUF` would cap a socket at `net.core.rmem_max` and turn autotuning off.

use std::time::Duration;

use serde::Serialize;

use crate::host::Host;
use crate::window;

/// The rate the tuner sizes for when it does not know the path's: 10 Gbit/s, the
/// interface of a common data transfer node. On a slower path the extra streams cost
/// little: each only carries its share.
pub const TARGET_RATE: u64 = 1_250_000_000;

/// The most streams the tuner opens. On the testbed (2 Gbit/s, 100 ms, untuned hosts)
/// 8 and 16 streams move 1 GiB equally fast and 32 a little slower: beyond a few
/// more than the window needs, streams only add connections to set up. A server lets
/// one address have 32 connections before they authenticate, all of a session's at
/// once: 12 keeps two sessions (a worker's two units) of 13 connections within it.
pub const MAX_AUTO_STREAMS: u32 = 12;

/// What the tuner chose for one session, and from what.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// Data streams to open.
    pub streams: u16,
    /// The round trip measured (the TCP handshake of the control connection),
    /// milliseconds.
    pub rtt_ms: f64,
    /// The window one stream reaches under this host's limits, bytes.
    pub window: u64,
    /// The rate sized for, bytes per second.
    pub target_rate: u64,
    /// The rate the chosen streams' windows allow over this round trip, bytes per
    /// second (`None`: unbounded at a round trip too short to measure).
    pub window_rate: Option<u64>,
    /// Why, in one line.
    pub why: String,
}

/// Chooses the streams for a session whose connection took `rtt` to set up, under
/// `host`'s limits, never fewer than `floor` (the default).
pub fn choose(rtt: Duration, host: &Host, floor: u16) -> Choice {
    let floor = u32::from(floor.max(1));
    let limit = match (host.tcp_rmem(), host.tcp_wmem()) {
        (Ok(r), Ok(w)) => Ok(r[2].min(w[2])),
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    let rtt_ms = rtt.as_secs_f64() * 1e3;
    let choice = |streams: u32, window: u64, why: String| {
        let rate = window::rate_of(window, streams, rtt);
        Choice {
            streams: streams as u16,
            rtt_ms,
            window,
            target_rate: TARGET_RATE,
            window_rate: (rate != u64::MAX && window > 0).then_some(rate),
            why,
        }
    };
    let limit = match limit {
        Ok(l) => l,
        Err(e) => return choice(floor, 0, format!("kept {floor} streams: {e}")),
    };
    let w = window::window(limit);
    let needed = window::streams_for(window::bdp(TARGET_RATE, rtt), w);
    let streams = needed.clamp(floor, MAX_AUTO_STREAMS.max(floor));
    let why = if needed <= floor {
        format!("{floor} streams (the default) fill 10 Gbit/s at this round trip")
    } else if needed > MAX_AUTO_STREAMS {
        format!(
            "{streams} streams (the most autotuning opens): a window of {} per stream at {rtt_ms:.1} ms needs {needed} for 10 Gbit/s",
            hetch_units::human_bytes(w as f64)
        )
    } else {
        format!(
            "{streams} streams: a window of {} per stream at {rtt_ms:.1} ms",
            hetch_units::human_bytes(w as f64)
        )
    };
    choice(streams, w, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::tests::fake;

    const MS: Duration = Duration::from_millis(1);

    fn host(rmem_max: u64, wmem_max: u64) -> (tempfile::TempDir, Host) {
        let r = format!("4096 131072 {rmem_max}");
        let w = format!("4096 16384 {wmem_max}");
        fake(&[
            ("proc/sys/net/ipv4/tcp_rmem", r.as_str()),
            ("proc/sys/net/ipv4/tcp_wmem", w.as_str()),
        ])
    }

    #[test]
    fn a_short_path_keeps_the_default() {
        let (_t, h) = host(6 << 20, 4 << 20);
        let c = choose(Duration::from_micros(60), &h, 4);
        assert_eq!(c.streams, 4);
        assert!(c.why.contains("the default"), "{}", c.why);
        // 2 MiB per stream at 60 us: far above 10 Gbit/s.
        assert!(c.window_rate.unwrap() > TARGET_RATE);
        assert_eq!(choose(Duration::ZERO, &h, 4).window_rate, None);
    }

    #[test]
    fn a_long_path_on_an_untuned_host_opens_streams_up_to_the_cap() {
        // Debian's limits: the 4 MiB send limit gives 2 MiB windows.
        let (_t, h) = host(6 << 20, 4 << 20);
        let c = choose(100 * MS, &h, 4);
        assert_eq!(c.window, 2 << 20);
        // 125 MB in flight for 10 Gbit/s over 100 ms: 60 windows, capped.
        assert_eq!(c.streams as u32, MAX_AUTO_STREAMS);
        assert!(c.why.contains("needs 60"), "{}", c.why);
        // 12 x 2 MiB per 100 ms: 252 MB/s, the testbed's 2 Gbit/s.
        assert_eq!(c.window_rate, Some(251_658_240));
    }

    #[test]
    fn a_tuned_host_needs_fewer_and_a_medium_path_some() {
        let (_t, tuned) = host(64 << 20, 64 << 20);
        // 32 MiB windows: 4 of them carry 10 Gbit/s over 100 ms.
        assert_eq!(choose(100 * MS, &tuned, 4).streams, 4);
        let (_t, h) = host(6 << 20, 4 << 20);
        // 12.5 MB for 10 Gbit/s over 10 ms: 6 windows of 2 MiB.
        let c = choose(10 * MS, &h, 4);
        assert_eq!(c.streams, 6);
        assert!(!c.why.contains("most"), "{}", c.why);
        // A floor above the cap wins: the user's default is never lowered.
        assert_eq!(choose(100 * MS, &h, 32).streams, 32);
    }

    #[test]
    fn unreadable_limits_keep_the_floor_and_say_why() {
        let (_t, h) = fake(&[]);
        let c = choose(100 * MS, &h, 4);
        assert_eq!(c.streams, 4);
        assert!(c.why.contains("tcp_rmem"), "{}", c.why);
        // No window known: no rate from it either (not zero).
        assert_eq!(c.window_rate, None);
    }
}
