//! Counters a user interface can poll while a transfer runs, and the final report.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use hetch_proto::Summary;

use crate::lag::LagHistogram;

/// Live counters, updated by the engine and read by progress displays.
#[derive(Default)]
pub struct Progress {
    /// Payload bytes sent (source) or written (sink).
    pub bytes: AtomicU64,
    /// Bytes of all files announced so far.
    pub total_bytes: AtomicU64,
    /// Files finished.
    pub files: AtomicU64,
    /// Files announced so far.
    pub total_files: AtomicU64,
    /// Files skipped because they were already there.
    pub skipped: AtomicU64,
    /// Bytes in skipped files (or skipped blocks of resumed files).
    pub skipped_bytes: AtomicU64,
    /// Blocks sent again after failing their check.
    pub retried_blocks: AtomicU64,
    /// Of those, blocks whose received bytes failed their check on arrival.
    pub damaged_on_arrival: AtomicU64,
    /// Of those, blocks that failed their check when read back after writing.
    pub failed_read_back: AtomicU64,
    /// Blocks made whole from patches instead of sent whole (see `sink/repair.rs`).
    pub repaired_blocks: AtomicU64,
    /// Bytes of patches received.
    pub patch_bytes: AtomicU64,
    /// Data stream connections lost and joined again (see `rejoin.rs`).
    pub streams_rejoined: AtomicU64,
    /// Payload bytes of data blocks as they crossed the wire (compressed blocks
    /// counted compressed), beside `bytes` as the blocks' own bytes.
    pub wire_bytes: AtomicU64,
    /// Data blocks that crossed the wire compressed.
    pub compressed_blocks: AtomicU64,
    /// Files that failed.
    pub failed: AtomicU64,
    /// Journaled blocks of resumed part files read back and found intact.
    pub reverified: AtomicU64,
    /// Warnings given (a file truncated or rewritten while followed, ...).
    pub warnings: AtomicU64,
    errors: Mutex<Vec<String>>,
    /// Entries a mirroring session removed (or, in a dry run, would remove).
    pub deleted: AtomicU64,
    /// What a dry run would copy and replace.
    pub would: DryRunTally,
    /// The first [`MAX_DELETED_KEPT`] removed entries (escaped, relative to the
    /// destination directory).
    deleted_paths: Mutex<Vec<String>>,
    /// Lag of followed files: from bytes appearing at the source to durable and
    /// verified at the destination.
    pub lag: Mutex<LagHistogram>,
    /// Where warnings and per-file lines go as they happen (the command line's stderr).
    log: std::sync::OnceLock<LogFn>,
}

/// Where [`Progress::note`] lines go.
pub type LogFn = Box<dyn Fn(&str) + Send + Sync>;

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("summary", &self.summary())
            .finish_non_exhaustive()
    }
}

/// How many error lines a report keeps (the count is always exact).
const MAX_ERRORS_KEPT: usize = 1000;
/// How many removed paths a report keeps (the count is always exact).
pub const MAX_DELETED_KEPT: usize = 1000;

impl Progress {
    /// Adds `n` to a counter.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// Records a per-file failure (one line naming the file).
    pub fn fail(&self, message: String) {
        self.failed.fetch_add(1, Relaxed);
        let mut e = self.errors.lock().expect("errors lock");
        if e.len() < MAX_ERRORS_KEPT {
            e.push(message);
        }
    }

    /// Sends lines (warnings, finished files of a watch) to `log` as they happen.
    /// Only the first call takes effect.
    pub fn set_log(&self, log: LogFn) {
        let _ = self.log.set(log);
    }

    /// A line for the log, if one is set.
    pub fn note(&self, line: &str) {
        if let Some(log) = self.log.get() {
            log(line);
        }
    }

    /// A warning: counted, and logged as it happens.
    pub fn warn(&self, message: &str) {
        self.warnings.fetch_add(1, Relaxed);
        self.note(&format!("warning: {message}"));
    }

    /// Records one change of a mirroring session or a dry run (`path` relative to the
    /// destination directory, `size` the bytes a copy would move) and logs it as
    /// `deleted PATH`, `would delete PATH`, `would copy PATH` or `would replace PATH`.
    pub fn change(&self, action: hetch_proto::ChangeAction, path: &[u8], size: u64) {
        use hetch_proto::ChangeAction;
        let shown = hetch_proto::escape_bytes(path);
        let verb = match action {
            ChangeAction::Deleted => CHANGE_VERBS[0],
            ChangeAction::WouldDelete => CHANGE_VERBS[1],
            ChangeAction::WouldCopy => CHANGE_VERBS[2],
            ChangeAction::WouldReplace => CHANGE_VERBS[3],
            ChangeAction::WouldUpdate => CHANGE_VERBS[4],
        };
        if let Some((n, bytes)) = self.would.of(action) {
            n.fetch_add(1, Relaxed);
            bytes.fetch_add(size, Relaxed);
        } else {
            self.deleted.fetch_add(1, Relaxed);
            let mut kept = self.deleted_paths.lock().expect("deleted lock");
            if kept.len() < MAX_DELETED_KEPT {
                kept.push(shown.clone());
            }
        }
        self.note(&format!("{verb}{shown}"));
    }

    /// Records one lag sample.
    pub fn record_lag(&self, lag: std::time::Duration) {
        self.lag.lock().expect("lag lock").record(lag);
    }

    /// A snapshot of the counters as a [`Summary`].
    pub fn summary(&self) -> Summary {
        Summary {
            files: self.files.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            skipped: self.skipped.load(Relaxed),
            retried_blocks: self.retried_blocks.load(Relaxed),
            failed: self.failed.load(Relaxed),
            reverified: self.reverified.load(Relaxed),
            damaged_on_arrival: self.damaged_on_arrival.load(Relaxed),
            failed_read_back: self.failed_read_back.load(Relaxed),
            repaired_blocks: self.repaired_blocks.load(Relaxed),
            patch_bytes: self.patch_bytes.load(Relaxed),
            streams_rejoined: self.streams_rejoined.load(Relaxed),
        }
    }

    /// Starts the counters over for a new session of the same run (after a lost one)
    /// and returns what the previous session counted. The new session announces and
    /// counts everything again, finding what the previous one finished in place; its
    /// per-file failures are its own. The lag histogram carries on.
    pub fn begin_attempt(&self) -> Summary {
        let take = |c: &AtomicU64| c.swap(0, Relaxed);
        let previous = Summary {
            files: take(&self.files),
            bytes: take(&self.bytes),
            skipped: take(&self.skipped),
            retried_blocks: take(&self.retried_blocks),
            failed: take(&self.failed),
            reverified: take(&self.reverified),
            damaged_on_arrival: take(&self.damaged_on_arrival),
            failed_read_back: take(&self.failed_read_back),
            repaired_blocks: take(&self.repaired_blocks),
            patch_bytes: take(&self.patch_bytes),
            streams_rejoined: take(&self.streams_rejoined),
        };
        let w = &self.would;
        for c in [&w.copy, &w.copy_bytes, &w.replace, &w.replace_bytes] {
            take(c);
        }
        for c in [&self.total_bytes, &self.total_files, &self.skipped_bytes] {
            take(c);
        }
        self.take_errors();
        previous
    }

    /// Takes the recorded error lines.
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().expect("errors lock"))
    }

    /// The report of a finished session from these counters.
    pub fn report(&self) -> Report {
        Report {
            summary: self.summary(),
            errors: self.take_errors(),
            deleted: self.deleted.load(Relaxed),
            deleted_paths: std::mem::take(&mut *self.deleted_paths.lock().expect("deleted lock")),
            would: self.would.totals(),
        }
    }
}

/// What a finished session reports.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Totals as the sink counted them.
    pub summary: Summary,
    /// One line per failed file (at most a thousand are kept; `summary.failed` counts all).
    pub errors: Vec<String>,
    /// Entries a mirroring session removed (in a dry run: would remove).
    pub deleted: u64,
    /// The first [`MAX_DELETED_KEPT`] of them, escaped, relative to the destination
    /// directory (fewer than `deleted`: the list was cut).
    pub deleted_paths: Vec<String>,
    /// What a dry run would copy and replace.
    pub would: DryRunTotals,
}

/// How [`Progress::change`] starts its lines, one per [`hetch_proto::ChangeAction`]:
/// a log that shows changes picks them out by these.
pub const CHANGE_VERBS: [&str; 5] = [
    "deleted ",
    "would delete ",
    "would copy ",
    "would replace ",
    "would update the metadata of ",
];

/// Counters of a dry run: entries it would copy (new at the destination) and replace,
/// with the bytes of their files.
#[derive(Debug, Default)]
pub struct DryRunTally {
    copy: AtomicU64,
    copy_bytes: AtomicU64,
    replace: AtomicU64,
    replace_bytes: AtomicU64,
}

impl DryRunTally {
    fn of(&self, action: hetch_proto::ChangeAction) -> Option<(&AtomicU64, &AtomicU64)> {
        match action {
            hetch_proto::ChangeAction::WouldCopy => Some((&self.copy, &self.copy_bytes)),
            // An update moves no bytes (its size is 0), but the entry differs.
            hetch_proto::ChangeAction::WouldReplace | hetch_proto::ChangeAction::WouldUpdate => {
                Some((&self.replace, &self.replace_bytes))
            }
            _ => None,
        }
    }

    fn totals(&self) -> DryRunTotals {
        DryRunTotals {
            copy: self.copy.load(Relaxed),
            copy_bytes: self.copy_bytes.load(Relaxed),
            replace: self.replace.load(Relaxed),
            replace_bytes: self.replace_bytes.load(Relaxed),
        }
    }
}

/// What a dry run would copy and replace, as counted at its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DryRunTotals {
    /// Entries the destination lacks.
    pub copy: u64,
    /// Bytes of the files among them.
    pub copy_bytes: u64,
    /// Entries that differ at the destination.
    pub replace: u64,
    /// Bytes of the files among them.
    pub replace_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetch_proto::ChangeAction;

    #[test]
    fn a_dry_runs_counts_start_over_with_a_new_session() {
        let p = Progress::default();
        p.change(ChangeAction::WouldCopy, b"a", 5);
        p.change(ChangeAction::WouldReplace, b"b", 7);
        p.change(ChangeAction::WouldDelete, b"c", 0);
        let w = p.would.totals();
        assert_eq!(
            (w.copy, w.copy_bytes, w.replace, w.replace_bytes),
            (1, 5, 1, 7)
        );
        // A lost session's changes are announced again by the next one.
        p.begin_attempt();
        p.change(ChangeAction::WouldCopy, b"a", 5);
        let r = p.report();
        assert_eq!(
            r.would,
            DryRunTotals {
                copy: 1,
                copy_bytes: 5,
                ..Default::default()
            }
        );
        assert_eq!(r.deleted, 1);
    }
}
