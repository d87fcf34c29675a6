//! The outbox of webhook notes (migration 0006): one row per job with a webhook,
//! armed at submission, made due when the job ends, and sent by whichever service
//! instance holds its lease. Every change is one conditional statement, so any number
//! of instances can run the delivery loop on one database.

use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use crate::jobs::{job_row, JobRow, JOB_COLUMNS};
use crate::{int, uint, Db, DbError};

/// A delivery as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The job.
    pub job: String,
    /// Who submitted it (to show it only to them).
    pub submitted_by: String,
    /// `armed` (the job has not ended), `pending`, `delivered` or `given_up`.
    pub state: String,
    /// The job end it is about.
    pub finished: Option<u64>,
    /// Attempts made.
    pub attempts: u64,
    /// When the next attempt is due.
    pub next_attempt: u64,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When its state last changed.
    pub updated: u64,
}

impl Delivery {
    /// Its `X-Hetch-Delivery` id: the job and the end it is about, the same for
    /// every attempt and on every instance.
    pub fn id(&self) -> String {
        delivery_id(&self.job, self.finished.unwrap_or(0))
    }
}

/// The delivery id of job `job`'s end at `finished`.
pub fn delivery_id(job: &str, finished: u64) -> String {
    format!("{job}-{finished}")
}

/// A delivery this instance now holds, with its job as it ended.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    /// The job (its spec holds the webhook).
    pub job: JobRow,
    /// Attempts made before this one.
    pub attempts: u64,
    /// The job end it is about.
    pub finished: u64,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The receiver answered 2xx.
    Delivered,
    /// It failed; try again at `next` (ms since the epoch), or never (`None`: given up).
    Failed {
        /// Why, in one line.
        error: String,
        /// When to try again.
        next: Option<u64>,
    },
}

const COLUMNS: &str = "d.job, j.submitted_by, d.state, d.finished, d.attempts, \
                       d.next_attempt, d.last_error, d.updated";

impl Db {
    /// Arms job `job`'s webhook: its end will be delivered.
    pub async fn arm_webhook(&self, job: &str, now: u64) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO webhook_deliveries (job, state, updated) VALUES ($1, 'armed', $2)",
        )
        .bind(job)
        .bind(int(now))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Makes due the armed deliveries of jobs that ended (only armed rows are looked
    /// at: as many as jobs with a webhook not yet ended, however long the outbox's
    /// history), then takes up to `limit` due ones under a lease for `owner` until
    /// `until`.
    pub async fn claim_deliveries(
        &self,
        owner: &str,
        until: u64,
        now: u64,
        limit: u64,
    ) -> Result<Vec<DueDelivery>, DbError> {
        sqlx::query(
            "UPDATE webhook_deliveries SET state = 'pending', attempts = 0, \
               next_attempt = $1, last_error = NULL, lease_owner = NULL, lease_until = 0, \
               updated = $1, \
               finished = (SELECT j.finished FROM jobs j WHERE j.id = webhook_deliveries.job) \
             WHERE state = 'armed' AND EXISTS (SELECT 1 FROM jobs j \
               WHERE j.id = webhook_deliveries.job \
               AND j.state IN ('done', 'failed', 'cancelled') AND j.finished IS NOT NULL \
               AND (webhook_deliveries.finished IS NULL \
                    OR j.finished <> webhook_deliveries.finished))",
        )
        .bind(int(now))
        .execute(&self.pool)
        .await?;
        let due = sqlx::query(
            "SELECT job FROM webhook_deliveries \
             WHERE state = 'pending' AND next_attempt <= $1 AND lease_until <= $1 \
             ORDER BY next_attempt LIMIT $2",
        )
        .bind(int(now))
        .bind(int(limit))
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::new();
        for r in due {
            let job: String = r.try_get("job")?;
            // Only one instance's statement changes the row: the others see the
            // lease and take nothing.
            let took = sqlx::query(
                "UPDATE webhook_deliveries SET lease_owner = $2, lease_until = $3 \
                 WHERE job = $1 AND state = 'pending' AND next_attempt <= $4 \
                   AND lease_until <= $4",
            )
            .bind(&job)
            .bind(owner)
            .bind(int(until))
            .bind(int(now))
            .execute(&self.pool)
            .await?;
            if took.rows_affected() != 1 {
                continue;
            }
            let sql = format!(
                "SELECT {JOB_COLUMNS}, \
                   (SELECT d.attempts FROM webhook_deliveries d WHERE d.job = jobs.id) \
                     AS d_attempts, \
                   (SELECT d.finished FROM webhook_deliveries d WHERE d.job = jobs.id) \
                     AS d_finished \
                 FROM jobs WHERE id = $1"
            );
            let Some(row) = sqlx::query(&sql)
                .bind(&job)
                .fetch_optional(&self.pool)
                .await?
            else {
                continue;
            };
            out.push(DueDelivery {
                job: job_row(&row),
                attempts: uint(row.try_get("d_attempts")?, "attempts")?,
                finished: uint(
                    row.try_get::<Option<i64>, _>("d_finished")?.unwrap_or(0),
                    "finished",
                )?,
            });
        }
        Ok(out)
    }

    /// Records an attempt at the delivery of `job`'s end at `finished` that `owner`
    /// holds. False (nothing changed) when it no longer holds it: its lease ran out
    /// and another instance took it, or the job ended again meanwhile.
    pub async fn record_attempt(
        &self,
        job: &str,
        owner: &str,
        finished: u64,
        attempt: &Attempt,
        now: u64,
    ) -> Result<bool, DbError> {
        let (state, error, next) = match attempt {
            Attempt::Delivered => ("delivered", None, 0),
            Attempt::Failed {
                error,
                next: Some(n),
            } => ("pending", Some(error.as_str()), *n),
            Attempt::Failed { error, next: None } => ("given_up", Some(error.as_str()), 0),
        };
        let r = sqlx::query(
            "UPDATE webhook_deliveries SET state = $4, last_error = $5, next_attempt = $6, \
               attempts = attempts + 1, lease_owner = NULL, lease_until = 0, updated = $7 \
             WHERE job = $1 AND lease_owner = $2 AND finished = $3 AND state = 'pending'",
        )
        .bind(job)
        .bind(owner)
        .bind(int(finished))
        .bind(state)
        .bind(error)
        .bind(int(next))
        .bind(int(now))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// The delivery of job `job`'s end, if it has a webhook.
    pub async fn delivery(&self, job: &str) -> Result<Option<Delivery>, DbError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM webhook_deliveries d JOIN jobs j ON j.id = d.job \
             WHERE d.job = $1"
        );
        let row = sqlx::query(&sql)
            .bind(job)
            .fetch_optional(&self.reads)
            .await?;
        row.as_ref().map(delivery_row).transpose()
    }

    /// The `limit` deliveries whose state changed last, newest first (not armed ones:
    /// those have nothing to tell yet).
    pub async fn recent_deliveries(&self, limit: u64) -> Result<Vec<Delivery>, DbError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM webhook_deliveries d JOIN jobs j ON j.id = d.job \
             WHERE d.state <> 'armed' ORDER BY d.updated DESC, d.job LIMIT $1"
        );
        let rows = sqlx::query(&sql)
            .bind(int(limit))
            .fetch_all(&self.reads)
            .await?;
        rows.iter().map(delivery_row).collect()
    }
}

/// Arms job `job`'s webhook again as it is retried, inside the retry's transaction:
/// its next end is told of with a new delivery (a delivery of its last end still
/// pending is dropped: its holder's record is refused).
pub(crate) async fn rearm(
    tx: &mut Transaction<'static, Any>,
    job: &str,
    now: u64,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE webhook_deliveries SET state = 'armed', lease_owner = NULL, lease_until = 0, \
           updated = $2 WHERE job = $1",
    )
    .bind(job)
    .bind(int(now))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

fn delivery_row(r: &AnyRow) -> Result<Delivery, DbError> {
    Ok(Delivery {
        job: r.try_get("job")?,
        submitted_by: r.try_get("submitted_by")?,
        state: r.try_get("state")?,
        finished: r
            .try_get::<Option<i64>, _>("finished")?
            .map(|v| uint(v, "finished"))
            .transpose()?,
        attempts: uint(r.try_get("attempts")?, "attempts")?,
        next_attempt: uint(r.try_get("next_attempt")?, "next_attempt")?,
        last_error: r.try_get("last_error")?,
        updated: uint(r.try_get("updated")?, "updated")?,
    })
}
