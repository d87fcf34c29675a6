//! Planning leases, on SQLite and PostgreSQL: the instance planning a job holds it
//! while it renews its lease; once the lease runs out another instance takes the job
//! over (its listing dropped, to start again) and the first can write nothing more;
//! a job that ended before its listing was complete is planned again on retry, never
//! run from a partial listing; and instances taking over at once take each job once.

#[allow(dead_code)] // shared by the test files; this one needs on_each only
use crate::common;

use common::on_each;
use hetch_jobdb::{Db, DbError, FileRow, JobState, NewJob, PlannedUnit, Retry};
use hetch_jobs::UnitSpec;

fn new_job(id: &str) -> NewJob {
    NewJob {
        id: id.into(),
        submitted_by: "tester".into(),
        spec: format!("{{\"id\":\"{id}\"}}"),
        priority: 0,
        rate_limit: 0,
    }
}

fn rows(n: u64) -> Vec<FileRow> {
    (0..n)
        .map(|i| FileRow {
            operand: 0,
            path: format!("f{i}"),
            size: i,
        })
        .collect()
}

fn one_batch(files: u64) -> Vec<PlannedUnit> {
    vec![PlannedUnit {
        spec: UnitSpec::Files {
            first: 0,
            end: files,
            bytes: 0,
        },
        bytes: 0,
    }]
}

fn refused(r: Result<(), DbError>) -> bool {
    matches!(r, Err(DbError::NotPlanning(_)))
}

#[test]
fn a_planner_whose_lease_ran_out_is_taken_over_and_shut_out() {
    on_each(|db, _| async move {
        let a = db.create_job(&new_job("j"), "A", 1_000, 0).await.unwrap();
        db.add_files(&a, 0, &rows(3)).await.unwrap();
        // While A's lease holds (and after it renews it), nobody takes the job.
        assert!(db
            .take_over_planning("B", 2_000, 500, 8)
            .await
            .unwrap()
            .is_empty());
        assert!(db.renew_planning(&a, 3_000).await.unwrap());
        assert!(db
            .take_over_planning("B", 4_000, 2_500, 8)
            .await
            .unwrap()
            .is_empty());

        // A falls silent; at 3,001 its lease has run out and B takes the job, with
        // what A had listed dropped.
        let taken = db.take_over_planning("B", 9_000, 3_001, 8).await.unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].spec, "{\"id\":\"j\"}");
        let b = taken[0].lease.clone();
        assert_eq!(b.job, "j");
        assert!(b.owner.starts_with("B#"), "{}", b.owner);
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.files, job.bytes),
            (JobState::Planning, 0, 0)
        );
        assert_eq!(db.files("j", 0, 10).await.unwrap(), []);
        assert!(db
            .take_over_planning("C", 9_000, 3_002, 8)
            .await
            .unwrap()
            .is_empty());

        // A comes back: nothing it writes lands, and it cannot end the job.
        assert!(refused(db.add_files(&a, 3, &rows(2)).await));
        assert!(refused(db.add_units(&a, 0, &one_batch(3), 3).await));
        assert!(!db.renew_planning(&a, 20_000).await.unwrap());
        assert!(!db.queue(&a, 3_003).await.unwrap());
        assert!(!db.fail_planning(&a, "late", 3_003).await.unwrap());

        // B plans it whole.
        db.add_files(&b, 0, &rows(4)).await.unwrap();
        db.add_units(&b, 0, &one_batch(4), 3).await.unwrap();
        assert!(db.queue(&b, 3_004).await.unwrap());
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!((job.state, job.files, job.bytes), (JobState::Queued, 4, 6));
        assert_eq!(db.files("j", 0, 10).await.unwrap(), rows(4));
        assert_eq!(db.units("j").await.unwrap().len(), 1);
        // An instance taking over its own job again shuts out its earlier hold too.
        let a2 = db.create_job(&new_job("k"), "A", 10, 0).await.unwrap();
        let again = db.take_over_planning("A", 99_000, 11, 8).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_ne!(again[0].lease, a2);
        assert!(refused(db.add_files(&a2, 0, &rows(1)).await));
        assert!(!db.queue(&a2, 12).await.unwrap());
        assert!(db.fail_planning(&again[0].lease, "x", 13).await.unwrap());
        // A queued job is nobody's to plan any more.
        assert!(db
            .take_over_planning("C", 9_000, 99_000, 8)
            .await
            .unwrap()
            .is_empty());
    });
}

#[test]
fn a_job_that_ended_before_its_listing_was_complete_is_planned_again_on_retry() {
    on_each(|db, _| async move {
        // Cancelled half-way through planning: the planner is shut out at once.
        let a = db
            .create_job(&new_job("c"), "A", 1_000_000, 0)
            .await
            .unwrap();
        db.add_files(&a, 0, &rows(5)).await.unwrap();
        db.add_units(&a, 0, &one_batch(5), 3).await.unwrap();
        assert!(db.cancel("c", 1).await.unwrap());
        assert!(refused(db.add_files(&a, 5, &rows(1)).await));
        assert!(!db.queue(&a, 2).await.unwrap());
        // Failed while planning (an entry that could not be listed).
        let f = db
            .create_job(&new_job("f"), "A", 1_000_000, 3)
            .await
            .unwrap();
        db.add_files(&f, 0, &rows(2)).await.unwrap();
        assert!(db.fail_planning(&f, "planning: x: gone", 4).await.unwrap());

        // A retry does not run the partial listing: both are to be planned again,
        // at once, by whoever takes them first, from nothing.
        for id in ["c", "f"] {
            assert_eq!(db.retry(id, 5, None).await.unwrap(), Retry::Replan, "{id}");
            let job = db.job(id).await.unwrap().unwrap();
            assert_eq!((job.state, job.error), (JobState::Planning, None), "{id}");
        }
        assert!(db.claim("w", 6, 30_000, 8).await.unwrap().is_empty());
        let mut taken = db.take_over_planning("B", 60_000, 7, 8).await.unwrap();
        taken.sort_by(|x, y| x.lease.job.cmp(&y.lease.job));
        let ids: Vec<&str> = taken.iter().map(|t| t.lease.job.as_str()).collect();
        assert_eq!(ids, ["c", "f"]);
        for t in &taken {
            let job = db.job(&t.lease.job).await.unwrap().unwrap();
            assert_eq!((job.files, job.bytes), (0, 0));
            assert_eq!(db.units(&t.lease.job).await.unwrap(), []);
        }
        // The old planner stays shut out; the new one's complete listing runs.
        assert!(refused(db.add_files(&a, 0, &rows(1)).await));
        let b = &taken[0].lease;
        db.add_files(b, 0, &rows(6)).await.unwrap();
        db.add_units(b, 0, &one_batch(6), 3).await.unwrap();
        assert!(db.queue(b, 8).await.unwrap());
        let got = db.claim("w", 9, 30_000, 8).await.unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].spec,
            UnitSpec::Files {
                first: 0,
                end: 6,
                bytes: 0
            }
        );
        // Once a job was planned, a retry re-runs its units only.
        assert!(db.cancel("c", 10).await.unwrap());
        assert_eq!(db.retry("c", 11, None).await.unwrap(), Retry::Units(1));
        assert_eq!(db.job("c").await.unwrap().unwrap().files, 6);
    });
}

#[test]
fn instances_taking_over_at_once_take_each_job_once() {
    on_each(|db, url| async move {
        for i in 0..20 {
            db.create_job(&new_job(&format!("j{i:02}")), "dead", 100, i)
                .await
                .unwrap();
        }
        let other = Db::open(&url).await.unwrap(); // a second instance
        let mut tasks = Vec::new();
        for k in 0..4 {
            let db = match k % 2 {
                0 => db.clone(),
                _ => other.clone(),
            };
            tasks.push(tokio::spawn(async move {
                let me = format!("i{k}");
                let mut mine = Vec::new();
                loop {
                    let got = db.take_over_planning(&me, 50_000, 1_000, 3).await.unwrap();
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(got.into_iter().map(|t| t.lease.job));
                }
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all.sort();
        let want: Vec<String> = (0..20).map(|i| format!("j{i:02}")).collect();
        assert_eq!(all, want, "every job taken over exactly once");
        other.close().await;
    });
}

/// A job whose planner keeps stopping (a listing that took its service down, at
/// every start) is planned at most MAX_PLAN_ATTEMPTS times, then fails with why;
/// a retry plans it again from a fresh count.
#[test]
fn a_job_whose_planning_keeps_stopping_fails_instead_of_being_planned_forever() {
    on_each(|db, _| async move {
        let attempts = hetch_jobdb::planning::MAX_PLAN_ATTEMPTS;
        db.create_job(&new_job("j"), "A", 1_000, 0).await.unwrap();
        let mut now = 0;
        for _ in 1..attempts {
            now += 2_000;
            let taken = db.take_over_planning("B", now + 1_000, now, 8).await;
            assert_eq!(taken.unwrap().len(), 1, "taken over at {now}");
        }
        now += 2_000;
        let taken = db.take_over_planning("B", now + 1_000, now, 8).await;
        assert!(taken.unwrap().is_empty(), "planned once too often");
        let job = db.job("j").await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Failed);
        let error = job.error.unwrap_or_default();
        assert!(
            error.contains(&format!("started {attempts} times")),
            "{error}"
        );
        assert_eq!(db.retry("j", now, None).await.unwrap(), Retry::Replan);
        let taken = db.take_over_planning("C", now + 1_000, now, 8).await;
        assert_eq!(taken.unwrap().len(), 1, "a retry plans it again");
    });
}
