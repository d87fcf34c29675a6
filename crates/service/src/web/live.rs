//! The API routes the pages use beyond the job routes. Each needs a caller, as every
//! API route does; a user sees only their own jobs here too.
//!
//! - `GET /api/session`: who is logged in, until when, and the session's CSRF token.
//! - `GET /api/events`: the live snapshot as server-sent events.
//! - `GET /api/nodes`: the workers and this service's own host checks.
//! - `GET /api/jobs/{id}/activity`: a job's history of bytes moved, its share per
//!   worker and its failed units.
//! - `GET /api/jobs/{id}/listing`: a job's file list as JSON lines, streamed.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use hetch_service_api::web::{
    ActivityView, FailedUnitView, NodesView, ServiceHost, SessionView, ShareView,
};

use super::session::Session;
use crate::auth::Caller;
use crate::routes::{internal, view, Answer, MAX_FILES};
use crate::AppState;

/// Most failed units a job's activity lists.
pub const MAX_FAILED: u64 = 100;

/// The routes (to be put behind authentication).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/session", get(session))
        .route("/api/events", get(events))
        .route("/api/nodes", get(nodes))
        .route("/api/jobs/{id}/activity", get(activity))
        .route("/api/jobs/{id}/listing", get(listing))
}

async fn session(
    Extension(caller): Extension<Caller>,
    session: Option<Extension<Session>>,
) -> Json<SessionView> {
    let (csrf, expires) = match session {
        Some(Extension(s)) => (Some(s.csrf), Some(s.expires)),
        None => (None, None),
    };
    Json(SessionView {
        caller: caller.name().to_string(),
        operator: caller == Caller::Operator,
        csrf,
        expires,
    })
}

async fn events(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Extension(ends): Extension<crate::auth::Ends>,
) -> Response {
    match state.hub.subscribe(caller, ends.0) {
        Ok(stream) => stream.into_response(),
        Err(why) => {
            let body = crate::api::ErrorBody {
                error: why,
                field: None,
            };
            (axum::http::StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response()
        }
    }
}

async fn nodes(State(state): State<Arc<AppState>>) -> Json<NodesView> {
    Json(NodesView {
        nodes: state.hub.latest().nodes.clone(),
        service: ServiceHost {
            host: state.host.clone(),
            checks: state.host_checks.clone(),
        },
    })
}

async fn activity(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    view(&state, &caller, &id).await?;
    let shares = state.db.shares(&id).await.map_err(internal)?;
    let failed = state
        .db
        .failed_units(&id, MAX_FAILED)
        .await
        .map_err(internal)?;
    let shares = shares
        .into_iter()
        .map(|s| ShareView {
            worker: s.worker,
            units: s.units,
            bytes: s.bytes,
        })
        .collect();
    let failed = failed
        .into_iter()
        .map(|f| FailedUnitView {
            seq: f.seq,
            kind: f.kind,
            state: f.state,
            attempts: f.attempts,
            error: f.error,
            path: f.path,
            files: f.files,
        })
        .collect();
    Ok(Json(ActivityView {
        samples: state.hub.samples(&id),
        shares,
        failed,
    })
    .into_response())
}

async fn listing(
    State(state): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Answer {
    let job = view(&state, &caller, &id).await?;
    let total = job.files;
    // Pages of rows read as the body is sent: memory is one page, whatever the job.
    let pages = futures_util::stream::unfold(0u64, move |from| {
        let (state, id) = (state.clone(), id.clone());
        async move {
            if from >= total {
                return None;
            }
            let to = from.saturating_add(MAX_FILES).min(total);
            let text = match state.db.files(&id, from, to).await {
                Ok(rows) => rows
                    .into_iter()
                    .map(|f| {
                        serde_json::to_string(&crate::routes::file_row(f)).expect("a plain struct")
                            + "\n"
                    })
                    .collect::<String>(),
                Err(e) => return Some((Err(std::io::Error::other(e.to_string())), total)),
            };
            Some((Ok::<_, std::io::Error>(text), to))
        }
    });
    let disposition = format!("attachment; filename=\"hetch-job-{}-files.jsonl\"", job.id);
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        Body::from_stream(pages),
    )
        .into_response())
}
