//! What the web interface shows live, pushed to browsers as server-sent events.
//!
//! One task per service instance reads the newest jobs (with their leased units'
//! progress) and the workers once a second, keeps a short history of each job's
//! bytes to give rates, ETAs and the throughput chart, and publishes a snapshot. Each
//! browser's event stream sends the part of each new snapshot its caller may see, and
//! only when that part changed: the database is read once a second however many tabs
//! are open. Memory is bounded by the jobs shown and the history kept per job.

// `writeln!` to stderr, not `eprintln!`: that panics when stderr is a closed pipe or full.
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use hetch_jobdb::{LiveJob, WorkerRow};
pub use hetch_service_api::web::{JobSummary, LiveSnapshot, NodeView};
use hetch_service_api::DeliveryView;
use serde::Serialize;
use tokio::sync::watch;

use crate::auth::Caller;
use crate::{now_ms, AppState};

/// How often the snapshot is taken.
pub const TICK: Duration = Duration::from_secs(1);
/// Most jobs not yet ended a snapshot holds (the newest).
pub const MAX_UNFINISHED: u64 = 1000;
/// Most ended jobs a snapshot holds (the newest).
pub const MAX_FINISHED: u64 = 200;
/// Samples of history kept per job: ten minutes at one a second (older ones are
/// thinned to one in two, so a longer job keeps its whole run at coarser steps).
pub const MAX_SAMPLES: usize = 600;
/// Rates are over this window.
const RATE_WINDOW_MS: u64 = 10_000;
/// Workers not heard from for this long are not shown.
const WORKER_HORIZON_MS: u64 = 24 * 3600 * 1000;
/// A worker not heard from for this long is shown as silent.
pub const SILENT_AFTER_MS: u64 = 30_000;

/// What one tick saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// When, ms since the epoch.
    pub at: u64,
    /// The newest jobs.
    pub jobs: Vec<JobSummary>,
    /// Workers heard from in the last day.
    pub nodes: Vec<NodeView>,
    /// The newest webhook deliveries, each with its job's submitter.
    pub deliveries: Vec<(String, DeliveryView)>,
}

/// Samples of one counter: (time, value), oldest first.
#[derive(Debug, Default)]
struct History(VecDeque<(u64, u64)>);

impl History {
    fn push(&mut self, at: u64, value: u64) {
        if self.0.len() >= MAX_SAMPLES {
            // Keep every other sample: the whole run at half the resolution.
            let kept: VecDeque<_> = self.0.iter().copied().step_by(2).collect();
            self.0 = kept;
        }
        self.0.push_back((at, value));
    }

    /// Per second over the last [`RATE_WINDOW_MS`] (0 if it went down: a retried unit
    /// gave back its progress, or a worker restarted).
    fn rate(&self) -> u64 {
        let Some(&(t1, v1)) = self.0.back() else {
            return 0;
        };
        let from = self.0.iter().find(|(t, _)| *t + RATE_WINDOW_MS >= t1);
        match from {
            Some(&(t0, v0)) if t1 > t0 => v1.saturating_sub(v0).saturating_mul(1000) / (t1 - t0),
            _ => 0,
        }
    }
}

/// The live state and its history.
#[derive(Debug)]
pub struct Hub {
    tx: watch::Sender<Arc<Snapshot>>,
    jobs: Mutex<HashMap<String, History>>,
    workers: Mutex<HashMap<String, History>>,
    streams: Slots,
    deliveries: Mutex<Vec<(String, DeliveryView)>>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            tx: watch::Sender::new(Arc::new(Snapshot::default())),
            jobs: Mutex::default(),
            workers: Mutex::default(),
            streams: Slots::default(),
            deliveries: Mutex::default(),
        }
    }
}

impl Hub {
    /// The newest snapshot.
    pub fn latest(&self) -> Arc<Snapshot> {
        self.tx.borrow().clone()
    }

    /// Job `id`'s samples of bytes moved, oldest first (none once it left the
    /// snapshot).
    pub fn samples(&self, id: &str) -> Vec<(u64, u64)> {
        let jobs = self.jobs.lock().expect("hub lock");
        jobs.get(id)
            .map(|h| h.0.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Takes a snapshot from what the database says now.
    pub fn update(&self, at: u64, live: Vec<LiveJob>, workers: Vec<WorkerRow>) {
        let jobs = self.summarize_jobs(at, live);
        let nodes = self.summarize_workers(at, workers);
        let deliveries = self.deliveries.lock().expect("hub lock").clone();
        self.tx.send_replace(Arc::new(Snapshot {
            at,
            jobs,
            nodes,
            deliveries,
        }));
    }

    /// Sets the webhook deliveries the next snapshots show.
    pub fn set_deliveries(&self, recent: Vec<hetch_jobdb::Delivery>) {
        let shown = recent
            .iter()
            .map(|d| (d.submitted_by.clone(), crate::notify::view(d)))
            .collect();
        *self.deliveries.lock().expect("hub lock") = shown;
    }

    fn summarize_jobs(&self, at: u64, live: Vec<LiveJob>) -> Vec<JobSummary> {
        let mut histories = self.jobs.lock().expect("hub lock");
        histories.retain(|id, _| live.iter().any(|l| &l.job.id == id));
        live.into_iter()
            .map(|l| {
                let j = l.job;
                // A damaged row is shown, with what could be read, and says so.
                let error = j.error_shown();
                // A retried unit's bytes may count twice until it ends: never past
                // the listing's total (a job not listed, a relay or a stream, has
                // none: each unit's progress is bounded by the database instead).
                let live = j.bytes_done.saturating_add(l.in_flight);
                let done = match j.bytes {
                    0 => live,
                    all => live.min(all.max(j.bytes_done)),
                };
                let history = histories.entry(j.id.clone()).or_default();
                let moving = !j.state.is_final();
                if moving || history.0.back().is_none_or(|&(_, v)| v != done) {
                    history.push(at, done);
                }
                let rate = if moving { history.rate() } else { 0 };
                let left = j.bytes.saturating_sub(done);
                let spec = serde_json::from_str::<crate::api::JobSpec>(&j.spec).ok();
                let (source, sources, dest) = match spec {
                    Some(s) => (
                        s.sources.first().cloned().unwrap_or_default(),
                        s.sources.len(),
                        s.dest,
                    ),
                    None => (String::new(), 0, String::new()),
                };
                JobSummary {
                    state: j.state.as_str().to_string(),
                    submitted_by: j.submitted_by,
                    source,
                    sources,
                    dest,
                    priority: j.priority,
                    files: j.files,
                    bytes: j.bytes,
                    files_done: j.files_done,
                    bytes_done: done,
                    rate,
                    eta_s: (rate > 0 && left > 0).then(|| left.div_ceil(rate)),
                    created: j.created,
                    started: j.started,
                    finished: j.finished,
                    error,
                    id: j.id,
                }
            })
            .collect()
    }

    fn summarize_workers(&self, at: u64, workers: Vec<WorkerRow>) -> Vec<NodeView> {
        let mut histories = self.workers.lock().expect("hub lock");
        histories.retain(|name, _| workers.iter().any(|w| &w.name == name));
        workers
            .into_iter()
            .map(|w| {
                let history = histories.entry(w.name.clone()).or_default();
                history.push(at, w.moved);
                let silent = at.saturating_sub(w.last_seen) >= SILENT_AFTER_MS;
                NodeView {
                    rate: if silent { 0 } else { history.rate() },
                    checks: serde_json::from_str(&w.checks).unwrap_or_default(),
                    name: w.name,
                    host: w.host,
                    capacity: w.capacity,
                    last_seen: w.last_seen,
                    silent,
                    active: w.active,
                }
            })
            .collect()
    }

    /// A stream of what `caller` may see of each new snapshot: the newest at once,
    /// then each that differs from the last sent; it ends at `ends` (ms since the
    /// epoch: the session's or the token's end), so that an open tab does not outlive
    /// its login. Refused (with why) when the caller, or everyone, holds as many
    /// streams as allowed: each holds one of the service's connections.
    pub fn subscribe(
        &self,
        caller: Caller,
        ends: Option<u64>,
    ) -> Result<Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>>, String> {
        let slot = StreamSlot::take(&self.streams, caller.name())?;
        let mut rx = self.tx.subscribe();
        rx.mark_changed();
        let left = ends.map(|e| Duration::from_millis(e.saturating_sub(now_ms())));
        let deadline =
            tokio::time::Instant::now() + left.unwrap_or(Duration::from_secs(u32::MAX.into()));
        let stream = futures_util::stream::unfold(
            (rx, caller, String::new(), slot),
            move |(mut rx, caller, last, slot)| async move {
                loop {
                    tokio::time::timeout_at(deadline, rx.changed())
                        .await
                        .ok()?
                        .ok()?;
                    let snap = rx.borrow_and_update().clone();
                    let text =
                        serde_json::to_string(&visible(&snap, &caller)).expect("a plain struct");
                    if text != last {
                        let event = Event::default().event("snapshot").data(&text);
                        return Some((Ok(event), (rx, caller, text, slot)));
                    }
                }
            },
        );
        Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
    }
}

/// Most event streams one caller may hold at once.
pub const STREAMS_PER_CALLER: u32 = 8;
/// Most event streams at once, of the service's 512 connections (the rest are for
/// the API and the workers).
pub const MAX_STREAMS: u32 = 256;

/// Streams held, by caller.
type Slots = Arc<Mutex<HashMap<String, u32>>>;

/// One stream's place among [`MAX_STREAMS`]; given back when the stream ends.
struct StreamSlot {
    slots: Slots,
    caller: String,
}

impl StreamSlot {
    fn take(slots: &Slots, caller: &str) -> Result<StreamSlot, String> {
        let mut held = slots.lock().expect("slots lock");
        let total: u32 = held.values().sum();
        let mine = held.get(caller).copied().unwrap_or(0);
        if mine >= STREAMS_PER_CALLER {
            return Err(format!(
                "at most {STREAMS_PER_CALLER} live views per caller: close a tab"
            ));
        }
        if total >= MAX_STREAMS {
            return Err(format!("at most {MAX_STREAMS} live views at once"));
        }
        held.insert(caller.to_string(), mine + 1);
        Ok(StreamSlot {
            slots: slots.clone(),
            caller: caller.to_string(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self.slots.lock().expect("slots lock");
        if let Some(n) = held.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.caller);
            }
        }
    }
}

/// The part of `snap` that `caller` may see: their own jobs (every job for the
/// operator), and the nodes.
pub fn visible(snap: &Snapshot, caller: &Caller) -> LiveSnapshot {
    LiveSnapshot {
        jobs: snap
            .jobs
            .iter()
            .filter(|j| caller.may_see(&j.submitted_by))
            .cloned()
            .collect(),
        nodes: snap.nodes.clone(),
        deliveries: snap
            .deliveries
            .iter()
            .filter(|(by, _)| caller.may_see(by))
            .map(|(_, d)| d.clone())
            .collect(),
    }
}

/// Takes a snapshot every [`TICK`] until the service stops.
pub async fn run(state: Arc<AppState>) {
    loop {
        let now = now_ms();
        let live = state.db.live_jobs(MAX_UNFINISHED, MAX_FINISHED).await;
        let workers = state
            .db
            .workers(now.saturating_sub(WORKER_HORIZON_MS))
            .await;
        match state.db.recent_deliveries(crate::notify::SHOWN).await {
            Ok(d) => state.hub.set_deliveries(d),
            Err(e) => _ = writeln!(std::io::stderr(), "hetch service: reading deliveries: {e}"),
        }
        match (live, workers) {
            (Ok(live), Ok(workers)) => state.hub.update(now, live, workers),
            (Err(e), _) | (_, Err(e)) => {
                _ = writeln!(std::io::stderr(), "hetch service: reading live state: {e}")
            }
        }
        tokio::time::sleep(TICK).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_the_last_ten_seconds_and_history_stays_bounded() {
        let mut h = History::default();
        assert_eq!(h.rate(), 0);
        for s in 0..=30u64 {
            // 1 MB a second for 20 s, then 3 MB a second.
            let v = if s <= 20 {
                s * 1_000_000
            } else {
                20_000_000 + (s - 20) * 3_000_000
            };
            h.push(s * 1000, v);
        }
        assert_eq!(h.rate(), 3_000_000);
        // A unit gave its progress back (run again): no negative rate.
        h.push(31_000, 0);
        assert_eq!(h.rate(), 0);
        for s in 0..(3 * MAX_SAMPLES as u64) {
            h.push(40_000 + s * 1000, s);
        }
        assert!(h.0.len() <= MAX_SAMPLES);
        // Thinned, not cut: the first sample is still there.
        assert_eq!(h.0.front().map(|s| s.0), Some(0));
    }
}
