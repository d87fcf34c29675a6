//! The worker's loop: claims units from the service, runs each as a task of its own,
//! extends their leases while they run, stops a unit whose lease it lost (expired, or
//! its job cancelled) or could not keep, and reports each unit's end.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hetch_engine::{RateLimiter, StopSender, StopSignal};
use hetch_service_api::client::ClientError;
use hetch_service_api::{
    ClaimRequest, ClaimedUnit, FinishAll, FinishRequest, HeartbeatRequest, UnitKey, WorkerAbout,
    MAX_REPORTS,
};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::lease::{Leases, Millis};
use crate::log::Log;
use crate::metrics::{Call, WorkerMetrics};
use crate::service::Service;
use crate::unit::Pace;
use crate::WorkerError;

/// What runs the units the loop is given: [`crate::UnitContext`], or a test's fake.
pub trait Execute: Clone + Send + Sync + 'static {
    /// Runs unit `u` as `p` paces it and returns its report for `/api/work/finish`
    /// (without the worker's name, which the loop adds).
    fn execute(self, u: ClaimedUnit, p: Pace) -> impl Future<Output = FinishRequest> + Send;
}

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// This worker's name, unique among the service's workers.
    pub name: String,
    /// Units run at once (1 to 64).
    pub units: u32,
    /// Leave after this long with nothing to do (`None`: never).
    pub idle_exit: Option<Duration>,
    /// This host's checks, which the worker shows the service.
    pub checks: Vec<String>,
    /// Where the loop says what it does (see [`crate::log`]).
    pub log: Log,
}

/// A unit being run (under one claim of it: a unit stopped here and claimed again
/// may briefly run twice, the old run ending).
struct Running {
    /// Its job and number.
    key: (String, u64),
    /// The id of the lease its claim gave, which every word about it carries.
    lease: String,
    stop: StopSender,
    /// Its share of its job's rate limit, as the service last said.
    rate: Arc<RateLimiter>,
}

/// The units running here, by claim (a number of this worker's own for each unit it
/// was given), and their leases: when to beat, what to stop (see
/// [`crate::lease`], which decides; this performs).
struct Units {
    running: HashMap<u64, Running>,
    leases: Leases<u64>,
    /// The origin of the leases' clock.
    clock: Instant,
}

impl Units {
    /// Milliseconds of the leases' clock at `t`.
    fn at(&self, t: Instant) -> Millis {
        t.saturating_duration_since(self.clock).as_millis() as Millis
    }

    /// How long a call to the service may take before the loop must look at the
    /// leases again.
    fn until_fence(&self) -> Duration {
        Duration::from_millis(self.leases.until_fence(self.at(Instant::now())))
    }

    /// Stops the units whose leases this worker could not keep (the service
    /// unreachable) and will soon run out.
    fn fence(&mut self, log: &Log) {
        for claim in self.leases.fence(self.at(Instant::now())) {
            let r = &self.running[&claim];
            r.stop.stop();
            let (job, seq) = &r.key;
            log.say(&format!(
                "stopping unit {seq} of job {job}: its lease could not be extended and is \
                 about to run out"
            ));
        }
    }
}

/// What the worker says of itself with each claim and heartbeat (shown by the
/// service's web interface; bounded as the service bounds it).
fn about(c: &LoopConfig, metrics: &WorkerMetrics) -> WorkerAbout {
    let checks: Vec<String> = c
        .checks
        .iter()
        .take(hetch_service_api::MAX_CHECKS)
        .map(|c| cut(c, hetch_service_api::MAX_CHECK))
        .collect();
    WorkerAbout {
        host: Some(cut(&crate::hostname(), 253)),
        capacity: Some(c.units.clamp(1, 64)),
        moved: Some(metrics.moved()),
        checks: Some(checks),
    }
}

/// How often an idle worker's claims say what it is (the service shows a worker not
/// heard of for 30 s as silent; heartbeats always say).
const ABOUT_EVERY: Duration = Duration::from_secs(5);

/// A claim for `room` units, saying what the worker is when it last did so
/// [`ABOUT_EVERY`] ago or more.
fn claim_body(
    name: &str,
    room: u32,
    last: &mut Option<Instant>,
    about: impl FnOnce() -> WorkerAbout,
) -> ClaimRequest {
    let mut body = ClaimRequest {
        worker: name.to_string(),
        max: room,
        about: None,
    };
    if last.is_none_or(|t| t.elapsed() >= ABOUT_EVERY) {
        *last = Some(Instant::now());
        body.about = Some(about());
    }
    body
}

/// `s` cut to at most `max` bytes, on a character boundary, without control characters.
fn cut(s: &str, max: usize) -> String {
    let mut out = String::new();
    for c in s.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

/// Why a call to the service gave nothing.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("no answer within {} ms", .0.as_millis())]
    Late(Duration),
}

/// `call`, given up after `limit`.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(CallError::Late(limit)),
    }
}

/// Claims units of `api` and runs them with `exec` until the service refuses this
/// worker, or it was idle for [`LoopConfig::idle_exit`] (`Ok`).
pub async fn claim_loop<S: Service, E: Execute>(
    c: &LoopConfig,
    api: Arc<S>,
    exec: E,
    metrics: &WorkerMetrics,
) -> Result<(), WorkerError> {
    let name = &c.name;
    // When a claim last said what this worker is (an idle worker asks every few
    // seconds at most; the service records a worker only when it says).
    let mut last_about: Option<Instant> = None;
    let mut units = Units {
        running: HashMap::new(),
        leases: Leases::default(),
        clock: Instant::now(),
    };
    let mut claims = 0u64;
    let mut tasks: JoinSet<(u64, FinishRequest)> = JoinSet::new();
    let mut idle_since = Instant::now();
    // Claims in a row that did not reach the service: the next look waits longer.
    let mut unreachable = 0u32;
    // Claims in a row that found no work: likewise.
    let mut idle = 0u32;
    // A unit that ended while the loop waited.
    let mut woken_by = None;
    loop {
        // Report what ended.
        let mut ended: Vec<_> = Option::take(&mut woken_by).into_iter().collect();
        while let Some(done) = tasks.try_join_next() {
            ended.push(done);
        }
        let mut reports = Vec::new();
        for done in ended {
            let (claim, mut report) = done?;
            let lost = units.leases.stopped(&claim).is_some();
            metrics.ended(claim, &report, lost);
            units.leases.ended(&claim);
            let Some(ended) = units.running.remove(&claim) else {
                continue;
            };
            if units.running.values().any(|r| r.key == ended.key) {
                // A run stopped here whose unit this worker was given again: the
                // report is the newer run's to make.
                continue;
            }
            report.worker = name.clone();
            report.lease = ended.lease;
            reports.push(report);
        }
        report_all(c, api.as_ref(), &mut units, metrics, reports).await;
        // Keep the leases; stop what is no longer ours.
        let sent = Instant::now();
        if units.leases.beat_due(units.at(sent)) {
            units.leases.beat_sent(units.at(sent));
            // Only the units running here (not being stopped) are kept, each with
            // what it moved so far (a unit claimed again here counts its newest run;
            // `running` is in claim order).
            let kept: BTreeMap<&(String, u64), u64> = units
                .leases
                .running()
                .map(|claim| (&units.running[claim].key, *claim))
                .collect();
            let kept: Vec<UnitKey> = kept
                .into_iter()
                .map(|((job, seq), claim)| UnitKey {
                    job: job.clone(),
                    seq: *seq,
                    lease: units.running[&claim].lease.clone(),
                    bytes: Some(metrics.unit_bytes(claim)),
                    lag: metrics.unit_lag(claim),
                })
                .collect();
            let body = HeartbeatRequest {
                worker: name.clone(),
                units: Some(kept),
                about: Some(about(c, metrics)),
            };
            let call = api.heartbeat(&body);
            match bounded(units.until_fence(), call).await {
                Ok(reply) => {
                    let held: HashMap<(String, u64), u64> = reply
                        .held
                        .into_iter()
                        .map(|h| ((h.job, h.seq), h.rate_limit))
                        .collect();
                    let sent = units.at(sent);
                    let Units {
                        running, leases, ..
                    } = &mut units;
                    let released = leases.answered(sent, |c| held.contains_key(&running[c].key));
                    for claim in released {
                        running[&claim].stop.stop();
                    }
                    for r in running.values() {
                        if let Some(&rate) = held.get(&r.key) {
                            r.rate.set_rate(rate);
                        }
                    }
                }
                Err(e) => {
                    metrics.call_failed(Call::Heartbeat);
                    c.log.say(&format!("heartbeat: {e}"));
                }
            }
        }
        units.fence(&c.log);
        // Take more when there is room.
        let room = c.units.saturating_sub(units.running.len() as u32);
        let mut claimed = 0;
        if room > 0 {
            let sent = Instant::now();
            let body = claim_body(name, room, &mut last_about, || about(c, metrics));
            match bounded(units.until_fence(), api.claim(&body)).await {
                Ok(given) => {
                    unreachable = 0;
                    idle = match given.is_empty() {
                        true => idle.saturating_add(1),
                        false => 0,
                    };
                    metrics.reachable(true);
                    claimed = given.len();
                    for u in given {
                        let (tx, rx) = StopSignal::new();
                        let rate = Arc::new(RateLimiter::adjustable(u.rate_limit));
                        claims += 1;
                        let r = Running {
                            key: (u.job.clone(), u.seq),
                            lease: u.lease.clone(),
                            stop: tx,
                            rate: rate.clone(),
                        };
                        units.running.insert(claims, r);
                        units.leases.claimed(claims, units.at(sent), u.lease_ms);
                        let claim = claims;
                        let progress = metrics.started(claim, &u);
                        let pace = Pace {
                            stop: rx,
                            rate,
                            progress,
                        };
                        let run = exec.clone().execute(u, pace);
                        tasks.spawn(async move { (claim, run.await) });
                    }
                }
                // A token the service does not take (or not for workers) will not
                // become good by asking again.
                Err(CallError::Client(e)) if e.is_not_allowed() => {
                    return Err(WorkerError::NotAllowed(e))
                }
                Err(e) => {
                    unreachable += 1;
                    metrics.call_failed(Call::Claim);
                    metrics.reachable(false);
                    c.log.say(&format!("claiming work: {e}"));
                }
            }
            // A claim answered late may be due for stopping already.
            units.fence(&c.log);
        }
        if claimed > 0 || !units.running.is_empty() {
            idle_since = Instant::now();
        } else if c.idle_exit.is_some_and(|d| idle_since.elapsed() >= d) {
            return Ok(());
        }
        if claimed == 0 {
            // Until a unit ends (to report it and take the next at once), or the next
            // look for work.
            let next = next_look(idle, unreachable).min(units.until_fence());
            match tasks.is_empty() {
                true => tokio::time::sleep(next).await,
                false => {
                    woken_by = tokio::time::timeout(next, tasks.join_next())
                        .await
                        .ok()
                        .flatten();
                    // A unit ended: room for work, asked for at once and then
                    // again soon.
                    if woken_by.is_some() {
                        idle = 0;
                    }
                }
            }
        }
    }
}

/// Reports the units that ended (`reports`): together when there are several (the
/// service takes them in one transaction per job), a range's parts for an object
/// store on their own (they may be large). A report refused or not answered is
/// only logged: the unit is the service's to hand out again; nothing here to undo.
async fn report_all<S: Service>(
    c: &LoopConfig,
    api: &S,
    units: &mut Units,
    metrics: &WorkerMetrics,
    reports: Vec<FinishRequest>,
) {
    let (alone, together): (Vec<_>, Vec<_>) = reports.into_iter().partition(|r| r.range.is_some());
    let mut calls: Vec<Vec<FinishRequest>> = alone.into_iter().map(|r| vec![r]).collect();
    let mut together = together.into_iter().peekable();
    while together.peek().is_some() {
        calls.push(together.by_ref().take(MAX_REPORTS).collect());
    }
    for mut reports in calls {
        let refused: Vec<(String, u64, String)> = match reports.len() {
            1 => {
                let r = reports.remove(0);
                match bounded(units.until_fence(), api.finish(&r)).await {
                    Ok(_) => Vec::new(),
                    Err(e) => vec![(r.job, r.seq, e.to_string())],
                }
            }
            _ => {
                let all = FinishAll { reports };
                match bounded(units.until_fence(), api.finish_all(&all)).await {
                    Ok(reply) => (reply.answers.into_iter())
                        .filter_map(|a| Some((a.job, a.seq, a.refused?)))
                        .collect(),
                    Err(e) => (all.reports.into_iter())
                        .map(|r| (r.job, r.seq, e.to_string()))
                        .collect(),
                }
            }
        };
        for (job, seq, why) in refused {
            metrics.call_failed(Call::Finish);
            c.log
                .say(&format!("reporting unit {seq} of job {job}: {why}"));
        }
        units.fence(&c.log);
    }
}

/// How long the loop waits before it asks for work again, after `idle` claims in a
/// row that found none and `unreachable` that did not reach the service: a quarter of
/// a second, doubling with each idle claim up to two seconds (so that idle workers do
/// not ask several times a second, while a new job still starts within two seconds),
/// and with each claim that did not reach the service up to four (so that an outage is
/// not a flood of log lines).
fn next_look(idle: u32, unreachable: u32) -> Duration {
    let quarter = Duration::from_millis(250);
    let idle = quarter * (1 << idle.min(3));
    let unreachable = quarter * (1 << unreachable.min(4));
    idle.max(unreachable)
}

#[cfg(test)]
mod tests {
    #[test]
    fn idle_claims_say_what_the_worker_is_only_every_few_seconds() {
        let about = || hetch_service_api::WorkerAbout {
            host: Some("h".into()),
            ..Default::default()
        };
        let mut last = None;
        let first = super::claim_body("w", 2, &mut last, about);
        assert_eq!(first.about.unwrap().host.as_deref(), Some("h"));
        let next = super::claim_body("w", 2, &mut last, about);
        assert!(next.about.is_none(), "{next:?}");
        last = Some(tokio::time::Instant::now() - super::ABOUT_EVERY);
        assert!(super::claim_body("w", 1, &mut last, Default::default)
            .about
            .is_some());
    }
}
