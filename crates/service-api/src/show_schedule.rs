//! Recurring mirrors as a terminal shows them (feature `client`): what `hetch job
//! schedule ls` and `show` print. What the owner wrote is escaped, as for jobs.

use hetch_proto::escape_text;
use hetch_units::{human_bytes, rfc3339_ms};

use crate::{RunView, ScheduleView};

impl ScheduleView {
    /// How it recurs: `every 3600 s` or `cron 0 * * * *`.
    pub fn recurrence(&self) -> String {
        match (&self.every_ms, &self.cron) {
            (Some(ms), _) => format!("every {} s", ms / 1000),
            (None, Some(c)) => format!("cron {}", escape_text(c)),
            (None, None) => "never".into(),
        }
    }

    /// The schedule as `hetch job schedule show` prints it: its facts, then its
    /// newest runs, one a line.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let mut line = |name: &str, value: &dyn std::fmt::Display| {
            out.push_str(&format!("{:<14}{value}\n", format!("{name}:")));
        };
        line("id", &self.id);
        line("owner", &escape_text(&self.owner));
        line("runs", &self.recurrence());
        line("sources", &escape_text(&self.job.sources.join(" ")));
        line("destination", &escape_text(&self.job.dest));
        if let Some(w) = &self.webhook {
            line("webhook", &format!("{} (secret set)", escape_text(&w.url)));
        }
        line(
            "next run",
            &match self.paused {
                true => "paused".to_string(),
                false => rfc3339_ms(self.next_at),
            },
        );
        out.push_str("recent runs:\n");
        for r in &self.runs {
            out.push_str(&format!("  {}\n", run_line(r)));
        }
        out
    }
}

/// One run: `DUE  JOB  STATE  started STARTED  FILES, BYTES, WRITTEN written`, or
/// `DUE  skipped: WHY`.
fn run_line(r: &RunView) -> String {
    let due = rfc3339_ms(r.due);
    match (&r.job, &r.skipped) {
        (Some(job), _) => {
            let mut l = format!(
                "{due}  {job}  {:<9}  started {}  {} files, {}, {} written",
                r.state.as_deref().unwrap_or("gone"),
                r.started.map_or("-".to_string(), rfc3339_ms),
                r.files_done,
                human_bytes(r.bytes_done as f64),
                human_bytes(r.bytes_written as f64)
            );
            if let Some(e) = &r.error {
                l.push_str(&format!("  error: {}", escape_text(e)));
            }
            l
        }
        (None, why) => format!(
            "{due}  skipped: {}",
            escape_text(why.as_deref().unwrap_or("?"))
        ),
    }
}

/// Schedules as `hetch job schedule ls` prints them: a header, then one row each.
pub fn table(schedules: &[ScheduleView]) -> String {
    let mut out = format!(
        "{:<16}  {:<20}  {:<24}  {:<9}  WHAT\n",
        "ID", "RUNS", "NEXT", "LAST"
    );
    for s in schedules {
        let next = match s.paused {
            true => "paused".to_string(),
            false => rfc3339_ms(s.next_at),
        };
        let last = s.runs.first().map_or("-".to_string(), |r| match &r.job {
            Some(_) => r.state.clone().unwrap_or_else(|| "gone".into()),
            None => "skipped".into(),
        });
        out.push_str(&format!(
            "{:<16}  {:<20}  {:<24}  {:<9}  {} -> {}\n",
            s.id,
            s.recurrence(),
            next,
            last,
            escape_text(&s.job.sources.join(" ")),
            escape_text(&s.job.dest),
        ));
    }
    out
}
