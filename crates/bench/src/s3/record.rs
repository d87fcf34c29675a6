//! What `hetch-lab bench s3` writes: one [`S3Record`] per run in a JSONL results file
//! (appended after every run, so an interrupted benchmark resumes where it stopped),
//! and an [`S3Meta`] beside it (`STEM.meta.json`) with what the report needs besides
//! the runs.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Which way a run moves the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Files on the client into the object store (an upload).
    Up,
    /// Objects of the store into files on the client (a download).
    Down,
}

impl Direction {
    /// Both directions, in the order each iteration runs them: up, then down.
    pub const BOTH: [Direction; 2] = [Direction::Up, Direction::Down];

    /// `up` or `down`, as in the results file.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }

    /// A label for the report: which side is the store.
    pub fn label(self) -> &'static str {
        match self {
            Direction::Up => "up (file → S3)",
            Direction::Down => "down (S3 → file)",
        }
    }
}

/// One timed run of one tool, one way, over one dataset and link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct S3Record {
    /// The tool (`hetch-agent`, `hetch`, `aws`, `rclone`, `s5cmd`, or `iperf3`, the
    /// network's limit).
    pub tool: String,
    /// The tool's version line.
    pub version: String,
    /// Up (file → S3) or down (S3 → file).
    pub direction: Direction,
    /// The dataset's name, e.g. `1GiB-x1`.
    pub dataset: String,
    /// Number of files (objects).
    pub files: u64,
    /// Bytes per file.
    pub file_size: u64,
    /// Total bytes moved.
    pub bytes: u64,
    /// Emulated round-trip time in milliseconds; 0 is plain loopback (no testbed).
    pub rtt_ms: f64,
    /// Emulated link rate in bits per second; 0 is unlimited (always so on loopback).
    pub rate_bps: u64,
    /// Iteration, from 1.
    pub iteration: u32,
    /// Wall-clock seconds of the tool's command, start to exit.
    pub seconds: f64,
    /// Whether the command succeeded and its result was verified: every object of an
    /// upload, every file of a download has the source's BLAKE3 and nothing else is
    /// there. For iperf3 (the limit, which moves memory, not files), that it succeeded.
    pub verified: bool,
    /// Why not, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix time the run started.
    pub started_unix: u64,
}

impl S3Record {
    /// Throughput in MB/s (10^6 bytes per second); `None` for a run that failed, so a
    /// failed run is never a number.
    pub fn mb_per_s(&self) -> Option<f64> {
        (self.verified && self.seconds > 0.0).then(|| self.bytes as f64 / self.seconds / 1e6)
    }

    /// The key that makes a run unique within a results file (resuming skips it).
    pub fn key(&self) -> String {
        S3Record::key_of(
            self.rtt_ms,
            self.rate_bps,
            &self.dataset,
            self.direction,
            &self.tool,
            self.iteration,
        )
    }

    /// The key of a run before it exists.
    pub fn key_of(
        rtt_ms: f64,
        rate_bps: u64,
        dataset: &str,
        direction: Direction,
        tool: &str,
        iteration: u32,
    ) -> String {
        format!(
            "{rtt_ms}|{rate_bps}|{dataset}|{}|{tool}|{iteration}",
            direction.as_str()
        )
    }
}

/// A tool as the report lists it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct S3ToolInfo {
    /// Its name in the records.
    pub name: String,
    /// Its version line.
    pub version: String,
    /// How it runs and why (one line).
    pub flags: String,
    /// Whether it is the network's limit (iperf3), not a data mover.
    pub is_limit: bool,
    /// Why it did not run (not installed, wrong version), for a tool that was asked
    /// for but could not take part: the report says so rather than leaving it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// The exact command a tool ran one way (from its first run), for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCommand {
    /// The tool.
    pub tool: String,
    /// The direction.
    pub direction: Direction,
    /// Environment it set (secrets elided) and the command line, shell-quoted.
    pub command: String,
}

/// How the benchmark ran, kept next to the results file (`STEM.meta.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct S3Meta {
    /// The command line that produced the results.
    pub command: String,
    /// Unix time the results file was started.
    pub started_unix: u64,
    /// The MinIO server: its version, where its data lived and on what file system.
    pub minio: String,
    /// Each tool asked for, available or not.
    pub tools: Vec<S3ToolInfo>,
    /// The command each tool ran each way.
    #[serde(default)]
    pub commands: Vec<ToolCommand>,
    /// Free-form lines for the report (machine, settings, how runs are verified).
    pub notes: Vec<String>,
}

/// Where the meta file of results file `path` lives (`STEM.meta.json`).
pub fn meta_path(path: &Path) -> PathBuf {
    path.with_extension("meta.json")
}

/// Reads the meta file of results file `path` (empty when missing).
pub fn read_meta(path: &Path) -> anyhow::Result<S3Meta> {
    let p = meta_path(path);
    match std::fs::read_to_string(&p) {
        Ok(t) => serde_json::from_str(&t).with_context(|| p.display().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(S3Meta::default()),
        Err(e) => Err(e).with_context(|| p.display().to_string()),
    }
}

/// Writes the meta file of results file `path`.
pub fn write_meta(path: &Path, meta: &S3Meta) -> anyhow::Result<()> {
    let p = meta_path(path);
    std::fs::write(&p, serde_json::to_string_pretty(meta)? + "\n")
        .with_context(|| p.display().to_string())
}

/// Whether `path` holds S3 results (its first record has a direction), so that
/// `hetch-lab bench report` can tell them from the other suites' results.
pub fn is_s3_results(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    text.lines()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .is_some_and(|v| v.get("direction").is_some())
}

/// An open S3 results file.
pub type S3Results = crate::results::Results<S3Record>;

impl crate::results::RunRecord for S3Record {
    fn key(&self) -> String {
        S3Record::key(self)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// A record for tests.
    pub(crate) fn rec(tool: &str, direction: Direction, seconds: f64, ok: bool) -> S3Record {
        S3Record {
            tool: tool.into(),
            version: format!("{tool} 1.0"),
            direction,
            dataset: "1MiB-x4".into(),
            files: 4,
            file_size: 1 << 20,
            bytes: 4 << 20,
            rtt_ms: 100.0,
            rate_bps: 2_000_000_000,
            iteration: 1,
            seconds,
            verified: ok,
            error: (!ok).then(|| "boom".to_string()),
            started_unix: 1,
        }
    }

    #[test]
    fn records_round_trip_resume_and_failed_runs_have_no_throughput() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("s3.jsonl");
        let mut r = S3Results::open(&p).unwrap();
        r.append(rec("aws", Direction::Up, 2.0, true)).unwrap();
        r.append(rec("hetch", Direction::Down, 1.0, false)).unwrap();
        // A crash in the middle of a write leaves half a line.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"tool\":\"rcl").unwrap();
        drop(f);
        assert!(is_s3_results(&p));
        let r = S3Results::open(&p).unwrap();
        assert_eq!(r.records().len(), 2);
        assert!(r.has(&rec("aws", Direction::Up, 0.0, true).key()));
        assert!(!r.has(&rec("aws", Direction::Down, 0.0, true).key()));
        assert_eq!(r.records()[0].mb_per_s(), Some(4.0 * 1048576.0 / 2.0 / 1e6));
        assert_eq!(r.records()[1].mb_per_s(), None);
        let line = std::fs::read_to_string(&p).unwrap();
        assert!(line.contains(r#""direction":"up""#), "{line}");
        assert!(line.ends_with('\n'));
        let other = t.path().join("sweep.jsonl");
        std::fs::write(&other, "{\"point\":{}}\n").unwrap();
        assert!(!is_s3_results(&other));
    }
}
