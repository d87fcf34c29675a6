//! The claim loop against a service in memory (no network), on tokio's paused clock:
//! the units it is given are run and reported, a unit the service no longer holds is
//! stopped without its report passing for a newer run's, a service that stops
//! answering has the worker stop its units before their leases could run out, and an
//! idle worker asks for work less and less often.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hetch_jobs::UnitSpec;
use hetch_service_api::client::ClientError;
use hetch_service_api::{
    ClaimRequest, ClaimedUnit, FinishAll, FinishAllReply, FinishAnswer, FinishReply, FinishRequest,
    HeartbeatReply, HeartbeatRequest, HeldUnit, JobSpec,
};
use hetch_worker::claim_loop::{claim_loop, Execute, LoopConfig};
use hetch_worker::log::Log;
use hetch_worker::metrics::WorkerMetrics;
use hetch_worker::service::Service;
use hetch_worker::{Pace, WorkerError};
use tokio::time::Instant;

/// How long the fake service's leases last.
const LEASE: Duration = Duration::from_secs(10);

/// Unit `seq` of job `j`.
fn unit(seq: u64) -> ClaimedUnit {
    ClaimedUnit {
        job: "j".into(),
        seq,
        unit: UnitSpec::Files {
            first: 0,
            end: 1,
            bytes: 0,
        },
        spec: JobSpec::default(),
        until: 0,
        // Given at each claim (see `Fake::claim`).
        lease: String::new(),
        attempts: 0,
        lease_ms: LEASE.as_millis() as u64,
        rate_limit: 0,
    }
}

/// What the fake service knows and was told.
#[derive(Default)]
struct State {
    /// Units to hand out.
    queue: VecDeque<ClaimedUnit>,
    /// Units held for the worker, with the lease id each claim gave.
    held: HashMap<u64, String>,
    /// Reports received.
    finished: Vec<FinishRequest>,
    /// Reports per call that reported units, in order.
    report_calls: Vec<usize>,
    /// Claims asked for (answered or not).
    claims: u64,
    /// When the service last handed out a unit.
    claimed_at: Option<Instant>,
    /// No answer to anything from now on.
    silent: bool,
    /// Refuse the worker's token.
    refuse: bool,
    /// At the next heartbeat: release this unit, and queue it again (as if its lease
    /// had run out and it was handed to this worker anew).
    reassign: Option<u64>,
}

/// A service in memory.
#[derive(Default)]
struct Fake(Mutex<State>);

impl Fake {
    fn with(units: impl IntoIterator<Item = u64>) -> Arc<Fake> {
        let f = Fake::default();
        f.0.lock().unwrap().queue = units.into_iter().map(unit).collect();
        Arc::new(f)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    /// What `f` answers, unless the service is silent.
    fn answer<T>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, ClientError>,
    ) -> std::future::Ready<Result<T, ClientError>> {
        let mut s = self.state();
        std::future::ready(match s.silent {
            true => Err(ClientError::Unreachable("no answer".into())),
            false => f(&mut s),
        })
    }
}

impl Service for Fake {
    fn claim(
        &self,
        req: &ClaimRequest,
    ) -> impl Future<Output = Result<Vec<ClaimedUnit>, ClientError>> + Send {
        self.state().claims += 1;
        self.answer(|s| {
            if s.refuse {
                return Err(ClientError::NotAllowed("not a worker's token".into()));
            }
            let n = (req.max as usize).min(s.queue.len());
            let mut given: Vec<ClaimedUnit> = s.queue.drain(..n).collect();
            for u in &mut given {
                // A new id at each claim, as the service's: a unit given again has
                // another.
                u.lease = format!("{}-{}", u.seq, s.claims);
                s.held.insert(u.seq, u.lease.clone());
                s.claimed_at = Some(Instant::now());
            }
            Ok(given)
        })
    }

    fn heartbeat(
        &self,
        req: &HeartbeatRequest,
    ) -> impl Future<Output = Result<HeartbeatReply, ClientError>> + Send {
        self.answer(|s| {
            if let Some(seq) = s.reassign.filter(|q| s.held.contains_key(q)) {
                s.reassign = None;
                s.held.remove(&seq);
                s.queue.push_back(unit(seq));
            }
            let held = req
                .units
                .iter()
                .flatten()
                .filter(|k| s.held.get(&k.seq) == Some(&k.lease))
                .map(|k| HeldUnit {
                    job: k.job.clone(),
                    seq: k.seq,
                    rate_limit: 0,
                })
                .collect();
            Ok(HeartbeatReply { held })
        })
    }

    fn finish(
        &self,
        req: &FinishRequest,
    ) -> impl Future<Output = Result<FinishReply, ClientError>> + Send {
        self.answer(|s| {
            s.report_calls.push(1);
            match s.take(req) {
                Ok(()) => Ok(FinishReply {}),
                Err(message) => Err(ClientError::Service {
                    service: "fake".into(),
                    status: 409,
                    message,
                    field: None,
                }),
            }
        })
    }

    fn finish_all(
        &self,
        req: &FinishAll,
    ) -> impl Future<Output = Result<FinishAllReply, ClientError>> + Send {
        self.answer(|s| {
            s.report_calls.push(req.reports.len());
            let answers = (req.reports.iter())
                .map(|r| FinishAnswer {
                    job: r.job.clone(),
                    seq: r.seq,
                    refused: s.take(r).err(),
                })
                .collect();
            Ok(FinishAllReply { answers })
        })
    }
}

impl State {
    /// Takes report `req`, or says why not: taken only with the lease id of the
    /// unit's latest claim.
    fn take(&mut self, req: &FinishRequest) -> Result<(), String> {
        if self.held.get(&req.seq) != Some(&req.lease) {
            return Err(format!("unit {} is not yours", req.seq));
        }
        self.held.remove(&req.seq);
        self.finished.push(req.clone());
        Ok(())
    }
}

/// How the fake units run.
#[derive(Clone, Copy)]
enum Plays {
    /// Done after a second.
    Quick,
    /// Until stopped, then a second more to end (failed: "stopped"); a unit's second
    /// run is done after five seconds.
    UntilStopped,
}

/// Runs units as [`Plays`] says, noting when each run started and was stopped.
#[derive(Clone)]
struct FakeUnits {
    plays: Plays,
    /// Per run, in order of start: its unit and when it saw its stop.
    runs: Arc<Mutex<Vec<Run>>>,
}

/// A run of a unit: its number, and when it saw its stop.
type Run = (u64, Option<Instant>);

impl FakeUnits {
    fn new(plays: Plays) -> FakeUnits {
        FakeUnits {
            plays,
            runs: Default::default(),
        }
    }

    fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }
}

impl Execute for FakeUnits {
    async fn execute(self, u: ClaimedUnit, p: Pace) -> FinishRequest {
        let (run, earlier) = {
            let mut runs = self.runs.lock().unwrap();
            let earlier = runs.iter().filter(|(seq, _)| *seq == u.seq).count();
            runs.push((u.seq, None));
            (runs.len() - 1, earlier)
        };
        let quick = match self.plays {
            Plays::Quick => Some(Duration::from_secs(1)),
            Plays::UntilStopped if earlier > 0 => Some(Duration::from_secs(5)),
            Plays::UntilStopped => None,
        };
        if let Some(d) = quick {
            tokio::time::sleep(d).await;
            return FinishRequest::done(&u.job, u.seq, 1, 10);
        }
        p.stop.raised().await;
        self.runs.lock().unwrap()[run].1 = Some(Instant::now());
        tokio::time::sleep(Duration::from_secs(1)).await;
        FinishRequest::failed(&u.job, u.seq, "stopped".into())
    }
}

fn config(units: u32) -> LoopConfig {
    LoopConfig {
        name: "w".into(),
        units,
        idle_exit: Some(Duration::from_secs(2)),
        checks: Vec::new(),
        log: Log::new(|_| {}),
    }
}

/// A config whose log lines are kept.
fn logged(units: u32) -> (LoopConfig, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = lines.clone();
    let log = Log::new(move |line| kept.lock().unwrap().push(line.to_string()));
    (
        LoopConfig {
            log,
            ..config(units)
        },
        lines,
    )
}

#[tokio::test(start_paused = true)]
async fn units_claimed_are_run_and_reported() {
    let service = Fake::with([1, 2, 3]);
    let units = FakeUnits::new(Plays::Quick);
    let metrics = WorkerMetrics::default();
    claim_loop(&config(2), service.clone(), units.clone(), &metrics)
        .await
        .unwrap();
    let s = service.state();
    let mut done: Vec<u64> = s.finished.iter().map(|r| r.seq).collect();
    done.sort();
    assert_eq!(done, [1, 2, 3]);
    for r in &s.finished {
        assert_eq!((r.worker.as_str(), &r.error, r.files), ("w", &None, 1));
    }
    assert_eq!(units.runs().len(), 3);
    assert!(s.held.is_empty());
}

#[tokio::test(start_paused = true)]
async fn units_that_end_together_are_reported_in_one_call() {
    // Five units claimed at once all end a second later.
    let service = Fake::with([1, 2, 3, 4, 5]);
    let units = FakeUnits::new(Plays::Quick);
    let metrics = WorkerMetrics::default();
    claim_loop(&config(5), service.clone(), units.clone(), &metrics)
        .await
        .unwrap();
    let s = service.state();
    assert_eq!(s.finished.len(), 5, "{:?}", s.finished);
    assert!(
        s.report_calls.len() < 5 && s.report_calls.iter().sum::<usize>() == 5,
        "reports per call: {:?}",
        s.report_calls
    );
    assert!(s.held.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_unit_no_longer_held_is_stopped_and_its_report_is_not_the_newer_runs() {
    let service = Fake::with([1]);
    service.state().reassign = Some(1);
    let units = FakeUnits::new(Plays::UntilStopped);
    let metrics = WorkerMetrics::default();
    claim_loop(&config(2), service.clone(), units.clone(), &metrics)
        .await
        .unwrap();
    let runs = units.runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs[0].1.is_some(), "the first run was stopped: {runs:?}");
    assert!(runs[1].1.is_none(), "the second run was not: {runs:?}");
    // One report, the newer run's: the stopped run's "stopped" is not sent for it.
    let s = service.state();
    assert_eq!(s.finished.len(), 1, "{:?}", s.finished);
    assert_eq!(s.finished[0].error, None);
}

#[tokio::test(start_paused = true)]
async fn a_silent_service_has_units_stopped_before_their_leases_run_out() {
    let service = Fake::with([1, 2]);
    let units = FakeUnits::new(Plays::UntilStopped);
    let metrics = WorkerMetrics::default();
    let (c, lines) = logged(2);
    let worker = claim_loop(&c, service.clone(), units.clone(), &metrics);
    let silence = async {
        // Once both units run, the service says nothing more.
        while units.runs().len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        service.state().silent = true;
    };
    let (ended, ()) = tokio::join!(worker, silence);
    ended.unwrap();
    let claimed = service.state().claimed_at.unwrap();
    let runs = units.runs();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for (seq, stopped) in runs {
        let stopped = stopped.unwrap_or_else(|| panic!("unit {seq} was not stopped"));
        assert!(
            stopped < claimed + LEASE,
            "unit {seq} stopped {:?} after its claim",
            stopped - claimed
        );
    }
    assert!(service.state().finished.is_empty());
    // The operator is told why, once per unit.
    let lines = lines.lock().unwrap();
    let stopping: Vec<_> = lines
        .iter()
        .filter(|l| l.starts_with("stopping unit ") && l.contains("lease could not be extended"))
        .collect();
    assert_eq!(stopping.len(), 2, "{lines:?}");
}

#[tokio::test(start_paused = true)]
async fn a_refused_token_ends_the_worker() {
    let service = Fake::with([1]);
    service.state().refuse = true;
    let units = FakeUnits::new(Plays::Quick);
    let metrics = WorkerMetrics::default();
    let e = claim_loop(&config(1), service, units.clone(), &metrics)
        .await
        .unwrap_err();
    assert!(matches!(e, WorkerError::NotAllowed(_)), "{e:?}");
    assert!(units.runs().is_empty());
}

/// A worker with nothing to do asks less and less often (up to once every two
/// seconds, where it used to ask four times a second), and still takes work that
/// appears.
#[tokio::test(start_paused = true)]
async fn an_idle_worker_backs_off_and_still_takes_new_work() {
    let service = Fake::with([]);
    let units = FakeUnits::new(Plays::Quick);
    let metrics = WorkerMetrics::default();
    let c = LoopConfig {
        idle_exit: Some(Duration::from_secs(60)),
        ..config(2)
    };
    let worker = claim_loop(&c, service.clone(), units.clone(), &metrics);
    let then_work = async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        let mut s = service.state();
        s.queue.push_back(unit(1));
        s.claims
    };
    let (ended, idle_claims) = tokio::join!(worker, then_work);
    ended.unwrap();
    // Four a second would be 120; backing off to one every two seconds, about 17.
    assert!(
        (5..=20).contains(&idle_claims),
        "{idle_claims} claims in 30 idle seconds"
    );
    assert_eq!(units.runs().len(), 1);
    assert_eq!(service.state().finished.len(), 1);
}
