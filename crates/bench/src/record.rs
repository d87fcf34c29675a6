//! What one benchmark run measured, as written to the results file (one JSON object
//! per line) and read back for the report.

use serde::{Deserialize, Serialize};

/// The conditions a run happened under: the dataset and the link. Runs of different
/// tools at the same point are compared with each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Which experiment: `sweep-bulk`, `sweep-streaming` or `datasets`.
    pub suite: String,
    /// Dataset name, e.g. `1MiB-x1024` or `003-d3`.
    pub dataset: String,
    /// Size of each file in bytes (the datasets of paper 003 mix sizes: their mean).
    pub file_size: u64,
    /// Number of files.
    pub files: u64,
    /// Total bytes.
    pub bytes: u64,
    /// Emulated round-trip time in milliseconds; `None` on plain loopback (no link).
    pub rtt_ms: Option<f64>,
    /// Emulated packet loss (a fraction).
    pub loss: f64,
    /// Emulated link rate in bits per second (0: unlimited).
    pub rate_bps: u64,
    /// TCP congestion control of both hosts (`default` when left alone).
    pub cc: String,
}

impl Point {
    /// A stable text key: runs with equal keys are iterations of one measurement.
    pub fn key(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}",
            self.suite,
            self.dataset,
            self.rtt_ms.map_or("lo".to_string(), |r| format!("{r}")),
            self.loss,
            self.rate_bps,
            self.cc
        )
    }
}

/// One timed run of one tool at one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Where it ran.
    pub point: Point,
    /// The tool (`hetch`, `rsync`, ..., or `iperf3`, the memory-to-memory limit).
    pub tool: String,
    /// Iteration number, from 1.
    pub iteration: u32,
    /// Wall-clock seconds of the whole command (connection set-up included).
    pub seconds: f64,
    /// Whether the command succeeded and the destination holds every byte.
    pub ok: bool,
    /// Why not, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix time the run started.
    pub started_unix: u64,
}

impl Record {
    /// Throughput in Gbit/s (0 for a failed run).
    pub fn gbit_per_s(&self) -> f64 {
        if !self.ok || self.seconds <= 0.0 {
            return 0.0;
        }
        self.point.bytes as f64 * 8.0 / self.seconds / 1e9
    }

    /// The key that makes a run unique within a results file (resuming skips it).
    pub fn key(&self) -> String {
        Record::key_of(&self.point, &self.tool, self.iteration)
    }

    /// The key of the run of `tool` at `point` in `iteration`, before it exists.
    pub fn key_of(point: &Point, tool: &str, iteration: u32) -> String {
        format!("{}|{tool}|{iteration}", point.key())
    }
}

/// What the report needs besides the runs: how the benchmark was invoked and what
/// each tool was. Kept next to the results file (`STEM.meta.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The command line that produced the results.
    pub command: String,
    /// Unix time the results file was started.
    pub started_unix: u64,
    /// Where the data lived: `disk` (caches dropped before each run) or `memory`.
    pub storage: String,
    /// Each tool that took part.
    pub tools: Vec<ToolInfo>,
    /// Free-form lines for the report (machine, kernel, settings).
    pub notes: Vec<String>,
}

/// A tool as the report lists it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// Its name in the records.
    pub name: String,
    /// Its version line.
    pub version: String,
    /// Its flags and why.
    pub flags: String,
    /// Whether it is a limit (iperf3), not a data mover.
    pub is_limit: bool,
}
