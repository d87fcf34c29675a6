//! Statistics over the runs: a [`Summary`] of a set of values, and the aggregation of
//! the runs into one [`Cell`] per (point, tool, mode), normalised to the best data
//! mover at that point (as paper 003 does) and to the memory-to-memory limit where it
//! ran.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde::Serialize;

use crate::record::{Meta, Mode, Point, Record};

/// Descriptive statistics of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (the mean of the two middle values for an even count).
    pub median: f64,
    /// Sample standard deviation (divides by n - 1); 0 for fewer than two values.
    pub sd: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// Summarises `values`; `None` when there are none.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let mean = sorted.iter().sum::<f64>() / n as f64;
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Summary {
        n,
        mean,
        median,
        sd: sample_sd(&sorted, mean),
        min: sorted[0],
        max: sorted[n - 1],
    })
}

/// Sample standard deviation around `mean`: a handful of iterations is a sample of the
/// tool's behaviour, not the whole population, hence n - 1.
fn sample_sd(values: &[f64], mean: f64) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let squares: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
    (squares / (values.len() - 1) as f64).sqrt()
}

/// The link part of a [`Point`] (everything but the dataset), with the writer's rate
/// of a streaming sweep: runs under equal links share a table and a plot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    /// Emulated round-trip time in milliseconds; `None` on plain loopback.
    pub rtt_ms: Option<f64>,
    /// Emulated packet loss (a fraction).
    pub loss: f64,
    /// Emulated link rate in bits per second (0: unlimited).
    pub rate_bps: u64,
    /// TCP congestion control.
    pub cc: String,
    /// Streaming sweeps: the writer's rate in bits per second (0: unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_rate_bps: Option<u64>,
}

impl Link {
    /// The link `point` was measured over.
    pub fn of(point: &Point) -> Link {
        Link {
            rtt_ms: point.rtt_ms,
            loss: point.loss,
            rate_bps: point.rate_bps,
            cc: point.cc.clone(),
            write_rate_bps: point.write_rate_bps,
        }
    }

    /// Orders links for reports: loopback first, then by RTT, loss, rate, cc and
    /// writer rate (an unlimited writer last), so tables read from the easiest link to
    /// the hardest.
    pub fn order(&self, other: &Link) -> Ordering {
        let rtt = |l: &Link| l.rtt_ms.unwrap_or(-1.0);
        let writer = |l: &Link| match l.write_rate_bps {
            None => 0,
            Some(0) => u64::MAX,
            Some(w) => w,
        };
        rtt(self)
            .total_cmp(&rtt(other))
            .then(self.loss.total_cmp(&other.loss))
            .then(self.rate_bps.cmp(&other.rate_bps))
            .then_with(|| self.cc.cmp(&other.cc))
            .then(writer(self).cmp(&writer(other)))
    }

    /// Whether `other` differs from this link only in its RTT: the latency
    /// sensitivity table compares such links.
    pub fn same_but_rtt(&self, other: &Link) -> bool {
        self.loss == other.loss
            && self.rate_bps == other.rate_bps
            && self.cc == other.cc
            && self.write_rate_bps == other.write_rate_bps
    }

    /// A human label: `loopback`, or e.g. `RTT 50 ms, loss 0.1 %, 1 Gbit/s, cc bbr`
    /// (parts at their defaults are left out).
    pub fn label(&self) -> String {
        let rtt = match self.rtt_ms {
            None => "loopback".to_string(),
            Some(rtt) => format!("RTT {rtt} ms"),
        };
        let rest = self.label_without_rtt();
        if rest.is_empty() {
            rtt
        } else {
            format!("{rtt}, {rest}")
        }
    }

    /// The label of everything but the RTT (empty when all of it is at its default):
    /// what links that [`Link::same_but_rtt`] have in common.
    pub fn label_without_rtt(&self) -> String {
        let mut parts = Vec::new();
        if self.loss > 0.0 {
            parts.push(format!("loss {} %", percent(self.loss)));
        }
        if self.rate_bps > 0 {
            parts.push(rate_label(self.rate_bps));
        }
        if self.cc != "default" && !self.cc.is_empty() {
            parts.push(format!("cc {}", self.cc));
        }
        match self.write_rate_bps {
            None => {}
            Some(0) => parts.push("writer unlimited".to_string()),
            Some(w) => parts.push(format!("writer {}", rate_label(w))),
        }
        parts.join(", ")
    }

    /// A file-name-safe label: `lo`, or e.g. `rtt50ms-loss0.1pct-1gbits-bbr`.
    pub fn slug(&self) -> String {
        let mut parts = Vec::new();
        match self.rtt_ms {
            None => parts.push("lo".to_string()),
            Some(rtt) => parts.push(format!("rtt{rtt}ms")),
        }
        if self.loss > 0.0 {
            parts.push(format!("loss{}pct", percent(self.loss)));
        }
        if self.rate_bps > 0 {
            parts.push(
                rate_label(self.rate_bps)
                    .replace([' ', '/'], "")
                    .to_lowercase(),
            );
        }
        if self.cc != "default" && !self.cc.is_empty() {
            parts.push(self.cc.clone());
        }
        match self.write_rate_bps {
            None => {}
            Some(0) => parts.push("writer-max".to_string()),
            Some(w) => parts.push(format!(
                "writer-{}",
                rate_label(w).replace([' ', '/'], "").to_lowercase()
            )),
        }
        parts
            .join("-")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }
}

/// A fraction in percent, rounded to 6 decimals so that binary floating point does not
/// show (0.0003 is `0.03`, not `0.030000000000000002`).
fn percent(fraction: f64) -> f64 {
    (fraction * 100.0 * 1e6).round() / 1e6
}

/// A link rate in the largest decimal unit that keeps it at least 1: `1 Gbit/s`,
/// `100 Mbit/s`, `2.5 Gbit/s`.
pub fn rate_label(bps: u64) -> String {
    const UNITS: [(f64, &str); 3] = [(1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")];
    let bps_f = bps as f64;
    for (scale, unit) in UNITS {
        if bps_f >= scale {
            return format!("{} {unit}", bps_f / scale);
        }
    }
    format!("{bps} bit/s")
}

/// A size in bytes in the largest binary unit that keeps it at least 1, as the axis
/// of a file-size sweep reads best: `512B`, `1K`, `4K`, `1M`, `1.5M`, `1G`.
pub fn size_label(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (scale, unit) in UNITS {
        if bytes >= scale {
            let v = bytes as f64 / scale as f64;
            return if bytes % scale == 0 {
                format!("{v}{unit}")
            } else {
                format!("{v:.1}{unit}")
            };
        }
    }
    format!("{bytes}B")
}

/// The aggregate of every run of one tool in one mode at one point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// Where the runs happened.
    pub point: Point,
    /// The tool.
    pub tool: String,
    /// Bulk or streaming.
    pub mode: Mode,
    /// Whether the tool is a limit (iperf3), not a data mover.
    pub is_limit: bool,
    /// Number of runs.
    pub runs: usize,
    /// Number of failed runs.
    pub failed: usize,
    /// The error of the first failed run, if any failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Throughput in Gbit/s over the successful runs; `None` when all failed.
    pub gbit_per_s: Option<Summary>,
    /// This tool's median over the best data mover's median at this point (the best
    /// gets 1.0); `None` for limits and tools whose runs all failed.
    pub normalised: Option<f64>,
    /// This tool's median over the limit's median at this point, where a limit ran;
    /// `None` for limits themselves.
    pub of_limit: Option<f64>,
    /// Streaming cells: the lag of the successful runs that reported one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<LagStats>,
    /// Streaming cells: throughput up to the moment every file was in place at the
    /// destination, over the successful runs that saw it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete_gbit_per_s: Option<Summary>,
    /// Streaming cells: the rate the writer achieved, over every run that timed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer_gbit_per_s: Option<Summary>,
}

/// The lag of a cell's streaming runs: each run's percentiles summarised over the runs
/// (a run's own p99 is over all of its samples; percentiles of different runs cannot
/// be pooled from their summaries, so the worst run's is kept too).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LagStats {
    /// Runs that reported lag.
    pub runs: usize,
    /// Samples over those runs.
    pub samples: u64,
    /// The runs' medians (ms).
    pub p50_ms: Summary,
    /// The runs' 99th percentiles (ms); `max` is the worst run's.
    pub p99_ms: Summary,
    /// The largest lag of any run (ms).
    pub max_ms: f64,
}

impl Cell {
    /// The median throughput in Gbit/s, if any run succeeded.
    pub fn median(&self) -> Option<f64> {
        self.gbit_per_s.map(|s| s.median)
    }

    /// The name the report and plots show: the tool, with ` (streaming)` for
    /// streaming runs, so both modes of one tool are told apart everywhere.
    pub fn name(&self) -> String {
        series_name(&self.tool, self.mode)
    }
}

/// The name of `tool`'s runs in `mode`: `hetch` or `hetch (streaming)`.
pub fn series_name(tool: &str, mode: Mode) -> String {
    match mode {
        Mode::Bulk => tool.to_string(),
        Mode::Streaming => format!("{tool} (streaming)"),
    }
}

/// Aggregates `records` into one [`Cell`] per (point, tool), in the order each first
/// appears, with `normalised` and `of_limit` filled in. A tool is a limit when `meta`
/// says so.
pub fn aggregate(records: &[Record], meta: &Meta) -> Vec<Cell> {
    let mut cells = group(records, meta);
    normalise(&mut cells);
    cells
}

/// Groups the runs into cells (no normalisation yet).
fn group(records: &[Record], meta: &Meta) -> Vec<Cell> {
    let mut index: HashMap<(String, String, Mode), usize> = HashMap::new();
    let mut runs: Vec<Vec<&Record>> = Vec::new();
    for r in records {
        let key = (r.point.key(), r.tool.clone(), r.mode);
        let i = *index.entry(key).or_insert_with(|| {
            runs.push(Vec::new());
            runs.len() - 1
        });
        runs[i].push(r);
    }
    runs.iter().map(|rs| cell_of(rs, meta)).collect()
}

/// The cell of the runs `rs` (non-empty, all of one tool in one mode at one point).
fn cell_of(rs: &[&Record], meta: &Meta) -> Cell {
    let first = rs[0];
    let ok: Vec<f64> = rs.iter().filter(|r| r.ok).map(|r| r.gbit_per_s()).collect();
    let first_error = rs
        .iter()
        .find(|r| !r.ok)
        .map(|r| r.error.clone().unwrap_or_else(|| "failed".to_string()));
    let complete: Vec<f64> = rs.iter().filter_map(|r| r.complete_gbit_per_s()).collect();
    let writer: Vec<f64> = rs.iter().filter_map(|r| r.writer_gbit_per_s()).collect();
    Cell {
        point: first.point.clone(),
        tool: first.tool.clone(),
        mode: first.mode,
        is_limit: meta
            .tools
            .iter()
            .any(|t| t.name == first.tool && t.is_limit),
        runs: rs.len(),
        failed: rs.len() - ok.len(),
        first_error,
        gbit_per_s: summarize(&ok),
        normalised: None,
        of_limit: None,
        lag: lag_stats(rs),
        complete_gbit_per_s: summarize(&complete),
        writer_gbit_per_s: summarize(&writer),
    }
}

/// The lag of the successful runs among `rs` that reported one.
fn lag_stats(rs: &[&Record]) -> Option<LagStats> {
    let lags: Vec<_> = rs.iter().filter(|r| r.ok).filter_map(|r| r.lag).collect();
    let p50: Vec<f64> = lags.iter().map(|l| l.p50_ms).collect();
    let p99: Vec<f64> = lags.iter().map(|l| l.p99_ms).collect();
    Some(LagStats {
        runs: lags.len(),
        samples: lags.iter().map(|l| l.samples).sum(),
        p50_ms: summarize(&p50)?,
        p99_ms: summarize(&p99)?,
        max_ms: lags.iter().map(|l| l.max_ms).fold(0.0, f64::max),
    })
}

/// The datasets of `cells`, each once, by file size and then name: small files first,
/// the order the sweeps and the tables read in.
pub fn dataset_order(cells: &[Cell]) -> Vec<String> {
    let mut seen: Vec<(u64, &str)> = Vec::new();
    for c in cells {
        let d = (c.point.file_size, c.point.dataset.as_str());
        if !seen.contains(&d) {
            seen.push(d);
        }
    }
    seen.sort();
    seen.dedup_by(|a, b| a.1 == b.1);
    seen.into_iter().map(|(_, d)| d.to_string()).collect()
}

/// The names ([`Cell::name`]) of `cells`, each once: those of the tools named in
/// `preferred` in its order (the order the benchmark listed them), each tool's bulk
/// runs before its streaming runs, then any others by name.
pub fn tool_order(cells: &[Cell], preferred: &[String]) -> Vec<String> {
    let present = |t: &String| cells.iter().any(|c| &c.name() == t);
    // `preferred` may hold names already (the report passes an order back in).
    let mut wanted: Vec<String> = Vec::new();
    for t in preferred {
        for name in [t.clone(), series_name(t, Mode::Streaming)] {
            if !wanted.contains(&name) {
                wanted.push(name);
            }
        }
    }
    let mut tools: Vec<String> = wanted.iter().filter(|t| present(t)).cloned().collect();
    let mut rest: Vec<String> = cells
        .iter()
        .map(Cell::name)
        .filter(|t| !wanted.contains(t))
        .collect();
    rest.sort();
    rest.dedup();
    tools.extend(rest);
    tools
}

/// Fills in `normalised` and `of_limit` of every data mover, point by point.
fn normalise(cells: &mut [Cell]) {
    let mut best: HashMap<String, f64> = HashMap::new();
    let mut limit: HashMap<String, f64> = HashMap::new();
    for c in cells.iter() {
        let Some(m) = c.median() else { continue };
        let slot = if c.is_limit { &mut limit } else { &mut best };
        let v = slot.entry(c.point.key()).or_insert(m);
        *v = v.max(m);
    }
    for c in cells.iter_mut().filter(|c| !c.is_limit) {
        let Some(m) = c.median() else { continue };
        let key = c.point.key();
        c.normalised = ratio(m, best.get(&key).copied());
        c.of_limit = ratio(m, limit.get(&key).copied());
    }
}

/// `value / of`, unless `of` is missing or zero (nothing to compare with).
fn ratio(value: f64, of: Option<f64>) -> Option<f64> {
    of.filter(|&o| o > 0.0).map(|o| value / o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ToolInfo;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn summary_of_nothing_is_none() {
        assert_eq!(summarize(&[]), None);
    }

    #[test]
    fn summary_of_one_value_has_zero_sd() {
        let s = summarize(&[3.5]).unwrap();
        assert_eq!(
            (s.n, s.mean, s.median, s.sd, s.min, s.max),
            (1, 3.5, 3.5, 0.0, 3.5, 3.5)
        );
    }

    #[test]
    fn summary_of_odd_count() {
        // Unsorted on purpose: 1, 2, 3 -> mean 2, median 2, sd sqrt((1+0+1)/2) = 1.
        let s = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!(s.n, 3);
        assert!(close(s.mean, 2.0));
        assert!(close(s.median, 2.0));
        assert!(close(s.sd, 1.0));
        assert_eq!((s.min, s.max), (1.0, 3.0));
    }

    #[test]
    fn summary_of_even_count() {
        // Mean 5; squared deviations 9+1+1+1+0+0+4+16 = 32; sample sd = sqrt(32/7).
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0));
        assert!(close(s.median, 4.5));
        assert!(close(s.sd, (32.0f64 / 7.0).sqrt()));
        assert_eq!((s.min, s.max), (2.0, 9.0));
    }

    fn point(dataset: &str, rtt_ms: Option<f64>) -> Point {
        Point {
            suite: "datasets".into(),
            dataset: dataset.into(),
            file_size: 1 << 20,
            files: 1000,
            bytes: 1000 << 20,
            rtt_ms,
            loss: 0.0,
            rate_bps: 0,
            cc: "default".into(),
            write_rate_bps: None,
        }
    }

    fn run(point: &Point, tool: &str, iteration: u32, seconds: f64, ok: bool) -> Record {
        Record {
            point: point.clone(),
            tool: tool.into(),
            iteration,
            seconds,
            ok,
            error: (!ok).then(|| format!("{tool} broke")),
            started_unix: 0,
            mode: Mode::Bulk,
            lag: None,
            writer_seconds: None,
            complete_seconds: None,
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

    #[test]
    fn aggregate_normalises_to_best_mover_and_limit() {
        let p = point("d", Some(10.0));
        let records = [
            run(&p, "a", 1, 2.0, true),
            run(&p, "a", 2, 2.0, true),
            run(&p, "b", 1, 4.0, true),
            run(&p, "b", 2, 1.0, false),
            run(&p, "iperf3", 1, 1.0, true),
        ];
        let cells = aggregate(&records, &meta());
        assert_eq!(cells.len(), 3);
        let (a, b, limit) = (&cells[0], &cells[1], &cells[2]);
        assert_eq!((a.tool.as_str(), a.runs, a.failed), ("a", 2, 0));
        assert_eq!(a.normalised, Some(1.0));
        assert!(close(b.normalised.unwrap(), 0.5));
        assert_eq!((b.runs, b.failed), (2, 1));
        assert_eq!(b.first_error.as_deref(), Some("b broke"));
        assert!(close(a.of_limit.unwrap(), 0.5));
        assert!(limit.is_limit);
        assert_eq!((limit.normalised, limit.of_limit), (None, None));
    }

    #[test]
    fn aggregate_keeps_points_apart() {
        let (p, q) = (point("d", None), point("d", Some(50.0)));
        let records = [run(&p, "a", 1, 1.0, true), run(&q, "a", 1, 1.0, false)];
        let cells = aggregate(&records, &meta());
        assert_eq!(cells.len(), 2);
        assert_eq!(cells[0].normalised, Some(1.0));
        assert_eq!(cells[0].of_limit, None);
        assert_eq!((cells[1].gbit_per_s, cells[1].normalised), (None, None));
    }

    #[test]
    fn datasets_by_size_then_name() {
        let mut big = point("big", None);
        big.file_size = 1 << 30;
        let mut small = point("small", None);
        small.file_size = 1 << 10;
        let records = [
            run(&big, "a", 1, 1.0, true),
            run(&point("m2", None), "a", 1, 1.0, true),
            run(&point("m1", None), "a", 1, 1.0, true),
            run(&small, "a", 1, 1.0, true),
        ];
        let cells = aggregate(&records, &meta());
        assert_eq!(dataset_order(&cells), ["small", "m1", "m2", "big"]);
    }

    #[test]
    fn tools_in_preferred_order_then_by_name() {
        let p = point("d", None);
        let records = [
            run(&p, "z", 1, 1.0, true),
            run(&p, "y", 1, 1.0, true),
            run(&p, "b", 1, 1.0, true),
            run(&p, "a", 1, 1.0, true),
        ];
        let cells = aggregate(&records, &meta());
        let preferred = ["b".to_string(), "gone".to_string(), "a".to_string()];
        assert_eq!(tool_order(&cells, &preferred), ["b", "a", "y", "z"]);
    }

    #[test]
    fn streaming_cells_are_apart_and_follow_their_tool() {
        let p = point("d", None);
        let mut streaming = run(&p, "hetch", 1, 2.0, true);
        streaming.mode = Mode::Streaming;
        let records = [
            run(&p, "iperf3", 1, 1.0, true),
            streaming,
            run(&p, "hetch", 1, 1.0, true),
        ];
        let cells = aggregate(&records, &meta());
        assert_eq!(
            cells.len(),
            3,
            "bulk and streaming runs of one tool: two cells"
        );
        let preferred = ["hetch".to_string(), "iperf3".to_string()];
        let order = tool_order(&cells, &preferred);
        assert_eq!(order, ["hetch", "hetch (streaming)", "iperf3"]);
        // An order passed back in (as the report does with its plots) stays the same.
        assert_eq!(tool_order(&cells, &order), order);
        let s = cells.iter().find(|c| c.mode == Mode::Streaming).unwrap();
        assert_eq!(s.name(), "hetch (streaming)");
        assert!(close(s.normalised.unwrap(), 0.5));
    }

    #[test]
    fn link_labels_and_order() {
        let lo = Link::of(&point("d", None));
        let mut far = Link::of(&point("d", Some(100.0)));
        far.loss = 0.001;
        far.rate_bps = 1_000_000_000;
        far.cc = "bbr".into();
        assert_eq!(lo.label(), "loopback");
        assert_eq!(lo.slug(), "lo");
        assert_eq!(far.label(), "RTT 100 ms, loss 0.1 %, 1 Gbit/s, cc bbr");
        assert_eq!(far.slug(), "rtt100ms-loss0.1pct-1gbits-bbr");
        assert_eq!(lo.order(&far), Ordering::Less);
        assert!(!lo.same_but_rtt(&far));
        far.loss = 0.0003;
        assert_eq!(far.label_without_rtt(), "loss 0.03 %, 1 Gbit/s, cc bbr");
        // Streaming sweeps name the writer; an unlimited writer comes after paced ones.
        let mut paced = lo.clone();
        paced.write_rate_bps = Some(1_000_000_000);
        let mut unlimited = lo.clone();
        unlimited.write_rate_bps = Some(0);
        assert_eq!(paced.label(), "loopback, writer 1 Gbit/s");
        assert_eq!(paced.slug(), "lo-writer-1gbits");
        assert_eq!(unlimited.label(), "loopback, writer unlimited");
        assert_eq!(unlimited.slug(), "lo-writer-max");
        assert_eq!(paced.order(&unlimited), Ordering::Less);
        assert!(!paced.same_but_rtt(&unlimited));
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(512), "512B");
        assert_eq!(size_label(1024), "1K");
        assert_eq!(size_label(4096), "4K");
        assert_eq!(size_label(1 << 20), "1M");
        assert_eq!(size_label(3 << 19), "1.5M");
        assert_eq!(size_label(1 << 30), "1G");
    }

    #[test]
    fn rate_labels() {
        assert_eq!(rate_label(1_000_000_000), "1 Gbit/s");
        assert_eq!(rate_label(2_500_000_000), "2.5 Gbit/s");
        assert_eq!(rate_label(100_000_000), "100 Mbit/s");
        assert_eq!(rate_label(512), "512 bit/s");
    }
}
