//! `hetch watch DIR DST`: ships every file that appears or grows under DIR, for as
//! long as it runs (an instrument host's mover). Each session follows the tree
//! forever; when the connection or the server goes away, the next session starts after
//! a pause and resumes from what the destination verified, so a restart of either side
//! loses nothing and sends nothing twice that was verified. One line per finished file
//! goes to stderr; counters go out every `--stats-interval` (JSON lines with `--json`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetch_engine::Progress;

use hetch_copy::CopyJob;

use crate::ui;

/// Longest pause between two sessions after a failure.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Runs `job` (following forever) until interrupted; returns on SIGINT/SIGTERM.
/// Counters are JSON lines with `json`.
pub async fn run(
    job: CopyJob,
    json: bool,
    stats_interval: Duration,
) -> anyhow::Result<std::process::ExitCode> {
    let progress = Arc::new(Progress::default());
    progress.set_log(Box::new(|line: &str| {
        eprintln!("hetch watch: {}", hetch_proto::escape_text(line))
    }));
    let started = Instant::now();
    let stats = {
        let p = progress.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(stats_interval);
            tick.tick().await;
            loop {
                tick.tick().await;
                print_stats(&p, started, 0, json);
            }
        })
    };
    let mut sessions = 0u64;
    let mut backoff = Duration::from_secs(1);
    let stop = shutdown();
    tokio::pin!(stop);
    loop {
        sessions += 1;
        let began = Instant::now();
        let outcome = tokio::select! {
            r = hetch_copy::dispatch(&job, progress.clone()) => r,
            _ = &mut stop => break,
        };
        // A follow-forever session only ends on an error.
        let why = match outcome {
            Ok(_) => "the session ended".to_string(),
            Err(e) => format!("{:#}", anyhow::Error::new(e)),
        };
        if began.elapsed() > MAX_BACKOFF {
            backoff = Duration::from_secs(1);
        }
        progress.note(&format!("{why}; starting again in {} s", backoff.as_secs()));
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = &mut stop => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    stats.abort();
    print_stats(&progress, started, sessions.saturating_sub(1), json);
    let failed = progress.failed.load(Relaxed);
    Ok(if failed > 0 {
        std::process::ExitCode::from(3)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The counters: one JSON line on stdout, or one line on stderr.
fn print_stats(p: &Progress, started: Instant, reconnects: u64, json: bool) {
    let lag = p.lag.lock().expect("lag lock").summary();
    let (files, bytes, skipped, failed, warnings) = (
        p.files.load(Relaxed),
        p.bytes.load(Relaxed),
        p.skipped.load(Relaxed),
        p.failed.load(Relaxed),
        p.warnings.load(Relaxed),
    );
    if json {
        let mut v = serde_json::json!({
            "files": files,
            "bytes": bytes,
            "skipped": skipped,
            "failed": failed,
            "warnings": warnings,
            "reconnects": reconnects,
            "seconds": started.elapsed().as_secs_f64(),
        });
        if let Some(l) = lag {
            v["lag"] = ui::lag_json(&l);
        }
        println!("{v}");
    } else {
        let lag = lag
            .map(|l| format!("; lag p50 {:.0} ms, p99 {:.0} ms", l.p50_ms, l.p99_ms))
            .unwrap_or_default();
        eprintln!(
            "hetch watch: {files} files, {bytes} bytes sent, {skipped} already there, {failed} failed, {warnings} warnings{lag}"
        );
    }
}
