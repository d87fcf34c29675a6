//! Counters a user interface can poll while a transfer runs, and the final report.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use hetch_proto::Summary;

/// Live counters, updated by the engine and read by progress displays.
#[derive(Debug, Default)]
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
    errors: Mutex<Vec<String>>,
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

    /// A snapshot of the counters as a [`Summary`].
    pub fn summary(&self) -> Summary {
        Summary {
            files: self.files.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            skipped: self.skipped.load(Relaxed),
            retried_blocks: self.retried_blocks.load(Relaxed),
            failed: self.failed.load(Relaxed),
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
