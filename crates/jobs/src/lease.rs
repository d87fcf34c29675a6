//! The life of one work unit under leases.
//!
//! A unit is *ready*, *leased* to one worker until a deadline, *done* or *failed*.
//! A worker that holds an unexpired lease may extend it (heartbeat) and finish the
//! unit; once the deadline passes, the lease is void: the unit goes back to ready
//! (another attempt) or fails after the last attempt, and a late word from the old
//! holder is refused. So at any moment at most one worker may act on a unit, and a
//! unit is done at most once. The database layer applies the same rules in one
//! conditional statement per transition; times are whatever clock it passes in
//! (milliseconds), never read here.

use serde::{Deserialize, Serialize};

/// Who holds a unit, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The worker.
    pub owner: String,
    /// The lease is void from this time on (milliseconds).
    pub until: u64,
}

/// Where a unit is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnitState {
    /// Waiting for a worker.
    Ready,
    /// A worker has it.
    Leased(Lease),
    /// Finished with success; final.
    Done,
    /// Out of attempts, with the last error; final.
    Failed(String),
}

/// Why a transition was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Only a ready unit can be claimed.
    NotReady,
    /// Another worker holds it (or nobody does).
    NotOwner,
    /// The lease ran out: the unit may already be another worker's.
    Expired,
}

/// A work unit's state and attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    /// Where it is.
    pub state: UnitState,
    /// Attempts that ended without success (failures and expired leases).
    pub attempts: u32,
    /// Attempts allowed before it fails for good (at least 1).
    pub max_attempts: u32,
}

impl Unit {
    /// A ready unit.
    pub fn new(max_attempts: u32) -> Unit {
        Unit {
            state: UnitState::Ready,
            attempts: 0,
            max_attempts: max_attempts.max(1),
        }
    }

    /// Whether it is done or failed.
    pub fn is_final(&self) -> bool {
        matches!(self.state, UnitState::Done | UnitState::Failed(_))
    }

    /// `owner` takes the unit until `now + ttl`. A lease that ran out is voided first.
    pub fn claim(&mut self, owner: &str, now: u64, ttl: u64) -> Result<(), Refused> {
        self.expire(now);
        if self.state != UnitState::Ready {
            return Err(Refused::NotReady);
        }
        self.state = UnitState::Leased(Lease {
            owner: owner.to_string(),
            until: now.saturating_add(ttl),
        });
        Ok(())
    }

    /// `owner` is still at it: its lease runs until `now + ttl`.
    pub fn heartbeat(&mut self, owner: &str, now: u64, ttl: u64) -> Result<(), Refused> {
        let lease = self.held_by(owner, now)?;
        lease.until = now.saturating_add(ttl);
        Ok(())
    }

    /// `owner` reports how the unit went: done, or another attempt (failed for good
    /// after the last).
    pub fn finish(
        &mut self,
        owner: &str,
        now: u64,
        outcome: Result<(), String>,
    ) -> Result<(), Refused> {
        self.held_by(owner, now)?;
        match outcome {
            Ok(()) => self.state = UnitState::Done,
            Err(e) => self.attempt_failed(e),
        }
        Ok(())
    }

    /// Voids a lease that ran out by `now` (the reaper's call); true if it did.
    pub fn expire(&mut self, now: u64) -> bool {
        match &self.state {
            UnitState::Leased(l) if now >= l.until => {
                let why = format!("lease of {} ran out", l.owner);
                self.attempt_failed(why);
                true
            }
            _ => false,
        }
    }

    /// The lease `owner` holds at `now`, if it does.
    fn held_by(&mut self, owner: &str, now: u64) -> Result<&mut Lease, Refused> {
        match &mut self.state {
            UnitState::Leased(l) if l.owner == owner => match now < l.until {
                true => Ok(l),
                false => Err(Refused::Expired),
            },
            _ => Err(Refused::NotOwner),
        }
    }

    fn attempt_failed(&mut self, why: String) {
        self.attempts += 1;
        self.state = match self.attempts >= self.max_attempts {
            true => UnitState::Failed(why),
            false => UnitState::Ready,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TTL: u64 = 30_000;

    #[derive(Debug, Clone)]
    enum Op {
        Claim(u8),
        Heartbeat(u8),
        Finish(u8, bool),
        Reap,
        /// The clock moves on.
        Wait(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..3).prop_map(Op::Claim),
            (0u8..3).prop_map(Op::Heartbeat),
            (0u8..3, any::<bool>()).prop_map(|(w, ok)| Op::Finish(w, ok)),
            Just(Op::Reap),
            (0u64..2 * TTL).prop_map(Op::Wait),
        ]
    }

    proptest! {
        /// Whatever workers and the clock do: no two workers ever hold unexpired
        /// grants at once, only the holder of an unexpired lease is heard, a final
        /// state never changes, done happens at most once, and attempts stay within
        /// the bound.
        #[test]
        fn one_holder_at_a_time_and_done_once(
            max in 1u32..4,
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let mut u = Unit::new(max);
            let mut now = 0u64;
            // What each worker was told it holds: until when.
            let mut granted: [Option<u64>; 3] = [None; 3];
            let mut done = 0;
            for op in ops {
                let before = u.clone();
                let name = |w: u8| format!("w{w}");
                match op {
                    Op::Claim(w) => {
                        if u.claim(&name(w), now, TTL).is_ok() {
                            for (other, g) in granted.iter().enumerate() {
                                prop_assert!(
                                    other == w as usize || g.is_none_or(|until| until <= now),
                                    "w{w} claimed while w{other} holds a live grant"
                                );
                            }
                            granted[w as usize] = Some(now + TTL);
                        }
                    }
                    Op::Heartbeat(w) => {
                        let r = u.heartbeat(&name(w), now, TTL);
                        let live = granted[w as usize].is_some_and(|until| now < until);
                        prop_assert_eq!(r.is_ok(), live && matches!(before.state, UnitState::Leased(ref l) if l.owner == name(w)));
                        if r.is_ok() {
                            granted[w as usize] = Some(now + TTL);
                        }
                    }
                    Op::Finish(w, ok) => {
                        let outcome = if ok { Ok(()) } else { Err("broke".to_string()) };
                        if u.finish(&name(w), now, outcome).is_ok() {
                            prop_assert!(granted[w as usize].is_some_and(|until| now < until));
                            granted[w as usize] = None;
                            if u.state == UnitState::Done {
                                done += 1;
                            }
                        }
                    }
                    Op::Reap => {
                        u.expire(now);
                    }
                    Op::Wait(d) => now += d,
                }
                if before.is_final() {
                    prop_assert_eq!(&u, &before, "a final state changed");
                }
                prop_assert!(done <= 1);
                prop_assert!(u.attempts <= u.max_attempts);
            }
        }
    }

    #[test]
    fn a_late_worker_is_refused_and_the_next_one_finishes() {
        let mut u = Unit::new(3);
        u.claim("a", 0, TTL).unwrap();
        u.heartbeat("a", TTL - 1, TTL).unwrap();
        assert_eq!(
            u.claim("b", TTL, TTL),
            Err(Refused::NotReady),
            "a's lease was extended"
        );
        // a goes quiet; its lease runs out and b takes the unit.
        u.claim("b", 2 * TTL, TTL).unwrap();
        assert_eq!(u.attempts, 1);
        assert_eq!(u.finish("a", 2 * TTL + 1, Ok(())), Err(Refused::NotOwner));
        u.finish("b", 2 * TTL + 2, Ok(())).unwrap();
        assert_eq!(u.state, UnitState::Done);
        // Failures use up attempts, then the unit fails for good with the last error.
        let mut u = Unit::new(2);
        u.claim("a", 0, TTL).unwrap();
        u.finish("a", 1, Err("disk full".into())).unwrap();
        u.claim("a", 2, TTL).unwrap();
        assert_eq!(u.finish("a", 2 + TTL, Ok(())), Err(Refused::Expired));
        assert!(u.expire(2 + TTL));
        assert!(matches!(u.state, UnitState::Failed(ref e) if e.contains("ran out")));
    }
}
