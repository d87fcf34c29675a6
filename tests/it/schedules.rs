//! Recurring mirrors end to end: `hetch job submit --every 1s` against a real
//! `hetch service` and `hetch worker`, its runs seen through `hetch job schedule`. A
//! file changed between runs is copied again; unchanged ones are not touched (their
//! ctime, which any write or re-stamping of the times moves, stays put across later
//! runs); pause and rm work from the CLI, and bad recurrences are one line naming the
//! flag's field with a non-zero exit. (Skipped runs, the caps and other users' access:
//! crates/service's `tests/it/schedules.rs`.)

use crate::util;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use util::service::{start, Service};
use util::wait_for;

/// Schedule `id` as `hetch job --json schedule show` gives it.
fn schedule(svc: &Service, id: &str) -> serde_json::Value {
    let out = svc.job(&["--json", "schedule", "show", id]);
    out.ok();
    serde_json::from_str(&out.stdout).unwrap()
}

/// The due times of the runs of `v` that are done.
fn done(v: &serde_json::Value) -> Vec<u64> {
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["state"] == "done")
        .map(|r| r["due"].as_u64().unwrap())
        .collect()
}

fn ctime(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.ctime(), m.ctime_nsec())
}

#[test]
fn a_schedule_every_second_mirrors_a_tree_and_moves_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    let root = dir.path().join("root");
    // The destination exists, so that every run (the first too) lands in mirror/run1.
    std::fs::create_dir_all(root.join("mirror")).unwrap();
    let _w = svc.worker(dir.path(), "w");
    let out = svc.job(&["submit", "--every", "1s", "run1", "mirror"]);
    out.ok();
    let id = out.stdout.trim().to_string();
    assert_eq!(id.len(), 16, "{out:?}");
    wait_for("a first run done", || {
        !done(&schedule(&svc, &id)).is_empty()
    });
    let copy = root.join("mirror/run1/sub");
    assert_eq!(std::fs::read(copy.join("f7")).unwrap(), vec![b'x'; 7]);
    let unchanged = ctime(&copy.join("f5"));

    // A file changed at the source is copied again by a later run.
    std::fs::write(root.join("run1/sub/f7"), b"changed since the first run").unwrap();
    wait_for("the change mirrored", || {
        std::fs::read(copy.join("f7")).unwrap() == b"changed since the first run"
    });
    // Two more runs done after that: the unchanged file was never written again.
    let before = done(&schedule(&svc, &id)).into_iter().max().unwrap();
    wait_for("two more runs", || {
        let later = done(&schedule(&svc, &id));
        later.iter().filter(|&&due| due > before).count() >= 2
    });
    assert_eq!(
        ctime(&copy.join("f5")),
        unchanged,
        "an unchanged file was written again"
    );

    let text = svc.job(&["schedule", "show", &id]);
    text.ok();
    assert!(
        text.stdout.contains("every 1 s") && text.stdout.contains("recent runs:"),
        "{text:?}"
    );
    assert!(text.stdout.contains("done"), "{text:?}");
    let ls = svc.job(&["schedule", "ls"]);
    assert!(ls.stdout.contains(&id), "{ls:?}");
    let p = svc.job(&["schedule", "pause", &id]);
    p.ok();
    assert_eq!(p.stdout.trim(), format!("{id}: paused"));
    svc.job(&["schedule", "rm", &id]).ok();
    let gone = svc.job(&["schedule", "show", &id]);
    assert_ne!(gone.code(), Some(0));
    assert!(
        gone.stderr.contains(&format!("no schedule {id}")),
        "{gone:?}"
    );
}

#[test]
fn bad_recurrences_are_one_line_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    for (flag, value, says) in [
        ("--every", "0s", "every"),
        ("--every", "10y", "every"),
        ("--cron", "* * *", "cron"),
        ("--cron", "0 25 * * *", "cron"),
    ] {
        let out = svc.job(&["submit", flag, value, "run1", "mirror"]);
        assert_ne!(out.code(), Some(0), "{out:?}");
        assert!(out.stderr.contains(says), "{out:?}");
        // One error line (the first connection also says it pinned the key).
        let errors = out.stderr.lines().filter(|l| l.contains("error")).count();
        assert_eq!(errors, 1, "{out:?}");
    }
    let ls = svc.job(&["--json", "schedule", "ls"]);
    assert_eq!(ls.stdout.trim(), "[]", "{ls:?}");
}
