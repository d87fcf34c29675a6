//! `hetch cp` (and `sync`, `predict`, `verify`, the demo): a [`hetch_copy`] run with
//! progress shown, its warnings and the mirror's changes printed as they happen, the
//! summary at the end, and the exit code.

use std::sync::Arc;
use std::time::Instant;

use hetch_copy::{Copy, CopyJob};
use hetch_engine::Progress;

use crate::ui::{print_comparison, print_summary, Display, ProgressView};

/// How a copy's run is shown.
pub struct Shown {
    /// Print JSON at the end.
    pub json: bool,
    /// How progress is shown while the copy runs.
    pub progress: ProgressView,
    /// The destination operand as typed, to name deleted entries below it.
    pub dest_shown: String,
}

/// Outcome of a copy, for the exit code.
pub enum Outcome {
    /// Everything copied.
    Complete,
    /// Some files failed (listed already).
    Partial,
}

impl Outcome {
    /// 0 when complete, 3 when some files failed (or, comparing, differ).
    pub fn exit_code(self) -> std::process::ExitCode {
        match self {
            Outcome::Complete => std::process::ExitCode::SUCCESS,
            Outcome::Partial => std::process::ExitCode::from(3),
        }
    }
}

/// Runs a copy job, showing it as `shown` says.
pub async fn run(job: CopyJob, shown: Shown) -> anyhow::Result<Outcome> {
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let copy = Copy::new(job)?;
    // Warnings (a followed file truncated, rewritten, still open) go out as they happen.
    // So do a mirror's changes, named below the destination operand (already escaped).
    let dest_shown = shown.dest_shown;
    progress.set_log(Box::new(move |line: &str| {
        if let Some(w) = line.strip_prefix("warning: ") {
            errln!("hetch: warning: {}", hetch_proto::escape_text(w));
        }
        for verb in hetch_engine::CHANGE_VERBS {
            if let Some(rel) = line.strip_prefix(verb) {
                errln!("{verb}{}", crate::sync::shown_below(&dest_shown, rel));
            }
        }
    }));
    // JSON at the end replaces the bar (not JSON progress lines, which a program asked for).
    let view = match shown.progress {
        ProgressView::Bar if shown.json => ProgressView::Hidden,
        v => v,
    };
    let display = Display::start(progress.clone(), view);
    let result = copy.run(&progress).await;
    display.finish();
    let copied = result?;
    match copy.job().opts.compare_only {
        true => print_comparison(&copied, started, shown.json, shown.progress),
        false => print_summary(
            copy.job(),
            &copied,
            &progress,
            started,
            shown.json,
            shown.progress,
        ),
    }
    Ok(match copied.is_complete() {
        true => Outcome::Complete,
        false => Outcome::Partial,
    })
}
