//! Recurring mirrors: schedules that submit a job (a run) of their spec at each due
//! time, and the history of what each due time did.
//!
//! The service computes due times (an interval, or a cron expression); this module
//! only stores them. An instance takes a due schedule with [`Db::claim_schedule`], a
//! conditional UPDATE that moves `next_at` on only if it still holds the time the
//! instance saw: however many instances look at once, one due time is taken once.

use sqlx::Row;

use crate::jobs::JobState;
use crate::{int, uint, Db, DbError};

/// A schedule as submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSchedule {
    /// Its id, made by the service (unique).
    pub id: String,
    /// Who made it: its runs are submitted as theirs.
    pub owner: String,
    /// The spec of each run, as JSON.
    pub spec: String,
    /// How it recurs.
    pub when: Recurrence,
    /// Its first due time.
    pub next_at: u64,
}

/// How a schedule recurs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recurrence {
    /// Every this many milliseconds.
    Every(u64),
    /// At the times of this 5-field cron expression (UTC).
    Cron(String),
}

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    /// Its id.
    pub id: String,
    /// Who made it.
    pub owner: String,
    /// The spec of each run, as JSON.
    pub spec: String,
    /// How it recurs.
    pub when: Recurrence,
    /// Its next due time.
    pub next_at: u64,
    /// Whether it is paused (no runs until resumed).
    pub paused: bool,
    /// When it was made.
    pub created: u64,
    /// The job of its newest run, if it ran.
    pub last_job: Option<String>,
    /// That job's state, if it is still in the database.
    pub last_state: Option<JobState>,
}

/// What one due time of a schedule did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    /// The due time.
    pub due: u64,
    /// The job it submitted, if it did.
    pub job: Option<String>,
    /// Why it submitted none, if it did not.
    pub skipped: Option<String>,
}

/// What a due time did, to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// It submitted this job.
    Job(String),
    /// It submitted none, for this reason.
    Skipped(String),
}

/// Runs kept per schedule; older ones are dropped as new ones are recorded, so that a
/// schedule every second for a year does not fill the database with its history.
pub const KEPT_RUNS: u64 = 100;

const COLUMNS: &str = "s.id, s.owner, s.spec, s.every_ms, s.cron, s.next_at, s.paused, \
     s.created, s.last_job, j.state AS last_state";

fn schedule_row(r: &sqlx::any::AnyRow) -> Result<ScheduleRow, DbError> {
    let every: Option<i64> = r.try_get("every_ms")?;
    let cron: Option<String> = r.try_get("cron")?;
    let when = match (every, cron) {
        (Some(ms), None) => Recurrence::Every(uint(ms, "every_ms")?),
        (None, Some(c)) => Recurrence::Cron(c),
        _ => return Err(DbError::Row("a schedule needs every_ms or cron".into())),
    };
    let last_state: Option<String> = r.try_get("last_state")?;
    Ok(ScheduleRow {
        id: r.try_get("id")?,
        owner: r.try_get("owner")?,
        spec: r.try_get("spec")?,
        when,
        next_at: uint(r.try_get("next_at")?, "next_at")?,
        paused: r.try_get::<i64, _>("paused")? != 0,
        created: uint(r.try_get("created")?, "created")?,
        last_job: r.try_get("last_job")?,
        last_state: last_state.as_deref().and_then(JobState::parse),
    })
}

impl Db {
    /// Records schedule `s`, made at `now`, unless its owner has `max_per_owner`
    /// already (false then).
    pub async fn create_schedule(
        &self,
        s: &NewSchedule,
        max_per_owner: u64,
        now: u64,
    ) -> Result<bool, DbError> {
        let (every, cron) = match &s.when {
            Recurrence::Every(ms) => (Some(int(*ms)), None),
            Recurrence::Cron(c) => (None, Some(c.as_str())),
        };
        let r = sqlx::query(
            "INSERT INTO schedules (id, owner, spec, every_ms, cron, next_at, created) \
             SELECT $1, $2, $3, $4, $5, $6, $7 \
             WHERE (SELECT COUNT(*) FROM schedules WHERE owner = $2) < $8",
        )
        .bind(&s.id)
        .bind(&s.owner)
        .bind(&s.spec)
        .bind(every)
        .bind(cron)
        .bind(int(s.next_at))
        .bind(int(now))
        .bind(int(max_per_owner))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Schedule `id`, if there is one.
    pub async fn schedule(&self, id: &str) -> Result<Option<ScheduleRow>, DbError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM schedules s LEFT JOIN jobs j ON j.id = s.last_job \
             WHERE s.id = $1"
        );
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.reads)
            .await?;
        row.as_ref().map(schedule_row).transpose()
    }

    /// Up to `limit` schedules, newest first, of `owner` if given.
    pub async fn schedules(
        &self,
        owner: Option<&str>,
        limit: u64,
    ) -> Result<Vec<ScheduleRow>, DbError> {
        let filter = match owner {
            Some(_) => "WHERE s.owner = $2",
            None => "",
        };
        let sql = format!(
            "SELECT {COLUMNS} FROM schedules s LEFT JOIN jobs j ON j.id = s.last_job \
             {filter} ORDER BY s.created DESC, s.id DESC LIMIT $1"
        );
        let mut q = sqlx::query(&sql).bind(int(limit));
        if let Some(o) = owner {
            q = q.bind(o);
        }
        let rows = q.fetch_all(&self.reads).await?;
        rows.iter().map(schedule_row).collect()
    }

    /// Up to `max` schedules due at `now` (not paused, `next_at` passed), soonest
    /// first. Each is only run once [`Db::claim_schedule`] took it.
    pub async fn due_schedules(&self, now: u64, max: u64) -> Result<Vec<ScheduleRow>, DbError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM schedules s LEFT JOIN jobs j ON j.id = s.last_job \
             WHERE s.paused = 0 AND s.next_at <= $1 ORDER BY s.next_at LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(int(now))
            .bind(int(max))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(schedule_row).collect()
    }

    /// Takes the due time `seen` of schedule `id`, moving it on to `next`: true for
    /// the one caller whose `seen` still held (the schedule not paused, deleted, or
    /// taken by another instance since it was read).
    pub async fn claim_schedule(&self, id: &str, seen: u64, next: u64) -> Result<bool, DbError> {
        let r = sqlx::query(
            "UPDATE schedules SET next_at = $3 WHERE id = $1 AND next_at = $2 AND paused = 0",
        )
        .bind(id)
        .bind(int(seen))
        .bind(int(next))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Records what due time `due` of schedule `schedule` did (a job becomes its
    /// `last_job`), dropping its runs older than the newest [`KEPT_RUNS`].
    pub async fn record_run(&self, schedule: &str, due: u64, run: &Run) -> Result<(), DbError> {
        let (job, skipped) = match run {
            Run::Job(j) => (Some(j.as_str()), None),
            Run::Skipped(why) => (None, Some(why.as_str())),
        };
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO schedule_runs (schedule, due, job, skipped) VALUES ($1, $2, $3, $4)",
        )
        .bind(schedule)
        .bind(int(due))
        .bind(job)
        .bind(skipped)
        .execute(&mut *tx)
        .await?;
        if let Some(j) = job {
            sqlx::query("UPDATE schedules SET last_job = $2 WHERE id = $1")
                .bind(schedule)
                .bind(j)
                .execute(&mut *tx)
                .await?;
        }
        // No row at that offset (fewer runs kept): `due < NULL` deletes nothing.
        sqlx::query(
            "DELETE FROM schedule_runs WHERE schedule = $1 AND due < \
             (SELECT due FROM schedule_runs WHERE schedule = $1 \
              ORDER BY due DESC LIMIT 1 OFFSET $2)",
        )
        .bind(schedule)
        .bind(int(KEPT_RUNS - 1))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The newest `limit` runs of schedule `schedule`, newest first.
    pub async fn runs(&self, schedule: &str, limit: u64) -> Result<Vec<RunRow>, DbError> {
        let rows = sqlx::query(
            "SELECT due, job, skipped FROM schedule_runs WHERE schedule = $1 \
             ORDER BY due DESC LIMIT $2",
        )
        .bind(schedule)
        .bind(int(limit))
        .fetch_all(&self.reads)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(RunRow {
                    due: uint(r.try_get("due")?, "due")?,
                    job: r.try_get("job")?,
                    skipped: r.try_get("skipped")?,
                })
            })
            .collect()
    }

    /// Pauses (`paused`) or resumes schedule `id`; a resumed one is next due at
    /// `next_at` (due times missed while paused are not run). False if there is no
    /// such schedule.
    pub async fn pause_schedule(
        &self,
        id: &str,
        paused: bool,
        next_at: Option<u64>,
    ) -> Result<bool, DbError> {
        let r = sqlx::query(
            "UPDATE schedules SET paused = $2, next_at = COALESCE($3, next_at) WHERE id = $1",
        )
        .bind(id)
        .bind(i64::from(paused))
        .bind(next_at.map(int))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Deletes schedule `id` and its history (its jobs stay). False if there was none.
    pub async fn delete_schedule(&self, id: &str) -> Result<bool, DbError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM schedule_runs WHERE schedule = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query("DELETE FROM schedules WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }
}
