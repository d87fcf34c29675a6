//! The OpenAPI document's schemas against the types the service and its clients
//! (de)serialize: each type's generated schema is served as generated, every
//! reference in the document resolves, and what a real service answers on each route
//! (the web interface's routes and its live event stream among them), and a sample of
//! each request, validates against its schema (with a real JSON Schema validator) and
//! reads back as its type unchanged.

use crate::common;

use common::{on_each, planner, start, Api};
use hetch_service::api::{
    ActivityView, ClaimRequest, ClaimedUnit, CopyOptions, ErrorBody, FileRow, FinishAll,
    FinishAllReply, FinishReply, FinishRequest, HeartbeatReply, HeartbeatRequest, JobSpec, JobView,
    LiveSnapshot, NodesView, SessionView, UnitKey, WorkerAbout,
};
use hetch_service_api::schema::{components, name_of, REF_PREFIX};
use hetch_service_api::ScheduleView;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// Checks `v` against the document's schema for `T` (an array of them when `array`),
/// and that it reads as a `T` that writes and reads back unchanged; returns it.
fn checked<T>(doc: &Value, v: &Value, array: bool) -> Vec<T>
where
    T: JsonSchema + Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let name = name_of::<T>();
    let mut root = doc.clone();
    let one = json!({"$ref": format!("{REF_PREFIX}{name}")});
    let schema = match array {
        true => json!({"type": "array", "items": one}),
        false => one,
    };
    root.as_object_mut()
        .unwrap()
        .extend(schema.as_object().unwrap().clone());
    let validator = jsonschema::draft202012::new(&root).expect("the schema compiles");
    let errors: Vec<String> = validator.iter_errors(v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{name}: {v} is refused: {errors:?}");
    let read: Vec<T> = match array {
        true => serde_json::from_value(v.clone()).unwrap(),
        false => vec![serde_json::from_value(v.clone()).unwrap()],
    };
    // Written again (with the defaults filled in), it is still valid and reads the same.
    let back = match array {
        true => serde_json::to_value(&read).unwrap(),
        false => serde_json::to_value(&read[0]).unwrap(),
    };
    let errors: Vec<String> = validator
        .iter_errors(&back)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{name}: {back} is refused: {errors:?}");
    let again: Vec<T> = match array {
        true => serde_json::from_value(back).unwrap(),
        false => vec![serde_json::from_value(back).unwrap()],
    };
    assert_eq!(again, read, "{name} does not read back as it was written");
    read
}

/// Whether the document's schema for `T` takes `v`.
fn valid<T: JsonSchema>(doc: &Value, v: &Value) -> bool {
    let mut root = doc.clone();
    root["$ref"] = json!(format!("{REF_PREFIX}{}", name_of::<T>()));
    jsonschema::draft202012::new(&root).unwrap().is_valid(v)
}

/// The data of the first `snapshot` event of `GET /api/events` that satisfies `want`.
async fn snapshot_where(api: &Api, want: impl Fn(&Value) -> bool) -> Value {
    let resp = api
        .http
        .get(format!("{}/api/events", api.base))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    crate::web::first_event_where(resp, want).await
}

/// `GET /api/session` in a browser's session, logged in with the service's token.
async fn session_of_a_browser(api: &Api) -> Value {
    let resp = api
        .http
        .post(format!("{}/login", api.base))
        .header("sec-fetch-site", "same-origin")
        .form(&[("token", api.token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    let set = resp.headers()["set-cookie"].to_str().unwrap();
    let cookie = set.split(';').next().unwrap().to_string();
    let resp = api
        .http
        .get(format!("{}/api/session", api.base))
        .header("sec-fetch-site", "same-origin")
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

/// Every `$ref` under `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get("$ref") {
                out.push(r);
            }
            o.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[test]
fn the_documents_schemas_are_the_types_and_the_services_answers_fit_them() {
    on_each(|_dir, url| async move {
        let (api, _task) = start(&_dir, &url, planner()).await;
        let (s, doc) = api.call("GET", "/api/openapi.json", None, None).await;
        assert_eq!(s, 200);
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let generated = components();
        assert!(generated.len() >= 16, "{:?}", generated.keys());
        for (name, schema) in &generated {
            assert_eq!(schemas.get(name), Some(schema), "{name}");
        }
        let mut all = Vec::new();
        refs(&doc, &mut all);
        for r in all {
            let name = r.strip_prefix(REF_PREFIX).expect("refers into components");
            assert!(schemas.contains_key(name), "{r} does not resolve");
        }

        // What the service answers, route by route.
        let spec = json!({"sources": ["run1"], "dest": "copy", "priority": 5});
        checked::<JobSpec>(&doc, &spec, false);
        let (s, v) = api.post("/api/jobs", spec).await;
        assert_eq!(s, 201, "{v}");
        let id = checked::<JobView>(&doc, &v, false).remove(0).id;
        let planned = api.planned(&id).await;
        checked::<JobView>(&doc, &planned, false);
        let (_, v) = api.get("/api/jobs?limit=5").await;
        checked::<JobView>(&doc, &v, true);
        let (_, v) = api.get(&format!("/api/jobs/{id}/files?from=0&to=5")).await;
        assert_eq!(checked::<FileRow>(&doc, &v, true).len(), 5);
        // A schedule whose runs have a webhook: shown by URL, its secret never.
        let hook = json!({"url": "https://hooks.example.org/h", "secret": "0123456789abcdef"});
        let body = json!({"job": {"sources": ["run1"], "dest": "c", "webhook": hook},
            "cron": "0 0 1 1 *"});
        let (s, v) = api.post("/api/schedules", body).await;
        assert_eq!(s, 201, "{v}");
        let made = checked::<ScheduleView>(&doc, &v, false).remove(0);
        assert_eq!(
            made.webhook.map(|w| w.url).as_deref(),
            Some("https://hooks.example.org/h")
        );
        assert!(made.job.webhook.is_none(), "{v}");
        let (_, v) = api.get("/api/schedules").await;
        checked::<ScheduleView>(&doc, &v, true);
        let claim = serde_json::to_value(ClaimRequest {
            worker: "w1".into(),
            max: 2,
            about: Some(WorkerAbout {
                host: Some("h1".into()),
                capacity: Some(2),
                moved: Some(0),
                checks: Some(vec!["ok".into()]),
            }),
        })
        .unwrap();
        checked::<ClaimRequest>(&doc, &claim, false);
        let (s, v) = api.post("/api/work/claim", claim).await;
        assert_eq!(s, 200, "{v}");
        let units = checked::<ClaimedUnit>(&doc, &v, true);
        let u = units.first().expect("a unit to claim");
        let beat = serde_json::to_value(HeartbeatRequest {
            worker: "w1".into(),
            units: Some(vec![UnitKey {
                job: u.job.clone(),
                seq: u.seq,
                lease: u.lease.clone(),
                bytes: Some(3),
                lag: None,
            }]),
            about: None,
        })
        .unwrap();
        checked::<HeartbeatRequest>(&doc, &beat, false);
        let (s, v) = api.post("/api/work/heartbeat", beat).await;
        assert_eq!(s, 200, "{v}");
        let reply = checked::<HeartbeatReply>(&doc, &v, false).remove(0);
        assert_eq!(
            (reply.held[0].job.as_str(), reply.held[0].seq),
            (id.as_str(), u.seq)
        );
        let mut done = FinishRequest::done(&u.job, u.seq, 1, 1);
        done.worker = "w1".into();
        done.lease = u.lease.clone();
        let done = serde_json::to_value(done).unwrap();
        checked::<FinishRequest>(&doc, &done, false);
        let (s, v) = api.post("/api/work/finish", done).await;
        assert_eq!(s, 200, "{v}");
        checked::<FinishReply>(&doc, &v, false);
        let failed = FinishRequest {
            worker: "w1".into(),
            lease: "0f".into(),
            ..FinishRequest::failed("j", 1, "why".into())
        };
        checked::<FinishRequest>(&doc, &serde_json::to_value(&failed).unwrap(), false);
        // Both again in one call: neither is the worker's now, each answered so.
        let mut again = FinishRequest::done(&u.job, u.seq, 1, 1);
        again.worker = "w1".into();
        again.lease = u.lease.clone();
        let all = serde_json::to_value(FinishAll {
            reports: vec![again, failed],
        })
        .unwrap();
        checked::<FinishAll>(&doc, &all, false);
        let (s, v) = api.post("/api/work/finish-all", all).await;
        assert_eq!(s, 200, "{v}");
        let reply = checked::<FinishAllReply>(&doc, &v, false).remove(0);
        assert!(reply.answers.iter().all(|a| a.refused.is_some()), "{v}");
        if let Some(other) = units.get(1) {
            let mut failed = FinishRequest::failed(&other.job, other.seq, "disk full".into());
            failed.worker = "w1".into();
            failed.lease = other.lease.clone();
            let (s, v) = api
                .post("/api/work/finish", serde_json::to_value(failed).unwrap())
                .await;
            assert_eq!(s, 200, "{v}");
        }

        // The web interface's answers: who is calling (a bearer token, then a
        // browser's session), the live snapshot once it shows the worker, the nodes,
        // and the job's activity.
        let (s, v) = api.get("/api/session").await;
        assert_eq!(s, 200, "{v}");
        let who = checked::<SessionView>(&doc, &v, false).remove(0);
        assert_eq!((who.caller.as_str(), who.operator), ("token", true));
        assert_eq!((who.csrf, who.expires), (None, None));
        let v = session_of_a_browser(&api).await;
        let who = checked::<SessionView>(&doc, &v, false).remove(0);
        assert!(who.csrf.is_some() && who.expires.is_some(), "{v}");
        let v = snapshot_where(&api, |v| v["nodes"][0]["name"] == "w1").await;
        let live = checked::<LiveSnapshot>(&doc, &v, false).remove(0);
        assert_eq!(live.jobs[0].id, id);
        assert_eq!(live.nodes[0].host, "h1");
        let (s, v) = api.get("/api/nodes").await;
        assert_eq!(s, 200, "{v}");
        let nodes = checked::<NodesView>(&doc, &v, false).remove(0);
        assert_eq!(nodes.nodes[0].name, "w1");
        let (s, v) = api.get(&format!("/api/jobs/{id}/activity")).await;
        assert_eq!(s, 200, "{v}");
        let act = checked::<ActivityView>(&doc, &v, false).remove(0);
        assert_eq!(act.shares[0].worker, "w1");
        assert!(!act.samples.is_empty(), "{v}");
        assert_eq!(act.failed.len(), units.len() - 1, "{v}");
        let (s, v) = api
            .post("/api/jobs", json!({"sources": ["run1"], "dest": "../x"}))
            .await;
        assert_eq!(s, 400, "{v}");
        let e = checked::<ErrorBody>(&doc, &v, false).remove(0);
        assert_eq!(e.field.as_deref(), Some("dest"));

        // A spec with every option, and ones the service refuses by their shape: the
        // schema refuses them too (the validator is not taking everything).
        let full = serde_json::to_value(JobSpec {
            sources: vec!["a".into(), "b".into()],
            dest: "hetch://dtn1:7878/in".into(),
            options: CopyOptions {
                checksum: Some("xxh3".into()),
                verify: Some("written".into()),
                block_size: Some(1 << 20),
                streams: Some(8),
                no_clobber: true,
                compress: Some("zstd:3".into()),
                stream: Some(hetch_service_api::StreamSpec::default()),
                sync: true,
                max_delete: Some(5),
            },
            priority: -100,
            rate_limit: 1 << 30,
            dest_nodes: vec!["dtn2:7878".into()],
            access: None,
            webhook: Some(hetch_service_api::Webhook {
                url: "https://hooks.example.org/hetch".into(),
                secret: "0123456789abcdef".into(),
            }),
        })
        .unwrap();
        checked::<JobSpec>(&doc, &full, false);
        for bad in [
            json!({"sources": ["a"]}),
            json!({"sources": [], "dest": "x"}),
            json!({"sources": ["a"], "dest": "x", "optoins": {}}),
            json!({"sources": ["a"], "dest": "x", "priority": 101}),
            json!({"sources": ["a"], "dest": "x", "options": {"streams": 0}}),
            json!({"sources": ["a"], "dest": "x", "options": {"compress": "gzip"}}),
            json!({"sources": ["a"], "dest": "x", "webhook": {"url": "https://h/", "secret": "short"}}),
            json!({"sources": ["a"], "dest": "x", "webhook": {"url": "https://h/"}}),
        ] {
            assert!(!valid::<JobSpec>(&doc, &bad), "{bad}");
        }
        assert!(!valid::<FinishRequest>(
            &doc,
            &json!({"worker": "w", "job": "j"})
        ));
        // A report without its lease id, or with an empty or overlong one.
        let report = json!({"worker": "w", "job": "j", "seq": 1, "error": null});
        assert!(!valid::<FinishRequest>(&doc, &report));
        for lease in [String::new(), "0".repeat(65)] {
            let mut bad = report.clone();
            bad["lease"] = json!(lease);
            assert!(!valid::<FinishRequest>(&doc, &bad), "{bad}");
        }
        let mut good = report;
        good["lease"] = json!("0f");
        assert!(valid::<FinishRequest>(&doc, &good), "{good}");
        assert!(!valid::<HeartbeatReply>(
            &doc,
            &json!({"held": [{"job": "j"}]})
        ));
    });
}
