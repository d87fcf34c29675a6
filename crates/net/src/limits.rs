//! Limits on connections that have not authenticated yet, so that nobody without a
//! token can exhaust the server's file descriptors or memory.
//!
//! [`PreAuthGate::admit`] counts unauthenticated connections in total and per source
//! address; the [`PreAuthPermit`] it returns is dropped once the connection has
//! authenticated (or is closed), which frees its place. What is refused is logged
//! through a [`RateLimitedLog`], so refusals cannot flood the log either.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The limits, with their defaults in [`PreAuthLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreAuthLimits {
    /// Unauthenticated connections at once, from everyone.
    pub max_total: usize,
    /// Unauthenticated connections at once from one address (IPv6: one /64).
    pub max_per_address: usize,
    /// Time from accept to authentication (TLS handshake, preamble, hello, token).
    pub deadline: Duration,
    /// Largest frame accepted before authentication (a hello is a few hundred bytes).
    pub max_frame: usize,
}

impl Default for PreAuthLimits {
    fn default() -> Self {
        PreAuthLimits {
            max_total: 256,
            max_per_address: 32,
            deadline: Duration::from_secs(10),
            max_frame: 64 << 10,
        }
    }
}

/// Why a connection was refused at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// [`PreAuthLimits::max_total`] reached.
    Total(usize),
    /// [`PreAuthLimits::max_per_address`] reached for this address.
    PerAddress(IpAddr, usize),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Total(n) => write!(f, "{n} unauthenticated connections already open"),
            Refusal::PerAddress(ip, n) => {
                write!(f, "{n} unauthenticated connections already open from {ip}")
            }
        }
    }
}

/// The address that per-address limits count: IPv4 (also when mapped into IPv6) as
/// is, IPv6 by its /64, since one host usually has a whole /64 to pick from.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

/// Counts unauthenticated connections.
#[derive(Debug)]
pub struct PreAuthGate {
    limits: PreAuthLimits,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
}

impl PreAuthGate {
    /// A gate enforcing `limits`.
    pub fn new(limits: PreAuthLimits) -> Arc<Self> {
        Arc::new(PreAuthGate {
            limits,
            counts: Mutex::default(),
        })
    }

    /// The limits this gate enforces.
    pub fn limits(&self) -> &PreAuthLimits {
        &self.limits
    }

    /// Takes a place for a new connection from `ip`, or says why there is none.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<PreAuthPermit, Refusal> {
        let key = address_key(ip);
        let mut c = self.lock();
        if c.total >= self.limits.max_total {
            return Err(Refusal::Total(c.total));
        }
        let here = c.per_address.get(&key).copied().unwrap_or(0);
        if here >= self.limits.max_per_address {
            return Err(Refusal::PerAddress(key, here));
        }
        c.total += 1;
        *c.per_address.entry(key).or_default() += 1;
        Ok(PreAuthPermit {
            gate: self.clone(),
            key,
        })
    }

    /// Unauthenticated connections open now.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Plain counters, consistent after every statement: usable after a panic.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A place among the unauthenticated connections; dropping it frees the place.
#[derive(Debug)]
pub struct PreAuthPermit {
    gate: Arc<PreAuthGate>,
    key: IpAddr,
}

impl Drop for PreAuthPermit {
    fn drop(&mut self) {
        let mut c = self.gate.lock();
        c.total -= 1;
        if let Some(n) = c.per_address.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                c.per_address.remove(&self.key);
            }
        }
    }
}

/// Lets one line through per interval and counts the rest, which the next line
/// reports: a flood of refusals costs one line per interval.
#[derive(Debug)]
pub struct RateLimitedLog {
    interval: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl RateLimitedLog {
    /// At most one line per `interval`.
    pub fn new(interval: Duration) -> Self {
        RateLimitedLog {
            interval,
            state: Mutex::new((None, 0)),
        }
    }

    /// Notes one event described by `what`; returns the line to print, if one is due.
    pub fn note(&self, what: impl std::fmt::Display) -> Option<String> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let due =
            s.0.is_none_or(|last| now.duration_since(last) >= self.interval);
        if !due {
            s.1 += 1;
            return None;
        }
        let suppressed = std::mem::take(&mut s.1);
        s.0 = Some(now);
        Some(if suppressed == 0 {
            format!("{what}")
        } else {
            format!(
                "{what} (and {suppressed} more not logged in the last {} s)",
                self.interval.as_secs()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn gate(total: usize, per: usize) -> Arc<PreAuthGate> {
        PreAuthGate::new(PreAuthLimits {
            max_total: total,
            max_per_address: per,
            ..PreAuthLimits::default()
        })
    }

    #[test]
    fn per_address_limit_leaves_room_for_others() {
        let g = gate(10, 2);
        let a = [
            g.admit(ip("10.0.0.1")).unwrap(),
            g.admit(ip("10.0.0.1")).unwrap(),
        ];
        assert_eq!(
            g.admit(ip("10.0.0.1")).unwrap_err(),
            Refusal::PerAddress(ip("10.0.0.1"), 2)
        );
        // The same address mapped into IPv6 is the same address.
        assert!(g.admit(ip("::ffff:10.0.0.1")).is_err());
        let _b = g.admit(ip("10.0.0.2")).unwrap();
        drop(a);
        assert_eq!(g.open(), 1);
        assert!(g.admit(ip("10.0.0.1")).is_ok());
    }

    #[test]
    fn total_limit_and_release() {
        let g = gate(3, 3);
        let held: Vec<_> = (1..=3)
            .map(|i| g.admit(ip(&format!("10.0.0.{i}"))).unwrap())
            .collect();
        assert_eq!(g.admit(ip("10.0.0.9")).unwrap_err(), Refusal::Total(3));
        drop(held);
        assert_eq!(g.open(), 0);
        assert!(g.admit(ip("10.0.0.9")).is_ok());
    }

    #[test]
    fn ipv6_counts_by_slash_64() {
        let g = gate(10, 1);
        let _a = g.admit(ip("2001:db8:1:2::1")).unwrap();
        assert!(g.admit(ip("2001:db8:1:2:ffff::9")).is_err());
        assert!(g.admit(ip("2001:db8:1:3::1")).is_ok());
    }

    #[test]
    fn log_lets_one_line_through_per_interval() {
        let log = RateLimitedLog::new(Duration::from_secs(3600));
        assert_eq!(log.note("a").as_deref(), Some("a"));
        for _ in 0..1000 {
            assert_eq!(log.note("b"), None);
        }
        let log = RateLimitedLog::new(Duration::ZERO);
        assert_eq!(log.note("a").as_deref(), Some("a"));
        assert_eq!(log.note("b").as_deref(), Some("b"));
    }
}
