//! Jobs in the database, on SQLite and PostgreSQL: planned, claimed, finished,
//! cancelled, retried; split files committed after their ranges; priorities and fair
//! sharing; restarts.

use crate::common;

use common::{job_of, on_each, planner, unit_counts};
use hetch_jobdb::{
    Backend, Db, DbError, FileRow, JobState, NewJob, PlannedUnit, PlanningLease, Refused, Retry,
    UnitLease, UnitOutcome,
};
use hetch_jobs::UnitSpec;

const TTL: u64 = 30_000;

fn done(files: u64, bytes: u64) -> UnitOutcome {
    UnitOutcome::Done {
        files,
        bytes,
        written: bytes,
    }
}

#[test]
fn a_job_is_claimed_in_order_and_ends_done_with_its_counts() {
    on_each(|db, _| async move {
        job_of(
            &db,
            "j1",
            0,
            &[10, 20, 30, 40, 50],
            planner(2, u64::MAX, 1, 1),
            3,
            1,
        )
        .await;
        let job = db.job("j1").await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.files, job.bytes),
            (JobState::Queued, 5, 150)
        );
        let got = db.claim("w1", 10, TTL, 10).await.unwrap();
        let totals = db.totals().await.unwrap();
        assert_eq!((totals.active_workers, totals.units.leased), (1, 3));
        // Live progress: held to the unit's bytes (30), and only from its holder.
        let beat = |seq, bytes| vec![("j1".to_string(), seq, bytes)];
        db.unit_progress("w1", &beat(0, 1000)).await.unwrap();
        db.unit_progress("w2", &beat(1, 7)).await.unwrap();
        db.unit_progress("w1", &beat(2, 9)).await.unwrap();
        assert_eq!(db.totals().await.unwrap().bytes_in_flight, 30 + 9);
        let specs: Vec<_> = got
            .iter()
            .map(|c| (c.seq, c.spec.clone(), c.until))
            .collect();
        assert_eq!(
            specs,
            vec![
                (
                    0,
                    UnitSpec::Files {
                        first: 0,
                        end: 2,
                        bytes: 30
                    },
                    10 + TTL
                ),
                (
                    1,
                    UnitSpec::Files {
                        first: 2,
                        end: 4,
                        bytes: 70
                    },
                    10 + TTL
                ),
                (
                    2,
                    UnitSpec::Files {
                        first: 4,
                        end: 5,
                        bytes: 50
                    },
                    10 + TTL
                ),
            ]
        );
        let job = db.job("j1").await.unwrap().unwrap();
        assert_eq!((job.state, job.started), (JobState::Running, Some(10)));
        assert!(
            db.claim("w2", 11, TTL, 10).await.unwrap().is_empty(),
            "nothing left"
        );
        let files = db.files("j1", 2, 4).await.unwrap();
        assert_eq!(
            files
                .iter()
                .map(|f| (f.path.as_str(), f.size))
                .collect::<Vec<_>>(),
            [("f2", 30), ("f3", 40)]
        );
        for c in &got {
            let UnitSpec::Files { first, end, bytes } = c.spec else {
                unreachable!()
            };
            db.finish("w1", &c.held(), 20, &done(end - first, bytes))
                .await
                .unwrap()
                .unwrap();
        }
        let job = db.job("j1").await.unwrap().unwrap();
        assert_eq!(
            (
                job.state,
                job.finished,
                job.files_done,
                job.bytes_done,
                job.error
            ),
            (JobState::Done, Some(20), 5, 150, None)
        );
        assert_eq!(unit_counts(&db, "j1").await.done, 3);
        assert_eq!(db.jobs(None, None, 10).await.unwrap().len(), 1);
        assert_eq!(
            db.jobs(Some(JobState::Running), None, 10)
                .await
                .unwrap()
                .len(),
            0
        );
        let done = Some(JobState::Done);
        assert_eq!(db.jobs(done, Some("tester"), 10).await.unwrap().len(), 1);
        assert_eq!(
            db.jobs(None, Some("someone else"), 10).await.unwrap().len(),
            0
        );
        let totals = db.totals().await.unwrap();
        let done_jobs = totals.jobs.iter().find(|(s, _)| *s == JobState::Done);
        assert_eq!(done_jobs.map(|(_, n)| *n), Some(1));
        assert_eq!(totals.jobs.iter().map(|(_, n)| n).sum::<u64>(), 1);
        assert_eq!((totals.units.done, totals.units.leased), (3, 0));
        let sums = (totals.files_done, totals.bytes_done, totals.active_workers);
        assert_eq!(sums, (5, 150, 0));
    });
}

/// Listings and units are written many rows per statement: every row lands at its
/// index, across statement and batch boundaries.
#[test]
fn a_large_listing_keeps_every_row_at_its_index() {
    on_each(|db, _| async move {
        let sizes: Vec<u64> = (0..1203).map(|i| i % 7).collect();
        // One file per unit: as many units as files.
        job_of(&db, "big", 0, &sizes, planner(1, u64::MAX, 1, 1), 3, 5).await;
        let job = db.job("big").await.unwrap().unwrap();
        let total: u64 = sizes.iter().sum();
        assert_eq!((job.files, job.bytes), (1203, total));
        let rows = db.files("big", 0, 2000).await.unwrap();
        assert_eq!(rows.len(), 1203);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!((r.path.as_str(), r.size), (&*format!("f{i}"), sizes[i]));
        }
        let units = db.units("big").await.unwrap();
        assert_eq!(units.len(), 1203);
        assert!(units.iter().enumerate().all(|(i, u)| u.seq == i as u64));
        // Once queued, its listing is closed.
        let lease = PlanningLease {
            job: "big".into(),
            owner: "planner".into(),
        };
        let more = [FileRow {
            operand: 1,
            path: "g".into(),
            size: 9,
        }];
        let late = db.add_files(&lease, 1203, &more).await.unwrap_err();
        assert!(matches!(late, DbError::NotPlanning(_)), "{late}");
        assert_eq!(db.files("big", 1203, 1204).await.unwrap(), []);
    });
}

#[test]
fn an_empty_job_is_done_as_soon_as_it_is_queued() {
    on_each(|db, _| async move {
        job_of(&db, "empty", 0, &[], planner(2, u64::MAX, 1, 1), 3, 5).await;
        let job = db.job("empty").await.unwrap().unwrap();
        assert_eq!((job.state, job.finished), (JobState::Done, Some(5)));
    });
}

#[test]
fn a_split_file_commits_once_after_all_its_ranges() {
    on_each(|db, _| async move {
        // File 1 (10 blocks of 4) is split in ranges of 3 blocks: 4 ranges + a commit.
        job_of(&db, "big", 0, &[1, 40, 2], planner(10, 8, 12, 4), 2, 0).await;
        let got = db.claim("w", 1, TTL, 100).await.unwrap();
        let specs: Vec<_> = got.iter().map(|c| c.spec.clone()).collect();
        assert_eq!(
            specs,
            vec![
                UnitSpec::Files {
                    first: 0,
                    end: 1,
                    bytes: 1
                },
                UnitSpec::Range {
                    file: 1,
                    first: 0,
                    end: 3
                },
                UnitSpec::Range {
                    file: 1,
                    first: 3,
                    end: 6
                },
                UnitSpec::Range {
                    file: 1,
                    first: 6,
                    end: 9
                },
                UnitSpec::Range {
                    file: 1,
                    first: 9,
                    end: 10
                },
                UnitSpec::Files {
                    first: 2,
                    end: 3,
                    bytes: 2
                },
            ],
            "the commit waits"
        );
        db.finish("w", &got[0].held(), 2, &done(1, 1))
            .await
            .unwrap()
            .unwrap();
        for c in &got[1..4] {
            db.finish("w", &c.held(), 2, &done(0, 12))
                .await
                .unwrap()
                .unwrap();
        }
        assert!(
            db.claim("w", 3, TTL, 10).await.unwrap().is_empty(),
            "one range to go"
        );
        db.finish("w", &got[4].held(), 4, &done(0, 4))
            .await
            .unwrap()
            .unwrap();
        let commit = db.claim("w", 5, TTL, 10).await.unwrap();
        assert_eq!(commit.len(), 1);
        assert_eq!(commit[0].spec, UnitSpec::Commit { file: 1, ranges: 4 });
        db.finish("w", &commit[0].held(), 6, &done(1, 0))
            .await
            .unwrap()
            .unwrap();
        db.finish("w", &got[5].held(), 7, &done(1, 2))
            .await
            .unwrap()
            .unwrap();
        let job = db.job("big").await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.files_done, job.bytes_done),
            (JobState::Done, 3, 43)
        );

        // A range that fails for good fails its commit and the job, with its error.
        job_of(&db, "bad", 0, &[40], planner(10, 8, 20, 4), 1, 10).await;
        let got = db.claim("w", 11, TTL, 10).await.unwrap();
        assert_eq!(got.len(), 2);
        db.finish("w", &got[0].held(), 12, &done(0, 20))
            .await
            .unwrap()
            .unwrap();
        let failed = UnitOutcome::Failed("source file f0 changed".into());
        db.finish("w", &got[1].held(), 13, &failed)
            .await
            .unwrap()
            .unwrap();
        let job = db.job("bad").await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Failed);
        assert_eq!(job.error.as_deref(), Some("source file f0 changed"));
        let c = unit_counts(&db, "bad").await;
        assert_eq!(
            (c.done, c.failed, c.waiting),
            (1, 2, 0),
            "range and commit failed"
        );

        // Retrying redoes the failed range only; the commit waits for it again.
        assert_eq!(db.retry("bad", 20, None).await.unwrap(), Retry::Units(2));
        let again = db.claim("w", 21, TTL, 10).await.unwrap();
        assert_eq!(
            again.iter().map(|c| c.seq).collect::<Vec<_>>(),
            [got[1].seq]
        );
        db.finish("w", &again[0].held(), 22, &done(0, 20))
            .await
            .unwrap()
            .unwrap();
        let commit = db.claim("w", 23, TTL, 10).await.unwrap();
        db.finish("w", &commit[0].held(), 24, &done(1, 0))
            .await
            .unwrap()
            .unwrap();
        let job = db.job("bad").await.unwrap().unwrap();
        assert_eq!((job.state, job.error), (JobState::Done, None));
    });
}

/// A worker names the units it runs in its heartbeat: one it holds but does not run
/// (its claim's answer was lost) is not kept alive, and goes to another worker.
#[test]
fn a_held_unit_the_worker_does_not_run_runs_out_and_goes_to_another() {
    on_each(|db, _| async move {
        job_of(&db, "j", 0, &[1, 1, 1], planner(1, u64::MAX, 1, 1), 3, 0).await;
        let got = db.claim("w", 0, TTL, 2).await.unwrap();
        let (runs, lost) = (got[0].seq, got[1].seq);
        assert_eq!(
            db.heartbeat_units("w", TTL - 1, TTL, &[got[0].held()])
                .await
                .unwrap(),
            [("j".to_string(), runs)]
        );
        assert!(db
            .heartbeat_units("w", TTL - 1, TTL, &[])
            .await
            .unwrap()
            .is_empty());
        assert_eq!(db.reap(TTL).await.unwrap(), 1, "the lost claim ran out");
        let other = db.claim("v", TTL + 1, TTL, 5).await.unwrap();
        let seqs: Vec<u64> = other.iter().map(|c| c.seq).collect();
        assert!(seqs.contains(&lost), "{seqs:?}");
        assert!(!seqs.contains(&runs), "{seqs:?}");
        // Another worker's units are not extended by naming them, not even with the
        // name of their worker and the id w's own lost claim had.
        let theirs = other.iter().find(|c| c.seq == lost).unwrap();
        assert_ne!(theirs.lease, got[1].lease, "a new claim, a new id");
        for (who, lease) in [
            ("w", &theirs.lease),
            ("v", &got[1].lease),
            ("v", &got[0].lease),
        ] {
            let named = UnitLease {
                lease: lease.clone(),
                ..theirs.held()
            };
            assert!(db
                .heartbeat_units(who, TTL + 2, TTL, &[named])
                .await
                .unwrap()
                .is_empty());
        }
        assert_eq!(
            db.heartbeat_units("v", TTL + 2, TTL, &[theirs.held()])
                .await
                .unwrap(),
            [("j".to_string(), lost)]
        );
    });
}

#[test]
fn an_expired_lease_goes_to_another_worker_and_the_late_one_is_refused() {
    on_each(|db, _| async move {
        job_of(&db, "j", 0, &[1, 1], planner(1, u64::MAX, 1, 1), 3, 0).await;
        let a = db.claim("a", 0, TTL, 1).await.unwrap();
        let b = db.claim("b", 0, TTL, 1).await.unwrap();
        assert_ne!(a[0].seq, b[0].seq);
        // b keeps beating; a goes quiet.
        assert_eq!(
            db.heartbeat_units("b", TTL - 1, TTL, &[b[0].held()])
                .await
                .unwrap(),
            [("j".to_string(), b[0].seq)]
        );
        assert_eq!(
            db.reap(TTL).await.unwrap(),
            1,
            "a's lease ran out, b's was extended"
        );
        assert!(
            db.heartbeat_units("a", TTL + 1, TTL, &[a[0].held()])
                .await
                .unwrap()
                .is_empty(),
            "a hears it lost"
        );
        let c = db.claim("c", TTL + 2, TTL, 5).await.unwrap();
        assert_eq!((c.len(), c[0].seq, c[0].attempts), (1, a[0].seq, 1));
        assert_eq!(
            db.finish("a", &a[0].held(), TTL + 3, &done(1, 1))
                .await
                .unwrap(),
            Err(Refused::NotOwner)
        );
        db.finish("c", &c[0].held(), TTL + 4, &done(1, 1))
            .await
            .unwrap()
            .unwrap();
        // b's lease runs out unreaped: its finish is refused as late.
        let late = 3 * TTL;
        assert_eq!(
            db.finish("b", &b[0].held(), late, &done(1, 1))
                .await
                .unwrap(),
            Err(Refused::Expired)
        );
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!((job.state, job.files_done), (JobState::Running, 1));
    });
}

/// A report is taken only with the id of the unit's current lease: naming the unit
/// and its worker (both shown to users) is not enough, nor is the id of the same
/// worker's earlier claim of it.
#[test]
fn a_report_is_taken_only_with_the_current_claims_lease_id() {
    on_each(|db, _| async move {
        job_of(&db, "j", 0, &[1], planner(1, u64::MAX, 1, 1), 3, 0).await;
        let first = db.claim("w", 0, TTL, 1).await.unwrap().remove(0);
        assert_eq!(first.lease.len(), 32, "{:?}", first.lease);
        for guess in ["", "0", &"0".repeat(32), &first.lease.to_uppercase()] {
            let named = UnitLease {
                lease: guess.to_string(),
                ..first.held()
            };
            assert_eq!(
                db.finish("w", &named, 1, &done(1, 1)).await.unwrap(),
                Err(Refused::NotOwner),
                "{guess:?}"
            );
        }
        // The id alone is not enough either: it is w's lease, not v's.
        assert_eq!(
            db.finish("v", &first.held(), 1, &done(1, 1)).await.unwrap(),
            Err(Refused::NotOwner)
        );
        // Its lease runs out, and w is given the unit again: a new id, and the old
        // one's late report (a run w stopped) is refused.
        assert_eq!(db.reap(TTL).await.unwrap(), 1);
        let second = db.claim("w", TTL + 1, TTL, 1).await.unwrap().remove(0);
        assert_eq!(second.seq, first.seq);
        assert_ne!(second.lease, first.lease);
        assert_eq!(
            db.finish("w", &first.held(), TTL + 2, &done(1, 1))
                .await
                .unwrap(),
            Err(Refused::NotOwner)
        );
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!((job.state, job.files_done), (JobState::Running, 0));
        db.finish("w", &second.held(), TTL + 3, &done(1, 1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(db.job("j").await.unwrap().unwrap().state, JobState::Done);
    });
}

#[test]
fn a_cancelled_job_stops_its_workers_and_a_retry_redoes_only_what_was_not_done() {
    on_each(|db, _| async move {
        job_of(&db, "j", 0, &[1, 2, 3], planner(1, u64::MAX, 1, 1), 3, 0).await;
        let got = db.claim("w", 1, TTL, 2).await.unwrap();
        db.finish("w", &got[0].held(), 2, &done(1, 1))
            .await
            .unwrap()
            .unwrap();
        assert!(db.cancel("j", 3).await.unwrap());
        assert!(!db.cancel("j", 4).await.unwrap(), "already over");
        assert!(
            db.heartbeat_units("w", 4, TTL, &[got[1].held()])
                .await
                .unwrap()
                .is_empty(),
            "w must stop"
        );
        assert_eq!(
            db.finish("w", &got[1].held(), 5, &done(1, 2))
                .await
                .unwrap(),
            Err(Refused::NotOwner)
        );
        assert!(db.claim("w", 6, TTL, 5).await.unwrap().is_empty());
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!((job.state, job.finished), (JobState::Cancelled, Some(3)));
        assert_eq!(db.retry("j", 7, None).await.unwrap(), Retry::Units(2));
        let again = db.claim("w", 8, TTL, 5).await.unwrap();
        assert_eq!(again.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2]);
        for c in &again {
            db.finish("w", &c.held(), 9, &done(1, 1))
                .await
                .unwrap()
                .unwrap();
        }
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!((job.state, job.files_done), (JobState::Done, 3));
        assert_eq!(
            db.retry("j", 10, None).await.unwrap(),
            Retry::Nothing,
            "nothing to redo"
        );
    });
}

#[test]
fn higher_priority_goes_first_and_equal_jobs_share_the_workers() {
    on_each(|db, _| async move {
        let p = planner(1, u64::MAX, 1, 1);
        job_of(&db, "a", 0, &[1; 4], p, 3, 0).await;
        job_of(&db, "b", 0, &[1; 4], p, 3, 1).await;
        job_of(&db, "urgent", 5, &[1; 2], p, 3, 2).await;
        let order: Vec<String> = db
            .claim("w", 3, TTL, 6)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.job)
            .collect();
        assert_eq!(order, ["urgent", "urgent", "a", "b", "a", "b"]);
    });
}

#[test]
fn concurrent_claims_from_two_service_instances_never_share_a_unit() {
    on_each(|db, url| async move {
        job_of(&db, "j", 0, &[1; 60], planner(1, u64::MAX, 1, 1), 3, 0).await;
        let other = Db::open(&url).await.unwrap(); // a second instance on the same database
        let mut tasks = Vec::new();
        for w in 0..6 {
            let db = if w % 2 == 0 {
                db.clone()
            } else {
                other.clone()
            };
            tasks.push(tokio::spawn(async move {
                let name = format!("w{w}");
                let mut mine = Vec::new();
                loop {
                    let got = db.claim(&name, 1, TTL, 2).await.unwrap();
                    if got.is_empty() {
                        return mine;
                    }
                    for c in got {
                        db.finish(&name, &c.held(), 2, &done(1, 1))
                            .await
                            .unwrap()
                            .unwrap();
                        mine.push(c.seq);
                    }
                }
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort();
        assert_eq!(all, (0..60).collect::<Vec<_>>(), "every unit once");
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!((job.state, job.files_done), (JobState::Done, 60));
        other.close().await;
    });
}

#[test]
fn a_reopened_database_has_everything_and_keeps_going() {
    on_each(|db, url| async move {
        job_of(&db, "j", 0, &[1, 1], planner(1, u64::MAX, 1, 1), 3, 0).await;
        let held = db.claim("w", 1, TTL, 1).await.unwrap();
        db.close().await;
        let db = Db::open(&url).await.unwrap(); // migrations again: nothing to do
        assert_eq!(db.job("j").await.unwrap().unwrap().state, JobState::Running);
        db.finish("w", &held[0].held(), 2, &done(1, 1))
            .await
            .unwrap()
            .unwrap();
        let rest = db.claim("w", 3, TTL, 5).await.unwrap();
        db.finish("w", &rest[0].held(), 4, &done(1, 1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(db.job("j").await.unwrap().unwrap().state, JobState::Done);
        db.close().await;
    });
}

#[test]
fn a_url_of_no_database_is_refused_by_name() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let e = rt.block_on(Db::open("mysql://x")).unwrap_err();
    assert!(matches!(e, DbError::Url(_)));
    assert!(e.to_string().contains("mysql://x"), "{e}");
    let e = rt
        .block_on(Db::open("sqlite:///nonexistent-dir/x/jobs.db"))
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent-dir/x/jobs.db"), "{e}");
}

/// Runs `sql` on the database at `url` behind the service's back: a state no
/// statement of this crate makes.
async fn by_hand(url: &str, sql: &str) {
    let pool = sqlx::AnyPool::connect(url).await.unwrap();
    sqlx::query(sql).execute(&pool).await.unwrap();
    pool.close().await;
}

/// A worker's report is held to what its unit holds (a relay, never listed, to
/// MAX_UNIT_FILES and MAX_UNIT_BYTES), and a job's counters stop at the largest
/// BIGINT instead of overflowing (SQLite would store a REAL, PostgreSQL fail): any
/// number of reports of u64::MAX leaves every job readable.
#[test]
fn absurd_reports_are_held_to_their_unit_and_counters_never_overflow() {
    use hetch_jobdb::leases::{MAX_UNIT_BYTES, MAX_UNIT_FILES};
    on_each(|db, url| async move {
        let absurd = done(u64::MAX, u64::MAX);
        // f0 (5 bytes) in a batch; f1 (40 bytes) in ranges of 12 bytes, and a commit.
        job_of(&db, "j", 0, &[5, 40], planner(10, 8, 12, 4), 3, 0).await;
        let got = db.claim("w", 1, TTL, 10).await.unwrap();
        assert_eq!(got.len(), 5, "{got:?}");
        for c in &got {
            db.finish("w", &c.held(), 2, &absurd)
                .await
                .unwrap()
                .unwrap();
        }
        let commit = db.claim("w", 3, TTL, 10).await.unwrap();
        assert_eq!(commit.len(), 1, "{commit:?}");
        db.finish("w", &commit[0].held(), 4, &absurd)
            .await
            .unwrap()
            .unwrap();
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.files_done, job.bytes_done, job.damaged),
            (JobState::Done, 2, 45, None),
            "a batch counts its files and bytes, a range its bytes, a commit its file"
        );
        assert_eq!(job.bytes_written, 45, "written is held as bytes are");

        // A relay's files were never listed: its report makes the job's totals too.
        let lease = db
            .create_job(&new_job("relay"), "planner", 1_000_000, 10)
            .await
            .unwrap();
        let relays: Vec<PlannedUnit> = (0..2)
            .map(|operand| PlannedUnit {
                spec: UnitSpec::Relay { operand },
                bytes: 0,
            })
            .collect();
        db.add_units(&lease, 0, &relays, 3).await.unwrap();
        assert!(db.queue(&lease, 10).await.unwrap());
        let got = db.claim("w", 11, TTL, 10).await.unwrap();
        db.finish("w", &got[0].held(), 12, &absurd)
            .await
            .unwrap()
            .unwrap();
        let job = db.job("relay").await.unwrap().unwrap();
        let counts = (job.files, job.files_done, job.bytes, job.bytes_done);
        let (f, b) = (MAX_UNIT_FILES, MAX_UNIT_BYTES);
        assert_eq!(counts, (f, f, b, b));
        // Counters near the top (as after many reports) stop there.
        by_hand(
            &url,
            "UPDATE jobs SET files = 9223372036854775800, files_done = 9223372036854775800, \
               bytes = 9223372036854775800, bytes_done = 9223372036854775800 \
             WHERE id = 'relay'",
        )
        .await;
        db.finish("w", &got[1].held(), 13, &absurd)
            .await
            .unwrap()
            .unwrap();
        let job = db.job("relay").await.unwrap().unwrap();
        let top = i64::MAX as u64;
        assert_eq!(
            (job.files, job.files_done, job.bytes, job.bytes_done),
            (top, top, top, top)
        );
        assert_eq!((job.state, job.damaged), (JobState::Done, None));
        // Every job lists, the live view reads, and the totals add up past a BIGINT.
        let listed = db.jobs(None, None, 10).await.unwrap();
        assert!(listed.iter().all(|j| j.damaged.is_none()), "{listed:?}");
        assert_eq!(db.live_jobs(10, 10).await.unwrap().len(), 2);
        let totals = db.totals().await.unwrap();
        assert!(totals.bytes_done > top, "{totals:?}");
    });
}

/// A job whose row cannot be read whole (a counter SQLite stored as a REAL after an
/// overflow; a negative one) is listed with what can be read, and says which column
/// is damaged; every other job lists as ever, the live view and the totals go on,
/// and the damaged job's units still finish.
#[test]
fn a_damaged_row_is_reported_for_its_job_only() {
    on_each(|db, url| async move {
        job_of(&db, "sound", 0, &[1, 2], planner(1, u64::MAX, 1, 1), 3, 0).await;
        job_of(&db, "hurt", 0, &[3, 4], planner(1, u64::MAX, 1, 1), 3, 1).await;
        // PostgreSQL never stores a BIGINT as anything else: a negative count is the
        // damage it can hold.
        let bad = match db.backend() {
            Backend::Sqlite => "1e30",
            Backend::Postgres => "-5",
        };
        let sql = format!("UPDATE jobs SET files_done = {bad} WHERE id = 'hurt'");
        by_hand(&url, &sql).await;

        let jobs = db.jobs(None, None, 10).await.unwrap();
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["hurt", "sound"]);
        let (hurt, sound) = (&jobs[0], &jobs[1]);
        let damage = hurt.damaged.clone().unwrap_or_default();
        assert!(
            damage.starts_with("database row damaged: files_done is "),
            "{damage}"
        );
        assert_eq!(
            (hurt.state, hurt.files, hurt.bytes, hurt.files_done),
            (JobState::Queued, 2, 7, 0),
            "what could be read, and 0 for what could not"
        );
        assert_eq!(hurt.error_shown(), Some(damage.clone()));
        assert_eq!((sound.damaged.as_deref(), sound.bytes), (None, 3));
        let one = db.job("hurt").await.unwrap().unwrap();
        assert_eq!(one.damaged, Some(damage));
        let live = db.live_jobs(10, 10).await.unwrap();
        assert_eq!(live.len(), 2);
        assert!(live[0].job.damaged.is_some() && live[1].job.damaged.is_none());
        db.totals().await.unwrap();

        let got = db.claim("w", 2, TTL, 10).await.unwrap();
        assert_eq!(got.len(), 4, "{got:?}");
        for c in &got {
            db.finish("w", &c.held(), 3, &done(1, 4))
                .await
                .unwrap()
                .unwrap();
        }
        for id in ["hurt", "sound"] {
            let job = db.job(id).await.unwrap().unwrap();
            assert_eq!(job.state, JobState::Done, "{job:?}");
        }
    });
}

fn new_job(id: &str) -> NewJob {
    NewJob {
        id: id.into(),
        submitted_by: "tester".into(),
        spec: "{}".into(),
        priority: 0,
        rate_limit: 0,
    }
}

/// A streaming job's units: never listed (their progress is bounded as a relay's),
/// their lag taken only from their holder, held to a day, shown per job and in the
/// totals while they run, kept when a run ends and cleared when another starts.
#[test]
fn a_stream_that_moves_bytes_starts_its_count_of_runs_over_and_one_that_does_not_runs_out() {
    on_each(|db, _| async move {
        let lease = db
            .create_job(&new_job("s"), "planner", 1_000, 10)
            .await
            .unwrap();
        let units = [
            PlannedUnit {
                spec: UnitSpec::Stream { operand: 0 },
                bytes: 0,
            },
            PlannedUnit {
                spec: UnitSpec::Files {
                    first: 0,
                    end: 1,
                    bytes: 100,
                },
                bytes: 100,
            },
        ];
        db.add_units(&lease, 0, &units, 2).await.unwrap();
        assert!(db.queue(&lease, 10).await.unwrap());
        let failed = || UnitOutcome::Failed("lost".into());
        let mut now = 20;
        // Each unit's first run fails without moving a byte: one run of two left.
        for u in db.claim("w", now, TTL, 2).await.unwrap() {
            assert_eq!(u.attempts, 0);
            db.finish("w", &u.held(), now, &failed())
                .await
                .unwrap()
                .unwrap();
        }
        // The second runs move bytes, then fail: the batch of files has no run left,
        // the stream has STREAM_ATTEMPTS more from this one (and counts it).
        now += 10;
        let runs = db.claim("w", now, TTL, 2).await.unwrap();
        assert!(runs.iter().all(|u| u.attempts == 1), "{runs:?}");
        let moved = vec![("s".to_string(), 0, 10), ("s".to_string(), 1, 10)];
        db.unit_progress("w", &moved).await.unwrap();
        // Another holder's report, or one that moves nothing more, gives nothing.
        db.unit_progress("other", &[("s".to_string(), 0, 99)])
            .await
            .unwrap();
        db.unit_progress("w", &[("s".to_string(), 0, 10)])
            .await
            .unwrap();
        for u in &runs {
            db.finish("w", &u.held(), now, &failed())
                .await
                .unwrap()
                .unwrap();
        }
        // From here the stream moves nothing: it runs out after the runs it was given.
        let mut left = 0;
        loop {
            now += 10;
            let got = db.claim("w", now, TTL, 2).await.unwrap();
            let Some(u) = got.first() else { break };
            assert_eq!(got.len(), 1, "the batch of files ran out of runs");
            assert!(matches!(u.spec, UnitSpec::Stream { .. }));
            assert_eq!(u.attempts, 2 + left, "every run is counted");
            db.finish("w", &u.held(), now, &failed())
                .await
                .unwrap()
                .unwrap();
            left += 1;
        }
        assert_eq!(left, hetch_jobdb::STREAM_ATTEMPTS - 1);
    });
}

#[test]
fn a_streams_lag_comes_from_its_holder_and_a_new_run_starts_it_over() {
    on_each(|db, _| async move {
        let lease = db
            .create_job(&new_job("s"), "planner", 1_000, 10)
            .await
            .unwrap();
        let streams: Vec<PlannedUnit> = (0..2)
            .map(|operand| PlannedUnit {
                spec: UnitSpec::Stream { operand },
                bytes: 0,
            })
            .collect();
        db.add_units(&lease, 0, &streams, 20).await.unwrap();
        assert!(db.queue(&lease, 10).await.unwrap());
        let got = db.claim("w", 2, TTL, 20).await.unwrap();
        assert_eq!(got.len(), 2);
        assert!(matches!(got[0].spec, UnitSpec::Stream { operand: 0 }));
        assert_eq!(db.job_lag("s").await.unwrap(), None);
        let lag = |seq, p50, p99| vec![("s".to_string(), seq, p50, p99)];
        db.unit_lag("w", &lag(0, 40, 90)).await.unwrap();
        db.unit_lag("w", &lag(1, 70, u64::MAX)).await.unwrap();
        db.unit_lag("other", &lag(0, 1, 999_999)).await.unwrap();
        let day = hetch_jobdb::MAX_LAG_MS;
        assert_eq!(db.job_lag("s").await.unwrap(), Some((70, day)));
        assert_eq!(db.totals().await.unwrap().stream_lag_p99_ms, day);
        // A stream's progress is not bounded by its (unknown) planned bytes.
        db.unit_progress("w", &[("s".into(), 0, 5 << 30)])
            .await
            .unwrap();
        assert_eq!(db.totals().await.unwrap().bytes_in_flight, 5 << 30);
        // Run 1 of unit 0 ends failed (its worker stopping): its lag stays shown;
        // the run that claims it next starts it over.
        db.finish(
            "w",
            &got[0].held(),
            30,
            &UnitOutcome::Failed("stopped".into()),
        )
        .await
        .unwrap()
        .unwrap();
        db.unit_lag("w", &lag(1, 5, 6)).await.unwrap();
        assert_eq!(db.job_lag("s").await.unwrap(), Some((40, 90)));
        let again = db.claim("w2", 31, TTL, 40).await.unwrap();
        assert_eq!(again[0].seq, 0);
        assert_eq!(db.job_lag("s").await.unwrap(), Some((5, 6)));
    });
}
