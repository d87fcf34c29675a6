//! The login states already used, so that a login's callback works once even though
//! the login itself lives in the browser's cookie ([`super::login`]).
//!
//! What a stranger can make costs nothing here: starting a login keeps nothing on
//! the server, and a callback is only *claimed* while its code is exchanged (the
//! claim is dropped if the exchange fails, as a made-up code does). Only a login
//! the issuer completed is recorded as spent, until its cookie would have expired
//! anyway. So the set grows with real logins, not with requests.
//!
//! It is bounded all the same ([`MAX_SPENT`]), and a full set must neither block a
//! fresh login nor forget a spent one while its cookie still opens. It does neither:
//! it forgets the entry that expires first and raises a *floor* to that entry's
//! expiry, and a login whose cookie expires at or before the floor is refused. Every
//! cookie lives the same time, so what the floor refuses is only logins started
//! before one that was forgotten, which can then only be replays or logins left at
//! the issuer's page while [`MAX_SPENT`] others completed: those start again. A
//! login started since is never refused by it.

use std::collections::{BTreeSet, HashMap, HashSet};

/// Most spent states remembered (16 bytes of hash and an expiry each: about 5 MiB).
pub const MAX_SPENT: usize = 65_536;

/// The spent and claimed states.
#[derive(Debug)]
pub struct Spent {
    cap: usize,
    /// Spent states and when their cookies expire.
    expiry: HashMap<u128, u64>,
    /// The same, by expiry: the first is the next forgotten.
    order: BTreeSet<(u64, u128)>,
    /// States whose code is being exchanged now.
    claimed: HashSet<u128>,
    /// Cookies expiring at or before this may have been spent and forgotten.
    floor: u64,
}

impl Default for Spent {
    fn default() -> Self {
        Spent::with_cap(MAX_SPENT)
    }
}

/// The key a state is remembered by: a hash, as long as the state is not.
fn key(state: &str) -> u128 {
    let h = blake3::hash(state.as_bytes());
    u128::from_le_bytes(h.as_bytes()[..16].try_into().expect("16 bytes"))
}

impl Spent {
    /// A set remembering at most `cap` spent states.
    pub fn with_cap(cap: usize) -> Spent {
        Spent {
            cap: cap.max(1),
            expiry: HashMap::new(),
            order: BTreeSet::new(),
            claimed: HashSet::new(),
            floor: 0,
        }
    }

    /// Claims `state` (of a cookie expiring at `expires`) for an exchange of its
    /// code: `false` if it is spent, claimed, or may have been spent and forgotten.
    pub fn claim(&mut self, state: &str, expires: u64) -> bool {
        let k = key(state);
        if expires <= self.floor || self.expiry.contains_key(&k) {
            return false;
        }
        self.claimed.insert(k)
    }

    /// Lets go of a claim whose exchange failed: nothing was logged in with it.
    pub fn release(&mut self, state: &str) {
        self.claimed.remove(&key(state));
    }

    /// Records claimed `state` as spent until `expires`, forgetting what expired by
    /// `now` and, when full, the entry that expires first (raising the floor).
    pub fn spend(&mut self, state: &str, expires: u64, now: u64) {
        let k = key(state);
        self.claimed.remove(&k);
        while let Some(&(e, old)) = self.order.first() {
            if e > now && self.order.len() < self.cap {
                break;
            }
            self.order.pop_first();
            self.expiry.remove(&old);
            if e > now {
                self.floor = self.floor.max(e);
            }
        }
        if self.expiry.insert(k, expires).is_none() {
            self.order.insert((expires, k));
        }
    }

    /// How many states are remembered as spent.
    pub fn len(&self) -> usize {
        self.expiry.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.expiry.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_spent_once_and_a_failed_exchange_spends_nothing() {
        let mut s = Spent::default();
        assert!(s.claim("a", 100));
        assert!(
            !s.claim("a", 100),
            "claimed: a second callback waits for none"
        );
        s.release("a");
        assert!(s.claim("a", 100), "the exchange failed: nothing was spent");
        s.spend("a", 100, 10);
        assert!(!s.claim("a", 100), "spent");
        assert_eq!(s.len(), 1);
        // Once its cookie expired, the entry goes with the next spend.
        assert!(s.claim("b", 200));
        s.spend("b", 200, 150);
        assert_eq!(s.len(), 1);
    }

    /// Full: the entry expiring first is forgotten, and every cookie expiring no
    /// later than it is refused from then on (its replay among them), while logins
    /// started later are not.
    #[test]
    fn when_full_a_forgotten_state_stays_refused_and_later_logins_go_through() {
        let mut s = Spent::with_cap(3);
        for (state, expires) in [("a", 100), ("b", 101), ("c", 102)] {
            assert!(s.claim(state, expires));
            s.spend(state, expires, 0);
        }
        // A login started before c's and not yet back.
        let waiting = ("w", 102);
        assert!(s.claim("d", 103));
        s.spend("d", 103, 0);
        assert_eq!(s.len(), 3);
        assert!(!s.claim("a", 100), "a's replay, forgotten, is refused");
        assert!(s.claim(waiting.0, waiting.1), "above the floor of 100");
        s.release(waiting.0);
        for (state, expires) in [("e", 104), ("f", 105)] {
            assert!(s.claim(state, expires));
            s.spend(state, expires, 0);
        }
        for (state, expires) in [("a", 100), ("b", 101), ("c", 102), ("d", 103)] {
            assert!(!s.claim(state, expires), "{state}'s replay");
        }
        assert!(!s.claim(waiting.0, waiting.1), "started before c: again");
        assert!(s.claim("fresh", 106), "a login started since goes through");
    }
}
