//! The work routes of files moved in ranges into an object store, over real HTTPS on
//! SQLite and PostgreSQL: one upload per file (the first recorded wins), range
//! reports bounded and checked against their unit before they are stored (crafted
//! ones refused with a 400 naming the field), and the commit unit reading back what
//! its file's ranges reported.

use crate::common;

use common::{on_each, planner, start};
use hetch_service_api::client::Client;
use hetch_service_api::{RangesRequest, UploadRequest};
use serde_json::{json, Value};

#[test]
fn range_reports_are_bounded_checked_and_read_back_by_the_commit() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        let (s, job) = api
            .post("/api/jobs", json!({"sources": ["run1"], "dest": "copy"}))
            .await;
        assert_eq!(s, 201, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        api.planned(&id).await;
        let (s, units) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
            .await;
        assert_eq!(s, 200, "{units}");
        let units = units.as_array().unwrap().clone();
        // The first range of a split file: blocks 0..2 of 8 bytes, 16 bytes.
        let range = units
            .iter()
            .find(|u| u["unit"]["Range"]["first"] == 0)
            .expect("a range unit")
            .clone();
        let (seq, file) = (&range["seq"], &range["unit"]["Range"]["file"]);
        assert_eq!(range["unit"]["Range"]["end"], 2, "{range}");
        let files_unit = units.iter().find(|u| u["unit"].get("Files").is_some());
        let lease = &range["lease"];
        // Unit `u`'s upload as `worker` says it, with `u`'s lease id.
        let upload = |u: &Value, worker: &str, upload: String| {
            json!({"worker": worker, "job": id, "seq": u["seq"], "lease": u["lease"],
                   "upload": upload})
        };

        // The first upload recorded is the file's; a later one learns it.
        let (s, v) = api
            .post("/api/work/upload", upload(&range, "w1", "u".repeat(1025)))
            .await;
        assert_eq!(s, 400, "{v}");
        assert!(v["error"].as_str().unwrap().starts_with("upload: "), "{v}");
        let (s, v) = api
            .post("/api/work/upload", upload(&range, "w1", "up-A".into()))
            .await;
        assert_eq!((s, &v["upload"]), (200, &json!("up-A")), "{v}");
        let (s, v) = api
            .post("/api/work/upload", upload(&range, "w1", "up-B".into()))
            .await;
        assert_eq!((s, &v["upload"]), (200, &json!("up-A")), "{v}");
        // The workers' client learns it too (its key learned on first use).
        let hosts = dir.join("known_hosts");
        let token = api.token.clone().into_bytes();
        let client = Client::new(&api.addr, None, Some(hosts), token)
            .await
            .unwrap();
        let seq_n = seq.as_u64().unwrap();
        let ask_upload = UploadRequest {
            worker: "w1".into(),
            job: id.clone(),
            seq: seq_n,
            lease: lease.as_str().unwrap().to_string(),
            upload: "up-Z".into(),
        };
        assert_eq!(client.upload(&ask_upload).await.unwrap().upload, "up-A");
        // Only for a range unit the worker holds, under the lease id its claim gave.
        let (s, v) = api
            .post("/api/work/upload", upload(&range, "w2", "up-C".into()))
            .await;
        assert_eq!(s, 409, "{v}");
        let mut stray = range.clone();
        stray["lease"] = json!("0".repeat(32));
        let (s, v) = api
            .post("/api/work/upload", upload(&stray, "w1", "up-C".into()))
            .await;
        assert_eq!(s, 409, "{v}");
        if let Some(f) = files_unit {
            let (s, v) = api
                .post("/api/work/upload", upload(f, "w1", "up-C".into()))
                .await;
            assert_eq!(s, 400, "{v}");
        }

        let digest = "ab".repeat(32);
        let good = json!({"upload": "up-A", "parts": ["\"etag-1\""], "size": 16,
                          "digests": [digest, digest]});
        let report = |range: Value| {
            json!({"worker": "w1", "job": id, "seq": seq, "lease": lease, "error": null,
                   "files": 0, "bytes": 16, "range": range})
        };
        let with = |k: &str, v: Value| {
            let mut r = good.clone();
            r[k] = v;
            r
        };
        let crafted = [
            (with("parts", json!(vec!["p"; 1025])), "range.parts"),
            (with("parts", json!(["e".repeat(1 << 20)])), "range.parts"),
            (with("parts", json!(["a", "b", "c"])), "range.parts"),
            (with("parts", json!([])), "range.parts"),
            (with("size", json!(1u64 << 53)), "range.size"),
            (with("size", json!(15)), "range.size"),
            (with("digests", json!([digest])), "range.digests"),
            (
                with("digests", json!(vec![digest.clone(); 20_000])),
                "range.digests",
            ),
            (
                with("digests", json!([digest, "zz".repeat(32)])),
                "range.digests",
            ),
            (with("upload", json!("up-B")), "range.upload"),
        ];
        for (range, field) in crafted {
            let (s, v) = api.post("/api/work/finish", report(range)).await;
            assert_eq!(s, 400, "{field}: {v}");
            let e = v["error"].as_str().unwrap();
            assert!(e.starts_with(field), "{field}: {e}");
        }
        // Refused reports left the unit held and nothing recorded: the good one goes.
        let (s, v) = api.post("/api/work/finish", report(good.clone())).await;
        assert_eq!(s, 200, "{v}");

        // Every other unit done; the file's commit reads what its ranges reported.
        for u in units.iter().filter(|u| &u["seq"] != seq) {
            let done = json!({"worker": "w1", "job": id, "seq": u["seq"], "lease": u["lease"],
                              "error": null, "files": 0, "bytes": 0});
            let (s, v) = api.post("/api/work/finish", done).await;
            assert_eq!(s, 200, "{v}");
        }
        let (s, more) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
            .await;
        assert_eq!(s, 200, "{more}");
        let commit = more
            .as_array()
            .unwrap()
            .iter()
            .find(|u| &u["unit"]["Commit"]["file"] == file)
            .expect("the file's commit")
            .clone();
        let ask = |u: &Value, worker: &str| json!({"worker": worker, "job": id, "seq": u["seq"], "lease": u["lease"], "from": 0});
        let (s, v) = api.post("/api/work/ranges", ask(&commit, "w1")).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["upload"], "up-A", "{v}");
        let ranges = v["ranges"].as_array().unwrap();
        assert_eq!(ranges.len(), 1, "{v}");
        assert_eq!(
            (&ranges[0]["first"], &ranges[0]["end"], &ranges[0]["size"]),
            (&json!(0), &json!(2), &json!(16))
        );
        assert_eq!(ranges[0]["parts"], json!(["\"etag-1\""]));
        assert_eq!(ranges[0]["digests"], good["digests"]);
        assert!(v["next"].is_null(), "{v}");
        // The workers' client reads the same page, checked.
        let page = client
            .ranges(&RangesRequest {
                worker: "w1".into(),
                job: id.clone(),
                seq: commit["seq"].as_u64().unwrap(),
                lease: commit["lease"].as_str().unwrap().to_string(),
                from: 0,
            })
            .await
            .unwrap();
        assert_eq!(page.upload.as_deref(), Some("up-A"));
        assert_eq!(serde_json::to_value(&page.ranges).unwrap(), v["ranges"]);
        // Only the commit's holder asks, under the lease id its claim gave.
        let (s, v) = api.post("/api/work/ranges", ask(&commit, "w2")).await;
        assert_eq!(s, 409, "{v}");
        let mut stray = commit.clone();
        stray["lease"] = json!("0".repeat(32));
        let (s, v) = api.post("/api/work/ranges", ask(&stray, "w1")).await;
        assert_eq!(s, 409, "{v}");
    });
}
