//! What the user sees: a progress bar on a terminal, a summary line or JSON at the end.

use std::io::IsTerminal;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetch_engine::{Progress, Report};
use hetch_proto::escape_text;
use indicatif::{ProgressBar, ProgressStyle};

use crate::units::human_bytes;

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

/// Bytes and files done (copied or skipped) and in all, as a JSON line shows them.
fn progress_json(p: &Progress) -> serde_json::Value {
    let done = p.bytes.load(Relaxed) + p.skipped_bytes.load(Relaxed);
    serde_json::json!({"progress": {
        "bytes": done,
        "total_bytes": p.total_bytes.load(Relaxed).max(done),
        "files": p.files.load(Relaxed) + p.skipped.load(Relaxed),
        "total_files": p.total_files.load(Relaxed),
    }})
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
                    eprintln!("{}", progress_json(&progress));
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
                let p = &progress;
                let done = p.bytes.load(Relaxed) + p.skipped_bytes.load(Relaxed);
                b.set_length(p.total_bytes.load(Relaxed).max(done));
                b.set_position(done);
                b.set_message(format!(
                    "{}/{} files",
                    p.files.load(Relaxed) + p.skipped.load(Relaxed),
                    p.total_files.load(Relaxed)
                ));
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

/// Prints the end of a comparison (`hetch verify`): every difference, then a count.
pub fn print_comparison(report: &Report, started: Instant, json: bool, reconnects: u64) {
    let s = &report.summary;
    // Messages name files a peer chose: escaped, so they cannot drive the terminal.
    for e in &report.errors {
        eprintln!("hetch: differs: {}", escape_text(e));
    }
    let secs = started.elapsed().as_secs_f64();
    if json {
        let v = serde_json::json!({
            "identical": s.files,
            "bytes_compared": s.bytes,
            "differences": s.failed,
            "reconnects": reconnects,
            "seconds": secs,
        });
        println!("{v}");
    } else if s.failed == 0 {
        eprintln!(
            "hetch: identical: {} entries compared in {secs:.2} s",
            s.files
        );
    } else {
        eprintln!(
            "hetch: {} differences; {} entries identical ({secs:.2} s)",
            s.failed, s.files
        );
    }
}

/// Compression on the wire, as this side saw it: the blocks' bytes, the bytes their
/// payloads took on the wire, and the ratio of the two (1 when nothing was compressed).
fn compression_json(progress: &Progress) -> serde_json::Value {
    let wire = progress.wire_bytes.load(Relaxed);
    let blocks = progress.compressed_blocks.load(Relaxed);
    let raw = progress.bytes.load(Relaxed);
    let ratio = if wire > 0 && blocks > 0 {
        raw as f64 / wire as f64
    } else {
        1.0
    };
    serde_json::json!({
        "compressed_blocks": blocks,
        "wire_bytes": wire,
        "ratio": ratio,
    })
}

/// What a copy was asked to be, for its summary.
pub struct RunShape {
    /// Its mirroring phase, if any.
    pub mirror: Option<hetch_engine::DeleteRequest>,
    /// A dry run: counts of what would change instead of what did.
    pub dry_run: bool,
    /// How its sessions chose their streams (`--json`'s `autotune`).
    pub autotune: serde_json::Value,
    /// A dry run's prediction of the real copy.
    pub predicted: Option<hetch_doctor::predict::Prediction>,
}

/// Prints the end-of-transfer summary (one line, or JSON on stdout) and the per-file
/// errors: each on stderr, and with `json` also in the summary's `errors` list;
/// `reconnects` counts the sessions opened again after lost ones.
pub fn print_summary(
    report: &Report,
    progress: &Progress,
    started: Instant,
    json: bool,
    reconnects: u64,
    shape: &RunShape,
) {
    let mirror = shape.mirror;
    let secs = started.elapsed().as_secs_f64();
    let s = &report.summary;
    let bytes = s.bytes.max(progress.bytes.load(Relaxed));
    let rate = if secs > 0.0 { bytes as f64 / secs } else { 0.0 };
    for e in &report.errors {
        eprintln!("hetch: error: {}", escape_text(e));
    }
    let lag = progress.lag.lock().expect("lag lock").summary();
    if json {
        let mut v = serde_json::json!({
            "files": s.files,
            "bytes": bytes,
            "skipped": s.skipped,
            "failed": s.failed,
            "retried_blocks": s.retried_blocks.max(progress.retried_blocks.load(Relaxed)),
            "reverified_blocks": s.reverified.max(progress.reverified.load(Relaxed)),
            "warnings": progress.warnings.load(Relaxed),
            "reconnects": reconnects,
            "seconds": secs,
            "bytes_per_second": rate,
            // The same lines as on stderr (escaped there), one per failed file.
            "errors": report.errors,
        });
        if let Some(l) = lag {
            v["lag"] = lag_json(&l);
        }
        v["compression"] = compression_json(progress);
        let k = hetch_net::ktls();
        v["ktls"] = serde_json::json!({"available": k.available, "used": false, "why": k.why});
        v["autotune"] = shape.autotune.clone();
        if mirror.is_some() {
            v["deleted"] = report.deleted.into();
            v["deleted_paths"] = report.deleted_paths.clone().into();
            v["deleted_truncated"] = (report.deleted > report.deleted_paths.len() as u64).into();
        }
        if shape.dry_run {
            let w = &report.would;
            v["dry_run"] = true.into();
            v["would_copy"] = w.copy.into();
            v["would_copy_bytes"] = w.copy_bytes.into();
            v["would_replace"] = w.replace.into();
            v["would_replace_bytes"] = w.replace_bytes.into();
            v["would_skip"] = s.skipped.into();
            if let Some(p) = &shape.predicted {
                v["predicted"] = serde_json::to_value(p).expect("a plain struct");
            }
        }
        println!("{v}");
    } else if shape.dry_run {
        let w = &report.would;
        let deleted = match mirror {
            Some(_) => format!(", {} deleted", report.deleted),
            None => String::new(),
        };
        eprintln!(
            "hetch: dry run: {} entries ({}) would be copied, {} ({}) replaced, {} files skipped{deleted}; nothing was changed",
            w.copy,
            human_bytes(w.copy_bytes as f64),
            w.replace,
            human_bytes(w.replace_bytes as f64),
            s.skipped,
        );
        if let Some(p) = &shape.predicted {
            eprintln!("hetch: {}", p.to_text());
        }
    } else {
        if mirror.is_some() {
            eprintln!("hetch: {} entries deleted", report.deleted);
        }
        eprintln!(
            "hetch: {} files, {} in {:.2} s ({}/s); {} skipped, {} failed, {} blocks re-sent",
            s.files,
            human_bytes(bytes as f64),
            secs,
            human_bytes(rate),
            s.skipped,
            s.failed,
            s.retried_blocks.max(progress.retried_blocks.load(Relaxed)),
        );
        if reconnects > 0 {
            eprintln!("hetch: recovered from {reconnects} lost sessions");
        }
        if let Some(l) = lag {
            eprintln!(
                "hetch: lag (appended -> durable and verified): p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms over {} samples",
                l.p50_ms, l.p99_ms, l.max_ms, l.samples
            );
        }
    }
}

/// Lag figures for JSON output.
pub fn lag_json(l: &hetch_engine::LagSummary) -> serde_json::Value {
    serde_json::json!({
        "samples": l.samples,
        "p50_ms": l.p50_ms,
        "p99_ms": l.p99_ms,
        "max_ms": l.max_ms,
        "mean_ms": l.mean_ms,
    })
}
