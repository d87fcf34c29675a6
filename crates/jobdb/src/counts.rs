//! A job's units counted by state on the job's own row, and the order in which a
//! transaction takes its locks.
//!
//! Every transaction that changes the state of a job's units changes the counts on
//! its row in the same transaction, by a [`Delta`] of what it moved: a claim, a view
//! or a job's end then reads one row instead of counting all of its units. Rare
//! changes of many units at once (a cancel, a retry) count again instead
//! ([`recount`]). The model test checks after every step that the counts are those of
//! the units.
//!
//! Lock order: a transaction that touches a job's units takes the job's row first
//! ([`lock_job`]), then units. A cancel (job, then units) and a worker's report (its
//! unit, then the job's counters) deadlocked on PostgreSQL before; with one order
//! they queue instead.

use sqlx::{Any, Row, Transaction};

/// A statement of the `Any` driver, being bound.
type AnyQuery<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

use crate::{uint, Backend, DbError};

/// Changes to a job's unit counts, one per state, and to its count of units tried
/// more than once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    pub waiting: i64,
    pub ready: i64,
    pub leased: i64,
    pub done: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub retried: i64,
}

impl Delta {
    /// The count of units in `state` (a unit state's name) changed by `n`; a state
    /// that is not one is damage, counted nowhere.
    pub fn add(&mut self, state: &str, n: i64) {
        let slot = match state {
            "waiting" => &mut self.waiting,
            "ready" => &mut self.ready,
            "leased" => &mut self.leased,
            "done" => &mut self.done,
            "failed" => &mut self.failed,
            "cancelled" => &mut self.cancelled,
            _ => return,
        };
        *slot += n;
    }

    /// `n` units moved from state `from` to state `to`.
    pub fn moved(&mut self, from: &str, to: &str, n: i64) {
        self.add(from, -n);
        self.add(to, n);
    }

    /// The `SET` terms of these changes, their parameters numbered from `first` (see
    /// [`Delta::bind`]), for a statement that may change more of the job's row.
    pub fn set_terms(first: usize) -> String {
        const COLUMNS: [&str; 7] = [
            "units_waiting",
            "units_ready",
            "units_leased",
            "units_done",
            "units_failed",
            "units_cancelled",
            "units_retried",
        ];
        let terms: Vec<String> = COLUMNS
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = {c} + ${}", first + i))
            .collect();
        terms.join(", ")
    }

    /// Binds the changes, in the order of [`Delta::set_terms`], to `q`.
    pub fn bind<'q>(self, q: AnyQuery<'q>) -> AnyQuery<'q> {
        q.bind(self.waiting)
            .bind(self.ready)
            .bind(self.leased)
            .bind(self.done)
            .bind(self.failed)
            .bind(self.cancelled)
            .bind(self.retried)
    }

    /// Applies the changes to job `job`'s row.
    pub async fn apply(self, tx: &mut Transaction<'static, Any>, job: &str) -> Result<(), DbError> {
        if self == Delta::default() {
            return Ok(());
        }
        let sql = format!("UPDATE jobs SET {} WHERE id = $1", Delta::set_terms(2));
        let q = sqlx::query(&sql).bind(job);
        self.bind(q).execute(&mut **tx).await?;
        Ok(())
    }
}

/// Counts job `job`'s units again, from the units, onto its row: after a change of
/// many of them at once.
pub(crate) async fn recount(tx: &mut Transaction<'static, Any>, job: &str) -> Result<(), DbError> {
    let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM units WHERE job = $1 GROUP BY state")
        .bind(job)
        .fetch_all(&mut **tx)
        .await?;
    let mut counts = Delta::default();
    for r in &rows {
        let n = uint(r.try_get("n")?, "count")?;
        counts.add(&r.try_get::<String, _>("state")?, crate::int(n));
    }
    let retried: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM units WHERE job = $1 AND attempts > 0")
            .bind(job)
            .fetch_one(&mut **tx)
            .await?;
    sqlx::query(
        "UPDATE jobs SET units_waiting = $2, units_ready = $3, units_leased = $4, \
           units_done = $5, units_failed = $6, units_cancelled = $7, units_retried = $8 \
         WHERE id = $1",
    )
    .bind(job)
    .bind(counts.waiting)
    .bind(counts.ready)
    .bind(counts.leased)
    .bind(counts.done)
    .bind(counts.failed)
    .bind(counts.cancelled)
    .bind(retried)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Takes job `job`'s row lock, first in a transaction that goes on to its units (see
/// the module's lock order). False if there is no such job. On SQLite nothing: its one
/// writer's transactions never overlap, and every caller's first statement is a write,
/// which takes the database's write lock (waiting for it). A read first would not do:
/// the transaction's first write would then fail at once ("database is locked")
/// whenever another connection writes, as SQLite cannot upgrade a reader that may have
/// read what the writer changes.
pub(crate) async fn lock_job(
    tx: &mut Transaction<'static, Any>,
    backend: Backend,
    job: &str,
) -> Result<bool, DbError> {
    match backend {
        Backend::Postgres => Ok(sqlx::query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE")
            .bind(job)
            .fetch_optional(&mut **tx)
            .await?
            .is_some()),
        Backend::Sqlite => Ok(true),
    }
}
