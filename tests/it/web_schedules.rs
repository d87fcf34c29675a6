//! Recurring mirrors on the web page, in headless Chromium through chromedriver: a
//! schedule made with `hetch job submit --every` is listed with its recurrence, its
//! mirroring, its first run (state and bytes written), and is paused from the page,
//! which the API then says too.

use crate::util;

use util::service::start;
use util::webdriver::Browser;

#[test]
fn a_schedule_is_shown_and_paused_from_the_page() {
    let Some(b) = Browser::start(1280, 900) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    let _worker = svc.worker(dir.path(), "w1");
    let made = svc.job(&[
        "submit",
        "--every",
        "1h",
        "--sync",
        "--max-delete",
        "4",
        "run1",
        "mirror",
    ]);
    made.ok();
    let id = made.stdout.trim().to_string();
    let base = format!("https://{}", svc.addr);
    b.goto(&format!("{base}/login"));
    b.type_into(&b.find("#token"), &svc.token);
    b.click_on("#login");
    b.wait("the jobs page", || b.text_of("#who") == "token");

    b.click_on("#nav-schedules");
    b.wait("the schedule and its first run done", || {
        b.find_all("#schedules .runs .state-done").len() == 1
    });
    let row = b.text_of("#schedules tbody tr");
    for shown in [
        id.as_str(),
        "run1",
        "mirror",
        "every 1 h",
        "at most 4",
        "32 files",
        "435 B written",
    ] {
        assert!(row.contains(shown), "{shown:?} not in {row:?}");
    }
    b.click_on(&format!("#pause-{id}"));
    b.wait("the page to say paused", || {
        !b.find_all(&format!("#paused-{id}")).is_empty()
    });
    assert_eq!(b.text_of("#schedule-result"), format!("{id}: paused"));
    let v = svc.job(&["--json", "schedule", "show", &id]);
    v.ok();
    let v: serde_json::Value = serde_json::from_str(&v.stdout).unwrap();
    assert_eq!(v["paused"], true, "{v}");
    b.click_on(&format!("#resume-{id}"));
    b.wait("the page to say resumed", || {
        b.find_all(&format!("#paused-{id}")).is_empty()
    });
    let v = svc.job(&["--json", "schedule", "show", &id]);
    let v: serde_json::Value = serde_json::from_str(&v.stdout).unwrap();
    assert_eq!(v["paused"], false, "{v}");
}
