//! Turns the runs into the files a person reads: `STEM.csv` (every run, raw),
//! `STEM.json` (per point and tool: statistics and normalisation; for streaming sweeps
//! also streaming against bulk), `STEM.md` (the report) and
//! `STEM-<suite>[-<link>].svg` (its plots).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::plot;
use crate::record::{Meta, Mode, Record};
use crate::stats::{aggregate, dataset_order, series_name, size_label, tool_order, Cell, Link};
use crate::streaming::{self, Comparison};

/// The suites in report order; any other suite follows, by name.
const SUITES: [&str; 3] = ["sweep-bulk", "sweep-streaming", "datasets"];

/// The throughput ratio the zx paper claims at 100 ms over its low-RTT throughput;
/// the latency sensitivity table shows ratios at least this high in bold.
const LATENCY_CLAIM: f64 = 0.9;

/// The throughput ratio kept under 0.1 % loss that issue 4 asks for (paper 002's loss
/// case); the loss sensitivity table shows ratios at least this high in bold.
const LOSS_CLAIM: f64 = 0.8;

/// Longest error text a table cell shows: the CSV has the whole of it.
const MAX_ERROR_CHARS: usize = 80;

/// Writes the report of `records` into `dir` (created if missing): `STEM.csv`,
/// `STEM.json`, one SVG plot per suite and link, and `STEM.md`, which refers to the
/// plots by relative path. Returns the paths written.
pub fn write(records: &[Record], meta: &Meta, dir: &Path, stem: &str) -> Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let cells = aggregate(records, meta);
    let names: Vec<String> = meta.tools.iter().map(|t| t.name.clone()).collect();
    let tools = tool_order(&cells, &names);
    let sections = sections(&cells);
    let compared: Vec<Comparison> = sections
        .iter()
        .flat_map(|s| s.groups.iter())
        .flat_map(|g| streaming::comparisons(&g.cells))
        .collect();
    let mut written = vec![
        write_file(dir, &format!("{stem}.csv"), &csv(records))?,
        write_file(
            dir,
            &format!("{stem}.json"),
            &json(meta, &cells, &compared)?,
        )?,
    ];
    let plots = write_plots(&sections, &tools, dir, stem)?;
    written.extend(plots.iter().map(|p| dir.join(&p.file)));
    let md = markdown(meta, &tools, &sections, &plots);
    written.push(write_file(dir, &format!("{stem}.md"), &md)?);
    Ok(written)
}

/// Writes `text` to `dir/name`.
fn write_file(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

// ---- CSV ----------------------------------------------------------------------

/// Columns of the CSV, one row per run. The streaming columns come last, so that the
/// columns of bulk results keep their places.
const CSV_HEADER: &str = "suite,dataset,file_size,files,bytes,rtt_ms,loss,rate_bps,cc,\
                          tool,iteration,started_unix,seconds,gbit_per_s,ok,error,\
                          mode,write_rate_bps,writer_seconds,complete_seconds,\
                          lag_samples,lag_p50_ms,lag_p99_ms,lag_max_ms,lag_mean_ms";

/// Every run as CSV (RFC 4180), in the order given; an empty `rtt_ms` is loopback,
/// empty streaming columns a run without a writer or without lag.
fn csv(records: &[Record]) -> String {
    let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut out = format!("{CSV_HEADER}\n");
    for r in records {
        let p = &r.point;
        let fields = [
            p.suite.clone(),
            p.dataset.clone(),
            p.file_size.to_string(),
            p.files.to_string(),
            p.bytes.to_string(),
            p.rtt_ms.map(|v| v.to_string()).unwrap_or_default(),
            p.loss.to_string(),
            p.rate_bps.to_string(),
            p.cc.clone(),
            r.tool.clone(),
            r.iteration.to_string(),
            r.started_unix.to_string(),
            r.seconds.to_string(),
            r.gbit_per_s().to_string(),
            r.ok.to_string(),
            r.error.clone().unwrap_or_default(),
            r.mode.as_str().to_string(),
            p.write_rate_bps.map(|v| v.to_string()).unwrap_or_default(),
            opt(r.writer_seconds),
            opt(r.complete_seconds),
            r.lag.map(|l| l.samples.to_string()).unwrap_or_default(),
            opt(r.lag.map(|l| l.p50_ms)),
            opt(r.lag.map(|l| l.p99_ms)),
            opt(r.lag.map(|l| l.max_ms)),
            opt(r.lag.map(|l| l.mean_ms)),
        ];
        let row: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

// ---- JSON ---------------------------------------------------------------------

/// The aggregated results file: how the benchmark ran, a [`Cell`] per (point, tool,
/// mode), and for streaming sweeps a [`Comparison`] per point.
#[derive(Serialize)]
struct Aggregated<'a> {
    meta: &'a Meta,
    results: &'a [Cell],
    #[serde(skip_serializing_if = "<[Comparison]>::is_empty")]
    streaming: &'a [Comparison],
}

/// The aggregated results as pretty JSON.
fn json(meta: &Meta, cells: &[Cell], streaming: &[Comparison]) -> Result<String> {
    let mut text = serde_json::to_string_pretty(&Aggregated {
        meta,
        results: cells,
        streaming,
    })?;
    text.push('\n');
    Ok(text)
}

// ---- grouping -----------------------------------------------------------------

/// The cells of one suite, by link: a section of the report.
struct Section {
    suite: String,
    groups: Vec<Group>,
}

/// The cells of one suite at one link: a table and a plot.
struct Group {
    link: Link,
    cells: Vec<Cell>,
}

/// The sections of `cells`: suites in [`SUITES`] order, links easiest first.
fn sections(cells: &[Cell]) -> Vec<Section> {
    let mut suites: Vec<&str> = Vec::new();
    for c in cells {
        if !suites.contains(&c.point.suite.as_str()) {
            suites.push(&c.point.suite);
        }
    }
    suites.sort_by_key(|s| {
        (
            SUITES.iter().position(|k| k == s).unwrap_or(SUITES.len()),
            *s,
        )
    });
    suites
        .into_iter()
        .map(|suite| Section {
            suite: suite.to_string(),
            groups: groups(cells.iter().filter(|c| c.point.suite == suite)),
        })
        .collect()
}

/// `cells` grouped by link, easiest link first.
fn groups<'a>(cells: impl Iterator<Item = &'a Cell>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for c in cells {
        let link = Link::of(&c.point);
        match groups.iter_mut().find(|g| g.link == link) {
            Some(g) => g.cells.push(c.clone()),
            None => groups.push(Group {
                link,
                cells: vec![c.clone()],
            }),
        }
    }
    groups.sort_by(|a, b| a.link.order(&b.link));
    groups
}

// ---- plots --------------------------------------------------------------------

/// A plot written for the report.
struct Plot {
    suite: String,
    /// The link it shows; `None` for the chart of every link of a sweep together.
    link: Option<Link>,
    /// Its file name, relative to the report.
    file: String,
}

impl Plot {
    /// Its caption: suite and link.
    fn caption(&self) -> String {
        match &self.link {
            Some(l) => format!("{}, {}", self.suite, l.label()),
            None => format!("{}, every link", self.suite),
        }
    }
}

/// Writes a plot per group that has a successful run: a line chart for a sweep suite
/// (`sweep-*`), a bar chart for any other. Named after the suite, and the link when
/// the suite has several.
fn write_plots(
    sections: &[Section],
    tools: &[String],
    dir: &Path,
    stem: &str,
) -> Result<Vec<Plot>> {
    let mut plots = Vec::new();
    for s in sections {
        for g in &s.groups {
            if !g.cells.iter().any(|c| c.median().is_some()) {
                continue;
            }
            let file = plot_file(stem, &s.suite, &g.link, s.groups.len() > 1);
            let p = Plot {
                suite: s.suite.clone(),
                link: Some(g.link.clone()),
                file,
            };
            let path = dir.join(&p.file);
            let draw = if s.suite.starts_with("sweep") {
                plot::sweep_chart
            } else {
                plot::datasets_chart
            };
            draw(&g.cells, tools, &p.caption(), &path)
                .with_context(|| format!("plotting {}", path.display()))?;
            plots.push(p);
        }
        // A sweep over several links also gets one chart of them all (a line per tool
        // and link), as the zx paper draws its RTT and congestion-control sweeps.
        if s.suite.starts_with("sweep") && s.groups.len() > 1 {
            let p = Plot {
                suite: s.suite.clone(),
                link: None,
                file: format!("{stem}-{}-all.svg", s.suite),
            };
            let cells: Vec<Cell> = s
                .groups
                .iter()
                .flat_map(|g| g.cells.iter().cloned())
                .collect();
            let path = dir.join(&p.file);
            plot::sweep_chart(&cells, tools, &p.caption(), &path)
                .with_context(|| format!("plotting {}", path.display()))?;
            plots.push(p);
        }
    }
    Ok(plots)
}

/// The file name of a plot: `STEM-SUITE.svg`, or `STEM-SUITE-LINK.svg` when the suite
/// ran over several links.
fn plot_file(stem: &str, suite: &str, link: &Link, several_links: bool) -> String {
    if several_links {
        format!("{stem}-{suite}-{}.svg", link.slug())
    } else {
        format!("{stem}-{suite}.svg")
    }
}

// ---- Markdown -----------------------------------------------------------------

/// The whole Markdown report.
fn markdown(meta: &Meta, tools: &[String], sections: &[Section], plots: &[Plot]) -> String {
    let mut md = header(meta);
    md.push_str(&tools_table(meta, tools));
    for s in sections {
        md.push_str(&section(s, tools, plots));
    }
    if !plots.is_empty() {
        md.push_str("## Plots\n\n");
        for p in plots {
            let _ = writeln!(md, "- [{}]({})", p.caption(), link_target(&p.file));
        }
        md.push('\n');
    }
    md
}

/// The command (fenced) and the `- Date:` line that open every report; a start time of
/// 0 means it was never recorded, not 1970.
pub(crate) fn command_and_date(command: &str, started_unix: u64) -> String {
    let fence = fence_for(command);
    let date = match started_unix {
        0 => "unknown".to_string(),
        t => fmt_date(t),
    };
    format!("Command:\n\n{fence}sh\n{command}\n{fence}\n\n- Date: {date}\n")
}

/// Title, command, date, storage and notes.
fn header(meta: &Meta) -> String {
    let mut md = String::from("# hetch-lab bench report\n\n");
    md.push_str(&command_and_date(&meta.command, meta.started_unix));
    let storage = if meta.storage.is_empty() {
        "unknown"
    } else {
        &meta.storage
    };
    let _ = writeln!(md, "- Storage: {storage}");
    if !meta.notes.is_empty() {
        md.push_str("- Notes:\n");
        for n in &meta.notes {
            let _ = writeln!(md, "  - {n}");
        }
    }
    md.push('\n');
    md
}

/// A code fence longer than any run of backticks in `text`, so the text cannot end it.
pub(crate) fn fence_for(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    "`".repeat(longest.max(2) + 1)
}

/// The tools table: every tool in `meta`, then any that ran but `meta` does not list.
fn tools_table(meta: &Meta, tools: &[String]) -> String {
    let mut rows: Vec<Vec<String>> = meta
        .tools
        .iter()
        .map(|t| {
            let name = if t.is_limit {
                format!("{} (limit)", t.name)
            } else {
                t.name.clone()
            };
            vec![name, t.version.clone(), t.flags.clone()]
        })
        .collect();
    // A tool's streaming runs are the same tool: no row of their own.
    let listed = |t: &String| {
        meta.tools
            .iter()
            .any(|i| &i.name == t || series_name(&i.name, Mode::Streaming) == *t)
    };
    for t in tools.iter().filter(|t| !listed(t)) {
        rows.push(vec![t.clone(), "?".into(), "?".into()]);
    }
    let headers = ["tool", "version", "flags"].map(String::from);
    format!("## Tools\n\n{}\n", table(&headers, &rows))
}

/// A suite's section: per link its plot and table, then the latency and loss
/// sensitivity. A link with streaming runs gets the streaming table (streaming beside
/// bulk, lag and targets) instead of the per-tool table.
fn section(s: &Section, tools: &[String], plots: &[Plot]) -> String {
    let mut md = format!("## {}\n\n", s.suite);
    let streaming = s
        .groups
        .iter()
        .any(|g| g.cells.iter().any(|c| c.mode == Mode::Streaming));
    if streaming {
        md.push_str(STREAMING_NOTE);
    }
    for g in &s.groups {
        let _ = write!(md, "### {}\n\n", g.link.label());
        if let Some(p) = plots
            .iter()
            .find(|p| p.suite == s.suite && p.link.as_ref() == Some(&g.link))
        {
            let _ = write!(md, "![{}]({})\n\n", p.caption(), link_target(&p.file));
        }
        let rows = streaming::comparisons(&g.cells);
        if rows.is_empty() {
            md.push_str(&group_table(g, tools));
        } else {
            md.push_str(&streaming_table(&g.link, &rows));
        }
        md.push('\n');
    }
    if let Some(p) = plots
        .iter()
        .find(|p| p.suite == s.suite && p.link.is_none())
    {
        let _ = write!(
            md,
            "### every link\n\n![{}]({})\n\n",
            p.caption(),
            link_target(&p.file)
        );
    }
    md.push_str(&sensitivity(s, tools, Axis::Rtt));
    md.push_str(&sensitivity(s, tools, Axis::Loss));
    md
}

/// What the streaming tables measure and which targets apply where.
const STREAMING_NOTE: &str = "Streaming: `hetch-lab bench write` appends fixed-size writes \
round-robin to the dataset's files (at the writer rate of the table's title) in an empty \
directory while `hetch cp --follow` copies them; each file's `.done` marker is made when \
it is complete. *Streaming Gbit/s* is the dataset's bytes over the time from the copy's \
start (the writer starts once its session is up) to its exit (the run marker `SRC.done`, made when the writer exits, ends \
the copy once every file is in place); \
*to last file* stops the clock when every file and its marker were in place at the \
destination. *Bulk* is `hetch cp` of the same final files in the same iteration. Lag is \
the copy's own figure (appended at the source to durable and verified at the \
destination); p99 is the median of the runs' p99s, with the worst run's in brackets. \
Targets (issue 5): streaming/bulk at least 0.90 with an unlimited writer (a paced writer \
caps streaming at its rate, so the ratio is shown but not judged); the worst run's p99 \
below RTT + 250 ms with a writer under the link rate (an unlimited writer queues data \
at the source, so its lag is shown but not judged).\n\n";

/// A streaming group's table: per dataset, the writer's achieved rate, bulk and
/// streaming throughput, their ratio, lag, the targets, and the limit where it ran.
fn streaming_table(link: &Link, rows: &[Comparison]) -> String {
    let several_tools = rows.iter().any(|r| r.tool != rows[0].tool);
    let target = rows.first().map_or(0.0, |r| r.lag_target_ms);
    let mut headers = vec!["dataset".to_string(), "files × size".to_string()];
    if several_tools {
        headers.push("tool".to_string());
    }
    headers.extend([
        "writer Gbit/s".to_string(),
        "bulk Gbit/s (sd)".to_string(),
        "streaming Gbit/s (sd)".to_string(),
        format!("streaming/bulk (≥ {})", fmt_ratio(streaming::RATIO_TARGET)),
        "to last file Gbit/s (/bulk)".to_string(),
        "lag p50 ms".to_string(),
        "lag p99 ms (worst)".to_string(),
        format!("p99 < {} ms", fmt_ms(target)),
    ]);
    let has_limit = rows.iter().any(|r| r.limit_gbit_per_s.is_some());
    if has_limit {
        headers.push("limit Gbit/s (streaming's fraction)".to_string());
    }
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| streaming_row(r, link, several_tools, has_limit))
        .collect();
    table(&headers, &body)
}

/// One row of a streaming table.
fn streaming_row(r: &Comparison, link: &Link, tool: bool, limit: bool) -> Vec<String> {
    let mut row = vec![
        r.dataset.clone(),
        format!("{} × {}", r.files, size_label(r.file_size)),
    ];
    if tool {
        row.push(r.tool.clone());
    }
    // Medians as the per-tool table shows them, failures included.
    let summary = |s: Option<crate::stats::Summary>, runs: Option<&streaming::Runs>| {
        let failed = runs.map_or((0, 0, None), |r| {
            (r.failed, r.runs, r.first_error.as_deref())
        });
        median_and_failures(s, failed.0, failed.1, failed.2)
    };
    row.push(
        r.writer_gbit_per_s
            .map_or("–".into(), |s| fmt_gbit(s.median)),
    );
    row.push(summary(r.bulk_gbit_per_s, r.bulk_runs.as_ref()));
    row.push(summary(r.streaming_gbit_per_s, Some(&r.streaming_runs)));
    row.push(match (r.ratio, r.ratio_pass) {
        (None, _) => "–".into(),
        (Some(v), Some(pass)) => format!("{} {}", fmt_ratio(v), verdict(pass)),
        (Some(v), None) => match streaming::ratio_not_applicable(r.write_rate_bps) {
            Some(why) => format!("{} ({why})", fmt_ratio(v)),
            None => fmt_ratio(v),
        },
    });
    row.push(match (r.complete_gbit_per_s, r.complete_ratio) {
        (Some(c), Some(v)) => format!("{} ({})", fmt_gbit(c.median), fmt_ratio(v)),
        (Some(c), None) => fmt_gbit(c.median),
        (None, _) => "–".into(),
    });
    match r.lag {
        Some(l) => {
            row.push(fmt_ms(l.p50_ms.median));
            row.push(format!(
                "{} ({})",
                fmt_ms(l.p99_ms.median),
                fmt_ms(l.p99_ms.max)
            ));
        }
        None => row.extend(["–".to_string(), "–".to_string()]),
    }
    row.push(match r.lag_pass {
        Some(pass) => verdict(pass).to_string(),
        None => match streaming::lag_not_applicable(r.write_rate_bps, link.rate_bps) {
            Some(why) => format!("n/a ({why})"),
            None => "– (no lag reported)".to_string(),
        },
    });
    if limit {
        let frac = match (r.streaming_gbit_per_s, r.limit_gbit_per_s) {
            (Some(s), Some(l)) if l > 0.0 => format!(" ({})", fmt_ratio(s.median / l)),
            _ => String::new(),
        };
        row.push(
            r.limit_gbit_per_s
                .map_or("–".into(), |l| format!("{}{frac}", fmt_gbit(l))),
        );
    }
    row
}

/// `PASS` or `MISS`.
fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "MISS"
    }
}

/// Milliseconds: whole above 10, one decimal below.
fn fmt_ms(v: f64) -> String {
    if v.abs() >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// A group's table: a row per dataset; per data mover its median (sd) and its
/// normalised median; per limit its median and the best mover's fraction of it.
fn group_table(g: &Group, tools: &[String]) -> String {
    let order = tool_order(&g.cells, tools);
    let is_limit = |t: &String| g.cells.iter().any(|c| &c.name() == t && c.is_limit);
    let (limits, movers): (Vec<String>, Vec<String>) = order.into_iter().partition(is_limit);
    let mut headers = vec!["dataset".to_string(), "files × size".to_string()];
    for t in &movers {
        headers.push(format!("{t} median Gbit/s (sd)"));
        headers.push(format!("{t} norm."));
    }
    for t in &limits {
        headers.push(format!("{t} (limit) Gbit/s (best's fraction)"));
    }
    let rows: Vec<Vec<String>> = dataset_order(&g.cells)
        .iter()
        .map(|d| dataset_row(g, d, &movers, &limits))
        .collect();
    table(&headers, &rows)
}

/// A group table's row for dataset `d`.
fn dataset_row(g: &Group, d: &str, movers: &[String], limits: &[String]) -> Vec<String> {
    let find = |t: &str| {
        g.cells
            .iter()
            .find(|c| c.point.dataset == d && c.name() == t)
    };
    let point = &g
        .cells
        .iter()
        .find(|c| c.point.dataset == d)
        .expect("a cell of d")
        .point;
    let mut row = vec![
        d.to_string(),
        format!("{} × {}", point.files, size_label(point.file_size)),
    ];
    for t in movers {
        row.push(throughput_cell(find(t)));
        row.push(norm_cell(find(t)));
    }
    let best_of_limit = movers
        .iter()
        .filter_map(|t| find(t).and_then(|c| c.of_limit))
        .fold(None, |acc: Option<f64>, v| {
            Some(acc.map_or(v, |a| a.max(v)))
        });
    for t in limits {
        row.push(limit_cell(find(t), best_of_limit));
    }
    row
}

/// A tool's median and sd, and its failures if any: `1.23 (0.05)`,
/// `FAILED (3/3): error` or `1.23 (0.05); FAILED (1/3): error`; `–` if it did not run.
fn throughput_cell(cell: Option<&Cell>) -> String {
    let Some(c) = cell else { return "–".into() };
    median_and_failures(c.gbit_per_s, c.failed, c.runs, c.first_error.as_deref())
}

/// `median (sd)` (`(n=1)` for one run: no spread to show rather than a zero), then
/// `FAILED (failed/runs): first error` when runs failed; `–` when there is neither.
fn median_and_failures(
    s: Option<crate::stats::Summary>,
    failed: usize,
    runs: usize,
    first_error: Option<&str>,
) -> String {
    let stats = s.map(|s| match s.n {
        0 | 1 => format!("{} (n=1)", fmt_gbit(s.median)),
        _ => format!("{} ({})", fmt_gbit(s.median), fmt_gbit(s.sd)),
    });
    let failed = (failed > 0).then(|| {
        let error = first_error.unwrap_or("failed");
        format!(
            "FAILED ({failed}/{runs}): {}",
            truncate(error, MAX_ERROR_CHARS)
        )
    });
    match (stats, failed) {
        (Some(s), Some(f)) => format!("{s}; {f}"),
        (Some(s), None) => s,
        (None, Some(f)) => f,
        (None, None) => "–".into(),
    }
}

/// A mover's normalised median, the best's in bold; `–` without one.
fn norm_cell(cell: Option<&Cell>) -> String {
    match cell.and_then(|c| c.normalised) {
        // The best mover's ratio is its median over itself: exactly 1.
        Some(n) if n >= 1.0 => format!("**{}**", fmt_ratio(n)),
        Some(n) => fmt_ratio(n),
        None => "–".into(),
    }
}

/// A limit's median and the best mover's fraction of it: `9.41 (best 0.87)`.
fn limit_cell(cell: Option<&Cell>, best_of_limit: Option<f64>) -> String {
    match (cell.and_then(Cell::median), best_of_limit) {
        (Some(m), Some(b)) => format!("{} (best {})", fmt_gbit(m), fmt_ratio(b)),
        (Some(m), None) => fmt_gbit(m),
        (None, _) => throughput_cell(cell),
    }
}

/// What a sensitivity table varies: links that differ only along it form a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    /// Round-trip time (the zx paper's latency insensitivity).
    Rtt,
    /// Packet loss (paper 002's loss case).
    Loss,
}

impl Axis {
    /// This link's value along the axis; `None` for loopback (no link to vary).
    fn value(self, l: &Link) -> Option<f64> {
        match self {
            Axis::Rtt => l.rtt_ms,
            Axis::Loss => l.rtt_ms.map(|_| l.loss),
        }
    }

    /// Whether two links differ at most along this axis.
    fn same_but(self, a: &Link, b: &Link) -> bool {
        match self {
            Axis::Rtt => a.same_but_rtt(b),
            Axis::Loss => {
                a.rtt_ms == b.rtt_ms
                    && a.rate_bps == b.rate_bps
                    && a.cc == b.cc
                    && a.write_rate_bps == b.write_rate_bps
            }
        }
    }

    /// What the family has in common, for its title.
    fn rest_label(self, l: &Link) -> String {
        match self {
            Axis::Rtt => l.label_without_rtt(),
            Axis::Loss => Link {
                loss: 0.0,
                ..l.clone()
            }
            .label(),
        }
    }

    fn column(self, v: f64) -> String {
        match self {
            Axis::Rtt => format!("{v} ms"),
            Axis::Loss => format!("loss {} %", v * 100.0),
        }
    }

    /// The ratio a claim asks for, and the sentence that says whose claim it is.
    fn claim(self) -> (f64, &'static str) {
        match self {
            Axis::Rtt => (LATENCY_CLAIM, "The zx paper claims at least 0.90 at 100 ms"),
            Axis::Loss => (
                LOSS_CLAIM,
                "Paper 002's loss case asks for at least 0.80 at 0.1 % loss",
            ),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Axis::Rtt => "latency",
            Axis::Loss => "loss",
        }
    }
}

/// The sensitivity tables of a section, along `axis`: for every family of links that
/// differ only along it and has several values, each tool's throughput at each value
/// over its throughput at the lowest. Empty when there is no such family.
fn sensitivity(s: &Section, tools: &[String], axis: Axis) -> String {
    let mut md = String::new();
    for family in families(&s.groups, axis) {
        let rest = axis.rest_label(&family[0].link);
        let title = if rest.is_empty() {
            String::new()
        } else {
            format!(": {rest}")
        };
        let values: Vec<f64> = family.iter().filter_map(|g| axis.value(&g.link)).collect();
        let (claim, whose) = axis.claim();
        let _ = write!(
            md,
            "### {} sensitivity{title}\n\nMedian throughput at each {} over the median at \
             {}. {whose}; ratios that reach {} are in bold.\n\n",
            axis.name(),
            if axis == Axis::Rtt { "RTT" } else { "loss" },
            axis.column(values[0]),
            fmt_ratio(claim)
        );
        md.push_str(&sensitivity_table(&family, &values, tools, axis));
        md.push('\n');
    }
    md
}

/// Groups with a value along `axis`, in families that differ only along it (ascending
/// within each); only families with at least two values.
fn families(groups: &[Group], axis: Axis) -> Vec<Vec<&Group>> {
    let mut families: Vec<Vec<&Group>> = Vec::new();
    for g in groups.iter().filter(|g| axis.value(&g.link).is_some()) {
        match families
            .iter_mut()
            .find(|f| axis.same_but(&f[0].link, &g.link))
        {
            Some(f) => f.push(g),
            None => families.push(vec![g]),
        }
    }
    families.retain(|f| f.len() > 1);
    for f in &mut families {
        f.sort_by(|a, b| {
            let v = |g: &Group| axis.value(&g.link).unwrap_or(0.0);
            v(a).total_cmp(&v(b))
        });
    }
    families
}

/// The table of one family: a row per (dataset, tool), the lowest value's median in
/// Gbit/s, then the ratio at each higher value.
fn sensitivity_table(family: &[&Group], values: &[f64], tools: &[String], axis: Axis) -> String {
    let all: Vec<Cell> = family
        .iter()
        .flat_map(|g| g.cells.iter().cloned())
        .collect();
    let mut headers = vec![
        "dataset".to_string(),
        "tool".to_string(),
        format!("Gbit/s at {}", axis.column(values[0])),
    ];
    headers.extend(values[1..].iter().map(|v| axis.column(*v)));
    let mut rows = Vec::new();
    for d in dataset_order(&all) {
        for t in tool_order(&all, tools) {
            let median_at = |g: &&Group| {
                let cell = g
                    .cells
                    .iter()
                    .find(|c| c.point.dataset == d && c.name() == t);
                cell.and_then(Cell::median)
            };
            let medians: Vec<Option<f64>> = family.iter().map(median_at).collect();
            if medians.iter().all(Option::is_none) {
                continue;
            }
            rows.push(ratio_row(&d, &t, &medians, axis.claim().0));
        }
    }
    table(&headers, &rows)
}

/// A sensitivity row: the first median as Gbit/s, the others as its ratio.
fn ratio_row(dataset: &str, tool: &str, medians: &[Option<f64>], claim: f64) -> Vec<String> {
    let base = medians[0];
    let mut row = vec![
        dataset.to_string(),
        tool.to_string(),
        base.map_or("–".into(), fmt_gbit),
    ];
    for m in &medians[1..] {
        row.push(match (m, base) {
            (Some(m), Some(b)) if b > 0.0 => ratio_bold_from(m / b, claim),
            _ => "–".into(),
        });
    }
    row
}

/// A ratio, in bold when it reaches `bold_from`.
fn ratio_bold_from(ratio: f64, bold_from: f64) -> String {
    if ratio >= bold_from {
        format!("**{}**", fmt_ratio(ratio))
    } else {
        fmt_ratio(ratio)
    }
}

/// A Markdown table; cells are escaped.
pub(crate) fn table(headers: &[String], rows: &[Vec<String>]) -> String {
    let line = |cells: &[String]| {
        let escaped: Vec<String> = cells.iter().map(|c| md_cell(c)).collect();
        format!("| {} |\n", escaped.join(" | "))
    };
    let mut md = line(headers);
    md.push_str(&line(&vec!["---".to_string(); headers.len()]));
    for r in rows {
        md.push_str(&line(r));
    }
    md
}

/// Table cell text: a `|` would end the cell and a line break the row.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// A link destination: in angle brackets when it holds a space or parenthesis, which
/// would end a plain one.
fn link_target(file: &str) -> String {
    if file.contains([' ', '(', ')']) {
        format!("<{file}>")
    } else {
        file.to_string()
    }
}

/// At most `max` characters of `text`, with `…` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

// ---- numbers and dates -------------------------------------------------------------

/// Gbit/s with 2 decimals, or 3 significant digits below 0.1 (where 2 decimals would
/// round slow tools to 0.00 or 0.01 and hide how far apart they are).
fn fmt_gbit(v: f64) -> String {
    if v == 0.0 || v.abs() >= 0.1 || !v.is_finite() {
        return format!("{v:.2}");
    }
    let decimals = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

/// A ratio with 2 decimals.
pub(crate) fn fmt_ratio(v: f64) -> String {
    format!("{v:.2}")
}

/// A Unix time as `YYYY-MM-DD HH:MM:SS UTC`.
pub(crate) fn fmt_date(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let (y, m, d) = hetch_units::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;
    use crate::Point;

    #[test]
    fn gbit_has_two_decimals_or_three_significant_digits() {
        assert_eq!(fmt_gbit(9.4149), "9.41");
        assert_eq!(fmt_gbit(0.1), "0.10");
        assert_eq!(fmt_gbit(0.0), "0.00");
        assert_eq!(fmt_gbit(0.0123456), "0.0123");
        assert_eq!(fmt_gbit(0.05), "0.0500");
        assert_eq!(fmt_gbit(0.00123), "0.00123");
    }

    #[test]
    fn ratio_has_two_decimals() {
        assert_eq!(fmt_ratio(1.0), "1.00");
        assert_eq!(fmt_ratio(0.8765), "0.88");
        assert_eq!(ratio_bold_from(0.95, 0.9), "**0.95**");
        assert_eq!(ratio_bold_from(0.5, 0.9), "0.50");
    }

    #[test]
    fn dates() {
        assert_eq!(fmt_date(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(fmt_date(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(fmt_date(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(fmt_date(4_107_542_399), "2100-02-28 23:59:59 UTC");
        assert_eq!(hetch_units::civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
    }

    #[test]
    fn markdown_text_is_escaped() {
        assert_eq!(md_cell("a|b\nc"), "a\\|b c");
        assert_eq!(link_target("r.svg"), "r.svg");
        assert_eq!(link_target("my r.svg"), "<my r.svg>");
        assert_eq!(fence_for("hetch-lab bench"), "```");
        assert_eq!(fence_for("echo ```x```"), "````");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
    }

    #[test]
    fn tables() {
        let headers = ["a", "b"].map(String::from);
        let rows = vec![vec!["1".to_string(), "x|y".to_string()]];
        assert_eq!(
            table(&headers, &rows),
            "| a | b |\n| --- | --- |\n| 1 | x\\|y |\n"
        );
    }

    fn cell(median: Option<f64>, runs: usize, failed: usize) -> Cell {
        Cell {
            point: Point {
                suite: "datasets".into(),
                dataset: "d".into(),
                file_size: 1,
                files: 1,
                bytes: 1,
                rtt_ms: None,
                loss: 0.0,
                rate_bps: 0,
                cc: "default".into(),
                write_rate_bps: None,
            },
            tool: "t".into(),
            is_limit: false,
            runs,
            failed,
            first_error: (failed > 0).then(|| "timed out".to_string()),
            gbit_per_s: median.map(|m| Summary {
                n: runs - failed,
                mean: m,
                median: m,
                sd: 0.25,
                min: m,
                max: m,
            }),
            normalised: median.map(|m| m / 2.0),
            of_limit: None,
            mode: Mode::Bulk,
            lag: None,
            complete_gbit_per_s: None,
            writer_gbit_per_s: None,
        }
    }

    #[test]
    fn throughput_cells() {
        assert_eq!(throughput_cell(None), "–");
        assert_eq!(throughput_cell(Some(&cell(Some(1.5), 3, 0))), "1.50 (0.25)");
        assert_eq!(
            throughput_cell(Some(&cell(Some(1.5), 3, 1))),
            "1.50 (0.25); FAILED (1/3): timed out"
        );
        assert_eq!(
            throughput_cell(Some(&cell(None, 2, 2))),
            "FAILED (2/2): timed out"
        );
        assert_eq!(throughput_cell(Some(&cell(Some(1.5), 1, 0))), "1.50 (n=1)");
    }

    #[test]
    fn norm_and_limit_cells() {
        assert_eq!(norm_cell(Some(&cell(Some(2.0), 1, 0))), "**1.00**");
        assert_eq!(norm_cell(Some(&cell(Some(1.0), 1, 0))), "0.50");
        assert_eq!(norm_cell(None), "–");
        assert_eq!(
            limit_cell(Some(&cell(Some(9.0), 1, 0)), Some(0.5)),
            "9.00 (best 0.50)"
        );
        assert_eq!(limit_cell(Some(&cell(Some(9.0), 1, 0)), None), "9.00");
    }

    #[test]
    fn plot_files() {
        let link = Link::of(&cell(None, 1, 1).point);
        assert_eq!(plot_file("r", "datasets", &link, false), "r-datasets.svg");
        assert_eq!(plot_file("r", "datasets", &link, true), "r-datasets-lo.svg");
    }
}
