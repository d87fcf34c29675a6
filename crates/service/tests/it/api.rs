//! The service's API over real HTTPS on 127.0.0.1, on SQLite and on PostgreSQL:
//! authentication, bad input refused with one-line JSON errors and nothing queued,
//! a job planned from a real tree and run through the work endpoints to done, cancel
//! and retry, the OpenAPI document naming every route, a restart that loses
//! nothing, and users of an OIDC issuer who see only their own jobs.

use crate::common;

use std::time::{Duration, Instant};

use common::{on_each, planner, start, start_configured, start_with};
use hetch_oidc::OidcConfig;
use serde_json::{json, Value};

#[test]
fn bad_requests_are_refused_with_one_line_and_nothing_is_queued() {
    on_each(|dir, url| async move {
        std::os::unix::fs::symlink("/etc", dir.join("root/escape")).unwrap();
        let (api, _task) = start(&dir, &url, planner()).await;
        let job = json!({"sources": ["run1"], "dest": "hetch://127.0.0.1:1/x"});
        let (s, v) = api.call("POST", "/api/jobs", Some(job.clone()), None).await;
        assert_eq!(s, 401, "{v}");
        assert!(v["error"].as_str().unwrap().contains("token"), "{v}");
        let (s, _) = api
            .call(
                "POST",
                "/api/jobs",
                Some(job.clone()),
                Some("wrong-token-of-enough-length"),
            )
            .await;
        assert_eq!(s, 401);
        let cases = [
            (json!({"sources": ["run1"]}), "dest"),
            (
                json!({"sources": ["run1"], "dest": "x", "options": {"verfy": "none"}}),
                "verfy",
            ),
            (
                json!({"sources": ["run1"], "dest": "x", "colour": 1}),
                "colour",
            ),
            (json!({"sources": ["../etc"], "dest": "x"}), "escapes"),
            (json!({"sources": ["/etc"], "dest": "x"}), "escapes"),
            (json!({"sources": ["escape"], "dest": "x"}), "outside"),
            (
                json!({"sources": ["nothing-here"], "dest": "x"}),
                "nothing-here",
            ),
            (
                json!({"sources": ["run1"], "dest": "x", "options": {"streams": 300}}),
                "streams 300",
            ),
            (
                json!({"sources": ["run1"], "dest": "x", "priority": 101}),
                "priority",
            ),
            (json!("not an object"), "request body"),
            // Copies between two servers: all sources on one server, a hetch://
            // destination, nothing above either root.
            (
                json!({"sources": ["run1", "hetch://a:1/x"], "dest": "hetch://b:1/y"}),
                "all paths under the root or all hetch:// URLs",
            ),
            (
                json!({"sources": ["hetch://a:1/x", "hetch://c:1/x"], "dest": "hetch://b:1/y"}),
                "all on one server",
            ),
            (
                json!({"sources": ["hetch://a:1/x"], "dest": "copy"}),
                "its dest is a hetch:// URL too",
            ),
            (
                json!({"sources": ["hetch://a:1/../x"], "dest": "hetch://b:1/y"}),
                "escapes the server's root",
            ),
            (
                json!({"sources": ["hetch://a:1/x"], "dest": "hetch://b:1/y/../.."}),
                "escapes the server's root",
            ),
            (
                json!({"sources": ["hetch:///x"], "dest": "hetch://b:1/y"}),
                "all paths under the root or all hetch:// URLs",
            ),
        ];
        for (body, names) in cases {
            let (s, v) = api.post("/api/jobs", body.clone()).await;
            assert_eq!(s, 400, "{body} -> {v}");
            let e = v["error"].as_str().unwrap();
            assert!(e.contains(names) && !e.contains('\n'), "{body} -> {e}");
        }
        let resp = api
            .http
            .post(format!("{}/api/jobs", api.base))
            .bearer_auth(&api.token)
            .header("content-type", "application/json")
            .body("{\"sources\": [")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 400);
        let (s, v) = api.get("/api/jobs").await;
        assert_eq!((s, v), (200, json!([])), "nothing queued");
        let (s, v) = api.get("/api/jobs/0123456789abcdef").await;
        assert_eq!(s, 404, "{v}");
        let (s, _) = api.get("/api/jobs?state=sleeping").await;
        assert_eq!(s, 400);
    });
}

/// What the worker would fail on later is refused at submission, naming the value:
/// a copy onto or into one of its sources (on the service's root, however the paths
/// are spelt), and destinations the worker could not parse.
#[test]
fn copies_into_themselves_and_destinations_that_do_not_parse_are_refused() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        let cases = [
            (json!({"sources": ["run1"], "dest": "run1"}), "onto itself"),
            (
                json!({"sources": ["run1"], "dest": "./run1/"}),
                "onto itself",
            ),
            (json!({"sources": ["run1"], "dest": "run1/sub/"}), "inside"),
            (
                json!({"sources": ["run1"], "dest": "run1/./sub//new"}),
                "inside",
            ),
            (
                json!({"sources": ["x", "run1/sub"], "dest": "run1"}),
                "onto itself",
            ),
            (
                json!({"sources": ["run1"], "dest": "hetch://[::1/x"}),
                "[::1",
            ),
            (
                json!({"sources": ["run1"], "dest": "hetch://h:0/x"}),
                "port '0'",
            ),
            (
                json!({"sources": ["run1"], "dest": "hetch://:7/x"}),
                "no host",
            ),
            (json!({"sources": ["run1"], "dest": "s3://"}), "no bucket"),
            (json!({"sources": ["run1"], "dest": "s3:///k"}), "no bucket"),
            (json!({"sources": ["run1"], "dest": "gs://"}), "no bucket"),
            (json!({"sources": ["run1"], "dest": "az://"}), "no bucket"),
        ];
        std::fs::create_dir_all(dir.join("root/x")).unwrap();
        for (body, names) in cases {
            let (s, v) = api.post("/api/jobs", body.clone()).await;
            assert_eq!(s, 400, "{body} -> {v}");
            let e = v["error"].as_str().unwrap();
            let dest = body["dest"].as_str().unwrap();
            assert!(e.contains(names) && e.contains(dest), "{body} -> {e}");
            assert_eq!(v["field"], "dest", "{body} -> {v}");
        }
        let nodes = json!({"sources": ["run1"], "dest": "hetch://h/x", "dest_nodes": ["h:0"]});
        let (s, v) = api.post("/api/jobs", nodes).await;
        assert_eq!(s, 400, "{v}");
        assert!(v["error"].as_str().unwrap().contains("port '0'"), "{v}");
        let (s, v) = api.get("/api/jobs").await;
        assert_eq!((s, v), (200, json!([])), "nothing queued");
        // Beside its source, and into a directory of its own, a copy is taken.
        for dest in ["run1-copy", "x/run1"] {
            let (s, v) = api
                .post("/api/jobs", json!({"sources": ["run1"], "dest": dest}))
                .await;
            assert_eq!(s, 201, "{dest} -> {v}");
        }
    });
}

/// Worker `worker`'s heartbeat running `units` (as its claims gave them: each named
/// with its lease id).
fn beat_of(worker: &str, units: &[Value]) -> Value {
    let units: Vec<Value> = units
        .iter()
        .map(|u| json!({"job": u["job"], "seq": u["seq"], "lease": u["lease"]}))
        .collect();
    json!({"worker": worker, "units": units})
}

#[test]
fn a_job_is_planned_from_its_tree_and_run_through_the_work_api_to_done() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        let (s, job) = api
            .post(
                "/api/jobs",
                json!({"sources": ["run1"], "dest": "copy", "options": {"verify": "written"}}),
            )
            .await;
        assert_eq!(s, 201, "{job}");
        assert_eq!(job["submitted_by"], "token");
        let id = job["id"].as_str().unwrap().to_string();
        let job = api.planned(&id).await;
        assert_eq!(job["state"], "queued", "{job}");
        // run1, big, link, sub, sub/deeper, sub/deeper/empty, 25 files.
        let total_bytes: u64 = (0..25).sum::<u64>() + 40;
        assert_eq!(
            (job["files"].as_u64(), job["bytes"].as_u64()),
            (Some(31), Some(total_bytes)),
            "{job}"
        );
        // big (40 bytes > 32) is split in ranges of 16: 3 ranges and a commit.
        let (s, rows) = api.get(&format!("/api/jobs/{id}/files?from=0&to=3")).await;
        assert_eq!(s, 200);
        assert_eq!(rows[0]["path"], "run1");
        assert_eq!(rows[1]["path"], "run1/big");
        assert_eq!(rows[1]["size"], 40);

        let (s, units) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
            .await;
        assert_eq!(s, 200, "{units}");
        let units = units.as_array().unwrap().clone();
        assert!(units.iter().all(|u| u["spec"]["dest"] == "copy"));
        let kinds: Vec<String> = units
            .iter()
            .map(|u| {
                u["unit"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .next()
                    .unwrap()
                    .clone()
            })
            .collect();
        assert_eq!(
            kinds.iter().filter(|k| *k == "Range").count(),
            3,
            "{kinds:?}"
        );
        assert!(
            !kinds.contains(&"Commit".to_string()),
            "the commit waits for its ranges"
        );
        let (s, hb) = api.post("/api/work/heartbeat", beat_of("w1", &units)).await;
        assert_eq!(
            (s, hb["held"].as_array().unwrap().len()),
            (200, units.len())
        );
        // Another worker may not finish w1's unit, even naming its lease id.
        let first = &units[0];
        let (s, v) = api
            .post(
                "/api/work/finish",
                json!({"worker": "w2", "job": id, "seq": first["seq"],
                       "lease": first["lease"], "error": null}),
            )
            .await;
        assert_eq!(s, 409, "{v}");
        // The units' reports in one call, the first one twice: the second word on it
        // is refused, the rest taken. Before that, a call with one report out of
        // bounds is refused whole, and one of two workers' reports too.
        let mut reports: Vec<serde_json::Value> = units
            .iter()
            .map(|u| {
                json!({"worker": "w1", "job": id, "seq": u["seq"], "lease": u["lease"],
                            "error": null, "files": 1, "bytes": 1})
            })
            .collect();
        reports.push(reports[0].clone());
        let mut over = reports.clone();
        over[1]["bytes"] = json!(1u64 << 54);
        let (s, v) = api
            .post("/api/work/finish-all", json!({"reports": over}))
            .await;
        assert_eq!(s, 400, "{v}");
        let mut mixed = reports.clone();
        mixed[1]["worker"] = json!("w2");
        let (s, v) = api
            .post("/api/work/finish-all", json!({"reports": mixed}))
            .await;
        assert_eq!(s, 400, "{v}");
        let (_, job) = api.get(&format!("/api/jobs/{id}")).await;
        assert_eq!(job["units"]["done"].as_u64(), Some(0), "{job}");
        let (s, v) = api
            .post("/api/work/finish-all", json!({"reports": reports}))
            .await;
        assert_eq!(s, 200, "{v}");
        let answers = v["answers"].as_array().unwrap();
        assert_eq!(answers.len(), units.len() + 1, "{v}");
        for (a, u) in answers.iter().zip(&units) {
            assert_eq!((&a["seq"], a.get("refused")), (&u["seq"], None), "{v}");
        }
        let again = &answers[units.len()];
        assert!(
            again["refused"].as_str().unwrap().contains("not yours"),
            "{v}"
        );
        let (_, commit) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
            .await;
        assert_eq!(commit.as_array().unwrap().len(), 1, "{commit}");
        assert!(commit[0]["unit"]["Commit"].is_object(), "{commit}");
        let (s, _) = api
            .post(
                "/api/work/finish",
                json!({"worker": "w1", "job": id, "seq": commit[0]["seq"],
                       "lease": commit[0]["lease"], "error": null}),
            )
            .await;
        assert_eq!(s, 200);
        let (_, job) = api.get(&format!("/api/jobs/{id}")).await;
        assert_eq!(job["state"], "done", "{job}");
        assert_eq!(job["units"]["done"].as_u64(), Some(units.len() as u64 + 1));
        let (s, v) = api.post(&format!("/api/jobs/{id}/cancel"), json!({})).await;
        assert_eq!(s, 409, "{v}");
        let (s, v) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 0}))
            .await;
        assert_eq!(s, 400, "{v}");
    });
}

/// A copy between two servers is planned as one relay unit per source (the service
/// cannot list the source server); what a relay reports moved becomes the job's
/// totals as well as what is done.
#[test]
fn a_copy_between_two_servers_is_one_relay_unit_per_source() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        let sources = [
            "hetch://a.example:7878/run1",
            "hetch://a.example:7878/run2/",
        ];
        let (s, job) = api
            .post(
                "/api/jobs",
                json!({"sources": sources, "dest": "hetch://b.example:7878/in"}),
            )
            .await;
        assert_eq!(s, 201, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        let job = api.planned(&id).await;
        assert_eq!(job["state"], "queued", "{job}");
        assert_eq!(
            (job["files"].as_u64(), job["bytes"].as_u64()),
            (Some(0), Some(0))
        );
        let (s, units) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 8}))
            .await;
        assert_eq!(s, 200, "{units}");
        let operands: Vec<u64> = units
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["unit"]["Relay"]["operand"].as_u64().unwrap())
            .collect();
        assert_eq!(operands, [0, 1], "{units}");
        for (u, (files, bytes)) in units.as_array().unwrap().iter().zip([(3, 300), (4, 4000)]) {
            let report = json!({"worker": "w1", "job": id, "seq": u["seq"], "lease": u["lease"],
                                "error": null, "files": files, "bytes": bytes});
            let (s, v) = api.post("/api/work/finish", report).await;
            assert_eq!(s, 200, "{v}");
        }
        let (_, job) = api.get(&format!("/api/jobs/{id}")).await;
        assert_eq!(job["state"], "done", "{job}");
        let totals = |k: &str| job[k].as_u64();
        assert_eq!(
            (
                totals("files"),
                totals("files_done"),
                totals("bytes"),
                totals("bytes_done")
            ),
            (Some(7), Some(7), Some(4300), Some(4300)),
            "{job}"
        );
    });
}

#[test]
fn cancel_retry_and_a_restart_that_loses_nothing() {
    on_each(|dir, url| async move {
        let (api, task) = start(&dir, &url, planner()).await;
        let (_, job) = api
            .post(
                "/api/jobs",
                json!({"sources": ["run1/sub"], "dest": "copy", "priority": 5}),
            )
            .await;
        let id = job["id"].as_str().unwrap().to_string();
        api.planned(&id).await;
        let (_, held) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 1}))
            .await;
        assert_eq!(held.as_array().unwrap().len(), 1);
        let (s, job) = api.post(&format!("/api/jobs/{id}/cancel"), json!({})).await;
        assert_eq!(
            (s, job["state"].as_str()),
            (200, Some("cancelled")),
            "{job}"
        );
        let held = held.as_array().unwrap().clone();
        let (_, hb) = api.post("/api/work/heartbeat", beat_of("w1", &held)).await;
        assert_eq!(hb["held"], json!([]), "the worker hears it must stop");
        let (s, _) = api
            .post(
                "/api/work/finish",
                json!({"worker": "w1", "job": id, "seq": held[0]["seq"],
                       "lease": held[0]["lease"], "error": null}),
            )
            .await;
        assert_eq!(s, 409);
        let (s, job) = api.post(&format!("/api/jobs/{id}/retry"), json!({})).await;
        assert_eq!((s, job["state"].as_str()), (200, Some("queued")), "{job}");

        // The service stops and starts again on the same database and state.
        task.abort();
        let _ = task.await;
        let (api, _task) = start(&dir, &url, planner()).await;
        let (s, jobs) = api.get("/api/jobs?state=queued").await;
        assert_eq!(s, 200);
        assert_eq!(jobs.as_array().unwrap().len(), 1, "{jobs}");
        assert_eq!(jobs[0]["id"], id.as_str());
        assert_eq!(jobs[0]["spec"]["priority"], 5);
        let (_, units) = api
            .post("/api/work/claim", json!({"worker": "w2", "max": 64}))
            .await;
        assert_eq!(
            units.as_array().unwrap().len() as u64,
            jobs[0]["units"]["ready"].as_u64().unwrap()
        );
    });
}

/// A unit is its worker's only under the lease id its claim gave: a report or a
/// heartbeat naming the worker and the unit (both shown to users) but not that id
/// (none, an empty one, a wrong one, one longer than any the service gives) is
/// refused and changes nothing; the id's report is taken. Once a lease runs out, the
/// unit claimed again (by the same worker, even) comes with another id, and the first
/// is refused (`a_report_is_taken_only_with_the_current_claims_lease_id` in the
/// database's tests shows the second's report taken).
#[test]
fn a_unit_is_reported_only_with_the_lease_id_its_claim_gave() {
    on_each(|dir, url| async move {
        let (api, task) = start(&dir, &url, planner()).await;
        // One relay unit: its job is done once it is.
        let relay = json!({"sources": ["hetch://a.example:7878/run1"],
                           "dest": "hetch://b.example:7878/in"});
        let id = api.submitted(relay.clone()).await;
        let (s, got) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 8}))
            .await;
        assert_eq!(s, 200, "{got}");
        assert_eq!(got.as_array().map(Vec::len), Some(1), "{got}");
        let unit = &got[0];
        let lease = unit["lease"].as_str().expect("a lease id").to_string();
        assert!(!lease.is_empty() && lease.len() <= 64, "{lease}");
        let state = || {
            let (api, id) = (&api, &id);
            async move {
                let (s, job) = api.get(&format!("/api/jobs/{id}")).await;
                assert_eq!(s, 200, "{job}");
                job["state"].as_str().unwrap().to_string()
            }
        };
        // w1's report of its unit, naming `lease` (none when `None`).
        let report = |lease: Option<&str>| {
            let mut r = json!({"worker": "w1", "job": id, "seq": unit["seq"], "error": null,
                               "files": 3, "bytes": 300});
            if let Some(l) = lease {
                r["lease"] = json!(l);
            }
            r
        };
        let too_long = "a".repeat(65);
        for lease in [None, Some(""), Some(too_long.as_str())] {
            let (s, v) = api.post("/api/work/finish", report(lease)).await;
            assert_eq!(s, 400, "{lease:?}: {v}");
            assert!(v["error"].as_str().unwrap().contains("lease"), "{v}");
            assert_eq!(state().await, "running", "{lease:?}");
        }
        // The id with its last digit changed.
        let mut wrong = lease.clone();
        let last = if wrong.ends_with('0') { '1' } else { '0' };
        wrong.pop();
        wrong.push(last);
        let (s, v) = api.post("/api/work/finish", report(Some(&wrong))).await;
        let refused = format!("unit {} of job {id} is not yours: NotOwner", unit["seq"]);
        assert_eq!(
            (s, v["error"].as_str()),
            (409, Some(refused.as_str())),
            "{v}"
        );
        assert_eq!(state().await, "running");
        // A heartbeat under the wrong id holds nothing, nor one naming no unit; the
        // real id's still holds the unit, its lease untouched by all the above.
        let mut stray = unit.clone();
        stray["lease"] = json!(wrong);
        for beat in [beat_of("w1", &[stray]), json!({"worker": "w1"})] {
            let (s, hb) = api.post("/api/work/heartbeat", beat.clone()).await;
            assert_eq!((s, &hb["held"]), (200, &json!([])), "{beat}: {hb}");
        }
        let (s, hb) = api
            .post(
                "/api/work/heartbeat",
                beat_of("w1", got.as_array().unwrap()),
            )
            .await;
        assert_eq!(s, 200, "{hb}");
        assert_eq!(hb["held"].as_array().map(Vec::len), Some(1), "{hb}");
        assert_eq!(hb["held"][0]["seq"], unit["seq"], "{hb}");
        let (s, v) = api.post("/api/work/finish", report(Some(&lease))).await;
        assert_eq!(s, 200, "{v}");
        let (_, job) = api.get(&format!("/api/jobs/{id}")).await;
        assert_eq!(job["state"], "done", "{job}");
        assert_eq!(job["files_done"], 3, "{job}");

        // The service again on the same database, its leases three seconds long.
        task.abort();
        let _ = task.await;
        let ttl = Duration::from_secs(3);
        let (api, _task) = start_configured(&dir, &url, planner(), |c| c.lease_ttl = ttl).await;
        let id = api.submitted(relay).await;
        let claim = || api.post("/api/work/claim", json!({"worker": "w1", "max": 8}));
        let (s, got) = claim().await;
        assert_eq!(s, 200, "{got}");
        let first = got[0].clone();
        assert_eq!(first["job"], id.as_str(), "{got}");
        // w1 lets it run out, then claims it again.
        let deadline = Instant::now() + Duration::from_secs(60);
        let again = loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (s, got) = claim().await;
            assert_eq!(s, 200, "{got}");
            if let Some(u) = got.as_array().unwrap().first() {
                break u.clone();
            }
            assert!(Instant::now() < deadline, "the lease never ran out");
        };
        assert_eq!(
            (&again["job"], &again["seq"]),
            (&first["job"], &first["seq"])
        );
        assert_eq!(again["attempts"], 1, "{again}");
        assert_ne!(again["lease"], first["lease"], "{again}");
        let report = |u: &Value| {
            json!({"worker": "w1", "job": id, "seq": u["seq"], "lease": u["lease"],
                   "error": null, "files": 1, "bytes": 1})
        };
        let (s, v) = api.post("/api/work/finish", report(&first)).await;
        assert_eq!(s, 409, "{v}");
        assert!(v["error"].as_str().unwrap().ends_with("NotOwner"), "{v}");
        let (s, hb) = api
            .post(
                "/api/work/heartbeat",
                beat_of("w1", std::slice::from_ref(&first)),
            )
            .await;
        assert_eq!((s, &hb["held"]), (200, &json!([])), "{hb}");
        // (That the second id's report is taken does not depend on this test's pace
        // here: the database's tests show it on their own clock.)
    });
}

/// The workers' token opens the worker routes and a job's listing (which units read),
/// and nothing else: no job list, view, submission, cancel or retry, no schedules, no
/// metrics; the operator's token (what workers held before) still works there.
#[test]
fn the_workers_token_opens_the_worker_routes_and_a_jobs_listing_only() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        assert_ne!(api.worker_token, api.token);
        let id = api
            .submitted(json!({"sources": ["run1"], "dest": "copy"}))
            .await;
        let worker = Some(api.worker_token.as_str());
        let job_path = format!("/api/jobs/{id}");
        let refused: Vec<(&str, String, Option<Value>)> = vec![
            ("GET", "/api/jobs".into(), None),
            (
                "POST",
                "/api/jobs".into(),
                Some(json!({"sources": ["run1"], "dest": "x"})),
            ),
            ("GET", job_path.clone(), None),
            ("POST", format!("{job_path}/cancel"), Some(json!({}))),
            ("POST", format!("{job_path}/retry"), Some(json!({}))),
            ("GET", "/api/schedules".into(), None),
            ("GET", "/api/session".into(), None),
        ];
        for (method, path, body) in refused {
            let (s, v) = api.call(method, &path, body, worker).await;
            assert_eq!(s, 403, "{method} {path}: {v}");
            assert!(
                v["error"].as_str().unwrap().contains("workers' token"),
                "{v}"
            );
        }
        let metrics = api.get_raw("/metrics", &api.worker_token).await;
        assert_eq!(metrics.status(), 403);
        // Nothing above touched the job.
        let (s, v) = api.get(&job_path).await;
        assert_eq!((s, &v["state"]), (200, &json!("queued")), "{v}");
        let files = format!("{job_path}/files?from=0&to=2");
        let (s, rows) = api.call("GET", &files, None, worker).await;
        assert_eq!((s, &rows[0]["path"]), (200, &json!("run1")), "{rows}");
        let claim = json!({"worker": "w1", "max": 1});
        let (s, got) = api
            .call("POST", "/api/work/claim", Some(claim), worker)
            .await;
        assert_eq!(s, 200, "{got}");
        let (s, hb) = api
            .call(
                "POST",
                "/api/work/heartbeat",
                Some(beat_of("w1", got.as_array().unwrap())),
                worker,
            )
            .await;
        assert_eq!(
            (s, hb["held"].as_array().map(Vec::len)),
            (200, Some(1)),
            "{hb}"
        );
        let claim = json!({"worker": "w2", "max": 1});
        let (s, got) = api.post("/api/work/claim", claim).await;
        assert_eq!((s, got.as_array().map(Vec::len)), (200, Some(1)), "{got}");
    });
}

#[test]
fn the_openapi_document_names_every_route_and_only_those() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        let (s, doc) = api.call("GET", "/api/openapi.json", None, None).await;
        assert_eq!(s, 200);
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().unwrap();
        let mut n = 0;
        for (path, ops) in paths {
            for method in ops.as_object().unwrap().keys() {
                n += 1;
                let concrete = path.replace("{id}", "0123456789abcdef");
                // Without a token a route that exists says 401, one that does not 404.
                let (s, v) = api
                    .call(&method.to_uppercase(), &concrete, Some(json!({})), None)
                    .await;
                // (429 once the failures are throttled: also the auth layer's answer.)
                assert!(s == 401 || s == 429, "{method} {path}: {s} {v}");
            }
        }
        assert_eq!(n, hetch_service::openapi::ROUTES.len());
        let (s, _) = api
            .call("GET", "/api/nothing", None, Some(&api.token))
            .await;
        assert_eq!(s, 404);
    });
}

/// The classic forgery: HS256 "signed" with the issuer's public key as the secret.
fn hmac_forgery(key: &hetch_testkit::oidc_issuer::TestKey, claims: &Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(key.kid.clone());
    let secret = jsonwebtoken::EncodingKey::from_secret(key.public_pem.as_bytes());
    jsonwebtoken::encode(&header, claims, &secret).unwrap()
}

/// With an OIDC issuer configured: its users get in with its tokens, each sees and
/// acts on their own jobs only (another's is "no job", as an unknown id), none may use
/// the worker routes; bad tokens of every kind are refused with a reason; the service
/// token still sees everything.
#[test]
fn oidc_users_see_only_their_own_jobs_and_never_the_worker_routes() {
    use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
    on_each(|dir, url| async move {
        let key = ec_key("k1");
        let issuer = TestIssuer::start(&[&key]).await;
        let oidc = OidcConfig::new(&issuer.url, AUDIENCE);
        let (api, _task) = start_with(&dir, &url, planner(), Some(oidc)).await;
        let as_user = |sub: &str| {
            let mut c = claims(&issuer.url);
            c["sub"] = json!(sub);
            sign(&key, &c)
        };
        let (alice, bob) = (as_user("alice"), as_user("bob"));
        let job = json!({"sources": ["run1"], "dest": "copy"});

        let (s, mine) = api
            .call("POST", "/api/jobs", Some(job.clone()), Some(&alice))
            .await;
        assert_eq!(s, 201, "{mine}");
        assert_eq!(mine["submitted_by"], "oidc:alice");
        let id = mine["id"].as_str().unwrap().to_string();
        let (s, theirs) = api.post("/api/jobs", job.clone()).await;
        assert_eq!(s, 201, "{theirs}");

        let listed = |v: &Value| -> Vec<String> {
            let jobs = v.as_array().unwrap_or_else(|| panic!("{v}"));
            jobs.iter()
                .map(|j| j["id"].as_str().unwrap().to_string())
                .collect()
        };
        let (_, l) = api.call("GET", "/api/jobs", None, Some(&alice)).await;
        assert_eq!(listed(&l), vec![id.clone()]);
        let (_, l) = api.call("GET", "/api/jobs", None, Some(&bob)).await;
        assert!(listed(&l).is_empty(), "{l}");
        assert_eq!(listed(&api.get("/api/jobs").await.1).len(), 2);

        // Bob can neither see nor touch Alice's job.
        for (method, path) in [
            ("GET", format!("/api/jobs/{id}")),
            ("GET", format!("/api/jobs/{id}/files?from=0&to=3")),
            ("POST", format!("/api/jobs/{id}/cancel")),
            ("POST", format!("/api/jobs/{id}/retry")),
        ] {
            let (s, e) = api.call(method, &path, None, Some(&bob)).await;
            assert_eq!(
                (s, e["error"].as_str()),
                (404, Some(&*format!("no job {id}")))
            );
        }
        // Nor is any user a worker.
        let claim = json!({"worker": "w1", "max": 1});
        let (s, e) = api
            .call("POST", "/api/work/claim", Some(claim), Some(&alice))
            .await;
        assert_eq!(s, 403, "{e}");

        // Bad tokens, each refused with its reason (and none of them counted as
        // more than the throttle's free failures).
        let mut expired = claims(&issuer.url);
        expired["exp"] = json!(1_000_000);
        let mut elsewhere = claims(&issuer.url);
        elsewhere["aud"] = json!("another-service");
        let stranger = ec_key("k1"); // same kid, a key the issuer never published
        for (token, why) in [
            (sign(&key, &expired), "expired"),
            (sign(&key, &elsewhere), "audience"),
            (sign(&stranger, &claims(&issuer.url)), "signature"),
            (hmac_forgery(&key, &claims(&issuer.url)), "not accepted"),
        ] {
            let (s, e) = api.call("GET", "/api/jobs", None, Some(&token)).await;
            assert_eq!(s, 401, "{e}");
            assert!(e["error"].as_str().unwrap().contains(why), "{e}");
        }

        let (s, done) = api
            .call(
                "POST",
                &format!("/api/jobs/{id}/cancel"),
                None,
                Some(&alice),
            )
            .await;
        assert_eq!(
            (s, done["state"].as_str()),
            (200, Some("cancelled")),
            "{done}"
        );
    });
}

/// `GET /metrics`: the database's totals and this instance's counters, in Prometheus'
/// text format, for the service token only.
#[test]
fn metrics_show_the_totals_and_the_requests_to_the_operator_only() {
    use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
    on_each(|dir, url| async move {
        let key = ec_key("k1");
        let issuer = TestIssuer::start(&[&key]).await;
        let oidc = OidcConfig::new(&issuer.url, AUDIENCE);
        let (api, _task) = start_with(&dir, &url, planner(), Some(oidc)).await;
        let (s, job) = api
            .post("/api/jobs", json!({"sources": ["run1"], "dest": "copy"}))
            .await;
        assert_eq!(s, 201, "{job}");
        api.planned(job["id"].as_str().unwrap()).await;
        let (s, got) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 2}))
            .await;
        assert_eq!(s, 200, "{got}");
        // A range of 16 bytes of run1/big says it moved 10 so far.
        let range = got
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["unit"]["Range"].is_object());
        let range = range.expect("a range among the first units");
        let beat = json!({"worker": "w1", "units": [{"job": range["job"], "seq": range["seq"],
                                                      "lease": range["lease"], "bytes": 10}]});
        assert_eq!(api.post("/api/work/heartbeat", beat).await.0, 200);
        let _ = api.call("GET", "/api/jobs", None, Some("wrong")).await;
        // What a caller puts in a path never becomes a label value: routes are counted
        // by their template.
        let _ = api.get("/api/jobs/hostile0000000001").await;
        let _ = api.get("/hostile/path").await;
        let _ = api
            .call("PUT", "/api/hostile", None, Some(&api.token))
            .await;

        let text = |resp: reqwest::Response| async move {
            let kind = resp.headers()[reqwest::header::CONTENT_TYPE].clone();
            assert!(kind.to_str().unwrap().starts_with("text/plain"), "{kind:?}");
            resp.text().await.unwrap()
        };
        let url = format!("{}/metrics", api.base);
        let resp = api
            .http
            .get(&url)
            .bearer_auth(&api.token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let body = text(resp).await;
        let m = hetch_testkit::prometheus::Scrape::parse(&body);
        assert_eq!(m.value("hetch_service_jobs", &[("state", "running")]), 1);
        assert_eq!(m.value("hetch_service_jobs", &[("state", "done")]), 0);
        assert_eq!(m.value("hetch_service_units", &[("state", "leased")]), 2);
        assert_eq!(m.value("hetch_service_workers_active", &[]), 1);
        assert_eq!(m.value("hetch_service_bytes_in_flight", &[]), 10);
        // No stream runs: no lag (a stream's is in jobdb's and the binary's tests).
        assert_eq!(m.value("hetch_service_stream_lag_p99_ms", &[]), 0);
        assert_eq!(m.value("hetch_service_auth_failures_total", &[]), 1);
        assert_eq!(m.kind("hetch_service_auth_failures_total"), "counter");
        let claims_seen = [
            ("route", "/api/work/claim"),
            ("method", "POST"),
            ("status", "200"),
        ];
        assert_eq!(m.value("hetch_service_requests_total", &claims_seen), 1);
        for s in &m.samples {
            assert!(s.name.starts_with("hetch_service_"), "{s:?}");
        }
        assert!(!body.contains("hostile"), "{body}");
        let routes: std::collections::BTreeSet<_> = m
            .samples
            .iter()
            .filter_map(|s| s.labels.get("route"))
            .collect();
        assert!(routes.contains(&"/api/jobs/{id}".to_string()), "{routes:?}");
        assert!(routes.contains(&"unmatched".to_string()), "{routes:?}");

        // Users do not see the totals.
        let user = sign(&key, &claims(&issuer.url));
        let resp = api.http.get(&url).bearer_auth(&user).send().await.unwrap();
        assert_eq!(resp.status(), 403);
    });
}

/// QoS: a job's rate limit is split evenly among its units held now, whichever
/// workers hold them; heartbeats bring each holder's share up to date as units start
/// and end; a job without a limit gives its units none.
#[test]
fn a_jobs_rate_limit_is_shared_among_its_units_held_now() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        let (s, job) = api
            .post(
                "/api/jobs",
                json!({"sources": ["run1/sub"], "dest": "copy", "rate_limit": 3_000_000}),
            )
            .await;
        assert_eq!(s, 201, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        api.planned(&id).await;
        let claim = |w: &'static str, max: u64| {
            let api = &api;
            async move {
                let (s, v) = api
                    .post("/api/work/claim", json!({"worker": w, "max": max}))
                    .await;
                assert_eq!(s, 200, "{v}");
                v.as_array().unwrap().clone()
            }
        };
        let beat = |w: &'static str, units: &[Value]| {
            let api = &api;
            let beat = beat_of(w, units);
            async move {
                let (_, hb) = api.post("/api/work/heartbeat", beat).await;
                let rates: Vec<u64> = hb["held"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h["rate_limit"].as_u64().unwrap())
                    .collect();
                rates
            }
        };
        let one = claim("w1", 1).await;
        assert_eq!(one[0]["rate_limit"], 3_000_000, "alone, it has it all");
        let two = claim("w2", 2).await;
        assert_eq!(two.len(), 2, "{two:?}");
        // Claimed one after the other: the second saw three units held.
        assert_eq!(two[1]["rate_limit"], 1_000_000);
        assert_eq!(beat("w1", &one).await, [1_000_000]);
        assert_eq!(beat("w2", &two).await, [1_000_000, 1_000_000]);
        for u in &two {
            let (s, v) = api
                .post(
                    "/api/work/finish",
                    json!({"worker": "w2", "job": id, "seq": u["seq"], "lease": u["lease"],
                           "error": null}),
                )
                .await;
            assert_eq!(s, 200, "{v}");
        }
        assert_eq!(beat("w1", &one).await, [3_000_000], "the others ended");

        let (_, free) = api
            .post(
                "/api/jobs",
                json!({"sources": ["run1/sub"], "dest": "copy2"}),
            )
            .await;
        api.planned(free["id"].as_str().unwrap()).await;
        let got = claim("w3", 1).await;
        assert_eq!(got[0]["job"], free["id"], "{got:?}");
        assert_eq!(got[0]["rate_limit"], 0, "no limit, no share");
    });
}

/// Only guesses are throttled, per address and per kind of token: requests with no
/// token and OIDC tokens that merely expired count for nothing, bad JWTs throttle
/// JWTs only, and the service's token (its workers' leases) still gets in from the
/// same address; wrong service tokens still throttle the service token.
#[test]
fn only_guesses_are_throttled_and_each_kind_of_token_apart() {
    use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
    on_each(|dir, url| async move {
        let key = ec_key("k1");
        let issuer = TestIssuer::start(&[&key]).await;
        let oidc = OidcConfig::new(&issuer.url, AUDIENCE);
        let (api, _task) = start_with(&dir, &url, planner(), Some(oidc)).await;
        let user = sign(&key, &claims(&issuer.url));
        let mut expired = claims(&issuer.url);
        expired["exp"] = json!(1_000_000);
        let expired = sign(&key, &expired);
        let status = |token: Option<String>| {
            let api = &api;
            async move { api.call("GET", "/api/jobs", None, token.as_deref()).await }
        };

        for _ in 0..2 * hetch_net::FREE_FAILURES {
            let (s, e) = status(None).await;
            assert_eq!(s, 401, "no token: {e}");
            let (s, e) = status(Some(expired.clone())).await;
            assert_eq!(s, 401, "expired: {e}");
            assert!(e["error"].as_str().unwrap().contains("expired"), "{e}");
        }
        assert_eq!(
            status(Some(user.clone())).await.0,
            200,
            "an expired login locked out"
        );
        assert_eq!(status(Some(api.token.clone())).await.0, 200);

        // Garbage JWTs are guesses: JWTs from here wait, the service token does not.
        for _ in 0..2 * hetch_net::FREE_FAILURES {
            let (s, e) = status(Some("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.AAAA".into())).await;
            assert!(s == 401 || s == 429, "{s} {e}");
        }
        assert_eq!(
            status(Some(user.clone())).await.0,
            429,
            "JWT guesses not throttled"
        );
        assert_eq!(
            status(Some(api.token.clone())).await.0,
            200,
            "bad JWTs locked out"
        );

        // Wrong service tokens are guesses at the service token.
        for _ in 0..hetch_net::FREE_FAILURES {
            let (s, e) = status(Some("not-the-token-of-this-service".into())).await;
            assert_eq!(s, 401, "{e}");
        }
        let (s, e) = status(Some(api.token.clone())).await;
        assert_eq!(s, 429, "service token guesses not throttled: {e}");
    });
}

/// The state directory is made 0700 and the SQLite database in it (with its `-wal`
/// and `-shm` files) 0600, whatever the umask makes; a state directory or database
/// that group or others can reach is refused at start, in one line naming it and
/// the fix. (A PostgreSQL URL has no file.)
#[test]
fn the_state_directory_and_the_database_are_private_to_the_service() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    std::fs::create_dir_all(dir.join("root")).unwrap();
    let state = dir.join("state");
    let db = state.join("jobs.db");
    let url = format!("sqlite://{}", db.display());
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let chmod = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    let refusal = |url: String| {
        let cfg = hetch_service::ServiceConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            root: dir.join("root"),
            state_dir: state.clone(),
            db_url: url,
            lease_ttl: std::time::Duration::from_secs(30),
            planner: planner(),
            retries: Default::default(),
            oidc: None,
            limits: Default::default(),
            identities: None,
            webhooks: Default::default(),
            max_schedules: hetch_service::DEFAULT_MAX_SCHEDULES,
            min_schedule_interval: hetch_service::DEFAULT_MIN_SCHEDULE_INTERVAL,
            retention: Default::default(),
            login: None,
        };
        async move {
            match hetch_service::Service::bind(cfg).await {
                Ok(_) => panic!("started"),
                Err(e) => e.to_string(),
            }
        }
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (api, task) = start(dir, &url, planner()).await;
        assert_eq!(api.get("/api/jobs").await.0, 200);
        assert_eq!(mode(&state), 0o700);
        // Open, in WAL mode: the -wal and -shm files are there.
        for f in ["jobs.db", "jobs.db-wal", "jobs.db-shm"] {
            assert_eq!(mode(&state.join(f)), 0o600, "{f}");
        }
        task.abort();
        let _ = task.await;

        chmod(&state, 0o755);
        let e = refusal(url.clone()).await;
        let fix = format!("chmod 700 {}", state.display());
        assert!(
            e.starts_with(&*state.to_string_lossy()) && e.contains(&fix),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        chmod(&state, 0o700);

        chmod(&db, 0o644);
        let e = refusal(url.clone()).await;
        let fix = format!("chmod 600 {}", db.display());
        assert!(
            e.starts_with(&*db.to_string_lossy()) && e.contains(&fix),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    });
}

/// The identity map of a facility of two groups: each user's jobs read and write
/// only where the map says, by every way of naming the other's files (their paths,
/// `..`, symlinks planted on the way, a forged `access` field, remote destinations
/// and nodes); a user the map does not name is refused; the operator is not limited.
#[test]
fn users_of_an_identity_map_reach_only_their_own_groups_files() {
    use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
    const MAP: &str = r#"
        [[identity]]
        claim = "groups"
        value = "astro"
        read = ["groups/astro", "public"]
        write = ["groups/astro", "hetch://dtn2:7878/astro"]

        [[identity]]
        claim = "groups"
        value = "bio"
        read = ["groups/bio"]
        write = ["groups/bio"]
    "#;
    on_each(|dir, url| async move {
        let root = dir.join("root");
        for g in ["astro", "bio"] {
            std::fs::create_dir_all(root.join(format!("groups/{g}/data"))).unwrap();
            std::fs::write(root.join(format!("groups/{g}/data/secret")), g).unwrap();
        }
        std::fs::create_dir_all(root.join("public")).unwrap();
        // Planted on the way: links from astro's tree into bio's.
        std::os::unix::fs::symlink("../bio/data", root.join("groups/astro/link")).unwrap();
        std::os::unix::fs::symlink("../bio", root.join("groups/astro/out")).unwrap();

        let key = ec_key("k1");
        let issuer = TestIssuer::start(&[&key]).await;
        let map = hetch_service::identity::IdentityMap::parse(MAP).unwrap();
        let (api, _task) = common::start_configured(&dir, &url, planner(), |c| {
            c.oidc = Some(OidcConfig::new(&issuer.url, AUDIENCE));
            c.identities = Some(map);
        })
        .await;
        let token_of = |sub: &str, groups: Value| {
            let mut c = claims(&issuer.url);
            c["sub"] = json!(sub);
            c["groups"] = groups;
            sign(&key, &c)
        };
        let alice = token_of("alice", json!(["astro"]));
        let carol = token_of("carol", json!(["chem"]));
        let submit = |token: String, job: Value| {
            let api = &api;
            async move { api.call("POST", "/api/jobs", Some(job), Some(&token)).await }
        };

        // Alice's own: allowed, and the job records what she may touch whatever
        // she claims in the body.
        let own = json!({"sources": ["groups/astro/data"], "dest": "groups/astro/copy",
            "access": {"entry": "forged", "read": [""], "write": [""]}});
        let (s, job) = submit(alice.clone(), own).await;
        assert_eq!(s, 201, "{job}");
        assert_eq!(job["spec"]["access"]["entry"], "groups=astro", "{job}");
        assert_eq!(
            job["spec"]["access"]["read"],
            json!(["groups/astro", "public"])
        );
        let id = job["id"].as_str().unwrap().to_string();
        let planned = api.planned(&id).await;
        assert_eq!(planned["state"], "queued", "{planned}");
        let (_, rows) = api
            .call(
                "GET",
                &format!("/api/jobs/{id}/files?from=0&to=100"),
                None,
                Some(&alice),
            )
            .await;
        let paths: Vec<&str> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["data", "data/secret"]);

        // Every way to Bob's files: refused, each with one line, nothing queued.
        for (job, why) in [
            (
                json!({"sources": ["groups/bio/data"], "dest": "groups/astro/x"}),
                "not yours",
            ),
            (
                json!({"sources": ["groups/bio"], "dest": "groups/astro/x"}),
                "not yours",
            ),
            (
                json!({"sources": ["groups"], "dest": "groups/astro/x"}),
                "not yours",
            ),
            (
                json!({"sources": ["groups/astro/link"], "dest": "groups/astro/x"}),
                "leads outside",
            ),
            (
                json!({"sources": ["groups/astro/link/secret"], "dest": "groups/astro/x"}),
                "leads outside",
            ),
            (
                json!({"sources": ["groups/astro/data"], "dest": "groups/bio/x"}),
                "not yours",
            ),
            (
                json!({"sources": ["groups/astro/data"], "dest": "groups/astro/out"}),
                "leads outside",
            ),
            (
                json!({"sources": ["groups/astro/data"], "dest": "groups/astro/out/x"}),
                "leads outside",
            ),
            (
                json!({"sources": ["public"], "dest": "public/x"}),
                "not yours",
            ),
            (
                json!({"sources": ["groups/astro/data"], "dest": "hetch://dtn2:7878/bio"}),
                "not yours",
            ),
            (
                json!({"sources": ["groups/astro/data"], "dest": "hetch://dtn2:7878/astro/in",
                "dest_nodes": ["dtn9:7878"]}),
                "dtn9",
            ),
            (
                json!({"sources": ["groups/astro/data"], "dest": "s3://bucket/x"}),
                "not yours",
            ),
            (
                json!({"sources": ["hetch://dtn2:7878/bio"], "dest": "hetch://dtn2:7878/astro"}),
                "not yours",
            ),
        ] {
            let (s, e) = submit(alice.clone(), job.clone()).await;
            assert_eq!(s, 403, "{job}: {e}");
            let line = e["error"].as_str().unwrap();
            assert!(line.contains(why) && !line.contains('\n'), "{job}: {line}");
        }
        let (s, e) = submit(
            alice.clone(),
            json!({"sources": ["groups/astro/../bio/data"], "dest": "groups/astro/x"}),
        )
        .await;
        assert_eq!(s, 400, "{e}");

        // A user the map does not name gets nothing at all.
        for (method, path) in [("GET", "/api/jobs"), ("POST", "/api/jobs")] {
            let body = (method == "POST").then(|| json!({"sources": ["public"], "dest": "x"}));
            let (s, e) = api.call(method, path, body, Some(&carol)).await;
            assert_eq!(s, 403, "{e}");
            assert!(e["error"].as_str().unwrap().contains("identity map"), "{e}");
        }
        // Only Alice's job was queued; the operator is not limited by the map.
        let (_, all) = api.get("/api/jobs").await;
        assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
        let (s, op) = api
            .post(
                "/api/jobs",
                json!({"sources": ["groups"], "dest": "backup"}),
            )
            .await;
        assert_eq!(s, 201, "{op}");
        assert!(op["spec"].get("access").is_none(), "{op}");
    });
}

/// What a worker reports it moved is bounded: numbers no unit could move (u64::MAX
/// files or bytes) are refused with the field named, and those within bounds count
/// at most what the unit holds. However a worker reports, every job stays readable:
/// the operator's list answers, with counters no larger than the job's listing.
#[test]
fn absurd_finish_reports_are_refused_and_the_job_list_still_answers() {
    use hetch_jobdb::leases::{MAX_UNIT_BYTES, MAX_UNIT_FILES};
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        let (s, job) = api
            .post("/api/jobs", json!({"sources": ["run1"], "dest": "copy"}))
            .await;
        assert_eq!(s, 201, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        api.planned(&id).await;
        let report = |u: &Value, files: u64, bytes: u64| {
            json!({"worker": "w1", "job": id, "seq": u["seq"], "lease": u["lease"],
                   "error": null, "files": files, "bytes": bytes})
        };
        let (s, units) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
            .await;
        assert_eq!(s, 200, "{units}");
        let units = units.as_array().unwrap().clone();
        let first = &units[0];
        for (files, bytes, field) in [
            (u64::MAX, 0, "files"),
            (0, u64::MAX, "bytes"),
            (u64::MAX, u64::MAX, "files"),
            (MAX_UNIT_FILES + 1, 0, "files"),
        ] {
            let (s, v) = api
                .post("/api/work/finish", report(first, files, bytes))
                .await;
            assert_eq!(s, 400, "{v}");
            let e = v["error"].as_str().unwrap();
            assert!(e.starts_with(&format!("{field}: ")), "{e}");
        }
        let mut written = report(first, 0, 0);
        written["written"] = json!(MAX_UNIT_BYTES + 1);
        let (s, v) = api.post("/api/work/finish", written).await;
        assert_eq!(s, 400, "{v}");
        assert!(v["error"].as_str().unwrap().starts_with("written: "), "{v}");
        // The largest numbers taken, for every unit (the commit last, once its
        // ranges are done): each counts what it holds, at most.
        let (most_files, most_bytes) = (MAX_UNIT_FILES, MAX_UNIT_BYTES);
        for u in &units {
            let (s, v) = api
                .post("/api/work/finish", report(u, most_files, most_bytes))
                .await;
            assert_eq!(s, 200, "{v}");
        }
        let (s, commit) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
            .await;
        assert_eq!(s, 200, "{commit}");
        let (s, v) = api
            .post(
                "/api/work/finish",
                report(&commit[0], most_files, most_bytes),
            )
            .await;
        assert_eq!(s, 200, "{v}");

        let (s, jobs) = api.get("/api/jobs").await;
        assert_eq!(s, 200, "{jobs}");
        let job = &jobs[0];
        assert_eq!(
            (job["id"].as_str(), job["state"].as_str()),
            (Some(id.as_str()), Some("done"))
        );
        assert!(job["error"].is_null(), "{job}");
        let n = |k: &str| job[k].as_u64().unwrap();
        assert_eq!(
            (n("files_done"), n("bytes_done")),
            (n("files"), n("bytes")),
            "{job}"
        );
        assert_eq!(n("bytes"), 340, "the tree's bytes: {job}");
        // Reports that do not say what they wrote wrote all they moved.
        assert_eq!(n("bytes_written"), 340, "{job}");
    });
}

/// A job whose stored spec cannot be read (damaged behind the service's back) fails
/// its own units at claim time, one attempt per claim, and never a worker's whole
/// claim: the other job's units are handed out every time. (Before: every claim that
/// took one of its units answered 500, the units it had leased lost with it.)
#[test]
fn a_job_whose_stored_spec_is_unreadable_fails_its_units_and_no_claim() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    common::tree(&dir.path().join("root"));
    let url = format!("sqlite://{}", dir.path().join("jobs.db").display());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (api, _task) = start(dir.path(), &url, planner()).await;
        let mut ids = Vec::new();
        for dest in ["good", "bad"] {
            let (s, job) = api
                .post("/api/jobs", json!({"sources": ["run1"], "dest": dest}))
                .await;
            assert_eq!(s, 201, "{job}");
            let id = job["id"].as_str().unwrap().to_string();
            api.planned(&id).await;
            ids.push(id);
        }
        let (good, bad) = (&ids[0], &ids[1]);
        let db = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query("UPDATE jobs SET spec = '{not json' WHERE id = ?")
            .bind(bad)
            .execute(&db)
            .await
            .unwrap();
        let state = |id: String| {
            let db = db.clone();
            async move {
                sqlx::query_scalar::<_, String>("SELECT state FROM jobs WHERE id = ?")
                    .bind(id)
                    .fetch_one(&db)
                    .await
                    .unwrap()
            }
        };
        // Each claim spends one attempt of each of the bad job's ready units.
        let mut claims = 0;
        while state(bad.clone()).await != "failed" {
            claims += 1;
            assert!(claims <= 20, "the bad job never failed");
            let (s, got) = api
                .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
                .await;
            assert_eq!(s, 200, "claim {claims}: {got}");
            for unit in got.as_array().unwrap() {
                assert_eq!(unit["job"], good.as_str(), "{unit}");
            }
        }
        let errors: Vec<String> =
            sqlx::query_scalar("SELECT error FROM units WHERE job = ? AND state = 'failed'")
                .bind(bad)
                .fetch_all(&db)
                .await
                .unwrap();
        // Its units failed for it (a file's commit unit for its failed range).
        let why = "stored job spec unreadable";
        assert!(errors.iter().any(|e| e.contains(why)), "{errors:?}");
        assert_ne!(state(good.clone()).await, "failed");
    });
}
