//! TCP window arithmetic.
//!
//! A stream can have at most one window of data in flight per round trip, so a path
//! of rate R and round-trip time T needs R x T bytes in flight (the bandwidth-delay
//! product) to be full. Linux grows an autotuned socket's buffers up to the third
//! value of `net.ipv4.tcp_rmem` (receiving) and `tcp_wmem` (sending), and about half
//! of a buffer is window: the rest pays for the kernel's bookkeeping of the segments
//! in it (`tcp_adv_win_scale`; newer kernels measure the ratio, which is about the same
//! at a 1500-byte MTU). The fasterdata guidance of ESnet sizes buffers at twice the
//! BDP for the same reason. On this machine, 4 streams under the default 6 MiB
//! `tcp_rmem` limit reach 12 MiB in flight: 1.0 Gbit/s at 100 ms, 0.50 of 2 Gbit/s,
//! against 0.44 measured on the untuned testbed. The same half is assumed of the send
//! buffer, which is the rougher guess (sent segments carry less bookkeeping): for the
//! default 4 MiB `tcp_wmem` it predicts 0.34 of that path, below what was measured.
//! Calibrating both factors on the testbed belongs to the predictor (issue 18).

use std::time::Duration;

/// The most data streams a session may have (what `--streams` takes).
pub const MAX_STREAMS: u32 = 256;

/// Bytes that must be in flight to fill a path of `rate` bytes per second and `rtt`.
pub fn bdp(rate: u64, rtt: Duration) -> u64 {
    let b = rate as u128 * rtt.as_nanos() / 1_000_000_000;
    b.min(u64::MAX as u128) as u64
}

/// The window one autotuned stream reaches with a buffer limit of `max_buffer` bytes.
pub fn window(max_buffer: u64) -> u64 {
    max_buffer / 2
}

/// The rate (bytes per second) that `streams` streams of `window` bytes each reach
/// over `rtt` (unbounded, as `u64::MAX`, at an RTT of zero).
pub fn rate_of(window: u64, streams: u32, rtt: Duration) -> u64 {
    let nanos = rtt.as_nanos();
    if nanos == 0 {
        return u64::MAX;
    }
    let r = window as u128 * streams as u128 * 1_000_000_000 / nanos;
    r.min(u64::MAX as u128) as u64
}

/// Streams of `window` bytes each that keep `bdp` bytes in flight (at least 1, at
/// most [`MAX_STREAMS`]).
pub fn streams_for(bdp: u64, window: u64) -> u32 {
    if window == 0 {
        return MAX_STREAMS;
    }
    bdp.div_ceil(window).clamp(1, MAX_STREAMS as u64) as u32
}

/// The buffer limit that lets `streams` streams keep `bdp` bytes in flight: twice
/// each stream's share, with a quarter more, rounded up to a whole MiB.
///
/// The quarter is for the round trip, which is measured on an idle path: under load
/// (queues, a busy host) it grows, and a limit sized at exactly the idle BDP is short
/// again at once (the next `hetch doctor` reported the window it had just fixed).
pub fn buffer_for(bdp: u64, streams: u32) -> u64 {
    const MIB: u64 = 1 << 20;
    let share = bdp.div_ceil(streams.max(1) as u64);
    let with_headroom = 2 * share + share.div_ceil(2);
    with_headroom.div_ceil(MIB) * MIB
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_bdp_is_rate_times_rtt() {
        // 2 Gbit/s = 250 MB/s; over 100 ms, 25 MB.
        assert_eq!(bdp(250_000_000, 100 * MS), 25_000_000);
        assert_eq!(bdp(250_000_000, Duration::ZERO), 0);
        assert_eq!(bdp(u64::MAX, Duration::from_secs(3600)), u64::MAX);
    }

    #[test]
    fn four_default_streams_reach_about_half_of_2_gbits_at_100_ms() {
        let w = window(6 << 20);
        assert_eq!(w, 3 << 20);
        let r = rate_of(w, 4, 100 * MS);
        // 12 MiB per 100 ms: 125.8 MB/s, 0.50 of 250 MB/s.
        assert_eq!(r, 125_829_120);
        assert_eq!(rate_of(w, 4, Duration::ZERO), u64::MAX);
    }

    #[test]
    fn streams_and_buffers_needed_cover_the_bdp() {
        let b = bdp(250_000_000, 100 * MS);
        assert_eq!(streams_for(b, 3 << 20), 8);
        assert_eq!(streams_for(b, 0), MAX_STREAMS);
        assert_eq!(streams_for(0, 3 << 20), 1);
        assert_eq!(streams_for(u64::MAX, 1), MAX_STREAMS);
        // 4 streams of a quarter each: 2.5 times 6.25 MB, rounded up to 15 MiB.
        let buf = buffer_for(b, 4);
        assert_eq!(buf, 15 << 20);
        assert!(rate_of(window(buf), 4, 100 * MS) >= 250_000_000);
        // Still enough when the round trip grows by a fifth under load.
        assert!(rate_of(window(buf), 4, 120 * MS) >= 250_000_000);
        assert_eq!(buffer_for(1, 0), 1 << 20);
    }
}
