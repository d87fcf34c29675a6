//! The web interface's server side over real HTTPS: logging in and the session
//! cookie, CSRF and cross-site refusals, the security headers, field errors for the
//! form, the live event stream (a user's holding only their jobs), and what workers
//! report showing on the nodes page and a job's activity. (The pages themselves are
//! tested in a real browser by the binary's tests/it/web.rs.)

use crate::common;

use std::time::{Duration, Instant};

use common::{idle_flood, on_each, planner, start, Api, IdleConn};
use hetch_service::auth::Caller;
use hetch_service::web::session::Sessions;
use serde_json::{json, Value};

/// A request from a browser on this origin, with `cookie` (a session) and `csrf`.
fn browser(
    api: &Api,
    method: reqwest::Method,
    path: &str,
    cookie: Option<&str>,
    csrf: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut r = api
        .http
        .request(method, format!("{}{path}", api.base))
        .header("sec-fetch-site", "same-origin");
    if let Some(c) = cookie {
        r = r.header("cookie", format!("__Host-hetch_session={c}"));
    }
    if let Some(t) = csrf {
        r = r.header("x-csrf-token", t);
    }
    r
}

async fn json_of(r: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Logs in with `token`: the session cookie's value.
pub(crate) async fn log_in(api: &Api, token: &str) -> String {
    let resp = browser(api, reqwest::Method::POST, "/login", None, None)
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/");
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set.contains("HttpOnly; Secure; SameSite=Strict"), "{set}");
    let value = set.strip_prefix("__Host-hetch_session=").unwrap();
    value.split(';').next().unwrap().to_string()
}

/// The first `snapshot` event on `path` for `cookie` that satisfies `want`.
pub(crate) async fn snapshot_where(
    api: &Api,
    cookie: &str,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let resp = browser(api, reqwest::Method::GET, "/api/events", Some(cookie), None)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    first_event_where(resp, want).await
}

/// The data of the first event of the stream `resp` that satisfies `want` (within a
/// minute).
pub(crate) async fn first_event_where(
    mut resp: reqwest::Response,
    want: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut text = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, resp.chunk()).await;
        let chunk = chunk
            .expect("a snapshot in time")
            .unwrap()
            .expect("stream open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some((event, rest)) = text.split_once("\n\n") {
            let data = event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .map(|d| serde_json::from_str::<Value>(d).unwrap());
            text = rest.to_string();
            if let Some(v) = data.filter(|v| want(v)) {
                return v;
            }
        }
    }
}

#[test]
fn a_browser_logs_in_and_acts_only_with_its_session_and_csrf_token() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        // No session: the page sends to the login form.
        let resp = browser(&api, reqwest::Method::GET, "/", None, None)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 303);
        assert_eq!(resp.headers()["location"], "/login");
        let csp = resp.headers()["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));
        assert_eq!(resp.headers()["x-content-type-options"], "nosniff");

        // A wrong token: the form again, with the error as text.
        let (s, page) = json_of(
            browser(&api, reqwest::Method::POST, "/login", None, None)
                .form(&[("token", "<b>not-it</b>")]),
        )
        .await;
        assert_eq!(s, 401);
        let page = page.as_str().unwrap().to_string();
        assert!(
            page.contains("wrong token") && !page.contains("<b>"),
            "{page}"
        );
        // Another site's login form: refused, whatever the token.
        let resp = api
            .http
            .post(format!("{}/login", api.base))
            .header("origin", "https://evil.example")
            .form(&[("token", api.token.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403);
        assert!(resp.headers().get("set-cookie").is_none());

        // The workers' token logs nobody in.
        let resp = browser(&api, reqwest::Method::POST, "/login", None, None)
            .form(&[("token", api.worker_token.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403);
        assert!(resp.headers().get("set-cookie").is_none());
        let page = resp.text().await.unwrap();
        assert!(page.contains("for workers only"), "{page}");

        let cookie = log_in(&api, &api.token).await;
        let resp = browser(&api, reqwest::Method::GET, "/", Some(&cookie), None)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.text().await.unwrap().contains("/ui/app.js"));
        let (s, who) = json_of(browser(
            &api,
            reqwest::Method::GET,
            "/api/session",
            Some(&cookie),
            None,
        ))
        .await;
        assert_eq!(s, 200);
        assert_eq!(who["caller"], "token");
        let csrf = who["csrf"].as_str().unwrap().to_string();

        // Acting needs the CSRF token, from this origin.
        let spec = json!({"sources": ["run1"], "dest": "out/<script>\"q'ü"});
        let post = |csrf: Option<&str>| {
            browser(
                &api,
                reqwest::Method::POST,
                "/api/jobs",
                Some(&cookie),
                csrf,
            )
            .json(&spec)
        };
        let (s, e) = json_of(post(None)).await;
        assert_eq!(s, 403, "{e}");
        assert!(e["error"].as_str().unwrap().contains("x-csrf-token"));
        let (s, _) = json_of(post(Some("0".repeat(64).as_str()))).await;
        assert_eq!(s, 403);
        let (s, _) = json_of(post(Some(&csrf)).header("sec-fetch-site", "cross-site")).await;
        assert_eq!(s, 403);
        let (s, _) = json_of(api.http.get(format!("{}/api/jobs", api.base))).await;
        assert_eq!(s, 401);
        let (s, job) = json_of(post(Some(&csrf))).await;
        assert_eq!(s, 201, "{job}");
        assert_eq!(job["spec"]["dest"], "out/<script>\"q'ü");
        // A session is never a worker.
        let claim = json!({"worker": "w", "max": 1});
        let (s, _) = json_of(
            browser(
                &api,
                reqwest::Method::POST,
                "/api/work/claim",
                Some(&cookie),
                Some(&csrf),
            )
            .json(&claim),
        )
        .await;
        assert_eq!(s, 403);
        // A changed cookie is no session.
        let mut forged = cookie.clone();
        forged.insert(0, 'A');
        let (s, _) = json_of(browser(
            &api,
            reqwest::Method::GET,
            "/api/jobs",
            Some(&forged),
            None,
        ))
        .await;
        assert_eq!(s, 401);

        // The form's errors name their field.
        for (spec, field) in [
            (json!({"sources": ["../etc"], "dest": "x"}), "sources"),
            (json!({"sources": ["run1"], "dest": "/abs"}), "dest"),
            (
                json!({"sources": ["run1"], "dest": "x", "priority": 1000}),
                "priority",
            ),
            (
                json!({"sources": ["run1"], "dest": "x", "options": {"streams": 0}}),
                "streams",
            ),
            (
                json!({"sources": ["run1"], "dest": "x", "options": {"checksum": "crc64"}}),
                "checksum",
            ),
        ] {
            let (s, e) = json_of(
                browser(
                    &api,
                    reqwest::Method::POST,
                    "/api/jobs",
                    Some(&cookie),
                    Some(&csrf),
                )
                .json(&spec),
            )
            .await;
            assert_eq!((s, e["field"].as_str()), (400, Some(field)), "{spec}: {e}");
        }

        // Logging out clears the cookie.
        let resp = browser(&api, reqwest::Method::POST, "/logout", Some(&cookie), None)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 303);
        assert!(resp.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0"));
    });
}

#[test]
fn the_live_stream_nodes_and_activity_show_what_workers_report_and_users_see_their_own() {
    on_each(|dir, url| async move {
        let (api, _task) = start(&dir, &url, planner()).await;
        let cookie = log_in(&api, &api.token).await;
        let (s, job) = api
            .post("/api/jobs", json!({"sources": ["run1"], "dest": "copy"}))
            .await;
        assert_eq!(s, 201);
        let id = job["id"].as_str().unwrap().to_string();
        api.planned(&id).await;

        // A worker says who it is; bounds are kept.
        let about =
            json!({"host": "dtn1", "capacity": 2, "moved": 0, "checks": ["receive window: small"]});
        let (s, units) = api
            .post(
                "/api/work/claim",
                json!({"worker": "w1", "max": 2, "about": about}),
            )
            .await;
        assert_eq!(s, 200, "{units}");
        let units = units.as_array().unwrap().clone();
        assert_eq!(units.len(), 2);
        for bad in [
            json!({"checks": vec!["x"; 33]}),
            json!({"checks": ["a\u{7}b"]}),
            json!({"host": "a".repeat(254)}),
            json!({"capacity": 0}),
        ] {
            let (s, e) = api
                .post(
                    "/api/work/heartbeat",
                    json!({"worker": "w1", "units": [], "about": bad}),
                )
                .await;
            // Dropped, not refused: the worker keeps its leases (and, below, what it
            // said before).
            assert_eq!(s, 200, "{bad}: {e}");
        }
        // Live progress: the first unit here (a range of 16 bytes of run1/big; what a
        // unit reports is held to what it holds, and the batch before it holds the
        // directory alone) has moved 10 bytes so far, the worker 5000.
        let (first, second) = (&units[1], &units[0]);
        assert_eq!(first["unit"]["Range"]["first"], 0, "{units:?}");
        let beat = json!({"worker": "w1", "about": {"moved": 5000},
            "units": [{"job": id, "seq": first["seq"], "lease": first["lease"], "bytes": 10},
                      {"job": id, "seq": second["seq"], "lease": second["lease"]}]});
        let (s, _) = api.post("/api/work/heartbeat", beat).await;
        assert_eq!(s, 200);
        let snap = snapshot_where(&api, &cookie, |v| {
            v["jobs"][0]["bytes_done"] == 10 && v["nodes"][0]["name"] == "w1"
        })
        .await;
        assert_eq!(snap["jobs"][0]["id"], id.as_str());
        assert_eq!(snap["jobs"][0]["state"], "running");
        let (s, nodes) = api.get("/api/nodes").await;
        assert_eq!(s, 200);
        let node = &nodes["nodes"][0];
        assert_eq!(
            (node["host"].as_str(), node["active"].as_u64()),
            (Some("dtn1"), Some(2))
        );
        assert_eq!(node["checks"], json!(["receive window: small"]));
        assert!(nodes["service"]["checks"].is_array());

        // One unit done, one failed for good: the share and the error.
        let done = json!({"worker": "w1", "job": id, "seq": first["seq"], "lease": first["lease"],
                          "error": null, "files": 0, "bytes": 16});
        assert_eq!(api.post("/api/work/finish", done).await.0, 200);
        let mut attempts = 0;
        loop {
            let (s, u) = api
                .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
                .await;
            assert_eq!(s, 200);
            let Some(u) = u
                .as_array()
                .unwrap()
                .iter()
                .find(|u| u["seq"] == second["seq"])
                .cloned()
                .or_else(|| (attempts == 0).then(|| second.clone()))
            else {
                break;
            };
            let fail = json!({"worker": "w1", "job": id, "seq": u["seq"], "lease": u["lease"],
                              "error": "disk full: <b>/data</b>\nsecond line"});
            api.post("/api/work/finish", fail).await;
            attempts += 1;
            assert!(attempts < 20, "the unit never failed for good");
        }
        let (s, act) = api.get(&format!("/api/jobs/{id}/activity")).await;
        assert_eq!(s, 200);
        assert_eq!(
            act["shares"],
            json!([{"worker": "w1", "units": 1, "bytes": 16}])
        );
        let failed = &act["failed"][0];
        assert_eq!(failed["seq"], second["seq"]);
        assert_eq!(failed["error"], "disk full: <b>/data</b>");
        assert_eq!(failed["state"], "failed");
        assert!(!act["samples"].as_array().unwrap().is_empty());

        // The listing, streamed as JSON lines: every file of the job.
        let (_, job) = api.get(&format!("/api/jobs/{id}")).await;
        let resp = api
            .http
            .get(format!("{}/api/jobs/{id}/listing", api.base))
            .bearer_auth(&api.token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap();
        assert_eq!(text.lines().count() as u64, job["files"].as_u64().unwrap());
        assert!(text
            .lines()
            .all(|l| serde_json::from_str::<Value>(l).unwrap()["path"].is_string()));

        // A user's session: their own jobs only (none), and no other's by id.
        let alice = Sessions::new(api.token.as_bytes()).seal(
            &Caller::User("oidc:alice".into()),
            hetch_service::now_ms() + 60_000,
        );
        let snap = snapshot_where(&api, &alice, |_| true).await;
        assert_eq!(snap["jobs"], json!([]));
        let (s, _) = json_of(browser(
            &api,
            reqwest::Method::GET,
            &format!("/api/jobs/{id}/activity"),
            Some(&alice),
            None,
        ))
        .await;
        assert_eq!(s, 404);
        let (s, _) = json_of(browser(
            &api,
            reqwest::Method::GET,
            &format!("/api/jobs/{id}/listing"),
            Some(&alice),
            None,
        ))
        .await;
        assert_eq!(s, 404);
    });
}

/// Hundreds of connections from one address that complete TLS (or not even that) and
/// then send nothing do not lock anyone else out: a client's `GET /api/jobs`, a
/// browser's login and live view, and a worker's claim and heartbeat all go through
/// while they are open; each of them is closed by the service in the end (the
/// deadline to authenticate), and so is an authenticated connection left idle.
#[test]
fn a_flood_of_idle_connections_leaves_clients_browsers_and_workers_working() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    common::tree(&dir.path().join("root"));
    let url = format!("sqlite://{}", dir.path().join("jobs.db").display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let limits = hetch_service::listen::ConnLimits {
            max_connections: 512,
            pre_auth: hetch_net::PreAuthLimits {
                max_total: 64,
                max_per_address: 16,
                deadline: Duration::from_secs(3),
                ..Default::default()
            },
            idle: Duration::from_secs(3),
            ..Default::default()
        };
        let (api, _task) =
            common::start_configured(dir.path(), &url, planner(), |c| c.limits = limits).await;
        let (s, job) = api
            .post("/api/jobs", json!({"sources": ["run1"], "dest": "copy"}))
            .await;
        assert_eq!(s, 201, "{job}");
        let id = job["id"].as_str().unwrap().to_string();
        api.planned(&id).await;
        let (s, claimed) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 1}))
            .await;
        assert_eq!(s, 200, "{claimed}");
        let seq = claimed[0]["seq"].as_u64().expect("a unit");
        let lease = claimed[0]["lease"].clone();

        // More than the service's old cap of 512, all from one address.
        let mut flood = idle_flood(&api, "127.0.0.2", 600).await;
        assert!(!flood.is_empty());

        // A client with a fresh connection (reqwest's pool has none to this address
        // from 127.0.0.2; its own connections come from 127.0.0.1).
        let fresh = reqwest::Client::builder()
            .use_preconfigured_tls((*api.tls).clone())
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let api2 = api.with_client(fresh);
        let (s, jobs) = api2.get("/api/jobs").await;
        assert_eq!(s, 200, "{jobs}");
        let cookie = log_in(&api2, &api2.token).await;
        let snap = snapshot_where(&api2, &cookie, |v| v["jobs"][0]["id"] == id).await;
        assert_eq!(snap["jobs"].as_array().map(Vec::len), Some(1), "{snap}");
        let beat = json!({"worker": "w1", "units": [{"job": id, "seq": seq, "lease": lease}]});
        let (s, held) = api2.post("/api/work/heartbeat", beat).await;
        assert_eq!(s, 200, "{held}");
        assert_eq!(held["held"][0]["seq"], seq, "{held}");

        // Every flooding connection is closed by the service (those it took are cut
        // at the deadline; the others were refused at once).
        for c in &mut flood {
            assert!(
                c.closed_by_service().await,
                "a flooding connection stayed open"
            );
        }

        // An authenticated connection left idle is closed too.
        let (s, _) = api2.get("/api/jobs").await;
        assert_eq!(s, 200);
        let mut idle = idle_flood(&api, "127.0.0.3", 1).await.pop().unwrap();
        if let IdleConn::Tls(t) = &mut idle {
            use tokio::io::AsyncWriteExt;
            let req = format!(
                "GET /api/jobs HTTP/1.1\r\nhost: hetch\r\nauthorization: Bearer {}\r\n\r\n",
                api.token
            );
            t.write_all(req.as_bytes()).await.unwrap();
        }
        assert!(
            idle.closed_by_service().await,
            "an idle connection stayed open"
        );
    });
}
