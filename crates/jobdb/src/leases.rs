//! Work units under leases: claim, heartbeat, finish, reap.
//!
//! The rules are [`hetch_jobs::lease`]'s, applied by conditional statements so that
//! any number of service instances may call these at once: a claim takes a ready
//! unit under a row lock that others skip (PostgreSQL `FOR UPDATE SKIP LOCKED`;
//! SQLite has one writer) and gives it a random lease id, a heartbeat or a finish
//! changes only rows whose lease the caller holds unexpired and names by that id, and
//! the reaper voids leases that ran out. After a change,
//! [`settle`] moves what follows from it: a split file's commit becomes ready when
//! its last range is done (or fails with it), and a job whose units are all final
//! ends.

use std::collections::BTreeMap;

use hetch_jobs::UnitSpec;
use sqlx::any::AnyRow;
use sqlx::{Any, Row, Transaction};

use crate::counts::{lock_job, Delta};
use crate::patience::again;
use crate::settle::{settle, Commits, Counts};
use crate::{int, saturating_add, uint, Backend, Db, DbError};

/// Most files one report may say a unit moved. A relay's files were never listed, so
/// this is its bound; any other unit's is what it holds (see [`Db::finish`]). A
/// billion: far beyond one source tree, yet a job's sums of such reports stay far
/// from overflowing (and saturate besides).
pub const MAX_UNIT_FILES: u64 = 1_000_000_000;
/// Most bytes one report may say a unit moved: 2^53 (8 PiB), a relay's bound (its
/// size was never listed; any other unit's is its planned bytes). Exact as a float,
/// and a thousand of them (a job's relays: one per source) still fit a `BIGINT`.
pub const MAX_UNIT_BYTES: u64 = 1 << 53;

/// A unit a worker now holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// Its job.
    pub job: String,
    /// Its number within the job.
    pub seq: u64,
    /// What to do.
    pub spec: UnitSpec,
    /// Attempts before this one.
    pub attempts: u32,
    /// The lease runs out at this time unless extended.
    pub until: u64,
    /// The lease's id: random, given with this claim only; every later word about
    /// the unit must carry it ([`UnitLease`]).
    pub lease: String,
}

impl Claimed {
    /// The unit and its lease id, as a heartbeat or a report names them.
    pub fn held(&self) -> UnitLease {
        UnitLease {
            job: self.job.clone(),
            seq: self.seq,
            lease: self.lease.clone(),
        }
    }
}

/// A unit a worker says it holds: the job, the unit's number and the lease id its
/// claim gave. The id, 128 random bits, is the proof: a worker's name and a unit's
/// number are shown to users, so naming them proves nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnitLease {
    /// Its job.
    pub job: String,
    /// Its number within the job.
    pub seq: u64,
    /// The id of the lease (see [`Claimed::lease`]).
    pub lease: String,
}

/// A unit's `not_before` until its first attempt: before any time, so units never
/// tried go first, in order, from their job's `claim_from` (see [`Db::claim`]). Any
/// other way to become ready sets a time (of 0 or more).
pub(crate) const NEVER_TRIED: i64 = -1;

/// Longest lease id a caller may present (ours are 32 hex digits).
pub const MAX_LEASE_ID: usize = 64;

/// A new lease id: 128 bits from the operating system's generator, in hex.
fn new_lease_id() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}

/// How a worker's unit went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitOutcome {
    /// Moved: `files` whole files (a range counts none, a commit its one file) and
    /// `bytes` bytes, of which it wrote `written` at the destination.
    Done {
        /// Files that reached their final names.
        files: u64,
        /// Bytes moved (written, or found in place).
        bytes: u64,
        /// Bytes written at the destination (files found in place wrote none).
        written: u64,
    },
    /// It did not go through; another attempt follows unless this was the last.
    Failed(String),
}

/// Why a heartbeat or finish was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The caller does not hold the unit (another worker does, or nobody, or the job
    /// was cancelled).
    NotOwner,
    /// The caller's lease ran out: the unit may be another worker's by now.
    Expired,
}

/// A worker's report of one unit, as [`Db::finish_all`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    /// The unit, named by its lease.
    pub unit: &'a UnitLease,
    /// How it went.
    pub outcome: &'a UnitOutcome,
    /// What a done range unit of a file going into an object store reported of its
    /// parts (see [`Db::finish_with`]).
    pub range: Option<&'a crate::RangeRecord>,
}

/// Whose turn it is to give a unit.
struct Turn {
    /// The job.
    job: String,
    /// Whether another job of the same priority has units ready too: then it gives
    /// one at a time, and they alternate.
    rival: bool,
}

const UNIT_COLUMNS: &str = "job, seq, kind, file_from, file_to, block_from, block_to, bytes, \
     attempts, lease_until, lease_id";

impl Db {
    /// `worker` takes up to `max` ready units until `now + ttl`: the highest-priority
    /// job first, and among equal priorities the one with the fewest units in flight
    /// (so equal jobs share the workers), oldest first; within a job, those never
    /// tried in order, then those trying again once their wait is over. A job with
    /// no rival of its priority gives its units in one batch (one transaction, one
    /// lease id for the batch).
    pub async fn claim(
        &self,
        worker: &str,
        now: u64,
        ttl: u64,
        max: usize,
    ) -> Result<Vec<Claimed>, DbError> {
        let mut out = Vec::new();
        let mut misses = 0;
        while out.len() < max && misses < 3 {
            let Some(turn) = self.next_job(now).await? else {
                break;
            };
            let batch = match turn.rival {
                true => 1,
                false => max - out.len(),
            };
            let got = again(|| self.claim_in(&turn.job, worker, now, ttl, batch)).await?;
            if got.is_empty() {
                // Another instance took the job's last ready units since we looked.
                misses += 1;
            }
            out.extend(got);
        }
        Ok(out)
    }

    /// The job whose turn it is, if any has a unit ready at `now`: read off the jobs'
    /// rows (their counts), and the first ready unit of each by the index.
    async fn next_job(&self, now: u64) -> Result<Option<Turn>, DbError> {
        let rows = sqlx::query(
            "SELECT j.id, j.priority FROM jobs j \
             WHERE j.state IN ('queued', 'running') AND j.units_ready > 0 \
               AND EXISTS (SELECT 1 FROM units u WHERE u.job = j.id AND u.state = 'ready' \
                 AND u.not_before <= $1 AND (u.not_before, u.seq) >= ($2, j.claim_from)) \
             ORDER BY j.priority DESC, j.units_leased, j.created, j.id \
             LIMIT 2",
        )
        .bind(int(now))
        .bind(NEVER_TRIED)
        .fetch_all(&self.leases)
        .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let priority: i64 = first.try_get("priority")?;
        let rival = match rows.get(1) {
            Some(r) => r.try_get::<i64, _>("priority")? == priority,
            None => false,
        };
        Ok(Some(Turn {
            job: first.try_get("id")?,
            rival,
        }))
    }

    /// Leases up to `max` of job `job`'s units ready at `now` to `worker`, under one
    /// new lease id.
    async fn claim_in(
        &self,
        job: &str,
        worker: &str,
        now: u64,
        ttl: u64,
        max: usize,
    ) -> Result<Vec<Claimed>, DbError> {
        // The units are picked once, in a common table expression: as a subquery of
        // `IN`, PostgreSQL may run a `LIMIT` again for each row it compares. They are
        // read from the job's `claim_from` on: on PostgreSQL the units claimed before
        // leave their entries in the ready index until vacuum, and a read from the
        // first stepped over all of them. No lock on them: the job's row, taken first,
        // makes a job's claims one at a time, and the update checks each is still
        // ready. (`SKIP LOCKED` could skip a unit never tried, which the cursor would
        // then pass for good.)
        //
        // On PostgreSQL they are then found by their keys, as an array: as `IN`, the
        // planner (with a limit it cannot see, and often no statistics yet) would
        // rather read all of the job's ready units and join, 10 ms a claim of 16
        // units at 10,000.
        let (materialized, picked_keys) = match self.backend {
            Backend::Postgres => ("MATERIALIZED", "= ANY(ARRAY(SELECT seq FROM picked))"),
            Backend::Sqlite => ("", "IN (SELECT seq FROM picked)"),
        };
        let picked = |cursor: &str| {
            format!(
                "picked AS {materialized} \
                   (SELECT seq FROM units WHERE job = $1 AND state = 'ready' \
                      AND not_before <= $5 AND (not_before, seq) >= ($7, {cursor}) \
                    ORDER BY not_before, seq LIMIT $6)"
            )
        };
        let take = format!(
            "UPDATE units SET state = 'leased', lease_owner = $2, lease_until = $3, lease_id = $4, \
               progress = 0, lag_p50 = NULL, lag_p99 = NULL \
             WHERE job = $1 AND state = 'ready' AND seq {picked_keys} \
             RETURNING {UNIT_COLUMNS}, not_before"
        );
        // The job's row first, as every transaction on a job's units takes it: taking
        // units first, a claim met a cancel (the row, then all the job's units) the
        // other way round, and under a steady load of claims the cancel lost every
        // time the database broke the deadlock. The row is held to the commit, so a
        // job's claims and reports queue on it (see docs/BENCHMARKS.md).
        let rows = match self.backend {
            // One statement, its own transaction: the job's row locked, its units
            // taken, and its counts, its cursor and its start (if this is its first
            // claim) written. Each round trip while the row is held is one more wait
            // for every other claim and report of the job; this way the row is held
            // for one. The cursor is read from the locked row, as it is now; the
            // units by the statement's snapshot, from before the wait for the row, so
            // a unit the claim before took may look ready: the update checks each
            // again and leaves those out (this claim then gets fewer). The cursor
            // moves past the last unit never tried among those handed out: they were
            // taken in order from it, so none before it is left.
            Backend::Postgres => {
                let sql = format!(
                    "WITH locked AS (SELECT claim_from FROM jobs WHERE id = $1 FOR UPDATE), \
                       {picked}, claimed AS ({take}), \
                     counted AS (UPDATE jobs SET \
                       units_ready = units_ready - (SELECT COUNT(*) FROM claimed), \
                       units_leased = units_leased + (SELECT COUNT(*) FROM claimed), \
                       claim_from = GREATEST(claim_from, \
                         (SELECT COALESCE(MAX(seq) + 1, 0) FROM claimed WHERE not_before = $7)), \
                       started = CASE WHEN state = 'queued' THEN $5 ELSE started END, \
                       state = CASE WHEN state = 'queued' THEN 'running' ELSE state END \
                     WHERE id = $1 AND EXISTS (SELECT 1 FROM claimed)) \
                     SELECT * FROM claimed",
                    picked = picked("(SELECT claim_from FROM locked)"),
                );
                claim_query(&sql, job, worker, now, ttl, max)
                    .fetch_all(&self.leases)
                    .await?
            }
            // No statement that changes rows inside another on SQLite: a transaction
            // (its first statement a write, which takes the database's one write lock).
            Backend::Sqlite => {
                let mut tx = self.leases.begin().await?;
                let sql = format!(
                    "WITH {} {take}",
                    picked("(SELECT claim_from FROM jobs WHERE id = $1)")
                );
                let rows = claim_query(&sql, job, worker, now, ttl, max)
                    .fetch_all(&mut *tx)
                    .await?;
                if rows.is_empty() {
                    return Ok(Vec::new());
                }
                let mut delta = Delta::default();
                delta.moved("ready", "leased", rows.len() as i64);
                let mut next = 0;
                for r in &rows {
                    if r.try_get::<i64, _>("not_before")? == NEVER_TRIED {
                        next = next.max(r.try_get::<i64, _>("seq")?.saturating_add(1));
                    }
                }
                let sql = format!(
                    "UPDATE jobs SET {}, \
                       claim_from = CASE WHEN $10 > claim_from THEN $10 ELSE claim_from END, \
                       started = CASE WHEN state = 'queued' THEN $9 ELSE started END, \
                       state = CASE WHEN state = 'queued' THEN 'running' ELSE state END \
                     WHERE id = $1",
                    Delta::set_terms(2)
                );
                let q = delta.bind(sqlx::query(&sql).bind(job));
                q.bind(int(now)).bind(next).execute(&mut *tx).await?;
                tx.commit().await?;
                rows
            }
        };
        let mut got = rows.iter().map(claimed).collect::<Result<Vec<_>, _>>()?;
        got.sort_by_key(|c| c.seq);
        Ok(got)
    }

    /// `worker` is alive and runs the units `running`: each lease of them it holds
    /// unexpired (named by its id) now runs until `now + ttl`. Returns the units it
    /// still holds (in job, seq order); any other it was working on is no longer its
    /// own (expired, or its job cancelled): it must stop. A unit the worker holds but
    /// does not say it runs (its claim's answer lost on the way) is left to run out
    /// and go to another worker, instead of being kept alive by a worker that will
    /// never run it.
    pub async fn heartbeat_units(
        &self,
        worker: &str,
        now: u64,
        ttl: u64,
        running: &[UnitLease],
    ) -> Result<Vec<(String, u64)>, DbError> {
        if running.is_empty() {
            return Ok(Vec::new());
        }
        let pairs: Vec<String> = (0..running.len())
            .map(|i| {
                let at = 4 + 3 * i;
                format!(
                    "(job = ${} AND seq = ${} AND lease_id = ${})",
                    at,
                    at + 1,
                    at + 2
                )
            })
            .collect();
        let sql = format!(
            "UPDATE units SET lease_until = $2 \
             WHERE lease_owner = $1 AND state = 'leased' AND lease_until > $3 AND ({}) \
             RETURNING job, seq",
            pairs.join(" OR ")
        );
        let rows = again(|| async {
            let mut q = sqlx::query(&sql)
                .bind(worker)
                .bind(int(now.saturating_add(ttl)))
                .bind(int(now));
            for u in running {
                q = q.bind(&u.job).bind(int(u.seq)).bind(&u.lease);
            }
            Ok(q.fetch_all(&self.leases).await?)
        })
        .await?;
        let mut held = rows
            .iter()
            .map(|r| Ok((r.try_get("job")?, uint(r.try_get("seq")?, "seq")?)))
            .collect::<Result<Vec<_>, DbError>>()?;
        held.sort();
        Ok(held)
    }

    /// `worker` reports unit `unit`. Taken only if it holds the unit's lease
    /// unexpired at `now`, named by its id; a late or stray word changes nothing.
    ///
    /// What a done unit says it moved is taken as at most what the unit holds: the
    /// files it names (a range none, a commit its one) and its planned bytes; for a
    /// relay or a stream, never listed, [`MAX_UNIT_FILES`] and [`MAX_UNIT_BYTES`].
    /// More is clamped, not refused, since a file may have grown since it was listed
    /// and the unit did go through; the job's counts stay those of its listing. The
    /// job's counters saturate at the largest `BIGINT` instead of overflowing, so no
    /// report can make its row unreadable.
    pub async fn finish(
        &self,
        worker: &str,
        unit: &UnitLease,
        now: u64,
        outcome: &UnitOutcome,
    ) -> Result<Result<(), Refused>, DbError> {
        self.finish_with(worker, unit, now, outcome, None).await
    }

    /// [`Db::finish`], with what a done range unit of a file going into an object store
    /// reported of its parts, recorded in the same transaction (so that the commit
    /// never becomes ready without it; see [`crate::object_ranges`]). Checked by the
    /// caller against the unit ([`Db::held_unit`]).
    pub async fn finish_with(
        &self,
        worker: &str,
        unit: &UnitLease,
        now: u64,
        outcome: &UnitOutcome,
        range: Option<&crate::RangeRecord>,
    ) -> Result<Result<(), Refused>, DbError> {
        let report = Report {
            unit,
            outcome,
            range,
        };
        let mut answers = self.finish_all(worker, now, &[report]).await?;
        Ok(answers.pop().unwrap_or(Err(Refused::NotOwner)))
    }

    /// `worker` reports several units at once, each taken as [`Db::finish_with`]
    /// takes it: one transaction per job, which takes the job's row once, writes its
    /// counters once and settles it once, so the reports of units that ended together
    /// cost about what one did (a claim's batch likewise; see [`Db::claim`]). Returns
    /// each report's answer, in their order.
    pub async fn finish_all(
        &self,
        worker: &str,
        now: u64,
        reports: &[Report<'_>],
    ) -> Result<Vec<Result<(), Refused>>, DbError> {
        let mut by_job: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, r) in reports.iter().enumerate() {
            by_job.entry(r.unit.job.as_str()).or_default().push(i);
        }
        let mut taken = vec![false; reports.len()];
        for (job, at) in &by_job {
            let mine: Vec<Report<'_>> = at.iter().map(|&i| reports[i]).collect();
            let got = again(|| self.finish_in(job, worker, now, &mine)).await?;
            for (&i, t) in at.iter().zip(got) {
                taken[i] = t;
            }
        }
        let mut out = Vec::with_capacity(reports.len());
        for (r, taken) in reports.iter().zip(taken) {
            out.push(match taken {
                true => Ok(()),
                false => Err(self.why_refused(worker, r.unit, now).await?),
            });
        }
        Ok(out)
    }

    /// One try of [`Db::finish_all`] for the reports of job `job`'s units: which of
    /// them were taken.
    async fn finish_in(
        &self,
        job: &str,
        worker: &str,
        now: u64,
        reports: &[Report<'_>],
    ) -> Result<Vec<bool>, DbError> {
        let mut tx = self.leases.begin().await?;
        if !lock_job(&mut tx, self.backend, job).await? {
            return Ok(vec![false; reports.len()]);
        }
        let sql = self.report_sql();
        let mut taken = Vec::with_capacity(reports.len());
        let mut delta = Delta::default();
        let mut sums = Sums::default();
        let mut ranges_of = Vec::new();
        for r in reports {
            let Some(row) = report_one(&mut tx, &sql, worker, now, r).await? else {
                taken.push(false);
                continue;
            };
            taken.push(true);
            delta.moved("leased", &row.try_get::<String, _>("state")?, 1);
            let shape = Shape::of(&row)?;
            match r.outcome {
                UnitOutcome::Failed(_) => {
                    if row.try_get::<i64, _>("attempts")? == 1 {
                        delta.retried += 1;
                    }
                }
                UnitOutcome::Done { files, written, .. } => {
                    let moved = Moved {
                        files: shape.bound(*files, 0).0,
                        bytes: uint(row.try_get("moved")?, "moved")?,
                        written: shape.bound_written(&mut tx, job, *written).await?,
                    };
                    sums.add(shape.relay, moved);
                    if let Some(range) = r.range {
                        let seq = r.unit.seq;
                        crate::object_ranges::record_range(&mut tx, job, seq, &row, range).await?;
                    }
                }
            }
            if let Some(file) = shape.range_of.filter(|f| !ranges_of.contains(f)) {
                ranges_of.push(file);
            }
        }
        if taken.contains(&true) {
            let counts = sums.record(&mut tx, job, delta).await?;
            settle(
                &mut tx,
                job,
                Commits::OfFiles(&ranges_of),
                now,
                Some(counts),
            )
            .await?;
            tx.commit().await?;
        }
        Ok(taken)
    }

    /// The statement that takes one report of a unit (see [`report_one`]). What the
    /// unit holds comes back from it, as the statement that takes the write lock (on
    /// SQLite, a transaction that read first cannot always upgrade its lock), and so
    /// does what a done unit counts as moved: what it reports, at most its planned
    /// bytes, and for a block range its whole range. A range done again (its first
    /// attempt's report lost to a restart) finds its blocks written and sends none,
    /// yet the range is in the file all the same: counted by what it reported, a job
    /// ended done short of its bytes. A relay or a stream was never listed: what it
    /// reports (bounded by [`MAX_UNIT_BYTES`] before).
    fn report_sql(&self) -> String {
        format!(
            "UPDATE units SET \
               state = CASE WHEN $4 = 1 THEN 'done' \
                 WHEN attempts + 1 >= max_attempts THEN 'failed' ELSE 'ready' END, \
               attempts = CASE WHEN $4 = 1 THEN attempts ELSE attempts + 1 END, \
               not_before = CASE WHEN $4 = 1 THEN not_before ELSE $6 + {wait} END, \
               moved = CASE WHEN $4 = 0 THEN moved WHEN kind = 'range' THEN bytes \
                 WHEN kind IN ('relay', 'stream') OR $8 < bytes THEN $8 ELSE bytes END, \
               error = $5, lease_owner = NULL, lease_until = NULL, lease_id = NULL, \
               progress = 0, done_by = CASE WHEN $4 = 1 THEN $3 ELSE done_by END \
             WHERE job = $1 AND seq = $2 AND state = 'leased' AND lease_owner = $3 \
               AND lease_until > $6 AND lease_id = $7 \
             RETURNING kind, file_from, file_to, block_from, block_to, bytes, state, attempts, \
               moved",
            wait = self.patience.wait_sql(),
        )
    }

    /// Why `worker` may not act on a unit: its lease ran out, or it is not its own
    /// (another's, nobody's, or named by another id).
    async fn why_refused(
        &self,
        worker: &str,
        unit: &UnitLease,
        now: u64,
    ) -> Result<Refused, DbError> {
        let row = sqlx::query(
            "SELECT state, lease_owner, lease_until, lease_id FROM units \
             WHERE job = $1 AND seq = $2",
        )
        .bind(&unit.job)
        .bind(int(unit.seq))
        .fetch_optional(&self.leases)
        .await?;
        let Some(row) = row else {
            return Ok(Refused::NotOwner);
        };
        let state: String = row.try_get("state")?;
        let owner: Option<String> = row.try_get("lease_owner")?;
        let until: Option<i64> = row.try_get("lease_until")?;
        let id: Option<String> = row.try_get("lease_id")?;
        let expired = until.is_some_and(|u| u <= int(now));
        let same = owner.as_deref() == Some(worker) && id.as_deref() == Some(&unit.lease);
        Ok(match state == "leased" && same && expired {
            true => Refused::Expired,
            false => Refused::NotOwner,
        })
    }

    /// Voids every lease that ran out by `now`: each unit goes back to ready for
    /// another attempt (after its wait), or fails after its last. Returns how many it
    /// voided. One transaction per job, each taking the job's row first.
    pub async fn reap(&self, now: u64) -> Result<u64, DbError> {
        let jobs: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT job FROM units WHERE state = 'leased' AND lease_until <= $1 \
             ORDER BY job",
        )
        .bind(int(now))
        .fetch_all(&self.leases)
        .await?;
        let mut voided = 0;
        for job in &jobs {
            voided += again(|| self.reap_job(job, now)).await?;
        }
        Ok(voided)
    }

    /// [`Db::reap`] for job `job`'s units.
    async fn reap_job(&self, job: &str, now: u64) -> Result<u64, DbError> {
        let mut tx = self.leases.begin().await?;
        lock_job(&mut tx, self.backend, job).await?;
        let sql = format!(
            "UPDATE units SET attempts = attempts + 1, \
               state = CASE WHEN attempts + 1 >= max_attempts THEN 'failed' ELSE 'ready' END, \
               not_before = $2 + {wait}, \
               error = 'lease of ' || lease_owner || ' ran out', \
               lease_owner = NULL, lease_until = NULL, lease_id = NULL, progress = 0 \
             WHERE job = $1 AND state = 'leased' AND lease_until <= $2 \
             RETURNING state, attempts",
            wait = self.patience.wait_sql(),
        );
        let rows = sqlx::query(&sql)
            .bind(job)
            .bind(int(now))
            .fetch_all(&mut *tx)
            .await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let mut delta = Delta::default();
        for r in &rows {
            delta.moved("leased", &r.try_get::<String, _>("state")?, 1);
            if r.try_get::<i64, _>("attempts")? == 1 {
                delta.retried += 1;
            }
        }
        delta.apply(&mut tx, job).await?;
        settle(&mut tx, job, Commits::All, now, None).await?;
        tx.commit().await?;
        Ok(rows.len() as u64)
    }
}

/// What a unit holds, as far as bounding what its worker reports goes.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Whether it is a relay or a stream (its files and bytes were never listed).
    relay: bool,
    /// Whether it is a mirroring job's deletion step, which copies again what changed
    /// since the job's listing (so may write up to the listing's bytes).
    delete: bool,
    /// Most files it may report: those it names (a range none, a commit its one).
    files: u64,
    /// Most bytes it may report: its planned bytes (a commit's are 0).
    bytes: u64,
    /// The file it is a block range of, if it is one.
    range_of: Option<u64>,
}

impl Shape {
    /// The unit of row `r` (its `kind`, `file_from`, `file_to` and `bytes`).
    fn of(r: &AnyRow) -> Result<Shape, DbError> {
        let kind: String = r.try_get("kind")?;
        let get = |col: &str| -> Result<u64, DbError> { uint(r.try_get(col)?, col) };
        let named = get("file_to")?.saturating_sub(get("file_from")?);
        Ok(Shape {
            relay: kind == "relay" || kind == "stream",
            delete: kind == "delete",
            files: match kind.as_str() {
                "range" => 0,
                "commit" => 1,
                _ => named,
            },
            bytes: get("bytes")?,
            range_of: match kind.as_str() {
                "range" => Some(get("file_from")?),
                _ => None,
            },
        })
    }

    /// `files` and `bytes` reported for the unit, each at most what it holds; for a
    /// relay, at most [`MAX_UNIT_FILES`] and [`MAX_UNIT_BYTES`].
    fn bound(self, files: u64, bytes: u64) -> (u64, u64) {
        match self.relay {
            true => (files.min(MAX_UNIT_FILES), bytes.min(MAX_UNIT_BYTES)),
            false => (files.min(self.files), bytes.min(self.bytes)),
        }
    }

    /// The bytes the unit says it wrote, at most what it holds ([`Shape::bound`]);
    /// a deletion step's at most its job's listing (what it may copy again).
    async fn bound_written(
        self,
        tx: &mut Transaction<'static, Any>,
        job: &str,
        written: u64,
    ) -> Result<u64, DbError> {
        if !self.delete {
            return Ok(self.bound(0, written).1);
        }
        let listed: i64 = sqlx::query_scalar("SELECT bytes FROM jobs WHERE id = $1")
            .bind(job)
            .fetch_one(&mut **tx)
            .await?;
        Ok(written.min(uint(listed, "bytes")?))
    }
}

/// Takes report `r` of `worker` on its unit, if it holds the unit's lease unexpired
/// at `now` and names it by its id: the unit as it is now, else `None` (nothing
/// changed). `sql` is [`Db::report_sql`]'s.
async fn report_one(
    tx: &mut Transaction<'static, Any>,
    sql: &str,
    worker: &str,
    now: u64,
    r: &Report<'_>,
) -> Result<Option<AnyRow>, DbError> {
    let (ok, error, bytes) = match r.outcome {
        UnitOutcome::Done { bytes, .. } => (1i64, None, *bytes),
        UnitOutcome::Failed(e) => (0, Some(e.as_str()), 0),
    };
    Ok(sqlx::query(sql)
        .bind(&r.unit.job)
        .bind(int(r.unit.seq))
        .bind(worker)
        .bind(ok)
        .bind(error)
        .bind(int(now))
        .bind(&r.unit.lease)
        .bind(int(bytes.min(MAX_UNIT_BYTES)))
        .fetch_optional(&mut **tx)
        .await?)
}

/// What a done unit moved, as bounded by its [`Shape`].
#[derive(Debug, Clone, Copy)]
struct Moved {
    files: u64,
    bytes: u64,
    written: u64,
}

/// What the done units of one job's reports moved, together: added to its counters
/// in one write.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    files_done: u64,
    bytes_done: u64,
    /// What relays moved: their files were never listed, so it counts towards the
    /// job's totals as well as towards what is done.
    files_listed: u64,
    bytes_listed: u64,
    written: u64,
}

impl Sums {
    /// Adds what one unit moved (`relay`: a relay or a stream), saturating.
    fn add(&mut self, relay: bool, m: Moved) {
        self.files_done = self.files_done.saturating_add(m.files);
        self.bytes_done = self.bytes_done.saturating_add(m.bytes);
        self.written = self.written.saturating_add(m.written);
        if relay {
            self.files_listed = self.files_listed.saturating_add(m.files);
            self.bytes_listed = self.bytes_listed.saturating_add(m.bytes);
        }
    }

    /// Adds these to job `job`'s counters, each saturating, and `delta` to its unit
    /// counts: one write of its row, which returns the counts as they now are.
    async fn record(
        self,
        tx: &mut Transaction<'static, Any>,
        job: &str,
        delta: Delta,
    ) -> Result<Counts, DbError> {
        let sql = format!(
            "UPDATE jobs SET files_done = {}, bytes_done = {}, files = {}, bytes = {}, \
               bytes_written = {}, {} \
             WHERE id = $1 RETURNING {}",
            saturating_add("files_done", "$2"),
            saturating_add("bytes_done", "$3"),
            saturating_add("files", "$4"),
            saturating_add("bytes", "$5"),
            saturating_add("bytes_written", "$6"),
            Delta::set_terms(7),
            Counts::COLUMNS,
        );
        let q = sqlx::query(&sql)
            .bind(job)
            .bind(int(self.files_done))
            .bind(int(self.bytes_done))
            .bind(int(self.files_listed))
            .bind(int(self.bytes_listed))
            .bind(int(self.written));
        let row = delta.bind(q).fetch_one(&mut **tx).await?;
        Counts::from_row(&row)
    }
}

/// A claim's statement (see [`Db::claim_in`]) with its parameters bound.
fn claim_query<'q>(
    sql: &'q str,
    job: &'q str,
    worker: &'q str,
    now: u64,
    ttl: u64,
    max: usize,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    sqlx::query(sql)
        .bind(job)
        .bind(worker)
        .bind(int(now.saturating_add(ttl)))
        .bind(new_lease_id())
        .bind(int(now))
        .bind(int(max as u64))
        .bind(NEVER_TRIED)
}

pub(crate) fn claimed(r: &AnyRow) -> Result<Claimed, DbError> {
    let kind: String = r.try_get("kind")?;
    let get = |col: &str| -> Result<u64, DbError> { uint(r.try_get(col)?, col) };
    let (file_from, file_to) = (get("file_from")?, get("file_to")?);
    let (block_from, block_to) = (get("block_from")?, get("block_to")?);
    let spec = match kind.as_str() {
        "files" => UnitSpec::Files {
            first: file_from,
            end: file_to,
            bytes: get("bytes")?,
        },
        "range" => UnitSpec::Range {
            file: file_from,
            first: block_from,
            end: block_to,
        },
        "commit" => UnitSpec::Commit {
            file: file_from,
            ranges: block_to,
        },
        "relay" => UnitSpec::Relay { operand: file_from },
        "stream" => UnitSpec::Stream { operand: file_from },
        "delete" => UnitSpec::Delete {},
        other => return Err(DbError::Row(format!("unit kind {other:?}"))),
    };
    Ok(Claimed {
        job: r.try_get("job")?,
        seq: get("seq")?,
        spec,
        attempts: u32::try_from(get("attempts")?).unwrap_or(u32::MAX),
        until: get("lease_until")?,
        lease: r
            .try_get::<Option<String>, _>("lease_id")?
            .unwrap_or_default(),
    })
}
