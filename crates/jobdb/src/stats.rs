//! Totals over every job, for monitoring (the service's `/metrics`): a few aggregate
//! statements, each one scan at most.

use sqlx::Row;

use crate::jobs::{JobState, UnitCounts};
use crate::{float_sum, sum_sql, uint, Db, DbError};

/// What the database holds, summed over all jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Jobs in each state, in [`JobState::ALL`]'s order.
    pub jobs: Vec<(JobState, u64)>,
    /// Units in each state.
    pub units: UnitCounts,
    /// Files and bytes reported done by workers, over all jobs.
    pub files_done: u64,
    /// See `files_done`.
    pub bytes_done: u64,
    /// Bytes the leased units moved so far, as their workers' heartbeats said (not
    /// yet in `bytes_done`).
    pub bytes_in_flight: u64,
    /// Workers holding at least one lease.
    pub active_workers: u64,
    /// The largest 99th-percentile lag among the streams running now, milliseconds
    /// (0 when none reported one).
    pub stream_lag_p99_ms: u64,
}

impl Db {
    /// The totals now.
    pub async fn totals(&self) -> Result<Totals, DbError> {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
            .fetch_all(&self.reads)
            .await?;
        let mut jobs: Vec<(JobState, u64)> = JobState::ALL.iter().map(|s| (*s, 0)).collect();
        for r in &rows {
            let state: String = r.try_get("state")?;
            let n = uint(r.try_get("n")?, "count")?;
            let slot = jobs.iter_mut().find(|(s, _)| s.as_str() == state);
            let slot = slot.ok_or_else(|| DbError::Row(format!("job state {state:?}")))?;
            slot.1 = n;
        }
        // Summed in floating point: jobs whose counters saturated must not make the
        // totals overflow (nor a damaged row fail them). The units' counts are their
        // jobs' (see `counts`): no scan of every unit at each scrape.
        const STATES: [&str; 6] = ["waiting", "ready", "leased", "done", "failed", "cancelled"];
        let by_state: Vec<String> = STATES
            .iter()
            .map(|s| format!("{} AS u_{s}", sum_sql(&format!("units_{s}"))))
            .collect();
        let sql = format!(
            "SELECT {} AS f, {} AS b, {} FROM jobs",
            sum_sql("files_done"),
            sum_sql("bytes_done"),
            by_state.join(", ")
        );
        let done = sqlx::query(&sql).fetch_one(&self.reads).await?;
        let unit_sum = |s: &str| float_sum(&done, &format!("u_{s}"));
        let units = UnitCounts {
            waiting: unit_sum("waiting")?,
            ready: unit_sum("ready")?,
            leased: unit_sum("leased")?,
            done: unit_sum("done")?,
            failed: unit_sum("failed")?,
            cancelled: unit_sum("cancelled")?,
            retried: 0,
        };
        let sql = format!(
            "SELECT COUNT(DISTINCT lease_owner) AS n, {} AS p, MAX(lag_p99) AS lag \
             FROM units WHERE state = 'leased'",
            sum_sql("progress")
        );
        let leased = sqlx::query(&sql).fetch_one(&self.reads).await?;
        Ok(Totals {
            jobs,
            units,
            files_done: float_sum(&done, "f")?,
            bytes_done: float_sum(&done, "b")?,
            bytes_in_flight: float_sum(&leased, "p")?,
            active_workers: uint(leased.try_get("n")?, "workers")?,
            stream_lag_p99_ms: match leased.try_get::<Option<i64>, _>("lag")? {
                Some(l) => uint(l, "lag_p99")?,
                None => 0,
            },
        })
    }
}
