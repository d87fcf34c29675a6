//! Each user's request rate: a token bucket per user, so that one user's loop cannot
//! take the database and the service's CPU from everyone else. Over it, a request is
//! answered 429 with `Retry-After`. The service's token (the operator and the
//! workers, whose heartbeats must never be held back) is not limited.
//!
//! Only users with a bucket that is not full are remembered (a full bucket is the same
//! as none), and at most [`MAX_TRACKED`] of them: past that, the least recently seen
//! are forgotten, which can only be generous to them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Most users whose buckets are remembered at once.
pub const MAX_TRACKED: usize = 16_384;

/// A user's rate: `per_second` sustained, bursts of `burst`. Zero `per_second`: no
/// limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRate {
    /// Requests a second, sustained.
    pub per_second: f64,
    /// Requests at once after a quiet spell.
    pub burst: f64,
}

impl Default for RequestRate {
    fn default() -> Self {
        RequestRate {
            per_second: 50.0,
            burst: 200.0,
        }
    }
}

/// The buckets of users seen lately.
#[derive(Debug)]
pub struct Rates {
    rate: RequestRate,
    started: Instant,
    /// Per user: tokens left, and when they were counted (seconds since `started`).
    buckets: Mutex<HashMap<String, (f64, f64)>>,
}

impl Rates {
    /// Buckets for `rate`.
    pub fn new(rate: RequestRate) -> Rates {
        Rates {
            rate,
            started: Instant::now(),
            buckets: Mutex::default(),
        }
    }

    /// Takes one request from `user`'s bucket, or says in how many whole seconds
    /// (at least 1) one will be there.
    pub fn take(&self, user: &str) -> Result<(), u64> {
        let now = self.started.elapsed().as_secs_f64();
        self.take_at(user, now)
    }

    fn take_at(&self, user: &str, now: f64) -> Result<(), u64> {
        let RequestRate { per_second, burst } = self.rate;
        if per_second <= 0.0 {
            return Ok(());
        }
        let burst = burst.max(1.0);
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if b.len() >= MAX_TRACKED && !b.contains_key(user) {
            forget_full_and_oldest(&mut b, self.rate, now);
        }
        // The user's name is copied only when first seen, not at every request.
        if !b.contains_key(user) {
            b.insert(user.to_string(), (burst, now));
        }
        let bucket = b.get_mut(user).expect("inserted above");
        let left = (bucket.0 + (now - bucket.1).max(0.0) * per_second).min(burst);
        let took = left >= 1.0;
        *bucket = (if took { left - 1.0 } else { left }, now);
        match took {
            true => Ok(()),
            false => Err(((1.0 - left) / per_second).ceil().max(1.0) as u64),
        }
    }

    /// Users remembered now.
    pub fn tracked(&self) -> usize {
        self.buckets.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Drops the buckets that have filled up again, and if that is not enough, the half
/// seen longest ago.
fn forget_full_and_oldest(b: &mut HashMap<String, (f64, f64)>, rate: RequestRate, now: f64) {
    b.retain(|_, (left, at)| *left + (now - *at) * rate.per_second < rate.burst);
    if b.len() >= MAX_TRACKED {
        let mut seen: Vec<f64> = b.values().map(|(_, at)| *at).collect();
        let mid = seen.len() / 2;
        let (_, cut, _) = seen.select_nth_unstable_by(mid, f64::total_cmp);
        let cut = *cut;
        b.retain(|_, (_, at)| *at > cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(per_second: f64, burst: f64) -> Rates {
        Rates::new(RequestRate { per_second, burst })
    }

    #[test]
    fn a_burst_then_the_sustained_rate_and_others_untouched() {
        let r = rates(2.0, 3.0);
        for _ in 0..3 {
            assert_eq!(r.take_at("a", 0.0), Ok(()));
        }
        assert_eq!(r.take_at("a", 0.0), Err(1));
        assert_eq!(r.take_at("b", 0.0), Ok(()), "another user has their own");
        // Half a second brings one back at 2 a second.
        assert_eq!(r.take_at("a", 0.5), Ok(()));
        assert!(r.take_at("a", 0.5).is_err());
        // A long quiet spell brings the burst back, never more.
        for _ in 0..3 {
            assert_eq!(r.take_at("a", 100.0), Ok(()));
        }
        assert!(r.take_at("a", 100.0).is_err());
    }

    #[test]
    fn retry_after_says_when_one_is_back() {
        let r = rates(0.1, 1.0);
        assert_eq!(r.take_at("a", 0.0), Ok(()));
        assert_eq!(r.take_at("a", 0.0), Err(10));
        assert_eq!(r.take_at("a", 5.0), Err(5));
        assert_eq!(r.take_at("a", 10.0), Ok(()));
    }

    #[test]
    fn zero_is_no_limit() {
        let r = rates(0.0, 0.0);
        for _ in 0..10_000 {
            assert_eq!(r.take_at("a", 0.0), Ok(()));
        }
        assert_eq!(r.tracked(), 0);
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let r = rates(1.0, 2.0);
        for i in 0..(MAX_TRACKED * 3) {
            r.take_at(&format!("u{i}"), i as f64 / 1e6).unwrap();
        }
        assert!(r.tracked() <= MAX_TRACKED);
        // Recently seen users are kept: the last one still has one token used.
        let last = format!("u{}", MAX_TRACKED * 3 - 1);
        assert_eq!(r.take_at(&last, 0.05), Ok(()));
        assert!(r.take_at(&last, 0.05).is_err());
    }
}
