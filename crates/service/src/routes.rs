//! The API's handlers. Every answer is JSON; every error is `{"error": "one line"}`
//! with a 4xx or 5xx status; every route but the OpenAPI document needs the token.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::api::{ErrorBody, FileRow, FilesQuery, JobSpec, JobView, ListQuery, UnitsView};
use crate::auth::{self, Caller, Denied};
use crate::{now_ms, AppState};
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hetch_jobdb::{JobRow, JobState, NewJob, Retry};
use hetch_service_api::WebhookView;

/// Largest request body: room for a job of the most sources at the longest paths the
/// document allows (1000 of 4096 bytes), so that such a job is answered, not cut off
/// while it is sent. Read only from callers that authenticated.
pub(crate) const MAX_BODY: usize = 8 << 20;
/// Most jobs one listing returns.
const MAX_LIST: u64 = 1000;
pub use crate::api::MAX_FILES;

/// The API's routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/api/jobs", post(submit).get(list))
        .route("/api/jobs/{id}", get(show))
        .route("/api/jobs/{id}/cancel", post(cancel))
        .route("/api/jobs/{id}/retry", post(retry))
        .route("/api/jobs/{id}/files", get(files))
        .merge(crate::schedules::router())
        .route("/api/work/claim", post(crate::work::claim))
        .route("/api/work/heartbeat", post(crate::work::heartbeat))
        .route("/api/work/finish", post(crate::work::finish))
        .route("/api/work/finish-all", post(crate::work::finish_all))
        .route("/api/work/upload", post(crate::object_ranges::upload))
        .route("/api/work/ranges", post(crate::object_ranges::ranges))
        .route("/metrics", get(crate::metrics::scrape))
        .merge(crate::web::live::router())
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    Router::new()
        .route(
            "/api/openapi.json",
            get(|| async { Json(crate::openapi::document()) }),
        )
        .merge(api)
        .merge(crate::web::pages::router())
        .fallback(|| async { fail(StatusCode::NOT_FOUND, "no such route").into_response() })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(crate::web::security_headers))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::metrics::count,
        ))
        .with_state(state)
}

/// An error answer: a status and one line.
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let field = crate::api::field_of(&self.1)
            .filter(|_| self.0 == StatusCode::BAD_REQUEST)
            .map(str::to_string);
        let body = ErrorBody {
            error: self.1,
            field,
        };
        (self.0, Json(body)).into_response()
    }
}

impl ApiError {
    /// Its answer, asking the client to close the connection after it.
    pub(crate) fn into_response_closing(self) -> Response {
        let mut r = self.into_response();
        r.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        r
    }

    /// Its line.
    pub(crate) fn message(&self) -> &str {
        &self.1
    }
}

/// What a handler answers.
pub(crate) type Answer = Result<Response, ApiError>;

pub(crate) fn fail(status: StatusCode, error: impl Into<String>) -> ApiError {
    ApiError(status, error.into())
}

pub(crate) fn bad(error: impl Into<String>) -> ApiError {
    fail(StatusCode::BAD_REQUEST, error)
}

pub(crate) fn forbidden(error: impl Into<String>) -> ApiError {
    fail(StatusCode::FORBIDDEN, error)
}

pub(crate) fn internal(e: impl std::fmt::Display) -> ApiError {
    fail(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

async fn authenticate(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: Request,
    next: Next,
) -> Response {
    // The route as the router names it (`/api/jobs/{id}`): what a caller may call.
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let bearer = req.headers().get(header::AUTHORIZATION);
    // A browser: its session cookie instead of a token.
    if bearer.is_none() {
        match crate::web::session_of(&state, req.headers()) {
            Some(Ok(session)) => {
                if let Err(why) = crate::web::may_act(req.method(), req.headers(), &session) {
                    return fail(StatusCode::FORBIDDEN, why).into_response();
                }
                // A browser is never a worker, whoever logged in.
                let work = route.starts_with("/api/work/");
                if work || !session.caller.may_call(req.method(), &route) {
                    return fail(StatusCode::FORBIDDEN, "the worker routes take a token")
                        .into_response();
                }
                let grant = match &session.caller {
                    Caller::Operator => Ok(auth::Grant::All),
                    // No login makes a worker's session (see `web::pages::log_in`).
                    Caller::Worker => Err("a worker's session: log in again".to_string()),
                    Caller::User(_) => auth::Grant::of_entry(&state, session.entry.as_deref())
                        .map_err(|why| format!("{}: log in again", why.says("this session"))),
                };
                let grant = match grant {
                    Ok(g) => g,
                    Err(why) => return fail(StatusCode::UNAUTHORIZED, why).into_response(),
                };
                authenticated(&req);
                let caller = session.caller.clone();
                req.extensions_mut().insert(grant);
                req.extensions_mut().insert(caller.clone());
                req.extensions_mut()
                    .insert(auth::Ends(Some(session.expires)));
                req.extensions_mut().insert(session);
                return fairly(&state, &caller, req, next).await;
            }
            Some(Err(why)) => return fail(StatusCode::UNAUTHORIZED, why).into_response(),
            None => {}
        }
    }
    let header = bearer.map(|v| v.as_bytes());
    let (status, error, extra) = match auth::check(&state, peer.ip(), header).await {
        Ok((caller, ends, grant)) => {
            authenticated(&req);
            req.extensions_mut().insert(ends);
            req.extensions_mut().insert(grant);
            if !caller.may_call(req.method(), &route) {
                let why = match caller {
                    Caller::Worker => {
                        "the workers' token opens the worker routes and a job's listing only"
                    }
                    _ => "the worker routes take the workers' token",
                };
                return fail(StatusCode::FORBIDDEN, why).into_response();
            }
            if caller == Caller::Operator && route.starts_with("/api/work/") {
                operators_token_on_work_routes(&state);
            }
            req.extensions_mut().insert(caller.clone());
            return fairly(&state, &caller, req, next).await;
        }
        Err(Denied::Unauthenticated(why)) => (
            StatusCode::UNAUTHORIZED,
            why,
            (header::WWW_AUTHENTICATE, "Bearer".to_string()),
        ),
        Err(Denied::Throttled(secs)) => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("too many wrong tokens; retry in {secs} s"),
            (header::RETRY_AFTER, secs.to_string()),
        ),
        Err(Denied::NotMapped(why)) => return fail(StatusCode::FORBIDDEN, why).into_response(),
    };
    let mut r = fail(status, error).into_response();
    if let Ok(v) = extra.1.parse() {
        r.headers_mut().insert(extra.0, v);
    }
    r
}

/// Runs `req` of `caller` if the caller's share of the connections and of the request
/// rate allow (see [`crate::fair`] and [`crate::rate`]); else a 429 or 503 saying when
/// to come back.
async fn fairly(state: &AppState, caller: &Caller, req: Request, next: Next) -> Response {
    if let Caller::User(name) = caller {
        if let Err(secs) = state.rates.take(name) {
            state.metrics.rate_limited();
            let why = format!("too many requests; retry in {secs} s");
            let mut r = fail(StatusCode::TOO_MANY_REQUESTS, why).into_response();
            if let Ok(v) = secs.to_string().parse() {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            return r;
        }
    }
    // Requests built without a connection (in-process tests) hold no share.
    let Some(conn) = req.extensions().get::<crate::listen::ConnAuth>().cloned() else {
        return next.run(req).await;
    };
    match state.conns.admit(conn.conn(), caller) {
        Ok(in_flight) => in_flight.hold_until_sent(next.run(req).await),
        Err(refused) => refused.response(),
    }
}

/// Says once per process that a worker calls with the operator's token: it works (as
/// it did before workers had a token of their own), but that worker's host, and each
/// unit's child process, then holds every power over the service.
fn operators_token_on_work_routes(state: &AppState) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        _ = writeln!(
            std::io::stderr(),
            "hetch service: warning: a worker calls with the service's own token; give \
             workers {} instead",
            state.worker_token_path.display()
        );
    }
}

/// `req` was let in: its connection is no longer counted among the unauthenticated
/// (see [`crate::listen`]).
fn authenticated(req: &Request) {
    if let Some(conn) = req.extensions().get::<crate::listen::ConnAuth>() {
        conn.authenticated();
    }
}

/// A JSON body, or a 400 naming what is wrong with it (axum's own rejection is not
/// JSON).
pub(crate) fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let mut v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("request body: {e}")))?;
    integral(&mut v);
    serde_json::from_value(v).map_err(|e| bad(format!("request body: {e}")))
}

/// `v` with every number that has no fraction (`34.0`) as an integer: JSON Schema, and
/// so the OpenAPI document, counts it as one, and the request types take integers.
fn integral(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Number(n) => {
            let whole = n.as_f64().filter(|f| f.fract() == 0.0 && n.is_f64());
            // In u64 or i64's range only: beyond, it stays a number no field takes.
            if let Some(f) = whole.filter(|f| (-(2f64.powi(63))..2f64.powi(64)).contains(f)) {
                *n = match f < 0.0 {
                    true => (f as i64).into(),
                    false => (f as u64).into(),
                };
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral),
        Value::Object(fields) => fields.values_mut().for_each(integral),
        _ => {}
    }
}

async fn submit(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(grant): axum::Extension<auth::Grant>,
    body: Bytes,
) -> Answer {
    let spec = checked_spec(&state, &grant, parse(&body)?)?;
    let id = create_job(&state, caller.name(), spec).await?;
    Ok((StatusCode::CREATED, Json(view(&state, &caller, &id).await?)).into_response())
}

/// `spec` if it may be run for a caller granted `grant` (what it may touch set from
/// the grant, never from the client), or the 400 or 403 saying why not.
pub(crate) fn checked_spec(
    state: &AppState,
    grant: &auth::Grant,
    spec: JobSpec,
) -> Result<JobSpec, ApiError> {
    spec.check().map_err(bad)?;
    if let Some(hook) = spec
        .webhook
        .as_ref()
        .filter(|_| !state.webhooks.allow_private)
    {
        crate::notify::address::check_submitted(&hook.url).map_err(bad)?;
    }
    let spec = granted(state, grant, spec)?;
    check_sources(state, &spec)?;
    Ok(spec)
}

/// `spec` with what it may touch set from `grant` (the service's to say, never the
/// client's), or the 403 saying what of it lies outside: at submission, and again
/// from today's identity map at each run of a schedule and each retry.
pub(crate) fn granted(
    state: &AppState,
    grant: &auth::Grant,
    mut spec: JobSpec,
) -> Result<JobSpec, ApiError> {
    spec.access = match grant {
        auth::Grant::All => None,
        auth::Grant::Only(access) => Some((**access).clone()),
    };
    if let Some(access) = &spec.access {
        access.check_spec(&spec).map_err(forbidden)?;
        crate::planning::check_paths(&state.root, &spec).map_err(forbidden)?;
    }
    Ok(spec)
}

/// Whether `spec`'s sources exist below the root and it does not copy into itself: a
/// 400 naming what is wrong if not. Checked at submission, and again before each run
/// of a schedule (a source may have gone since).
pub(crate) fn check_sources(state: &AppState, spec: &JobSpec) -> Result<(), ApiError> {
    // Each source must exist below the root, reached without leaving it (a copy
    // between two servers has its sources on the source server, which checks them).
    let local_sources = match spec.is_relay() {
        true => &[][..],
        false => &spec.sources[..],
    };
    for s in local_sources {
        match std::fs::canonicalize(state.root.join(s)) {
            Ok(real) if real.starts_with(&state.root) => {}
            Ok(_) => {
                return Err(bad(format!(
                    "source {s:?} leads outside the service's root"
                )))
            }
            Err(e) => return Err(bad(format!("source {s:?}: {e}"))),
        }
    }
    // Workers would nest copies of the tree inside the tree they read.
    if let Some(why) = spec.copies_into_itself(&state.root) {
        return Err(bad(why));
    }
    Ok(())
}

/// Records job `spec` (checked) submitted by `owner` and starts planning it; its id.
pub(crate) async fn create_job(
    state: &AppState,
    owner: &str,
    spec: JobSpec,
) -> Result<String, ApiError> {
    let id = new_id();
    let job = NewJob {
        id: id.clone(),
        submitted_by: owner.to_string(),
        spec: serde_json::to_string(&spec).map_err(internal)?,
        priority: spec.priority,
        rate_limit: spec.rate_limit,
    };
    let now = now_ms();
    let lease = state
        .db
        .create_job(&job, &state.instance, now + state.lease_ms, now)
        .await
        .map_err(internal)?;
    if spec.webhook.is_some() {
        state.db.arm_webhook(&id, now).await.map_err(internal)?;
    }
    crate::start_planning(state, lease, spec);
    Ok(id)
}

/// A new job (or schedule) id: 16 hex digits from the system's random source.
pub(crate) fn new_id() -> String {
    hex::encode(rand::random::<[u8; 8]>())
}

async fn list(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): axum::Extension<Caller>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Answer {
    let Ok(Query(q)) = q else {
        return Err(bad("query: expected state=STATE and limit=N only"));
    };
    let filter = match q.state.as_deref() {
        None => None,
        Some(name) => {
            Some(JobState::parse(name).ok_or_else(|| bad(format!("no job state {name:?}")))?)
        }
    };
    let limit = q.limit.unwrap_or(100).min(MAX_LIST);
    // A worker never gets here (see `Caller::may_call`); if it did, it would see
    // only jobs submitted by "worker": none.
    let mine = match &caller {
        Caller::Operator => None,
        other => Some(other.name()),
    };
    let rows = state.db.jobs(filter, mine, limit).await.map_err(internal)?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(job_view(&state, row).await?);
    }
    Ok(Json(out).into_response())
}

/// The caller as the handlers receive it.
type By = axum::Extension<Caller>;

async fn show(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    Path(id): Path<String>,
) -> Answer {
    Ok(Json(view(&state, &caller, &id).await?).into_response())
}

async fn cancel(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    Path(id): Path<String>,
) -> Answer {
    visible_row(&state, &caller, &id).await?;
    match state.db.cancel(&id, now_ms()).await.map_err(internal)? {
        true => show(State(state), axum::Extension(caller), Path(id)).await,
        false => Err(fail(
            StatusCode::CONFLICT,
            format!("job {id} has already ended"),
        )),
    }
}

async fn retry(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    Path(id): Path<String>,
) -> Answer {
    visible_row(&state, &caller, &id).await?;
    let spec = regranted(&state, &id).await?;
    match state
        .db
        .retry(&id, now_ms(), spec.as_deref())
        .await
        .map_err(internal)?
    {
        Retry::Nothing => Err(fail(
            StatusCode::CONFLICT,
            format!("job {id} has nothing to retry (still going, or done)"),
        )),
        // Planned again by whichever instance takes it over first (this one at its
        // next look, unless another is quicker).
        Retry::Units(_) | Retry::Replan => {
            show(State(state), axum::Extension(caller), Path(id)).await
        }
    }
}

/// Job `id`'s spec with its reach taken again from today's identity map (by the
/// entry its submitter had, as [`auth::Grant::of_owner`]), to be stored with its
/// retry: `None` if its reach is everything, then as now. A 403 with one line if the
/// map no longer lets it run, or no longer covers what it touches; a 409 if its spec
/// cannot be read (claiming its units would fail).
async fn regranted(state: &AppState, id: &str) -> Result<Option<String>, ApiError> {
    let Some(row) = state.db.job(id).await.map_err(internal)? else {
        return Err(fail(StatusCode::NOT_FOUND, format!("no job {id}")));
    };
    let spec = serde_json::from_str::<JobSpec>(&row.spec).map_err(|e| {
        let why = format!("job {id} cannot be retried: its stored spec is unreadable: {e}");
        fail(StatusCode::CONFLICT, why)
    })?;
    let grant = auth::Grant::of_owner(state, &row.submitted_by, spec.access.as_ref())
        .map_err(|why| forbidden(format!("not retried: {}", why.says(&format!("job {id}")))))?;
    if grant == auth::Grant::All && spec.access.is_none() {
        return Ok(None);
    }
    let spec = granted(state, &grant, spec)?;
    serde_json::to_string(&spec).map(Some).map_err(internal)
}

async fn files(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): By,
    Path(id): Path<String>,
    q: Result<Query<FilesQuery>, QueryRejection>,
) -> Answer {
    let Ok(Query(q)) = q else {
        return Err(bad("query: expected from=N&to=N"));
    };
    // An empty range has no rows, and a longer one is cut to its first MAX_FILES:
    // neither is malformed (the document cannot say that `to` follows `from`).
    let to = q.to.max(q.from).min(q.from.saturating_add(MAX_FILES));
    // The job's row alone decides (a worker asks at each unit: no view built).
    visible_row(&state, &caller, &id).await?;
    let rows = state.db.files(&id, q.from, to).await.map_err(internal)?;
    let rows: Vec<FileRow> = rows.into_iter().map(file_row).collect();
    Ok(Json(rows).into_response())
}

/// A row of a job's listing as the API shows it.
pub(crate) fn file_row(f: hetch_jobdb::FileRow) -> FileRow {
    FileRow {
        operand: u64::from(f.operand),
        path: f.path,
        size: f.size,
    }
}

/// Job `id` as the API shows it to `caller`, or a 404: a user is told of no job of
/// another's, not even that it exists.
pub(crate) async fn view(state: &AppState, caller: &Caller, id: &str) -> Result<JobView, ApiError> {
    job_view(state, visible_row(state, caller, id).await?).await
}

/// Job `id`'s row if `caller` may see it, or a 404 (as [`view`]).
async fn visible_row(state: &AppState, caller: &Caller, id: &str) -> Result<JobRow, ApiError> {
    match state.db.job(id).await.map_err(internal)? {
        Some(row) if caller.may_see(&row.submitted_by) => Ok(row),
        _ => Err(fail(StatusCode::NOT_FOUND, format!("no job {id}"))),
    }
}

/// Job `row` as the API shows it. What of its row cannot be read (see
/// [`JobRow::damaged`]; a spec this version cannot parse) is said in its error: one
/// damaged job never makes a list of jobs fail.
async fn job_view(state: &AppState, row: JobRow) -> Result<JobView, ApiError> {
    let c = row.units.clone();
    let now = now_ms();
    let (max_attempts, next_try) = match row.state.is_final() {
        true => (0, None),
        false => state
            .db
            .attempts_outlook(&row.id, now)
            .await
            .map_err(internal)?,
    };
    // Its live bytes, rate and ETA as the web interface's last snapshot has them (a
    // second old at most; none for a job too old to be in it).
    let snapshot = state.hub.latest();
    let live = snapshot.jobs.iter().find(|j| j.id == row.id);
    let (mut spec, unreadable) = match serde_json::from_str::<JobSpec>(&row.spec) {
        Ok(spec) => (spec, None),
        Err(e) => (
            JobSpec::default(),
            Some(format!("database row damaged: spec: {e}")),
        ),
    };
    let error = match (unreadable, row.error_shown()) {
        (Some(u), Some(e)) => Some(format!("{u}; {e}")),
        (u, e) => u.or(e),
    };
    // The secret never leaves the service: the view says only that one is set.
    // Only a streaming job has a lag (one that cannot be read reports none).
    let lag = match spec.is_stream() {
        true => state.db.job_lag(&row.id).await.map_err(internal)?,
        false => None,
    };
    let webhook = match spec.webhook.take() {
        None => None,
        Some(hook) => Some(WebhookView {
            url: hook.url,
            secret_set: true,
            delivery: match state.db.delivery(&row.id).await.map_err(internal)? {
                Some(d) if d.state != "armed" => Some(crate::notify::view(&d)),
                _ => None,
            },
        }),
    };
    Ok(JobView {
        id: row.id,
        state: row.state.as_str().to_string(),
        submitted_by: row.submitted_by,
        spec,
        created: row.created,
        started: row.started,
        finished: row.finished,
        error,
        files: row.files,
        bytes: row.bytes,
        files_done: row.files_done,
        bytes_done: row.bytes_done,
        bytes_written: row.bytes_written,
        bytes_live: live.map_or(0, |j| j.bytes_done).max(row.bytes_done),
        rate: live.map_or(0, |j| j.rate),
        eta_s: live.and_then(|j| j.eta_s),
        lag: lag.map(|(p50_ms, p99_ms)| hetch_service_api::LagView { p50_ms, p99_ms }),
        units: UnitsView {
            waiting: c.waiting,
            ready: c.ready,
            leased: c.leased,
            done: c.done,
            failed: c.failed,
            retried: c.retried,
            cancelled: c.cancelled,
            max_attempts,
            next_try_in_ms: next_try.map(|t| t.saturating_sub(now)),
        },
        webhook,
    })
}
