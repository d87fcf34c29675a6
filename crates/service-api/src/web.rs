//! What the routes the web interface uses beyond the job routes answer: who is calling
//! (`GET /api/session`), the live snapshot of the caller's newest jobs and the workers
//! (each `snapshot` event of `GET /api/events`), the workers and the service's own
//! host (`GET /api/nodes`), and a job's history (`GET /api/jobs/{id}/activity`).
//! Replies ignore fields they do not know (a newer service may say more).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who is calling (`GET /api/session`): for a browser's session, also its CSRF token
/// and when it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionView {
    /// The caller: `token` for the service's own token, `oidc:SUBJECT` for a user.
    pub caller: String,
    /// Whether the caller is the operator (the service's own token): it sees every
    /// job.
    pub operator: bool,
    /// The session's CSRF token, which a browser sends in `X-CSRF-Token` with every
    /// request other than GET (none without a session: a bearer token).
    pub csrf: Option<String>,
    /// When the session ends, milliseconds since the epoch (none without a session).
    pub expires: Option<u64>,
}

/// A job as the live list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobSummary {
    /// Its id.
    pub id: String,
    /// `planning`, `queued`, `running`, `done`, `failed` or `cancelled`.
    pub state: String,
    /// Who submitted it.
    pub submitted_by: String,
    /// Its first source (empty if its spec cannot be read).
    pub source: String,
    /// How many sources it has.
    pub sources: usize,
    /// Where to.
    pub dest: String,
    /// Higher goes first.
    pub priority: i64,
    /// Entries listed.
    pub files: u64,
    /// Bytes listed.
    pub bytes: u64,
    /// Entries moved.
    pub files_done: u64,
    /// Bytes moved, including what running units moved so far.
    pub bytes_done: u64,
    /// Bytes per second over the last ten seconds (0 once it ended).
    pub rate: u64,
    /// Seconds left at that rate, when it is moving.
    pub eta_s: Option<u64>,
    /// Submitted, milliseconds since the epoch.
    pub created: u64,
    /// When its first unit was claimed.
    pub started: Option<u64>,
    /// When it ended.
    pub finished: Option<u64>,
    /// Why it failed.
    pub error: Option<String>,
}

/// A worker as the nodes page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NodeView {
    /// Its name.
    pub name: String,
    /// Its host (empty if it did not say).
    pub host: String,
    /// Units it may run at once (0 if it did not say).
    pub capacity: u64,
    /// Last heard from, milliseconds since the epoch.
    pub last_seen: u64,
    /// Whether it has been silent for 30 s or more.
    pub silent: bool,
    /// Units it holds now.
    pub active: u64,
    /// Bytes per second its units moved over the last ten seconds.
    pub rate: u64,
    /// Its host checks, one line each.
    pub checks: Vec<String>,
}

/// What a `snapshot` event of `GET /api/events` carries: the part of the live state
/// the caller may see, sent whenever it changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LiveSnapshot {
    /// The caller's newest jobs (every job for the operator): those not ended, then
    /// the last ended ones.
    pub jobs: Vec<JobSummary>,
    /// The workers heard from in the last day.
    pub nodes: Vec<NodeView>,
    /// The caller's newest webhook deliveries (attempted, delivered or given up),
    /// newest first: each change of one is an event of the stream.
    #[serde(default)]
    pub deliveries: Vec<crate::webhook::DeliveryView>,
}

/// The workers and the service's own host (`GET /api/nodes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NodesView {
    /// The workers heard from in the last day.
    pub nodes: Vec<NodeView>,
    /// The host of the service instance that answered.
    pub service: ServiceHost,
}

/// The host a service instance runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceHost {
    /// Its name.
    pub host: String,
    /// Its host checks (found when the service started), one line each.
    pub checks: Vec<String>,
}

/// A job's history (`GET /api/jobs/{id}/activity`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ActivityView {
    /// Bytes moved over time, as `[milliseconds since the epoch, bytes]` pairs, oldest
    /// first: the samples the answering instance took (about one a second while the
    /// job is among the newest, thinned as they age; none once it left them).
    pub samples: Vec<(u64, u64)>,
    /// What each worker moved of it.
    pub shares: Vec<ShareView>,
    /// Its units whose last attempt failed (at most 100).
    pub failed: Vec<FailedUnitView>,
}

/// What one worker moved of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ShareView {
    /// The worker.
    pub worker: String,
    /// Units it finished.
    pub units: u64,
    /// Bytes those units moved.
    pub bytes: u64,
}

/// A unit whose last attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FailedUnitView {
    /// Its number in the job.
    pub seq: u64,
    /// `files`, `range`, `commit` or `relay`.
    pub kind: String,
    /// `failed` for good, or `ready`/`leased` to be tried again.
    pub state: String,
    /// Attempts that failed.
    pub attempts: u64,
    /// The last attempt's error, one line.
    pub error: String,
    /// The first file it names in the job's listing (none for a relay).
    pub path: Option<String>,
    /// Files it names.
    pub files: u64,
}
