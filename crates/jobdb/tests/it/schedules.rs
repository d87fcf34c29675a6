//! Schedules, on SQLite and PostgreSQL: a due time is taken by one instance only,
//! however many try at once (two `Db`s on one database are two service instances); a
//! paused or not-yet-due schedule is never handed out; the per-owner cap holds; the
//! history keeps the newest runs only.

#[allow(dead_code)] // shared by the test files; this one needs on_each only
use crate::common;

use common::on_each;
use hetch_jobdb::schedules::KEPT_RUNS;
use hetch_jobdb::{Db, NewSchedule, Recurrence, Run};

fn every(id: &str, owner: &str, ms: u64, next_at: u64) -> NewSchedule {
    NewSchedule {
        id: id.into(),
        owner: owner.into(),
        spec: "{}".into(),
        when: Recurrence::Every(ms),
        next_at,
    }
}

#[test]
fn two_instances_take_each_due_time_once() {
    on_each(|db, url| async move {
        let other = Db::open(&url).await.unwrap();
        assert!(db
            .create_schedule(&every("s", "ann", 1_000, 5_000), 10, 0)
            .await
            .unwrap());
        // Not due yet: nobody sees it.
        assert!(db.due_schedules(4_999, 10).await.unwrap().is_empty());
        // Both instances see it due, and both try to take it at once.
        let seen_a = db.due_schedules(5_000, 10).await.unwrap();
        let seen_b = other.due_schedules(5_000, 10).await.unwrap();
        assert_eq!((seen_a.len(), seen_b.len()), (1, 1));
        let (a, b) = tokio::join!(
            db.claim_schedule("s", seen_a[0].next_at, 6_000),
            other.claim_schedule("s", seen_b[0].next_at, 6_000),
        );
        let taken = [a.unwrap(), b.unwrap()];
        assert_eq!(taken.iter().filter(|t| **t).count(), 1, "{taken:?}");
        // Its next due time is the taker's, and a stale claim of the old one fails.
        assert_eq!(db.schedule("s").await.unwrap().unwrap().next_at, 6_000);
        assert!(!db.claim_schedule("s", 5_000, 7_000).await.unwrap());
        other.close().await;
    });
}

#[test]
fn a_paused_schedule_is_not_due_and_resumes_at_its_new_time() {
    on_each(|db, _| async move {
        db.create_schedule(&every("s", "ann", 1_000, 0), 10, 0)
            .await
            .unwrap();
        assert!(db.pause_schedule("s", true, None).await.unwrap());
        assert!(db.due_schedules(10_000, 10).await.unwrap().is_empty());
        // A claim read before the pause is refused after it.
        assert!(!db.claim_schedule("s", 0, 1_000).await.unwrap());
        assert!(db.pause_schedule("s", false, Some(20_000)).await.unwrap());
        assert!(db.due_schedules(19_999, 10).await.unwrap().is_empty());
        let due = db.due_schedules(20_000, 10).await.unwrap();
        assert_eq!(due.len(), 1);
        assert!(!due[0].paused);
        assert!(!db.pause_schedule("nope", true, None).await.unwrap());
    });
}

#[test]
fn an_owner_has_at_most_the_cap() {
    on_each(|db, _| async move {
        for i in 0..3 {
            let s = every(&format!("a{i}"), "ann", 1_000, 0);
            assert!(db.create_schedule(&s, 3, 0).await.unwrap());
        }
        assert!(!db
            .create_schedule(&every("a3", "ann", 1_000, 0), 3, 0)
            .await
            .unwrap());
        // Another owner has a cap of their own.
        assert!(db
            .create_schedule(&every("b0", "bob", 1_000, 0), 3, 0)
            .await
            .unwrap());
        assert_eq!(db.schedules(Some("ann"), 100).await.unwrap().len(), 3);
        assert_eq!(db.schedules(None, 100).await.unwrap().len(), 4);
        // Deleting one makes room.
        assert!(db.delete_schedule("a0").await.unwrap());
        assert!(!db.delete_schedule("a0").await.unwrap());
        assert!(db
            .create_schedule(&every("a3", "ann", 1_000, 0), 3, 0)
            .await
            .unwrap());
    });
}

#[test]
fn the_history_keeps_the_newest_runs_and_the_last_job() {
    on_each(|db, _| async move {
        let cron = NewSchedule {
            when: Recurrence::Cron("0 * * * *".into()),
            ..every("s", "ann", 0, 0)
        };
        db.create_schedule(&cron, 10, 0).await.unwrap();
        let n = KEPT_RUNS + 5;
        for due in 0..n {
            let run = match due % 2 {
                0 => Run::Job(format!("j{due}")),
                _ => Run::Skipped("still running".into()),
            };
            db.record_run("s", due, &run).await.unwrap();
        }
        let runs = db.runs("s", 1_000).await.unwrap();
        assert_eq!(runs.len() as u64, KEPT_RUNS);
        assert_eq!(runs[0].due, n - 1);
        assert_eq!(runs.last().unwrap().due, n - KEPT_RUNS);
        assert_eq!(runs[0].skipped.as_deref(), None);
        assert_eq!(runs[1].skipped.as_deref(), Some("still running"));
        let s = db.schedule("s").await.unwrap().unwrap();
        assert_eq!(s.when, Recurrence::Cron("0 * * * *".into()));
        assert_eq!(s.last_job.as_deref(), Some(&*format!("j{}", n - 1)));
        // Its job is not in the database: no state.
        assert_eq!(s.last_state, None);
        assert_eq!(db.runs("s", 20).await.unwrap().len(), 20);
    });
}
