//! Notifications end to end: a real `hetch service` and `hetch worker`, a job
//! submitted by `hetch job submit --webhook` with its secret from a file, delivered
//! to an HTTPS receiver on 127.0.0.1 and checked there as the guide tells receivers
//! to (openssl); the secret in none of the service's answers, `hetch job show` or the
//! service's log.

use std::process::Command;

use hetch_testkit::webhook::{signed_by, Receiver};

use crate::util::service::{show, start_with};
use crate::util::wait_for;

#[test]
fn a_job_submitted_with_a_webhook_is_delivered_signed_and_its_secret_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rx = rt.block_on(Receiver::start(&[]));
    let ca = dir.path().join("receiver-ca.pem");
    std::fs::write(&ca, &rx.ca_pem).unwrap();
    let ca = ca.to_str().unwrap();
    // Without --webhook-allow-private, the receiver on 127.0.0.1 is refused.
    let strict = start_with(&dir.path().join("strict"), &[]);
    strict.job(&["ls"]).ok(); // pins the key (one line saying so)
    let secret = format!("whsec-notify-{:016x}", u64::from(std::process::id()) * 7919);
    let file = dir.path().join("secret");
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    let file = file.to_str().unwrap();
    let hook = ["--webhook", &rx.url, "--webhook-secret-file", file];
    let submit = |wait: bool| {
        let mut a = vec!["submit"];
        a.extend(wait.then_some("--wait"));
        a.extend(hook);
        a.extend(["run1", "copy"]);
        a
    };
    let out = strict.job(&submit(false));
    out.expect_code(1);
    out.one_line_naming(&["webhook", "loopback", "--webhook-allow-private"]);
    assert!(!out.stderr.contains(&secret), "{out:?}");
    // No secret: refused before anything is sent.
    let out = strict.job(&["submit", "--webhook", &rx.url, "run1", "copy"]);
    out.failed();
    out.one_line_naming(&["--webhook-secret-file", "HETCH_WEBHOOK_SECRET"]);
    let missing = dir.path().join("no-such-secret");
    let missing = missing.to_str().unwrap();
    let out = strict.job(&[
        "submit",
        "--webhook",
        &rx.url,
        "--webhook-secret-file",
        missing,
        "run1",
        "copy",
    ]);
    out.failed();
    out.one_line_naming(&[missing]);
    // The secret from the environment is taken too (then the address is refused).
    let mut a = crate::util::service::args(&["job", "--service", &strict.addr]);
    a.extend(crate::util::service::args(&[
        "submit",
        "--webhook",
        &rx.url,
        "run1",
        "copy",
    ]));
    let mut env = strict.env().to_vec();
    env.push(("HETCH_WEBHOOK_SECRET", &secret));
    let out = crate::util::hetch(&a, &env);
    out.expect_code(1);
    out.one_line_naming(&["loopback"]);
    let none = strict.job(&["--json", "ls"]);
    none.ok();
    assert_eq!(none.stdout.trim(), "[]", "nothing was queued");
    drop(strict);

    let svc = start_with(dir.path(), &["--webhook-allow-private", "--webhook-ca", ca]);
    let _w = svc.worker(dir.path(), "w1");
    let out = svc.job(&submit(true));
    out.ok();
    let id = out.stdout.split_whitespace().next().unwrap().to_string();
    wait_for("the delivery", || {
        show(&svc, &id)["webhook"]["delivery"]["state"] == "delivered"
    });
    let job = show(&svc, &id);
    assert_eq!(job["state"], "done", "{job}");
    let got = rx.requests();
    assert_eq!(got.len(), 1, "{got:?}");
    let (req, note) = (
        &got[0],
        serde_json::from_slice::<serde_json::Value>(&got[0].body).unwrap(),
    );
    assert_eq!(
        (note["job"].as_str(), note["state"].as_str()),
        (Some(id.as_str()), Some("done"))
    );
    assert_eq!(note["files_done"], job["files_done"]);
    assert_eq!(note["files_done"], 32, "{note}");
    let sig = &req.headers["x-hetch-signature"];
    assert!(signed_by(secret.as_bytes(), &req.body, sig));
    // The guide's check: openssl over the exact body.
    let body = dir.path().join("body.json");
    std::fs::write(&body, &req.body).unwrap();
    let check = |key: &str| {
        let o = Command::new("openssl")
            .args(["dgst", "-sha256", "-hmac", key, "-r"])
            .arg(&body)
            .output()
            .unwrap();
        format!(
            "sha256={}",
            String::from_utf8_lossy(&o.stdout)
                .split(' ')
                .next()
                .unwrap()
        )
    };
    assert_eq!(&check(&secret), sig);
    assert_ne!(&check("some-other-secret-entirely"), sig);

    // `hetch job show` says where the note went and how, never the secret.
    let human = svc.job(&["show", &id]);
    human.ok();
    assert!(
        human
            .stdout
            .contains(&format!("webhook:      {} (secret set)", rx.url)),
        "{human:?}"
    );
    assert!(
        human
            .stdout
            .contains("delivery:     delivered after 1 attempts"),
        "{human:?}"
    );
    let json = svc.job(&["--json", "show", &id]);
    let ls = svc.job(&["--json", "ls"]);
    for o in [&human, &json, &ls] {
        assert!(
            !o.stdout.contains(&secret) && !o.stderr.contains(&secret),
            "{o:?}"
        );
    }
    // The job's page in a real browser: the webhook and its delivery, not the secret.
    if let Some(b) = crate::util::webdriver::Browser::start(1280, 900) {
        let base = format!("https://{}", svc.addr);
        b.goto(&format!("{base}/login"));
        b.type_into(&b.find("#token"), &svc.token);
        b.click_on("#login");
        b.wait("the jobs page", || b.text_of("#who") == "token");
        b.goto(&format!("{base}/#/jobs/{id}"));
        b.wait("the webhook's fact", || {
            !b.find_all("#job-webhook").is_empty()
        });
        let fact = b.text_of("#job-webhook");
        let want = format!("{} (secret set); delivered after 1 attempts", rx.url);
        assert_eq!(fact, want);
        let page = b.run("return document.documentElement.outerHTML", vec![]);
        assert!(
            !page.to_string().contains(&secret),
            "the secret is on the page"
        );
    }
    let log = svc.proc.stderr_so_far();
    assert!(log.contains("listening on"), "{log}");
    assert!(!log.contains(&secret), "the secret is in the service's log");
    drop(rt);
}
