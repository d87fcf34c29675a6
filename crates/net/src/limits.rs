//! Limits on connections that have not authenticated yet, so that nobody without a
//! token can exhaust the server's file descriptors or memory.
//!
//! [`PreAuthGate::admit`] counts unauthenticated connections in total and per source
//! address; the [`PreAuthPermit`] it returns is dropped once the connection has
//! authenticated (or is closed), which frees its place. What is refused is logged
//! through a [`RateLimitedLog`], so refusals cannot flood the log either.
//!
//! A newcomer is refused only when its own address is over its cap. When all places
//! are taken, the oldest place of the address holding the most is taken back for it
//! (the early drop of OpenSSH's `MaxStartups`, made deterministic): a flood from many
//! addresses keeps recycling its own places, while a client that authenticates within
//! milliseconds always gets in, since it is never the oldest of the busiest address.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

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
    /// [`PreAuthLimits::max_total`] is zero: nothing is let in.
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

/// A newcomer let in, and the address whose oldest unauthenticated connection was
/// taken back to make room for it, if one was.
#[derive(Debug)]
pub struct Admitted {
    /// The newcomer's place.
    pub permit: PreAuthPermit,
    /// The address (per-address key) whose oldest place went to the newcomer.
    pub displaced: Option<IpAddr>,
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
    /// Places taken back for newcomers, since start.
    displaced: AtomicU64,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Each address's places, oldest first.
    per_address: HashMap<IpAddr, VecDeque<Arc<Place>>>,
    next_id: u64,
}

/// One unauthenticated connection's place, as the gate and its permit share it.
#[derive(Debug)]
struct Place {
    id: u64,
    /// Set when the gate took the place back; its connection must close.
    displaced: AtomicBool,
    wake: Notify,
}

impl PreAuthGate {
    /// A gate enforcing `limits`.
    pub fn new(limits: PreAuthLimits) -> Arc<Self> {
        Arc::new(PreAuthGate {
            limits,
            counts: Mutex::default(),
            displaced: AtomicU64::new(0),
        })
    }

    /// The limits this gate enforces.
    pub fn limits(&self) -> &PreAuthLimits {
        &self.limits
    }

    /// Takes a place for a new connection from `ip`, or says why there is none. When
    /// every place is taken, the oldest place of the address holding the most is
    /// taken back for the newcomer ([`PreAuthPermit::displaced`] wakes its holder).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, Refusal> {
        let key = address_key(ip);
        let mut c = self.lock();
        let here = c.per_address.get(&key).map_or(0, VecDeque::len);
        if here >= self.limits.max_per_address {
            return Err(Refusal::PerAddress(key, here));
        }
        let mut displaced = None;
        if c.total >= self.limits.max_total {
            displaced = c.take_back_oldest_of_busiest();
            if displaced.is_none() {
                return Err(Refusal::Total(c.total));
            }
            self.displaced.fetch_add(1, Ordering::Relaxed);
        }
        c.next_id += 1;
        let place = Arc::new(Place {
            id: c.next_id,
            displaced: AtomicBool::new(false),
            wake: Notify::new(),
        });
        c.total += 1;
        c.per_address
            .entry(key)
            .or_default()
            .push_back(place.clone());
        let permit = PreAuthPermit {
            gate: self.clone(),
            key,
            place,
        };
        Ok(Admitted { permit, displaced })
    }

    /// Unauthenticated connections open now.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    /// Places taken back for newcomers since the gate was made.
    pub fn displaced(&self) -> u64 {
        self.displaced.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Plain counters, consistent after every statement: usable after a panic.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Counts {
    /// Frees the oldest place of the address holding the most (the first such address
    /// found on a tie), marks it taken back and wakes its holder; returns the address.
    fn take_back_oldest_of_busiest(&mut self) -> Option<IpAddr> {
        let (&key, _) = self.per_address.iter().max_by_key(|(_, q)| q.len())?;
        let queue = self.per_address.get_mut(&key)?;
        let place = queue.pop_front()?;
        if queue.is_empty() {
            self.per_address.remove(&key);
        }
        self.total -= 1;
        place.displaced.store(true, Ordering::Release);
        place.wake.notify_one();
        Some(key)
    }
}

/// A place among the unauthenticated connections; dropping it frees the place.
#[derive(Debug)]
pub struct PreAuthPermit {
    gate: Arc<PreAuthGate>,
    key: IpAddr,
    place: Arc<Place>,
}

impl PreAuthPermit {
    /// Resolves once the gate has taken this place back for a newcomer: the
    /// connection holding it must then close. Never resolves otherwise.
    pub async fn displaced(&self) {
        self.on_displaced().await
    }

    /// [`PreAuthPermit::displaced`] as a future of its own, that needs no borrow of
    /// the permit (which its holder may drop meanwhile).
    pub fn on_displaced(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let place = self.place.clone();
        async move {
            if place.displaced.load(Ordering::Acquire) {
                return;
            }
            // The flag is set before the wake-up, and notify_one keeps a wake-up for
            // a waiter that comes later: none is missed.
            place.wake.notified().await
        }
    }

    /// Whether the gate has taken this place back.
    pub fn is_displaced(&self) -> bool {
        self.place.displaced.load(Ordering::Acquire)
    }
}

impl Drop for PreAuthPermit {
    fn drop(&mut self) {
        let mut c = self.gate.lock();
        let Some(queue) = c.per_address.get_mut(&self.key) else {
            return; // taken back, and its address has no other place
        };
        // A place taken back is no longer in its queue: nothing to free.
        let Some(at) = queue.iter().position(|p| p.id == self.place.id) else {
            return;
        };
        queue.remove(at);
        if queue.is_empty() {
            c.per_address.remove(&self.key);
        }
        c.total -= 1;
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

    fn admit(g: &Arc<PreAuthGate>, addr: &str) -> PreAuthPermit {
        let a = g.admit(ip(addr)).unwrap();
        assert_eq!(a.displaced, None, "{addr} displaced a place");
        a.permit
    }

    #[test]
    fn per_address_limit_leaves_room_for_others() {
        let g = gate(10, 2);
        let a = [admit(&g, "10.0.0.1"), admit(&g, "10.0.0.1")];
        assert_eq!(
            g.admit(ip("10.0.0.1")).unwrap_err(),
            Refusal::PerAddress(ip("10.0.0.1"), 2)
        );
        // The same address mapped into IPv6 is the same address.
        assert!(g.admit(ip("::ffff:10.0.0.1")).is_err());
        let _b = admit(&g, "10.0.0.2");
        drop(a);
        assert_eq!(g.open(), 1);
        assert!(g.admit(ip("10.0.0.1")).is_ok());
    }

    #[test]
    fn a_full_gate_takes_back_the_oldest_place_of_the_busiest_address() {
        let g = gate(4, 3);
        let first = admit(&g, "10.0.0.1");
        let second = admit(&g, "10.0.0.1");
        let other = admit(&g, "10.0.0.2");
        let third = admit(&g, "10.0.0.1");
        // Full: a newcomer from a fifth address displaces 10.0.0.1's oldest.
        let newcomer = g.admit(ip("10.0.0.9")).unwrap();
        assert_eq!(newcomer.displaced, Some(ip("10.0.0.1")));
        assert!(first.is_displaced());
        assert!(!second.is_displaced() && !third.is_displaced() && !other.is_displaced());
        assert_eq!((g.open(), g.displaced()), (4, 1));
        // The displaced permit's drop frees nothing more.
        drop(first);
        assert_eq!(g.open(), 4);
        // Next in line is 10.0.0.1's second-oldest, never the newcomer's only place.
        let again = g.admit(ip("10.0.0.8")).unwrap();
        assert_eq!(again.displaced, Some(ip("10.0.0.1")));
        assert!(second.is_displaced() && !newcomer.permit.is_displaced());
        drop((second, third, other, newcomer, again));
        assert_eq!(g.open(), 0);
    }

    #[tokio::test]
    async fn a_displaced_permit_wakes_its_holder() {
        let g = gate(1, 1);
        let held = admit(&g, "10.0.0.1");
        let waiter = tokio::spawn(async move {
            held.displaced().await;
            held
        });
        tokio::task::yield_now().await;
        let _new = g.admit(ip("10.0.0.2")).unwrap();
        assert!(waiter.await.unwrap().is_displaced());
        // A permit displaced before anyone waits still resolves at once.
        let late = gate(1, 1);
        let first = admit(&late, "10.0.0.1");
        let _new = late.admit(ip("10.0.0.2")).unwrap();
        first.displaced().await;
    }

    #[test]
    fn a_gate_of_no_places_refuses() {
        let g = gate(0, 3);
        assert_eq!(g.admit(ip("10.0.0.9")).unwrap_err(), Refusal::Total(0));
    }

    #[test]
    fn ipv6_counts_by_slash_64() {
        let g = gate(10, 1);
        let _a = admit(&g, "2001:db8:1:2::1");
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
