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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a session's tasks do to one file, in the order they may do it.
    #[derive(Debug, Clone, Copy)]
    enum Event {
        Plan(u8),
        Written(u8),
        End(u8),
        Report(u8),
        EndOfEntries,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u8..16).prop_map(Event::Plan),
            (0u8..16).prop_map(Event::Written),
            (0u8..16).prop_map(Event::End),
            (0u8..16).prop_map(Event::Report),
            Just(Event::EndOfEntries),
        ]
    }

    /// A file's life as the tasks see it.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Life {
        Planned,
        Ended,
        Reported,
    }

    proptest! {
        /// Against a model: the summary never overtakes a report, comes once every
        /// planned file is reported after the end of entries, and a sequential
        /// schedule releases every written file exactly once, only when all pending
        /// files are written (or the batch is full).
        #[test]
        fn the_summary_waits_for_every_report(
            events in proptest::collection::vec(event(), 0..120),
        ) {
            let mut s = Settlement::default();
            let mut life: std::collections::HashMap<u8, Life> = Default::default();
            let mut written: HashSet<u8> = HashSet::new();
            let mut released: HashSet<u64> = HashSet::new();
            let mut over = false;
            let mut take = |got: Vec<u64>| {
                for id in got {
                    prop_assert!(released.insert(id), "file {} released twice", id);
                }
                Ok(())
            };
            for e in events {
                match e {
                    // The tasks plan a file once, and only before the end of entries.
                    Event::Plan(f) if !over && !life.contains_key(&f) => {
                        s.planned();
                        life.insert(f, Life::Planned);
                    }
                    Event::Written(f) if life.get(&f) == Some(&Life::Planned) && written.insert(f) => {
                        take(s.written(f as u64))?;
                    }
                    Event::End(f) if life.get(&f) == Some(&Life::Planned) => {
                        s.ended(f as u64);
                        life.insert(f, Life::Ended);
                    }
                    // Reports of files that did not end here (or twice) settle nothing.
                    Event::Report(f) => {
                        let got = s.reported(f as u64);
                        if life.get(&f) == Some(&Life::Ended) {
                            life.insert(f, Life::Reported);
                        }
                        take(got)?;
                    }
                    Event::EndOfEntries => {
                        over = true;
                        take(s.end_of_entries())?;
                    }
                    _ => {}
                }
                let unsettled = life.values().filter(|l| **l != Life::Reported).count();
                prop_assert_eq!(s.may_finish(), over && unsettled == 0);
            }
            // Everything ends and is reported: the summary may go, once.
            let ends: Vec<u8> = life
                .iter()
                .filter(|(_, l)| **l == Life::Planned)
                .map(|(f, _)| *f)
                .collect();
            for f in ends {
                s.ended(f as u64);
                life.insert(f, Life::Ended);
            }
            let reports: Vec<u8> = life
                .iter()
                .filter(|(_, l)| **l == Life::Ended)
                .map(|(f, _)| *f)
                .collect();
            for f in reports {
                take(s.reported(f as u64))?;
                life.insert(f, Life::Reported);
            }
            take(s.end_of_entries())?;
            prop_assert!(s.may_finish());
            let written: HashSet<u64> = written.into_iter().map(u64::from).collect();
            prop_assert_eq!(&released, &written, "every written file is checked");
            s.finish();
            prop_assert!(s.finished() && !s.may_finish());
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
