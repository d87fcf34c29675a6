//! Planning a job under a planning lease: the service instance that writes a job's
//! listing and units holds the job (`jobs.planner`) until a time it keeps pushing
//! forward (`jobs.planner_until`). Every write of the listing first checks, in its own
//! transaction, that the job is still being planned by that instance; so when an
//! instance stops (killed, or cut off from the database) another one takes the job
//! over once the lease has run out, starts its listing again from nothing, and the
//! first one can no longer add a row, even if it comes back.
//!
//! Several instances sharing one PostgreSQL (or processes sharing one SQLite file)
//! therefore never plan one job twice, and a job whose planner died is not stuck.

use hetch_jobs::UnitSpec;
use sqlx::Row;

use crate::jobs::{FileRow, NewJob, PlannedUnit};
use crate::{int, saturating_add, Db, DbError};

/// An instance's hold on planning one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanningLease {
    /// The job.
    pub job: String,
    /// This hold: the instance's name and a number of its own (`INSTANCE#N`), so that
    /// an instance taking over a job it was planning before (retried after a cancel,
    /// or its own lease ran out while its planner stalled) shuts out its own earlier
    /// planner too.
    pub owner: String,
}

/// `INSTANCE#N`, N new for every hold taken in this process.
fn hold_name(instance: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{instance}#{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A job taken over from a planner whose lease ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenOver {
    /// The new hold on it.
    pub lease: PlanningLease,
    /// What to do, as submitted (JSON).
    pub spec: String,
}

/// Times a job's planning may be started (at submission, or taken over after its
/// planner stopped) before the job fails instead: a listing that takes the service
/// down with it must not do so again at every start.
pub const MAX_PLAN_ATTEMPTS: u64 = 3;

/// Rows per INSERT statement: one statement per row made planning a round trip per
/// file. 500 rows of at most 11 columns stay far below both databases' limits on
/// parameters (SQLite 32,766, PostgreSQL 65,535).
const ROWS_PER_INSERT: usize = 500;

/// `($1, ..., $cols), ($cols+1, ...), ...` for `rows` rows.
fn placeholders(rows: usize, cols: usize) -> String {
    let mut out = String::with_capacity(rows * cols * 6);
    for r in 0..rows {
        out.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..cols {
            if c > 0 {
                out.push_str(", ");
            }
            out.push('$');
            out.push_str(&(r * cols + c + 1).to_string());
        }
        out.push(')');
    }
    out
}

/// Adds `files` and `bytes` to the job's totals (saturating: sizes are the file
/// system's to say) if `lease` still holds it; this is the first statement of every
/// planning write, so it also takes the job's row lock (PostgreSQL) or the write lock
/// (SQLite) before anything else is written.
async fn hold(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    lease: &PlanningLease,
    files: u64,
    bytes: u64,
) -> Result<(), DbError> {
    let sql = format!(
        "UPDATE jobs SET files = {}, bytes = {} \
         WHERE id = $1 AND state = 'planning' AND planner = $2",
        saturating_add("files", "$3"),
        saturating_add("bytes", "$4"),
    );
    let r = sqlx::query(&sql)
        .bind(&lease.job)
        .bind(&lease.owner)
        .bind(int(files))
        .bind(int(bytes))
        .execute(&mut **tx)
        .await?;
    match r.rows_affected() {
        1 => Ok(()),
        _ => Err(DbError::NotPlanning(lease.job.clone())),
    }
}

impl Db {
    /// Records a new job, in state `planning`, at time `now`, planned by instance
    /// `instance` until `until` unless renewed.
    pub async fn create_job(
        &self,
        job: &NewJob,
        instance: &str,
        until: u64,
        now: u64,
    ) -> Result<PlanningLease, DbError> {
        let owner = hold_name(instance);
        sqlx::query(
            "INSERT INTO jobs (id, submitted_by, spec, priority, rate_limit, state, created, \
             planner, planner_until, plan_attempts) \
             VALUES ($1, $2, $3, $4, $5, 'planning', $6, $7, $8, 1)",
        )
        .bind(&job.id)
        .bind(&job.submitted_by)
        .bind(&job.spec)
        .bind(job.priority)
        .bind(int(job.rate_limit))
        .bind(int(now))
        .bind(&owner)
        .bind(int(until))
        .execute(&self.pool)
        .await?;
        Ok(PlanningLease {
            job: job.id.clone(),
            owner,
        })
    }

    /// Pushes the end of `lease` to `until`. False if it no longer holds (the job was
    /// cancelled, or taken over).
    pub async fn renew_planning(&self, lease: &PlanningLease, until: u64) -> Result<bool, DbError> {
        let r = sqlx::query(
            "UPDATE jobs SET planner_until = $3 \
             WHERE id = $1 AND state = 'planning' AND planner = $2",
        )
        .bind(&lease.job)
        .bind(&lease.owner)
        .bind(int(until))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Takes over up to `max` jobs, oldest first, whose planning lease ran out before
    /// `now`, for instance `instance` until `until`: each one's listing and units so
    /// far are dropped, to be planned again from the start. A job is taken by one
    /// instance only, however many try at once. A job whose planning was started
    /// [`MAX_PLAN_ATTEMPTS`] times already fails instead (its planner keeps stopping:
    /// it took its service down, or was stopped at every start).
    pub async fn take_over_planning(
        &self,
        instance: &str,
        until: u64,
        now: u64,
        max: u64,
    ) -> Result<Vec<TakenOver>, DbError> {
        let expired = sqlx::query(
            "SELECT id, spec FROM jobs WHERE state = 'planning' AND planner_until < $1 \
             ORDER BY created LIMIT $2",
        )
        .bind(int(now))
        .bind(int(max))
        .fetch_all(&self.pool)
        .await?;
        let mut taken = Vec::new();
        for row in expired {
            let id: String = row.try_get("id")?;
            let owner = hold_name(instance);
            let mut tx = self.pool.begin().await?;
            // Checked again under the row's lock: another instance may have been first.
            let r = sqlx::query(
                "UPDATE jobs SET planner = $2, planner_until = $3, files = 0, bytes = 0, \
                   claim_from = 0, plan_attempts = plan_attempts + 1 \
                 WHERE id = $1 AND state = 'planning' AND planner_until < $4",
            )
            .bind(&id)
            .bind(&owner)
            .bind(int(until))
            .bind(int(now))
            .execute(&mut *tx)
            .await?;
            if r.rows_affected() != 1 {
                continue;
            }
            let failed = sqlx::query(
                "UPDATE jobs SET state = 'failed', finished = $2, \
                   error = 'planning: started ' || (plan_attempts - 1) || ' times and never finished \
                     (the service stopped while planning it); retry it to plan it again' \
                 WHERE id = $1 AND plan_attempts > $3",
            )
            .bind(&id)
            .bind(int(now))
            .bind(int(MAX_PLAN_ATTEMPTS))
            .execute(&mut *tx)
            .await?;
            for sql in [
                "DELETE FROM files WHERE job = $1",
                "DELETE FROM units WHERE job = $1",
                "DELETE FROM range_reports WHERE job = $1",
                "DELETE FROM object_uploads WHERE job = $1",
            ] {
                sqlx::query(sql).bind(&id).execute(&mut *tx).await?;
            }
            crate::counts::recount(&mut tx, &id).await?;
            tx.commit().await?;
            if failed.rows_affected() == 1 {
                continue;
            }
            taken.push(TakenOver {
                lease: PlanningLease { job: id, owner },
                spec: row.try_get("spec")?,
            });
        }
        Ok(taken)
    }

    /// Appends files `first..` of the job's listing, in one transaction, if `lease`
    /// still holds the job ([`DbError::NotPlanning`] if not).
    pub async fn add_files(
        &self,
        lease: &PlanningLease,
        first: u64,
        files: &[FileRow],
    ) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        let bytes = files
            .iter()
            .fold(0, |sum: u64, f| sum.saturating_add(f.size));
        hold(&mut tx, lease, files.len() as u64, bytes).await?;
        for (c, chunk) in files.chunks(ROWS_PER_INSERT).enumerate() {
            let sql = format!(
                "INSERT INTO files (job, idx, operand, path, size) VALUES {}",
                placeholders(chunk.len(), 5)
            );
            let mut q = sqlx::query(&sql);
            let base = first + (c * ROWS_PER_INSERT) as u64;
            for (i, f) in chunk.iter().enumerate() {
                q = q
                    .bind(&lease.job)
                    .bind(int(base + i as u64))
                    .bind(i64::from(f.operand))
                    .bind(&f.path)
                    .bind(int(f.size));
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Appends units `first..` of the job, each allowed `max_attempts` attempts, in one
    /// transaction, if `lease` still holds the job. Commits wait until their ranges
    /// are done, a deletion step until every other unit of its job is.
    pub async fn add_units(
        &self,
        lease: &PlanningLease,
        first: u64,
        units: &[PlannedUnit],
        max_attempts: u32,
    ) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        hold(&mut tx, lease, 0, 0).await?;
        let mut delta = crate::counts::Delta::default();
        for (c, chunk) in units.chunks(ROWS_PER_INSERT).enumerate() {
            let sql = format!(
                "INSERT INTO units (job, seq, kind, file_from, file_to, block_from, block_to, \
                 bytes, state, max_attempts, not_before) VALUES {}",
                placeholders(chunk.len(), 11)
            );
            let mut q = sqlx::query(&sql);
            let base = first + (c * ROWS_PER_INSERT) as u64;
            for (i, u) in chunk.iter().enumerate() {
                let (kind, file_from, file_to, block_from, block_to, state) = match u.spec {
                    UnitSpec::Files { first, end, .. } => ("files", first, end, 0, 0, "ready"),
                    UnitSpec::Range { file, first, end } => {
                        ("range", file, file + 1, first, end, "ready")
                    }
                    UnitSpec::Commit { file, ranges } => {
                        ("commit", file, file + 1, 0, ranges, "waiting")
                    }
                    UnitSpec::Relay { operand } => ("relay", operand, operand + 1, 0, 0, "ready"),
                    UnitSpec::Stream { operand } => ("stream", operand, operand + 1, 0, 0, "ready"),
                    // Waits, as a commit does, until every other unit is done.
                    UnitSpec::Delete {} => ("delete", 0, 0, 0, 0, "waiting"),
                };
                q = q
                    .bind(&lease.job)
                    .bind(int(base + i as u64))
                    .bind(kind)
                    .bind(int(file_from))
                    .bind(int(file_to))
                    .bind(int(block_from))
                    .bind(int(block_to))
                    .bind(int(u.bytes))
                    .bind(state)
                    .bind(i64::from(max_attempts.max(1)))
                    .bind(crate::leases::NEVER_TRIED);
                delta.add(state, 1);
            }
            q.execute(&mut *tx).await?;
        }
        delta.apply(&mut tx, &lease.job).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The job of `lease` is planned: it becomes claimable (or done at once if it has
    /// no units). False if the lease no longer holds (cancelled, or taken over).
    pub async fn queue(&self, lease: &PlanningLease, now: u64) -> Result<bool, DbError> {
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(
            "UPDATE jobs SET state = 'queued', planned = $3 \
             WHERE id = $1 AND state = 'planning' AND planner = $2",
        )
        .bind(&lease.job)
        .bind(&lease.owner)
        .bind(int(now))
        .execute(&mut *tx)
        .await?;
        crate::settle::settle(&mut tx, &lease.job, crate::settle::Commits::All, now, None).await?;
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }

    /// The job of `lease` could not be planned: it fails with `error`. False if the
    /// lease no longer holds.
    pub async fn fail_planning(
        &self,
        lease: &PlanningLease,
        error: &str,
        now: u64,
    ) -> Result<bool, DbError> {
        let r = sqlx::query(
            "UPDATE jobs SET state = 'failed', error = $3, finished = $4 \
             WHERE id = $1 AND state = 'planning' AND planner = $2",
        )
        .bind(&lease.job)
        .bind(&lease.owner)
        .bind(error)
        .bind(int(now))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }
}
