//! Totals over many sessions' [`Progress`], for metrics: what the ended ones counted
//! plus what the running ones count so far, read from their live counters at each
//! look, so that bytes moved advance while a session runs rather than at its end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hetch_proto::Summary;

use crate::Progress;

/// Running totals, never going back: a session's counters that start over for a new
/// attempt ([`Progress::begin_attempt`]) do not take them back.
#[derive(Debug, Default)]
pub struct Tally {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// What sessions that ended counted.
    ended: Summary,
    /// Sessions running, by a number of this tally's own.
    live: HashMap<u64, Live>,
    next: u64,
}

#[derive(Debug)]
struct Live {
    progress: Arc<Progress>,
    /// The most each counter has been seen at (what the totals already showed).
    seen: Summary,
}

/// A session counted by a [`Tally`] while it lives; its share stays in the tally's
/// totals when it is ended or dropped.
#[derive(Debug)]
pub struct Tracked {
    tally: Arc<Tally>,
    id: u64,
}

impl Tally {
    /// An empty tally.
    pub fn new() -> Arc<Tally> {
        Arc::default()
    }

    /// Counts `progress` into the totals from now on.
    pub fn track(self: &Arc<Self>, progress: Arc<Progress>) -> Tracked {
        let mut s = self.state.lock().expect("tally lock");
        let id = s.next;
        s.next += 1;
        let seen = progress.summary();
        s.live.insert(id, Live { progress, seen });
        Tracked {
            tally: self.clone(),
            id,
        }
    }

    /// The totals now: each at least what any earlier call returned.
    pub fn totals(&self) -> Summary {
        let mut s = self.state.lock().expect("tally lock");
        let mut sum = s.ended;
        for live in s.live.values_mut() {
            live.seen = most(live.seen, live.progress.summary());
            sum = add(sum, live.seen);
        }
        sum
    }

    /// Ends session `id`, counting at least `floor` for it.
    fn end(&self, id: u64, floor: Summary) {
        let mut s = self.state.lock().expect("tally lock");
        if let Some(live) = s.live.remove(&id) {
            let last = most(most(live.seen, live.progress.summary()), floor);
            s.ended = add(s.ended, last);
        }
    }
}

impl Tracked {
    /// Ends the session's tracking, counting at least `floor` for it: what it reports
    /// as done, where that is more than its live counters showed (they may have
    /// started over for a new attempt since they were last seen).
    pub fn end(self, floor: Summary) {
        self.tally.end(self.id, floor);
        // Drop finds nothing left to end.
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.tally.end(self.id, Summary::default());
    }
}

/// Each counter of `a` and `b`, the larger.
fn most(a: Summary, b: Summary) -> Summary {
    Summary {
        files: a.files.max(b.files),
        bytes: a.bytes.max(b.bytes),
        skipped: a.skipped.max(b.skipped),
        retried_blocks: a.retried_blocks.max(b.retried_blocks),
        failed: a.failed.max(b.failed),
        reverified: a.reverified.max(b.reverified),
        damaged_on_arrival: a.damaged_on_arrival.max(b.damaged_on_arrival),
        failed_read_back: a.failed_read_back.max(b.failed_read_back),
        repaired_blocks: a.repaired_blocks.max(b.repaired_blocks),
        patch_bytes: a.patch_bytes.max(b.patch_bytes),
        streams_rejoined: a.streams_rejoined.max(b.streams_rejoined),
    }
}

/// Each counter of `a` and `b`, added (saturating: totals of a process that runs for
/// years stay put rather than wrap).
fn add(a: Summary, b: Summary) -> Summary {
    Summary {
        files: a.files.saturating_add(b.files),
        bytes: a.bytes.saturating_add(b.bytes),
        skipped: a.skipped.saturating_add(b.skipped),
        retried_blocks: a.retried_blocks.saturating_add(b.retried_blocks),
        failed: a.failed.saturating_add(b.failed),
        reverified: a.reverified.saturating_add(b.reverified),
        damaged_on_arrival: a.damaged_on_arrival.saturating_add(b.damaged_on_arrival),
        failed_read_back: a.failed_read_back.saturating_add(b.failed_read_back),
        repaired_blocks: a.repaired_blocks.saturating_add(b.repaired_blocks),
        patch_bytes: a.patch_bytes.saturating_add(b.patch_bytes),
        streams_rejoined: a.streams_rejoined.saturating_add(b.streams_rejoined),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(p: &Progress, n: u64) {
        Progress::add(&p.bytes, n);
    }

    /// Live sessions count as they go; ended ones stay; a session whose counters start
    /// over for a new attempt takes nothing back; what a session reports at its end
    /// counts where it is more.
    #[test]
    fn totals_advance_live_and_never_go_back() {
        let tally = Tally::new();
        let (a, b) = (Arc::new(Progress::default()), Arc::new(Progress::default()));
        let ta = tally.track(a.clone());
        let tb = tally.track(b.clone());
        bytes(&a, 100);
        bytes(&b, 10);
        Progress::add(&a.files, 1);
        assert_eq!((tally.totals().bytes, tally.totals().files), (110, 1));
        // A's first attempt is lost: its counters start over.
        a.begin_attempt();
        assert_eq!(tally.totals().bytes, 110);
        bytes(&a, 30);
        assert_eq!(tally.totals().bytes, 110, "still below what was seen");
        drop(tb);
        assert_eq!(tally.totals().bytes, 110);
        bytes(&b, 1000); // after its end: not counted
        assert_eq!(tally.totals().bytes, 110);
        let reported = Summary {
            files: 3,
            bytes: 130,
            ..Summary::default()
        };
        ta.end(reported);
        let t = tally.totals();
        assert_eq!((t.bytes, t.files), (140, 3));
        assert!(tally.state.lock().unwrap().live.is_empty());
    }
}
