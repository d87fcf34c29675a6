//! What workers and the service say to each other on the `/api/work` routes: claims
//! of units under leases, heartbeats that keep them, and the report on each unit.
//! Requests refuse fields they do not know; replies ignore them (a newer service may
//! say more).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::job::JobSpec;

/// A worker asking for work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The worker's name (unique among workers).
    #[schemars(
        length(min = 1, max = 200),
        regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]+$")
    )]
    pub worker: String,
    /// Units it can take now (1 to 64).
    #[schemars(range(min = 1, max = 64))]
    pub max: u32,
    /// What it says of itself, for people watching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<WorkerAbout>,
}

/// What a worker says of itself when it calls (all optional; shown on the web
/// interface's nodes page, never used to decide anything; one out of bounds is
/// dropped whole).
/// Unknown fields are ignored (a newer worker may say more).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkerAbout {
    /// Its host's name (at most 253 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Units it may run at once (1 to 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u32>,
    /// Bytes its units moved since it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<u64>,
    /// Its host checks, one line each (at most 32 of at most 300 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<String>>,
}

/// Most host checks a worker reports.
pub const MAX_CHECKS: usize = 32;
/// Longest host check line.
pub const MAX_CHECK: usize = 300;

impl WorkerAbout {
    /// Whether it is within bounds, as one line naming what is not.
    pub fn check(&self) -> Result<(), String> {
        let printable = |s: &str| !s.chars().any(char::is_control);
        if let Some(h) = &self.host {
            if h.len() > 253 || !printable(h) {
                return Err("host must be at most 253 printable bytes".into());
            }
        }
        if let Some(c) = self.capacity {
            if !(1..=64).contains(&c) {
                return Err("capacity must be 1 to 64".into());
            }
        }
        if let Some(checks) = &self.checks {
            let long = checks.iter().any(|c| c.len() > MAX_CHECK || !printable(c));
            if checks.len() > MAX_CHECKS || long {
                return Err(format!(
                    "checks: at most {MAX_CHECKS} printable lines of at most {MAX_CHECK} bytes"
                ));
            }
        }
        Ok(())
    }
}

/// A unit handed to a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClaimedUnit {
    /// Its job.
    pub job: String,
    /// Its number in the job.
    pub seq: u64,
    /// What to do (`files`, `range` or `commit`, with their bounds).
    pub unit: hetch_jobs::UnitSpec,
    /// The job's spec.
    pub spec: JobSpec,
    /// The lease runs out at this time (milliseconds since the epoch) unless a
    /// heartbeat extends it.
    pub until: u64,
    /// The lease's id: random, given with this claim only. Every heartbeat, report
    /// and call about the unit carries it; without it the service takes none.
    pub lease: String,
    /// Times this unit was tried before (a run that failed, or a lease that ran out).
    #[serde(default)]
    pub attempts: u32,
    /// How long a lease lasts from a claim or heartbeat, milliseconds: a worker that
    /// has not been heard for this long must have stopped the unit, since another
    /// may be running it by then.
    pub lease_ms: u64,
    /// Bytes per second this unit may move (0: no limit): its share of the job's rate
    /// limit, split evenly among the job's units held now. Heartbeats bring the
    /// share up to date as units start and end.
    pub rate_limit: u64,
}

/// A worker's word of life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// The worker's name.
    #[schemars(
        length(min = 1, max = 200),
        regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]+$")
    )]
    pub worker: String,
    /// The units it runs (at most 64), each with its lease id, whose leases are
    /// extended; without it, none is (the worker runs nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub units: Option<Vec<UnitKey>>,
    /// What it says of itself, for people watching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub about: Option<WorkerAbout>,
}

/// A unit of a job, by number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnitKey {
    /// Its job.
    pub job: String,
    /// Its number in the job.
    pub seq: u64,
    /// Its lease id, as its claim gave it.
    #[schemars(length(min = 1, max = 64))]
    pub lease: String,
    /// Bytes this run of it moved so far (a heartbeat's live progress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// A stream's lag over this run so far, once it shipped appended bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<crate::LagView>,
}

/// A worker's report on a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishRequest {
    /// The worker's name.
    #[schemars(
        length(min = 1, max = 200),
        regex(pattern = r"^[^\x00-\x1f\x7f-\x9f]+$")
    )]
    pub worker: String,
    /// The unit's job.
    pub job: String,
    /// The unit's number.
    pub seq: u64,
    /// The unit's lease id, as its claim gave it.
    #[schemars(length(min = 1, max = 64))]
    pub lease: String,
    /// `None` when it went through; else one line saying why not.
    pub error: Option<String>,
    /// Entries it moved (at most 10^9: no unit moves more).
    #[serde(default)]
    #[schemars(range(max = 1_000_000_000))]
    pub files: u64,
    /// Bytes it moved (at most 2^53: no unit moves more).
    #[serde(default)]
    #[schemars(range(max = 9_007_199_254_740_992u64))]
    pub bytes: u64,
    /// Bytes it wrote at the destination (at most 2^53): files it found in place
    /// wrote none. Absent: all of `bytes` (a worker that does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 9_007_199_254_740_992u64))]
    pub written: Option<u64>,
    /// A done range unit of a file going into an object store: what it put in the
    /// file's multipart upload (see [`crate::object_ranges`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<crate::RangeReport>,
}

/// The service's answer to a heartbeat: the units the worker still holds. A unit the
/// worker runs that is not among them is no longer its own (its lease ran out, or its
/// job was cancelled): the worker stops it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HeartbeatReply {
    /// The units whose leases were extended.
    pub held: Vec<HeldUnit>,
}

/// A unit a worker still holds, with its share of its job's rate limit as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HeldUnit {
    /// Its job.
    pub job: String,
    /// Its number in the job.
    pub seq: u64,
    /// Bytes per second it may move now (0: no limit), as in [`ClaimedUnit`].
    #[serde(default)]
    pub rate_limit: u64,
}

/// The service's answer to a unit's report: nothing to say (an empty object), since a
/// report it does not take is a 409 naming why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FinishReply {}

/// Most reports one [`FinishAll`] carries: a worker's most units at once.
pub const MAX_REPORTS: usize = 64;

/// Several units' reports in one call (`POST /api/work/finish-all`): the units that
/// ended while the worker's last call was under way, taken in one transaction per
/// job (each as `/api/work/finish` takes one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FinishAll {
    /// 1 to [`MAX_REPORTS`] reports, each as `/api/work/finish` takes it, all by one
    /// worker.
    #[schemars(length(min = 1, max = 64))]
    pub reports: Vec<FinishRequest>,
}

/// The service's answer to [`FinishAll`]: one per report, in their order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FinishAllReply {
    /// Each report's answer.
    pub answers: Vec<FinishAnswer>,
}

/// Whether one report of a [`FinishAll`] was taken.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FinishAnswer {
    /// The unit's job.
    pub job: String,
    /// The unit's number.
    pub seq: u64,
    /// `None` when taken; else why not (as `/api/work/finish`'s 409 says it): the unit
    /// is no longer the worker's, nothing was changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl FinishRequest {
    /// The report of unit `seq` of job `job`, which moved `files` entries and `bytes`
    /// bytes (the worker's name and the lease id are filled in when it is sent).
    pub fn done(job: &str, seq: u64, files: u64, bytes: u64) -> FinishRequest {
        FinishRequest {
            worker: String::new(),
            job: job.to_string(),
            seq,
            lease: String::new(),
            error: None,
            files,
            bytes,
            written: None,
            range: None,
        }
    }

    /// The report of unit `seq` of job `job`, which failed for `error` (one line).
    pub fn failed(job: &str, seq: u64, error: String) -> FinishRequest {
        FinishRequest {
            error: Some(error),
            ..FinishRequest::done(job, seq, 0, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reports_and_heartbeat_replies_keep_the_wire_format() {
        let mut done = FinishRequest::done("j1", 4, 2, 10);
        done.worker = "w".into();
        done.lease = "0f".into();
        assert_eq!(
            serde_json::to_value(&done).unwrap(),
            json!({"worker": "w", "job": "j1", "seq": 4, "lease": "0f", "error": null,
                   "files": 2, "bytes": 10})
        );
        let failed = FinishRequest::failed("j1", 4, "no space".into());
        assert_eq!(failed.error.as_deref(), Some("no space"));
        assert_eq!((failed.files, failed.bytes), (0, 0));
        let reply: HeartbeatReply = serde_json::from_value(
            json!({"held": [{"job": "j1", "seq": 4, "rate_limit": 5, "new": 1}]}),
        )
        .unwrap();
        assert_eq!(reply.held[0].rate_limit, 5);
        // A unit with no number is not a unit the worker holds: the reply is refused.
        let missing = json!({"held": [{"job": "j1", "rate_limit": 5}]});
        assert!(serde_json::from_value::<HeartbeatReply>(missing).is_err());
        assert_eq!(serde_json::to_string(&FinishReply {}).unwrap(), "{}");
    }
}
