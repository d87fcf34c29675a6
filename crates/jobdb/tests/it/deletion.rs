//! A mirroring job's deletion step, on SQLite and PostgreSQL: claimable only once
//! every other unit of its job is done, failed (deleting nothing) when one of them
//! failed, waiting again after a retry; what it and the copies report written is held
//! to what they may write.

use crate::common;

use common::{listed_job, on_each, unit_counts};
use hetch_jobdb::{Db, JobState, PlannedUnit, Retry, UnitOutcome};
use hetch_jobs::UnitSpec;

const TTL: u64 = 30_000;

/// Queues job `id` over files f0 (10 bytes) and f1 (20 bytes), one batch each, and
/// its deletion step last.
async fn mirror(db: &Db, id: &str, now: u64) {
    let lease = listed_job(db, id, 0, &[10, 20], now).await;
    let batch = |first, bytes| PlannedUnit {
        spec: UnitSpec::Files {
            first,
            end: first + 1,
            bytes,
        },
        bytes,
    };
    let delete = PlannedUnit {
        spec: UnitSpec::Delete {},
        bytes: 0,
    };
    let units = [batch(0, 10), batch(1, 20), delete];
    db.add_units(&lease, 0, &units, 1).await.unwrap();
    assert!(db.queue(&lease, now).await.unwrap());
}

fn done(files: u64, bytes: u64, written: u64) -> UnitOutcome {
    UnitOutcome::Done {
        files,
        bytes,
        written,
    }
}

#[test]
fn the_deletion_step_waits_for_every_copy_and_its_report_is_bounded() {
    on_each(|db, _| async move {
        mirror(&db, "m", 0).await;
        let got = db.claim("w", 1, TTL, 10).await.unwrap();
        let seqs: Vec<u64> = got.iter().map(|c| c.seq).collect();
        assert_eq!(seqs, [0, 1], "the deletion step waits");
        assert_eq!(unit_counts(&db, "m").await.waiting, 1);
        // One copy done, one still running: it still waits.
        db.finish("w", &got[0].held(), 2, &done(1, 10, 0))
            .await
            .unwrap()
            .unwrap();
        assert!(db.claim("w2", 3, TTL, 10).await.unwrap().is_empty());
        // Every copy done: now it is claimable, and the job is not done before it.
        db.finish("w", &got[1].held(), 4, &done(1, 20, 0))
            .await
            .unwrap()
            .unwrap();
        let del = db.claim("w2", 5, TTL, 10).await.unwrap();
        assert_eq!(del.len(), 1);
        assert_eq!((del[0].seq, &del[0].spec), (2, &UnitSpec::Delete {}));
        assert_eq!(db.job("m").await.unwrap().unwrap().state, JobState::Running);
        // An absurd report: it moves no listed entry, and writes at most the listing.
        db.finish(
            "w2",
            &del[0].held(),
            6,
            &done(1 << 40, 1 << 40, u64::MAX >> 1),
        )
        .await
        .unwrap()
        .unwrap();
        let job = db.job("m").await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.files_done, job.bytes_done, job.bytes_written),
            (JobState::Done, 2, 30, 30)
        );
    });
}

#[test]
fn a_copy_that_fails_fails_the_deletion_step_and_a_retry_waits_again() {
    on_each(|db, _| async move {
        mirror(&db, "f", 0).await;
        let got = db.claim("w", 1, TTL, 10).await.unwrap();
        db.finish("w", &got[0].held(), 2, &done(1, 10, 10))
            .await
            .unwrap()
            .unwrap();
        let broke = UnitOutcome::Failed("f1: no space left".into());
        db.finish("w", &got[1].held(), 3, &broke)
            .await
            .unwrap()
            .unwrap();
        let job = db.job("f").await.unwrap().unwrap();
        // The job says why its copy failed; the deletion step why it deleted nothing.
        assert_eq!(
            (job.state, job.error.as_deref(), job.bytes_written),
            (JobState::Failed, Some("f1: no space left"), 10)
        );
        let c = unit_counts(&db, "f").await;
        assert_eq!((c.done, c.failed, c.waiting, c.ready), (1, 2, 0, 0));
        assert!(db.claim("w", 4, TTL, 10).await.unwrap().is_empty());

        // A retry redoes the copy; the deletion step waits for it again.
        assert_eq!(db.retry("f", 5, None).await.unwrap(), Retry::Units(2));
        let again = db.claim("w", 6, TTL, 10).await.unwrap();
        assert_eq!(again.iter().map(|c| c.seq).collect::<Vec<_>>(), [1]);
        db.finish("w", &again[0].held(), 7, &done(1, 20, 20))
            .await
            .unwrap()
            .unwrap();
        let del = db.claim("w", 8, TTL, 10).await.unwrap();
        assert_eq!(del[0].spec, UnitSpec::Delete {});

        // The deletion step refusing (--max-delete) fails the job with its line.
        let why = "deletions skipped: 2 entries would be deleted, more than --max-delete 1";
        db.finish("w", &del[0].held(), 9, &UnitOutcome::Failed(why.into()))
            .await
            .unwrap()
            .unwrap();
        let job = db.job("f").await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.error.as_deref()),
            (JobState::Failed, Some(why))
        );
    });
}

#[test]
fn a_mirror_of_nothing_to_copy_is_ready_to_delete_at_once() {
    on_each(|db, _| async move {
        let lease = listed_job(&db, "e", 0, &[], 0).await;
        let delete = PlannedUnit {
            spec: UnitSpec::Delete {},
            bytes: 0,
        };
        db.add_units(&lease, 0, &[delete], 1).await.unwrap();
        assert!(db.queue(&lease, 1).await.unwrap());
        let del = db.claim("w", 2, TTL, 10).await.unwrap();
        assert_eq!(del.len(), 1);
        assert_eq!(del[0].spec, UnitSpec::Delete {});
    });
}
