//! Retention of finished jobs: those beyond the newest few, or finished long ago, are
//! deleted with their listings and units, in bounded steps.
//!
//! A job leaves in two steps, so that no statement holds the database for long (on
//! SQLite, the one writer the workers' claims and heartbeats wait for): its row goes
//! first, in one short transaction, its id recorded in `purged_jobs` (from then on it
//! is no job: it cannot be shown, retried or counted); then what it leaves (listing
//! rows, units, range reports, uploads; a job may have millions) is deleted a batch at
//! a time, each batch its own statement, until none is left and the record goes too.
//! A job whose webhook note is still to be sent stays until it was sent or given up.

use sqlx::Row;

use crate::{int, Db, DbError};

/// Rows one deleting statement removes at most.
pub const PURGE_BATCH: u64 = 1_000;

/// A job is finished in these states.
const FINAL: &str = "state IN ('done', 'failed', 'cancelled')";

/// The job `jobs.id` still has a note to send.
const NOTE_DUE: &str = "EXISTS (SELECT 1 FROM webhook_deliveries d \
     WHERE d.job = jobs.id AND d.state IN ('armed', 'pending'))";

/// What a finished job leaves, each table with the column that tells its rows apart
/// (a batch is the first [`PURGE_BATCH`] of them).
const LEFT: [(&str, &str); 4] = [
    ("files", "idx"),
    ("units", "seq"),
    ("range_reports", "seq"),
    ("object_uploads", "file"),
];

impl Db {
    /// Deletes up to `max` finished jobs (done, failed, cancelled) beyond the newest
    /// `keep` finished ones, or finished before `before` (milliseconds since the
    /// epoch), oldest first, recording each in `purged_jobs` for [`Db::purge`] to
    /// delete what it leaves; `now` is when. Returns how many went.
    pub async fn expire_jobs(
        &self,
        keep: u64,
        before: u64,
        max: u64,
        now: u64,
    ) -> Result<u64, DbError> {
        // The newest finished job beyond the `keep` newest: it and every older one go.
        let boundary = sqlx::query(&format!(
            "SELECT id, finished FROM jobs WHERE {FINAL} AND finished IS NOT NULL \
             ORDER BY finished DESC, id DESC LIMIT 1 OFFSET $1"
        ))
        .bind(int(keep))
        // Looking only (each deletion checks again): not on SQLite's one writer.
        .fetch_optional(&self.reads)
        .await?;
        let (edge_id, edge_at) = match &boundary {
            Some(r) => (
                r.try_get::<String, _>("id")?,
                r.try_get::<i64, _>("finished")?,
            ),
            // Fewer than `keep` finished: none goes by count.
            None => (String::new(), -1),
        };
        let ids: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT id FROM jobs WHERE {FINAL} AND finished IS NOT NULL AND NOT {NOTE_DUE} \
             AND (finished < $1 OR finished < $2 OR (finished = $2 AND id <= $3)) \
             ORDER BY finished, id LIMIT $4"
        ))
        .bind(int(before))
        .bind(edge_at)
        .bind(&edge_id)
        .bind(int(max))
        .fetch_all(&self.reads)
        .await?;
        let mut gone = 0;
        let mut tx = self.pool.begin().await?;
        for id in &ids {
            // Checked again: retried, or given a note to send, since it was read.
            let r = sqlx::query(&format!(
                "DELETE FROM jobs WHERE id = $1 AND {FINAL} AND NOT {NOTE_DUE}"
            ))
            .bind(id)
            .execute(&mut *tx)
            .await?;
            if r.rows_affected() == 0 {
                continue;
            }
            // Its note's row goes with it (the foreign key's cascade, said here too).
            sqlx::query("DELETE FROM webhook_deliveries WHERE job = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO purged_jobs (job, since) VALUES ($1, $2)")
                .bind(id)
                .bind(int(now))
                .execute(&mut *tx)
                .await?;
            gone += 1;
        }
        tx.commit().await?;
        Ok(gone)
    }

    /// Deletes up to about `max` rows of what deleted jobs left (their listings,
    /// units, range reports and uploads), [`PURGE_BATCH`] rows a statement. Returns
    /// how many went: fewer than `max` once nothing is left.
    pub async fn purge(&self, max: u64) -> Result<u64, DbError> {
        let mut deleted = 0;
        while deleted < max {
            let job: Option<String> =
                sqlx::query_scalar("SELECT job FROM purged_jobs ORDER BY since, job LIMIT 1")
                    .fetch_optional(&self.reads)
                    .await?;
            let Some(job) = job else { break };
            let mut left = false;
            for (table, key) in LEFT {
                let batch = PURGE_BATCH.min(max - deleted);
                let r = sqlx::query(&format!(
                    "DELETE FROM {table} WHERE job = $1 AND {key} IN \
                     (SELECT {key} FROM {table} WHERE job = $1 ORDER BY {key} LIMIT $2)"
                ))
                .bind(&job)
                .bind(int(batch))
                .execute(&self.pool)
                .await?;
                deleted += r.rows_affected();
                if r.rows_affected() == batch {
                    // Perhaps more: this job again next time round.
                    left = true;
                    break;
                }
            }
            if !left {
                sqlx::query("DELETE FROM purged_jobs WHERE job = $1")
                    .bind(&job)
                    .execute(&self.pool)
                    .await?;
            }
        }
        Ok(deleted)
    }
}
