//! What is going on, for people watching (the web interface): jobs with the bytes
//! their running units have moved so far, the workers and what they say of
//! themselves, a job's share per worker, and its failed units with their errors.
//!
//! Workers are recorded as they ask for work and send heartbeats; a unit's live
//! progress comes with its worker's heartbeats and is zeroed when it ends, so that a
//! job's live bytes are its finished units' bytes plus its leased units' progress.

use sqlx::Row;

use crate::jobs::{job_row, JobRow, JOB_COLUMNS};
use crate::{float_sum, int, sum_sql, uint, Db, DbError};

/// Most workers [`Db::workers`] returns.
pub const MAX_WORKERS: u64 = 500;
/// Longest host name or checks text a worker may record (longer is cut).
pub const MAX_REPORT: usize = 16 * 1024;
/// Most progress a relay unit (of unknown size) may report: what its finish may
/// ([`crate::leases::MAX_UNIT_BYTES`]).
pub const MAX_RELAY_PROGRESS: u64 = crate::leases::MAX_UNIT_BYTES;

/// Most lag a stream may report: a day, in milliseconds (more is taken as that).
pub const MAX_LAG_MS: u64 = 86_400_000;

/// What a worker says of itself when it calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Its name.
    pub name: String,
    /// Its host's name (empty when it did not say).
    pub host: String,
    /// Units it may run at once (0 when it did not say).
    pub capacity: u64,
    /// Bytes its units moved since it started, if it said.
    pub moved: Option<u64>,
    /// Its host checks as a JSON array of strings, if it said.
    pub checks: Option<String>,
}

/// A worker as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRow {
    /// Its name.
    pub name: String,
    /// Its host's name.
    pub host: String,
    /// Units it may run at once.
    pub capacity: u64,
    /// When it last called (milliseconds since the epoch).
    pub last_seen: u64,
    /// Bytes its units moved since it started, as it last said.
    pub moved: u64,
    /// Its host checks, a JSON array of strings.
    pub checks: String,
    /// Units it holds now.
    pub active: u64,
}

/// A job with its live progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveJob {
    /// The job.
    pub job: JobRow,
    /// Bytes its leased units moved so far (not yet in `bytes_done`).
    pub in_flight: u64,
}

/// What one worker did of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The worker.
    pub worker: String,
    /// Units it finished.
    pub units: u64,
    /// Bytes those units moved.
    pub bytes: u64,
}

/// A unit whose last attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedUnit {
    /// Its number.
    pub seq: u64,
    /// `files`, `range`, `commit` or `relay`.
    pub kind: String,
    /// `failed` for good, or `ready`/`leased` to be tried again.
    pub state: String,
    /// Attempts that failed.
    pub attempts: u64,
    /// The last attempt's error, one line.
    pub error: String,
    /// The first file it names in the job's listing (none for a relay).
    pub path: Option<String>,
    /// Files it names.
    pub files: u64,
}

/// Cuts `s` to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Runs in a row that move nothing a stream unit may have (a run that moves bytes
/// starts the count over: see [`Db::unit_progress`]).
pub const STREAM_ATTEMPTS: u32 = 20;

impl Db {
    /// Records that worker `w` called at `now`.
    pub async fn worker_seen(&self, w: &WorkerReport, now: u64) -> Result<(), DbError> {
        // -1 and NULL keep what was recorded when the worker did not say.
        sqlx::query(
            "INSERT INTO workers (id, host, capacity, last_seen, moved, checks) \
             VALUES ($1, $2, $3, $4, CASE WHEN $5 < 0 THEN 0 ELSE $5 END, COALESCE($6, '[]')) \
             ON CONFLICT (id) DO UPDATE SET \
               host = CASE WHEN $2 = '' THEN workers.host ELSE $2 END, \
               capacity = CASE WHEN $3 = 0 THEN workers.capacity ELSE $3 END, \
               last_seen = $4, \
               moved = CASE WHEN $5 < 0 THEN workers.moved ELSE $5 END, \
               checks = COALESCE($6, workers.checks)",
        )
        .bind(cut(&w.name, MAX_REPORT))
        .bind(cut(&w.host, MAX_REPORT))
        .bind(int(w.capacity))
        .bind(int(now))
        .bind(w.moved.map(int).unwrap_or(-1))
        .bind(w.checks.as_deref().map(|c| cut(c, MAX_REPORT)))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Worker `worker` says how many bytes each of its units `(job, seq, bytes)` has
    /// moved so far. Units it does not hold are left alone; a number above the unit's
    /// own bytes (0 for a commit, or a batch of empty files; [`MAX_RELAY_PROGRESS`]
    /// for a relay, whose size is not known) is taken as that bound, as its finish
    /// would be (this is only shown: never refused). A stream that moves bytes gets
    /// [`STREAM_ATTEMPTS`] more runs from the one it is in: it may live for days, and
    /// what its attempts bound is runs in a row that moved nothing, not every lost
    /// lease of its life (its attempts still count every run, as "tried again" shows).
    pub async fn unit_progress(
        &self,
        worker: &str,
        units: &[(String, u64, u64)],
    ) -> Result<(), DbError> {
        if units.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for (job, seq, bytes) in units {
            sqlx::query(
                "UPDATE units SET progress = CASE \
                   WHEN kind NOT IN ('relay', 'stream') AND $4 > bytes THEN bytes \
                   WHEN kind IN ('relay', 'stream') AND $4 > $5 THEN $5 ELSE $4 END, \
                   max_attempts = CASE WHEN kind = 'stream' AND $4 > progress \
                     THEN attempts + $6 ELSE max_attempts END \
                 WHERE job = $1 AND seq = $2 AND lease_owner = $3 AND state = 'leased'",
            )
            .bind(job)
            .bind(int(*seq))
            .bind(worker)
            .bind(int(*bytes))
            .bind(int(MAX_RELAY_PROGRESS))
            .bind(i64::from(STREAM_ATTEMPTS))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Worker `worker` says what lag each of its stream units `(job, seq, p50_ms,
    /// p99_ms)` has seen over its run so far (each at most [`MAX_LAG_MS`], as the
    /// caller bounded it). Units it does not hold are left alone.
    pub async fn unit_lag(
        &self,
        worker: &str,
        units: &[(String, u64, u64, u64)],
    ) -> Result<(), DbError> {
        if units.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for (job, seq, p50, p99) in units {
            sqlx::query(
                "UPDATE units SET lag_p50 = $4, lag_p99 = $5 \
                 WHERE job = $1 AND seq = $2 AND lease_owner = $3 AND state = 'leased'",
            )
            .bind(job)
            .bind(int(*seq))
            .bind(worker)
            .bind(int((*p50).min(MAX_LAG_MS)))
            .bind(int((*p99).min(MAX_LAG_MS)))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The lag of job `job`'s streams as last reported: the largest median and the
    /// largest 99th percentile among its units, in milliseconds (`None` when none
    /// reported one).
    pub async fn job_lag(&self, job: &str) -> Result<Option<(u64, u64)>, DbError> {
        let r = sqlx::query(
            "SELECT MAX(lag_p50) AS p50, MAX(lag_p99) AS p99 FROM units \
             WHERE job = $1 AND lag_p99 IS NOT NULL",
        )
        .bind(job)
        .fetch_one(&self.reads)
        .await?;
        let p50: Option<i64> = r.try_get("p50")?;
        let p99: Option<i64> = r.try_get("p99")?;
        match (p50, p99) {
            (Some(a), Some(b)) => Ok(Some((uint(a, "lag_p50")?, uint(b, "lag_p99")?))),
            _ => Ok(None),
        }
    }

    /// Workers heard from since `since`, by name (at most [`MAX_WORKERS`]).
    pub async fn workers(&self, since: u64) -> Result<Vec<WorkerRow>, DbError> {
        let rows = sqlx::query(
            "SELECT w.id, w.host, w.capacity, w.last_seen, w.moved, w.checks, \
               (SELECT COUNT(*) FROM units u WHERE u.lease_owner = w.id AND u.state = 'leased') \
                 AS active \
             FROM workers w WHERE w.last_seen >= $1 ORDER BY w.id LIMIT $2",
        )
        .bind(int(since))
        .bind(int(MAX_WORKERS))
        .fetch_all(&self.reads)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(WorkerRow {
                    name: r.try_get("id")?,
                    host: r.try_get("host")?,
                    capacity: uint(r.try_get("capacity")?, "capacity")?,
                    last_seen: uint(r.try_get("last_seen")?, "last_seen")?,
                    moved: uint(r.try_get("moved")?, "moved")?,
                    checks: r.try_get("checks")?,
                    active: uint(r.try_get("active")?, "active")?,
                })
            })
            .collect()
    }

    /// The live jobs: up to `unfinished` jobs not yet ended and the newest `finished`
    /// ones that have, newest first, each with the bytes its leased units moved so
    /// far. (A long job stays in view however many newer ones ended since.) A row
    /// that cannot be read whole is shown with what could be (see
    /// [`JobRow::damaged`]): the view goes on for every other job.
    pub async fn live_jobs(&self, unfinished: u64, finished: u64) -> Result<Vec<LiveJob>, DbError> {
        let mut out = Vec::new();
        for (states, limit) in [
            ("state NOT IN ('done', 'failed', 'cancelled')", unfinished),
            ("state IN ('done', 'failed', 'cancelled')", finished),
        ] {
            let sql = format!(
                "SELECT {JOB_COLUMNS}, \
                   (SELECT {} FROM units u \
                     WHERE u.job = jobs.id AND u.state = 'leased') AS in_flight \
                 FROM jobs WHERE {states} ORDER BY created DESC, id DESC LIMIT $1",
                sum_sql("u.progress")
            );
            let rows = sqlx::query(&sql)
                .bind(int(limit))
                .fetch_all(&self.reads)
                .await?;
            for r in &rows {
                out.push(LiveJob {
                    job: job_row(r),
                    in_flight: float_sum(r, "in_flight")?,
                });
            }
        }
        out.sort_by(|a, b| (b.job.created, &b.job.id).cmp(&(a.job.created, &a.job.id)));
        Ok(out)
    }

    /// What each worker finished of job `job`, most bytes first.
    pub async fn shares(&self, job: &str) -> Result<Vec<Share>, DbError> {
        let sql = format!(
            "SELECT done_by, COUNT(*) AS n, {} AS b \
             FROM units WHERE job = $1 AND state = 'done' AND done_by IS NOT NULL \
             GROUP BY done_by ORDER BY b DESC, done_by LIMIT $2",
            sum_sql("moved")
        );
        let rows = sqlx::query(&sql)
            .bind(job)
            .bind(int(MAX_WORKERS))
            .fetch_all(&self.reads)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Share {
                    worker: r.try_get("done_by")?,
                    units: uint(r.try_get("n")?, "units")?,
                    bytes: float_sum(r, "b")?,
                })
            })
            .collect()
    }

    /// Up to `limit` of job `job`'s units whose last attempt failed, in order.
    pub async fn failed_units(&self, job: &str, limit: u64) -> Result<Vec<FailedUnit>, DbError> {
        let rows = sqlx::query(
            "SELECT u.seq, u.kind, u.state, u.attempts, u.error, u.file_from, u.file_to, f.path \
             FROM units u LEFT JOIN files f ON f.job = u.job AND f.idx = u.file_from \
             WHERE u.job = $1 AND u.error IS NOT NULL ORDER BY u.seq LIMIT $2",
        )
        .bind(job)
        .bind(int(limit))
        .fetch_all(&self.reads)
        .await?;
        rows.iter()
            .map(|r| {
                let kind: String = r.try_get("kind")?;
                let from = uint(r.try_get("file_from")?, "file_from")?;
                let to = uint(r.try_get("file_to")?, "file_to")?;
                let relay = kind == "relay" || kind == "stream";
                Ok(FailedUnit {
                    seq: uint(r.try_get("seq")?, "seq")?,
                    state: r.try_get("state")?,
                    attempts: uint(r.try_get("attempts")?, "attempts")?,
                    error: r.try_get("error")?,
                    path: match relay {
                        true => None,
                        false => r.try_get("path")?,
                    },
                    files: match (relay, kind.as_str()) {
                        (true, _) => 0,
                        (_, "files") => to.saturating_sub(from),
                        _ => 1,
                    },
                    kind,
                })
            })
            .collect()
    }
}
