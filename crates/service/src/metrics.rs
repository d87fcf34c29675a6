//! `GET /metrics`: the service in Prometheus' text format, for the operator's
//! monitoring (the service token only: the totals span every user's jobs).
//!
//! Gauges read from the database at each scrape (so every instance sharing one
//! PostgreSQL reports the same totals), and counters of this instance's requests by
//! route, method and status, and of refused tokens. Every label comes from a finite
//! set (route templates, GET/POST/other, status codes), so a caller cannot grow them.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hetch_jobdb::Totals;

use crate::auth::Caller;
use crate::AppState;

/// This instance's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests answered, by (route template, method, status).
    requests: Mutex<BTreeMap<(String, &'static str, u16), u64>>,
    /// Requests refused for their token (missing, wrong, or a bad OIDC token).
    pub auth_failures: AtomicU64,
}

impl Metrics {
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
        (status, axum::Json(serde_json::json!({ "error": error }))).into_response()
    };
    if caller != Caller::Operator {
        let why = "the metrics take the service's own token".to_string();
        return json_error(StatusCode::FORBIDDEN, why);
    }
    let totals = match state.db.totals().await {
        Ok(t) => t,
        Err(e) => return json_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let body = render(&totals, &state.metrics);
    let kind = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The text exposition of `totals` and `m`.
pub fn render(totals: &Totals, m: &Metrics) -> String {
    let mut out = String::new();
    let head = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    head(&mut out, "hetch_service_jobs", "gauge", "Jobs by state.");
    for (state, n) in &totals.jobs {
        let _ = writeln!(
            out,
            "hetch_service_jobs{{state=\"{}\"}} {n}",
            state.as_str()
        );
    }
    head(
        &mut out,
        "hetch_service_units",
        "gauge",
        "Work units by state.",
    );
    for (state, n) in totals.units.by_state() {
        let _ = writeln!(out, "hetch_service_units{{state=\"{state}\"}} {n}");
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
            "hetch_service_workers_active",
            "Workers holding a lease.",
            totals.active_workers,
        ),
    ];
    for (name, help, v) in gauges {
        head(&mut out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
    let name = "hetch_service_requests_total";
    head(
        &mut out,
        name,
        "counter",
        "API requests answered by this instance.",
    );
    for ((route, method, status), n) in m.requests.lock().expect("metrics lock").iter() {
        let _ = writeln!(
            out,
            "{name}{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
        );
    }
    let name = "hetch_service_auth_failures_total";
    head(
        &mut out,
        name,
        "counter",
        "Requests refused for their token.",
    );
    let _ = writeln!(out, "{name} {}", m.auth_failures.load(Relaxed));
    out
}
