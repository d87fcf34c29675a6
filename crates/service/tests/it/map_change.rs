//! Schedules and retries across a change of the operator's identity map, on SQLite
//! and PostgreSQL: made under one map, a schedule's next run and a job's retry after a
//! restart with another reach what the new map grants by the same entry (the workers
//! are handed that); with the entry gone, or with a map where there was none, a run is
//! skipped and a retry refused, each with one line saying why.

use std::path::Path;

use hetch_oidc::OidcConfig;
use hetch_service::identity::IdentityMap;
use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
use serde_json::{json, Value};

use crate::common::{on_each, planner, start_configured, Api};
use crate::schedules::{runs, until};

/// Alice's group may read its tree and write below it.
const WIDE: &str = r#"
    [[identity]]
    claim = "groups"
    value = "astro"
    read = ["groups/astro", "public"]
    write = ["groups/astro"]
"#;

/// The same entry, narrowed to the data and the output directory.
const NARROW: &str = r#"
    [[identity]]
    claim = "groups"
    value = "astro"
    read = ["groups/astro/data"]
    write = ["groups/astro/out"]
"#;

/// Alice's entry removed.
const GONE: &str = r#"
    [[identity]]
    claim = "groups"
    value = "bio"
    read = ["groups/bio"]
    write = ["groups/bio"]
"#;

/// What every case copies: inside both reaches.
fn job() -> Value {
    json!({"sources": ["groups/astro/data"], "dest": "groups/astro/out/copy"})
}

/// An issuer and Alice's token (of group astro).
struct Users {
    issuer: TestIssuer,
    alice: String,
}

async fn users() -> Users {
    let key = ec_key("k1");
    let issuer = TestIssuer::start(&[&key]).await;
    let mut c = claims(&issuer.url);
    c["sub"] = json!("alice");
    c["groups"] = json!(["astro"]);
    let alice = sign(&key, &c);
    Users { issuer, alice }
}

/// A service on `dir` letting in `u`'s issuer's users, with identity map `map` (none
/// if `None`). Dropping what it answers with stops it (its loops too).
async fn serve(
    dir: &Path,
    url: &str,
    u: &Users,
    map: Option<&str>,
) -> (Api, tokio::task::JoinHandle<()>) {
    std::fs::create_dir_all(dir.join("root/groups/astro/data")).unwrap();
    std::fs::create_dir_all(dir.join("root/groups/astro/out")).unwrap();
    std::fs::write(dir.join("root/groups/astro/data/f"), b"astro").unwrap();
    let oidc = OidcConfig::new(&u.issuer.url, AUDIENCE);
    let map = map.map(|m| IdentityMap::parse(m).unwrap());
    start_configured(dir, url, planner(), |c| {
        c.oidc = Some(oidc);
        c.identities = map;
    })
    .await
}

/// Stops the service `task` runs and starts it again on the same database with map
/// `map`.
async fn restart(
    task: tokio::task::JoinHandle<()>,
    dir: &Path,
    url: &str,
    u: &Users,
    map: Option<&str>,
) -> (Api, tokio::task::JoinHandle<()>) {
    task.abort();
    let _ = task.await;
    serve(dir, url, u, map).await
}

/// Alice's schedule every second, and the job of its first run.
async fn schedule(api: &Api, u: &Users) -> (String, String) {
    let body = json!({"job": job(), "every": "1s"});
    let (s, v) = api
        .call("POST", "/api/schedules", Some(body), Some(&u.alice))
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let v = until(api, &api.token, &id, "run", |v| {
        runs(v).iter().any(|r| r["job"].is_string())
    })
    .await;
    let first = runs(&v).last().unwrap()["job"]
        .as_str()
        .unwrap()
        .to_string();
    (id, first)
}

/// Alice's job, submitted and planned.
async fn alices_job(api: &Api, u: &Users) -> String {
    let (s, v) = api
        .call("POST", "/api/jobs", Some(job()), Some(&u.alice))
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    api.planned(&id).await;
    id
}

/// Alice's job, submitted and cancelled (a retry has what to run again).
async fn ended_job(api: &Api, u: &Users) -> String {
    let id = alices_job(api, u).await;
    cancel(api, &id).await;
    id
}

async fn cancel(api: &Api, id: &str) {
    let (s, v) = api.post(&format!("/api/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(s, 200, "{v}");
}

/// What job `id` may touch, as recorded with it.
async fn access(api: &Api, id: &str) -> Value {
    let (s, v) = api.get(&format!("/api/jobs/{id}")).await;
    assert_eq!(s, 200, "{v}");
    v["spec"]["access"].clone()
}

/// The newest run of schedule `id` that is not `old`'s: the job it submitted, or why
/// it was skipped, once a run after the wait for `old` is recorded.
async fn next_run(api: &Api, id: &str, old: &str) -> Value {
    let waited = |r: &Value| r["skipped"].as_str().is_some_and(|w| w.contains(old));
    let v = until(api, &api.token, id, "run again", |v| {
        let r = &runs(v)[0];
        r["job"].as_str().is_some_and(|j| j != old) || (r["skipped"].is_string() && !waited(r))
    })
    .await;
    runs(&v)[0].clone()
}

#[test]
fn a_narrowed_entry_narrows_the_next_run_of_a_schedule_and_a_retry() {
    on_each(|dir, url| async move {
        let u = users().await;
        let (api, task) = serve(&dir, &url, &u, Some(WIDE)).await;
        let (id, first) = schedule(&api, &u).await;
        let wide = access(&api, &first).await;
        assert_eq!(wide["read"], json!(["groups/astro", "public"]), "{wide}");
        let old = ended_job(&api, &u).await;

        let (api, _task) = restart(task, &dir, &url, &u, Some(NARROW)).await;
        cancel(&api, &first).await;
        let run = next_run(&api, &id, &first).await;
        let job = run["job"].as_str().unwrap_or_else(|| panic!("{run}"));
        let narrow = json!({"entry": "groups=astro", "read": ["groups/astro/data"],
            "write": ["groups/astro/out"]});
        assert_eq!(access(&api, job).await, narrow);

        let (s, v) = api
            .call(
                "POST",
                &format!("/api/jobs/{old}/retry"),
                None,
                Some(&u.alice),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["spec"]["access"], narrow, "{v}");
        // What the workers are handed is the narrowed reach too.
        cancel(&api, job).await;
        let (_, got) = api
            .post("/api/work/claim", json!({"worker": "w", "max": 64}))
            .await;
        let got = got.as_array().unwrap();
        assert!(!got.is_empty());
        for unit in got {
            assert_eq!(unit["spec"]["access"], narrow, "{unit}");
        }
    });
}

#[test]
fn with_its_entry_gone_a_schedule_is_skipped_and_a_retry_refused() {
    on_each(|dir, url| async move {
        let u = users().await;
        let (api, task) = serve(&dir, &url, &u, Some(WIDE)).await;
        let (id, first) = schedule(&api, &u).await;
        let old = ended_job(&api, &u).await;

        let (api, _task) = restart(task, &dir, &url, &u, Some(GONE)).await;
        cancel(&api, &first).await;
        let run = next_run(&api, &id, &first).await;
        assert_eq!(
            run["skipped"], "not submitted: identity map entry groups=astro is gone",
            "{run}"
        );
        let (s, v) = api.post(&format!("/api/jobs/{old}/retry"), json!({})).await;
        assert_eq!(s, 403, "{v}");
        assert_eq!(
            v["error"],
            "not retried: identity map entry groups=astro is gone"
        );
        // Nothing ran: the first run and the old job only, both ended.
        let (_, jobs) = api.get("/api/jobs").await;
        let states: Vec<&str> = jobs
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["state"].as_str().unwrap())
            .collect();
        assert_eq!(states, ["cancelled", "cancelled"], "{jobs}");
    });
}

#[test]
fn made_before_there_was_a_map_a_schedule_is_skipped_and_a_retry_refused() {
    on_each(|dir, url| async move {
        let u = users().await;
        let (api, task) = serve(&dir, &url, &u, None).await;
        let (id, first) = schedule(&api, &u).await;
        assert!(access(&api, &first).await.is_null());
        let old = ended_job(&api, &u).await;

        // A map that names Alice: still, nothing of hers says which entry it was.
        let (api, _task) = restart(task, &dir, &url, &u, Some(WIDE)).await;
        cancel(&api, &first).await;
        let run = next_run(&api, &id, &first).await;
        assert_eq!(
            run["skipped"],
            "not submitted: the schedule was made before the service had an identity map",
            "{run}"
        );
        for token in [&u.alice, &api.token] {
            let (s, v) = api
                .call("POST", &format!("/api/jobs/{old}/retry"), None, Some(token))
                .await;
            assert_eq!(s, 403, "{v}");
            let want =
                format!("not retried: job {old} was made before the service had an identity map");
            assert_eq!(v["error"], want.as_str());
        }
    });
}

/// A job already queued, and a unit a worker already holds, take their reach from
/// the map as it is when they are handed out and kept: with the submitter's entry
/// gone, a heartbeat no longer keeps the held unit (its worker stops it), and each
/// claim of the queued job's unit fails it with the reason instead of handing it
/// out, until the job fails saying why.
#[test]
fn with_its_entry_gone_a_queued_job_is_not_handed_out_and_a_held_unit_not_kept() {
    on_each(|dir, url| async move {
        let u = users().await;
        let (api, task) = serve(&dir, &url, &u, Some(WIDE)).await;
        let ids = [alices_job(&api, &u).await, alices_job(&api, &u).await];
        let (s, got) = api
            .post("/api/work/claim", json!({"worker": "w", "max": 1}))
            .await;
        assert_eq!(s, 200, "{got}");
        let held = got[0].clone();
        let queued = ids.iter().find(|id| held["job"] != id.as_str()).unwrap();
        let beat = json!({"worker": "w", "units": [{"job": held["job"], "seq": held["seq"],
                                                    "lease": held["lease"]}]});
        let (s, hb) = api.post("/api/work/heartbeat", beat.clone()).await;
        assert_eq!(
            (s, hb["held"].as_array().map(Vec::len)),
            (200, Some(1)),
            "{hb}"
        );

        let (api, _task) = restart(task, &dir, &url, &u, Some(GONE)).await;
        let (s, hb) = api.post("/api/work/heartbeat", beat).await;
        assert_eq!((s, &hb["held"]), (200, &json!([])), "{hb}");
        let gone = "identity map entry groups=astro is gone";
        for _ in 0..10 {
            let (s, got) = api
                .post("/api/work/claim", json!({"worker": "w2", "max": 64}))
                .await;
            assert_eq!((s, &got), (200, &json!([])), "nothing is handed out");
            let (_, v) = api.get(&format!("/api/jobs/{queued}")).await;
            if v["state"] == "failed" {
                assert_eq!(v["error"], gone, "{v}");
                return;
            }
            // (A claim starts a job, even one whose unit it then fails.)
            assert!(v["state"] == "queued" || v["state"] == "running", "{v}");
        }
        panic!("job {queued} never failed");
    });
}
