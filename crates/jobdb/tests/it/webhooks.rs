//! The outbox of webhook notes: a delivery is due only once its job ended, held by
//! one service instance at a time (two instances on one database never both take
//! it), recorded only by its holder, kept across a reopening, and due again when a
//! retried job ends again.

use hetch_jobdb::{Attempt, Db, JobState, UnitOutcome};

use crate::common::{job_of, on_each, planner};

const TTL: u64 = 1_000;

#[test]
fn a_delivery_is_due_when_its_job_ends_and_held_by_one_instance_at_a_time() {
    on_each(|db, url| async move {
        job_of(&db, "j", 0, &[1, 2], planner(1, u64::MAX, 1, 1), 3, 0).await;
        db.arm_webhook("j", 1).await.unwrap();
        assert!(
            db.claim_deliveries("a", 10 + TTL, 10, 16)
                .await
                .unwrap()
                .is_empty(),
            "the job has not ended"
        );
        assert_eq!(db.delivery("j").await.unwrap().unwrap().state, "armed");
        assert!(db.cancel("j", 20).await.unwrap());

        // Two instances on one database claim at once: one gets it.
        let other = Db::open(&url).await.unwrap();
        let (a, b) = tokio::join!(
            db.claim_deliveries("a", 30 + TTL, 30, 16),
            other.claim_deliveries("b", 30 + TTL, 30, 16)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.len() + b.len(), 1, "{a:?} {b:?}");
        let (holder, loser, due) = match a.first() {
            Some(d) => ("a", "b", d.clone()),
            None => ("b", "a", b[0].clone()),
        };
        assert_eq!(
            (due.job.state, due.finished, due.attempts),
            (JobState::Cancelled, 20, 0)
        );
        let failed = Attempt::Failed {
            error: "answered 500".into(),
            next: Some(100),
        };
        assert!(!db
            .record_attempt("j", loser, 20, &failed, 40)
            .await
            .unwrap());
        assert!(db
            .record_attempt("j", holder, 20, &failed, 40)
            .await
            .unwrap());
        let d = db.delivery("j").await.unwrap().unwrap();
        assert_eq!(
            (d.state.as_str(), d.attempts, d.next_attempt),
            ("pending", 1, 100)
        );
        assert_eq!(d.id(), "j-20");
        // Not due before its time, and not taken while held.
        assert!(db
            .claim_deliveries("a", 50 + TTL, 50, 16)
            .await
            .unwrap()
            .is_empty());
        let again = other
            .claim_deliveries("b", 100 + TTL, 100, 16)
            .await
            .unwrap();
        assert_eq!(again.len(), 1);
        assert!(db
            .claim_deliveries("a", 200, 200, 16)
            .await
            .unwrap()
            .is_empty());
        // A holder that vanished: its lease runs out and another takes over.
        let taken = db
            .claim_deliveries("a", 1_200 + TTL, 1_200, 16)
            .await
            .unwrap();
        assert_eq!(taken[0].attempts, 1);
        assert!(!other
            .record_attempt("j", "b", 20, &Attempt::Delivered, 1_300)
            .await
            .unwrap());
        assert!(db
            .record_attempt("j", "a", 20, &Attempt::Delivered, 1_300)
            .await
            .unwrap());
        other.close().await;

        // Reopened, the row is as it was, and nothing is due again...
        let reopened = Db::open(&url).await.unwrap();
        let d = reopened.delivery("j").await.unwrap().unwrap();
        assert_eq!((d.state.as_str(), d.attempts), ("delivered", 2));
        assert!(reopened
            .claim_deliveries("a", 9_000, 2_000, 16)
            .await
            .unwrap()
            .is_empty());
        // ... until the job, retried, ends again: a new delivery from the start.
        reopened.retry("j", 3_000, None).await.unwrap();
        let units = reopened.claim("w", 3_100, TTL, 8).await.unwrap();
        for u in &units {
            let done = UnitOutcome::Done {
                files: 1,
                bytes: 1,
                written: 1,
            };
            reopened
                .finish("w", &u.held(), 3_200, &done)
                .await
                .unwrap()
                .unwrap();
        }
        let due = reopened
            .claim_deliveries("a", 9_000, 4_000, 16)
            .await
            .unwrap();
        assert_eq!(
            (due.len(), due[0].job.state, due[0].attempts),
            (1, JobState::Done, 0)
        );
        assert_eq!(due[0].finished, 3_200);
        let gave_up = Attempt::Failed {
            error: "no answer within 10 s".into(),
            next: None,
        };
        assert!(reopened
            .record_attempt("j", "a", 3_200, &gave_up, 4_100)
            .await
            .unwrap());
        let recent = reopened.recent_deliveries(10).await.unwrap();
        assert_eq!(recent.len(), 1);
        assert_eq!(
            (recent[0].state.as_str(), recent[0].id()),
            ("given_up", "j-3200".into())
        );
        assert_eq!(
            recent[0].last_error.as_deref(),
            Some("no answer within 10 s")
        );
        reopened.close().await;
    });
}
