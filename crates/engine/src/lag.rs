//! Lag of a streaming transfer: the time from bytes being appended to a growing file at
//! the source to those bytes being durable and verified at the destination.
//!
//! A follow session records one sample per piece for hours, so [`LagHistogram`] keeps a
//! fixed array of counters (HDR-style log-linear buckets over microseconds) instead of
//! the samples: memory does not grow with the run, two histograms merge by adding
//! counters (one per stream or per file, summed for the report), and any quantile comes
//! back within 1% of the true one.

use std::fmt;
use std::time::Duration;

/// Each power-of-two range of microseconds is cut into this many equal buckets, so a
/// bucket is at most 1/128 of its lower bound wide; reporting its midpoint is then off
/// by at most 1/256 (0.4%) of the value, comfortably inside the 1% we promise.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// Values below this (256 µs) get one bucket per microsecond: exact at µs resolution.
const LINEAR: u64 = 2 * SUB;
/// The top range is [2^31, 2^32) µs, i.e. up to 71.6 minutes, past the hour we must
/// cover; anything longer is counted in the last bucket.
const TOP_BIT: u32 = 31;
/// 256 linear buckets + 128 for each power of two from 2^8 to 2^31: 3,328 counters.
const BUCKETS: usize = LINEAR as usize + (TOP_BIT as usize - SUB_BITS as usize) * SUB as usize;
// The memory promise (a few thousand counters), checked when compiling.
const _: () = assert!(BUCKETS <= 4096);

/// The bucket of a value in microseconds (values past the top range clamp to the last).
fn index_of(us: u64) -> usize {
    if us < LINEAR {
        return us as usize;
    }
    let k = 63 - us.leading_zeros(); // us is in [2^k, 2^(k+1)), k >= 8
    if k > TOP_BIT {
        return BUCKETS - 1;
    }
    let sub = (us >> (k - SUB_BITS)) - SUB; // 0..SUB within the range
    LINEAR as usize + (k - SUB_BITS - 1) as usize * SUB as usize + sub as usize
}

/// The range `[lower, lower + width)` in microseconds that bucket `i` counts.
fn bounds_of(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < LINEAR {
        return (i, 1);
    }
    let k = (i - LINEAR) / SUB + u64::from(SUB_BITS) + 1;
    let sub = (i - LINEAR) % SUB;
    let width = 1u64 << (k - u64::from(SUB_BITS));
    ((SUB + sub) * width, width)
}

/// A duration of `ns` nanoseconds; `Duration::from_nanos` takes only a u64 (584 years),
/// and a mean of samples near `Duration::MAX` needs more.
fn from_nanos(ns: u128) -> Duration {
    const NS: u128 = 1_000_000_000;
    let secs = u64::try_from(ns / NS).unwrap_or(u64::MAX);
    Duration::new(secs, (ns % NS) as u32)
}

/// A fixed-memory histogram of lag samples.
///
/// Buckets cover 1 µs to about 71 minutes with at most 0.4% error; longer samples are
/// counted in the top bucket (so quantiles that fall there are only bounded by
/// [`max`](Self::max)), while `min`, `max` and `mean` are kept exactly.
#[derive(Clone, PartialEq, Eq)]
pub struct LagHistogram {
    counts: Box<[u64]>,
    count: u64,
    /// Sum of all samples in nanoseconds, for an exact mean; u128 cannot overflow at any
    /// realistic sample count, and additions saturate rather than wrap regardless.
    sum_ns: u128,
    min: Duration,
    max: Duration,
}

impl LagHistogram {
    /// An empty histogram.
    pub fn new() -> LagHistogram {
        LagHistogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            count: 0,
            sum_ns: 0,
            min: Duration::MAX,
            max: Duration::ZERO,
        }
    }

    /// Records one sample.
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.counts[index_of(us)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(d.as_nanos());
        self.min = self.min.min(d);
        self.max = self.max.max(d);
    }

    /// Number of samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The smallest sample, exactly (`None` when empty).
    pub fn min(&self) -> Option<Duration> {
        (self.count > 0).then_some(self.min)
    }

    /// The largest sample, exactly, even past the top bucket (`None` when empty).
    pub fn max(&self) -> Option<Duration> {
        (self.count > 0).then_some(self.max)
    }

    /// The arithmetic mean of the samples, to the nanosecond (`None` when empty).
    pub fn mean(&self) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        Some(from_nanos(self.sum_ns / u128::from(self.count)))
    }

    /// The `q`-quantile (0.5 = median, 0.99 = p99) by nearest rank: the smallest sample
    /// with at least `q` of all samples at or below it, within 1% relative error (for
    /// samples up to about 71 minutes) and never outside `min..=max`. `q` outside
    /// `0..=1` is clamped; `None` when empty or when `q` is NaN.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 || q.is_nan() {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        // Nearest rank, 1-based: ceil(q * n), at least the first sample.
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        // The extreme ranks are known exactly; no need to estimate them from a bucket.
        if rank == 1 {
            return Some(self.min);
        }
        if rank == self.count {
            return Some(self.max);
        }
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lower, width) = bounds_of(i);
                // The midpoint halves the worst-case error of either bucket edge.
                let mid_ns = u128::from(lower) * 1000 + u128::from(width) * 500;
                return Some(from_nanos(mid_ns).clamp(self.min, self.max));
            }
        }
        // The counters always add up to `count`, so the loop returns; stay total anyway.
        Some(self.max)
    }

    /// Adds every sample of `other` to this histogram, as if they had been recorded here.
    pub fn merge(&mut self, other: &LagHistogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The figures a report shows, in milliseconds (`None` when empty).
    pub fn summary(&self) -> Option<LagSummary> {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        Some(LagSummary {
            samples: self.count,
            p50_ms: ms(self.quantile(0.5)?),
            p99_ms: ms(self.quantile(0.99)?),
            max_ms: ms(self.max()?),
            mean_ms: ms(self.mean()?),
        })
    }
}

impl Default for LagHistogram {
    fn default() -> Self {
        LagHistogram::new()
    }
}

/// Counters are left out: 3,328 numbers would bury the figures that matter.
impl fmt::Debug for LagHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LagHistogram")
            .field("count", &self.count)
            .field("min", &self.min())
            .field("max", &self.max())
            .field("mean", &self.mean())
            .finish()
    }
}

/// What a report shows of a [`LagHistogram`]: plain numbers, for the caller to print or
/// serialise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LagSummary {
    /// Number of samples.
    pub samples: u64,
    /// Median lag in milliseconds.
    pub p50_ms: f64,
    /// 99th-percentile lag in milliseconds.
    pub p99_ms: f64,
    /// Largest lag in milliseconds (exact).
    pub max_ms: f64,
    /// Mean lag in milliseconds (exact).
    pub mean_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[track_caller]
    fn assert_close(got: Duration, want: Duration, rel: f64) {
        let (g, w) = (got.as_secs_f64(), want.as_secs_f64());
        assert!(
            (g - w).abs() <= rel * w,
            "got {got:?}, want {want:?} within {:.2}%",
            rel * 100.0
        );
    }

    /// splitmix64: a deterministic sample stream without a dependency.
    fn next(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn buckets_tile_the_range_and_each_value_lands_in_its_own() {
        for i in 0..BUCKETS - 1 {
            let (lo, w) = bounds_of(i);
            let (next_lo, _) = bounds_of(i + 1);
            assert_eq!(lo + w, next_lo, "gap or overlap after bucket {i}");
            assert_eq!(index_of(lo), i);
            assert_eq!(index_of(lo + w - 1), i);
            // Relative width at most 1/128 once past the exact range.
            assert!(lo < LINEAR || w * SUB <= lo, "bucket {i} too wide");
        }
        // One hour is inside the range, not clamped.
        assert!(index_of(3_600_000_000) < BUCKETS - 1);
        assert_eq!(index_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn empty_has_no_figures() {
        let h = LagHistogram::new();
        assert_eq!(h.count(), 0);
        assert_eq!(h.quantile(0.5), None);
        assert_eq!(h.min(), None);
        assert_eq!(h.max(), None);
        assert_eq!(h.mean(), None);
        assert_eq!(h.summary(), None);
    }

    #[test]
    fn uniform_milliseconds_give_the_textbook_quantiles() {
        let mut h = LagHistogram::new();
        for n in 1..=10_000 {
            h.record(ms(n));
        }
        assert_eq!(h.count(), 10_000);
        assert_close(h.quantile(0.5).unwrap(), ms(5000), 0.01);
        assert_close(h.quantile(0.99).unwrap(), ms(9900), 0.01);
        assert_eq!(h.quantile(0.0), Some(ms(1)));
        assert_eq!(h.quantile(1.0), Some(ms(10_000)));
        assert_eq!(h.max(), Some(ms(10_000)));
        assert_eq!(h.min(), Some(ms(1)));
        assert_eq!(h.mean(), Some(Duration::from_micros(5_000_500)));
        let s = h.summary().unwrap();
        assert_eq!(s.samples, 10_000);
        assert!((s.p50_ms - 5000.0).abs() <= 50.0, "{s:?}");
        assert!((s.p99_ms - 9900.0).abs() <= 99.0, "{s:?}");
        assert_eq!(s.max_ms, 10_000.0);
        assert!((s.mean_ms - 5000.5).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn quantiles_stay_within_one_percent_from_microseconds_to_an_hour() {
        // Log-uniform samples over 1 µs .. 1 h, compared with the exact nearest rank.
        let mut state = 7;
        let mut samples: Vec<Duration> = (0..50_000)
            .map(|_| {
                let f = (next(&mut state) >> 11) as f64 / (1u64 << 53) as f64;
                Duration::from_nanos((1e3 * (3.6e9f64).powf(f)) as u64)
            })
            .collect();
        let mut h = LagHistogram::new();
        for &s in &samples {
            h.record(s);
        }
        samples.sort();
        for q in [
            0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0,
        ] {
            let rank = ((q * samples.len() as f64).ceil() as usize).max(1);
            let want = samples[rank - 1];
            let got = h.quantile(q).unwrap();
            // Below 256 µs buckets are 1 µs wide: allow that absolute error too.
            let slack = (want.as_secs_f64() * 0.01).max(1e-6);
            assert!(
                (got.as_secs_f64() - want.as_secs_f64()).abs() <= slack,
                "q={q}: got {got:?}, want {want:?}"
            );
        }
    }

    #[test]
    fn a_single_sample_is_every_quantile() {
        let mut h = LagHistogram::new();
        let d = Duration::from_nanos(123_456_789);
        h.record(d);
        assert_eq!(h.count(), 1);
        for q in [0.0, 0.5, 0.99, 1.0] {
            assert_eq!(h.quantile(q), Some(d), "q={q}");
        }
        assert_eq!((h.min(), h.max(), h.mean()), (Some(d), Some(d), Some(d)));
    }

    #[test]
    fn merge_equals_recording_both() {
        let (mut a, mut b, mut both) = (
            LagHistogram::new(),
            LagHistogram::new(),
            LagHistogram::new(),
        );
        let mut state = 1;
        for i in 0..5_000 {
            let d = Duration::from_micros(next(&mut state) % 20_000_000);
            let part = if i % 3 == 0 { &mut a } else { &mut b };
            part.record(d);
            both.record(d);
        }
        a.merge(&b);
        assert_eq!(a, both);
        assert_eq!(a.quantile(0.99), both.quantile(0.99));
        // Merging an empty histogram changes nothing, including min and max.
        a.merge(&LagHistogram::new());
        assert_eq!(a, both);
    }

    #[test]
    fn huge_values_clamp_into_the_top_bucket_but_max_is_exact() {
        let mut h = LagHistogram::new();
        let huge = Duration::from_secs(10 * 3600) + Duration::from_nanos(7);
        h.record(ms(5));
        h.record(huge);
        h.record(Duration::MAX);
        assert_eq!(h.count(), 3);
        assert_eq!(h.max(), Some(Duration::MAX));
        assert_eq!(h.quantile(1.0), Some(Duration::MAX));
        // The median is the 10-hour sample, clamped into the top bucket (~71.5 min).
        let p50 = h.quantile(0.5).unwrap();
        assert!(p50 > Duration::from_secs(71 * 60) && p50 < huge, "{p50:?}");
        let mean = h.mean().unwrap();
        assert!(mean > huge && mean < Duration::MAX, "{mean:?}");

        let mut h = LagHistogram::new();
        h.record(huge);
        assert_eq!(h.max(), Some(huge));
        assert_eq!(h.quantile(0.5), Some(huge));
        assert_eq!(h.mean(), Some(huge));
    }

    #[test]
    fn max_and_min_are_exact_below_bucket_resolution() {
        let mut h = LagHistogram::new();
        let values = [
            Duration::from_nanos(1_234_567_891),
            Duration::from_nanos(999),
            Duration::from_nanos(1_234_567_890),
            Duration::ZERO,
        ];
        for v in values {
            h.record(v);
        }
        assert_eq!(h.max(), Some(Duration::from_nanos(1_234_567_891)));
        assert_eq!(h.min(), Some(Duration::ZERO));
        // The quantile never strays outside the recorded range.
        assert_eq!(h.quantile(0.0), Some(Duration::ZERO));
        assert!(h.quantile(1.0).unwrap() <= h.max().unwrap());
    }

    #[test]
    fn nan_and_out_of_range_q() {
        let mut h = LagHistogram::new();
        h.record(ms(1));
        h.record(ms(2));
        assert_eq!(h.quantile(f64::NAN), None);
        assert_eq!(h.quantile(-1.0), Some(ms(1)));
        assert_eq!(h.quantile(2.0), Some(ms(2)));
    }
}
