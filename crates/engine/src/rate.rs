//! A token bucket shared by all data streams of a session: `--rate-limit` as QoS.

use std::sync::Mutex;
use tokio::time::{Duration, Instant};

/// Caps the rate of bytes passed through [`RateLimiter::acquire`]. The rate can be
/// changed while transfers use it ([`RateLimiter::set_rate`]): a transfer service
/// worker's unit gets its share of its job's rate, which changes as other units of
/// the job start and end.
#[derive(Debug)]
pub struct RateLimiter {
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Bytes per second; 0 for none.
    rate: f64,
    /// Most bytes saved up.
    burst: f64,
    /// Bytes that may pass now (negative: debt).
    level: f64,
    /// When `level` was computed.
    at: Instant,
}

impl Bucket {
    fn new(rate: u64) -> Bucket {
        let rate = rate as f64;
        // The bucket holds a tenth of a second of traffic, so short bursts stay smooth.
        let burst = (rate / 10.0).max(64.0 * 1024.0);
        Bucket {
            rate,
            burst,
            level: burst,
            at: Instant::now(),
        }
    }
}

impl RateLimiter {
    /// A limiter for `rate` bytes per second, or `None` when `rate` is 0 (no limit).
    pub fn new(rate: u64) -> Option<Self> {
        (rate > 0).then(|| RateLimiter::adjustable(rate))
    }

    /// A limiter for `rate` bytes per second (0: none, until [`RateLimiter::set_rate`]
    /// sets one).
    pub fn adjustable(rate: u64) -> Self {
        RateLimiter {
            state: Mutex::new(Bucket::new(rate)),
        }
    }

    /// Bytes per second now (0: none).
    pub fn rate(&self) -> u64 {
        self.state.lock().expect("rate lock").rate as u64
    }

    /// From now on, `rate` bytes per second (0: none).
    pub fn set_rate(&self, rate: u64) {
        let mut b = self.state.lock().expect("rate lock");
        if b.rate != rate as f64 {
            // What the old rate refilled until now is counted at the old rate.
            let now = Instant::now();
            let refill = now.duration_since(b.at).as_secs_f64() * b.rate;
            let fresh = Bucket::new(rate);
            b.level = (b.level + refill).min(fresh.burst);
            (b.rate, b.burst, b.at) = (fresh.rate, fresh.burst, now);
        }
    }

    /// Takes `n` bytes from the bucket; returns how long to wait before they pass.
    fn reserve(&self, n: usize) -> Duration {
        let mut b = self.state.lock().expect("rate lock");
        if b.rate <= 0.0 {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let refill = now.duration_since(b.at).as_secs_f64() * b.rate;
        b.level = (b.level + refill).min(b.burst) - n as f64;
        b.at = now;
        match b.level < 0.0 {
            true => Duration::from_secs_f64(-b.level / b.rate),
            false => Duration::ZERO,
        }
    }

    /// Waits until `n` bytes may pass. Large requests go into debt and wait it off, so
    /// a block bigger than the bucket still passes at the set rate.
    pub async fn acquire(&self, n: usize) {
        let wait = self.reserve(n);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// [`RateLimiter::acquire`] for a blocking thread, waking every tenth of a second
    /// to ask `stopped`: false (the bytes not to be sent) once it says so, however
    /// long the wait was to be.
    pub fn acquire_blocking_unless(&self, n: usize, stopped: impl Fn() -> bool) -> bool {
        let until = std::time::Instant::now() + self.reserve(n);
        loop {
            if stopped() {
                return false;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn long_run_rate_matches_the_limit() {
        // Virtual time: the test measures the limiter's arithmetic, not the machine.
        let rl = RateLimiter::new(1_000_000).unwrap();
        let start = Instant::now();
        for _ in 0..100 {
            rl.acquire(100_000).await;
        }
        let secs = start.elapsed().as_secs_f64();
        // 10 MB at 1 MB/s, less the initial bucket of 0.1 s.
        assert!((9.8..=10.1).contains(&secs), "took {secs} virtual seconds");
    }

    #[test]
    fn a_blocking_wait_ends_when_asked_to_stop() {
        let rl = RateLimiter::adjustable(1);
        // A day's wait at 1 byte/s, given up at the first look.
        assert!(!rl.acquire_blocking_unless(100_000, || true));
        let looks = std::sync::atomic::AtomicU32::new(0);
        let stop_at_third = || looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 2;
        assert!(!rl.acquire_blocking_unless(100_000, stop_at_third));
        assert!(RateLimiter::adjustable(0).acquire_blocking_unless(1 << 30, || false));
    }

    #[test]
    fn zero_means_unlimited() {
        assert!(RateLimiter::new(0).is_none());
        assert!(RateLimiter::adjustable(0).reserve(1 << 30).is_zero());
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_rate_applies_to_what_follows() {
        let rl = RateLimiter::adjustable(0);
        let start = Instant::now();
        for _ in 0..10 {
            rl.acquire(1_000_000).await; // no limit yet
        }
        assert_eq!(start.elapsed().as_secs_f64(), 0.0);
        rl.set_rate(2_000_000);
        let start = Instant::now();
        for _ in 0..20 {
            rl.acquire(100_000).await;
        }
        let secs = start.elapsed().as_secs_f64();
        // 2 MB at 2 MB/s, less the bucket of 0.2 MB saved up.
        assert!((0.85..=1.05).contains(&secs), "took {secs} virtual seconds");
        rl.set_rate(500_000);
        let start = Instant::now();
        for _ in 0..10 {
            rl.acquire(100_000).await;
        }
        let secs = start.elapsed().as_secs_f64();
        assert!((1.9..=2.1).contains(&secs), "took {secs} virtual seconds");
    }
}
