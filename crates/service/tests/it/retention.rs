//! Retention of finished jobs through a real service, on SQLite and PostgreSQL: its
//! background loop deletes finished jobs beyond the newest it keeps, then those older
//! than it keeps; unfinished jobs stay. (Batches, what the jobs leave and webhook
//! notes still to send: crates/jobdb's `tests/it/retention.rs`.)

use std::time::{Duration, Instant};

use hetch_service::retention::Retention;
use serde_json::{json, Value};

use crate::common::{on_each, planner, start_configured, Api};

/// The ids of the jobs listed, once `ok` holds of them (a liveness guard of two
/// minutes: the loop runs every few seconds).
async fn jobs_until(api: &Api, what: &str, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (s, v) = api.get("/api/jobs?limit=1000").await;
        assert_eq!(s, 200, "{v}");
        let jobs = v.as_array().unwrap().clone();
        if ok(&jobs) {
            return jobs;
        }
        assert!(Instant::now() < deadline, "never {what}: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn submit(api: &Api) -> String {
    let (s, v) = api
        .post("/api/jobs", json!({"sources": ["run1"], "dest": "copy"}))
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    api.planned(&id).await;
    id
}

#[test]
fn finished_jobs_beyond_the_newest_kept_or_older_than_kept_are_deleted() {
    on_each(|dir, url| async move {
        let keep_two = |c: &mut hetch_service::ServiceConfig| {
            c.retention = Retention {
                count: 2,
                age: Duration::from_secs(86_400),
            }
        };
        let (api, task) = start_configured(&dir, &url, planner(), keep_two).await;
        let running = submit(&api).await;
        let mut ended = Vec::new();
        for _ in 0..4 {
            let id = submit(&api).await;
            let (s, v) = api.post(&format!("/api/jobs/{id}/cancel"), json!({})).await;
            assert_eq!(s, 200, "{v}");
            ended.push((v["finished"].as_u64().unwrap(), id));
        }
        // The two that ended last are kept (ties in the millisecond by id).
        ended.sort();
        let kept: Vec<&str> = ended[2..].iter().map(|(_, id)| id.as_str()).collect();
        let left = jobs_until(&api, "down to three", |j| j.len() == 3).await;
        let mut ids: Vec<&str> = left.iter().map(|j| j["id"].as_str().unwrap()).collect();
        ids.sort();
        let mut want = vec![running.as_str(), kept[0], kept[1]];
        want.sort();
        assert_eq!(ids, want);
        for (_, id) in &ended[..2] {
            let (s, v) = api.get(&format!("/api/jobs/{id}/files?from=0&to=10")).await;
            assert_eq!(s, 404, "{v}");
        }
        task.abort();
        let _ = task.await;

        // Kept for a millisecond: every finished job goes, the unfinished one stays.
        let (api, _task) = start_configured(&dir, &url, planner(), |c| {
            c.retention = Retention {
                count: 1_000,
                age: Duration::from_millis(1),
            }
        })
        .await;
        let left = jobs_until(&api, "down to one", |j| j.len() == 1).await;
        assert_eq!(left[0]["id"], running.as_str());
        assert_eq!(left[0]["state"], "queued");
    });
}
