//! Recurring mirrors through the API, on SQLite and PostgreSQL, with no worker (so
//! that a run, once submitted, stays queued): a schedule submits a run at once; the
//! next due time, its run not having ended, is recorded as skipped with why; a paused
//! schedule submits nothing, a resumed one runs again; bad intervals and cron
//! expressions are 400s naming the field; an owner's cap is a 409; and another user
//! neither sees nor touches a schedule. (Mirroring with a real worker: the root
//! crate's `tests/it/schedules.rs`.)

use std::time::{Duration, Instant};

use hetch_oidc::OidcConfig;
use serde_json::{json, Value};

use crate::common::{on_each, planner, start_configured, Api};

/// Schedule `id` once `ok` holds of it (polled; a liveness guard of two minutes).
pub async fn until(
    api: &Api,
    token: &str,
    id: &str,
    what: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (s, v) = api
            .call("GET", &format!("/api/schedules/{id}"), None, Some(token))
            .await;
        assert_eq!(s, 200, "{v}");
        if ok(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "schedule {id}: never {what}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn runs(v: &Value) -> &Vec<Value> {
    v["runs"].as_array().unwrap()
}

#[test]
fn a_run_not_ended_makes_the_next_due_time_a_skipped_run_and_pause_stops_runs() {
    on_each(|dir, url| async move {
        let (api, _task) = start_configured(&dir, &url, planner(), |_| {}).await;
        let t = api.token.clone();
        let (s, made) = api
            .post(
                "/api/schedules",
                json!({"job": {"sources": ["run1"], "dest": "copy"}, "every": "1s"}),
            )
            .await;
        assert_eq!(s, 201, "{made}");
        let id = made["id"].as_str().unwrap().to_string();
        assert_eq!(made["every_ms"], 1000);
        assert_eq!(made["owner"], "token");
        // The first run at once; with no worker it never ends, so the next due time
        // is skipped, naming it.
        let v = until(&api, &t, &id, "skipped", |v| {
            runs(v).iter().any(|r| r["skipped"].is_string())
        })
        .await;
        let first = runs(&v).last().unwrap().clone();
        let job = first["job"]
            .as_str()
            .expect("the first run is a job")
            .to_string();
        let skipped = &runs(&v)[0];
        assert!(skipped["job"].is_null(), "{v}");
        let why = skipped["skipped"].as_str().unwrap();
        assert!(why.contains(&job) && why.contains("still"), "{why}");
        // Every run after the first was skipped: one job only.
        let (_, jobs) = api.get("/api/jobs").await;
        assert_eq!(jobs.as_array().unwrap().len(), 1, "{jobs}");
        assert_eq!(jobs[0]["id"], job.as_str());

        // Paused: no more runs, however many due times pass. The loop's ticks are
        // counted by another schedule every second: once it has three runs, the
        // paused one was due at least twice meanwhile.
        let (s, p) = api
            .post(&format!("/api/schedules/{id}/pause"), json!({}))
            .await;
        assert_eq!((s, &p["paused"]), (200, &json!(true)), "{p}");
        let newest = runs(&p)[0]["due"].clone();
        let (s, other) = api
            .post(
                "/api/schedules",
                json!({"job": {"sources": ["run1"], "dest": "c2"}, "every": "1s"}),
            )
            .await;
        assert_eq!(s, 201, "{other}");
        let other = other["id"].as_str().unwrap().to_string();
        until(&api, &t, &other, "run thrice", |v| runs(v).len() >= 3).await;
        let still = until(&api, &t, &id, "shown", |_| true).await;
        assert_eq!(runs(&still)[0]["due"], newest, "ran while paused: {still}");
        assert_eq!(still["paused"], true);

        // Its job ended, the schedule resumed: it runs again, a new job.
        let (s, c) = api
            .post(&format!("/api/jobs/{job}/cancel"), json!({}))
            .await;
        assert_eq!(s, 200, "{c}");
        let (s, r) = api
            .post(&format!("/api/schedules/{id}/resume"), json!({}))
            .await;
        assert_eq!((s, &r["paused"]), (200, &json!(false)), "{r}");
        let v = until(&api, &t, &id, "run again", |v| {
            runs(v)[0]["job"].as_str().is_some_and(|j| j != job)
        })
        .await;
        // A new job not ended: the planner may or may not have planned it yet (and no
        // worker runs it), so `planning` and `queued` both hold.
        let state = runs(&v)[0]["state"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(["planning", "queued"].contains(&state.as_str()), "{v}");

        // Deleted: gone, its jobs stay.
        let (s, _) = api
            .call("DELETE", &format!("/api/schedules/{id}"), None, Some(&t))
            .await;
        assert_eq!(s, 200);
        let (s, _) = api.get(&format!("/api/schedules/{id}")).await;
        assert_eq!(s, 404);
        let (s, _) = api.get(&format!("/api/jobs/{job}")).await;
        assert_eq!(s, 200);
    });
}

#[test]
fn bad_recurrences_are_400s_naming_the_field_and_the_cap_holds() {
    on_each(|dir, url| async move {
        let (api, _task) = start_configured(&dir, &url, planner(), |c| c.max_schedules = 2).await;
        let job = json!({"sources": ["run1"], "dest": "copy"});
        for (body, field) in [
            (json!({"job": job, "every": "0s"}), "every"),
            (json!({"job": job, "every": "0"}), "every"),
            (json!({"job": job, "every": "10y"}), "every"),
            (json!({"job": job, "every": "366d"}), "every"),
            (
                json!({"job": job, "every": "99999999999999999999d"}),
                "every",
            ),
            (json!({"job": job, "cron": "garbage"}), "cron"),
            (json!({"job": job, "cron": "61 * * * *"}), "cron"),
            (json!({"job": job, "cron": "0 0 30 2 *"}), "cron"),
            // A watch never ends: every later run of it would be skipped.
            (
                json!({"job": {"sources": ["run1"], "dest": "copy",
                    "options": {"stream": {"forever": true}}}, "every": "1h"}),
                "every",
            ),
            (json!({"job": job}), "every"),
            (
                json!({"job": job, "every": "1h", "cron": "0 * * * *"}),
                "every",
            ),
            (
                json!({"job": {"sources": ["nope"], "dest": "copy"}, "every": "1h"}),
                "sources",
            ),
            (
                json!({"job": {"sources": ["../x"], "dest": "copy"}, "every": "1h"}),
                "sources",
            ),
        ] {
            let (s, v) = api.post("/api/schedules", body.clone()).await;
            assert_eq!((s, v["field"].as_str()), (400, Some(field)), "{body}: {v}");
        }
        let (s, v) = api
            .post("/api/schedules", json!({"job": job, "every": "1h", "x": 1}))
            .await;
        assert_eq!(s, 400, "{v}");
        // Nothing half-made by the refusals.
        assert_eq!(api.get("/api/schedules").await.1, json!([]));

        let hourly = json!({"job": job, "cron": "0 * * * *"});
        for _ in 0..2 {
            let (s, v) = api.post("/api/schedules", hourly.clone()).await;
            assert_eq!(s, 201, "{v}");
            assert_eq!(v["cron"], "0 * * * *");
            // Next due on a whole hour, within the next one.
            let next = v["next_at"].as_u64().unwrap();
            assert_eq!(next % 3_600_000, 0, "{v}");
        }
        let (s, v) = api.post("/api/schedules", hourly).await;
        assert_eq!(s, 409, "{v}");
        assert!(v["error"].as_str().unwrap().contains("2 schedules"), "{v}");
        assert_eq!(
            api.get("/api/schedules").await.1.as_array().unwrap().len(),
            2
        );
    });
}

#[test]
fn another_user_neither_sees_nor_touches_a_schedule() {
    use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
    on_each(|dir, url| async move {
        let key = ec_key("k1");
        let issuer = TestIssuer::start(&[&key]).await;
        let oidc = OidcConfig::new(&issuer.url, AUDIENCE);
        let (api, _task) = start_configured(&dir, &url, planner(), |c| c.oidc = Some(oidc)).await;
        let as_user = |sub: &str| {
            let mut c = claims(&issuer.url);
            c["sub"] = json!(sub);
            sign(&key, &c)
        };
        let (alice, bob) = (as_user("alice"), as_user("bob"));
        let body = json!({"job": {"sources": ["run1"], "dest": "copy"}, "cron": "0 0 1 1 *"});
        let (s, v) = api
            .call("POST", "/api/schedules", Some(body), Some(&alice))
            .await;
        assert_eq!(s, 201, "{v}");
        assert_eq!(v["owner"], "oidc:alice");
        let id = v["id"].as_str().unwrap().to_string();
        let (_, l) = api.call("GET", "/api/schedules", None, Some(&bob)).await;
        assert_eq!(l, json!([]));
        for (method, path) in [
            ("GET", format!("/api/schedules/{id}")),
            ("POST", format!("/api/schedules/{id}/pause")),
            ("POST", format!("/api/schedules/{id}/resume")),
            ("DELETE", format!("/api/schedules/{id}")),
        ] {
            let (s, v) = api.call(method, &path, None, Some(&bob)).await;
            assert_eq!(s, 404, "{method} {path}: {v}");
            assert_eq!(v["error"], format!("no schedule {id}"));
        }
        // Untouched: still Alice's, not paused; she and the service token see it.
        let (s, v) = api
            .call("GET", &format!("/api/schedules/{id}"), None, Some(&alice))
            .await;
        assert_eq!((s, &v["paused"]), (200, &json!(false)), "{v}");
        let (_, all) = api.get("/api/schedules").await;
        assert_eq!(all.as_array().unwrap().len(), 1);
    });
}

#[test]
fn a_schedules_webhook_secret_is_never_shown() {
    on_each(|dir, url| async move {
        let (api, _task) = start_configured(&dir, &url, planner(), |_| {}).await;
        let secret = "0123456789abcdef-never-shown";
        let body = json!({"job": {"sources": ["run1"], "dest": "copy",
            "webhook": {"url": "https://hooks.example.org/hetch", "secret": secret}},
            "cron": "0 0 1 1 *"});
        let (s, made) = api.post("/api/schedules", body).await;
        assert_eq!(s, 201, "{made}");
        let id = made["id"].as_str().unwrap().to_string();
        let shown = [
            made,
            api.get(&format!("/api/schedules/{id}")).await.1,
            api.get("/api/schedules").await.1,
            api.post(&format!("/api/schedules/{id}/pause"), json!({}))
                .await
                .1,
            api.call(
                "DELETE",
                &format!("/api/schedules/{id}"),
                None,
                Some(&api.token),
            )
            .await
            .1,
        ];
        for v in shown {
            let text = v.to_string();
            assert!(!text.contains(secret), "{text}");
            let one = if v.is_array() { &v[0] } else { &v };
            assert_eq!(
                one["webhook"]["url"], "https://hooks.example.org/hetch",
                "{v}"
            );
            assert_eq!(one["webhook"]["secret_set"], true, "{v}");
            assert!(one["job"].get("webhook").is_none(), "{v}");
        }
    });
}

#[test]
fn a_schedule_more_often_than_the_minimum_is_a_400_and_old_ones_are_held_to_it() {
    on_each(|dir, url| async move {
        let five_minutes = |c: &mut hetch_service::ServiceConfig| {
            c.min_schedule_interval = Duration::from_secs(300)
        };
        let (api, task) = start_configured(&dir, &url, planner(), five_minutes).await;
        let job = json!({"sources": ["run1"], "dest": "copy"});
        for (body, field) in [
            (json!({"job": job, "every": "1s"}), "every"),
            (json!({"job": job, "every": "299s"}), "every"),
            (json!({"job": job, "cron": "* * * * *"}), "cron"),
            (json!({"job": job, "cron": "0,4 * * * *"}), "cron"),
            // 23:58, then 00:00 the next day.
            (json!({"job": job, "cron": "0,58 0,23 * * *"}), "cron"),
        ] {
            let (s, v) = api.post("/api/schedules", body.clone()).await;
            assert_eq!((s, v["field"].as_str()), (400, Some(field)), "{body}: {v}");
            let line = v["error"].as_str().unwrap();
            assert!(line.contains("--min-schedule-interval 300 s"), "{line}");
        }
        for body in [
            json!({"job": job, "every": "5m"}),
            json!({"job": job, "cron": "*/5 * * * *"}),
        ] {
            let (s, v) = api.post("/api/schedules", body.clone()).await;
            assert_eq!(s, 201, "{body}: {v}");
        }
        task.abort();
        let _ = task.await;

        // Made every second where that was allowed, then held to five minutes: one
        // paused there and resumed here, and one left running.
        let (api, task) = start_configured(&dir, &url, planner(), |_| {}).await;
        let t = api.token.clone();
        let mut made = Vec::new();
        for dest in ["paused", "running"] {
            let body = json!({"job": {"sources": ["run1"], "dest": dest}, "every": "1s"});
            let (s, v) = api.post("/api/schedules", body).await;
            assert_eq!(s, 201, "{v}");
            let id = v["id"].as_str().unwrap().to_string();
            until(&api, &t, &id, "run", |v| !runs(v).is_empty()).await;
            made.push(id);
        }
        let (s, p) = api
            .post(&format!("/api/schedules/{}/pause", made[0]), json!({}))
            .await;
        assert_eq!(s, 200, "{p}");
        let newest = runs(&p)[0]["due"].as_u64().unwrap();
        task.abort();
        let _ = task.await;
        let (api, _task) = start_configured(&dir, &url, planner(), five_minutes).await;
        let (s, r) = api
            .post(&format!("/api/schedules/{}/resume", made[0]), json!({}))
            .await;
        assert_eq!(s, 200, "{r}");
        let next = r["next_at"].as_u64().unwrap();
        assert!(next >= newest + 300_000, "next {next}, last {newest}: {r}");
        // The one left running: once this service has run it, its next due time is
        // five minutes on (until then it may show the old service's second).
        until(&api, &t, &made[1], "held to five minutes", |v| {
            let due = runs(v)[0]["due"].as_u64().unwrap();
            v["next_at"].as_u64().unwrap() >= due + 300_000
        })
        .await;
    });
}
