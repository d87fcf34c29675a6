//! The coordinator under faults: waits between a unit's attempts, cancels racing
//! workers' reports on PostgreSQL without a deadlock, and a job's counters true after
//! ranges are redone.

use crate::common;

use common::{job_of, on_each, planner, unit_counts};
use hetch_jobdb::{Backend, Db, JobState, Patience, Refused, Report, UnitOutcome};

const TTL: u64 = 30_000;

fn broke() -> UnitOutcome {
    UnitOutcome::Failed("destination full".into())
}

#[test]
fn a_failed_unit_waits_longer_after_each_attempt_before_it_goes_again() {
    on_each(|db, _| async move {
        let db = db.with_patience(Patience {
            first_ms: 1_000,
            most_ms: 5_000,
        });
        job_of(&db, "j", 0, &[1], planner(1, u64::MAX, 1, 1), 4, 0).await;
        // Attempt 1 fails at 10: nothing to hand out until 1 s later.
        let u = db.claim("w", 0, TTL, 1).await.unwrap().remove(0);
        db.finish("w", &u.held(), 10, &broke())
            .await
            .unwrap()
            .unwrap();
        assert!(db.claim("w", 1_009, TTL, 1).await.unwrap().is_empty());
        let u = db.claim("w", 1_010, TTL, 1).await.unwrap().remove(0);
        assert_eq!(u.attempts, 1);
        // Attempt 2 fails at 2,000: three times as long.
        db.finish("w", &u.held(), 2_000, &broke())
            .await
            .unwrap()
            .unwrap();
        assert!(db.claim("w", 4_999, TTL, 1).await.unwrap().is_empty());
        // Attempt 3's lease runs out (its worker stopped): the reaper fails it, and
        // the wait is the longest, 5 s, not 9.
        let u = db.claim("w", 5_000, TTL, 1).await.unwrap().remove(0);
        let out = 5_000 + TTL;
        assert_eq!(db.reap(out).await.unwrap(), 1);
        assert!(db.claim("w", out + 4_999, TTL, 1).await.unwrap().is_empty());
        let late = db.finish("w", &u.held(), out + 1, &broke()).await.unwrap();
        assert_eq!(late, Err(Refused::NotOwner), "a voided lease's report");
        let u = db.claim("w", out + 5_000, TTL, 1).await.unwrap().remove(0);
        assert_eq!(u.attempts, 3);
        let c = unit_counts(&db, "j").await;
        assert_eq!((c.leased, c.retried), (1, 1));
        // The fourth and last attempt fails: the job fails at once, with no wait.
        db.finish("w", &u.held(), out + 6_000, &broke())
            .await
            .unwrap()
            .unwrap();
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Failed);
        assert_eq!(job.error.as_deref(), Some("destination full"));
    });
}

#[test]
fn a_unit_waiting_to_try_again_lets_the_others_go_first() {
    on_each(|db, _| async move {
        let db = db.with_patience(Patience {
            first_ms: 60_000,
            most_ms: 60_000,
        });
        job_of(&db, "j", 0, &[1; 3], planner(1, u64::MAX, 1, 1), 3, 0).await;
        let first = db.claim("w", 0, TTL, 1).await.unwrap().remove(0);
        assert_eq!(first.seq, 0);
        db.finish("w", &first.held(), 1, &broke())
            .await
            .unwrap()
            .unwrap();
        let rest: Vec<u64> = db
            .claim("w", 2, TTL, 5)
            .await
            .unwrap()
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(rest, [1, 2]);
        let c = unit_counts(&db, "j").await;
        assert_eq!((c.ready, c.leased, c.retried), (1, 2, 1));
    });
}

/// A cancel takes a job's row and then its units; a worker's report took its unit and
/// then the job's row, and on PostgreSQL the two deadlocked (the cancel failed, or the
/// reports, and their units ran again). Sixteen workers report while the job is
/// cancelled, twenty times: every cancel and every report goes through or is refused
/// as a report on a cancelled job is, and the counts stay the units'.
#[test]
fn cancels_and_sixteen_workers_reports_never_deadlock() {
    on_each(|db, url| async move {
        // Sixteen workers' connections at once: a pool each, as service instances.
        let mut pools = Vec::new();
        for _ in 0..4 {
            pools.push(Db::open(&url).await.unwrap());
        }
        for round in 0..20u64 {
            let job = format!("r{round}");
            let now = round * 1_000_000;
            job_of(&db, &job, 0, &[1; 400], planner(1, u64::MAX, 1, 1), 3, now).await;
            let mut workers = Vec::new();
            for w in 0..16 {
                let db = pools[w % pools.len()].clone();
                workers.push(tokio::spawn(async move {
                    let name = format!("w{w}");
                    let mut reported = 0u64;
                    loop {
                        let got = db.claim(&name, now + 1, TTL, 4).await.unwrap();
                        if got.is_empty() {
                            return reported;
                        }
                        for (i, c) in got.iter().enumerate() {
                            let outcome = match i % 4 {
                                3 => broke(),
                                _ => UnitOutcome::Done {
                                    files: 1,
                                    bytes: 1,
                                    written: 1,
                                },
                            };
                            match db.finish(&name, &c.held(), now + 2, &outcome).await {
                                Ok(Ok(())) => reported += 1,
                                Ok(Err(Refused::NotOwner)) => {} // cancelled under it
                                other => panic!("report of {}/{}: {other:?}", c.job, c.seq),
                            }
                        }
                    }
                }));
            }
            // Cancelled while the workers report (after a few of their reports).
            while db.job(&job).await.unwrap().unwrap().units.done < 20 {
                tokio::task::yield_now().await;
            }
            let cancelled = db.cancel(&job, now + 3).await;
            assert!(
                matches!(cancelled, Ok(true)),
                "round {round}: {cancelled:?}"
            );
            let mut reported = 0;
            for w in workers {
                reported += w.await.unwrap();
            }
            assert!(reported >= 20);
            let row = db.job(&job).await.unwrap().unwrap();
            assert_eq!(row.state, JobState::Cancelled, "round {round}");
            let c = unit_counts(&db, &job).await;
            assert_eq!(c.ready + c.leased + c.waiting, 0, "round {round}: {c:?}");
        }
        for p in pools {
            p.close().await;
        }
        if db.backend() == Backend::Postgres {
            eprintln!("PostgreSQL: 20 cancels under 16 workers' reports, no deadlock");
        }
    });
}

/// A block range done again (its first report lost to a restart of the service, say)
/// finds its blocks written and sends none: the job still counts its whole range, so
/// a job done shows all of its bytes done.
#[test]
fn a_range_done_again_counts_its_whole_range() {
    on_each(|db, _| async move {
        // One file of 10 bytes in ranges of 4, 4 and 2 bytes, then its commit.
        job_of(&db, "big", 0, &[10], planner(1, 5, 4, 1), 3, 0).await;
        let mut now = 1;
        loop {
            let got = db.claim("w", now, TTL, 10).await.unwrap();
            if got.is_empty() {
                break;
            }
            for c in got {
                // Every range says it sent nothing (all found written).
                let moved = match c.spec {
                    hetch_jobs::UnitSpec::Commit { .. } => 1,
                    _ => 0,
                };
                let outcome = UnitOutcome::Done {
                    files: moved,
                    bytes: 0,
                    written: 0,
                };
                db.finish("w", &c.held(), now, &outcome)
                    .await
                    .unwrap()
                    .unwrap();
            }
            now += 1;
        }
        let job = db.job("big").await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Done);
        assert_eq!((job.bytes_done, job.bytes), (10, 10));
        assert_eq!((job.files_done, job.bytes_written), (1, 0));
    });
}

#[test]
fn reports_of_units_that_ended_together_are_each_taken_or_refused_in_one_call() {
    on_each(|db, _| async move {
        // Two files of 10 bytes in ranges of 4, 4 and 2, then a commit each; and a
        // job of two one-file units beside it.
        job_of(&db, "big", 0, &[10, 10], planner(1, 5, 4, 1), 3, 0).await;
        job_of(&db, "small", 0, &[3, 4], planner(1, u64::MAX, 1, 1), 3, 0).await;
        let held = db.claim("w", 1, TTL, 64).await.unwrap();
        assert_eq!(held.len(), 8, "six ranges and two files: {held:?}");
        let units: Vec<_> = held.iter().map(|c| c.held()).collect();
        let done = |bytes| UnitOutcome::Done {
            files: 1,
            bytes,
            written: bytes,
        };
        // Every range says it sent nothing (all found written), one small file fails,
        // and two words are not the worker's to say: a forged lease id, and a second
        // report of a unit already reported in this call.
        let (ranges, small): (Vec<_>, Vec<_>) =
            held.iter().zip(&units).partition(|(c, _)| c.job == "big");
        let zero = done(0);
        let failed = broke();
        let four = done(4);
        let forged = hetch_jobdb::UnitLease {
            lease: "0".repeat(32),
            ..small[0].1.clone()
        };
        let mut reports: Vec<Report<'_>> = ranges
            .iter()
            .map(|(_, unit)| Report {
                unit,
                outcome: &zero,
                range: None,
            })
            .collect();
        let report = |unit, outcome| Report {
            unit,
            outcome,
            range: None,
        };
        reports.push(report(&forged, &four));
        reports.push(report(small[0].1, &failed));
        reports.push(report(small[1].1, &four));
        reports.push(report(small[1].1, &four));
        let answers = db.finish_all("w", 2, &reports).await.unwrap();
        let mut expected = vec![Ok(()); 6];
        expected.extend([
            Err(Refused::NotOwner),
            Ok(()),
            Ok(()),
            Err(Refused::NotOwner),
        ]);
        assert_eq!(answers, expected);
        // Each file's commit is ready (its last range was in the call), the failed
        // file waits for its next attempt; counts and counters are the units'.
        let c = unit_counts(&db, "big").await;
        assert_eq!((c.done, c.ready, c.leased), (6, 2, 0));
        let big = db.job("big").await.unwrap().unwrap();
        assert_eq!((big.bytes_done, big.files_done), (20, 0));
        let c = unit_counts(&db, "small").await;
        assert_eq!((c.done, c.ready, c.retried), (1, 1, 1));
        let small_job = db.job("small").await.unwrap().unwrap();
        assert_eq!((small_job.bytes_done, small_job.files_done), (4, 1));
        // A call of reports none of which is the worker's changes nothing.
        let again = db.finish_all("w", 3, &reports[6..7]).await.unwrap();
        assert_eq!(again, vec![Err(Refused::NotOwner)]);
        assert_eq!(unit_counts(&db, "small").await, c);
    });
}

#[test]
fn a_commit_made_ready_after_the_claims_passed_it_is_still_handed_out() {
    on_each(|db, _| async move {
        // A file of 10 bytes in ranges 0-2 and its commit (3), then three one-file
        // units (4-6): claims read from the first unit never tried not yet handed
        // out, which is past the commit by the time its ranges are done.
        job_of(&db, "j", 0, &[10, 1, 1, 1], planner(1, 5, 4, 1), 3, 0).await;
        let ranges = db.claim("w", 1, TTL, 3).await.unwrap();
        let seqs: Vec<u64> = ranges.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, [0, 1, 2]);
        let four = db.claim("w", 1, TTL, 1).await.unwrap();
        assert_eq!(four[0].seq, 4);
        for c in &ranges {
            let done = UnitOutcome::Done {
                files: 0,
                bytes: 4,
                written: 4,
            };
            db.finish("w", &c.held(), 2, &done).await.unwrap().unwrap();
        }
        // Units never tried first, then the commit (ready since 2).
        let rest: Vec<u64> = db
            .claim("w", 3, TTL, 10)
            .await
            .unwrap()
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(rest, [3, 5, 6]);
        // Cancelled and retried, every unit not done is handed out again: the commit
        // (its ranges are done) and the one-file units.
        db.cancel("j", 4).await.unwrap();
        db.retry("j", 5, None).await.unwrap();
        let again: Vec<u64> = db
            .claim("w", 6, TTL, 10)
            .await
            .unwrap()
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(again, [3, 4, 5, 6]);
        assert_eq!(unit_counts(&db, "j").await.leased, 4);
    });
}
