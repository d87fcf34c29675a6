//! A token bucket shared by all data streams of a session: `--rate-limit` as QoS.

use std::sync::Mutex;
use tokio::time::{Duration, Instant};

/// Caps the rate of bytes passed through [`RateLimiter::acquire`].
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A limiter for `rate` bytes per second, or `None` when `rate` is 0 (no limit).
    /// The bucket holds a tenth of a second of traffic, so short bursts stay smooth.
    pub fn new(rate: u64) -> Option<Self> {
        (rate > 0).then(|| {
            let rate = rate as f64;
            let burst = (rate / 10.0).max(64.0 * 1024.0);
            RateLimiter {
                rate,
                burst,
                state: Mutex::new((burst, Instant::now())),
            }
        })
    }

    /// Waits until `n` bytes may pass. Large requests go into debt and wait it off, so
    /// a block bigger than the bucket still passes at the set rate.
    pub async fn acquire(&self, n: usize) {
        let wait = {
            let mut s = self.state.lock().expect("rate lock");
            let now = Instant::now();
            let refill = now.duration_since(s.1).as_secs_f64() * self.rate;
            s.0 = (s.0 + refill).min(self.burst) - n as f64;
            s.1 = now;
            if s.0 < 0.0 {
                Duration::from_secs_f64(-s.0 / self.rate)
            } else {
                Duration::ZERO
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
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
    fn zero_means_unlimited() {
        assert!(RateLimiter::new(0).is_none());
    }
}
