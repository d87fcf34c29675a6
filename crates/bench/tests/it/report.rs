//! The report of a synthetic benchmark: two data movers and iperf3 (the limit), a sweep
//! at two RTTs over three datasets, the datasets suite at one link, and one failed run.
//! Expected values are computed here from the same inputs, not read back from the code.

use std::path::{Path, PathBuf};

use hetch_bench::report;
use hetch_bench::{Meta, Mode, Point, Record, ToolInfo};
use serde_json::Value;

const TOOLS: [&str; 3] = ["hetch", "rsync", "iperf3"];
const RTTS: [f64; 2] = [1.0, 100.0];
/// (name, file size, files), listed largest first: the report must sort them.
const DATASETS: [(&str, u64, u64); 3] = [
    ("1GiB-x1", 1 << 30, 1),
    ("4KiB-x1000", 4 << 10, 1000),
    ("1MiB-x100", 1 << 20, 100),
];
const FAILURE: &str = "connection reset by peer";

fn point(suite: &str, dataset: (&str, u64, u64), rtt_ms: f64) -> Point {
    let (name, file_size, files) = dataset;
    Point {
        suite: suite.into(),
        dataset: name.into(),
        file_size,
        files,
        bytes: file_size * files,
        rtt_ms: Some(rtt_ms),
        loss: 0.0,
        rate_bps: 0,
        cc: "default".into(),
        write_rate_bps: None,
    }
}

/// Seconds of a run: distinct per tool, dataset, RTT and iteration, so medians,
/// normalisation and latency ratios are all non-trivial.
fn seconds(tool: &str, file_size: u64, rtt_ms: f64, iteration: u32) -> f64 {
    let tool_factor = match tool {
        "hetch" => 1.0,
        "rsync" => 1.6,
        _ => 0.8,
    };
    let small_files = if file_size < (1 << 20) { 3.0 } else { 1.0 };
    tool_factor * small_files * (1.0 + rtt_ms / 400.0) * (1.0 + 0.1 * f64::from(iteration))
}

fn is_failure(r: &Record) -> bool {
    r.tool == "rsync"
        && r.point.suite == "sweep-bulk"
        && r.point.dataset == "1GiB-x1"
        && r.point.rtt_ms == Some(100.0)
        && r.iteration == 2
}

fn records() -> Vec<Record> {
    let mut records = Vec::new();
    let mut add = |suite: &str, rtt: f64, iterations: u32| {
        for dataset in DATASETS {
            for tool in TOOLS {
                for iteration in 1..=iterations {
                    let p = point(suite, dataset, rtt);
                    let mut r = Record {
                        seconds: seconds(tool, p.file_size, rtt, iteration),
                        point: p,
                        tool: tool.into(),
                        iteration,
                        ok: true,
                        error: None,
                        started_unix: 1_700_000_000,
                        mode: Mode::Bulk,
                        lag: None,
                        writer_seconds: None,
                        complete_seconds: None,
                    };
                    if is_failure(&r) {
                        r.ok = false;
                        r.error = Some(FAILURE.into());
                    }
                    records.push(r);
                }
            }
        }
    };
    for rtt in RTTS {
        add("sweep-bulk", rtt, 3);
    }
    add("datasets", RTTS[0], 1);
    records
}

fn meta() -> Meta {
    let tool = |name: &str, is_limit| ToolInfo {
        name: name.into(),
        version: format!("{name} 1.0"),
        flags: format!("--{name}-flags"),
        is_limit,
    };
    Meta {
        command: "hetch-lab bench sweep --rtt 1,100".into(),
        started_unix: 1_700_000_000,
        storage: "memory".into(),
        tools: vec![
            tool("hetch", false),
            tool("rsync", false),
            tool("iperf3", true),
        ],
        notes: vec!["synthetic runs".into()],
    }
}

/// The median Gbit/s of the successful runs of `tool` at the point, from the inputs.
fn median(records: &[Record], suite: &str, dataset: &str, rtt: f64, tool: &str) -> f64 {
    let mut v: Vec<f64> = records
        .iter()
        .filter(|r| r.ok && r.tool == tool && r.point.suite == suite)
        .filter(|r| r.point.dataset == dataset && r.point.rtt_ms == Some(rtt))
        .map(|r| r.point.bytes as f64 * 8.0 / r.seconds / 1e9)
        .collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    assert!(n > 0);
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

struct Written {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    paths: Vec<PathBuf>,
    records: Vec<Record>,
}

fn write() -> Written {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let records = records();
    let paths = report::write(&records, &meta(), &out, "r").unwrap();
    Written {
        dir: out,
        _dir: dir,
        paths,
        records,
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn writes_csv_json_markdown_and_plots() {
    let w = write();
    let names: Vec<String> = w
        .paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "r.csv",
        "r.json",
        "r.md",
        "r-sweep-bulk-rtt1ms.svg",
        "r-sweep-bulk-rtt100ms.svg",
        "r-datasets.svg",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    for p in &w.paths {
        assert!(p.starts_with(&w.dir) && p.is_file(), "{}", p.display());
    }
}

#[test]
fn csv_has_a_row_per_run() {
    let w = write();
    let csv = read(&w.dir.join("r.csv"));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), w.records.len() + 1);
    assert!(lines[0].starts_with("suite,dataset,file_size,"));
    let header: Vec<&str> = lines[0].split(',').collect();
    for line in &lines[1..] {
        assert_eq!(line.split(',').count(), header.len(), "{line}");
    }
    let failed: Vec<&&str> = lines.iter().filter(|l| l.contains(FAILURE)).collect();
    assert_eq!(failed.len(), 1);
    assert!(failed[0].contains(",rsync,2,") && failed[0].contains(",false,"));
}

/// The JSON result of `tool` at the point.
fn result<'a>(json: &'a Value, suite: &str, dataset: &str, rtt: f64, tool: &str) -> &'a Value {
    json["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["tool"] == tool
                && r["point"]["suite"] == suite
                && r["point"]["dataset"] == dataset
                && r["point"]["rtt_ms"].as_f64() == Some(rtt)
        })
        .unwrap_or_else(|| panic!("no result for {suite} {dataset} {rtt} {tool}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn json_normalises_to_the_best_mover_and_the_limit() {
    let w = write();
    let json: Value = serde_json::from_str(&read(&w.dir.join("r.json"))).unwrap();
    assert_eq!(json["meta"]["command"], meta().command);
    // Three tools at each of 3 datasets x 2 RTTs (sweep) + 3 datasets (datasets suite).
    assert_eq!(json["results"].as_array().unwrap().len(), 3 * (3 * 2 + 3));
    for (suite, rtt) in [
        ("sweep-bulk", 1.0),
        ("sweep-bulk", 100.0),
        ("datasets", 1.0),
    ] {
        for (dataset, _, _) in DATASETS {
            let m = |tool| median(&w.records, suite, dataset, rtt, tool);
            let (hetch, rsync, iperf3) = (m("hetch"), m("rsync"), m("iperf3"));
            assert!(hetch > rsync, "the test's inputs make hetch the best mover");
            let h = result(&json, suite, dataset, rtt, "hetch");
            let r = result(&json, suite, dataset, rtt, "rsync");
            let l = result(&json, suite, dataset, rtt, "iperf3");
            assert_eq!(h["normalised"].as_f64(), Some(1.0));
            assert!(close(h["gbit_per_s"]["median"].as_f64().unwrap(), hetch));
            assert!(close(r["normalised"].as_f64().unwrap(), rsync / hetch));
            assert!(close(h["of_limit"].as_f64().unwrap(), hetch / iperf3));
            assert!(close(r["of_limit"].as_f64().unwrap(), rsync / iperf3));
            assert!(l["normalised"].is_null() && l["of_limit"].is_null());
            assert_eq!(l["is_limit"], true);
        }
    }
    let failed = result(&json, "sweep-bulk", "1GiB-x1", 100.0, "rsync");
    assert_eq!(
        (failed["runs"].as_u64(), failed["failed"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(failed["first_error"], FAILURE);
    assert_eq!(failed["gbit_per_s"]["n"].as_u64(), Some(2));
}

#[test]
fn markdown_reports_every_dataset_tool_failure_and_plot() {
    let w = write();
    let md = read(&w.dir.join("r.md"));
    let has = |needle: &str| assert!(md.contains(needle), "report lacks {needle:?}:\n{md}");
    has("```sh\nhetch-lab bench sweep --rtt 1,100\n```");
    has("2023-11-14 22:13:20 UTC");
    has("memory");
    has("synthetic runs");
    for (dataset, _, _) in DATASETS {
        has(dataset);
    }
    for tool in TOOLS {
        has(&format!("{tool} 1.0"));
        has(&format!("--{tool}-flags"));
    }
    has("hetch median Gbit/s (sd)");
    has("rsync norm.");
    has("iperf3 (limit)");
    has(&format!("FAILED (1/3): {FAILURE}"));
    has("**1.00**");
    has("## sweep-bulk");
    has("## datasets");
    has("### RTT 100 ms");
    has("latency sensitivity");
    for svg in [
        "r-sweep-bulk-rtt1ms.svg",
        "r-sweep-bulk-rtt100ms.svg",
        "r-datasets.svg",
    ] {
        has(&format!("]({svg})"));
    }
    // Datasets by file size: 4 KiB, then 1 MiB, then 1 GiB.
    let at = |d: &str| md.find(&format!("| {d} |")).unwrap();
    assert!(at("4KiB-x1000") < at("1MiB-x100") && at("1MiB-x100") < at("1GiB-x1"));
}

#[test]
fn latency_sensitivity_divides_by_the_lowest_rtt() {
    let w = write();
    let md = read(&w.dir.join("r.md"));
    let m = |rtt, tool| median(&w.records, "sweep-bulk", "1MiB-x100", rtt, tool);
    let ratio = m(100.0, "hetch") / m(1.0, "hetch");
    let row = format!(
        "| 1MiB-x100 | hetch | {:.2} | {ratio:.2} |",
        m(1.0, "hetch")
    );
    let bold = format!(
        "| 1MiB-x100 | hetch | {:.2} | **{ratio:.2}** |",
        m(1.0, "hetch")
    );
    assert!(
        md.contains(&row) || md.contains(&bold),
        "no {row:?} in:\n{md}"
    );
}

/// The opening tags of `name` elements in `svg`.
fn tags<'a>(svg: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name} ");
    svg.match_indices(&open)
        .map(|(i, _)| &svg[i..i + svg[i..].find('>').unwrap()])
        .collect()
}

/// The contents of the `<text>` elements of `svg`, trimmed.
fn texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim())
        })
        .collect()
}

#[test]
fn sweep_plots_have_a_line_per_tool() {
    let w = write();
    for svg in ["r-sweep-bulk-rtt1ms.svg", "r-sweep-bulk-rtt100ms.svg"] {
        let text = read(&w.dir.join(svg));
        let start = text.trim_start();
        assert!(
            start.starts_with("<svg") || start.starts_with("<?xml"),
            "{svg}"
        );
        assert!(text.trim_end().ends_with("</svg>"), "{svg}");
        let width = format!(
            "stroke-width=\"{}\"",
            hetch_bench::plot::SERIES_STROKE_WIDTH
        );
        let lines: Vec<&str> = tags(&text, "polyline")
            .into_iter()
            .filter(|t| t.contains(&width))
            .collect();
        assert_eq!(lines.len(), TOOLS.len(), "{svg}: {lines:?}");
        let texts = texts(&text);
        for label in ["hetch", "rsync", "iperf3 (limit)"] {
            assert!(
                texts.contains(&label),
                "{svg} has no legend {label}: {texts:?}"
            );
        }
        // Axis labels of the file sizes, and the axes' names.
        for label in ["4K", "1M", "1G", "file size (bytes)", "median Gbit/s"] {
            assert!(texts.contains(&label), "{svg} lacks {label}: {texts:?}");
        }
    }
}

#[test]
fn datasets_plot_has_a_bar_per_mover_and_dataset() {
    let w = write();
    let text = read(&w.dir.join("r-datasets.svg"));
    assert!(text.trim_start().starts_with("<svg") || text.trim_start().starts_with("<?xml"));
    let colour = |i: usize| {
        let c = hetch_bench::plot::PALETTE[i];
        format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2)
    };
    for (i, tool) in ["hetch", "rsync"].iter().enumerate() {
        let rects = tags(&text, "rect")
            .into_iter()
            .filter(|t| t.contains(&colour(i)))
            .count();
        // A bar per dataset, and the legend's square.
        assert_eq!(rects, DATASETS.len() + 1, "{tool}");
    }
    let texts = texts(&text);
    for (dataset, _, _) in DATASETS {
        assert!(texts.contains(&dataset), "no label {dataset}: {texts:?}");
    }
}

/// A synthetic streaming sweep at RTT 50 ms on a 2 Gbit/s link: a writer at 1 Gbit/s
/// (under the link: the lag target applies) and an unlimited one (the throughput target
/// applies), each point with hetch streaming, hetch bulk and iperf3.
fn streaming_records() -> Vec<Record> {
    let (files, size) = (250u64, 4u64 << 20);
    let mut out = Vec::new();
    // (writer bits/s, streaming seconds, to-last-file seconds, p99 ms per iteration)
    for (write_rate, streaming_s, complete_s, p99) in [
        (1_000_000_000u64, 9.0, 8.5, [120.0, 280.0]),
        (0, 5.5, 5.2, [900.0, 950.0]),
    ] {
        let p = Point {
            suite: "sweep-streaming".into(),
            dataset: "4MiB-x250".into(),
            file_size: size,
            files,
            bytes: size * files,
            rtt_ms: Some(50.0),
            loss: 0.0,
            rate_bps: 2_000_000_000,
            cc: "bbr".into(),
            write_rate_bps: Some(write_rate),
        };
        for iteration in 1..=2u32 {
            let base = Record {
                point: p.clone(),
                tool: "hetch".into(),
                iteration,
                seconds: 5.0,
                ok: true,
                error: None,
                started_unix: 1_700_000_000,
                mode: Mode::Bulk,
                lag: None,
                writer_seconds: None,
                complete_seconds: None,
            };
            out.push(Record {
                mode: Mode::Streaming,
                seconds: streaming_s,
                complete_seconds: Some(complete_s),
                writer_seconds: Some(if write_rate == 0 { 0.5 } else { 8.4 }),
                lag: Some(hetch_bench::Lag {
                    samples: 1000,
                    p50_ms: 60.0,
                    p99_ms: p99[iteration as usize - 1],
                    max_ms: 1000.0,
                    mean_ms: 70.0,
                }),
                ..base.clone()
            });
            out.push(base.clone());
            out.push(Record {
                tool: "iperf3".into(),
                seconds: 4.5,
                ..base
            });
        }
    }
    out
}

#[test]
fn streaming_table_shows_bulk_streaming_ratio_lag_and_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = streaming_records();
    // A third, failed streaming run at the paced point: shown, not in the medians.
    let mut failed = records[0].clone();
    failed.iteration = 3;
    failed.ok = false;
    failed.error = Some("exit status: 3: hetch: error: f000148.done: No such file".into());
    records.push(failed);
    let mut m = meta();
    m.tools.retain(|t| t.name != "rsync");
    report::write(&records, &m, dir.path(), "s").unwrap();
    let md = read(&dir.path().join("s.md"));
    let bytes = (4u64 << 20) as f64 * 250.0;
    let gbit = |s: f64| bytes * 8.0 / s / 1e9;
    let g = |s: f64| format!("{:.2}", gbit(s));
    // Paced writer: ratio shown, not judged; p99s 120 and 280 ms, median 200, worst 280
    // < 300 ms: PASS.
    let paced = format!(
        "| 4MiB-x250 | 250 × 4M | {} | {} (0.00) | {} (0.00); FAILED (1/3): exit status: 3: hetch: error: f000148.done: No such file | {:.2} (writer-paced) | {} ({:.2}) | 60 | 200 (280) | PASS | {} ({:.2}) |",
        g(8.4),
        g(5.0),
        g(9.0),
        5.0 / 9.0,
        g(8.5),
        5.0 / 8.5,
        g(4.5),
        4.5 / 9.0
    );
    // Unlimited writer: 5.0 / 5.5 = 0.91 >= 0.90: PASS; lag shown, not judged.
    let unlimited = format!(
        "| 4MiB-x250 | 250 × 4M | {} | {} (0.00) | {} (0.00) | {:.2} PASS | {} ({:.2}) | 60 | 925 (950) | n/a (writer unlimited) | {} ({:.2}) |",
        g(0.5),
        g(5.0),
        g(5.5),
        5.0 / 5.5,
        g(5.2),
        5.0 / 5.2,
        g(4.5),
        4.5 / 5.5
    );
    for row in [&paced, &unlimited] {
        assert!(md.contains(row.as_str()), "no row {row:?} in:\n{md}");
    }
    for needle in [
        "### RTT 50 ms, 2 Gbit/s, cc bbr, writer 1 Gbit/s",
        "### RTT 50 ms, 2 Gbit/s, cc bbr, writer unlimited",
        "| p99 < 300 ms |",
        "limit Gbit/s (streaming's fraction)",
    ] {
        assert!(md.contains(needle), "report lacks {needle:?}:\n{md}");
    }
    // The tools table lists hetch once: its streaming runs are no tool of their own.
    assert_eq!(md.matches("| hetch | hetch 1.0 |").count(), 1, "{md}");
    assert!(!md.contains("| hetch (streaming) | ? |"), "{md}");

    let json: Value = serde_json::from_str(&read(&dir.path().join("s.json"))).unwrap();
    let rows = json["streaming"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let paced = rows
        .iter()
        .find(|r| r["write_rate_bps"] == 1_000_000_000u64)
        .unwrap();
    assert_eq!(paced["lag_pass"], true);
    assert!(paced["ratio_pass"].is_null());
    assert_eq!(paced["lag_target_ms"].as_f64(), Some(300.0));
    let unlimited = rows.iter().find(|r| r["write_rate_bps"] == 0).unwrap();
    assert_eq!(unlimited["ratio_pass"], true);
    assert!(unlimited["lag_pass"].is_null());
    assert!(close(unlimited["ratio"].as_f64().unwrap(), 5.0 / 5.5));

    let csv = read(&dir.path().join("s.csv"));
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let streaming_row: Vec<&str> = csv
        .lines()
        .find(|l| l.contains(",streaming,"))
        .unwrap()
        .split(',')
        .collect();
    assert_eq!(streaming_row[col("lag_p99_ms")], "120");
    assert_eq!(streaming_row[col("complete_seconds")], "8.5");
    assert_eq!(streaming_row[col("write_rate_bps")], "1000000000");
}
