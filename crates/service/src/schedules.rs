//! Recurring mirrors: the routes that make, show, pause, resume and delete schedules
//! (the same access rules as jobs: a user sees and touches only their own, the
//! service token all), and the loop that submits each due run.
//!
//! Every instance runs the loop once a second; a due time is taken by one of them only
//! ([`hetch_jobdb::Db::claim_schedule`]). A run whose previous run has not ended is
//! skipped and recorded as such, with why, rather than started beside it: two runs of
//! one mirror at once would race on the same destination.
//!
//! Each run reaches what its owner's entry in the identity map grants at that time
//! ([`auth::Grant::of_owner`]), not what it granted when the schedule was made; a run
//! whose entry is gone is skipped, saying so.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use hetch_jobdb::{NewSchedule, Recurrence, Run, ScheduleRow};
use hetch_service_api::schedule::{When, SHOWN_RUNS};
use hetch_service_api::{JobSpec, RunView, ScheduleSpec, ScheduleView, WebhookView};

use crate::auth::{self, Caller};
use crate::routes::{
    bad, check_sources, checked_spec, create_job, fail, granted, internal, parse, Answer,
};
use crate::{now_ms, AppState};

/// Schedules one listing shows.
const MAX_LIST: u64 = 1000;
/// Runs each schedule of a listing shows (a schedule's own view shows
/// [`SHOWN_RUNS`]).
const LISTED_RUNS: u64 = 5;
/// Due schedules one instance takes per tick.
const PER_TICK: u64 = 64;

/// The schedules' routes.
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/schedules", post(create).get(list))
        .route("/api/schedules/{id}", get(show).delete(delete))
        .route("/api/schedules/{id}/pause", post(pause))
        .route("/api/schedules/{id}/resume", post(resume))
}

type By = axum::Extension<Caller>;

async fn create(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    axum::Extension(grant): axum::Extension<auth::Grant>,
    body: Bytes,
) -> Answer {
    let spec: ScheduleSpec = parse(&body)?;
    let when = spec.when().map_err(bad)?;
    when.at_least_apart(state.min_schedule_ms).map_err(bad)?;
    let job = checked_spec(&state, &grant, spec.job)?;
    let now = now_ms();
    let Some(first) = when.first(now) else {
        return Err(bad("cron: never due"));
    };
    let s = NewSchedule {
        id: crate::routes::new_id(),
        owner: caller.name().to_string(),
        spec: serde_json::to_string(&job).map_err(internal)?,
        when: match when {
            When::Every(ms) => Recurrence::Every(ms),
            When::Cron(text, _) => Recurrence::Cron(text),
        },
        next_at: first,
    };
    let max = state.max_schedules;
    if !state
        .db
        .create_schedule(&s, max, now)
        .await
        .map_err(internal)?
    {
        return Err(fail(
            StatusCode::CONFLICT,
            format!(
                "{} has {max} schedules already, the most one may have: delete one first",
                s.owner
            ),
        ));
    }
    let view = view(&state, &caller, &s.id, SHOWN_RUNS).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

async fn list(State(state): State<Arc<AppState>>, axum::Extension(caller): By) -> Answer {
    // A worker never gets here (see `Caller::may_call`): it would see none.
    let mine = match &caller {
        Caller::Operator => None,
        other => Some(other.name()),
    };
    let rows = state.db.schedules(mine, MAX_LIST).await.map_err(internal)?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(schedule_view(&state, row, LISTED_RUNS).await?);
    }
    Ok(Json(out).into_response())
}

async fn show(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    Path(id): Path<String>,
) -> Answer {
    Ok(Json(view(&state, &caller, &id, SHOWN_RUNS).await?).into_response())
}

async fn delete(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    Path(id): Path<String>,
) -> Answer {
    let shown = view(&state, &caller, &id, SHOWN_RUNS).await?;
    state.db.delete_schedule(&id).await.map_err(internal)?;
    Ok(Json(shown).into_response())
}

async fn pause(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    Path(id): Path<String>,
) -> Answer {
    view(&state, &caller, &id, 0).await?;
    state
        .db
        .pause_schedule(&id, true, None)
        .await
        .map_err(internal)?;
    show(State(state), axum::Extension(caller), Path(id)).await
}

/// Resumes a schedule: its next run is the first due time from now (those missed
/// while it was paused are not run; an interval runs at once), and not before the
/// minimum interval has passed since its last run.
async fn resume(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    Path(id): Path<String>,
) -> Answer {
    let row = row(&state, &caller, &id).await?;
    // No sooner than the minimum interval after its last run: pausing and resuming
    // is no way around it.
    let last = state.db.runs(&id, 1).await.map_err(internal)?;
    let floor = last
        .first()
        .map_or(0, |r| r.due.saturating_add(state.min_schedule_ms));
    let next = when_of(&row)
        .map_err(internal)?
        .first(now_ms().max(floor.saturating_sub(1)))
        .ok_or_else(|| internal("cron: never due"))?
        .max(floor);
    state
        .db
        .pause_schedule(&id, false, Some(next))
        .await
        .map_err(internal)?;
    show(State(state), axum::Extension(caller), Path(id)).await
}

/// Schedule `id` if `caller` may see it; a 404 otherwise (another's schedule is not
/// told apart from none).
async fn row(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<ScheduleRow, crate::routes::ApiError> {
    match state.db.schedule(id).await.map_err(internal)? {
        Some(row) if caller.may_see(&row.owner) => Ok(row),
        _ => Err(fail(StatusCode::NOT_FOUND, format!("no schedule {id}"))),
    }
}

async fn view(
    state: &AppState,
    caller: &Caller,
    id: &str,
    runs: u64,
) -> Result<ScheduleView, crate::routes::ApiError> {
    let row = row(state, caller, id).await?;
    schedule_view(state, row, runs).await
}

/// `row` as the API shows it, with its newest `runs` runs.
async fn schedule_view(
    state: &AppState,
    row: ScheduleRow,
    runs: u64,
) -> Result<ScheduleView, crate::routes::ApiError> {
    let mut shown = Vec::new();
    for r in state.db.runs(&row.id, runs).await.map_err(internal)? {
        let job = match &r.job {
            Some(j) => state.db.job(j).await.map_err(internal)?,
            None => None,
        };
        shown.push(RunView {
            due: r.due,
            job: r.job,
            skipped: r.skipped,
            state: job.as_ref().map(|j| j.state.as_str().to_string()),
            started: job.as_ref().and_then(|j| j.started),
            finished: job.as_ref().and_then(|j| j.finished),
            files_done: job.as_ref().map_or(0, |j| j.files_done),
            bytes_done: job.as_ref().map_or(0, |j| j.bytes_done),
            bytes_written: job.as_ref().map_or(0, |j| j.bytes_written),
            error: job.as_ref().and_then(|j| j.error_shown()),
        });
    }
    let (every_ms, cron) = match row.when {
        Recurrence::Every(ms) => (Some(ms), None),
        Recurrence::Cron(c) => (None, Some(c)),
    };
    // A spec that cannot be read is shown as the default (no sources), as a job's.
    let mut job: JobSpec = serde_json::from_str(&row.spec).unwrap_or_default();
    // The secret never leaves the service: the view says only that one is set.
    let webhook = job.webhook.take().map(|hook| WebhookView {
        url: hook.url,
        secret_set: true,
        delivery: None,
    });
    Ok(ScheduleView {
        id: row.id,
        owner: row.owner,
        job,
        webhook,
        every_ms,
        cron,
        next_at: row.next_at,
        paused: row.paused,
        created: row.created,
        runs: shown,
    })
}

/// When stored schedule `row` runs.
fn when_of(row: &ScheduleRow) -> Result<When, String> {
    match &row.when {
        Recurrence::Every(0) => Err(format!("schedule {}: every_ms is 0", row.id)),
        Recurrence::Every(ms) => Ok(When::Every(*ms)),
        Recurrence::Cron(c) => Ok(When::Cron(c.clone(), c.parse()?)),
    }
}

/// Submits the due runs of schedules once a second, until the process ends.
pub(crate) async fn run(state: Arc<AppState>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = run_due(&state).await {
            _ = writeln!(std::io::stderr(), "hetch service: schedules: {e}");
        }
    }
}

/// Takes each due schedule (unless another instance was first) and runs it, or
/// records why not.
async fn run_due(state: &AppState) -> Result<(), hetch_jobdb::DbError> {
    let now = now_ms();
    for row in state.db.due_schedules(now, PER_TICK).await? {
        // A stored expression that no longer parses (damage) is put a year off, not
        // looked at again every second.
        let when = when_of(&row);
        // No sooner than the minimum interval after this due time: a schedule made
        // before the operator raised it is held to it too.
        let floor = row.next_at.saturating_add(state.min_schedule_ms);
        let next = match &when {
            Ok(w) => w.after(row.next_at, now.max(floor.saturating_sub(1))),
            Err(_) => None,
        }
        .unwrap_or(now.saturating_add(hetch_service_api::schedule::MAX_EVERY_MS));
        if !state.db.claim_schedule(&row.id, row.next_at, next).await? {
            continue;
        }
        let run = match (when, row.last_state) {
            (Err(e), _) => Run::Skipped(e),
            (Ok(_), Some(st)) if !st.is_final() => Run::Skipped(format!(
                "the previous run, job {}, was still {}",
                row.last_job.as_deref().unwrap_or("?"),
                st.as_str()
            )),
            (Ok(_), _) => submit(state, &row).await,
        };
        state.db.record_run(&row.id, row.next_at, &run).await?;
    }
    Ok(())
}

/// Submits a run of `row`, as its owner; or why it could not.
async fn submit(state: &AppState, row: &ScheduleRow) -> Run {
    let spec: JobSpec = match serde_json::from_str(&row.spec) {
        Ok(s) => s,
        Err(e) => return Run::Skipped(format!("stored job spec unreadable: {e}")),
    };
    // Its reach is the owner's by the identity map as it is now, found by the entry
    // recorded when it was made: the operator may have narrowed or removed it since.
    let grant = match auth::Grant::of_owner(state, &row.owner, spec.access.as_ref()) {
        Ok(g) => g,
        Err(why) => return Run::Skipped(format!("not submitted: {}", why.says("the schedule"))),
    };
    // Checked when the schedule was made; the sources may have gone since.
    let checked = granted(state, &grant, spec).and_then(|spec| {
        check_sources(state, &spec)?;
        Ok(spec)
    });
    match checked {
        Ok(spec) => match create_job(state, &row.owner, spec).await {
            Ok(id) => Run::Job(id),
            Err(e) => Run::Skipped(format!("not submitted: {}", e.message())),
        },
        Err(e) => Run::Skipped(format!("not submitted: {}", e.message())),
    }
}
