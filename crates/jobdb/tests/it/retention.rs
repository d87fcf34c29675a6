//! Retention of finished jobs, on SQLite and PostgreSQL: finished jobs beyond the
//! newest kept, or older than kept, go (unfinished ones and those with a webhook note
//! still to send stay); what they leave goes afterwards, a bounded batch at a time.

use crate::common;

use common::{job_of, on_each, planner};
use hetch_jobdb::Db;

/// Rows job `id` left in its listing and units.
async fn left(db: &Db, id: &str) -> (usize, usize) {
    let files = db.files(id, 0, 1_000).await.unwrap().len();
    (files, db.units(id).await.unwrap().len())
}

#[test]
fn finished_jobs_beyond_the_count_or_the_age_go_with_what_they_left_in_batches() {
    on_each(|db, _| async move {
        // One unit a file: each job leaves as many units as listing rows.
        let p = planner(1, u64::MAX, 1 << 20, 1 << 10);
        for id in ["a", "b", "c", "d", "queued", "noted"] {
            job_of(&db, id, 0, &[1, 2, 3], p, 1, 1).await;
        }
        // Ended at 10, 20, 30, 40 (cancelled is as finished as done or failed).
        for (id, at) in [("a", 10), ("b", 20), ("c", 30), ("d", 40)] {
            assert!(db.cancel(id, at).await.unwrap());
        }
        // Ended last, but its note is still to be sent.
        db.arm_webhook("noted", 1).await.unwrap();
        assert!(db.cancel("noted", 50).await.unwrap());

        // The newest two finished (noted, d) are kept: a, b and c go, oldest first,
        // at most two a call.
        assert_eq!(db.expire_jobs(2, 0, 2, 100).await.unwrap(), 2);
        assert!(db.job("a").await.unwrap().is_none());
        assert!(db.job("b").await.unwrap().is_none());
        assert!(db.job("c").await.unwrap().is_some());
        assert_eq!(db.expire_jobs(2, 0, 10, 100).await.unwrap(), 1);
        assert!(db.job("c").await.unwrap().is_none());
        assert_eq!(db.expire_jobs(2, 0, 10, 100).await.unwrap(), 0);

        // What they left goes afterwards, no more rows a call than asked.
        assert_eq!(left(&db, "a").await, (3, 3));
        assert_eq!(db.purge(4).await.unwrap(), 4);
        assert_eq!(left(&db, "a").await, (0, 2), "listing first, then units");
        assert_eq!(db.purge(100).await.unwrap(), 2 + 6 + 6);
        for id in ["a", "b", "c"] {
            assert_eq!(left(&db, id).await, (0, 0), "{id}");
        }
        assert_eq!(db.purge(100).await.unwrap(), 0);

        // By age: d ended before 45 and goes, keep as many as one likes; the noted
        // job is older than 60 too, but stays while its note is to be sent; the
        // unfinished job stays whatever its age.
        assert_eq!(db.expire_jobs(1_000, 60, 10, 100).await.unwrap(), 1);
        assert!(db.job("d").await.unwrap().is_none());
        assert!(db.job("noted").await.unwrap().is_some());
        assert!(db.job("queued").await.unwrap().is_some());
        assert_eq!(db.expire_jobs(0, u64::MAX, 10, 100).await.unwrap(), 0);
        // d's rows go; the unfinished job's stay.
        assert_eq!(db.purge(100).await.unwrap(), 6);
        assert_eq!(left(&db, "d").await, (0, 0));
        assert_eq!(left(&db, "queued").await, (3, 3));
    });
}
