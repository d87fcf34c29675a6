//! Slowing down token guessing: after a few failed tokens from one address, that
//! address is refused for a while, whatever token it presents, and the wait doubles
//! with every further failure.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::limits::address_key;

/// Failed tokens an address may present before it has to wait.
pub const FREE_FAILURES: u32 = 5;
/// The first wait; each further failure doubles it.
pub const FIRST_WAIT: Duration = Duration::from_secs(30);
/// The longest wait.
pub const MAX_WAIT: Duration = Duration::from_secs(15 * 60);
/// An address's failures are forgotten this long after its last one.
const FORGET_AFTER: Duration = Duration::from_secs(60 * 60);
/// Addresses tracked at most; beyond, stale ones are dropped first, then new ones are
/// not tracked (memory stays bounded whatever the number of attackers).
const MAX_TRACKED: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    until: Option<Instant>,
}

/// Failed authentications per source address.
#[derive(Debug, Default)]
pub struct AuthThrottle {
    failures: Mutex<HashMap<IpAddr, Failures>>,
}

impl AuthThrottle {
    /// `Err(wait)` when `ip` must not try again before `wait` has passed.
    pub fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        let now = Instant::now();
        match self.lock().get(&address_key(ip)).and_then(|f| f.until) {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Records a failed token from `ip`.
    pub fn failed(&self, ip: IpAddr) {
        let now = Instant::now();
        let mut map = self.lock();
        if map.len() >= MAX_TRACKED {
            map.retain(|_, f| now.duration_since(f.last) < FORGET_AFTER);
        }
        let key = address_key(ip);
        if map.len() >= MAX_TRACKED && !map.contains_key(&key) {
            return;
        }
        let f = map.entry(key).or_insert(Failures {
            count: 0,
            last: now,
            until: None,
        });
        if now.duration_since(f.last) >= FORGET_AFTER {
            f.count = 0;
        }
        f.count += 1;
        f.last = now;
        if f.count >= FREE_FAILURES {
            let doublings = (f.count - FREE_FAILURES).min(16);
            f.until = Some(now + FIRST_WAIT.saturating_mul(1 << doublings).min(MAX_WAIT));
        }
    }

    /// Forgets `ip`'s failures after it authenticated.
    pub fn succeeded(&self, ip: IpAddr) {
        self.lock().remove(&address_key(ip));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Failures>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_after_free_failures_and_grows() {
        let t = AuthThrottle::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 1..FREE_FAILURES {
            t.failed(a);
            assert_eq!(t.check(a), Ok(()));
        }
        t.failed(a);
        let first = t.check(a).unwrap_err();
        assert!(first <= FIRST_WAIT, "{first:?}");
        assert_eq!(t.check(b), Ok(()), "other addresses are not affected");
        t.failed(a);
        assert!(t.check(a).unwrap_err() > FIRST_WAIT, "the wait doubles");
        for _ in 0..40 {
            t.failed(a);
        }
        assert!(t.check(a).unwrap_err() <= MAX_WAIT);
        t.succeeded(a);
        assert_eq!(t.check(a), Ok(()));
    }
}
