//! Jobs: read, listed, cancelled and retried.
//!
//! A job is created in state `planning`, its files and units are added in batches
//! (one transaction each, so a listing of millions of files never sits in memory or
//! in one transaction) under a planning lease ([`crate::planning`]), and
//! [`Db::queue`] makes it claimable. Its later states follow from its units' (see
//! [`crate::leases`]).

use hetch_jobs::UnitSpec;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::{int, uint, Db, DbError};

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Its listing and units are being written; not claimable yet.
    Planning,
    /// Waiting for a worker.
    Queued,
    /// At least one unit has been claimed.
    Running,
    /// Every unit done.
    Done,
    /// Every unit final, at least one failed.
    Failed,
    /// Cancelled by a user.
    Cancelled,
}

impl JobState {
    /// All states, in their order of life.
    pub const ALL: [JobState; 6] = [
        JobState::Planning,
        JobState::Queued,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// Its name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Planning => "planning",
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// The state named `s`.
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the job is over (it can still be retried if failed or cancelled).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled
        )
    }
}

/// A job as submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// Its id, made by the service (unique).
    pub id: String,
    /// Who submitted it (a token's name or an OIDC subject).
    pub submitted_by: String,
    /// What to do, as JSON (what `hetch cp` takes); stored as given.
    pub spec: String,
    /// Higher goes first.
    pub priority: i64,
    /// Bytes per second for the whole job; 0 for none.
    pub rate_limit: u64,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// Its id.
    pub id: String,
    /// Who submitted it.
    pub submitted_by: String,
    /// What to do, as JSON.
    pub spec: String,
    /// Higher goes first.
    pub priority: i64,
    /// Bytes per second; 0 for none.
    pub rate_limit: u64,
    /// Where it is.
    pub state: JobState,
    /// When it was submitted.
    pub created: u64,
    /// When its first unit was claimed.
    pub started: Option<u64>,
    /// When it ended.
    pub finished: Option<u64>,
    /// Why it failed (the first failed unit's error).
    pub error: Option<String>,
    /// Files in its listing.
    pub files: u64,
    /// Bytes in its listing.
    pub bytes: u64,
    /// Files moved.
    pub files_done: u64,
    /// Bytes of its listing done (moved or found in place): its progress.
    pub bytes_done: u64,
    /// Bytes its units wrote at the destination, as their workers reported them
    /// (each at most what the unit holds): 0 for a run that found everything in place.
    pub bytes_written: u64,
    /// Its units, counted by state (kept on its row).
    pub units: UnitCounts,
    /// What of its row could not be read, as one line (`database row damaged: ...`),
    /// if anything: those columns are read as 0 (or empty), and the job is listed
    /// with them instead of failing the whole list. An unreadable state is read as
    /// failed (a job in no known state is never claimed again).
    pub damaged: Option<String>,
}

impl JobRow {
    /// The line to show as the job's error: its row's damage, then why it failed.
    pub fn error_shown(&self) -> Option<String> {
        match (&self.damaged, &self.error) {
            (Some(d), Some(e)) => Some(format!("{d}; {e}")),
            (d, e) => d.clone().or_else(|| e.clone()),
        }
    }
}

/// One file of a job's listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRow {
    /// Which of the job's source operands it is under.
    pub operand: u32,
    /// Its wire path: the operand's own name, then the path inside it.
    pub path: String,
    /// Its size when listed.
    pub size: u64,
}

/// A planned unit with its bytes (a range's share of its file; 0 for a commit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedUnit {
    /// What it is.
    pub spec: UnitSpec,
    /// Bytes it moves.
    pub bytes: u64,
}

/// A unit as stored, for showing a job and for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitRow {
    /// Its number within the job.
    pub seq: u64,
    /// `files`, `range` or `commit`.
    pub kind: String,
    /// `waiting`, `ready`, `leased`, `done`, `failed` or `cancelled`.
    pub state: String,
    /// Who holds it, while leased.
    pub lease_owner: Option<String>,
    /// Until when, while leased.
    pub lease_until: Option<u64>,
    /// Attempts that ended without success.
    pub attempts: u32,
    /// The last attempt's error.
    pub error: Option<String>,
}

/// How many of a job's units are in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitCounts {
    /// Commits waiting for their ranges.
    pub waiting: u64,
    /// Ready for a worker.
    pub ready: u64,
    /// Held by a worker.
    pub leased: u64,
    /// Done.
    pub done: u64,
    /// Failed for good.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Units, in any state, that were tried more than once (a run failed, or a lease
    /// ran out): not a state of their own, so not in [`UnitCounts::by_state`].
    pub retried: u64,
}

impl UnitCounts {
    /// The counts in rows of (`state`, `n`).
    pub(crate) fn from_rows(rows: &[sqlx::any::AnyRow]) -> Result<UnitCounts, DbError> {
        let mut c = UnitCounts::default();
        for r in rows {
            let n = uint(r.try_get("n")?, "count")?;
            let state: String = r.try_get("state")?;
            let slot = match state.as_str() {
                "waiting" => &mut c.waiting,
                "ready" => &mut c.ready,
                "leased" => &mut c.leased,
                "done" => &mut c.done,
                "failed" => &mut c.failed,
                "cancelled" => &mut c.cancelled,
                other => return Err(DbError::Row(format!("unit state {other:?}"))),
            };
            *slot = n;
        }
        Ok(c)
    }

    /// Each state's name and count, in a fixed order.
    pub fn by_state(&self) -> [(&'static str, u64); 6] {
        [
            ("waiting", self.waiting),
            ("ready", self.ready),
            ("leased", self.leased),
            ("done", self.done),
            ("failed", self.failed),
            ("cancelled", self.cancelled),
        ]
    }
}

pub(crate) const JOB_COLUMNS: &str =
    "id, submitted_by, spec, priority, rate_limit, state, created, \
     started, finished, error, files, bytes, files_done, bytes_done, bytes_written, \
     units_waiting, units_ready, units_leased, units_done, units_failed, units_cancelled, \
     units_retried";

impl Db {
    /// Job `id`, if there is one.
    pub async fn job(&self, id: &str) -> Result<Option<JobRow>, DbError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.reads)
            .await?;
        Ok(row.as_ref().map(job_row))
    }

    /// Up to `limit` jobs, newest first, in state `state` and submitted by
    /// `submitted_by` if given. A row that cannot be read whole is listed with what
    /// could be (see [`JobRow::damaged`]).
    pub async fn jobs(
        &self,
        state: Option<JobState>,
        submitted_by: Option<&str>,
        limit: u64,
    ) -> Result<Vec<JobRow>, DbError> {
        // Placeholders numbered in the order they are bound.
        let mut conditions = Vec::new();
        if state.is_some() {
            conditions.push(format!("state = ${}", conditions.len() + 2));
        }
        if submitted_by.is_some() {
            conditions.push(format!("submitted_by = ${}", conditions.len() + 2));
        }
        let filter = match conditions.is_empty() {
            true => String::new(),
            false => format!("WHERE {}", conditions.join(" AND ")),
        };
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs {filter} ORDER BY created DESC, id DESC LIMIT $1"
        );
        let mut q = sqlx::query(&sql).bind(int(limit));
        if let Some(st) = state {
            q = q.bind(st.as_str());
        }
        if let Some(who) = submitted_by {
            q = q.bind(who);
        }
        let rows = q.fetch_all(&self.reads).await?;
        Ok(rows.iter().map(job_row).collect())
    }

    /// How many of job `job`'s units are in each state, counted over its units (the
    /// counts on its row are kept by each change; this is what they are checked
    /// against). Reads every unit of the job: for tests and checks, not for views.
    pub async fn count_units(&self, job: &str) -> Result<UnitCounts, DbError> {
        let rows =
            sqlx::query("SELECT state, COUNT(*) AS n FROM units WHERE job = $1 GROUP BY state")
                .bind(job)
                .fetch_all(&self.reads)
                .await?;
        let mut counts = UnitCounts::from_rows(&rows)?;
        let retried =
            sqlx::query("SELECT COUNT(*) AS n FROM units WHERE job = $1 AND attempts > 0")
                .bind(job)
                .fetch_one(&self.reads)
                .await?;
        counts.retried = uint(retried.try_get("n")?, "count")?;
        Ok(counts)
    }

    /// Attempts each of job `job`'s units gets (its first unit's: planned alike), and
    /// when the first of those waiting after a failed attempt may go again, if one
    /// waits at `now`. Two reads by index, whatever the job's size.
    pub async fn attempts_outlook(
        &self,
        job: &str,
        now: u64,
    ) -> Result<(u64, Option<u64>), DbError> {
        let max: Option<i64> = sqlx::query_scalar(
            "SELECT max_attempts FROM units WHERE job = $1 ORDER BY seq LIMIT 1",
        )
        .bind(job)
        .fetch_optional(&self.reads)
        .await?;
        let next: Option<i64> = sqlx::query_scalar(
            "SELECT not_before FROM units WHERE job = $1 AND state = 'ready' AND not_before > $2 \
             ORDER BY not_before LIMIT 1",
        )
        .bind(job)
        .bind(int(now))
        .fetch_optional(&self.reads)
        .await?;
        let max = max.map_or(Ok(0), |m| uint(m, "max_attempts"))?;
        Ok((max, next.map(|n| uint(n, "not_before")).transpose()?))
    }

    /// Job `job`'s units, in order.
    pub async fn units(&self, job: &str) -> Result<Vec<UnitRow>, DbError> {
        let rows = sqlx::query(
            "SELECT seq, kind, state, lease_owner, lease_until, attempts, error \
             FROM units WHERE job = $1 ORDER BY seq",
        )
        .bind(job)
        .fetch_all(&self.reads)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(UnitRow {
                    seq: uint(r.try_get("seq")?, "seq")?,
                    kind: r.try_get("kind")?,
                    state: r.try_get("state")?,
                    lease_owner: r.try_get("lease_owner")?,
                    lease_until: r
                        .try_get::<Option<i64>, _>("lease_until")?
                        .map(|v| uint(v, "lease_until"))
                        .transpose()?,
                    attempts: u32::try_from(uint(r.try_get("attempts")?, "attempts")?)
                        .unwrap_or(u32::MAX),
                    error: r.try_get("error")?,
                })
            })
            .collect()
    }

    /// Files `from..to` of job `job`'s listing, in order.
    pub async fn files(&self, job: &str, from: u64, to: u64) -> Result<Vec<FileRow>, DbError> {
        let rows = sqlx::query(
            "SELECT operand, path, size FROM files WHERE job = $1 AND idx >= $2 AND idx < $3 ORDER BY idx",
        )
        .bind(job)
        .bind(int(from))
        .bind(int(to))
        .fetch_all(&self.reads)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(FileRow {
                    operand: u32::try_from(uint(r.try_get("operand")?, "operand")?)
                        .map_err(|_| DbError::Row("operand out of range".into()))?,
                    path: r.try_get("path")?,
                    size: uint(r.try_get("size")?, "size")?,
                })
            })
            .collect()
    }

    /// Cancels job `id`: its unfinished units are dropped (a worker holding one hears
    /// so at its next heartbeat, and its finish is refused). False if it had ended.
    pub async fn cancel(&self, id: &str, now: u64) -> Result<bool, DbError> {
        crate::patience::again(|| self.cancel_once(id, now)).await
    }

    /// One try of [`Db::cancel`]: the job's row first, then its units (the lock
    /// order of [`crate::counts`]).
    async fn cancel_once(&self, id: &str, now: u64) -> Result<bool, DbError> {
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(
            "UPDATE jobs SET state = 'cancelled', finished = $2 \
             WHERE id = $1 AND state IN ('planning', 'queued', 'running')",
        )
        .bind(id)
        .bind(int(now))
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query(
            "UPDATE units SET state = 'cancelled', lease_owner = NULL, lease_until = NULL, \
               lease_id = NULL, progress = 0 \
             WHERE job = $1 AND state IN ('waiting', 'ready', 'leased')",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
        crate::counts::recount(&mut tx, id).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Runs job `id` again if it failed or was cancelled: its failed and cancelled
    /// units with fresh attempts (done units stay done) if its listing was complete;
    /// otherwise (it ended while being planned) it is planned again from the start,
    /// by whichever instance takes it over first. With `spec`, the job runs by that
    /// spec from now on (the service's, with its reach taken again from today's
    /// identity map), set in the same statement that restarts it.
    pub async fn retry(&self, id: &str, now: u64, spec: Option<&str>) -> Result<Retry, DbError> {
        crate::patience::again(|| self.retry_once(id, now, spec)).await
    }

    /// One try of [`Db::retry`]: the job's row first, then its units.
    async fn retry_once(&self, id: &str, now: u64, spec: Option<&str>) -> Result<Retry, DbError> {
        let mut tx = self.pool.begin().await?;
        let r = sqlx::query(
            "UPDATE jobs SET finished = NULL, error = NULL, planner = NULL, planner_until = 0, \
             plan_attempts = 0, state = CASE WHEN planned IS NULL THEN 'planning' ELSE 'queued' END, \
             spec = COALESCE($2, spec) \
             WHERE id = $1 AND state IN ('failed', 'cancelled')",
        )
        .bind(id)
        .bind(spec)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 0 {
            return Ok(Retry::Nothing);
        }
        crate::webhooks::rearm(&mut tx, id, now).await?;
        let state: String = sqlx::query_scalar("SELECT state FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
        if state == "planning" {
            tx.commit().await?;
            return Ok(Retry::Replan);
        }
        let units = sqlx::query(
            "UPDATE units SET attempts = 0, error = NULL, not_before = $2, \
             state = CASE WHEN kind IN ('commit', 'delete') THEN 'waiting' ELSE 'ready' END \
             WHERE job = $1 AND state IN ('failed', 'cancelled')",
        )
        .bind(id)
        .bind(int(now))
        .execute(&mut *tx)
        .await?;
        if units.rows_affected() == 0 {
            // Nothing to redo (it failed in none of its units): left as it was.
            tx.rollback().await?;
            return Ok(Retry::Nothing);
        }
        crate::counts::recount(&mut tx, id).await?;
        crate::settle::settle(&mut tx, id, crate::settle::Commits::All, now, None).await?;
        tx.commit().await?;
        Ok(Retry::Units(units.rows_affected()))
    }
}

/// What [`Db::retry`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Nothing: the job is still going, done, or had nothing that failed.
    Nothing,
    /// Re-queued this many failed or cancelled units.
    Units(u64),
    /// Its listing was never complete: it is to be planned again.
    Replan,
}

/// Job row `r`, read column by column: what cannot be read is noted in
/// [`JobRow::damaged`] instead of failing, so that one damaged row (a counter SQLite
/// stored as a REAL after an overflow, say) is shown as such and never takes a whole
/// list of jobs, or the live view, down with it.
pub(crate) fn job_row(r: &AnyRow) -> JobRow {
    let mut c = Columns {
        row: r,
        damage: Vec::new(),
    };
    let state = c.text("state");
    let state = JobState::parse(&state).unwrap_or_else(|| {
        c.damage.push(format!("state {state:?} is not a job state"));
        JobState::Failed
    });
    let mut job = JobRow {
        id: c.text("id"),
        submitted_by: c.text("submitted_by"),
        spec: c.text("spec"),
        priority: c.signed("priority"),
        rate_limit: c.count("rate_limit"),
        state,
        created: c.count("created"),
        started: c.opt_count("started"),
        finished: c.opt_count("finished"),
        error: c.opt_text("error"),
        files: c.count("files"),
        bytes: c.count("bytes"),
        files_done: c.count("files_done"),
        bytes_done: c.count("bytes_done"),
        bytes_written: c.count("bytes_written"),
        units: UnitCounts {
            waiting: c.count("units_waiting"),
            ready: c.count("units_ready"),
            leased: c.count("units_leased"),
            done: c.count("units_done"),
            failed: c.count("units_failed"),
            cancelled: c.count("units_cancelled"),
            retried: c.count("units_retried"),
        },
        damaged: None,
    };
    if !c.damage.is_empty() {
        job.damaged = Some(format!("database row damaged: {}", c.damage.join(", ")));
    }
    job
}

/// A row's columns, read one by one, with what could not be read.
struct Columns<'r> {
    row: &'r AnyRow,
    /// One phrase per column that could not be read.
    damage: Vec<String>,
}

impl Columns<'_> {
    fn text(&mut self, col: &str) -> String {
        self.opt_text(col).unwrap_or_default()
    }

    fn opt_text(&mut self, col: &str) -> Option<String> {
        match self.row.try_get::<Option<String>, _>(col) {
            Ok(v) => v,
            Err(_) => {
                let seen = self.seen(col);
                self.damage.push(format!("{col} is not text ({seen})"));
                None
            }
        }
    }

    fn signed(&mut self, col: &str) -> i64 {
        match self.row.try_get::<Option<i64>, _>(col) {
            Ok(v) => v.unwrap_or(0),
            Err(_) => {
                let seen = self.seen(col);
                self.damage
                    .push(format!("{col} is not an integer ({seen})"));
                0
            }
        }
    }

    /// A count (or time): an integer from 0 up, or nothing (NULL).
    fn opt_count(&mut self, col: &str) -> Option<u64> {
        let v = match self.row.try_get::<Option<i64>, _>(col) {
            Ok(v) => v?,
            Err(_) => {
                let seen = self.seen(col);
                self.damage
                    .push(format!("{col} is not an integer ({seen})"));
                return None;
            }
        };
        let n = u64::try_from(v).ok();
        if n.is_none() {
            self.damage.push(format!("{col} is negative ({v})"));
        }
        n
    }

    fn count(&mut self, col: &str) -> u64 {
        self.opt_count(col).unwrap_or(0)
    }

    /// What column `col` holds, as far as it can be shown.
    fn seen(&self, col: &str) -> String {
        if let Ok(v) = self.row.try_get::<f64, _>(col) {
            return format!("{v:e}");
        }
        match self.row.try_get::<i64, _>(col) {
            Ok(v) => v.to_string(),
            Err(_) => match self.row.try_get::<String, _>(col) {
                Ok(t) => format!("{:?}", t.chars().take(40).collect::<String>()),
                Err(e) => e.to_string(),
            },
        }
    }
}
