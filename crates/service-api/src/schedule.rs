//! Recurring mirrors as users submit and see them: a job's spec with when to run it
//! (`every` an interval, or `cron` a 5-field expression in UTC), and the schedule's
//! view with its newest runs (the jobs it submitted, and the due times it skipped,
//! with why).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cron::Cron;
use crate::job::JobSpec;

/// A recurring mirror, as submitted (`POST /api/schedules`): exactly one of `every`
/// and `cron`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// What each run does.
    pub job: JobSpec,
    /// Run every this long: a number and a unit, `s`, `m`, `h` or `d` (`90s`, `1h`),
    /// from 1 s to 365 d; the first run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 20))]
    pub every: Option<String>,
    /// Run at the times of this cron expression (`MINUTE HOUR DAY MONTH WEEKDAY`,
    /// UTC; numbers, `*`, `A-B`, `/N` and lists only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 200))]
    pub cron: Option<String>,
}

/// Shortest interval.
pub const MIN_EVERY_MS: u64 = 1_000;
/// Longest interval: a year.
pub const MAX_EVERY_MS: u64 = 365 * 86_400_000;
/// Runs a schedule's view shows.
pub const SHOWN_RUNS: u64 = 20;
/// The largest minimum interval a service may set (`--min-schedule-interval`): a day.
pub const MAX_MIN_EVERY_MS: u64 = 86_400_000;

/// When a schedule runs, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// Every this many milliseconds.
    Every(u64),
    /// At the times of this expression (its text, and it parsed).
    Cron(String, Cron),
}

impl ScheduleSpec {
    /// When it runs, or one line naming `every` or `cron` saying what is wrong. (The
    /// job's spec is checked by [`JobSpec::check`].)
    pub fn when(&self) -> Result<When, String> {
        if self.job.options.stream.as_ref().is_some_and(|s| s.forever) {
            // Each run would follow for ever: every later due time would be skipped.
            return Err("every or cron: a job that follows for ever (watch) never recurs".into());
        }
        match (&self.every, &self.cron) {
            (Some(e), None) => parse_every(e).map(When::Every),
            (None, Some(c)) => Ok(When::Cron(c.clone(), c.parse()?)),
            _ => Err("every or cron: a schedule takes exactly one of the two".into()),
        }
    }
}

impl When {
    /// The first due time after `now` (an interval's first run is at once).
    pub fn first(&self, now: u64) -> Option<u64> {
        match self {
            When::Every(_) => Some(now),
            When::Cron(_, c) => c.next_after(now),
        }
    }

    /// The shortest time between two of its due times, in milliseconds.
    pub fn shortest_gap_ms(&self) -> u64 {
        match self {
            When::Every(ms) => *ms,
            When::Cron(_, c) => c.shortest_gap_ms(),
        }
    }

    /// Whether its due times are at least `min_ms` apart (the service's
    /// `--min-schedule-interval`): one line naming `every` or `cron` if not.
    pub fn at_least_apart(&self, min_ms: u64) -> Result<(), String> {
        let gap = self.shortest_gap_ms();
        if gap >= min_ms {
            return Ok(());
        }
        let what = match self {
            When::Every(_) => "every".to_string(),
            When::Cron(text, _) => format!("cron {text:?}"),
        };
        Err(format!(
            "{what}: runs {} s apart, more often than this service allows \
             (--min-schedule-interval {} s)",
            gap / 1000,
            min_ms / 1000
        ))
    }

    /// The due time after `due`, later than `now`: due times missed (the service was
    /// down, or busy) are not run one by one, only the next one.
    pub fn after(&self, due: u64, now: u64) -> Option<u64> {
        match self {
            When::Every(ms) => {
                let missed = now.saturating_sub(due) / ms;
                due.checked_add(ms.checked_mul(missed + 1)?)
            }
            When::Cron(_, c) => c.next_after(now.max(due)),
        }
    }
}

/// `N` and a unit (`s`, `m`, `h`, `d`) as milliseconds, within
/// [`MIN_EVERY_MS`]..=[`MAX_EVERY_MS`].
pub fn parse_every(s: &str) -> Result<u64, String> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let unit_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => {
            return Err(format!(
                "every {s:?}: a number and a unit, s, m, h or d (90s, 1h)"
            ))
        }
    };
    let ms = digits
        .parse::<u64>()
        .ok()
        .filter(|_| digits.len() <= 12)
        .and_then(|n| n.checked_mul(unit_ms))
        .ok_or_else(|| format!("every {s:?}: a number and a unit, s, m, h or d (90s, 1h)"))?;
    if !(MIN_EVERY_MS..=MAX_EVERY_MS).contains(&ms) {
        return Err(format!("every {s:?} is not from 1s to 365d"));
    }
    Ok(ms)
}

/// A service's minimum interval (`--min-schedule-interval`), as [`parse_every`] takes
/// it, in milliseconds: at most a day.
pub fn parse_min_every(s: &str) -> Result<u64, String> {
    let ms = parse_every(s)?;
    match ms <= MAX_MIN_EVERY_MS {
        true => Ok(ms),
        false => Err(format!("{s:?} is longer than a day")),
    }
}

/// A recurring mirror as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleView {
    /// Its id.
    pub id: String,
    /// Who made it (its runs are theirs).
    pub owner: String,
    /// What each run does (without its webhook, which `webhook` shows).
    pub job: JobSpec,
    /// Its runs' webhook, if they have one: the URL, never the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<crate::webhook::WebhookView>,
    /// Its interval, in milliseconds, if it has one.
    pub every_ms: Option<u64>,
    /// Its cron expression, if it has one.
    pub cron: Option<String>,
    /// Its next due time (milliseconds since the epoch).
    pub next_at: u64,
    /// Paused: no runs until resumed.
    pub paused: bool,
    /// When it was made.
    pub created: u64,
    /// Its newest runs, newest first (at most 20).
    pub runs: Vec<RunView>,
}

/// One due time of a schedule: the job it submitted, or why it submitted none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunView {
    /// The due time.
    pub due: u64,
    /// The job it submitted.
    pub job: Option<String>,
    /// Why no job was submitted (its previous run had not ended, or the job was
    /// refused).
    pub skipped: Option<String>,
    /// The job's state (`planning`, `queued`, `running`, `done`, `failed`,
    /// `cancelled`), if it is still in the database.
    pub state: Option<String>,
    /// When its first unit was claimed.
    pub started: Option<u64>,
    /// When it ended.
    pub finished: Option<u64>,
    /// Entries it moved (or found already there).
    pub files_done: u64,
    /// Bytes of the entries it moved (or found already there).
    pub bytes_done: u64,
    /// Bytes it wrote at the destination: 0 for a run that found everything in place.
    #[serde(default)]
    pub bytes_written: u64,
    /// Why it failed.
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_bounded() {
        assert_eq!(parse_every("1s"), Ok(1_000));
        assert_eq!(parse_every("90s"), Ok(90_000));
        assert_eq!(parse_every("1h"), Ok(3_600_000));
        assert_eq!(parse_every("365d"), Ok(MAX_EVERY_MS));
        for bad in [
            "0s",
            "0",
            "1",
            "",
            "s",
            "10y",
            "366d",
            "1.5h",
            "-1s",
            "1 h",
            "1H",
            "99999999999999999999s",
        ] {
            let e = parse_every(bad).unwrap_err();
            assert!(e.starts_with("every"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_minimum_interval_refuses_what_runs_more_often_naming_the_field() {
        assert_eq!(When::Every(60_000).at_least_apart(60_000), Ok(()));
        let e = When::Every(30_000).at_least_apart(60_000).unwrap_err();
        assert!(e.starts_with("every") && e.contains("30 s"), "{e}");
        let every_minute = When::Cron("* * * * *".into(), "* * * * *".parse().unwrap());
        assert_eq!(every_minute.at_least_apart(60_000), Ok(()));
        let e = every_minute.at_least_apart(300_000).unwrap_err();
        assert!(e.starts_with("cron") && e.contains("300 s"), "{e}");
        assert_eq!(parse_min_every("1d"), Ok(MAX_MIN_EVERY_MS));
        assert!(parse_min_every("2d").unwrap_err().contains("a day"));
    }

    #[test]
    fn missed_intervals_are_not_run_one_by_one() {
        let w = When::Every(1_000);
        assert_eq!(w.first(5_000), Some(5_000));
        assert_eq!(w.after(5_000, 5_000), Some(6_000));
        // Ran late by 3.5 s: the next due time is the first after now, on the grid.
        assert_eq!(w.after(5_000, 8_500), Some(9_000));
        assert_eq!(When::Every(u64::MAX).after(u64::MAX - 1, 0), None);
    }
}
