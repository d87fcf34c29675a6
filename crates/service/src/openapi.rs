//! The API's OpenAPI 3.1 document, served at `/api/openapi.json`. Its paths are
//! written out here (a test checks that it names every route the router serves, and
//! nothing else); its `components/schemas` are generated from the request and reply
//! types of [`hetch_service_api`] (a test checks values of each against them).

use hetch_service_api::schema::{self, name_of, REF_PREFIX};
use hetch_service_api::{
    ActivityView, ClaimRequest, ClaimedUnit, FileRow, FinishAll, FinishAllReply, FinishReply,
    FinishRequest, HeartbeatReply, HeartbeatRequest, JobSpec, JobView, LiveSnapshot, NodesView,
    RangesReply, RangesRequest, ScheduleSpec, ScheduleView, SessionView, UploadReply,
    UploadRequest,
};
use schemars::JsonSchema;
use serde_json::{json, Value};

/// The routes, as the document and the router name them: (method, path, summary).
pub const ROUTES: &[(&str, &str, &str)] = &[
    (
        "post",
        "/api/jobs",
        "Submit a job (what `hetch cp` takes); answers 201 with the job, planning",
    ),
    (
        "get",
        "/api/jobs",
        "List jobs, newest first (query: state, limit <= 1000)",
    ),
    (
        "get",
        "/api/jobs/{id}",
        "Show a job, with its units by state",
    ),
    (
        "post",
        "/api/jobs/{id}/cancel",
        "Cancel a job; workers holding its units stop at their next heartbeat",
    ),
    (
        "post",
        "/api/jobs/{id}/retry",
        "Run a failed or cancelled job's unfinished units again, with the reach its submitter's identity map entry grants now",
    ),
    (
        "get",
        "/api/jobs/{id}/files",
        "Rows from..to of a job's listing (at most 10,000: a longer range is cut; from >= to gives none)",
    ),
    (
        "post",
        "/api/schedules",
        "Make a recurring mirror (a job run every `every` or at `cron`'s times, no more often than --min-schedule-interval); answers 201",
    ),
    (
        "get",
        "/api/schedules",
        "List schedules, newest first, each with its newest runs",
    ),
    (
        "get",
        "/api/schedules/{id}",
        "Show a schedule with its newest 20 runs (jobs, and due times skipped with why)",
    ),
    (
        "delete",
        "/api/schedules/{id}",
        "Delete a schedule and its history (its jobs stay); answers it as it was",
    ),
    (
        "post",
        "/api/schedules/{id}/pause",
        "Pause a schedule: no runs until resumed",
    ),
    (
        "post",
        "/api/schedules/{id}/resume",
        "Resume a schedule from its next due time after now",
    ),
    (
        "post",
        "/api/work/claim",
        "A worker takes up to `max` units, each under a lease with a random id that every later call about it carries",
    ),
    (
        "post",
        "/api/work/heartbeat",
        "A worker extends the leases of the units it runs (each named with its lease id); answers those it still holds",
    ),
    (
        "post",
        "/api/work/finish",
        "A worker reports a unit it holds (named with its lease id) as done or failed",
    ),
    (
        "post",
        "/api/work/finish-all",
        "A worker reports up to 64 units at once, each as /api/work/finish takes it; answers each taken or refused",
    ),
    (
        "post",
        "/api/work/upload",
        "A range unit of a file going into an object store records its file's multipart upload, or learns the one recorded",
    ),
    (
        "post",
        "/api/work/ranges",
        "A commit unit of a file going into an object store reads what its ranges reported (a page)",
    ),
    (
        "get",
        "/api/jobs/{id}/activity",
        "A job's bytes moved over time (this instance's samples), share per worker and failed units",
    ),
    (
        "get",
        "/api/jobs/{id}/listing",
        "A job's whole listing as JSON lines (operand, path, size), streamed",
    ),
    (
        "get",
        "/api/session",
        "Who is calling; for a browser session, its CSRF token and expiry",
    ),
    (
        "get",
        "/api/events",
        "Server-sent events: a `snapshot` of the caller's newest jobs and the workers, whenever it changes",
    ),
    (
        "get",
        "/api/nodes",
        "The workers heard from in the last day, and this service's own host checks",
    ),
    (
        "get",
        "/metrics",
        "Totals and this instance's counters in Prometheus' text format (service token only)",
    ),
];

/// A reference to `T`'s schema.
fn of<T: JsonSchema>() -> Value {
    json!({"$ref": format!("{REF_PREFIX}{}", name_of::<T>())})
}

/// An array of `T`.
fn array_of<T: JsonSchema>() -> Value {
    json!({"type": "array", "items": of::<T>()})
}

/// The schemas of route `method` `path`'s request body (if it takes one) and of its
/// successful answer (if it is JSON of one of the API's types).
fn bodies(method: &str, path: &str) -> (Option<Value>, Option<Value>) {
    match (method, path) {
        ("post", "/api/jobs") => (Some(of::<JobSpec>()), Some(of::<JobView>())),
        ("get", "/api/jobs") => (None, Some(array_of::<JobView>())),
        ("get", "/api/jobs/{id}") | ("post", "/api/jobs/{id}/cancel" | "/api/jobs/{id}/retry") => {
            (None, Some(of::<JobView>()))
        }
        ("get", "/api/jobs/{id}/files") => (None, Some(array_of::<FileRow>())),
        ("post", "/api/schedules") => (Some(of::<ScheduleSpec>()), Some(of::<ScheduleView>())),
        ("get", "/api/schedules") => (None, Some(array_of::<ScheduleView>())),
        ("get" | "delete", "/api/schedules/{id}")
        | ("post", "/api/schedules/{id}/pause" | "/api/schedules/{id}/resume") => {
            (None, Some(of::<ScheduleView>()))
        }
        ("post", "/api/work/claim") => {
            (Some(of::<ClaimRequest>()), Some(array_of::<ClaimedUnit>()))
        }
        ("post", "/api/work/heartbeat") => {
            (Some(of::<HeartbeatRequest>()), Some(of::<HeartbeatReply>()))
        }
        ("post", "/api/work/finish") => (Some(of::<FinishRequest>()), Some(of::<FinishReply>())),
        ("post", "/api/work/finish-all") => (Some(of::<FinishAll>()), Some(of::<FinishAllReply>())),
        ("post", "/api/work/upload") => (Some(of::<UploadRequest>()), Some(of::<UploadReply>())),
        ("post", "/api/work/ranges") => (Some(of::<RangesRequest>()), Some(of::<RangesReply>())),
        ("get", "/api/session") => (None, Some(of::<SessionView>())),
        ("get", "/api/nodes") => (None, Some(of::<NodesView>())),
        ("get", "/api/jobs/{id}/activity") => (None, Some(of::<ActivityView>())),
        _ => (None, None),
    }
}

/// The error statuses route `method` `path` answers (each with an `Error` body), and
/// when.
fn errors_of(method: &str, path: &str) -> Vec<(&'static str, &'static str)> {
    let mut e = vec![
        ("401", "No token, a wrong or expired one, or no session"),
        ("403", "Not the caller's to do (a user's token on a worker route, the workers' token elsewhere than the worker routes and a job's listing, a request without the session's CSRF token, an identity the map does not name, a path outside the user's, a retry whose identity map entry is gone)"),
        ("429", "Too many wrong tokens from this address, a user's requests over their rate, every connection of the user's (or their address's) share busy, or too many event streams (Retry-After says how long to wait)"),
        ("500", "The service's own failure (its database)"),
        ("503", "Every connection the service may give the caller is busy (Retry-After says how long to wait)"),
    ];
    if takes_body(method, path)
        || (method == "get" && matches!(path, "/api/jobs" | "/api/jobs/{id}/files"))
    {
        e.push(("400", "The request is not what the route takes (a field out of bounds, a source that does not exist, a copy into itself): one line naming it"));
    }
    if path.contains("{id}") {
        e.push(("404", "No such job or schedule (or not the caller's)"));
    }
    if method == "post" && path == "/api/schedules" {
        e.push((
            "409",
            "The caller has the most schedules one may have (--max-schedules)",
        ));
    }
    let unit_route = matches!(
        path,
        "/api/work/finish" | "/api/work/upload" | "/api/work/ranges"
    );
    if path.ends_with("/cancel") || path.ends_with("/retry") || unit_route {
        e.push(("409", "The job (or unit) is not in a state this applies to: already ended, nothing to retry, not the worker's"));
    }
    e.sort();
    e
}

/// Whether route `method` `path` takes a body, which is refused (413, without a JSON
/// body) over the service's limit.
fn takes_body(method: &str, path: &str) -> bool {
    method == "post"
        && !["/cancel", "/retry", "/pause", "/resume"]
            .iter()
            .any(|end| path.ends_with(end))
}

/// A query parameter.
fn query(name: &str, required: bool, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": required, "schema": schema})
}

/// The query parameters of route `path` (as `ListQuery` and `FilesQuery` take them).
fn query_of(path: &str) -> Vec<Value> {
    let count = || json!({"type": "integer", "minimum": 0, "maximum": u64::MAX});
    match path {
        "/api/jobs" => vec![
            query(
                "state",
                false,
                json!({"enum": ["planning", "queued", "running", "done", "failed", "cancelled"]}),
            ),
            query(
                "limit",
                false,
                json!({"type": "integer", "minimum": 0, "maximum": 1000}),
            ),
        ],
        "/api/jobs/{id}/files" => vec![query("from", true, count()), query("to", true, count())],
        _ => Vec::new(),
    }
}

/// The document.
pub fn document() -> Value {
    let mut paths = serde_json::Map::new();
    for (method, path, summary) in ROUTES {
        let entry = paths.entry(path.to_string()).or_insert_with(|| json!({}));
        let mut responses = serde_json::Map::new();
        let ok = match (*method, *path) {
            ("post", "/api/jobs" | "/api/schedules") => ("201", "Created (JSON)"),
            _ => ("200", "OK (JSON)"),
        };
        responses.insert(ok.0.into(), json!({"description": ok.1}));
        for (code, why) in errors_of(method, path) {
            let error = json!({"$ref": "#/components/schemas/Error"});
            responses.insert(
                code.into(),
                json!({"description": why, "content": {"application/json": {"schema": error}}}),
            );
        }
        if takes_body(method, path) {
            let over = format!("The body is over {} MiB", crate::routes::MAX_BODY >> 20);
            responses.insert("413".into(), json!({"description": over}));
        }
        let mut op = json!({
            "summary": summary,
            "security": [{"bearer": []}],
            "responses": responses,
        });
        if *path == "/metrics" {
            op["responses"]["200"] =
                json!({"description": "OK (text/plain, Prometheus' exposition format 0.0.4)"});
        }
        if *path == "/api/events" {
            // OpenAPI 3.1 has no schema for an event's data: it is named in an extension.
            op["responses"]["200"] = json!({
                "description": "OK (text/event-stream): each `snapshot` event's data is a LiveSnapshot",
                "x-event-data": {"snapshot": of::<LiveSnapshot>()},
            });
        }
        if path.ends_with("/listing") {
            op["responses"]["200"] = json!({"description": "OK (application/x-ndjson)"});
        }
        let mut parameters = match *method {
            "get" => query_of(path),
            _ => Vec::new(),
        };
        if path.contains("{id}") {
            parameters.push(
                json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}),
            );
        }
        if !parameters.is_empty() {
            op["parameters"] = Value::Array(parameters);
        }
        let (request, answer) = bodies(method, path);
        if let Some(schema) = request {
            op["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": schema}}});
        }
        if let Some(schema) = answer {
            let code = if *method == "post" && matches!(*path, "/api/jobs" | "/api/schedules") {
                "201"
            } else {
                "200"
            };
            op["responses"][code]["content"] = json!({"application/json": {"schema": schema}});
        }
        if !path.starts_with("/api/work/") && *path != "/metrics" {
            op["security"] = json!([{"bearer": []}, {"session": []}]);
        }
        entry[*method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "hetch service", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "The service's own token (the operator: every job and route), the workers' token (the /api/work routes and a job's listing only), or, with --oidc-issuer, a JWT of that issuer (the caller's own jobs only)",
            }, "session": {
                "type": "apiKey",
                "in": "cookie",
                "name": "__Host-hetch_session",
                "description": "A browser's session, set by POST /login with the service's own token or an issuer's; a request other than GET also needs the session's CSRF token (GET /api/session) in X-CSRF-Token",
            }},
            "schemas": schema::components(),
        }
    })
}
