//! Retention of finished jobs (`--keep-jobs`, `--keep-jobs-days`): each pass of the
//! service's background loop deletes a bounded share of what is beyond them, so that
//! the database does not grow for ever (a schedule every minute makes 1,440 jobs a
//! day) and no pass holds it for long (see [`hetch_jobdb::retention`]).

use std::time::Duration;

use hetch_jobdb::DbError;

use crate::{now_ms, AppState};

/// Finished jobs (done, failed, cancelled) kept: the newest `count`, and none that
/// ended longer than `age` ago. Unfinished jobs are never deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How many finished jobs are kept, newest first.
    pub count: u64,
    /// How long a finished job is kept after it ended.
    pub age: Duration,
}

/// Finished jobs kept unless configured otherwise.
pub const DEFAULT_KEEP_JOBS: u64 = 10_000;
/// Days a finished job is kept unless configured otherwise.
pub const DEFAULT_KEEP_DAYS: u64 = 30;

impl Default for Retention {
    fn default() -> Retention {
        Retention {
            count: DEFAULT_KEEP_JOBS,
            age: Duration::from_secs(DEFAULT_KEEP_DAYS * 86_400),
        }
    }
}

/// Jobs one pass deletes at most.
const JOBS_PER_PASS: u64 = 500;
/// Rows of what deleted jobs left one pass deletes at most (a batch a statement).
const ROWS_PER_PASS: u64 = 20 * hetch_jobdb::retention::PURGE_BATCH;

/// One pass: what deleted jobs left, then (once that is done) more jobs. Returns
/// the jobs and rows deleted.
pub(crate) async fn pass(state: &AppState) -> Result<(u64, u64), DbError> {
    let rows = state.db.purge(ROWS_PER_PASS).await?;
    if rows >= ROWS_PER_PASS {
        // Behind: no more jobs until what the last ones left is gone.
        return Ok((0, rows));
    }
    let now = now_ms();
    let age = u64::try_from(state.retention.age.as_millis()).unwrap_or(u64::MAX);
    let before = now.saturating_sub(age);
    let jobs = state
        .db
        .expire_jobs(state.retention.count, before, JOBS_PER_PASS, now)
        .await?;
    Ok((jobs, rows))
}
