//! The Markdown report of an S3 benchmark (`STEM.md` beside the results): per link,
//! dataset and direction the median MB/s of each tool and its ratio to aws-cli; a
//! summary of hetch-agent against aws-cli, rclone, s5cmd (where it ran) and iperf3
//! (the link's limit); the tools' versions and the exact commands they ran.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::record::{Direction, S3Meta, S3Record};
use super::tools::NAMES;
use crate::report::{fence_for, fmt_ratio, table, truncate};
use crate::stats::{rate_label, summarize, Summary};

/// The tool the others are divided by in each table: what users run by default.
const BASELINE: &str = "aws";

/// The tool the summary compares with every other one: hetch's intended architecture.
const SUBJECT: &str = "hetch-agent";

/// The limit's name.
const LIMIT: &str = "iperf3";

/// Longest error text a table cell shows (the results file has all of it).
const MAX_ERROR_CHARS: usize = 100;

/// Writes `STEM.md` into `dir` and returns its path.
pub fn write(records: &[S3Record], meta: &S3Meta, dir: &Path, stem: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    let path = dir.join(format!("{stem}.md"));
    std::fs::write(&path, markdown(records, meta))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// One link as the records carry it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Link {
    rtt_ms: f64,
    rate_bps: u64,
}

impl Link {
    fn of(r: &S3Record) -> Link {
        Link {
            rtt_ms: r.rtt_ms,
            rate_bps: r.rate_bps,
        }
    }

    /// `loopback`, or e.g. `RTT 100 ms, 2 Gbit/s`.
    fn label(&self) -> String {
        if self.rtt_ms <= 0.0 {
            return "loopback".to_string();
        }
        let rate = if self.rate_bps == 0 {
            "unlimited rate".to_string()
        } else {
            rate_label(self.rate_bps)
        };
        format!("RTT {} ms, {rate}", self.rtt_ms)
    }
}

/// The runs of one tool at one (link, dataset, direction).
struct Cell {
    /// MB/s of the verified runs.
    mb_per_s: Option<Summary>,
    runs: usize,
    failed: usize,
    first_error: Option<String>,
}

impl Cell {
    fn median(&self) -> Option<f64> {
        self.mb_per_s.map(|s| s.median)
    }
}

/// The runs of one (link, dataset, direction): a table of the report.
struct Group<'a> {
    link: Link,
    dataset: &'a str,
    files: u64,
    file_size: u64,
    direction: Direction,
    records: Vec<&'a S3Record>,
}

impl Group<'_> {
    /// `tool`'s runs here; `None` if it has none.
    fn cell(&self, tool: &str) -> Option<Cell> {
        let runs: Vec<&&S3Record> = self.records.iter().filter(|r| r.tool == tool).collect();
        if runs.is_empty() {
            return None;
        }
        let speeds: Vec<f64> = runs.iter().filter_map(|r| r.mb_per_s()).collect();
        Some(Cell {
            mb_per_s: summarize(&speeds),
            runs: runs.len(),
            failed: runs.iter().filter(|r| !r.verified).count(),
            first_error: runs.iter().find_map(|r| r.error.clone()),
        })
    }

    fn median(&self, tool: &str) -> Option<f64> {
        self.cell(tool).and_then(|c| c.median())
    }
}

/// The records grouped by (link, dataset, direction): links from loopback up by RTT,
/// datasets in the order they first ran, up before down.
fn groups(records: &[S3Record]) -> Vec<Group<'_>> {
    let mut out: Vec<Group> = Vec::new();
    for r in records {
        let link = Link::of(r);
        match out
            .iter_mut()
            .find(|g| g.link == link && g.dataset == r.dataset && g.direction == r.direction)
        {
            Some(g) => g.records.push(r),
            None => out.push(Group {
                link,
                dataset: &r.dataset,
                files: r.files,
                file_size: r.file_size,
                direction: r.direction,
                records: vec![r],
            }),
        }
    }
    let dataset_order: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for r in records {
            if !v.contains(&r.dataset.as_str()) {
                v.push(&r.dataset);
            }
        }
        v
    };
    let pos = |d: &str| dataset_order.iter().position(|x| *x == d);
    out.sort_by(|a, b| {
        a.link
            .rtt_ms
            .total_cmp(&b.link.rtt_ms)
            .then(a.link.rate_bps.cmp(&b.link.rate_bps))
            .then(pos(a.dataset).cmp(&pos(b.dataset)))
            .then(a.direction.cmp(&b.direction))
    });
    out
}

/// The tools that ran, in [`NAMES`] order, then any others by name.
fn tools_that_ran(records: &[S3Record]) -> Vec<String> {
    let mut ran: Vec<String> = Vec::new();
    for r in records {
        if !ran.contains(&r.tool) {
            ran.push(r.tool.clone());
        }
    }
    ran.sort_by_key(|t| {
        (
            NAMES.iter().position(|n| n == t).unwrap_or(NAMES.len()),
            t.clone(),
        )
    });
    ran
}

/// The whole report.
fn markdown(records: &[S3Record], meta: &S3Meta) -> String {
    let tools = tools_that_ran(records);
    let groups = groups(records);
    let mut md = header(meta);
    md.push_str(&tools_table(meta, &tools));
    md.push_str(&summary(&groups, &tools, meta));
    let mut link: Option<Link> = None;
    for g in &groups {
        if link != Some(g.link) {
            let _ = write!(md, "## {}\n\n", g.link.label());
            link = Some(g.link);
        }
        md.push_str(&group_table(g, &tools));
    }
    md.push_str(&commands(meta));
    md
}

/// Title, command, date, MinIO, notes.
fn header(meta: &S3Meta) -> String {
    let mut md = String::from("# hetch-lab bench s3 report\n\n");
    md.push_str(&crate::report::command_and_date(
        &meta.command,
        meta.started_unix,
    ));
    let _ = writeln!(md, "- MinIO: {}", or_unknown(&meta.minio));
    if !meta.notes.is_empty() {
        md.push_str("- Notes:\n");
        for n in &meta.notes {
            let _ = writeln!(md, "  - {n}");
        }
    }
    md.push('\n');
    md
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "unknown"
    } else {
        s
    }
}

/// Every tool asked for, with its version; one that could not run says why.
fn tools_table(meta: &S3Meta, ran: &[String]) -> String {
    let mut rows: Vec<Vec<String>> = meta
        .tools
        .iter()
        .map(|t| {
            let name = if t.is_limit {
                format!("{} (limit)", t.name)
            } else {
                t.name.clone()
            };
            let version = match &t.unavailable {
                Some(why) => format!("**unavailable**: {why}; no runs"),
                None => t.version.clone(),
            };
            vec![name, version, t.flags.clone()]
        })
        .collect();
    for t in ran
        .iter()
        .filter(|t| !meta.tools.iter().any(|i| &i.name == *t))
    {
        rows.push(vec![t.clone(), "?".into(), "?".into()]);
    }
    let headers = ["tool", "version", "how it runs"].map(String::from);
    format!("## Tools\n\n{}\n", table(&headers, &rows))
}

/// hetch-agent's median over each other tool's, per (link, dataset, direction), and
/// its fraction of iperf3.
fn summary(groups: &[Group], tools: &[String], meta: &S3Meta) -> String {
    if !tools.iter().any(|t| t == SUBJECT) {
        return String::new();
    }
    let others: Vec<&String> = tools
        .iter()
        .filter(|t| *t != SUBJECT && *t != LIMIT)
        .collect();
    let mut headers = vec![
        "link".to_string(),
        "dataset".to_string(),
        "direction".to_string(),
        format!("{SUBJECT} MB/s"),
    ];
    headers.extend(others.iter().map(|t| format!("÷ {t}")));
    let limit = tools.iter().any(|t| t == LIMIT);
    if limit {
        headers.push(format!("of {LIMIT}"));
    }
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            let subject = g.median(SUBJECT);
            let mut row = vec![
                g.link.label(),
                g.dataset.to_string(),
                g.direction.as_str().to_string(),
                subject.map_or("–".into(), fmt_mb),
            ];
            for t in others
                .iter()
                .copied()
                .chain(limit.then_some(&LIMIT.to_string()))
            {
                row.push(ratio(subject, g.median(t)));
            }
            row
        })
        .collect();
    let of_limit = if limit {
        format!("; *of {LIMIT}*: its fraction of the link's TCP limit")
    } else {
        String::new()
    };
    let mut md = format!(
        "## {SUBJECT} against the others\n\n{SUBJECT}'s median MB/s divided by each \
         tool's median at the same link, dataset and direction (above 1.00: \
         {SUBJECT} is faster){of_limit}. '–': a side without verified runs.\n\n"
    );
    md.push_str(&table(&headers, &rows));
    let missing: Vec<String> = meta
        .tools
        .iter()
        .filter_map(|t| {
            t.unavailable
                .as_ref()
                .map(|why| format!("{} ({why})", t.name))
        })
        .collect();
    if !missing.is_empty() {
        let _ = write!(md, "\nNot run, unavailable here: {}.\n", missing.join("; "));
    }
    md.push('\n');
    md
}

/// One (link, dataset, direction): per tool its median MB/s, runs, ratio to aws-cli
/// and hetch-agent's ratio to it.
fn group_table(g: &Group, tools: &[String]) -> String {
    let mut md = format!(
        "### {}: {} × {}, {}\n\n",
        g.dataset,
        g.files,
        crate::stats::size_label(g.file_size),
        g.direction.label()
    );
    let headers = [
        "tool".to_string(),
        "median MB/s (min–max)".to_string(),
        "verified runs".to_string(),
        format!("÷ {BASELINE}"),
        format!("{SUBJECT} ÷ tool"),
    ];
    let base = g.median(BASELINE);
    let subject = g.median(SUBJECT);
    let rows: Vec<Vec<String>> = tools
        .iter()
        .filter_map(|t| g.cell(t).map(|c| (t, c)))
        .map(|(t, c)| {
            let name = if t == LIMIT {
                format!("{t} (limit)")
            } else {
                t.clone()
            };
            vec![
                name,
                speeds(&c),
                runs(&c),
                ratio(c.median(), base),
                if t == SUBJECT {
                    "–".into()
                } else {
                    ratio(subject, c.median())
                },
            ]
        })
        .collect();
    md.push_str(&table(&headers, &rows));
    md.push('\n');
    md
}

/// `123.4 (120.1–130.2)`, or the failure when no run was verified.
fn speeds(c: &Cell) -> String {
    match c.mb_per_s {
        Some(s) if s.n > 1 => format!("{} ({}–{})", fmt_mb(s.median), fmt_mb(s.min), fmt_mb(s.max)),
        Some(s) => fmt_mb(s.median),
        None => "FAILED".to_string(),
    }
}

/// `3/3`, or `2/3; first error: ...`.
fn runs(c: &Cell) -> String {
    let ok = c.runs - c.failed;
    match (&c.first_error, c.failed) {
        (Some(e), f) if f > 0 => format!(
            "{ok}/{}; first error: {}",
            c.runs,
            truncate(e, MAX_ERROR_CHARS)
        ),
        _ => format!("{ok}/{}", c.runs),
    }
}

/// `a / b` with two decimals; `–` when either side has no verified runs.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => fmt_ratio(a / b),
        _ => "–".to_string(),
    }
}

/// MB/s: one decimal from 10 up, two below.
fn fmt_mb(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The exact command each tool ran each way (its first run).
fn commands(meta: &S3Meta) -> String {
    if meta.commands.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "## Commands\n\nEach tool's first run each way, as run (environment set for \
         it, secrets elided; on the testbed `ip netns exec hetch-a` runs it on the \
         client host). Later runs differ only in the prefix, the destination and, on \
         another link, the addresses.\n\n",
    );
    for c in &meta.commands {
        let fence = fence_for(&c.command);
        let _ = write!(
            md,
            "{} {}:\n\n{fence}sh\n{}\n{fence}\n\n",
            c.tool,
            c.direction.as_str(),
            c.command
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s3::record::tests::rec;
    use crate::s3::record::S3ToolInfo;

    #[test]
    fn the_report_has_medians_ratios_failures_and_unavailable_tools() {
        let mut records = Vec::new();
        for (tool, secs) in [
            ("aws", 4.0),
            ("hetch-agent", 1.0),
            ("rclone", 2.0),
            ("iperf3", 0.5),
        ] {
            for it in 1..=3 {
                let mut r = rec(
                    tool,
                    Direction::Up,
                    secs * (0.8 + 0.1 * f64::from(it)),
                    true,
                );
                r.iteration = it;
                records.push(r);
            }
        }
        let mut bad = rec("hetch", Direction::Up, 1.0, false);
        bad.error = Some("not verified: 3 files, expected 4".into());
        records.push(bad);
        let meta = S3Meta {
            command: "hetch-lab bench s3 --rtt 100ms".into(),
            minio: "minio test".into(),
            tools: vec![
                S3ToolInfo {
                    name: "s5cmd".into(),
                    unavailable: Some("s5cmd not on PATH".into()),
                    ..S3ToolInfo::default()
                },
                S3ToolInfo {
                    name: "aws".into(),
                    version: "aws-cli/2.9.19".into(),
                    ..S3ToolInfo::default()
                },
            ],
            ..S3Meta::default()
        };
        let md = markdown(&records, &meta);
        // 4 MiB in 1 s: 4.19 MB/s; aws takes 4x as long.
        assert!(
            md.contains("| hetch-agent | 4.19 (3.81–4.66) | 3/3 | 4.00 | – |"),
            "{md}"
        );
        assert!(
            md.contains("| aws | 1.05 (0.95–1.17) | 3/3 | 1.00 | 4.00 |"),
            "{md}"
        );
        assert!(md.contains("| iperf3 (limit) | 8.39"), "{md}");
        assert!(
            md.contains("| hetch | FAILED | 0/1; first error: not verified: 3 files"),
            "{md}"
        );
        assert!(md.contains("## RTT 100 ms, 2 Gbit/s"), "{md}");
        // Summary: hetch-agent over hetch (–), aws (4.00), rclone (2.00); half of iperf3.
        assert!(
            md.contains("| RTT 100 ms, 2 Gbit/s | 1MiB-x4 | up | 4.19 | – | 4.00 | 2.00 | 0.50 |"),
            "{md}"
        );
        assert!(
            md.contains("**unavailable**: s5cmd not on PATH; no runs"),
            "{md}"
        );
        assert!(
            md.contains("Not run, unavailable here: s5cmd (s5cmd not on PATH)."),
            "{md}"
        );
    }
}
