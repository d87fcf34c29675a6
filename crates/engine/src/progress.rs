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
    /// Files that failed.
    pub failed: AtomicU64,
    /// Journaled blocks of resumed part files read back and found intact.
    pub reverified: AtomicU64,
    /// Warnings given (a file truncated or rewritten while followed, ...).
    pub warnings: AtomicU64,
    errors: Mutex<Vec<String>>,
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
        }
    }

    /// Takes the recorded error lines.
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.errors.lock().expect("errors lock"))
    }
}

/// What a finished session reports.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Totals as the sink counted them.
    pub summary: Summary,
    /// One line per failed file (at most a thousand are kept; `summary.failed` counts all).
    pub errors: Vec<String>,
}
