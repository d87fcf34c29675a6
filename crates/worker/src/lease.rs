//! Keeping the leases of the units a worker runs, as a plain value fed the time.
//!
//! The service gives a unit to one worker under a lease of some length, extended by
//! each heartbeat it takes; once a lease runs out, the unit may go to another worker.
//! Two writers of one file would trample it, so a worker must stop a unit before the
//! service may hand it on, even when it cannot reach the service at all.
//!
//! The rule: a lease surely holds until the time its claim or the last heartbeat that
//! extended it was *sent* (the service extended it when the request arrived, later),
//! plus its length; a unit is stopped a quarter of a lease before that, which leaves
//! its run time to stop between blocks. A unit the service says it no longer holds
//! for this worker (the lease ran out, the job was cancelled) is stopped at once.
//!
//! Times are milliseconds of the worker's own monotonic clock, passed in; nothing
//! here reads a clock, so the property tests below drive it against the service's
//! lease model with arbitrary delays and losses.

use std::collections::BTreeMap;

/// Milliseconds of the worker's monotonic clock.
pub type Millis = u64;

/// The shortest and the longest lease a worker accepts from a service (a day).
pub const LEASE_BOUNDS: (Millis, Millis) = (100, 86_400_000);

/// Heartbeats go this often at most, and three times per the shortest lease held.
pub const BEAT_EVERY: Millis = 3_000;

/// Why a unit was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Its lease could not be extended and was about to run out.
    Fenced,
    /// The service no longer holds it for this worker.
    Released,
}

/// One unit's lease, as this worker knows it.
#[derive(Debug, Clone)]
struct Held {
    /// The lease's length.
    lease: Millis,
    /// Until when the lease surely holds (see the module documentation).
    deadline: Millis,
    stopped: Option<Stopped>,
}

/// The leases of the units a worker runs, by a key of its own for each claim.
#[derive(Debug, Clone)]
pub struct Leases<K> {
    held: BTreeMap<K, Held>,
    last_beat: Millis,
}

impl<K: Ord + Clone> Default for Leases<K> {
    fn default() -> Self {
        Leases {
            held: BTreeMap::new(),
            last_beat: 0,
        }
    }
}

impl<K: Ord + Clone> Leases<K> {
    /// Unit `key` was given to this worker in answer to a claim sent at `sent`, for a
    /// lease of `lease` (bounded to [`LEASE_BOUNDS`], whatever the service says);
    /// returns the lease's length as kept.
    pub fn claimed(&mut self, key: K, sent: Millis, lease: Millis) -> Millis {
        let lease = lease.clamp(LEASE_BOUNDS.0, LEASE_BOUNDS.1);
        let held = Held {
            lease,
            deadline: sent.saturating_add(lease),
            stopped: None,
        };
        self.held.insert(key, held);
        lease
    }

    /// Unit `key` ended here (its report is the service's business now).
    pub fn ended(&mut self, key: &K) {
        self.held.remove(key);
    }

    /// Why unit `key` was stopped, if it was.
    pub fn stopped(&self, key: &K) -> Option<Stopped> {
        self.held.get(key).and_then(|h| h.stopped)
    }

    /// The units still running (not stopped), in key order: what a heartbeat keeps.
    pub fn running(&self) -> impl Iterator<Item = &K> {
        self.held
            .iter()
            .filter(|(_, h)| h.stopped.is_none())
            .map(|(k, _)| k)
    }

    /// Whether a heartbeat is due at `now`: units run, and the last one went a third
    /// of the shortest lease ago (at most [`BEAT_EVERY`]).
    pub fn beat_due(&self, now: Millis) -> bool {
        let every = self
            .held
            .values()
            .map(|h| h.lease / 3)
            .min()
            .map_or(BEAT_EVERY, |e| e.min(BEAT_EVERY));
        self.running().next().is_some() && now.saturating_sub(self.last_beat) >= every
    }

    /// A heartbeat goes out at `now`.
    pub fn beat_sent(&mut self, now: Millis) {
        self.last_beat = now;
    }

    /// The heartbeat sent at `sent` was answered: the units for which `held` is
    /// true hold their leases until `sent` plus their length; the others are no
    /// longer this worker's, and are returned to be stopped now.
    pub fn answered(&mut self, sent: Millis, held: impl Fn(&K) -> bool) -> Vec<K> {
        let mut stop = Vec::new();
        for (k, h) in self.held.iter_mut().filter(|(_, h)| h.stopped.is_none()) {
            if held(k) {
                // An answer overtaken by a later one does not shorten the lease.
                h.deadline = h.deadline.max(sent.saturating_add(h.lease));
            } else {
                h.stopped = Some(Stopped::Released);
                stop.push(k.clone());
            }
        }
        stop
    }

    /// The units to stop at `now` because their leases could not be extended and
    /// run out within a quarter of a lease (each returned once).
    pub fn fence(&mut self, now: Millis) -> Vec<K> {
        let mut stop = Vec::new();
        for (k, h) in self.held.iter_mut().filter(|(_, h)| h.stopped.is_none()) {
            if now.saturating_add(h.lease / 4) >= h.deadline {
                h.stopped = Some(Stopped::Fenced);
                stop.push(k.clone());
            }
        }
        stop
    }

    /// How long the worker may wait (for the service, or for work) before it must
    /// call [`Leases::fence`] again: until the first running unit is to be stopped,
    /// half a second at least, a minute when nothing runs.
    pub fn until_fence(&self, now: Millis) -> Millis {
        self.held
            .values()
            .filter(|h| h.stopped.is_none())
            .map(|h| (h.deadline - h.lease / 4).saturating_sub(now))
            .min()
            .unwrap_or(60_000)
            .max(500)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetch_jobs::{Unit, UnitState};
    use proptest::prelude::*;

    /// What happens between one worker, the network and the service.
    #[derive(Debug, Clone)]
    enum Step {
        /// Time passes (bounded by when the worker's loop looks again).
        Wait(Millis),
        /// The worker sends a heartbeat, which arrives after the first delay (or is
        /// lost), and whose answer comes back after the second (or is lost).
        Beat(Option<Millis>, Option<Millis>),
        /// The service's reaper runs.
        Reap,
        /// Another worker asks for the unit.
        OtherClaims,
    }

    fn step() -> impl Strategy<Value = Step> {
        let delay = prop_oneof![3 => (0u64..3_000).prop_map(Some), 1 => Just(None)];
        prop_oneof![
            4 => (0u64..5_000).prop_map(Step::Wait),
            4 => (delay.clone(), delay).prop_map(|(a, b)| Step::Beat(a, b)),
            1 => Just(Step::Reap),
            2 => Just(Step::OtherClaims),
        ]
    }

    /// Plays `steps` with one unit, claimed by worker "a" (its claim arrived after
    /// `claim_delay`); after every step, checks that while "a" may write (its unit
    /// not stopped), the service holds the unit for "a" a quarter lease longer at
    /// least, so no other worker can have it, even after "a" takes that long to stop.
    fn replay(lease: Millis, claim_delay: Millis, steps: &[Step]) -> Result<(), String> {
        let mut unit = Unit::new(3);
        let mut now: Millis = 1_000;
        let sent = now;
        now += claim_delay;
        unit.claim("a", now, lease).map_err(|e| format!("{e:?}"))?;
        let mut leases = Leases::default();
        let lease = leases.claimed(1u8, sent, lease);
        // Answers on their way back: (arrival, sent, held).
        let mut answers: Vec<(Millis, Millis, bool)> = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            match *s {
                Step::Wait(d) => {
                    // The loop looks again by `until_fence` at the latest.
                    let next = now + d.min(leases.until_fence(now));
                    // Answers that arrive meanwhile, in order.
                    answers.sort();
                    while let Some(&(at, sent, held)) = answers.first().filter(|a| a.0 <= next) {
                        answers.remove(0);
                        now = now.max(at);
                        leases.answered(sent, |_| held);
                        leases.fence(now);
                    }
                    now = next;
                }
                Step::Beat(there, back) => {
                    leases.beat_sent(now);
                    if let Some(there) = there {
                        let held = unit.heartbeat("a", now + there, lease).is_ok();
                        if let Some(back) = back {
                            answers.push((now + there + back, now, held));
                        }
                    }
                }
                Step::Reap => {
                    unit.expire(now);
                }
                Step::OtherClaims => {
                    let _ = unit.claim("b", now, lease);
                }
            }
            leases.fence(now);
            if leases.running().next().is_some() {
                let safe = match &unit.state {
                    UnitState::Leased(l) => l.owner == "a" && l.until >= now + lease / 4,
                    _ => false,
                };
                if !safe {
                    return Err(format!(
                        "step {i} ({s:?}) at {now}: a runs, service has {:?}",
                        unit.state
                    ));
                }
            }
        }
        Ok(())
    }

    proptest! {
        /// Whatever the delays and losses, a worker never runs a unit the service may
        /// already have handed to another worker.
        #[test]
        fn a_worker_never_writes_after_the_service_may_hand_its_unit_on(
            lease in 100u64..20_000,
            claim_delay in 0u64..3_000,
            steps in proptest::collection::vec(step(), 0..80),
        ) {
            prop_assert_eq!(replay(lease, claim_delay, &steps), Ok(()));
        }
    }

    #[test]
    fn fencing_stops_a_unit_a_quarter_lease_before_its_deadline_once() {
        let mut l = Leases::default();
        assert_eq!(l.claimed("u", 1_000, 8_000), 8_000);
        assert_eq!(l.until_fence(1_000), 6_000);
        assert!(l.fence(6_999).is_empty());
        assert_eq!(l.fence(7_000), vec!["u"]);
        assert!(l.fence(7_001).is_empty(), "said once");
        assert_eq!(l.stopped(&"u"), Some(Stopped::Fenced));
        assert_eq!(l.until_fence(7_000), 60_000, "nothing runs");
    }

    #[test]
    fn heartbeats_extend_from_when_they_were_sent_and_release_what_is_not_held() {
        let mut l = Leases::default();
        l.claimed(1, 0, 4_000);
        l.claimed(2, 0, 4_000);
        assert!(l.beat_due(1_333), "a third of the lease");
        assert!(!l.beat_due(1_332));
        l.beat_sent(2_000);
        assert!(!l.beat_due(2_500));
        assert_eq!(l.answered(2_000, |k| *k == 1), vec![2]);
        assert_eq!(l.stopped(&2), Some(Stopped::Released));
        // Unit 1 holds until 2,000 + 4,000: fenced from 5,000 on.
        assert!(l.fence(4_999).is_empty());
        // An older answer arriving late does not shorten the lease.
        l.answered(1_000, |_| true);
        assert_eq!(l.fence(5_000), vec![1]);
        // Absurd leases from a service are bounded.
        assert_eq!(l.claimed(3, 0, 0), LEASE_BOUNDS.0);
        assert_eq!(l.claimed(4, 0, u64::MAX), LEASE_BOUNDS.1);
        l.ended(&4);
        assert_eq!(l.running().copied().collect::<Vec<_>>(), vec![3]);
    }
}
