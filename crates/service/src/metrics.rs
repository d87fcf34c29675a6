//! `GET /metrics`: the service in Prometheus' text format, for the operator's
//! monitoring (the service token only: the totals span every user's jobs).
//!
//! Gauges read from the database at each scrape (so every instance sharing one
//! PostgreSQL reports the same totals), and counters of this instance's requests by
//! route, method and status, and of refused tokens. Every label comes from a finite
//! set (route templates, GET/POST/other, status codes), so a caller cannot grow them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hetch_jobdb::Totals;
use hetch_metrics::{Exposition, Kind, CONTENT_TYPE};

use crate::auth::Caller;
use crate::AppState;

/// This instance's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests answered, by (route template, method, status).
    requests: Mutex<BTreeMap<(String, &'static str, u16), u64>>,
    /// Requests refused for their token (missing, wrong, or a bad OIDC token).
    pub auth_failures: AtomicU64,
    /// Users' requests refused for their rate.
    pub rate_limited: AtomicU64,
    /// Connections closed at once, over the cap on unauthenticated ones per address.
    pub pre_auth_refused: AtomicU64,
}

impl Metrics {
    /// Counts one user's request refused for its rate.
    pub fn rate_limited(&self) {
        self.rate_limited.fetch_add(1, Relaxed);
    }

    /// Counts one refused token.
    pub fn auth_failed(&self) {
        self.auth_failures.fetch_add(1, Relaxed);
    }
}

/// Middleware: counts each request once it is answered.
pub async fn count(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let route = match req.extensions().get::<MatchedPath>() {
        Some(p) => p.as_str().to_string(),
        None => "unmatched".to_string(),
    };
    let method = match *req.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        _ => "other",
    };
    let resp = next.run(req).await;
    let key = (route, method, resp.status().as_u16());
    *state
        .metrics
        .requests
        .lock()
        .expect("metrics lock")
        .entry(key)
        .or_default() += 1;
    resp
}

/// The handler of `GET /metrics`.
pub async fn scrape(
    State(state): State<Arc<AppState>>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> Response {
    let json_error = |status: StatusCode, error: String| {
        let body = crate::api::ErrorBody { error, field: None };
        (status, axum::Json(body)).into_response()
    };
    if caller != Caller::Operator {
        let why = "the metrics take the service's own token".to_string();
        return json_error(StatusCode::FORBIDDEN, why);
    }
    let totals = match state.db.totals().await {
        Ok(t) => t,
        Err(e) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let body = render(&totals, &state.metrics, &state.conns, &state.gate);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response()
}

/// The text exposition of `totals`, `m`, and the connections of `conns` and `gate`.
pub fn render(
    totals: &Totals,
    m: &Metrics,
    conns: &crate::fair::Conns,
    gate: &hetch_net::PreAuthGate,
) -> String {
    let mut e = Exposition::new();
    let mut f = e.family("hetch_service_jobs", Kind::Gauge, "Jobs by state.");
    for (state, n) in &totals.jobs {
        f.sample(&[("state", state.as_str())], *n);
    }
    let mut f = e.family("hetch_service_units", Kind::Gauge, "Work units by state.");
    for (state, n) in totals.units.by_state() {
        f.sample(&[("state", state)], n);
    }
    let gauges = [
        (
            "hetch_service_files_done",
            "Files reported done, over all jobs.",
            totals.files_done,
        ),
        (
            "hetch_service_bytes_done",
            "Bytes reported done, over all jobs.",
            totals.bytes_done,
        ),
        (
            "hetch_service_bytes_in_flight",
            "Bytes the running units moved so far (their workers' last heartbeats).",
            totals.bytes_in_flight,
        ),
        (
            "hetch_service_stream_lag_p99_ms",
            "The largest 99th-percentile lag (appended at the source to durable and \
             verified at the destination) among the streams running, milliseconds.",
            totals.stream_lag_p99_ms,
        ),
        (
            "hetch_service_workers_active",
            "Workers holding a lease.",
            totals.active_workers,
        ),
    ];
    for (name, help, v) in gauges {
        e.single(name, Kind::Gauge, help, v);
    }
    let mut f = e.family(
        "hetch_service_requests_total",
        Kind::Counter,
        "API requests answered by this instance.",
    );
    for ((route, method, status), n) in m.requests.lock().expect("metrics lock").iter() {
        let status = status.to_string();
        f.sample(
            &[("route", route), ("method", method), ("status", &status)],
            *n,
        );
    }
    e.single(
        "hetch_service_auth_failures_total",
        Kind::Counter,
        "Requests refused for their token.",
        m.auth_failures.load(Relaxed),
    );
    connections(&mut e, m, conns, gate);
    e.into_text()
}

/// The connections: open, and refused or closed by the limits (each with the flag
/// that sets it).
fn connections(
    e: &mut Exposition,
    m: &Metrics,
    conns: &crate::fair::Conns,
    gate: &hetch_net::PreAuthGate,
) {
    let (held, users) = conns.held();
    let mut f = e.family(
        "hetch_service_connections",
        Kind::Gauge,
        "Connections open: authenticated by the service's token, by users, and not yet \
         authenticated.",
    );
    f.sample(&[("caller", "operator")], (held - users) as u64);
    f.sample(&[("caller", "user")], users as u64);
    f.sample(&[("caller", "unauthenticated")], gate.open() as u64);
    let caps = ["user", "address", "full"];
    let mut f = e.family(
        "hetch_service_connections_displaced_total",
        Kind::Counter,
        "Idle connections closed to make room for a newcomer, by the cap that was \
         reached: one user's (--max-connections-per-user), one address's \
         (--max-connections-per-address), all (--max-connections), or the \
         unauthenticated places (--max-unauthenticated).",
    );
    for (cap, n) in caps.iter().zip(&conns.displaced) {
        f.sample(&[("cap", cap)], n.load(Relaxed));
    }
    f.sample(&[("cap", "unauthenticated")], gate.displaced());
    let mut f = e.family(
        "hetch_service_requests_refused_total",
        Kind::Counter,
        "Requests refused by a limit: every connection the cap allows busy (user, \
         address, full), a user's request rate (--user-requests-per-second), or \
         connections over --max-unauthenticated-per-address (closed unread).",
    );
    for (cap, n) in caps.iter().zip(&conns.refused) {
        f.sample(&[("limit", cap)], n.load(Relaxed));
    }
    f.sample(&[("limit", "rate")], m.rate_limited.load(Relaxed));
    f.sample(
        &[("limit", "unauthenticated_per_address")],
        m.pre_auth_refused.load(Relaxed),
    );
}
