//! The web interface in a real browser: `hetch service` (the real binary, over its
//! TLS) with a real worker, driven in headless Chromium through chromedriver.
//!
//! One test walks what a person does: is refused without logging in, logs in,
//! submits a job through the form (a wrong field first), watches it reach 100%, sees a
//! failed unit's error and retries it, cancels a running job, and moves around with
//! the keyboard, on a phone-sized screen and in dark mode. File names with markup,
//! quotes and unicode are shown as text, a job from the form equals one from
//! `hetch job submit` with the command the page shows, and another site cannot act
//! through the logged-in browser. Screenshots go to target/web-screenshots/ (the user
//! guide's, in docs/guide/src/images/, are copies).

use crate::util;

use std::path::{Path, PathBuf};

use serde_json::Value;
use util::service::{show, start, submit, Service};
use util::webdriver::Browser;

/// Where the screenshots go.
fn shots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/web-screenshots")
}

/// A name an HTML page would run if it took it as markup.
const HOSTILE: &str = "<img src=x onerror=alert(1)>.txt";
/// Quotes and unicode.
const QUOTED: &str = "quote\"s 'and' ünïcode.txt";

fn tree(root: &Path) {
    let web = root.join("web");
    std::fs::create_dir_all(&web).unwrap();
    std::fs::write(web.join(HOSTILE), b"one").unwrap();
    std::fs::write(web.join(QUOTED), b"two").unwrap();
    std::fs::write(web.join("plain.dat"), vec![7u8; 300_000]).unwrap();
    let big = root.join("big");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::write(big.join("slow.bin"), vec![1u8; 48 << 20]).unwrap();
}

/// The job page's state badge says `state`.
fn wait_state(b: &Browser, state: &str) {
    b.wait(&format!("the job to be {state}"), || {
        b.text_of(".toolbar .badge") == state
    });
}

/// The id of the job whose page is open.
fn job_id(b: &Browser) -> String {
    let url = b.url();
    url.rsplit('/').next().unwrap().to_string()
}

fn spec_of(svc: &Service, id: &str) -> Value {
    show(svc, id)["spec"].clone()
}

#[test]
fn a_person_logs_in_submits_watches_retries_and_cancels_jobs_in_a_real_browser() {
    let Some(b) = Browser::start(1280, 900) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    tree(&root);
    let svc = start(dir.path());
    svc.job(&["ls"]).ok(); // pins the key for the CLI
    let _worker = svc.worker(dir.path(), "w1");
    let base = format!("https://{}", svc.addr);

    // Nothing without logging in: the page sends the browser to the login form, and
    // the API and the event stream answer 401.
    b.goto(&format!("{base}/"));
    b.wait("the login form", || b.url().ends_with("/login"));
    for path in ["/api/jobs", "/api/events", "/api/nodes"] {
        b.goto(&format!("{base}{path}"));
        let body = b.run("return document.documentElement.outerHTML", vec![]);
        assert!(body.to_string().contains("missing token"), "{path}: {body}");
    }

    // A wrong token is refused on the form; the right one lets in.
    b.goto(&format!("{base}/login"));
    b.type_into(&b.find("#token"), "not-the-token-at-all-0123456789");
    b.click_on("#login");
    b.find("#login-error");
    let refused = b.text_of("#login-error");
    assert!(refused.contains("wrong token"), "{refused}");
    b.type_into(&b.find("#token"), &svc.token);
    b.click_on("#login");
    b.wait("the jobs page", || b.text_of("#who") == "token");

    // Submit through the form: a source outside the root is refused next to its
    // field, and nothing is queued.
    b.click_on("#nav-submit");
    b.type_into(&b.find("#f-sources"), "../etc");
    b.type_into(&b.find("#f-dest"), "out-web");
    b.click_on("#submit");
    b.wait("the source's error", || {
        b.text_of("#e-sources").contains("escapes")
    });
    assert_eq!(
        b.run("return document.activeElement.id", vec![]),
        "f-sources"
    );
    assert!(svc.job(&["ls"]).stdout.trim().lines().count() <= 1);

    // Then a good one, with options; the page shows the same job as a command.
    b.type_into(&b.find("#f-sources"), "web");
    b.run(
        "document.getElementById('f-checksum').value = 'sha256'; \
         document.getElementById('f-streams').value = '3'; \
         document.getElementById('f-priority').value = '7'; \
         document.getElementById('f-rate_limit').value = '2G'; \
         document.getElementById('f-no_clobber').checked = true; \
         document.getElementById('submit-form').dispatchEvent(new Event('input'));",
        vec![],
    );
    let command = b.text_of("#command");
    assert_eq!(
        command,
        "hetch job submit --checksum sha256 --streams 3 --no-clobber --priority 7 \
         --rate-limit 2000000000 web out-web"
    );
    b.click_on("#submit");
    b.wait("the new job's page", || b.url().contains("#/jobs/"));
    let from_page = job_id(&b);
    wait_state(&b, "done");
    b.wait("100%", || b.text_of(".bar .pct") == "100%");
    b.wait("the file list", || {
        !b.find_all("#files tbody tr").is_empty()
    });
    // Names with markup, quotes and unicode are text: no element came of them.
    let files = b.text_of("#files");
    assert!(files.contains(HOSTILE) && files.contains(QUOTED), "{files}");
    let injected = b.run(
        "return document.querySelectorAll('main img').length",
        vec![],
    );
    assert_eq!(injected, 0);
    // Every part of the page is shown as what it is.
    let page = b.text_of("main");
    assert!(
        page.contains("Sources\nweb") || page.contains("Sources\tweb"),
        "{page}"
    );
    assert!(
        !page.contains("[object") && !page.contains("null"),
        "{page}"
    );

    // The command the page showed submits the same job.
    let words: Vec<&str> = command.split(' ').skip(2).collect();
    let from_cli = submit(&svc, &words[1..]);
    assert_eq!(spec_of(&svc, &from_page), spec_of(&svc, &from_cli));

    // A job that fails: its destination leads out of the root through a symlink.
    // The page shows the failed unit's error; once the way is fixed, Retry runs it.
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    let failing = submit(&svc, &["web", "escape/in"]);
    b.goto(&format!("{base}/#/jobs/{failing}"));
    wait_state(&b, "failed");
    b.wait("the failed unit", || {
        !b.find_all("#failed tbody tr").is_empty()
    });
    let error = b.text_of("#failed tbody tr");
    assert!(error.contains("escape"), "{error}");
    std::fs::remove_file(root.join("escape")).unwrap();
    std::fs::create_dir_all(root.join("escape")).unwrap();
    b.click_on("#retry");
    wait_state(&b, "done");
    let landed: Vec<_> = walk(&root.join("escape"));
    assert!(
        root.join("escape/in/web").join(QUOTED).exists(),
        "{landed:?}"
    );

    // Cancel a running job (a rate limit keeps it going), from its page, after its
    // throughput chart has a few samples.
    let slow = submit(&svc, &["--rate-limit", "4M", "big", "out-big"]);
    b.goto(&format!("{base}/#/jobs/{slow}"));
    wait_state(&b, "running");
    b.wait("the throughput chart with six points", || {
        let points = b.run(
            "const p = document.querySelector('#chart polyline'); \
             return p ? p.getAttribute('points').split(' ').length : 0",
            vec![],
        );
        points.as_u64() >= Some(6)
    });
    b.run("window.scrollTo(0, 0)", vec![]);
    b.screenshot(&shots().join("job.png"));
    b.goto(&format!("{base}/#/jobs"));
    b.wait("four jobs listed", || {
        b.find_all("#jobs tbody tr").len() == 4
    });
    b.screenshot(&shots().join("jobs.png"));
    // The keyboard alone reaches a job, while the list moves: Tab to a job's link,
    // which keeps the focus through the next snapshots, and Enter opens it.
    let mut on_link = false;
    for _ in 0..40 {
        b.press("\u{E004}");
        let class = b.run("return document.activeElement.className", vec![]);
        if class == "job-link" {
            on_link = true;
            break;
        }
    }
    assert!(on_link, "Tab never reached a job's link");
    let focused = b.run("return document.activeElement.textContent", vec![]);
    // Two snapshots later (each rebuilds the rows), the focus is still on that link.
    b.run(
        "window.rebuilt = 0; \
         new MutationObserver(() => window.rebuilt++) \
           .observe(document.querySelector('#jobs tbody'), { childList: true }); \
         return 0",
        vec![],
    );
    b.wait("the rows rebuilt twice", || {
        b.run("return window.rebuilt", vec![]).as_u64() >= Some(2)
    });
    let still = b.run("return document.activeElement.textContent", vec![]);
    assert_eq!(
        focused, still,
        "the focus left the job's link as the list moved"
    );
    b.press("\u{E007}");
    b.wait("a job's page by keyboard", || b.url().contains("#/jobs/"));
    b.goto(&format!("{base}/#/jobs/{slow}"));
    b.click_on("#cancel");
    wait_state(&b, "cancelled");
    assert_eq!(show(&svc, &slow)["state"], "cancelled");

    // Nodes: the worker, alive, with its host checks.
    b.goto(&format!("{base}/#/nodes"));
    b.wait("the worker", || b.text_of("#nodes").contains("w1"));
    assert!(b.text_of("#nodes").contains("alive"));

    // A phone's screen: one column, nothing wider than the screen.
    b.resize(390, 844);
    b.goto(&format!("{base}/#/jobs"));
    b.wait("the jobs", || b.find_all("#jobs tbody tr").len() == 4);
    let fits = b.run(
        "return document.documentElement.scrollWidth <= window.innerWidth",
        vec![],
    );
    assert_eq!(fits, true);
    b.screenshot(&shots().join("jobs-phone.png"));

    // Dark mode: the page follows the system's setting.
    b.resize(1280, 900);
    b.cdp(
        "Emulation.setEmulatedMedia",
        serde_json::json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
    );
    b.goto(&format!("{base}/#/jobs/{from_page}"));
    wait_state(&b, "done");
    let bg = b.run(
        "return getComputedStyle(document.body).backgroundColor",
        vec![],
    );
    assert_eq!(bg, "rgb(19, 21, 23)");
    b.screenshot(&shots().join("job-dark.png"));

    // The page's own requests need its CSRF token: the same fetch without it is
    // refused, and nothing is queued.
    let before = svc.job(&["ls"]).stdout.lines().count();
    let status = b.run(
        "return fetch('/api/jobs', {method: 'POST', headers: {'Content-Type': 'application/json'}, \
           body: JSON.stringify({sources: ['web'], dest: 'csrf'})}).then(r => r.status)",
        vec![],
    );
    assert_eq!(status, 403);
    // Another site's form posting to the service: the browser does not send the
    // session cookie across sites, and the service refuses it.
    b.goto(&format!(
        "data:text/html,<form id=f method=post enctype=text/plain action='{base}/api/jobs'>\
         <input name='{{\"sources\":[\"web\"],\"dest\":\"evil\",\"x\":\"' value='\"}}'></form>\
         <script>document.getElementById('f').submit()</script>"
    ));
    b.wait("the other site's post to land", || {
        b.url().starts_with(&base)
    });
    let answer = b.text_of("body");
    assert!(answer.contains("missing token"), "{answer}");
    assert_eq!(svc.job(&["ls"]).stdout.lines().count(), before);

    // Logging out ends the session.
    b.goto(&format!("{base}/"));
    b.click_on("#logout");
    b.wait("the login form", || b.url().ends_with("/login"));
    b.goto(&format!("{base}/api/jobs"));
    assert!(b.text_of("body").contains("missing token"));
}

/// Every path below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path());
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        }
    }
    out
}
