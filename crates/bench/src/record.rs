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
    /// Streaming sweeps: the writer's aggregate rate in bits per second (0: as fast as
    /// it can); `None` for suites without a writer (results written before streaming
    /// sweeps existed have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_rate_bps: Option<u64>,
}

impl Point {
    /// A stable text key: runs with equal keys are iterations of one measurement.
    /// (Points without a writer keep the key they had before streaming sweeps, so
    /// older results files resume as they did.)
    pub fn key(&self) -> String {
        let mut key = format!(
            "{}|{}|{}|{}|{}|{}",
            self.suite,
            self.dataset,
            self.rtt_ms.map_or("lo".to_string(), |r| format!("{r}")),
            self.loss,
            self.rate_bps,
            self.cc
        );
        if let Some(w) = self.write_rate_bps {
            key.push_str(&format!("|w{w}"));
        }
        key
    }
}

/// How a run moved its files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The files were complete before the copy started (every suite's runs, and the
    /// records written before streaming sweeps existed).
    #[default]
    Bulk,
    /// The copy followed the files while a writer was still appending to them
    /// (`hetch cp --follow`).
    Streaming,
}

impl Mode {
    /// `bulk` or `streaming`, as in the results file.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Bulk => "bulk",
            Mode::Streaming => "streaming",
        }
    }
}

/// Lag of a streaming run as the copy reported it: the time from bytes being
/// appended at the source to their being durable and verified at the destination.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Lag {
    /// Number of samples (one per piece of growth the copy saw and had acknowledged).
    pub samples: u64,
    /// Median lag in milliseconds.
    pub p50_ms: f64,
    /// 99th-percentile lag in milliseconds.
    pub p99_ms: f64,
    /// Largest lag in milliseconds.
    pub max_ms: f64,
    /// Mean lag in milliseconds.
    #[serde(default)]
    pub mean_ms: f64,
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
    /// Wall-clock seconds of the whole command (connection set-up included); for a
    /// streaming run, from the copy's start (the writer starts once the copy's session
    /// is up) to its exit.
    pub seconds: f64,
    /// Whether the command succeeded and the destination holds every byte.
    pub ok: bool,
    /// Why not, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix time the run started.
    pub started_unix: u64,
    /// Bulk (the files complete before the copy) or streaming (followed while written).
    #[serde(default)]
    pub mode: Mode,
    /// Streaming runs: the lag figures of the copy's `--json` summary; `None` for bulk
    /// runs and for a streaming copy that saw no file grow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<Lag>,
    /// Streaming runs: wall-clock seconds of the writer, from its start to its exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_seconds: Option<f64>,
    /// Streaming runs: seconds from the copy's start until every file and its done
    /// marker were in place at the destination (the copy exits a little later, after
    /// its last scan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_seconds: Option<f64>,
}

impl Record {
    /// Throughput in Gbit/s (0 for a failed run).
    pub fn gbit_per_s(&self) -> f64 {
        if !self.ok || self.seconds <= 0.0 {
            return 0.0;
        }
        self.point.bytes as f64 * 8.0 / self.seconds / 1e9
    }

    /// Throughput in Gbit/s up to the moment every file was in place at the
    /// destination (streaming runs that saw it; `None` otherwise).
    pub fn complete_gbit_per_s(&self) -> Option<f64> {
        let s = self.complete_seconds.filter(|&s| self.ok && s > 0.0)?;
        Some(self.point.bytes as f64 * 8.0 / s / 1e9)
    }

    /// The rate the writer achieved in Gbit/s, from its wall-clock time (streaming
    /// runs; `None` otherwise).
    pub fn writer_gbit_per_s(&self) -> Option<f64> {
        let s = self.writer_seconds.filter(|&s| s > 0.0)?;
        Some(self.point.bytes as f64 * 8.0 / s / 1e9)
    }

    /// The key that makes a run unique within a results file (resuming skips it).
    pub fn key(&self) -> String {
        Record::key_of(&self.point, &self.tool, self.mode, self.iteration)
    }

    /// The key of the run of `tool` in `mode` at `point` in `iteration`, before it
    /// exists. Bulk runs keep the key they had before modes existed.
    pub fn key_of(point: &Point, tool: &str, mode: Mode, iteration: u32) -> String {
        match mode {
            Mode::Bulk => format!("{}|{tool}|{iteration}", point.key()),
            Mode::Streaming => format!("{}|{tool}|streaming|{iteration}", point.key()),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A line of a results file written before streaming sweeps existed.
    const OLD_LINE: &str = r#"{"point":{"suite":"sweep-bulk","dataset":"1MiB-x64","file_size":1048576,"files":64,"bytes":67108864,"rtt_ms":50.0,"loss":0.0,"rate_bps":2000000000,"cc":"bbr"},"tool":"hetch","iteration":2,"seconds":0.5,"ok":true,"started_unix":1700000000}"#;

    #[test]
    fn records_written_before_streaming_read_as_bulk_with_their_old_key() {
        let r: Record = serde_json::from_str(OLD_LINE).unwrap();
        assert_eq!(r.mode, Mode::Bulk);
        assert_eq!(r.point.write_rate_bps, None);
        assert_eq!(
            (r.lag, r.writer_seconds, r.complete_seconds),
            (None, None, None)
        );
        // The key a resumed sweep looks for is the one the old harness wrote.
        assert_eq!(r.key(), "sweep-bulk|1MiB-x64|50|0|2000000000|bbr|hetch|2");
        assert_eq!(r.complete_gbit_per_s(), None);
        assert_eq!(r.writer_gbit_per_s(), None);
        // Written again, it gains only its mode.
        let again = serde_json::to_value(&r).unwrap();
        let old: serde_json::Value = serde_json::from_str(OLD_LINE).unwrap();
        let mut expected = old.clone();
        expected["mode"] = "bulk".into();
        assert_eq!(again, expected);
    }

    #[test]
    fn streaming_records_round_trip_and_have_keys_of_their_own() {
        let mut r: Record = serde_json::from_str(OLD_LINE).unwrap();
        r.point.suite = "sweep-streaming".into();
        r.point.write_rate_bps = Some(1_000_000_000);
        let bulk_key = r.key();
        r.mode = Mode::Streaming;
        r.lag = Some(Lag {
            samples: 640,
            p50_ms: 60.5,
            p99_ms: 180.0,
            max_ms: 240.0,
            mean_ms: 70.0,
        });
        r.writer_seconds = Some(0.25);
        r.complete_seconds = Some(0.4);
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains(r#""mode":"streaming""#), "{line}");
        assert!(line.contains(r#""p99_ms":180.0"#), "{line}");
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
        assert_eq!(
            bulk_key,
            "sweep-streaming|1MiB-x64|50|0|2000000000|bbr|w1000000000|hetch|2"
        );
        assert_eq!(
            r.key(),
            "sweep-streaming|1MiB-x64|50|0|2000000000|bbr|w1000000000|hetch|streaming|2"
        );
        // 64 MiB: 0.5 s to the copy's exit, 0.4 s to the last file, 0.25 s of writing.
        let gbit = |s: f64| 67_108_864.0 * 8.0 / s / 1e9;
        assert!((r.gbit_per_s() - gbit(0.5)).abs() < 1e-12);
        assert!((r.complete_gbit_per_s().unwrap() - gbit(0.4)).abs() < 1e-12);
        assert!((r.writer_gbit_per_s().unwrap() - gbit(0.25)).abs() < 1e-12);
        // A lag object without a mean (the copy's JSON always has one) still reads.
        let lag: Lag =
            serde_json::from_str(r#"{"samples":1,"p50_ms":1.0,"p99_ms":2.0,"max_ms":3.0}"#)
                .unwrap();
        assert_eq!(lag.mean_ms, 0.0);
        // A failed run has no "to the last file" throughput.
        r.ok = false;
        assert_eq!(r.complete_gbit_per_s(), None);
    }
}
