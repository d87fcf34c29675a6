//! The API's OpenAPI 3.1 document, served at `/api/openapi.json`. Its paths are
//! written out here (a test checks that it names every route the router serves, and
//! nothing else); its `components/schemas` are generated from the request and reply
//! types of [`hetch_service_api`] (a test checks values of each against them).

use hetch_service_api::schema::{self, name_of, REF_PREFIX};
use hetch_service_api::{
    ActivityView, ClaimRequest, ClaimedUnit, FileRow, FinishReply, FinishRequest, HeartbeatReply,
    HeartbeatRequest, JobSpec, JobView, LiveSnapshot, NodesView, SessionView,
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
        "Run a failed or cancelled job's unfinished units again",
    ),
    (
        "get",
        "/api/jobs/{id}/files",
        "Rows from..to of a job's listing (at most 10,000)",
    ),
    (
        "post",
        "/api/work/claim",
        "A worker takes up to `max` units under a lease",
    ),
    (
        "post",
        "/api/work/heartbeat",
        "A worker extends its leases; answers the units it still holds",
    ),
    (
        "post",
        "/api/work/finish",
        "A worker reports a unit it holds as done or failed",
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
        ("post", "/api/work/claim") => {
            (Some(of::<ClaimRequest>()), Some(array_of::<ClaimedUnit>()))
        }
        ("post", "/api/work/heartbeat") => {
            (Some(of::<HeartbeatRequest>()), Some(of::<HeartbeatReply>()))
        }
        ("post", "/api/work/finish") => (Some(of::<FinishRequest>()), Some(of::<FinishReply>())),
        ("get", "/api/session") => (None, Some(of::<SessionView>())),
        ("get", "/api/nodes") => (None, Some(of::<NodesView>())),
        ("get", "/api/jobs/{id}/activity") => (None, Some(of::<ActivityView>())),
        _ => (None, None),
    }
}

/// A query parameter.
fn query(name: &str, required: bool, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": required, "schema": schema})
}

/// The query parameters of route `path` (as `ListQuery` and `FilesQuery` take them).
fn query_of(path: &str) -> Vec<Value> {
    let count = || json!({"type": "integer", "minimum": 0});
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
        let mut op = json!({
            "summary": summary,
            "security": [{"bearer": []}],
            "responses": {
                "200": {"description": "OK (JSON)"},
                "201": {"description": "Created (JSON)"},
                "4XX": {"description": "Refused", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            }
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
            let code = if *method == "post" && *path == "/api/jobs" {
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
                "description": "The service's token (every job; the /api/work routes), or, with --oidc-issuer, a JWT of that issuer (the caller's own jobs only)",
            }, "session": {
                "type": "apiKey",
                "in": "cookie",
                "name": "__Host-hetch_session",
                "description": "A browser's session, set by POST /login with either token; a request other than GET also needs the session's CSRF token (GET /api/session) in X-CSRF-Token",
            }},
            "schemas": schema::components(),
        }
    })
}
