//! `hetch watch DIR DST`: ships every file that appears or grows under DIR, for as
//! long as it runs (an instrument host's mover). Each session follows the tree
//! forever; when the connection or the server goes away, the next session starts after
//! a pause and resumes from what the destination verified, so a restart of either side
//! loses nothing and sends nothing twice that was verified. One line per finished file
//! goes to stderr; counters go out every `--stats-interval` (JSON lines with `--json`).
//! Under `-q` only warnings and lost sessions are printed (and `--json`'s counters).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hetch_copy::summary::Counters;
use hetch_copy::CopyJob;
use hetch_engine::Progress;

use crate::ui;

/// Runs `job` (following forever) until interrupted; returns on SIGINT/SIGTERM.
/// Counters are JSON lines with `json`; `quiet` leaves out what went well.
pub async fn run(
    job: CopyJob,
    json: bool,
    quiet: bool,
    stats_interval: Duration,
) -> anyhow::Result<std::process::ExitCode> {
    let progress = Arc::new(Progress::default());
    progress.set_log(Box::new(move |line: &str| {
        // A file shipped (or its source removed after) is success: not for `-q`.
        let success = line.starts_with("done ") || line.starts_with("removed ");
        if !(quiet && success) {
            errln!("hetch watch: {}", hetch_proto::escape_text(line))
        }
    }));
    let started = Instant::now();
    let stats = {
        let p = progress.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(stats_interval);
            tick.tick().await;
            loop {
                tick.tick().await;
                print_stats(&p, started, 0, json, quiet);
            }
        })
    };
    let sessions = hetch_copy::forever(&job, &progress, shutdown()).await;
    stats.abort();
    print_stats(&progress, started, sessions.saturating_sub(1), json, quiet);
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

/// The counters: one JSON line on stdout, or one line on stderr (none if `quiet`).
fn print_stats(p: &Progress, started: Instant, reconnects: u64, json: bool, quiet: bool) {
    let c = Counters::of(p, started.elapsed().as_secs_f64(), reconnects);
    match (json, quiet) {
        (true, _) => crate::out::or_say(outln!("{}", ui::json_line(&c))),
        (false, false) => errln!("hetch watch: {}", c.to_line()),
        (false, true) => {}
    }
}
