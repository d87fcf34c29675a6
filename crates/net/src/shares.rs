//! Fair shares of something a server has a fixed amount of (connections, sessions,
//! streams): [`Shares`] counts what each key (a caller, an address) holds and refuses
//! a key past its cap, so that one caller can never hold what everyone needs. The
//! [`Share`] it gives back returns what it holds when dropped.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

/// Counts what each key holds, up to a cap per key.
#[derive(Debug)]
pub struct Shares<K: Eq + Hash + Clone> {
    cap: usize,
    held: Mutex<HashMap<K, usize>>,
}

/// Why a share was refused: the key holds `held` of its `cap` already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// What the key holds now.
    pub held: usize,
    /// The most one key may hold.
    pub cap: usize,
}

impl<K: Eq + Hash + Clone> Shares<K> {
    /// Shares of at most `cap` per key.
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Shares {
            cap,
            held: Mutex::default(),
        })
    }

    /// The most one key may hold.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Takes `n` for `key`, or says how much it holds if that would pass the cap.
    pub fn take(self: &Arc<Self>, key: K, n: usize) -> Result<Share<K>, Full> {
        let mut held = self.lock();
        let now = held.get(&key).copied().unwrap_or(0);
        if now.saturating_add(n) > self.cap {
            return Err(Full {
                held: now,
                cap: self.cap,
            });
        }
        held.insert(key.clone(), now + n);
        Ok(Share {
            shares: self.clone(),
            key,
            n,
        })
    }

    /// What `key` holds now.
    pub fn held(&self, key: &K) -> usize {
        self.lock().get(key).copied().unwrap_or(0)
    }

    /// What all keys hold together.
    pub fn total(&self) -> usize {
        self.lock().values().sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, usize>> {
        // A plain map, consistent after every statement: usable after a panic.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What one key took; returned when dropped. Only keys holding something are kept,
/// so the map is bounded by what is held, not by how many keys ever came.
#[derive(Debug)]
pub struct Share<K: Eq + Hash + Clone> {
    shares: Arc<Shares<K>>,
    key: K,
    n: usize,
}

impl<K: Eq + Hash + Clone> Share<K> {
    /// The key this share counts against.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Eq + Hash + Clone> Drop for Share<K> {
    fn drop(&mut self) {
        let mut held = self.shares.lock();
        if let Some(now) = held.get_mut(&self.key) {
            *now = now.saturating_sub(self.n);
            if *now == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_refused_past_its_cap_while_others_get_theirs() {
        let s = Shares::new(3);
        let a = s.take("a", 2).unwrap();
        assert_eq!(s.take("a", 2).unwrap_err(), Full { held: 2, cap: 3 });
        let a1 = s.take("a", 1).unwrap();
        assert!(s.take("a", 1).is_err());
        let _b = s.take("b", 3).unwrap();
        assert_eq!((s.held(&"a"), s.total()), (3, 6));
        drop(a);
        assert_eq!(s.held(&"a"), 1);
        assert!(s.take("a", 2).is_ok());
        drop(a1);
        assert_eq!(s.held(&"a"), 0);
        assert!(s.take("a", usize::MAX).is_err(), "no overflow past the cap");
    }

    #[test]
    fn keys_holding_nothing_are_forgotten() {
        let s = Shares::new(1);
        for i in 0..1000 {
            drop(s.take(i, 1).unwrap());
        }
        assert_eq!(s.lock().len(), 0);
    }
}
