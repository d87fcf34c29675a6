//! What follows from a change to a job's units, in the same transaction: a split
//! file's commit becomes ready when its last range is done (or fails with it), a
//! mirroring job's deletion step becomes ready once every other unit is done (or
//! fails when one failed), and a job whose units are all final ends, done or failed.
//!
//! Each step reads what it needs by an index or off the job's counts
//! ([`crate::counts`]): a report's settling costs the same in a job of ten units and
//! in one of a million.

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use crate::counts::Delta;
use crate::{int, uint, DbError};

/// Which of a job's commits may have become ready or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commits<'a> {
    /// Those of these files (block ranges of them ended; none when none did).
    OfFiles(&'a [u64]),
    /// Any (after a change of many units).
    All,
}

/// Settles job `job` after a change to its units (see the module). The job's row is
/// already locked by the caller, and its counts up to date: `known` when the caller
/// has just read them (written by a statement that returned them), saving a read
/// while the job's row is held.
pub(crate) async fn settle(
    tx: &mut Transaction<'static, Any>,
    job: &str,
    commits: Commits<'_>,
    now: u64,
    known: Option<Counts>,
) -> Result<(), DbError> {
    let mut changed = 0;
    match commits {
        Commits::OfFiles(files) => {
            for f in files {
                changed += settle_commits(tx, job, Some(*f), now).await?;
            }
        }
        Commits::All => changed += settle_commits(tx, job, None, now).await?,
    }
    let mut counts = match known {
        Some(c) if changed == 0 => c,
        _ => Counts::of(tx, job).await?,
    };
    // A mirroring job's deletion step runs once every other unit is done, and never
    // when one failed or was cancelled: as `hetch sync`, nothing is deleted unless
    // every copy went through. It is the job's one deletion step and waits: so every
    // other unit is done when it is the one unit not final.
    let unfinished = counts.failed > 0 || counts.cancelled > 0;
    let step = if unfinished && counts.waiting > 0 {
        Some((
            "failed",
            ", error = 'deletions skipped: a copy unit failed, so nothing was deleted'",
        ))
    } else if !unfinished && counts.waiting == 1 && counts.ready == 0 && counts.leased == 0 {
        Some(("ready", ""))
    } else {
        None
    };
    if let Some((to, error)) = step {
        // Made ready, it goes by the time it became so (see `leases::NEVER_TRIED`).
        let sql = format!(
            "UPDATE units SET state = '{to}'{error}, not_before = $2 \
             WHERE job = $1 AND kind = 'delete' AND state = 'waiting' RETURNING seq"
        );
        let q = sqlx::query(&sql).bind(job).bind(int(now));
        let moved = q.fetch_all(&mut **tx).await?;
        shift(tx, job, "waiting", to, moved.len()).await?;
        // Saturating: counts a damaged row holds must not panic a report.
        let n = moved.len() as u64;
        counts.waiting = counts.waiting.saturating_sub(n);
        match to {
            "failed" => counts.failed = counts.failed.saturating_add(n),
            _ => counts.ready = counts.ready.saturating_add(n),
        }
    }
    end_if_final(tx, job, &counts, now).await
}

/// Commits of job `job` (of file `file` only, if given) whose ranges are all done
/// become ready; those with a failed range fail. Returns how many changed.
async fn settle_commits(
    tx: &mut Transaction<'static, Any>,
    job: &str,
    file: Option<u64>,
    now: u64,
) -> Result<usize, DbError> {
    let of_file = match file {
        Some(_) => "AND file_from = $3",
        None => "",
    };
    let steps = [
        (
            "ready",
            format!(
                "UPDATE units SET state = 'ready', not_before = $2 \
                 WHERE job = $1 AND kind = 'commit' AND state = 'waiting' {of_file} \
                   AND NOT EXISTS (SELECT 1 FROM units r WHERE r.job = units.job \
                     AND r.file_from = units.file_from AND r.kind = 'range' AND r.state <> 'done') \
                 RETURNING seq"
            ),
        ),
        (
            "failed",
            format!(
                "UPDATE units SET state = 'failed', error = 'a block range of the file failed', \
                   not_before = $2 \
                 WHERE job = $1 AND kind = 'commit' AND state = 'waiting' {of_file} \
                   AND EXISTS (SELECT 1 FROM units r WHERE r.job = units.job \
                     AND r.file_from = units.file_from AND r.kind = 'range' AND r.state = 'failed') \
                 RETURNING seq"
            ),
        ),
    ];
    let mut changed = 0;
    for (to, sql) in &steps {
        // Made ready, a commit goes by the time it became so (see
        // `leases::NEVER_TRIED`).
        let mut q = sqlx::query(sql).bind(job).bind(int(now));
        if let Some(f) = file {
            q = q.bind(int(f));
        }
        let moved = q.fetch_all(&mut **tx).await?;
        shift(tx, job, "waiting", to, moved.len()).await?;
        changed += moved.len();
    }
    Ok(changed)
}

/// Ends job `job`, queued or running, if none of its units is still to run (by its
/// `counts`, as they are now): failed
/// with its first failed unit's error if one failed, else done.
async fn end_if_final(
    tx: &mut Transaction<'static, Any>,
    job: &str,
    counts: &Counts,
    now: u64,
) -> Result<(), DbError> {
    if counts.waiting > 0 || counts.ready > 0 || counts.leased > 0 {
        return Ok(());
    }
    let error: Option<Option<String>> = sqlx::query_scalar(
        "SELECT error FROM units WHERE job = $1 AND state = 'failed' ORDER BY seq LIMIT 1",
    )
    .bind(job)
    .fetch_optional(&mut **tx)
    .await?;
    let state = match error {
        Some(_) => "failed",
        None => "done",
    };
    sqlx::query(
        "UPDATE jobs SET finished = $2, state = $3, error = $4 \
         WHERE id = $1 AND state IN ('queued', 'running')",
    )
    .bind(job)
    .bind(int(now))
    .bind(state)
    .bind(error.flatten())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// `n` of job `job`'s units moved from state `from` to `to`, on its counts.
async fn shift(
    tx: &mut Transaction<'static, Any>,
    job: &str,
    from: &str,
    to: &str,
    n: usize,
) -> Result<(), DbError> {
    let mut delta = Delta::default();
    delta.moved(from, to, n as i64);
    delta.apply(tx, job).await
}

/// A job's unit counts as its row has them.
pub(crate) struct Counts {
    waiting: u64,
    ready: u64,
    leased: u64,
    failed: u64,
    cancelled: u64,
}

impl Counts {
    /// The columns [`Counts::from_row`] reads.
    pub(crate) const COLUMNS: &'static str =
        "units_waiting, units_ready, units_leased, units_failed, units_cancelled";

    async fn of(tx: &mut Transaction<'static, Any>, job: &str) -> Result<Counts, DbError> {
        let sql = format!("SELECT {} FROM jobs WHERE id = $1", Counts::COLUMNS);
        let r = sqlx::query(&sql)
            .bind(job)
            .fetch_optional(&mut **tx)
            .await?;
        let Some(r) = r else {
            // No such job: nothing to settle (a count of 1 waiting keeps it so).
            return Ok(Counts {
                waiting: 1,
                ready: 0,
                leased: 0,
                failed: 0,
                cancelled: 0,
            });
        };
        Counts::from_row(&r)
    }

    /// The counts in a row of [`Counts::COLUMNS`].
    pub(crate) fn from_row(r: &AnyRow) -> Result<Counts, DbError> {
        let get = |c: &str| -> Result<u64, DbError> { uint(r.try_get(c)?, c) };
        Ok(Counts {
            waiting: get("units_waiting")?,
            ready: get("units_ready")?,
            leased: get("units_leased")?,
            failed: get("units_failed")?,
            cancelled: get("units_cancelled")?,
        })
    }
}
