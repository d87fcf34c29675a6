//! Predicting a transfer's duration from its shape and the rates of the links of the
//! chain: a bottleneck model small enough to explain.
//!
//! A transfer of `n` files and `B` bytes over a path of round trip `T` takes
//!
//! ```text
//! t = SETUP_RTTS·T + max( n·f + B·c ,  B / min(L, W) + RAMP_RTTS·T )
//! ```
//!
//! - `n·f + B·c` is the work of this machine: `f` seconds per file (listing, opening,
//!   creating, renaming, the per-file protocol) and `c` seconds per byte (reading,
//!   hashing, encrypting, writing, reading back), both ends being on a machine like
//!   this one. They add up because the same cores do both.
//! - `B / min(L, W)` is the path: its rate `L` or, when lower, what the streams'
//!   windows carry per round trip (`W`, see [`crate::window`]), after `RAMP_RTTS`
//!   round trips of slow start.
//! - The machine and the path overlap (blocks are read while others are on the
//!   wire); set-up (connection, TLS, session, data streams) does not.
//!
//! `f`, `c` and `RAMP_RTTS` are fitted (`bench/predict_fit.py`, least MAPE) on the
//! benchmark harness's own runs of the six datasets of seed 003 on the testbed
//! (2 Gbit/s, RTT 0/20/50/100 ms; see docs/BENCHMARKS.md, issue 18).

use std::time::Duration;

use serde::Serialize;

/// Round trips before the first block moves: TCP and TLS of the control connection,
/// the hello, and the data streams' TCP, TLS and hellos (overlapped with it).
pub const SETUP_RTTS: f64 = 5.0;

/// Round trips the path costs beyond the bytes themselves: the streams growing their
/// windows (slow start), and at the end the last blocks' acknowledgements, the files'
/// checks and renames and the session's summary. Fitted: 17.
pub const RAMP_RTTS: f64 = 17.0;

/// What is to be moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// Files.
    pub files: u64,
    /// Bytes in them.
    pub bytes: u64,
}

/// The rates of the chain's links.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    /// Seconds of this machine per file.
    pub per_file: f64,
    /// Seconds of this machine per byte.
    pub per_byte: f64,
    /// The path's rate, bytes per second (`None`: unknown, taken as unbounded).
    pub link: Option<u64>,
    /// The path's round trip.
    pub rtt: Duration,
    /// What the streams' windows carry per second over `rtt` (`None`: unbounded).
    pub window: Option<u64>,
}

impl Rates {
    /// This machine's costs as fitted on the benchmark harness's runs (2 cores, TLS,
    /// BLAKE3, read-back verification, page cache dropped before each run).
    pub fn fitted(link: Option<u64>, rtt: Duration, window: Option<u64>) -> Self {
        Rates {
            per_file: FITTED_PER_FILE,
            per_byte: FITTED_PER_BYTE,
            link,
            rtt,
            window,
        }
    }
}

/// Seconds per file, fitted (see the module's documentation).
pub const FITTED_PER_FILE: f64 = 225e-6;
/// Seconds per byte, fitted: about 2.6 Gbit/s of the whole machine (cold cache, TLS,
/// read-back verification).
pub const FITTED_PER_BYTE: f64 = 3.1e-9;

/// The predicted transfer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Seconds, set-up included.
    pub seconds: f64,
    /// Bytes per second over those seconds.
    pub bytes_per_second: f64,
    /// The link that sets the time: `this machine (per file)`, `this machine (per
    /// byte)`, `path rate`, `stream windows` or `set-up`.
    pub limited_by: &'static str,
    /// Seconds of each term: machine, path, set-up.
    pub machine_seconds: f64,
    /// Seconds the path needs (ramp included).
    pub path_seconds: f64,
    /// Seconds of set-up.
    pub setup_seconds: f64,
}

impl Prediction {
    /// One line for people.
    pub fn to_text(&self) -> String {
        format!(
            "predicted: {:.1} s at {}/s, limited by {} (machine {:.1} s, path {:.1} s, set-up {:.2} s)",
            self.seconds,
            hetch_units::human_bytes(self.bytes_per_second),
            self.limited_by,
            self.machine_seconds,
            self.path_seconds,
            self.setup_seconds,
        )
    }
}

/// Predicts moving `shape` through a chain of `rates`.
pub fn predict(shape: Shape, rates: &Rates) -> Prediction {
    let rtt = rates.rtt.as_secs_f64();
    let file_work = shape.files as f64 * rates.per_file;
    let byte_work = shape.bytes as f64 * rates.per_byte;
    let machine = file_work + byte_work;
    let (net_rate, net_name) = match (rates.link, rates.window) {
        (Some(l), Some(w)) if w < l => (Some(w), "stream windows"),
        (Some(l), _) => (Some(l), "path rate"),
        (None, Some(w)) => (Some(w), "stream windows"),
        (None, None) => (None, "path rate"),
    };
    let path = match net_rate {
        Some(r) if shape.bytes > 0 => shape.bytes as f64 / r.max(1) as f64 + RAMP_RTTS * rtt,
        _ => 0.0,
    };
    let setup = SETUP_RTTS * rtt;
    let seconds = setup + machine.max(path);
    let limited_by = if setup > machine.max(path) {
        "set-up"
    } else if path > machine {
        net_name
    } else if file_work > byte_work {
        "this machine (per file)"
    } else {
        "this machine (per byte)"
    };
    Prediction {
        seconds,
        bytes_per_second: if seconds > 0.0 {
            shape.bytes as f64 / seconds
        } else {
            0.0
        },
        limited_by,
        machine_seconds: machine,
        path_seconds: path,
        setup_seconds: setup,
    }
}

/// The mean absolute percentage error of `predicted` against `measured` (pairs), in
/// percent, as seed 003 reports its models' accuracy.
pub fn mape(pairs: &[(f64, f64)]) -> f64 {
    if pairs.is_empty() {
        return 0.0;
    }
    let sum: f64 = pairs
        .iter()
        .map(|(predicted, measured)| ((predicted - measured) / measured).abs())
        .sum();
    100.0 * sum / pairs.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn rates(link: Option<u64>, rtt: Duration, window: Option<u64>) -> Rates {
        Rates {
            per_file: 1e-4,
            per_byte: 1e-9,
            link,
            rtt,
            window,
        }
    }

    #[test]
    fn the_slowest_link_sets_the_time() {
        let gib = Shape {
            files: 1,
            bytes: 1 << 30,
        };
        // 1 GB/s of machine against a 250 MB/s path: the path, plus its ramp.
        let p = predict(gib, &rates(Some(250_000_000), Duration::ZERO, None));
        assert_eq!(p.limited_by, "path rate");
        assert!((p.seconds - 4.294967296).abs() < 1e-9, "{p:?}");
        // Windows carrying less than the path: they set it.
        let w = predict(gib, &rates(Some(250_000_000), 100 * MS, Some(125_000_000)));
        assert_eq!(w.limited_by, "stream windows");
        let expected = 0.5 + (1u64 << 30) as f64 / 125e6 + RAMP_RTTS * 0.1;
        assert!((w.seconds - expected).abs() < 1e-9, "{w:?}");
        // An unknown path: the machine.
        let m = predict(gib, &rates(None, Duration::ZERO, None));
        assert_eq!(m.limited_by, "this machine (per byte)");
        assert!((m.bytes_per_second - 1e9).abs() < 1e6, "{m:?}");
    }

    #[test]
    fn many_small_files_are_limited_per_file_and_nothing_moves_in_set_up_alone() {
        let small = Shape {
            files: 100_000,
            bytes: 1_000_000_000,
        };
        let p = predict(small, &rates(Some(250_000_000), Duration::ZERO, None));
        assert_eq!(p.limited_by, "this machine (per file)");
        assert!((p.seconds - 11.0).abs() < 1e-9, "{p:?}");
        let empty = Shape { files: 0, bytes: 0 };
        let e = predict(empty, &rates(Some(1), 100 * MS, None));
        assert_eq!((e.limited_by, e.bytes_per_second), ("set-up", 0.0));
        assert!(e.to_text().contains("set-up"), "{}", e.to_text());
    }

    #[test]
    fn mape_is_the_mean_relative_error_in_percent() {
        assert_eq!(mape(&[]), 0.0);
        let m = mape(&[(11.0, 10.0), (9.0, 10.0), (20.0, 10.0)]);
        assert!((m - 40.0).abs() < 1e-9, "{m}");
    }

    /// Medians of the runs recorded by `hetch-lab bench datasets --rtt
    /// 0ms,20ms,50ms,100ms --rate 2gbit` (bench/results/2026-11-26-predict-grid.jsonl):
    /// (files, bytes, RTT ms, seconds).
    const RECORDED: [(u64, u64, u64, f64); 24] = [
        (100_000, 1_048_500_000, 0, 21.09),
        (10_000, 1_048_570_000, 0, 5.84),
        (1_000, 1_048_576_000, 0, 4.38),
        (100, 1_048_576_000, 0, 4.52),
        (10, 1_048_576_000, 0, 4.93),
        (1, 1_048_576_000, 0, 4.51),
        (100_000, 1_048_500_000, 20, 25.24),
        (10_000, 1_048_570_000, 20, 5.77),
        (1_000, 1_048_576_000, 20, 4.63),
        (100, 1_048_576_000, 20, 4.71),
        (10, 1_048_576_000, 20, 4.95),
        (1, 1_048_576_000, 20, 4.83),
        (100_000, 1_048_500_000, 50, 26.67),
        (10_000, 1_048_570_000, 50, 6.26),
        (1_000, 1_048_576_000, 50, 5.39),
        (100, 1_048_576_000, 50, 5.59),
        (10, 1_048_576_000, 50, 5.16),
        (1, 1_048_576_000, 50, 5.33),
        (100_000, 1_048_500_000, 100, 26.84),
        (10_000, 1_048_570_000, 100, 7.46),
        (1_000, 1_048_576_000, 100, 7.97),
        (100, 1_048_576_000, 100, 6.15),
        (10, 1_048_576_000, 100, 6.12),
        (1, 1_048_576_000, 100, 6.13),
    ];

    #[test]
    fn the_fitted_model_is_within_15_percent_of_the_recorded_runs() {
        let pairs: Vec<(f64, f64)> = RECORDED
            .iter()
            .map(|&(files, bytes, rtt, seconds)| {
                let rates = Rates::fitted(Some(250_000_000), rtt as u32 * MS, None);
                (predict(Shape { files, bytes }, &rates).seconds, seconds)
            })
            .collect();
        let m = mape(&pairs);
        assert!(m <= 15.0, "MAPE {m:.1}%");
        // The small files are limited by this machine, the large ones by the path.
        let at = |files, rtt: u32| {
            let bytes = 1_048_576_000;
            predict(
                Shape { files, bytes },
                &Rates::fitted(Some(250_000_000), rtt * MS, None),
            )
        };
        assert_eq!(at(100_000, 100).limited_by, "this machine (per file)");
        assert_eq!(at(1, 100).limited_by, "path rate");
    }
}
