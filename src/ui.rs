//! What the user sees: a progress bar on a terminal, a summary line or JSON at the end
//! (as [`hetch_copy::summary`] writes them).

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetch_copy::summary::{Comparison, CopySummary, ProgressCounts, ProgressLine};
use hetch_copy::{Copied, CopyJob};
use hetch_engine::Progress;
use hetch_proto::escape_text;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// How a run shows its progress while it runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ProgressView {
    /// A bar on stderr, when stderr is a terminal.
    Bar,
    /// Nothing.
    Hidden,
    /// A JSON line on stderr each second, for a program driving hetch (`hetch mcp`):
    /// `{"progress":{"bytes":B,"total_bytes":T,"files":F,"total_files":N}}`, bytes and
    /// files counting the skipped ones as done.
    JsonLines,
}

/// A progress display that follows a [`Progress`] until dropped.
pub struct Display {
    bar: Option<ProgressBar>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Display {
    /// Starts following `progress` as `view` says (a bar only when stderr is a
    /// terminal).
    pub fn start(progress: Arc<Progress>, view: ProgressView) -> Display {
        if view == ProgressView::JsonLines {
            let (tx, mut rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = &mut rx => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    let line = ProgressLine {
                        progress: ProgressCounts::of(&progress),
                    };
                    errln!("{}", json_line(&line));
                }
            });
            return Display {
                bar: None,
                stop: Some(tx),
            };
        }
        if view == ProgressView::Hidden || !std::io::stderr().is_terminal() {
            return Display {
                bar: None,
                stop: None,
            };
        }
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}",
            )
            .expect("valid template"),
        );
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let b = bar.clone();
        tokio::spawn(async move {
            loop {
                let p = ProgressCounts::of(&progress);
                b.set_length(p.total_bytes);
                b.set_position(p.bytes);
                b.set_message(format!("{}/{} files", p.files, p.total_files));
                tokio::select! {
                    _ = &mut rx => break,
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
        });
        Display {
            bar: Some(bar),
            stop: Some(tx),
        }
    }

    /// Removes the bar.
    pub fn finish(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// `v` as one line of JSON, its keys in alphabetical order (as the commands have
/// always printed them).
pub fn json_line(v: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(v).expect("a plain struct")
}

/// What a run prints at its end, as its flags say: `--json`'s JSON on stdout, else
/// lines for people on stderr, except under `-q` (its progress hidden), which prints
/// only what failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    Json,
    Lines,
    Quiet,
}

impl End {
    fn of(json: bool, progress: ProgressView) -> End {
        match (json, progress) {
            (true, _) => End::Json,
            (false, ProgressView::Hidden) => End::Quiet,
            (false, _) => End::Lines,
        }
    }
}

/// Prints the end of a comparison (`hetch verify`): every difference, then a count
/// (as `json` and `progress`, the run's flags, say: see [`End`]).
pub fn print_comparison(copied: &Copied, started: Instant, json: bool, progress: ProgressView) {
    // Messages name files a peer chose: escaped, so they cannot drive the terminal.
    for e in &copied.report.errors {
        errln!("hetch: differs: {}", escape_text(e));
    }
    let c = Comparison::new(copied, started.elapsed().as_secs_f64());
    match End::of(json, progress) {
        End::Json => crate::out::or_say(outln!("{}", json_line(&c))),
        End::Lines => errln!("hetch: {}", c.to_line()),
        End::Quiet => {}
    }
}

/// Prints the end-of-transfer summary of `copied`, a run of `job` (lines, or JSON on
/// stdout, or nothing under `-q`: see [`End`]) and the per-file errors: each on
/// stderr, and in JSON also in the summary's `errors` list. A prediction (`hetch
/// predict`) is the command's answer, printed under `-q` too.
pub fn print_summary(
    job: &CopyJob,
    copied: &Copied,
    progress: &Progress,
    started: Instant,
    json: bool,
    progress_view: ProgressView,
) {
    let summary = CopySummary::new(job, copied, progress, started.elapsed().as_secs_f64());
    for e in &copied.report.errors {
        errln!("hetch: error: {}", escape_text(e));
    }
    let lines = match End::of(json, progress_view) {
        End::Json => return crate::out::or_say(outln!("{}", json_line(&summary))),
        End::Lines => summary.to_lines(),
        End::Quiet => {
            let predicted = summary.dry_run.as_ref().and_then(|d| d.predicted.as_ref());
            predicted.map(|p| p.to_text()).into_iter().collect()
        }
    };
    lines.iter().for_each(|l| errln!("hetch: {l}"));
}
