//! The database against its model: random sequences of claims, heartbeats, finishes
//! (one, or two in one call), reaps and clock steps by three workers, applied both to the database and to one
//! [`hetch_jobs::Unit`] per unit; after every step each unit's state, holder, deadline
//! and attempts must be the model's, and so must every answer.

use crate::common;

use common::{job_of, on_each, planner};
use std::collections::BTreeMap;

use hetch_jobdb::{Refused as DbRefused, Report, UnitLease, UnitOutcome};
use hetch_jobs::{lease, Unit, UnitState};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const TTL: u64 = 1_000;
const UNITS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    Claim(u8, usize),
    Heartbeat(u8),
    Finish(u8, usize, bool),
    /// Two reports in one call ([`hetch_jobdb::Db::finish_all`]), maybe of one unit.
    FinishTwo(u8, [(usize, bool); 2]),
    Reap,
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3, 1usize..3).prop_map(|(w, n)| Op::Claim(w, n)),
        (0u8..3).prop_map(Op::Heartbeat),
        (0u8..3, 0..UNITS, any::<bool>()).prop_map(|(w, u, ok)| Op::Finish(w, u, ok)),
        (
            0u8..3,
            [(0..UNITS, any::<bool>()), (0..UNITS, any::<bool>())]
        )
            .prop_map(|(w, two)| Op::FinishTwo(w, two)),
        Just(Op::Reap),
        // Steps that land exactly on a deadline, and around it, as well as anywhere.
        prop_oneof![Just(1), Just(TTL - 1), Just(TTL), 0u64..2 * TTL].prop_map(Op::Wait),
    ]
}

/// A report's outcome: done, or failed ("broke").
fn outcome(ok: bool) -> UnitOutcome {
    match ok {
        true => UnitOutcome::Done {
            files: 1,
            bytes: 1,
            written: 1,
        },
        false => UnitOutcome::Failed("broke".into()),
    }
}

/// The model's answer to `worker`'s report on unit `u`, as the database words it.
fn model_finish(u: &mut Unit, worker: &str, now: u64, ok: bool) -> Result<(), DbRefused> {
    let outcome = if ok { Ok(()) } else { Err("broke".into()) };
    u.finish(worker, now, outcome).map_err(|r| match r {
        lease::Refused::Expired => DbRefused::Expired,
        _ => DbRefused::NotOwner,
    })
}

/// What the database holds of a unit, in the model's terms.
fn as_model(
    state: &str,
    owner: Option<String>,
    until: Option<u64>,
    error: Option<String>,
) -> UnitState {
    match state {
        "ready" => UnitState::Ready,
        "leased" => UnitState::Leased(lease::Lease {
            owner: owner.unwrap(),
            until: until.unwrap(),
        }),
        "done" => UnitState::Done,
        "failed" => UnitState::Failed(error.unwrap_or_default()),
        other => panic!("unexpected unit state {other}"),
    }
}

#[test]
fn the_database_follows_the_lease_model() {
    let cases = std::env::var("HETCH_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    on_each(|db, _| async move {
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let strategy = (1u32..4, proptest::collection::vec(op(), 1..60));
        let case = std::sync::atomic::AtomicU64::new(0);
        let handle = tokio::runtime::Handle::current();
        // The runner is synchronous; each case blocks on the database from a thread
        // outside the runtime.
        let db2 = db.clone();
        std::thread::scope(|s| {
            s.spawn(|| {
                runner
                    .run(&strategy, |(max, ops)| {
                        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        handle.block_on(run_case(&db2, n, max, ops))
                    })
                    .unwrap();
            });
        });
    });
}

async fn run_case(
    db: &hetch_jobdb::Db,
    n: u64,
    max: u32,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let job = format!("case{n}");
    // Each case's clock starts after the previous case's, and the previous job is
    // cancelled, so that cases cannot see each other.
    let mut now = n * 1_000_000;
    job_of(
        db,
        &job,
        0,
        &[1; UNITS],
        planner(1, u64::MAX, 1, 1),
        max,
        now,
    )
    .await;
    let mut model: Vec<Unit> = (0..UNITS).map(|_| Unit::new(max)).collect();
    // When each unit's last attempt failed (`None`: never): with no wait between
    // attempts (see `NO_WAIT`), units never tried are handed out first, in order,
    // then those trying again, in the order they failed.
    let mut failed_at: Vec<Option<u64>> = vec![None; UNITS];
    let name = |w: u8| format!("w{w}");
    // The lease id each worker's latest claim of each unit gave: what it names the
    // unit with (the model knows holders by name; the database by name and id).
    let mut leases: BTreeMap<(u8, u64), String> = BTreeMap::new();
    let lease_of = |leases: &BTreeMap<(u8, u64), String>, w: u8, i: u64| UnitLease {
        job: job.clone(),
        seq: i,
        lease: leases
            .get(&(w, i))
            .cloned()
            .unwrap_or_else(|| "never".into()),
    };
    for op in ops {
        match op.clone() {
            Op::Claim(w, k) => {
                db.reap(now).await.unwrap();
                let got = db.claim(&name(w), now, TTL, k).await.unwrap();
                let mut want = Vec::new();
                for (i, u) in model.iter_mut().enumerate() {
                    if u.expire(now) {
                        failed_at[i] = Some(now);
                    }
                }
                let mut order: Vec<usize> = (0..UNITS).collect();
                order.sort_by_key(|&i| (failed_at[i], i));
                for i in order {
                    if want.len() < k && model[i].claim(&name(w), now, TTL).is_ok() {
                        want.push(i as u64);
                    }
                }
                want.sort();
                for c in &got {
                    leases.insert((w, c.seq), c.lease.clone());
                }
                let got: Vec<u64> = got.iter().map(|c| c.seq).collect();
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Heartbeat(w) => {
                let named: Vec<UnitLease> = (0..UNITS as u64)
                    .filter(|&i| leases.contains_key(&(w, i)))
                    .map(|i| lease_of(&leases, w, i))
                    .collect();
                let held = db
                    .heartbeat_units(&name(w), now, TTL, &named)
                    .await
                    .unwrap();
                let mut want = Vec::new();
                for (i, u) in model.iter_mut().enumerate() {
                    if u.heartbeat(&name(w), now, TTL).is_ok() {
                        want.push((job.clone(), i as u64));
                    }
                }
                prop_assert_eq!(held, want, "{:?}", op);
            }
            Op::Finish(w, i, ok) => {
                let got = db
                    .finish(&name(w), &lease_of(&leases, w, i as u64), now, &outcome(ok))
                    .await
                    .unwrap();
                let want = model_finish(&mut model[i], &name(w), now, ok);
                if want.is_ok() && !ok {
                    failed_at[i] = Some(now);
                }
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::FinishTwo(w, two) => {
                let keys = two.map(|(i, _)| lease_of(&leases, w, i as u64));
                let outcomes = two.map(|(_, ok)| outcome(ok));
                let reports: Vec<Report<'_>> = (keys.iter().zip(&outcomes))
                    .map(|(unit, outcome)| Report {
                        unit,
                        outcome,
                        range: None,
                    })
                    .collect();
                let got = db.finish_all(&name(w), now, &reports).await.unwrap();
                // As two reports one after the other.
                let mut want = Vec::new();
                for (i, ok) in two {
                    let taken = model_finish(&mut model[i], &name(w), now, ok);
                    if taken.is_ok() && !ok {
                        failed_at[i] = Some(now);
                    }
                    want.push(taken);
                }
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Reap => {
                let got = db.reap(now).await.unwrap();
                let mut want = 0;
                for (i, u) in model.iter_mut().enumerate() {
                    if u.expire(now) {
                        failed_at[i] = Some(now);
                        want += 1;
                    }
                }
                prop_assert_eq!(got, want, "{:?}", op);
            }
            Op::Wait(d) => now += d,
        }
        let rows = db.units(&job).await.unwrap();
        for (row, u) in rows.into_iter().zip(&model) {
            let state = as_model(&row.state, row.lease_owner, row.lease_until, row.error);
            prop_assert_eq!(&state, &u.state, "unit {} after {:?}", row.seq, op);
            prop_assert_eq!(row.attempts, u.attempts, "unit {} after {:?}", row.seq, op);
        }
        // The counts its row keeps are its units'.
        let kept = db.job(&job).await.unwrap().unwrap().units;
        let counted = db.count_units(&job).await.unwrap();
        prop_assert_eq!(kept, counted, "the job's counts after {:?}", op);
    }
    db.cancel(&job, now).await.unwrap();
    Ok(())
}
