//! The worker routes (`/api/work/...`): claims of units under leases, heartbeats that
//! keep them, and the report on each unit. Only the workers' token (or the
//! operator's) reaches them (see [`crate::auth::Caller::may_call`]); a unit is
//! named by its lease id in every call after its claim. Each unit is handed out, and
//! kept, only while today's identity map still lets its job run.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use hetch_jobdb::leases::{MAX_UNIT_BYTES, MAX_UNIT_FILES};
use hetch_jobdb::{JobRow, RangeRecord, Refused, Report, UnitLease, UnitOutcome, WorkerReport};

use crate::api::{
    ClaimRequest, ClaimedUnit, FinishAll, FinishAllReply, FinishAnswer, FinishReply, FinishRequest,
    HeartbeatReply, HeartbeatRequest, HeldUnit, JobSpec, WorkerAbout, MAX_REPORTS,
};
use crate::auth;
use crate::routes::{bad, fail, internal, parse, Answer, ApiError};
use crate::{now_ms, AppState};

/// Longest worker name.
const MAX_NAME: usize = 200;

/// Job `job`'s spec as a worker is handed it: its reach taken again from today's
/// identity map by the entry its submitter had ([`auth::Grant::of_owner`]), and no
/// webhook (the service's business; its secret goes to no worker). Else one line
/// saying why the job may not run now: its stored spec is unreadable, its
/// submitter's entry is gone (or it was made before the service had a map), or the
/// entry no longer covers what it touches.
pub(crate) fn runnable_spec(state: &AppState, job: &JobRow) -> Result<JobSpec, String> {
    let mut spec = serde_json::from_str::<JobSpec>(&job.spec)
        .map_err(|e| format!("stored job spec unreadable: {e}"))?;
    let grant = auth::Grant::of_owner(state, &job.submitted_by, spec.access.as_ref())
        .map_err(|why| why.says(&format!("job {}", job.id)))?;
    spec.access = match grant {
        auth::Grant::All => None,
        auth::Grant::Only(access) => Some((*access).clone()),
    };
    if let Some(access) = &spec.access {
        access.check_spec(&spec)?;
    }
    spec.webhook = None;
    Ok(spec)
}

pub(crate) fn check_worker(name: &str) -> Result<(), ApiError> {
    // Characters, not bytes: as the OpenAPI document's maxLength counts.
    let n = name.chars().count();
    if n == 0 || n > MAX_NAME || name.chars().any(char::is_control) {
        return Err(bad(format!(
            "worker name must be 1 to {MAX_NAME} printable characters"
        )));
    }
    Ok(())
}

/// Unit `seq` of job `job` under lease id `lease`, as a worker names it; a 400 when
/// the id is longer than any the service gives (it is only compared, never stored).
pub(crate) fn unit_lease(job: &str, seq: u64, lease: &str) -> Result<UnitLease, ApiError> {
    if lease.is_empty() || lease.len() > hetch_jobdb::MAX_LEASE_ID {
        let max = hetch_jobdb::MAX_LEASE_ID;
        return Err(bad(format!(
            "lease: the id the claim gave (1 to {max} bytes)"
        )));
    }
    Ok(UnitLease {
        job: job.to_string(),
        seq,
        lease: lease.to_string(),
    })
}

/// Records that worker `name` called, with what it says of itself and the progress
/// of its units `(job, seq, bytes)`. Done after the call's lease work and never
/// failing it: this is only shown, so neither a bad report nor the database's
/// trouble recording it may cost a worker its leases (it is logged instead).
async fn note_worker(
    state: &AppState,
    name: &str,
    about: Option<&WorkerAbout>,
    progress: &[(String, u64, u64)],
) {
    // Out of bounds, what it says is dropped whole.
    let about = about
        .filter(|a| a.check().is_ok())
        .cloned()
        .unwrap_or_default();
    let report = WorkerReport {
        name: name.to_string(),
        host: about.host.unwrap_or_default(),
        capacity: about.capacity.map_or(0, u64::from),
        moved: about.moved,
        checks: about.checks.and_then(|c| serde_json::to_string(&c).ok()),
    };
    let recorded = match state.db.worker_seen(&report, now_ms()).await {
        Ok(()) => state.db.unit_progress(name, progress).await,
        Err(e) => Err(e),
    };
    if let Err(e) = recorded {
        _ = writeln!(
            std::io::stderr(),
            "hetch service: recording what worker {name:?} reports: {e}"
        );
    }
}

/// A job's row, and its spec as today's map lets it run (or why it may not).
type Checked = (JobRow, Result<JobSpec, String>);

pub(crate) async fn claim(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let req: ClaimRequest = parse(&body)?;
    check_worker(&req.worker)?;
    if !(1..=64).contains(&req.max) {
        return Err(bad("max must be 1 to 64"));
    }
    let got = state
        .db
        .claim(&req.worker, now_ms(), state.lease_ms, req.max as usize)
        .await
        .map_err(internal)?;
    // An idle worker asks several times a second: it is recorded when it says what
    // it is (every few seconds), not at every claim.
    if req.about.is_some() {
        note_worker(&state, &req.worker, req.about.as_ref(), &[]).await;
    }
    let mut out = Vec::with_capacity(got.len());
    // A claim's units are mostly of one job: its row is read, and its spec checked
    // against today's map, once per claim.
    let mut jobs: HashMap<String, Option<Checked>> = HashMap::new();
    for c in got {
        if !jobs.contains_key(&c.job) {
            let row = state.db.job(&c.job).await.map_err(internal)?;
            let checked = row.map(|job| {
                let spec = runnable_spec(&state, &job);
                (job, spec)
            });
            jobs.insert(c.job.clone(), checked);
        }
        // Deleted since (cancelled, then purged): its unit has nothing to do.
        let Some((job, spec)) = &jobs[&c.job] else {
            continue;
        };
        let spec = match spec.clone() {
            Ok(spec) => spec,
            // A job that may not run (its spec unreadable, its submitter's reach gone)
            // fails its own unit, not every claim: the unit is left out, its attempt
            // spent with the reason, and the rest are handed out.
            Err(why) => {
                let unit = c.held();
                let failed = UnitOutcome::Failed(why);
                let took = state.db.finish(&req.worker, &unit, now_ms(), &failed);
                took.await.map_err(internal)?.ok();
                continue;
            }
        };
        out.push(ClaimedUnit {
            rate_limit: rate_share(job.rate_limit, job.units.leased),
            job: c.job,
            seq: c.seq,
            unit: c.spec,
            spec,
            until: c.until,
            lease: c.lease,
            attempts: c.attempts,
            lease_ms: state.lease_ms,
        });
    }
    Ok(Json(out).into_response())
}

/// A unit's share of a job's rate limit `rate` (0: none): split evenly among the
/// job's `held` units (held now, whichever workers hold them, as its row counts them),
/// so that the job as a whole keeps to its limit (once heartbeats have brought every
/// share up to date).
fn rate_share(rate: u64, held: u64) -> u64 {
    match rate {
        0 => 0,
        _ => (rate / held.max(1)).max(1),
    }
}

pub(crate) async fn heartbeat(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let req: HeartbeatRequest = parse(&body)?;
    check_worker(&req.worker)?;
    let units = req.units.as_deref().unwrap_or_default();
    if units.len() > 64 {
        return Err(bad("units: at most 64"));
    }
    let mut keys = units
        .iter()
        .map(|u| unit_lease(&u.job, u.seq, &u.lease))
        .collect::<Result<Vec<_>, _>>()?;
    // Each job once: a unit of a job that may no longer run (its submitter's reach
    // gone from the identity map since, or narrowed past what it touches) is not
    // extended, so its worker stops it and its next claim fails it with the reason; a
    // watched source that runs for days is cut off too.
    let mut rates = BTreeMap::new();
    for k in &keys {
        if !rates.contains_key(&k.job) {
            let row = state.db.job(&k.job).await.map_err(internal)?;
            // Its rate limit and its units held now, for each unit's share.
            let rate = match row {
                Some(row) if runnable_spec(&state, &row).is_err() => None,
                Some(row) => Some((row.rate_limit, row.units.leased)),
                None => Some((0, 0)),
            };
            rates.insert(k.job.clone(), rate);
        }
    }
    keys.retain(|k| rates.get(&k.job).is_some_and(Option::is_some));
    let held = state
        .db
        .heartbeat_units(&req.worker, now_ms(), state.lease_ms, &keys)
        .await
        .map_err(internal)?;
    // Progress and lag only of the units whose lease was just shown to be the
    // worker's: a report about another's unit changes nothing.
    let held_set: BTreeSet<(&str, u64)> =
        held.iter().map(|(job, seq)| (job.as_str(), *seq)).collect();
    let mine = || {
        units
            .iter()
            .filter(|u| held_set.contains(&(u.job.as_str(), u.seq)))
    };
    let progress: Vec<(String, u64, u64)> = mine()
        .filter_map(|u| Some((u.job.clone(), u.seq, u.bytes?)))
        .collect();
    note_worker(&state, &req.worker, req.about.as_ref(), &progress).await;
    let lags: Vec<(String, u64, u64, u64)> = mine()
        .filter_map(|u| {
            let l = u.lag?.bounded();
            Some((u.job.clone(), u.seq, l.p50_ms, l.p99_ms))
        })
        .collect();
    if let Err(e) = state.db.unit_lag(&req.worker, &lags).await {
        // Only shown: never a reason to refuse the heartbeat.
        _ = writeln!(
            std::io::stderr(),
            "hetch service: recording the lag worker {:?} reports: {e}",
            req.worker
        );
    }
    // Each held unit's share of its job's rate, as it is now.
    let mut shares = BTreeMap::new();
    for (job, _) in &held {
        let (rate, leased) = rates.get(job).copied().flatten().unwrap_or((0, 0));
        shares.insert(job.clone(), rate_share(rate, leased));
    }
    let held = held
        .into_iter()
        .map(|(job, seq)| HeldUnit {
            rate_limit: shares.get(&job).copied().unwrap_or(0),
            job,
            seq,
        })
        .collect();
    Ok(Json(HeartbeatReply { held }).into_response())
}

/// A finish report's numbers, within what any unit may move: one beyond is refused
/// (400, naming the field), since no worker moves that much in one unit. Within them,
/// the database takes each as at most what the unit holds (see
/// [`hetch_jobdb::Db::finish`]): a file may have grown since it was listed.
fn check_moved(req: &FinishRequest) -> Result<(), ApiError> {
    if req.files > MAX_UNIT_FILES {
        return Err(bad(format!("files: at most {MAX_UNIT_FILES} per unit")));
    }
    if req.bytes > MAX_UNIT_BYTES {
        return Err(bad(format!("bytes: at most {MAX_UNIT_BYTES} per unit")));
    }
    if req.written.is_some_and(|w| w > MAX_UNIT_BYTES) {
        return Err(bad(format!("written: at most {MAX_UNIT_BYTES} per unit")));
    }
    Ok(())
}

/// A worker's report as the database takes it: its unit, how it went, and what a
/// done range reported of its parts (checked against the unit before anything is
/// stored); a 400 naming the field when it is out of bounds.
async fn checked_report(
    state: &AppState,
    req: &FinishRequest,
) -> Result<(UnitLease, UnitOutcome, Option<RangeRecord>), ApiError> {
    check_worker(&req.worker)?;
    check_moved(req)?;
    let unit = unit_lease(&req.job, req.seq, &req.lease)?;
    let outcome = match &req.error {
        None => UnitOutcome::Done {
            files: req.files,
            bytes: req.bytes,
            // A worker that does not say what it wrote (an older one) wrote it all.
            written: req.written.unwrap_or(req.bytes),
        },
        // One line, bounded: it is shown to users.
        Some(e) => UnitOutcome::Failed(
            e.lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(1000)
                .collect(),
        ),
    };
    let range = match (&req.range, &outcome) {
        (Some(r), UnitOutcome::Done { .. }) => {
            crate::object_ranges::checked_report(state, req, r).await?
        }
        _ => None,
    };
    Ok((unit, outcome, range))
}

/// Why a report of unit `seq` of job `job` was not taken, as its worker is told.
fn refusal(job: &str, seq: u64, why: Refused) -> String {
    format!("unit {seq} of job {job} is not yours: {why:?}")
}

pub(crate) async fn finish(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let req: FinishRequest = parse(&body)?;
    let (unit, outcome, range) = checked_report(&state, &req).await?;
    let r = state
        .db
        .finish_with(&req.worker, &unit, now_ms(), &outcome, range.as_ref())
        .await
        .map_err(internal)?;
    match r {
        Ok(()) => Ok(Json(FinishReply {}).into_response()),
        Err(why) => Err(fail(StatusCode::CONFLICT, refusal(&req.job, req.seq, why))),
    }
}

/// Several reports of one worker at once ([`FinishAll`]): each checked as
/// [`finish`] checks it (one out of bounds refuses the call, nothing stored), then
/// taken together, one transaction per job; each answered taken or refused.
pub(crate) async fn finish_all(State(state): State<Arc<AppState>>, body: Bytes) -> Answer {
    let req: FinishAll = parse(&body)?;
    let Some(first) = req.reports.first() else {
        return Err(bad(format!("reports: 1 to {MAX_REPORTS}")));
    };
    if req.reports.len() > MAX_REPORTS {
        return Err(bad(format!("reports: 1 to {MAX_REPORTS}")));
    }
    let worker = first.worker.as_str();
    if req.reports.iter().any(|r| r.worker != worker) {
        return Err(bad("reports: all of one worker"));
    }
    let mut checked = Vec::with_capacity(req.reports.len());
    for r in &req.reports {
        checked.push(checked_report(&state, r).await?);
    }
    let reports: Vec<Report<'_>> = checked
        .iter()
        .map(|(unit, outcome, range)| Report {
            unit,
            outcome,
            range: range.as_ref(),
        })
        .collect();
    let answers = state
        .db
        .finish_all(worker, now_ms(), &reports)
        .await
        .map_err(internal)?;
    let answers = req
        .reports
        .iter()
        .zip(answers)
        .map(|(r, a)| FinishAnswer {
            job: r.job.clone(),
            seq: r.seq,
            refused: a.err().map(|why| refusal(&r.job, r.seq, why)),
        })
        .collect();
    Ok(Json(FinishAllReply { answers }).into_response())
}
