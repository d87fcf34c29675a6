//! What a worker's metrics endpoint (`hetch worker --metrics ADDR`) exposes: units running and finished by kind and
//! outcome, what they moved (bytes advancing while they run, files as each ends),
//! calls to the service that failed, and per job what its units running here now are
//! doing.
//!
//! Labels come from finite sets written here, except `job`: a job id from the
//! service, used only once checked as the worker checks it before naming it in a URL
//! (letters and digits, at most 64), and only for jobs with a unit running here now:
//! at most `--units` (64) job series at any time, gone when their last unit ends.
//! Never a path or anything else a job's owner chose.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use hetch_engine::{Progress, Tally, Tracked};
use hetch_jobs::UnitSpec;
use hetch_metrics::{Exposition, Kind};
use hetch_proto::Summary;
use hetch_service_api::{ClaimedUnit, FinishRequest};

/// Kinds of unit, in the order of [`KINDS`].
#[derive(Debug, Clone, Copy)]
enum UnitKind {
    Files,
    Range,
    Commit,
    Relay,
    Stream,
    Delete,
}

const KINDS: [&str; 6] = ["files", "range", "commit", "relay", "stream", "delete"];

/// How a unit ended, in the order of [`OUTCOMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Reported done.
    Done,
    /// Reported failed.
    Failed,
    /// Stopped here: the service no longer held it for this worker (its lease ran out
    /// or its job was cancelled), or its lease could not be extended in time.
    Stopped,
}

const OUTCOMES: [&str; 3] = ["done", "failed", "stopped"];

/// Calls to the service, in the order of [`CALLS`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Call {
    /// Asking for work.
    Claim,
    /// Extending the leases of the units running.
    Heartbeat,
    /// Reporting a unit's end.
    Finish,
}

const CALLS: [&str; 3] = ["claim", "heartbeat", "finish"];

/// A unit running here.
struct UnitRun {
    kind: UnitKind,
    /// Its job's id, when it is one the worker would name in a URL.
    job: Option<String>,
    /// What it moved so far.
    progress: Arc<Progress>,
    /// Its share of the totals.
    tracked: Tracked,
}

/// A worker's counters, from its start.
#[derive(Default)]
pub struct WorkerMetrics {
    /// Bytes of units, live.
    moved: Arc<Tally>,
    /// Files of units done, as they report them (as the service counts a job's files).
    /// Not live: a unit that fails part way (to be done again, here or elsewhere) would
    /// have counted files the service never counts for it, and its retry counts them
    /// again; its bytes do count, being traffic that happened.
    files: AtomicU64,
    /// Units running, by claim.
    running: Mutex<HashMap<u64, UnitRun>>,
    /// Units ended, by kind and outcome.
    ended: [[AtomicU64; 3]; KINDS.len()],
    /// Calls to the service that failed, by call.
    failed_calls: [AtomicU64; 3],
    /// Whether the last claim could not reach the service (0 or 1).
    unreachable: AtomicU64,
    /// Of units ended: block payload bytes they sent on data streams (after
    /// compression), and blocks they sent compressed.
    sent: AtomicU64,
    compressed: AtomicU64,
}

impl WorkerMetrics {
    /// Unit `u`, claimed as number `claim`, starts: what it moves counts from now on,
    /// into the progress returned.
    pub(crate) fn started(&self, claim: u64, u: &ClaimedUnit) -> Arc<Progress> {
        let kind = match u.unit {
            UnitSpec::Files { .. } => UnitKind::Files,
            UnitSpec::Range { .. } => UnitKind::Range,
            UnitSpec::Commit { .. } => UnitKind::Commit,
            UnitSpec::Relay { .. } => UnitKind::Relay,
            UnitSpec::Stream { .. } => UnitKind::Stream,
            UnitSpec::Delete {} => UnitKind::Delete,
        };
        let progress = Arc::new(Progress::default());
        let run = UnitRun {
            kind,
            job: hetch_service_api::client::path_segment(&u.job)
                .ok()
                .map(str::to_string),
            progress: progress.clone(),
            tracked: self.moved.track(progress.clone()),
        };
        self.running
            .lock()
            .expect("metrics lock")
            .insert(claim, run);
        progress
    }

    /// Claim `claim`'s unit ended with `report` (its `/api/work/finish` body); `lost`
    /// when it was stopped for its lease. A unit done counts the files it reports (the
    /// service's count: directories of its listing are files) and at least the bytes.
    pub(crate) fn ended(&self, claim: u64, report: &FinishRequest, lost: bool) {
        let Some(run) = self.running.lock().expect("metrics lock").remove(&claim) else {
            return;
        };
        let outcome = match (report.error.is_none(), lost) {
            (true, _) => Outcome::Done,
            (false, true) => Outcome::Stopped,
            (false, false) => Outcome::Failed,
        };
        let floor = match outcome {
            Outcome::Done => {
                self.files.fetch_add(report.files, Relaxed);
                Summary {
                    bytes: report.bytes,
                    ..Summary::default()
                }
            }
            _ => Summary::default(),
        };
        run.tracked.end(floor);
        self.ended[run.kind as usize][outcome as usize].fetch_add(1, Relaxed);
        let p = &run.progress;
        self.sent.fetch_add(p.wire_bytes.load(Relaxed), Relaxed);
        self.compressed
            .fetch_add(p.compressed_blocks.load(Relaxed), Relaxed);
    }

    /// A call to the service failed (refused, or no answer in time).
    pub(crate) fn call_failed(&self, call: Call) {
        self.failed_calls[call as usize].fetch_add(1, Relaxed);
    }

    /// Whether the service could be reached when work was last asked for.
    pub(crate) fn reachable(&self, yes: bool) {
        self.unreachable.store(u64::from(!yes), Relaxed);
    }

    /// Bytes moved by units since the worker started, counted as they run.
    pub(crate) fn moved(&self) -> u64 {
        self.moved.totals().bytes
    }

    /// The lag claim `claim`'s unit has seen so far, if it follows growing files
    /// and has shipped any of their bytes.
    pub(crate) fn unit_lag(&self, claim: u64) -> Option<hetch_service_api::LagView> {
        let running = self.running.lock().expect("metrics lock");
        let run = running.get(&claim)?;
        let summary = run.progress.lag.lock().expect("lag lock").summary()?;
        Some(hetch_service_api::LagView {
            p50_ms: summary.p50_ms.round() as u64,
            p99_ms: summary.p99_ms.round() as u64,
        })
    }

    /// Bytes claim `claim`'s unit moved so far (0 once it ended).
    pub(crate) fn unit_bytes(&self, claim: u64) -> u64 {
        let running = self.running.lock().expect("metrics lock");
        running
            .get(&claim)
            .map_or(0, |run| run.progress.summary().bytes)
    }

    /// The exposition.
    pub fn render(&self) -> String {
        let mut e = Exposition::new();
        let mut by_kind = [0u64; KINDS.len()];
        // Per job: (units running here, bytes they moved so far).
        let mut jobs: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let (mut sent, mut compressed) = (self.sent.load(Relaxed), self.compressed.load(Relaxed));
        for run in self.running.lock().expect("metrics lock").values() {
            by_kind[run.kind as usize] += 1;
            sent += run.progress.wire_bytes.load(Relaxed);
            compressed += run.progress.compressed_blocks.load(Relaxed);
            if let Some(job) = &run.job {
                let j = jobs.entry(job.clone()).or_default();
                j.0 += 1;
                j.1 += run.progress.summary().bytes;
            }
        }
        let mut f = e.family(
            "hetch_worker_units_running",
            Kind::Gauge,
            "Units running here, by kind (files: a batch of files; range: blocks of a \
             large file; commit: checking and renaming a large file; relay: a source \
             server pushing to the destination server).",
        );
        for (kind, n) in KINDS.iter().zip(by_kind) {
            f.sample(&[("kind", kind)], n);
        }
        let mut f = e.family(
            "hetch_worker_units_ended_total",
            Kind::Counter,
            "Units ended here, by kind and outcome (stopped: its lease was lost, \
             the service having given it up or this worker unable to extend it).",
        );
        for (kind, by_outcome) in KINDS.iter().zip(&self.ended) {
            for (outcome, n) in OUTCOMES.iter().zip(by_outcome) {
                f.sample(&[("kind", kind), ("outcome", outcome)], n.load(Relaxed));
            }
        }
        let moved = self.moved.totals();
        e.single(
            "hetch_worker_bytes_total",
            Kind::Counter,
            "Bytes moved by units, counted as they run (a unit done counts at least the \
             bytes it reports to the service): rate() of it is the throughput.",
            moved.bytes,
        );
        e.single(
            "hetch_worker_wire_bytes_total",
            Kind::Counter,
            "Block payload bytes units sent on data streams, after compression (what \
             a link billed per byte counts; against hetch_worker_bytes_total it is the \
             compression ratio).",
            sent,
        );
        e.single(
            "hetch_worker_compressed_blocks_total",
            Kind::Counter,
            "Blocks units sent compressed (--compress).",
            compressed,
        );
        e.single(
            "hetch_worker_files_total",
            Kind::Counter,
            "Files moved by units done here, counted as each unit ends (the entries of \
             its listing it reports, directories included, as the service counts a \
             job's files).",
            self.files.load(Relaxed),
        );
        let mut f = e.family(
            "hetch_worker_service_calls_failed_total",
            Kind::Counter,
            "Calls to the service that failed (refused, unreachable or too slow), by call.",
        );
        for (call, n) in CALLS.iter().zip(&self.failed_calls) {
            f.sample(&[("call", call)], n.load(Relaxed));
        }
        e.single(
            "hetch_worker_service_unreachable",
            Kind::Gauge,
            "1 while the last request for work did not reach the service.",
            self.unreachable.load(Relaxed),
        );
        let mut f = e.family(
            "hetch_worker_job_units_running",
            Kind::Gauge,
            "Units running here, by job (only jobs with a unit running here now).",
        );
        for (job, (units, _)) in &jobs {
            f.sample(&[("job", job)], *units);
        }
        let mut f = e.family(
            "hetch_worker_job_bytes_running",
            Kind::Gauge,
            "Bytes moved so far by the units running here, by job (only jobs with a \
             unit running here now).",
        );
        for (job, (_, bytes)) in &jobs {
            f.sample(&[("job", job)], *bytes);
        }
        e.into_text()
    }
}
