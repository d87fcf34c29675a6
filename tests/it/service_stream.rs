//! Streaming jobs end to end (`hetch job submit --follow`): a real service and real
//! workers follow a file while the test appends to it; the worker holding the
//! stream is killed mid-way and another takes it over, resuming from what the
//! destination verified; the lag from appended to durable is in `hetch job show`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use crate::util;
use util::service::{show, start_with, submit};
use util::wait_for;

/// Appends 64 KiB of a changing pattern to `path` every 20 ms until `stop` is raised.
fn writer(path: std::path::PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        let mut n = 0u8;
        while !stop.load(Relaxed) {
            n = n.wrapping_add(1);
            f.write_all(&vec![n; 64 << 10]).unwrap();
            f.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    })
}

#[test]
fn a_follow_job_streams_a_growing_file_and_survives_its_worker_killed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("inst")).unwrap();
    let file = root.join("inst/run.dat");
    std::fs::write(&file, vec![1u8; 1 << 20]).unwrap();
    let svc = start_with(dir.path(), &["--lease-secs", "2"]);
    svc.job(&["ls"]).ok(); // pins the key
    let mut a = svc.worker(dir.path(), "a");
    // Complete by its marker (the writer never pauses for the idle time); the job
    // ends once nothing new has appeared for that long after.
    let id = submit(
        &svc,
        &[
            "--follow",
            "--idle",
            "3s",
            "--block-size",
            "64K",
            "inst",
            "copy",
        ],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let appending = writer(file.clone(), stop.clone());

    // The stream moves and reports its lag while the file grows.
    let mut seen = serde_json::Value::Null;
    wait_for(
        "a's stream to ship appended bytes and report the lag",
        || {
            seen = show(&svc, &id);
            seen["lag"]["p99_ms"].is_u64() && seen["bytes_live"].as_u64() > Some(2 << 20)
        },
    );
    assert_eq!(seen["state"], "running", "{seen}");
    assert!(
        seen["lag"]["p50_ms"].as_u64() <= seen["lag"]["p99_ms"].as_u64(),
        "{seen}"
    );
    let text = svc.job(&["show", &id]);
    text.ok();
    assert!(
        text.stdout.contains("\nlag:          p50 "),
        "{}",
        text.stdout
    );

    // Its worker dies mid-stream; another takes the stream over once the lease ran
    // out, while the file keeps growing.
    a.kill9();
    let _b = svc.worker(dir.path(), "b");
    wait_for("b to take the stream over", || {
        let v = show(&svc, &id);
        v["units"]["retried"].as_u64() >= Some(1) && v["units"]["leased"] == 1
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    stop.store(true, Relaxed);
    appending.join().unwrap();
    std::fs::write(root.join("inst/run.dat.done"), b"").unwrap();
    svc.job(&["wait", &id]).ok();

    let size = std::fs::metadata(&file).unwrap().len();
    assert_eq!(
        util::hash_file(&root.join("copy/inst/run.dat")),
        util::hash_file(&file)
    );
    assert!(root.join("copy/inst/run.dat.done").exists());
    let v = show(&svc, &id);
    assert_eq!(v["state"], "done", "{v}");
    // What b's run moved (the job counts the run that finished): not what a had
    // already made durable at the destination.
    let by_b = v["bytes_done"].as_u64().unwrap();
    assert!(
        by_b < size - (2 << 20),
        "b moved {by_b} of {size} bytes: {v}"
    );
    util::assert_no_temp_files(&root.join("copy"));
}

#[test]
fn streaming_settings_out_of_bounds_are_refused_with_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start_with(dir.path(), &[]);
    svc.job(&["ls"]).ok(); // pins the key
    for (args, says) in [
        (
            &["--follow", "--poll", "0s", "run1", "c"][..],
            "stream.poll_ms",
        ),
        (
            &["--watch", "--done-suffix", "a/b", "run1", "c"],
            "stream.done_suffix",
        ),
        (&["--follow", "run1", "s3://bucket/x"], "stream:"),
    ] {
        let mut all = vec!["submit"];
        all.extend(args);
        svc.job(&all).expect_code(1).one_line_naming(&[says]);
    }
    svc.job(&["submit", "--follow", "--watch", "run1", "c"])
        .expect_code(2);
    let ls = svc.job(&["--json", "ls"]);
    ls.ok();
    assert_eq!(ls.stdout.trim(), "[]", "nothing queued\n{ls:?}");
}

/// `--watch` follows for ever: files that appear later are shipped while the job
/// runs, and it ends only when cancelled (its worker stops the stream and is free).
#[test]
fn a_watch_job_ships_new_files_until_it_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("drop")).unwrap();
    let svc = start_with(dir.path(), &[]);
    svc.job(&["ls"]).ok(); // pins the key
    let _w = svc.worker(dir.path(), "w");
    let id = submit(
        &svc,
        &[
            "--watch", "--idle", "200ms", "--rescan", "100ms", "drop", "out",
        ],
    );
    wait_for("the stream to run", || {
        show(&svc, &id)["units"]["leased"] == 1
    });
    for i in 0..3 {
        std::fs::write(root.join(format!("drop/f{i}")), vec![i as u8; 300 << 10]).unwrap();
        let shipped = root.join(format!("out/drop/f{i}"));
        wait_for("the new file at the destination", || {
            std::fs::read(&shipped).is_ok_and(|b| b.len() == 300 << 10)
        });
    }
    assert_eq!(show(&svc, &id)["state"], "running");
    svc.job(&["cancel", &id]).ok();
    wait_for("the stream to stop", || {
        let v = show(&svc, &id);
        v["state"] == "cancelled" && v["units"]["leased"] == 0
    });
    // The worker is free for other jobs.
    svc.job(&["submit", "--wait", "run1", "after"]).ok();
}
