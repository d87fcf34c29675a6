//! What a copy says of itself, as types whose JSON is what the `hetch` commands print
//! with `--json` (and `--progress-json`), each with the lines it shows people
//! otherwise: a copy's summary ([`CopySummary`]: `cp`, `sync`, `predict`), a
//! comparison's ([`Comparison`]: `verify`), the counters of a copy that follows its
//! sources forever ([`Counters`]: `watch`), and a line of progress ([`ProgressLine`]).
//!
//! Lines are returned without the command's prefix (`hetch: `); what a peer chose
//! (the per-file errors) is kept as it came, for the caller to escape when it prints.

use std::sync::atomic::Ordering::Relaxed;

use hetch_engine::{LagSummary, Progress};
use hetch_units::human_bytes;
use serde::Serialize;

use crate::{Copied, CopyJob};

/// Lag of a followed copy from data appended at the source to data durable and
/// verified at the destination, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Lag {
    /// Number of samples.
    pub samples: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

impl From<LagSummary> for Lag {
    fn from(l: LagSummary) -> Self {
        Lag {
            samples: l.samples,
            p50_ms: l.p50_ms,
            p99_ms: l.p99_ms,
            max_ms: l.max_ms,
            mean_ms: l.mean_ms,
        }
    }
}

/// The lag `progress` recorded, if it recorded any.
fn lag_of(progress: &Progress) -> Option<Lag> {
    progress
        .lag
        .lock()
        .expect("lag lock")
        .summary()
        .map(Lag::from)
}

/// Compression on the wire, as this side saw it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Compression {
    /// Blocks sent compressed.
    pub compressed_blocks: u64,
    /// Bytes the blocks' payloads took on the wire.
    pub wire_bytes: u64,
    /// The blocks' bytes over their bytes on the wire (1 when nothing was compressed).
    pub ratio: f64,
}

impl Compression {
    /// What `progress` counted.
    pub fn of(progress: &Progress) -> Self {
        let wire = progress.wire_bytes.load(Relaxed);
        let blocks = progress.compressed_blocks.load(Relaxed);
        let raw = progress.bytes.load(Relaxed);
        let ratio = if wire > 0 && blocks > 0 {
            raw as f64 / wire as f64
        } else {
            1.0
        };
        Compression {
            compressed_blocks: blocks,
            wire_bytes: wire,
            ratio,
        }
    }
}

/// Whether the kernel's TLS (kTLS) was used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ktls {
    /// The kernel has it.
    pub available: bool,
    /// A session used it (never yet: records stay in user space).
    pub used: bool,
    /// Why not, in one line.
    pub why: String,
}

/// The entries a mirroring copy deleted (in a dry run: would delete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deleted {
    /// How many.
    pub deleted: u64,
    /// The first thousand of them, escaped, relative to the destination directory.
    pub deleted_paths: Vec<String>,
    /// Whether `deleted_paths` was cut short.
    pub deleted_truncated: bool,
}

/// What a dry run would have done.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DryRun {
    /// Always true: this was a dry run.
    pub dry_run: bool,
    /// Entries the destination lacks.
    pub would_copy: u64,
    /// Bytes of the files among them.
    pub would_copy_bytes: u64,
    /// Entries that differ at the destination.
    pub would_replace: u64,
    /// Bytes of the files among them.
    pub would_replace_bytes: u64,
    /// Files already in place.
    pub would_skip: u64,
    /// How long the copy would take, and what would limit it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<hetch_doctor::predict::Prediction>,
}

/// Why blocks were sent again (see [`CopySummary::retried_blocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetriedBecause {
    /// Their received bytes failed the check on arrival (`--verify received`):
    /// damaged on the way.
    pub damaged_on_arrival: u64,
    /// They failed the check when read back after writing (`--verify written`):
    /// damaged on the way or in the store.
    pub failed_read_back: u64,
    /// Journaled blocks of a resumed part file found damaged there.
    pub damaged_in_part_file: u64,
}

impl RetriedBecause {
    fn of(s: &hetch_proto::Summary) -> Self {
        let (arrival, read_back) = (s.damaged_on_arrival, s.failed_read_back);
        RetriedBecause {
            damaged_on_arrival: arrival,
            failed_read_back: read_back,
            damaged_in_part_file: s.retried_blocks.saturating_sub(arrival + read_back),
        }
    }

    /// The reasons that counted, for people: "2 damaged on arrival, 1 on read-back".
    fn to_text(self) -> String {
        let parts = [
            (self.damaged_on_arrival, "failed their check on arrival"),
            (self.failed_read_back, "failed their read-back"),
            (self.damaged_in_part_file, "damaged in a resumed part file"),
        ];
        let said: Vec<String> = parts
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, why)| format!("{n} {why}"))
            .collect();
        said.join(", ")
    }
}

/// The end of a copy: what `hetch cp --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CopySummary {
    /// Files copied.
    pub files: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Files already in place.
    pub skipped: u64,
    /// Files that failed.
    pub failed: u64,
    /// Blocks sent again (whole or in patches) after failing their check.
    pub retried_blocks: u64,
    /// Why, as far as the receiving side could tell: of those blocks, how many
    /// failed their check on arrival, and how many when read back after writing
    /// (the rest: found damaged in a resumed part file).
    pub retried_because: RetriedBecause,
    /// Blocks made whole from patches (only the damaged parts sent again).
    pub repaired_blocks: u64,
    /// Bytes of those patches.
    pub patch_bytes: u64,
    /// Blocks of resumed part files read back and found intact.
    pub reverified_blocks: u64,
    /// Warnings (each was logged as it happened).
    pub warnings: u64,
    /// Sessions opened again after lost ones.
    pub reconnects: u64,
    /// Data stream connections lost (a damaged TLS record, a reset) and joined again
    /// within their session, which went on.
    pub streams_rejoined: u64,
    /// How long the copy took.
    pub seconds: f64,
    /// Bytes copied per second over that time.
    pub bytes_per_second: f64,
    /// One line per failed file (at most a thousand), as the peer wrote it.
    pub errors: Vec<String>,
    /// Lag of a followed copy, if it measured any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<Lag>,
    /// Compression on the wire.
    pub compression: Compression,
    /// Whether the kernel's TLS was used.
    pub ktls: Ktls,
    /// How the sessions chose their data streams ([`CopyJob::autotune_json`]).
    pub autotune: serde_json::Value,
    /// What a mirroring copy deleted.
    #[serde(flatten)]
    pub deleted: Option<Deleted>,
    /// What a dry run would have done.
    #[serde(flatten)]
    pub dry_run: Option<DryRun>,
}

impl CopySummary {
    /// The summary of `copied`, a run of `job` that counted into `progress` and took
    /// `seconds`.
    pub fn new(job: &CopyJob, copied: &Copied, progress: &Progress, seconds: f64) -> Self {
        let (report, s) = (&copied.report, &copied.report.summary);
        let bytes = s.bytes.max(progress.bytes.load(Relaxed));
        let k = hetch_net::ktls();
        let w = &report.would;
        CopySummary {
            files: s.files,
            bytes,
            skipped: s.skipped,
            failed: s.failed,
            retried_blocks: s.retried_blocks.max(progress.retried_blocks.load(Relaxed)),
            retried_because: RetriedBecause::of(s),
            repaired_blocks: s.repaired_blocks,
            patch_bytes: s.patch_bytes,
            reverified_blocks: s.reverified.max(progress.reverified.load(Relaxed)),
            warnings: progress.warnings.load(Relaxed),
            reconnects: copied.reconnects,
            streams_rejoined: s.streams_rejoined,
            seconds,
            bytes_per_second: if seconds > 0.0 {
                bytes as f64 / seconds
            } else {
                0.0
            },
            errors: report.errors.clone(),
            lag: lag_of(progress),
            compression: Compression::of(progress),
            ktls: Ktls {
                available: k.available,
                used: false,
                why: k.why.clone(),
            },
            autotune: job.autotune_json(),
            deleted: job.opts.delete.map(|_| Deleted {
                deleted: report.deleted,
                deleted_paths: report.deleted_paths.clone(),
                deleted_truncated: report.deleted > report.deleted_paths.len() as u64,
            }),
            dry_run: job.opts.dry_run.then(|| DryRun {
                dry_run: true,
                would_copy: w.copy,
                would_copy_bytes: w.copy_bytes,
                would_replace: w.replace,
                would_replace_bytes: w.replace_bytes,
                would_skip: s.skipped,
                predicted: Some(job.predict(report)),
            }),
        }
    }

    /// The summary for people, a line each: a dry run's counts and prediction, or
    /// what was deleted, copied, recovered from, and the lag.
    pub fn to_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(d) = &self.dry_run {
            let deleted = match &self.deleted {
                Some(m) => format!(", {} deleted", m.deleted),
                None => String::new(),
            };
            lines.push(format!(
                "dry run: {} entries ({}) would be copied, {} ({}) replaced, {} files skipped{deleted}; nothing was changed",
                d.would_copy,
                human_bytes(d.would_copy_bytes as f64),
                d.would_replace,
                human_bytes(d.would_replace_bytes as f64),
                d.would_skip,
            ));
            lines.extend(d.predicted.as_ref().map(|p| p.to_text()));
            return lines;
        }
        if let Some(m) = &self.deleted {
            lines.push(format!("{} entries deleted", m.deleted));
        }
        lines.push(format!(
            "{} files, {} in {:.2} s ({}/s); {} skipped, {} failed, {} blocks re-sent",
            self.files,
            human_bytes(self.bytes as f64),
            self.seconds,
            human_bytes(self.bytes_per_second),
            self.skipped,
            self.failed,
            self.retried_blocks,
        ));
        if self.retried_blocks > 0 {
            let mut why = self.retried_because.to_text();
            if self.repaired_blocks > 0 {
                why.push_str(&format!(
                    "; {} repaired from patches ({})",
                    self.repaired_blocks,
                    human_bytes(self.patch_bytes as f64)
                ));
            }
            lines.push(format!("blocks re-sent: {why}"));
        }
        if self.reconnects > 0 {
            lines.push(format!("recovered from {} lost sessions", self.reconnects));
        }
        if self.streams_rejoined > 0 {
            lines.push(format!(
                "data stream connections lost and joined again: {}",
                self.streams_rejoined
            ));
        }
        if let Some(l) = &self.lag {
            lines.push(format!(
                "lag (appended -> durable and verified): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms over {} samples",
                l.p50_ms, l.p99_ms, l.max_ms, l.samples
            ));
        }
        lines
    }
}

/// The end of a comparison: what `hetch verify --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Entries found identical.
    pub identical: u64,
    /// Bytes compared.
    pub bytes_compared: u64,
    /// Entries that differ (each is one of the report's errors).
    pub differences: u64,
    /// Sessions opened again after lost ones.
    pub reconnects: u64,
    /// Data stream connections lost (a damaged TLS record, a reset) and joined again
    /// within their session, which went on.
    pub streams_rejoined: u64,
    /// How long the comparison took.
    pub seconds: f64,
}

impl Comparison {
    /// The comparison `copied` made, in `seconds`.
    pub fn new(copied: &Copied, seconds: f64) -> Self {
        let s = &copied.report.summary;
        Comparison {
            identical: s.files,
            bytes_compared: s.bytes,
            differences: s.failed,
            reconnects: copied.reconnects,
            streams_rejoined: s.streams_rejoined,
            seconds,
        }
    }

    /// The comparison for people, in one line.
    pub fn to_line(&self) -> String {
        match self.differences {
            0 => format!(
                "identical: {} entries compared in {:.2} s",
                self.identical, self.seconds
            ),
            n => format!(
                "{n} differences; {} entries identical ({:.2} s)",
                self.identical, self.seconds
            ),
        }
    }
}

/// The counters of a copy that follows its sources forever (`hetch watch`), since it
/// started: what `--json` prints every `--stats-interval` and at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counters {
    /// Files shipped.
    pub files: u64,
    /// Bytes sent.
    pub bytes: u64,
    /// Files already at the destination.
    pub skipped: u64,
    /// Files that failed.
    pub failed: u64,
    /// Warnings.
    pub warnings: u64,
    /// Sessions opened again after the first.
    pub reconnects: u64,
    /// Seconds since it started.
    pub seconds: f64,
    /// Lag from appended to durable and verified, if measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<Lag>,
}

impl Counters {
    /// What `progress` counted in `seconds`, over `reconnects` sessions after the
    /// first.
    pub fn of(progress: &Progress, seconds: f64, reconnects: u64) -> Self {
        let p = progress;
        Counters {
            files: p.files.load(Relaxed),
            bytes: p.bytes.load(Relaxed),
            skipped: p.skipped.load(Relaxed),
            failed: p.failed.load(Relaxed),
            warnings: p.warnings.load(Relaxed),
            reconnects,
            seconds,
            lag: lag_of(p),
        }
    }

    /// The counters for people, in one line.
    pub fn to_line(&self) -> String {
        let lag = self
            .lag
            .map(|l| format!("; lag p50 {:.0} ms, p99 {:.0} ms", l.p50_ms, l.p99_ms))
            .unwrap_or_default();
        format!(
            "{} files, {} bytes sent, {} already there, {} failed, {} warnings{lag}",
            self.files, self.bytes, self.skipped, self.failed, self.warnings
        )
    }
}

/// Bytes and files done (copied or skipped) and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProgressCounts {
    /// Bytes done, skipped ones included.
    pub bytes: u64,
    /// Bytes in all (at least those done).
    pub total_bytes: u64,
    /// Files done, skipped ones included.
    pub files: u64,
    /// Files in all, as far as listed.
    pub total_files: u64,
}

impl ProgressCounts {
    /// What `progress` counted so far.
    pub fn of(progress: &Progress) -> Self {
        let p = progress;
        let done = p.bytes.load(Relaxed) + p.skipped_bytes.load(Relaxed);
        ProgressCounts {
            bytes: done,
            total_bytes: p.total_bytes.load(Relaxed).max(done),
            files: p.files.load(Relaxed) + p.skipped.load(Relaxed),
            total_files: p.total_files.load(Relaxed),
        }
    }
}

/// A line of progress for a program driving `hetch` (`--progress-json`):
/// `{"progress":{"bytes":B,"total_bytes":T,"files":F,"total_files":N}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProgressLine {
    /// The counts.
    pub progress: ProgressCounts,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_lines_name_their_fields_as_the_commands_print_them() {
        let p = Progress::default();
        p.bytes.store(10, Relaxed);
        p.skipped_bytes.store(5, Relaxed);
        p.total_bytes.store(12, Relaxed);
        p.files.store(2, Relaxed);
        p.skipped.store(1, Relaxed);
        p.total_files.store(4, Relaxed);
        let line = ProgressLine {
            progress: ProgressCounts::of(&p),
        };
        assert_eq!(
            serde_json::to_string(&line).unwrap(),
            r#"{"progress":{"bytes":15,"total_bytes":15,"files":3,"total_files":4}}"#
        );
        let c = Counters::of(&p, 1.5, 2);
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            serde_json::json!({"files": 2, "bytes": 10, "skipped": 1, "failed": 0,
                "warnings": 0, "reconnects": 2, "seconds": 1.5})
        );
        assert_eq!(
            c.to_line(),
            "2 files, 10 bytes sent, 1 already there, 0 failed, 0 warnings"
        );
        let ratio = Compression::of(&p);
        assert_eq!(ratio.ratio, 1.0);
    }
}
