//! The API's OpenAPI 3.1 document, served at `/api/openapi.json`. Written out here
//! (a test checks that it names every route the router serves, and nothing else).

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
            op["responses"]["200"] = json!({"description": "OK (text/event-stream)"});
        }
        if path.ends_with("/listing") {
            op["responses"]["200"] = json!({"description": "OK (application/x-ndjson)"});
        }
        if path.contains("{id}") {
            op["parameters"] = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
        }
        if *path == "/api/jobs" && *method == "post" {
            op["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}}}});
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
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}, "field": {"type": "string", "description": "The job spec's field a 400 is about"}}},
                "JobSpec": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["sources", "dest"],
                    "properties": {
                        "sources": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1000,
                                    "description": "Paths below the service's root; or hetch://HOST:PORT/PATH URLs all on one server, which pushes them to a hetch:// dest (a copy between two servers)."},
                        "dest": {"type": "string", "description": "hetch://, s3://, gs:// or az:// URL, or a path below the service's root."},
                        "priority": {"type": "integer", "minimum": -100, "maximum": 100},
                        "rate_limit": {"type": "integer", "minimum": 0},
                        "dest_nodes": {"type": "array", "items": {"type": "string"}, "maxItems": 64,
                                       "description": "Other hetch serve nodes (HOST[:PORT]) serving the same storage as the hetch:// dest's server; units are spread over all of them."},
                        "options": {
                            "type": "object",
                            "additionalProperties": false,
                            "properties": {
                                "checksum": {"enum": ["blake3", "xxh3", "crc32c", "md5", "sha256", "adler32"]},
                                "verify": {"enum": ["none", "received", "written"]},
                                "block_size": {"type": "integer"},
                                "streams": {"type": "integer", "minimum": 1, "maximum": 256},
                                "no_clobber": {"type": "boolean"},
                                "compress": {"type": "string", "pattern": "^(none|off|auto|zstd|zstd:([1-9]|1[0-9]))$"}
                            }
                        }
                    }
                }
            }
        }
    })
}
