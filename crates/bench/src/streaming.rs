//! Streaming against bulk at each point of a streaming sweep (issue 5, after the zx
//! paper's Figs. 8 and 9): the streaming copy's throughput over the bulk copy's of the
//! same final files, and the streaming copy's lag against RTT + 250 ms.
//!
//! Which target applies depends on the writer. Streaming cannot outrun the writer, so
//! the throughput target is judged only with an unlimited writer (a paced writer caps
//! streaming at its own rate, whatever the link could do). Lag is meaningful only while
//! the writer stays under the link rate (above it, data queue up at the source and lag
//! grows without bound), so the lag target is judged only with a writer whose rate is
//! set and below the link's (any set rate on loopback, which has no link rate).

use serde::Serialize;

use crate::record::Mode;
use crate::stats::{Cell, LagStats, Summary};

/// The share of the bulk throughput streaming must keep (within 10 %).
pub const RATIO_TARGET: f64 = 0.9;

/// The lag target is the link's RTT plus this many milliseconds.
pub const LAG_MARGIN_MS: f64 = 250.0;

/// How many runs a cell had and how many failed (the first failure's error with them),
/// so that a table of medians still shows what did not work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Runs {
    /// Runs in all.
    pub runs: usize,
    /// Runs that failed.
    pub failed: usize,
    /// The first failed run's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl Runs {
    fn of(c: &Cell) -> Runs {
        Runs {
            runs: c.runs,
            failed: c.failed,
            first_error: c.first_error.clone(),
        }
    }
}

/// One row of the streaming table: a data mover at one point, both modes side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The dataset.
    pub dataset: String,
    /// Bytes per file (the eventual size, for streaming).
    pub file_size: u64,
    /// Number of files.
    pub files: u64,
    /// The data mover.
    pub tool: String,
    /// The writer's rate in bits per second (0: unlimited).
    pub write_rate_bps: u64,
    /// Rate the writer achieved, Gbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer_gbit_per_s: Option<Summary>,
    /// The streaming runs.
    pub streaming_runs: Runs,
    /// The bulk runs, if any ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bulk_runs: Option<Runs>,
    /// Bulk throughput of the same final files, Gbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bulk_gbit_per_s: Option<Summary>,
    /// Streaming throughput (the copy's start to its exit), Gbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streaming_gbit_per_s: Option<Summary>,
    /// Median streaming over median bulk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Streaming throughput up to the moment every file was in place, Gbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete_gbit_per_s: Option<Summary>,
    /// Median of that over median bulk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete_ratio: Option<f64>,
    /// The streaming runs' lag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<LagStats>,
    /// RTT + 250 ms (RTT 0 on loopback).
    pub lag_target_ms: f64,
    /// Whether `ratio` reaches [`RATIO_TARGET`]; `None` where the target does not
    /// apply (a paced writer) or there is no ratio.
    pub ratio_pass: Option<bool>,
    /// Whether the worst run's p99 lag is below `lag_target_ms`; `None` where the
    /// target does not apply (writer unlimited, or not under the link rate) or no run
    /// reported lag.
    pub lag_pass: Option<bool>,
    /// Median throughput of the limit (iperf3) at this point, Gbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_gbit_per_s: Option<f64>,
}

/// Why a target is not judged at a point, for the report; `None` when it is.
pub fn ratio_not_applicable(write_rate_bps: u64) -> Option<&'static str> {
    (write_rate_bps > 0).then_some("writer-paced")
}

/// Why the lag target is not judged for a writer of `write_rate_bps` on a link of
/// `link_rate_bps` (0: unlimited); `None` when it is.
pub fn lag_not_applicable(write_rate_bps: u64, link_rate_bps: u64) -> Option<&'static str> {
    if write_rate_bps == 0 {
        Some("writer unlimited")
    } else if link_rate_bps > 0 && write_rate_bps >= link_rate_bps {
        Some("writer not under the link rate")
    } else {
        None
    }
}

/// The rows of `cells` (one suite at one link): one per streaming data-mover cell,
/// with the same tool's bulk cell and the limit at the same point. Empty when no cell
/// is a streaming one.
pub fn comparisons(cells: &[Cell]) -> Vec<Comparison> {
    cells
        .iter()
        .filter(|c| c.mode == Mode::Streaming && !c.is_limit)
        .map(|s| {
            let key = s.point.key();
            let bulk = cells.iter().find(|c| {
                c.mode == Mode::Bulk && c.tool == s.tool && !c.is_limit && c.point.key() == key
            });
            let limit = cells
                .iter()
                .find(|c| c.is_limit && c.point.key() == key)
                .and_then(Cell::median);
            let write_rate = s.point.write_rate_bps.unwrap_or(0);
            let bulk_median = bulk.and_then(Cell::median);
            let ratio = ratio_of(s.median(), bulk_median);
            let complete_ratio = ratio_of(s.complete_gbit_per_s.map(|x| x.median), bulk_median);
            let lag_target_ms = s.point.rtt_ms.unwrap_or(0.0) + LAG_MARGIN_MS;
            let ratio_pass = match ratio_not_applicable(write_rate) {
                Some(_) => None,
                None => ratio.map(|r| r >= RATIO_TARGET),
            };
            let lag_pass = match lag_not_applicable(write_rate, s.point.rate_bps) {
                Some(_) => None,
                None => s.lag.map(|l| l.p99_ms.max < lag_target_ms),
            };
            Comparison {
                dataset: s.point.dataset.clone(),
                file_size: s.point.file_size,
                files: s.point.files,
                tool: s.tool.clone(),
                write_rate_bps: write_rate,
                writer_gbit_per_s: s.writer_gbit_per_s,
                streaming_runs: Runs::of(s),
                bulk_runs: bulk.map(Runs::of),
                bulk_gbit_per_s: bulk.and_then(|b| b.gbit_per_s),
                streaming_gbit_per_s: s.gbit_per_s,
                ratio,
                complete_gbit_per_s: s.complete_gbit_per_s,
                complete_ratio,
                lag: s.lag,
                lag_target_ms,
                ratio_pass,
                lag_pass,
                limit_gbit_per_s: limit,
            }
        })
        .collect()
}

/// `value / of`, when both exist and `of` is not zero.
fn ratio_of(value: Option<f64>, of: Option<f64>) -> Option<f64> {
    match (value, of) {
        (Some(v), Some(o)) if o > 0.0 => Some(v / o),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Lag, Meta, Point, Record, ToolInfo};
    use crate::stats::aggregate;

    const GB: u64 = 1_000_000_000;

    fn point(rtt_ms: Option<f64>, rate_bps: u64, write_rate_bps: u64) -> Point {
        Point {
            suite: "sweep-streaming".into(),
            dataset: "4MiB-x250".into(),
            file_size: 4 << 20,
            files: 250,
            bytes: GB,
            rtt_ms,
            loss: 0.0,
            rate_bps,
            cc: "bbr".into(),
            write_rate_bps: Some(write_rate_bps),
        }
    }

    fn run(p: &Point, tool: &str, mode: Mode, it: u32, seconds: f64, p99: Option<f64>) -> Record {
        Record {
            point: p.clone(),
            tool: tool.into(),
            iteration: it,
            seconds,
            ok: true,
            error: None,
            started_unix: 0,
            mode,
            lag: p99.map(|p99_ms| Lag {
                samples: 100,
                p50_ms: p99_ms / 2.0,
                p99_ms,
                max_ms: p99_ms * 2.0,
                mean_ms: p99_ms / 2.0,
            }),
            writer_seconds: (mode == Mode::Streaming).then_some(seconds / 2.0),
            complete_seconds: (mode == Mode::Streaming).then_some(seconds - 2.0),
        }
    }

    fn meta() -> Meta {
        Meta {
            tools: vec![ToolInfo {
                name: "iperf3".into(),
                is_limit: true,
                ..ToolInfo::default()
            }],
            ..Meta::default()
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn ratio_and_lag_with_a_paced_writer_under_the_link_rate() {
        // RTT 50 ms, 2 Gbit/s link, writer at 1 Gbit/s: the lag target applies (300 ms),
        // the throughput target does not (the writer caps streaming).
        let p = point(Some(50.0), 2 * GB, GB);
        let records = [
            run(&p, "hetch", Mode::Streaming, 1, 10.0, Some(120.0)),
            run(&p, "hetch", Mode::Bulk, 1, 5.0, None),
            run(&p, "hetch", Mode::Streaming, 2, 10.0, Some(310.0)),
            run(&p, "hetch", Mode::Bulk, 2, 5.0, None),
            run(&p, "iperf3", Mode::Bulk, 1, 4.0, None),
        ];
        let cells = aggregate(&records, &meta());
        let rows = comparisons(&cells);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        // 1 GB in 10 s = 0.8 Gbit/s against 1.6 Gbit/s in bulk.
        assert!(close(r.streaming_gbit_per_s.unwrap().median, 0.8));
        assert!(close(r.bulk_gbit_per_s.unwrap().median, 1.6));
        assert!(close(r.ratio.unwrap(), 0.5));
        // To the last file: 8 s, 1.0 Gbit/s, 0.625 of bulk.
        assert!(close(r.complete_ratio.unwrap(), 0.625));
        assert!(close(r.writer_gbit_per_s.unwrap().median, 1.6));
        assert_eq!(r.ratio_pass, None, "a paced writer: no throughput verdict");
        assert!(close(r.lag_target_ms, 300.0));
        // The worst run's p99 (310 ms) misses 300 ms although the median (215) passes.
        let lag = r.lag.unwrap();
        assert_eq!((lag.runs, lag.samples), (2, 200));
        assert!(close(lag.p99_ms.median, 215.0) && close(lag.p99_ms.max, 310.0));
        assert!(close(lag.max_ms, 620.0));
        assert_eq!(r.lag_pass, Some(false));
        assert!(close(r.limit_gbit_per_s.unwrap(), 2.0));
    }

    #[test]
    fn throughput_target_with_an_unlimited_writer() {
        let p = point(None, 0, 0);
        let pass = [
            run(&p, "hetch", Mode::Streaming, 1, 10.5, Some(40.0)),
            run(&p, "hetch", Mode::Bulk, 1, 10.0, None),
        ];
        let r = &comparisons(&aggregate(&pass, &meta()))[0];
        assert!(close(r.ratio.unwrap(), 10.0 / 10.5));
        assert_eq!(r.ratio_pass, Some(true));
        assert_eq!(r.lag_pass, None, "an unlimited writer: no lag verdict");
        assert!(close(r.lag_target_ms, 250.0), "loopback: RTT 0");
        assert_eq!(r.limit_gbit_per_s, None);

        let miss = [
            run(&p, "hetch", Mode::Streaming, 1, 12.0, None),
            run(&p, "hetch", Mode::Bulk, 1, 10.0, None),
        ];
        let r = &comparisons(&aggregate(&miss, &meta()))[0];
        assert_eq!(r.ratio_pass, Some(false));
        assert_eq!(r.lag, None, "no run reported lag");
    }

    #[test]
    fn lag_passes_below_the_target_and_needs_a_writer_under_the_link() {
        let under = point(Some(0.0), 2 * GB, GB);
        let records = [
            run(&under, "hetch", Mode::Streaming, 1, 10.0, Some(249.0)),
            run(&under, "hetch", Mode::Bulk, 1, 5.0, None),
        ];
        assert_eq!(
            comparisons(&aggregate(&records, &meta()))[0].lag_pass,
            Some(true)
        );

        let at_link = point(Some(0.0), GB, GB);
        let records = [run(&at_link, "hetch", Mode::Streaming, 1, 10.0, Some(1.0))];
        let r = &comparisons(&aggregate(&records, &meta()))[0];
        assert_eq!(r.lag_pass, None);
        assert_eq!(r.bulk_gbit_per_s, None);
        assert_eq!(r.ratio, None, "no bulk cell, no ratio");
        assert_eq!(
            lag_not_applicable(GB, GB),
            Some("writer not under the link rate")
        );
        assert_eq!(lag_not_applicable(GB, 0), None, "loopback has no link rate");
        assert_eq!(lag_not_applicable(0, 0), Some("writer unlimited"));
        assert_eq!(ratio_not_applicable(0), None);
    }

    #[test]
    fn failed_streaming_runs_give_no_figures_and_bulk_only_points_no_rows() {
        let p = point(None, 0, GB);
        let mut failed = run(&p, "hetch", Mode::Streaming, 1, 10.0, Some(10.0));
        failed.ok = false;
        failed.error = Some("copy ended before the writer finished".into());
        let records = [failed, run(&p, "hetch", Mode::Bulk, 1, 5.0, None)];
        let r = &comparisons(&aggregate(&records, &meta()))[0];
        assert_eq!((r.streaming_gbit_per_s, r.ratio, r.lag), (None, None, None));
        assert_eq!(r.lag_pass, None);
        assert_eq!((r.streaming_runs.runs, r.streaming_runs.failed), (1, 1));
        assert_eq!(
            r.streaming_runs.first_error.as_deref(),
            Some("copy ended before the writer finished")
        );
        let bulk = r.bulk_runs.as_ref().unwrap();
        assert_eq!(
            (bulk.runs, bulk.failed, bulk.first_error.as_deref()),
            (1, 0, None)
        );
        let bulk_only = [run(&p, "hetch", Mode::Bulk, 1, 5.0, None)];
        assert!(comparisons(&aggregate(&bulk_only, &meta())).is_empty());
    }
}
