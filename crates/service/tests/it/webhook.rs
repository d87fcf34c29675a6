//! Jobs' webhooks against a real HTTPS receiver on 127.0.0.1 (a certificate of a
//! private CA the service is told to trust): the note of a job's end, its signature,
//! retries with backoff across a restart of the service, receivers that are down,
//! hang or answer without end, where a webhook may point (a name checked in the
//! form the client connects to, through a hosts file of the test's own), and a
//! secret that is never shown back.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hetch_service::notify::address::refused;
use hetch_service::notify::WebhookConfig;
use hetch_testkit::hosts::with_hosts;
use hetch_testkit::webhook::{signed_by, Answer, Receiver, HUGE};
use serde_json::{json, Value};

use crate::common::{on_each, planner, start_configured, Api};

/// The service's webhook settings for a receiver on 127.0.0.1 with `ca_pem`: short
/// waits, so that retries happen within a test.
fn allowing(ca_pem: &str) -> WebhookConfig {
    WebhookConfig {
        allow_private: true,
        ca: Some(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()),
        backoff_base: Duration::from_millis(100),
        backoff_cap: Duration::from_millis(400),
        max_attempts: 3,
        timeout: Duration::from_secs(2),
    }
}

/// A secret no other test uses, to look for.
fn secret() -> String {
    format!("whsec-{}", hex::encode(rand::random::<[u8; 12]>()))
}

async fn submit(api: &Api, url: &str, secret: &str) -> String {
    let (s, job) = api
        .post(
            "/api/jobs",
            json!({"sources": ["run1/sub/deeper"], "dest": "copy",
                   "webhook": {"url": url, "secret": secret}}),
        )
        .await;
    assert_eq!(s, 201, "{job}");
    job["id"].as_str().unwrap().to_string()
}

/// Runs job `id`'s units through the work API to its end, as a worker would.
async fn run_to_done(api: &Api, id: &str) {
    api.planned(id).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, job) = api.get(&format!("/api/jobs/{id}")).await;
        if job["state"] == "done" {
            return;
        }
        assert!(Instant::now() < deadline, "{job}");
        let (s, units) = api
            .post("/api/work/claim", json!({"worker": "w1", "max": 64}))
            .await;
        assert_eq!(s, 200, "{units}");
        for u in units.as_array().unwrap() {
            let (s, v) = api
                .post(
                    "/api/work/finish",
                    json!({"worker": "w1", "job": id, "seq": u["seq"], "lease": u["lease"],
                           "error": null, "files": 1, "bytes": 0}),
                )
                .await;
            assert_eq!(s, 200, "{v}");
        }
    }
}

/// Job `id` once its webhook's delivery is in `state` (for `pending`: once tried).
async fn delivery_in(api: &Api, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, job) = api.get(&format!("/api/jobs/{id}")).await;
        assert_eq!(s, 200, "{job}");
        let d = &job["webhook"]["delivery"];
        if d["state"] == state && (state != "pending" || d["attempts"] != 0) {
            return job;
        }
        assert!(Instant::now() < deadline, "no {state} delivery: {job}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What of the service's answers could show a secret: a job, the job list, a
/// worker's claim, the web page.
async fn everything_shown(api: &Api, id: &str) -> String {
    let mut all = String::new();
    for path in [format!("/api/jobs/{id}"), "/api/jobs".into()] {
        let (_, v) = api.get(&path).await;
        all.push_str(&v.to_string());
    }
    let cookie = crate::web::log_in(api, &api.token).await;
    for path in ["/", "/ui/app.js"] {
        let page = api
            .http
            .get(format!("{}{path}", api.base))
            .header("cookie", format!("__Host-hetch_session={cookie}"))
            .send()
            .await
            .unwrap();
        all.push_str(&page.text().await.unwrap());
    }
    let snap = crate::web::snapshot_where(api, &cookie, |_| true).await;
    all.push_str(&snap.to_string());
    all
}

#[test]
fn a_jobs_end_is_delivered_once_signed_with_a_secret_shown_nowhere() {
    on_each(|dir, url| async move {
        let rx = Receiver::start(&[]).await;
        let cfg = allowing(&rx.ca_pem);
        let (api, _task) = start_configured(&dir, &url, planner(), |c| c.webhooks = cfg).await;
        let secret = secret();
        let id = submit(&api, &rx.url, &secret).await;
        let (_, job) = api.get(&format!("/api/jobs/{id}")).await;
        assert_eq!(job["webhook"]["url"], rx.url.as_str(), "{job}");
        assert_eq!(job["webhook"]["secret_set"], true, "{job}");
        assert!(job["spec"].get("webhook").is_none(), "{job}");
        // A worker is not told it either.
        api.planned(&id).await;
        let (_, units) = api
            .post("/api/work/claim", json!({"worker": "w0", "max": 1}))
            .await;
        assert!(!units.to_string().contains(&secret), "{units}");
        assert!(units[0]["spec"].get("webhook").is_none(), "{units}");
        // (The unit held by w0 is let go by cancelling nothing: w1 takes the rest,
        // and w0's is finished by w0.)
        let (s, v) = api
            .post(
                "/api/work/finish",
                json!({"worker": "w0", "job": id, "seq": units[0]["seq"],
                       "lease": units[0]["lease"], "error": null, "files": 1, "bytes": 0}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        run_to_done(&api, &id).await;
        let job = delivery_in(&api, &id, "delivered").await;
        let d = &job["webhook"]["delivery"];
        assert_eq!(d["attempts"], 1, "{job}");

        let got = rx.requests();
        assert_eq!(got.len(), 1, "{got:?}");
        let req = &got[0];
        let note: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(note["job"], id.as_str());
        assert_eq!(note["state"], "done");
        assert_eq!(note["event"], "job.ended");
        assert_eq!(note["files_done"], job["files_done"]);
        assert_eq!(note["bytes_done"], job["bytes_done"]);
        assert_eq!(note["finished"], job["finished"]);
        assert!(note["timestamp"].as_u64().unwrap() >= job["finished"].as_u64().unwrap());
        assert_eq!(req.headers["x-hetch-event"], "job.ended");
        assert_eq!(
            req.headers["x-hetch-delivery"],
            note["delivery"].as_str().unwrap()
        );
        assert_eq!(d["id"], note["delivery"]);
        // The receiver's check: HMAC-SHA256 of the exact body with the secret.
        let sig = &req.headers["x-hetch-signature"];
        assert!(signed_by(secret.as_bytes(), &req.body, sig), "{sig}");
        assert!(!signed_by(b"not-the-secret-at-all", &req.body, sig));
        let mut changed = req.body.clone();
        changed[1] ^= 1;
        assert!(!signed_by(secret.as_bytes(), &changed, sig));
        assert!(!req
            .body
            .windows(secret.len())
            .any(|w| w == secret.as_bytes()));

        // A cancelled job is told of too; once its note arrived, the loop has run
        // many times since the first was delivered, which was still sent once.
        let other = submit(&api, &rx.url, &secret).await;
        api.planned(&other).await;
        let (s, _) = api
            .post(&format!("/api/jobs/{other}/cancel"), json!({}))
            .await;
        assert_eq!(s, 200);
        delivery_in(&api, &other, "delivered").await;
        let got = rx.requests();
        assert_eq!(got.len(), 2, "{got:?}");
        let note: Value = serde_json::from_slice(&got[1].body).unwrap();
        assert_eq!(
            (note["job"].as_str(), note["state"].as_str()),
            (Some(other.as_str()), Some("cancelled"))
        );

        let shown = everything_shown(&api, &id).await;
        assert!(!shown.contains(&secret), "the secret was shown");
        assert!(shown.contains(&rx.url), "the check looked at the jobs");
        // The live view's deliveries.
        let cookie = crate::web::log_in(&api, &api.token).await;
        let snap = crate::web::snapshot_where(&api, &cookie, |v| {
            v["deliveries"].as_array().is_some_and(|d| d.len() == 2)
        })
        .await;
        assert_eq!(snap["deliveries"][0]["job"], other.as_str(), "{snap}");
        assert_eq!(snap["deliveries"][1]["state"], "delivered", "{snap}");
    });
}

/// A service in a runtime of its own, so that stopping it stops its delivery loop
/// too (as a process's end would).
struct Instance {
    api: Api,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Instance {
    fn start(dir: &Path, url: &str, cfg: WebhookConfig) -> Instance {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (dir, url) = (dir.to_path_buf(), url.to_string());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let (api, _task) =
                    start_configured(&dir, &url, planner(), |c| c.webhooks = cfg).await;
                tx.send(api).unwrap();
                let _ = stopped.await;
            });
            // Dropping the runtime ends every task the service started.
        });
        Instance {
            api: rx.recv().unwrap(),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
    }
}

#[test]
fn a_receiver_failing_twice_gets_the_third_attempt_across_a_restart() {
    on_each(|dir, url| async move {
        let rx = Receiver::start(&[Answer::Status(500), Answer::Status(503)]).await;
        // Waits long enough for the service to be stopped and started again between
        // the first failure and the second attempt (4 s, then 4 s again).
        let cfg = WebhookConfig {
            backoff_base: Duration::from_secs(4),
            backoff_cap: Duration::from_secs(4),
            ..allowing(&rx.ca_pem)
        };
        let first = Instance::start(&dir, &url, cfg.clone());
        let id = submit(&first.api, &rx.url, &secret()).await;
        first.api.planned(&id).await;
        first
            .api
            .post(&format!("/api/jobs/{id}/cancel"), json!({}))
            .await;
        let job = delivery_in(&first.api, &id, "pending").await;
        let d = &job["webhook"]["delivery"];
        assert_eq!(d["attempts"], 1, "{job}");
        assert!(d["last_error"].as_str().unwrap().contains("500"), "{job}");
        let delivery = d["id"].clone();
        first.stop();
        assert_eq!(rx.requests().len(), 1, "stopped before the second attempt");

        // Started again, it finds the row where the first left it, and carries on.
        let again = Instance::start(&dir, &url, cfg);
        let job = delivery_in(&again.api, &id, "delivered").await;
        let d = &job["webhook"]["delivery"];
        assert_eq!(d["attempts"], 3, "{job}");
        assert_eq!(d["id"], delivery, "one delivery id for every attempt");
        let got = rx.requests();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got
            .iter()
            .all(|r| r.headers["x-hetch-delivery"] == delivery));
        again.stop();
    });
}

#[test]
fn receivers_down_hanging_or_answering_without_end_never_hold_up_a_job() {
    on_each(|dir, url| async move {
        // Down: nothing listens on the port any more.
        let down = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("https://{}/hook", l.local_addr().unwrap())
        };
        let rx = Receiver::start(&[Answer::Hang, Answer::Hang, Answer::Huge]).await;
        let cfg = WebhookConfig {
            timeout: Duration::from_millis(1500),
            max_attempts: 2,
            ..allowing(&rx.ca_pem)
        };
        let (api, _task) = start_configured(&dir, &url, planner(), |c| c.webhooks = cfg).await;
        let secret = secret();
        let dead = submit(&api, &down, &secret).await;
        run_to_done(&api, &dead).await;
        let job = delivery_in(&api, &dead, "given_up").await;
        assert_eq!(job["state"], "done", "the job ended as it would have");
        let d = &job["webhook"]["delivery"];
        assert_eq!(d["attempts"], 2, "{job}");
        let why = d["last_error"].as_str().unwrap();
        assert!(why.contains("onnect"), "{why}");
        assert!(!why.contains(&secret));

        // Hanging twice: each attempt cut at its deadline, then given up.
        let hung = submit(&api, &rx.url, &secret).await;
        run_to_done(&api, &hung).await;
        let job = delivery_in(&api, &hung, "given_up").await;
        let why = job["webhook"]["delivery"]["last_error"].as_str().unwrap();
        assert!(why.contains("no answer within 1.5 s"), "{why}");
        assert_eq!(rx.requests().len(), 2);

        // An answer of a GiB: a 200 is delivered, and the rest is never read (the
        // receiver's writes fail once the service drops the connection).
        let huge = submit(&api, &rx.url, &secret).await;
        run_to_done(&api, &huge).await;
        delivery_in(&api, &huge, "delivered").await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !rx.huge_ended.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the receiver is still writing");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let sent = rx.huge_sent.load(Ordering::SeqCst);
        assert!(sent < HUGE / 16, "{sent} bytes of the answer were taken");
    });
}

#[test]
fn webhooks_out_of_bounds_or_to_private_addresses_are_refused_at_submission() {
    on_each(|dir, url| async move {
        let (api, _task) = start_configured(&dir, &url, planner(), |_| {}).await;
        let secret = secret();
        let long = format!("https://hooks.example.org/{}", "a".repeat(2048));
        for (hook_url, hook_secret, why) in [
            ("https://127.0.0.1:8443/h", &secret, "loopback"),
            ("https://169.254.169.254/latest", &secret, "link-local"),
            ("https://10.0.0.7/h", &secret, "private"),
            ("https://[::1]/h", &secret, "loopback"),
            ("https://127.1/h", &secret, "127.0.0.1 is a loopback"),
            ("https://０x7f.0.0.1/h", &secret, "127.0.0.1 is a loopback"),
            ("https://ｌｏｃａｌｈｏｓｔ/h", &secret, "this machine"),
            ("https://[::127.0.0.1]/h", &secret, "embedding 127.0.0.1"),
            ("https://[::ffff:a00:7]/h", &secret, "embedding 10.0.0.7"),
            (
                "https://[64:ff9b::a9fe:a9fe]/h",
                &secret,
                "embedding 169.254.169.254",
            ),
            ("https://[64:ff9b:1::808:808]/h", &secret, "local-use NAT64"),
            ("https://[2002:a00:7::1]/h", &secret, "embedding 10.0.0.7"),
            (
                "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/h",
                &secret,
                "embedding 127.0.0.1",
            ),
            ("https://[fec0::1]/h", &secret, "site-local"),
            ("https://localhost/h", &secret, "this machine"),
            ("http://hooks.example.org/h", &secret, "https://"),
            (long.as_str(), &secret, "2048"),
            (
                "https://hooks.example.org/h",
                &"short".to_string(),
                "16 to 1024",
            ),
            (
                "https://hooks.example.org/h",
                &"s".repeat(1025),
                "16 to 1024",
            ),
        ] {
            let (s, v) = api
                .post(
                    "/api/jobs",
                    json!({"sources": ["run1"], "dest": "copy",
                           "webhook": {"url": hook_url, "secret": hook_secret}}),
                )
                .await;
            assert_eq!((s, v["field"].as_str()), (400, Some("webhook")), "{v}");
            let e = v["error"].as_str().unwrap();
            assert!(e.contains(why), "{e}");
            assert!(!e.contains(&secret) && !e.contains("sssss"), "{e}");
        }
        let (_, jobs) = api.get("/api/jobs").await;
        assert_eq!(jobs, json!([]), "nothing was queued");
        // A name is checked when it is resolved, at delivery: this machine's own name
        // (which resolves to one of its addresses: loopback or private where tests
        // run) is accepted now and never reached.
        let rx = Receiver::start(&[]).await;
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let name = name.trim().to_string();
        let port = rx.url.split(':').nth(2).unwrap().split('/').next().unwrap();
        let resolved: Vec<_> = tokio::net::lookup_host((name.as_str(), 443))
            .await
            .map(|a| a.collect())
            .unwrap_or_default();
        if resolved.is_empty() || resolved.iter().any(|a| refused(a.ip()).is_none()) {
            eprintln!("{name} resolves to {resolved:?}: not checking its refusal");
            return;
        }
        let id = submit(&api, &format!("https://{name}:{port}/hook"), &secret).await;
        api.planned(&id).await;
        api.post(&format!("/api/jobs/{id}/cancel"), json!({})).await;
        let job = delivery_in(&api, &id, "pending").await;
        let why = job["webhook"]["delivery"]["last_error"].as_str().unwrap();
        assert!(why.contains(&format!("{name} resolves to")), "{why}");
        assert!(why.contains("--webhook-allow-private"), "{why}");
        assert!(rx.requests().is_empty());
    });
}

/// The finding of issue 55: the name as typed (`bücher.example`) was checked and
/// pinned, while the HTTP client connected to its punycode form, which it looked up
/// again, unchecked: here that form resolves to the receiver on 127.0.0.1, whose
/// certificate names it, so a check of the wrong form delivers the signed note. The
/// form connected to is the one checked, and the refusal comes before any
/// connection, in one line; a name resolving to an IPv6 address that embeds a
/// loopback IPv4 (NAT64) is refused the same way.
#[test]
fn a_webhooks_name_is_checked_in_the_form_connected_to_before_connecting() {
    let hosts = "93.184.216.34 bücher.example\n\
                 127.0.0.1 xn--bcher-kva.example\n\
                 64:ff9b::7f00:1 nat64.example\n";
    let ran = with_hosts(hosts, || {
        on_each(|dir, url| async move {
            let rx = Receiver::start_for(&[], &["xn--bcher-kva.example", "nat64.example"]).await;
            let cfg = WebhookConfig {
                allow_private: false,
                max_attempts: 1,
                ..allowing(&rx.ca_pem)
            };
            let (api, _task) = start_configured(&dir, &url, planner(), |c| c.webhooks = cfg).await;
            let port = rx.url.split(':').nth(2).unwrap().split('/').next().unwrap();
            for (host, why) in [
                (
                    "bücher.example",
                    "xn--bcher-kva.example resolves to 127.0.0.1, a loopback address",
                ),
                (
                    "nat64.example",
                    "nat64.example resolves to 64:ff9b::7f00:1, an IPv6 address embedding \
                     127.0.0.1, a loopback address",
                ),
            ] {
                let hook = format!("https://{host}:{port}/hook");
                let id = submit(&api, &hook, &secret()).await;
                api.planned(&id).await;
                api.post(&format!("/api/jobs/{id}/cancel"), json!({})).await;
                let job = delivery_in(&api, &id, "given_up").await;
                let error = job["webhook"]["delivery"]["last_error"].as_str().unwrap();
                assert_eq!(
                    error,
                    format!("{why} (not allowed without --webhook-allow-private)"),
                    "{job}"
                );
            }
            assert!(rx.requests().is_empty(), "a note reached 127.0.0.1");
            assert_eq!(rx.connections.load(Ordering::SeqCst), 0, "connected first");
        })
    });
    if let Err(why) = ran {
        hetch_testkit::skipped(why);
    }
}
