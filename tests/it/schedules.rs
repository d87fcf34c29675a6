//! Recurring mirrors end to end: `hetch job submit --every 1s` against a real
//! `hetch service` and `hetch worker`, its runs seen through `hetch job schedule`. A
//! file changed between runs is copied again; unchanged ones are not touched (their
//! ctime, which any write or re-stamping of the times moves, stays put across later
//! runs); pause and rm work from the CLI, and bad recurrences are one line naming the
//! flag's field with a non-zero exit. Mirrors (`--sync`, `--max-delete`), recurring or
//! not: what the source lost is deleted by a worker once the copies are done, links
//! removed and never followed, every run landing in one place and saying the bytes it
//! wrote. (Skipped runs, the caps and other users' access: crates/service's
//! `tests/it/schedules.rs`.)

use crate::util;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use util::service::{start, start_with, Service};
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

/// A service that lets schedules run every second (its default minimum is 60 s).
fn every_second(dir: &Path) -> Service {
    start_with(dir, &["--min-schedule-interval", "1s"])
}

fn ctime(p: &Path) -> (i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (m.ctime(), m.ctime_nsec())
}

#[test]
fn a_schedule_every_second_mirrors_a_tree_and_moves_only_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let svc = every_second(dir.path());
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
        // More often than the service's minimum, 60 s unless its operator says.
        ("--every", "30s", "--min-schedule-interval 60 s"),
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

/// The runs of schedule `v` that ended in state `state`.
fn runs_in<'a>(v: &'a serde_json::Value, state: &str) -> Vec<&'a serde_json::Value> {
    let runs = v["runs"].as_array().unwrap();
    runs.iter().filter(|r| r["state"] == state).collect()
}

/// A recurring mirror (`--sync`) whose destination does not exist yet: every run lands
/// in the same place (`mirror/run1`: a service job always copies *into* its
/// destination, which the first run creates), a run over an unchanged tree writes 0
/// bytes, and a file deleted at the source is deleted at the destination by the next
/// run, while what the destination holds beside the copied tree stays.
#[test]
fn a_mirror_lands_in_one_place_writes_nothing_unchanged_and_deletes_what_the_source_lost() {
    let dir = tempfile::tempdir().unwrap();
    let svc = every_second(dir.path());
    let root = dir.path().join("root");
    let _w = svc.worker(dir.path(), "w");
    let out = svc.job(&["submit", "--every", "1s", "--sync", "run1", "mirror"]);
    out.ok();
    let id = out.stdout.trim().to_string();
    wait_for("a first run done", || {
        !runs_in(&schedule(&svc, &id), "done").is_empty()
    });
    let copy = root.join("mirror/run1/sub");
    assert_eq!(std::fs::read(copy.join("f7")).unwrap(), vec![b'x'; 7]);
    // Beside the copied tree: not the mirror's to delete.
    std::fs::write(root.join("mirror/notes"), b"mine").unwrap();
    let first = schedule(&svc, &id);
    let first_due = runs_in(&first, "done")[0]["due"].as_u64().unwrap();
    // Files f0..f29 of 0..29 bytes: 435 bytes, all written by the first run.
    let first_run = runs_in(&first, "done")[0].clone();
    assert_eq!(first_run["bytes_written"], 435, "{first_run}");
    assert_eq!(first_run["bytes_done"], 435, "{first_run}");

    // The next run finds every file in place: done with all its bytes, none written.
    let mut later = serde_json::Value::Null;
    wait_for("a second run done", || {
        let v = schedule(&svc, &id);
        let found = runs_in(&v, "done")
            .into_iter()
            .find(|r| r["due"].as_u64().unwrap() > first_due)
            .cloned();
        found.map(|r| later = r).is_some()
    });
    assert_eq!(
        (&later["bytes_done"], &later["bytes_written"]),
        (&serde_json::json!(435), &serde_json::json!(0)),
        "{later}"
    );
    assert!(
        !root.join("mirror/run1/run1").exists(),
        "a later run nested"
    );
    assert!(
        !root.join("mirror/sub").exists(),
        "a later run landed elsewhere"
    );
    let text = svc.job(&["schedule", "show", &id]);
    assert!(text.stdout.contains("435 B, 0 B written"), "{text:?}");

    // A file gone at the source goes at the destination by the next run.
    std::fs::remove_file(root.join("run1/sub/f3")).unwrap();
    wait_for("f3 deleted at the destination", || {
        !copy.join("f3").exists()
    });
    assert!(copy.join("f4").exists());
    assert_eq!(std::fs::read(root.join("mirror/notes")).unwrap(), b"mine");
    svc.job(&["schedule", "rm", &id]).ok();
}

/// `--max-delete 1` with two entries to delete: that run fails with the engine's one
/// line saying how many, and deletes neither.
#[test]
fn a_run_over_max_delete_fails_saying_how_many_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let svc = every_second(dir.path());
    let root = dir.path().join("root");
    let _w = svc.worker(dir.path(), "w");
    let out = svc.job(&[
        "submit",
        "--every",
        "1s",
        "--sync",
        "--max-delete",
        "1",
        "run1",
        "mirror",
    ]);
    out.ok();
    let id = out.stdout.trim().to_string();
    wait_for("a first run done", || {
        !runs_in(&schedule(&svc, &id), "done").is_empty()
    });
    for f in ["f1", "f2"] {
        std::fs::remove_file(root.join("run1/sub").join(f)).unwrap();
    }
    let mut failed = serde_json::Value::Null;
    wait_for("a run failed", || {
        let v = schedule(&svc, &id);
        let found = runs_in(&v, "failed").first().map(|r| (*r).clone());
        found.map(|r| failed = r).is_some()
    });
    svc.job(&["schedule", "pause", &id]).ok();
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("2 entries would be deleted, more than --max-delete 1")
            && !error.contains('\n'),
        "{failed}"
    );
    let copy = root.join("mirror/run1/sub");
    assert!(copy.join("f1").exists() && copy.join("f2").exists());
    let job = failed["job"].as_str().unwrap();
    let show = svc.job(&["show", job]);
    assert!(show.stdout.contains("--max-delete 1"), "{show:?}");
}

/// A plain (not recurring) `hetch job submit --sync` mirrors too: extra entries below
/// the copied tree go, a symlink there pointing outside the root is removed as a link
/// (what it points to is untouched), and a second job over the unchanged tree writes
/// nothing.
#[test]
fn a_plain_sync_job_deletes_and_removes_a_link_out_without_following_it() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), b"keep me").unwrap();
    let copied = root.join("mirror/run1");
    std::fs::create_dir_all(copied.join("sub/old")).unwrap();
    std::fs::write(copied.join("sub/old/stale"), b"stale").unwrap();
    std::fs::write(copied.join("extra"), b"extra").unwrap();
    std::os::unix::fs::symlink(&outside, copied.join("sub/out")).unwrap();
    std::os::unix::fs::symlink(outside.join("precious"), copied.join("link")).unwrap();
    let _w = svc.worker(dir.path(), "w");
    let out = svc.job(&["submit", "--sync", "--wait", "run1", "mirror"]);
    out.ok();
    let id = out.stdout.lines().next().unwrap().trim().to_string();
    for gone in ["extra", "link", "sub/out", "sub/old"] {
        assert!(
            std::fs::symlink_metadata(copied.join(gone)).is_err(),
            "{gone} was not deleted"
        );
    }
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep me");
    assert_eq!(std::fs::read(copied.join("sub/f9")).unwrap(), vec![b'x'; 9]);
    let v = util::service::show(&svc, &id);
    assert_eq!(
        (&v["state"], &v["bytes_written"]),
        (&"done".into(), &435.into())
    );
    assert_eq!(v["spec"]["options"]["sync"], true, "{v}");

    let again = svc.job(&["submit", "--sync", "--wait", "run1", "mirror"]);
    again.ok();
    let id = again.stdout.lines().next().unwrap().trim().to_string();
    let v = util::service::show(&svc, &id);
    assert_eq!(
        (&v["state"], &v["bytes_written"]),
        (&"done".into(), &0.into())
    );
    assert_eq!(v["bytes_done"], 435, "{v}");
}

/// What `--sync` cannot mean is refused at submission in one line naming it.
#[test]
fn sync_is_refused_where_it_cannot_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    let no_sync = svc.job(&["submit", "--max-delete", "3", "run1", "mirror"]);
    assert_eq!(no_sync.code(), Some(2), "{no_sync:?}");
    assert!(no_sync.stderr.contains("--sync"), "{no_sync:?}");
    let streaming = svc.job(&["submit", "--sync", "--follow", "run1", "mirror"]);
    assert_ne!(streaming.code(), Some(0), "{streaming:?}");
    assert!(
        streaming
            .stderr
            .contains("sync: a streaming job does not mirror"),
        "{streaming:?}"
    );
    let relay = svc.job(&["submit", "--sync", "hetch://h:1/a", "hetch://h2:1/b"]);
    assert_ne!(relay.code(), Some(0), "{relay:?}");
    assert!(
        relay.stderr.contains("sync: a copy between two servers"),
        "{relay:?}"
    );
}

/// A mirror into a `hetch serve` node: the deletion goes through the protocol's own
/// (the node removes what its client's session did not announce, confined to its
/// served tree), a link there pointing out of it removed, not followed.
#[test]
fn a_sync_job_to_a_node_deletes_there_through_the_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    let node = util::Server::start(&t.join("d-root"), &t.join("d-state"));
    let svc = start(t);
    let copied = node.root.join("copy/run1");
    std::fs::create_dir_all(copied.join("sub")).unwrap();
    std::fs::write(copied.join("sub/stale"), b"stale").unwrap();
    let outside = t.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), b"keep me").unwrap();
    std::os::unix::fs::symlink(&outside, copied.join("out")).unwrap();
    let known = t.join("known_hosts");
    std::fs::write(&known, format!("{} {}\n", node.addr, node.fingerprint)).unwrap();
    let (known, token) = (known.to_str().unwrap(), node.token_path.to_str().unwrap());
    let _w = svc.worker_with(t, "w", &["--known-hosts", known, "--token-file", token]);
    let out = svc.job(&["submit", "--sync", "--wait", "run1", &node.url("copy")]);
    out.ok();
    assert!(std::fs::symlink_metadata(copied.join("sub/stale")).is_err());
    assert!(std::fs::symlink_metadata(copied.join("out")).is_err());
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep me");
    assert_eq!(std::fs::read(copied.join("sub/f9")).unwrap(), vec![b'x'; 9]);
}
