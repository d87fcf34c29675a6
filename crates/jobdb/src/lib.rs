//! The transfer service's database (see `docs/design/service.md`): jobs, their
//! listings, their work units and the units' leases, on an embedded SQLite file (one
//! machine) or PostgreSQL (a cluster, several service instances), with one schema and
//! the same statements on both.
//!
//! The database is the coordinator: every change of state is one conditional
//! statement (`... WHERE state = 'leased' AND lease_id = $id AND lease_until > $now`)
//! inside a transaction, so any number of service instances can share it, and the
//! rules are those of [`hetch_jobs::lease`], against which the tests check this crate.
//! Times are passed in (milliseconds since the epoch), never read here.
//!
//! - [`jobs`]: reading, listing, cancelling and retrying jobs.
//! - [`planning`]: creating a job and writing its listing and units under a
//!   planning lease, which another instance takes over once it runs out.
//! - [`leases`]: claiming units, heartbeats, finishing, and reaping expired leases.
//! - [`stats`]: totals over all jobs, for monitoring.
//! - [`webhooks`]: the outbox of notes to jobs' webhooks, sent under leases.
//! - [`activity`]: workers, live progress, shares and failed units, for people
//!   watching.
//! - [`schedules`]: recurring mirrors, claimed at each due time by one instance.
//! - [`retention`]: deleting finished jobs beyond those kept, in bounded steps.

#![deny(missing_docs)]

pub mod activity;
mod counts;
mod error;
pub mod jobs;
pub mod leases;
pub mod object_ranges;
mod patience;
pub mod planning;
pub mod retention;
pub mod schedules;
mod schema;
mod settle;
mod sqlite_file;
pub mod stats;
pub mod webhooks;

use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;

pub use activity::{
    FailedUnit, LiveJob, Share, WorkerReport, WorkerRow, MAX_LAG_MS, STREAM_ATTEMPTS,
};
pub use error::DbError;
pub use jobs::{FileRow, JobRow, JobState, NewJob, PlannedUnit, Retry, UnitCounts, UnitRow};
pub use leases::{Claimed, Refused, Report, UnitLease, UnitOutcome, MAX_LEASE_ID};
pub use object_ranges::RangeRecord;
pub use patience::{Patience, FIRST_WAIT_MS, MOST_WAIT_MS};
pub use planning::{PlanningLease, TakenOver};
pub use schedules::{NewSchedule, Recurrence, Run, RunRow, ScheduleRow};
pub use stats::Totals;
pub use webhooks::{Attempt, Delivery, DueDelivery};

/// Which database is behind a [`Db`]: the statements are the same except the claim's
/// row lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file; one connection, so writers never contend.
    Sqlite,
    /// PostgreSQL, shared by any number of service instances.
    Postgres,
}

/// Connections for reads (read-only on SQLite): requests that only look run at once.
const READERS: u32 = 4;

/// Connections for lease work on PostgreSQL (see [`Db::leases`]).
const LEASE_WRITERS: u32 = 8;

/// A connection idle this long is checked (a round trip) before it is used again.
const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// A pool of `max` connections. sqlx checks each connection when it comes back to the
/// pool (a round trip) and, by default, again when it is taken: two round trips for
/// every claim and every report on top of their own statements, which on PostgreSQL
/// cost about as much as the claim. Checked on return, a connection is checked again
/// when taken only after a rest long enough for the database to have gone away
/// meanwhile (a restart): a dead one is then dropped and another opened, instead of
/// failing the call that took it.
fn pool_options(max: u32) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(max)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_CHECK {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// The service's database.
#[derive(Debug, Clone)]
pub struct Db {
    pool: AnyPool,
    /// Where reads that change nothing go (showing and listing jobs, a unit's
    /// files, totals): connections of their own, so that a view does not queue behind
    /// the writers. On SQLite, read-only: in WAL mode they read the last commit while
    /// the one writer plans a listing, instead of queueing behind its transactions of
    /// thousands of rows.
    reads: AnyPool,
    /// Where lease work goes (claims, reports, heartbeats, reaping). On PostgreSQL,
    /// connections whose commits do not wait for the log to reach the disk
    /// (`synchronous_commit = off`): a job's claims and reports hold its row to their
    /// commits, so each waited for a disk flush in turn, 400 units a second at most
    /// whatever the machine. A crash of the database may lose the last such commits
    /// (never tear them), which the leases make safe, as SQLite's `synchronous =
    /// NORMAL` is: a lost claim's unit is handed out again and its first worker's
    /// report refused, a lost report's unit runs again. Submissions, cancels and
    /// retries stay durable on [`Db::pool`]: a user was told they happened. On SQLite
    /// the one writer's pool.
    leases: AnyPool,
    backend: Backend,
    /// The waits between a unit's attempts.
    patience: Patience,
}

impl Db {
    /// Opens (creating a SQLite file if needed) the database at `url`
    /// (`sqlite://PATH` or `postgres://USER@HOST:PORT/DB`) and brings its schema up to
    /// date.
    pub async fn open(url: &str) -> Result<Db, DbError> {
        sqlx::any::install_default_drivers();
        let shown = redact(url);
        let (backend, url, connections) = if let Some(path) = url.strip_prefix("sqlite://") {
            // Before SQLite makes it with the umask's mode: see `sqlite_file`.
            sqlite_file::make_private(path)?;
            // One connection: SQLite has one writer anyway, and one connection cannot
            // deadlock upgrading a read lock. WAL lets readers elsewhere (a backup,
            // `sqlite3`) look without stopping it.
            let url = format!("sqlite://{path}?mode=rwc");
            (Backend::Sqlite, url, 1)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Backend::Postgres, url.to_string(), 8)
        } else {
            return Err(DbError::Url(shown));
        };
        let pool = pool_options(connections)
            .connect(&url)
            .await
            .map_err(|source| DbError::Open {
                url: shown.clone(),
                source,
            })?;
        if backend == Backend::Sqlite {
            // In WAL mode, `synchronous = NORMAL` syncs at checkpoints, not at every
            // commit: a crash of the service loses nothing, a power cut at most the
            // last commits (units then run again, which is safe), and a claim and a
            // report no longer cost a disk flush each.
            let pragmas = [
                "PRAGMA journal_mode = WAL",
                "PRAGMA synchronous = NORMAL",
                "PRAGMA foreign_keys = ON",
            ];
            for pragma in pragmas {
                sqlx::query(pragma).execute(&pool).await?;
            }
        }
        schema::migrator()
            .run(&pool)
            .await
            .map_err(|source| DbError::Migrate {
                url: shown.clone(),
                source,
            })?;
        let reads = match url.strip_suffix("?mode=rwc") {
            Some(file) if backend == Backend::Sqlite => pool_options(READERS)
                .connect(&format!("{file}?mode=ro"))
                .await
                .map_err(|source| DbError::Open { url: shown, source })?,
            // PostgreSQL: a pool of its own all the same. Behind the pool of lease
            // work (each claim and report holding a connection while it waits for
            // its job's row), a view waited for a connection: `GET job` took 104 ms
            // median with 32 workers and 241 ms with 64.
            _ => pool_options(READERS)
                .connect(&url)
                .await
                .map_err(|source| DbError::Open { url: shown, source })?,
        };
        let leases = match backend {
            Backend::Sqlite => pool.clone(),
            Backend::Postgres => pool_options(LEASE_WRITERS)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        sqlx::query("SET synchronous_commit = off")
                            .execute(&mut *conn)
                            .await?;
                        Ok(())
                    })
                })
                .connect(&url)
                .await
                .map_err(|source| DbError::Open {
                    url: redact(&url),
                    source,
                })?,
        };
        Ok(Db {
            pool,
            reads,
            leases,
            backend,
            patience: Patience::default(),
        })
    }

    /// This database, with a unit whose attempt failed waiting `patience` before its
    /// next (the default: [`FIRST_WAIT_MS`], growing to [`MOST_WAIT_MS`]).
    pub fn with_patience(mut self, patience: Patience) -> Db {
        self.patience = patience;
        self
    }

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes the pools, waiting for connections in use.
    pub async fn close(&self) {
        self.pool.close().await;
        self.reads.close().await;
        self.leases.close().await;
    }
}

/// `url` without the password between `:` and `@`, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}")
        }
        _ => url.to_string(),
    }
}

/// A `u64` (time, size, count) as the database's `BIGINT`.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A `BIGINT` read back as a `u64`; a negative one is damage.
fn uint(v: i64, what: &str) -> Result<u64, DbError> {
    u64::try_from(v).map_err(|_| DbError::Row(format!("{what} is negative: {v}")))
}

/// The largest `BIGINT`, as SQL.
const BIGINT_MAX: &str = "9223372036854775807";

/// SQL for `column + param` (`param` never negative) that stops at the largest
/// `BIGINT` instead of overflowing: PostgreSQL fails a statement whose sum overflows,
/// and SQLite stores it as a REAL, which no later read takes for a count. The test
/// comes before the sum, so that neither database ever computes one that overflows
/// (`MIN(column + param, ...)` would, first).
fn saturating_add(column: &str, param: &str) -> String {
    format!(
        "CASE WHEN {column} > {BIGINT_MAX} - {param} THEN {BIGINT_MAX} \
         ELSE {column} + {param} END"
    )
}

/// SQL for the sum of `expr` over a group (0 for none), taken in floating point: an
/// integer `SUM` that overflows fails the statement on SQLite (and its cast back to
/// `BIGINT` on PostgreSQL), which would take a whole list down for one group. Read it
/// with [`float_sum`].
fn sum_sql(expr: &str) -> String {
    format!("COALESCE(SUM(CAST({expr} AS DOUBLE PRECISION)), 0)")
}

/// Column `col` of `r`, a [`sum_sql`], as a `u64`: exact up to 2^53, the nearest
/// float beyond, at most `u64::MAX` and at least 0 (a sum over a damaged row may be
/// anything). An empty sum may come back as the integer 0.
fn float_sum(r: &sqlx::any::AnyRow, col: &str) -> Result<u64, DbError> {
    use sqlx::Row;
    match r.try_get::<f64, _>(col) {
        // `as` saturates, and takes NaN to 0.
        Ok(v) => Ok(v as u64),
        Err(_) => Ok(u64::try_from(r.try_get::<i64, _>(col)?).unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job shown while the one SQLite writer is inside a transaction (a planner
    /// writing thousands of rows) answers with the last commit instead of waiting for
    /// the writer's only connection. Without the read pool this never returns while
    /// the transaction is open (the timeout is a liveness guard, not a speed check).
    #[tokio::test]
    async fn sqlite_reads_do_not_wait_for_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(&format!(
            "sqlite://{}",
            dir.path().join("jobs.db").display()
        ))
        .await
        .unwrap();
        let job = NewJob {
            id: "j1".into(),
            submitted_by: "tester".into(),
            spec: "{}".into(),
            priority: 0,
            rate_limit: 0,
        };
        db.create_job(&job, "planner", 2_000, 1_000).await.unwrap();
        let mut writer = db.pool.begin().await.unwrap();
        sqlx::query("UPDATE jobs SET priority = 7 WHERE id = 'j1'")
            .execute(&mut *writer)
            .await
            .unwrap();
        let look = tokio::time::timeout(std::time::Duration::from_secs(30), db.job("j1"));
        let seen = look.await.expect("a read waited for the writer").unwrap();
        assert_eq!(
            seen.map(|j| j.priority),
            Some(0),
            "saw an uncommitted write"
        );
        writer.commit().await.unwrap();
        assert_eq!(db.job("j1").await.unwrap().map(|j| j.priority), Some(7));
    }

    #[test]
    fn passwords_are_left_out_of_messages() {
        assert_eq!(
            super::redact("postgres://hetch:s3cret@db:5432/hetch"),
            "postgres://hetch:***@db:5432/hetch"
        );
        assert_eq!(
            super::redact("postgres://hetch@db/x"),
            "postgres://hetch@db/x"
        );
        assert_eq!(super::redact("sqlite:///var/x.db"), "sqlite:///var/x.db");
    }
}
