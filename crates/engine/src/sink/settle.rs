//! When a receiving session may end, as a state machine without I/O.
//!
//! The summary (`Finished`) is the sink's last word: the source closes once it has
//! it, so it must not overtake any file's report. A file counts as pending from its
//! plan until its `FileDone` is *queued* (not merely decided: a report decided on one
//! thread and queued on another could otherwise follow the summary). The sequential
//! schedule also holds written files here until every pending file is written.
//!
//! The tasks feed events in (`planned`, `ended`, `reported`, `written`,
//! `end_of_entries`) under one lock and act on what comes out (files to check now,
//! whether the summary may go).

use std::collections::HashSet;

/// Files a sequential schedule lets pile up before it checks them (a bound on memory
/// and on the source's window of unfinished entries, which is larger).
const SEQUENTIAL_BATCH: u64 = 8192;

/// How far a receiving session is from its end.
#[derive(Debug, Default)]
pub(crate) struct Settlement {
    /// Files planned for receiving whose report is not queued yet.
    pending: u64,
    /// Files that ended (finished or failed) whose report is not queued yet.
    ending: HashSet<u64>,
    /// The source announced everything.
    end_of_entries: bool,
    /// Sequential schedule: files written completely, held for their check.
    deferred: Vec<u64>,
    /// The summary went out.
    finished: bool,
}

impl Settlement {
    /// A file is to be received.
    pub fn planned(&mut self) {
        self.pending += 1;
    }

    /// The source announced everything; returns the held files to check now.
    pub fn end_of_entries(&mut self) -> Vec<u64> {
        self.end_of_entries = true;
        self.release()
    }

    /// Whether the source announced everything (entries after that are a protocol
    /// error).
    pub fn entries_over(&self) -> bool {
        self.end_of_entries
    }

    /// File `id` ended; it stays pending until its report is queued.
    pub fn ended(&mut self, id: u64) {
        self.ending.insert(id);
    }

    /// The report of file `id` is queued: it settles if it had ended (a report of a
    /// file that never ended here, or a second one, settles nothing). Returns the held
    /// files to check now.
    pub fn reported(&mut self, id: u64) -> Vec<u64> {
        if !self.ending.remove(&id) {
            return Vec::new();
        }
        self.pending = self.pending.saturating_sub(1);
        self.release()
    }

    /// Sequential schedule: file `id` is written completely; returns the held files to
    /// check now (it among them once every pending file is written).
    pub fn written(&mut self, id: u64) -> Vec<u64> {
        self.deferred.push(id);
        self.release()
    }

    /// Whether the summary may go: everything announced, every file settled.
    pub fn may_finish(&self) -> bool {
        self.end_of_entries && self.pending == 0 && !self.finished
    }

    /// The summary goes out now.
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// Whether the summary went out (a data stream closing is then the normal end).
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Held files, once every pending file is written and either the source
    /// announced everything or a batch has piled up.
    fn release(&mut self) -> Vec<u64> {
        let all_written = !self.deferred.is_empty() && self.deferred.len() as u64 >= self.pending;
        if all_written && (self.end_of_entries || self.pending >= SEQUENTIAL_BATCH) {
            std::mem::take(&mut self.deferred)
        } else {
            Vec::new()
        }
    }
}

#[cfg(any(test, feature = "fuzzing"))]
/// What a session's tasks do to one file (or to the session), for [`replay`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// The file is planned (ignored after the end of entries, or if planned before).
    Plan(u8),
    /// Written completely (sequential schedule; only a planned file, once).
    Written(u8),
    /// It ended (only a planned file).
    End(u8),
    /// Its report is queued (any id: a report of a file that did not end settles
    /// nothing).
    Report(u8),
    /// The source announced everything.
    EndOfEntries,
}

#[cfg(any(test, feature = "fuzzing"))]
/// A file's life in [`replay`]'s model.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Life {
    Planned,
    Ended,
    Reported,
}

#[cfg(any(test, feature = "fuzzing"))]
/// Feeds `events` (those a session's tasks may produce, in the order they may) to a
/// settlement, then ends and reports every file; checks against a plain model that
/// the summary never overtakes a report, comes once every planned file is reported
/// after the end of entries, and that every written file is released for its check
/// exactly once. Shared by the property test and the fuzz target.
pub(crate) fn replay(events: &[Event]) -> Result<(), String> {
    let mut s = Settlement::default();
    let mut life: std::collections::BTreeMap<u8, Life> = Default::default();
    let mut written: HashSet<u64> = HashSet::new();
    let mut released: HashSet<u64> = HashSet::new();
    let mut over = false;
    let mut take = |got: Vec<u64>| match got.into_iter().find(|id| !released.insert(*id)) {
        Some(id) => Err(format!("file {id} released twice")),
        None => Ok(()),
    };
    for (i, e) in events.iter().enumerate() {
        match *e {
            Event::Plan(f) if !over && !life.contains_key(&f) => {
                s.planned();
                life.insert(f, Life::Planned);
            }
            Event::Written(f)
                if life.get(&f) == Some(&Life::Planned) && written.insert(f.into()) =>
            {
                take(s.written(f.into()))?;
            }
            Event::End(f) if life.get(&f) == Some(&Life::Planned) => {
                s.ended(f.into());
                life.insert(f, Life::Ended);
            }
            Event::Report(f) => {
                take(s.reported(f.into()))?;
                if life.get(&f) == Some(&Life::Ended) {
                    life.insert(f, Life::Reported);
                }
            }
            Event::EndOfEntries => {
                over = true;
                take(s.end_of_entries())?;
            }
            _ => {}
        }
        let unsettled = life.values().any(|l| *l != Life::Reported);
        if s.may_finish() != (over && !unsettled) {
            return Err(format!("event {i} ({e:?}): may_finish {}", s.may_finish()));
        }
    }
    // Everything ends and is reported: the summary may go, once.
    let ids: Vec<u8> = life.keys().copied().collect();
    for f in ids {
        if life[&f] == Life::Planned {
            s.ended(f.into());
        }
        take(s.reported(f.into()))?;
        life.insert(f, Life::Reported);
    }
    take(s.end_of_entries())?;
    if !s.may_finish() {
        return Err("everything reported, but the summary may not go".into());
    }
    if released != written {
        return Err(format!("released {released:?}, written {written:?}"));
    }
    s.finish();
    match s.finished() && !s.may_finish() {
        true => Ok(()),
        false => Err("the summary may go twice".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u8..16).prop_map(Event::Plan),
            (0u8..16).prop_map(Event::Written),
            (0u8..16).prop_map(Event::End),
            (0u8..16).prop_map(Event::Report),
            Just(Event::EndOfEntries),
        ]
    }

    proptest! {
        /// Whatever the tasks do, the settlement agrees with the model (see [`replay`]).
        #[test]
        fn the_summary_waits_for_every_report(
            events in proptest::collection::vec(event(), 0..120),
        ) {
            prop_assert_eq!(replay(&events), Ok(()));
        }
    }

    #[test]
    fn a_sequential_schedule_checks_once_every_pending_file_is_written() {
        let mut s = Settlement::default();
        s.planned();
        s.planned();
        assert!(s.written(1).is_empty(), "file 2 is still being written");
        assert!(s.written(2).is_empty(), "the source may announce more");
        assert_eq!(s.end_of_entries(), vec![1, 2]);
        assert!(!s.may_finish(), "both still to be checked and reported");
        s.ended(1);
        assert!(s.reported(1).is_empty());
        s.ended(2);
        s.reported(2);
        assert!(s.may_finish());
    }
}
