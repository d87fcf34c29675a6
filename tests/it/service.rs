//! `hetch service` and `hetch job` end to end: the real binary as the service (on
//! SQLite, over HTTPS on 127.0.0.1) and as its client: submit, ls, show, cancel, wait,
//! retry, with the client pinning the service's key on first use; bad input gets one
//! line naming what is wrong, a non-zero exit code, and nothing queued.
//! (The API itself, on SQLite and PostgreSQL, is tested in crates/service.)

use crate::util;

use std::ffi::OsString;
use std::path::Path;

use util::service::{
    args, free_port, launch, printed_after, show, start, start_with, submit, Service,
    SHORT_LEASES_SMALL_RANGES,
};
use util::{hetch, spawn, wait_for, Running};

#[test]
fn jobs_are_submitted_listed_shown_cancelled_waited_for_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    let out = svc.job(&[
        "submit",
        "--verify",
        "written",
        "--priority",
        "-3",
        "run1",
        "hetch://127.0.0.1:9/in",
    ]);
    out.ok();
    assert!(
        out.stderr.contains("trusting its key"),
        "first use pins the key\n{out:?}"
    );
    let id = out.stdout.trim().to_string();
    assert_eq!(id.len(), 16, "{out:?}");
    wait_for("planning", || {
        let show = svc.job(&["--json", "show", &id]);
        show.ok();
        show.stdout.contains("\"queued\"")
    });
    let show = svc.job(&["--json", "show", &id]);
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(
        (v["files"].as_u64(), v["spec"]["priority"].as_i64()),
        (Some(32), Some(-3))
    );
    assert_eq!(v["spec"]["options"]["verify"], "written");
    let ls = svc.job(&["ls"]);
    ls.ok();
    assert!(
        ls.stdout.contains(&id) && ls.stdout.contains("queued"),
        "{ls:?}"
    );
    let human = svc.job(&["show", &id]);
    assert!(human.stdout.contains("files:        0 of 32"), "{human:?}");

    svc.job(&["cancel", &id]).ok();
    // Waiting on a cancelled job ends at once, with exit code 1.
    let w = svc.job(&["wait", &id]);
    w.expect_code(1);
    assert!(w.stdout.contains("cancelled"), "{w:?}");
    let again = svc.job(&["cancel", &id]);
    again.expect_code(1);
    again.one_line_naming(&[&id, "already ended"]);
    let r = svc.job(&["retry", &id]);
    r.ok();
    assert!(r.stdout.contains("queued"), "{r:?}");
}

#[test]
fn bad_jobs_and_bad_callers_get_one_line_and_nothing_is_queued() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    svc.job(&["ls"]).ok(); // pins the key (one line saying so)
    svc.job(&["submit", "../etc", "x"])
        .expect_code(1)
        .one_line_naming(&["../etc", "escapes"]);
    svc.job(&["submit", "missing", "x"])
        .expect_code(1)
        .one_line_naming(&["missing"]);
    // Units larger than a worker reads in one call are refused at start.
    let big = hetch(
        &args(&["service", "--root", "/", "--batch-files", "10001"]),
        &[],
    );
    assert!(
        !big.status.success() && big.stderr.contains("10001"),
        "{big:?}"
    );
    svc.job(&["submit", "--verify", "maybe", "run1", "x"])
        .expect_code(1)
        .one_line_naming(&["maybe"]);
    svc.job(&["show", "0123456789abcdef"])
        .expect_code(1)
        .one_line_naming(&["no job 0123456789abcdef"]);
    svc.job(&["show", "../../etc"])
        .expect_code(1)
        .one_line_naming(&["not a job id"]);
    let mut all = args(&["job", "--service", &svc.addr, "ls"]);
    let wrong_token = ("HETCH_TOKEN", "0123456789abcdef0123456789abcdef");
    let wrong = hetch(&all, &[wrong_token, ("HETCH_CONFIG_DIR", &svc.config)]);
    wrong.expect_code(1).one_line_naming(&[&svc.addr, "token"]);
    all.truncate(3);
    all.extend(args(&["--json", "ls"]));
    let ls = hetch(&all, &svc.env());
    ls.ok();
    assert_eq!(ls.stdout.trim(), "[]", "nothing queued\n{ls:?}");
    // A service presenting another key than the one expected is refused.
    let zeros = format!("sha256:{}", "00".repeat(32));
    let pinned = args(&["job", "--service", &svc.addr, "--fingerprint", &zeros, "ls"]);
    let other = hetch(&pinned, &svc.env());
    other.expect_code(1).one_line_naming(&[&svc.addr]);
    assert!(!other.stdout.contains('['), "no answer read\n{other:?}");
    // A service that is not there: one line naming it, and its own exit code.
    let nobody = hetch(
        &args(&["job", "--service", "127.0.0.1:9", "ls"]),
        &svc.env(),
    );
    nobody.expect_code(4).one_line_naming(&["127.0.0.1:9"]);
}

/// Workers have a token of their own (the state directory's `worker-token`, which
/// the service names at start): a worker holding it runs units, and it opens nothing
/// else: no listing or submission of jobs (nor the web interface: see the service's
/// own tests).
#[test]
fn the_workers_token_runs_units_and_opens_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let svc = start(dir.path());
    svc.job(&["ls"]).ok();
    assert_ne!(svc.worker_token, svc.token);
    let said = svc.proc.stderr_so_far();
    assert!(said.contains("workers' token in "), "{said}");
    for a in [
        &["ls"][..],
        &["submit", "run1", "x"],
        &["show", "0123456789abcdef"],
    ] {
        job_as(&svc, &svc.worker_token, a)
            .expect_code(1)
            .one_line_naming(&[&svc.addr, "workers' token"]);
    }
    let id = submit(&svc, &["run1", "copy"]);
    let _w = svc.worker(dir.path(), "w1");
    svc.job(&["wait", &id]).ok();
    assert_all_done(&svc, &id);
    util::assert_same_tree(
        &dir.path().join("root/run1"),
        &dir.path().join("root/copy/run1"),
    );
}

/// A tree of `n` files of 40 KiB in a few directories, plus an empty directory and a
/// symlink, under `root/name`.
fn big_tree(root: &Path, name: &str, n: usize) {
    for i in 0..n {
        let d = root.join(format!("{name}/d{}", i % 4));
        std::fs::create_dir_all(&d).unwrap();
        let data: Vec<u8> = (0..40 * 1024).map(|j| (i * 7 + j * 13) as u8).collect();
        std::fs::write(d.join(format!("f{i}")), data).unwrap();
    }
    std::fs::create_dir_all(root.join(format!("{name}/empty"))).unwrap();
    std::os::unix::fs::symlink("d0/f0", root.join(format!("{name}/link"))).unwrap();
}

#[test]
fn workers_run_a_job_and_finish_the_units_of_a_worker_killed_mid_job() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    big_tree(&root, "data", 120);
    let svc = start_with(dir.path(), &["--lease-secs", "2", "--batch-files", "10"]);
    svc.job(&["ls"]).ok(); // pins the key

    // Two workers share a job; it ends done and the copy is identical.
    let _a = svc.worker(dir.path(), "a");
    let _b = svc.worker(dir.path(), "b");
    let out = svc.job(&["submit", "--wait", "data", "copy"]);
    out.ok();
    util::assert_same_tree(&root.join("data"), &root.join("copy/data"));
    drop((_a, _b));

    // One worker, slowed down, is killed while it holds units; another finishes
    // them once their leases run out, and the copy is identical, with nothing half
    // done under a final name.
    let mut c = svc.worker(dir.path(), "c");
    let id = svc.job(&["submit", "--rate-limit", "2M", "data", "copy2"]);
    id.ok();
    let id = id.stdout.trim().to_string();
    wait_for("c to hold units", || {
        let show = svc.job(&["--json", "show", &id]);
        let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
        v["units"]["leased"].as_u64().unwrap_or(0) > 0
    });
    c.kill9();
    let _d = svc.worker(dir.path(), "d");
    let w = svc.job(&["wait", &id]);
    w.ok();
    util::assert_same_tree(&root.join("data"), &root.join("copy2/data"));
    let show = svc.job(&["--json", "show", &id]);
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["files_done"].as_u64(), v["files"].as_u64(), "{v}");
}

/// A large file moved whole by one unit: while that unit runs, its worker's
/// heartbeats carry its bytes so far, so `hetch job show` gives the job's bytes, rate
/// and time left moving before any unit ends (and never past the job's size).
#[test]
fn a_large_unit_shows_its_bytes_rate_and_time_left_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("one")).unwrap();
    std::fs::write(root.join("one/big.bin"), vec![7u8; 48 << 20]).unwrap();
    let svc = start(dir.path());
    svc.job(&["ls"]).ok(); // pins the key
    let _w = svc.worker(dir.path(), "w");
    let id = submit(&svc, &["--rate-limit", "4M", "one", "copy"]);
    let mut seen = serde_json::Value::Null;
    wait_for("the running unit's bytes, rate and time left", || {
        seen = show(&svc, &id);
        seen["rate"].as_u64() > Some(0) && seen["eta_s"].as_u64() > Some(0)
    });
    let (live, done, size) = (
        seen["bytes_live"].as_u64().unwrap(),
        seen["bytes_done"].as_u64().unwrap(),
        seen["bytes"].as_u64().unwrap(),
    );
    assert_eq!(seen["units"]["done"], 0, "no unit has ended yet: {seen}");
    assert!(done < live && live < size, "{seen}");
    let text = svc.job(&["show", &id]);
    text.ok();
    assert!(
        text.stdout.contains("of it in units still running)"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("\nrate:"), "{}", text.stdout);
    assert!(text.stdout.contains("/s, "), "{}", text.stdout);
    svc.job(&["cancel", &id]).ok();
}

/// A service that cuts files above 1 MiB into ranges of 256 KiB, with batches of 8.
fn start_splitting(dir: &Path) -> Service {
    let split = ["--split-size", "1M", "--range-size", "256K"];
    start_with(dir, &[&split[..], &["--batch-files", "8"]].concat())
}

/// Job `id` as `hetch job --json show` gives it.
fn leased(svc: &Service, id: &str) -> u64 {
    show(svc, id)["units"]["leased"].as_u64().unwrap_or(0)
}

/// The job is done with every file of its listing moved.
fn assert_all_done(svc: &Service, id: &str) {
    let v = show(svc, id);
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(v["files_done"].as_u64(), v["files"].as_u64(), "{v}");
}

/// The service is killed (-9) while a worker holds units of a job. Started again on
/// the same database, state and address, it hands out again what the worker could
/// not report (the worker, cut off for longer than a lease, stops those units), and
/// the job completes with an identical copy.
#[test]
fn a_service_killed_mid_job_is_started_again_and_the_job_completes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    big_tree(&root, "data", 120);
    let listen = format!("127.0.0.1:{}", free_port());
    let extra = ["--lease-secs", "2", "--batch-files", "10"];
    let mut svc = launch(dir.path(), &listen, &extra);
    svc.job(&["ls"]).ok(); // pins the key
    let w = svc.worker_with(dir.path(), "w", &["--metrics", "127.0.0.1:0"]);
    let metrics = metrics_addr(&w);
    let id = submit(&svc, &["--rate-limit", "1M", "data", "copy"]);
    wait_for("w to hold units", || leased(&svc, &id) > 0);
    svc.proc.kill9();
    wait_for("w to find the service gone", || {
        w.stderr_so_far().contains("hetch worker w: ")
    });
    // Its metrics say so.
    wait_for("w's metrics to show the service unreachable", || {
        let (m, _) = util::scrape(&metrics);
        m.value("hetch_worker_service_unreachable", &[]) == 1
    });
    let svc = launch(dir.path(), &listen, &extra);
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("data"), &root.join("copy/data"));
    assert_all_done(&svc, &id);
    let (m, body) = util::scrape(&metrics);
    assert!(
        m.sum("hetch_worker_service_calls_failed_total") >= 1,
        "{body}"
    );
    assert_eq!(
        m.value("hetch_worker_service_unreachable", &[]),
        0,
        "{body}"
    );
}

/// The metrics address a worker started with `--metrics` printed.
fn metrics_addr(w: &Running) -> String {
    let line = printed_after(w, "metrics on http://");
    match line.strip_suffix("/metrics") {
        Some(addr) => addr.to_string(),
        None => panic!("no metrics address in {line:?}"),
    }
}

/// Two service instances share one PostgreSQL (and one state directory, as the
/// nodes of a cluster share their configuration), each with a worker of its own: a
/// job submitted to one is run and waited for through the other. Then one instance
/// is killed (-9) while its worker holds units: that worker, cut off, stops them
/// before its leases run out, the other instance voids the leases, and its worker
/// finishes the job: both copies identical.
#[test]
#[ignore = "integration: needs PostgreSQL (bash test.sh runs it)"]
fn two_services_on_one_postgres_share_jobs_and_outlive_one_killed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    big_tree(&root, "data", 120);
    let url = hetch_testkit::emulators::Emulator::shared_postgres()
        .create_database("two_services")
        .expect("create database");
    let extra = ["--db", &url, "--lease-secs", "2", "--batch-files", "10"];
    let mut a = start_with(dir.path(), &extra);
    let b = start_with(dir.path(), &extra);
    a.job(&["ls"]).ok(); // pins the key (the same for both)
    b.job(&["ls"]).ok();
    let wa = a.worker_with(dir.path(), "wa", &["--metrics", "127.0.0.1:0"]);
    let wa_metrics = metrics_addr(&wa);
    let wb = b.worker(dir.path(), "wb");
    let id = submit(&a, &["data", "copy"]);
    b.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("data"), &root.join("copy/data"));
    assert_all_done(&a, &id);
    drop(wb);

    // Only A's worker is there when a slow job starts (a unit takes longer than a
    // lease); A is killed while it works.
    big_tree(&root, "slow", 24);
    let id = submit(&a, &["--rate-limit", "100K", "slow", "copy2"]);
    // (A unit that has not yet had its listing rows when A dies asks again until its
    // lease stops it: it ends stopped too, not failed.)
    wait_for("wa to hold units", || leased(&b, &id) > 0);
    a.proc.kill9();
    let _wb = b.worker(dir.path(), "wb2");
    wait_for("wa to stop the units whose leases it cannot keep", || {
        wa.stderr_so_far().contains("stopping unit")
    });
    // Its metrics count them as stopped once they end.
    wait_for("wa's metrics to count a unit stopped", || {
        let (m, _) = util::scrape(&wa_metrics);
        let stopped = [("kind", "files"), ("outcome", "stopped")];
        m.value("hetch_worker_units_ended_total", &stopped) >= 1
    });
    b.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("slow"), &root.join("copy2/slow"));
    assert_all_done(&b, &id);
    drop(wa);
}

/// A job whose tree holds files larger than --split-size: each is cut into block
/// ranges that three workers move at once into one part file, and committed once the
/// ranges are done (checked whole from their records); the copy is identical, with no
/// range's temporary file left.
#[test]
fn large_files_are_moved_in_ranges_by_three_workers_and_committed_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    big_tree(&root, "mixed", 20);
    let big = |n: usize, salt: u8| -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31) ^ salt ^ (i >> 12) as u8)
            .collect()
    };
    std::fs::write(root.join("mixed/d1/big.bin"), big((3 << 20) + 123, 1)).unwrap();
    std::fs::write(root.join("mixed/big2.bin"), big(2 << 20, 2)).unwrap();
    let svc = start_splitting(dir.path());
    svc.job(&["ls"]).ok(); // pins the key
    let workers: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| svc.worker(dir.path(), n))
        .collect();
    let out = svc.job(&["submit", "--wait", "--block-size", "64K", "mixed", "copy"]);
    out.ok();
    drop(workers);
    util::assert_same_tree(&root.join("mixed"), &root.join("copy/mixed"));
    let id = out.stdout.lines().next().unwrap().trim();
    let show = svc.job(&["--json", "show", id]);
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["files_done"].as_u64(), v["files"].as_u64(), "{v}");
    // 13 + 8 ranges and two commits besides the batches of the other entries.
    let units: u64 = v["units"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(state, _)| *state != "retried")
        .filter_map(|(_, n)| n.as_u64())
        .sum();
    assert!(units >= 23, "the large files were not split: {v}");
}

/// `hetch worker --metrics`, read by a real Prometheus text-format parser: while a
/// job runs, its units are shown under its id; once it is done, the worker's files and
/// bytes equal the job's, every unit ended done by kind, nothing runs, the job's series
/// are gone, and no name from the job's tree is in the exposition.
#[test]
fn a_workers_metrics_count_its_units_and_equal_the_jobs_totals() {
    const MARKER: &str = "zq-named-by-the-jobs-owner";
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    big_tree(&root, "data", 20);
    std::fs::create_dir_all(root.join(format!("data/{MARKER}\"}} 1"))).unwrap();
    let big: Vec<u8> = (0..(5 << 19) + 77)
        .map(|i: usize| (i % 251) as u8)
        .collect();
    std::fs::write(root.join(format!("data/d1/{MARKER}.bin")), big).unwrap();
    let svc = start_splitting(dir.path());
    svc.job(&["ls"]).ok(); // pins the key
    let w = svc.worker_with(dir.path(), "m", &["--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&w);
    let (m, _) = util::scrape(&addr);
    assert_eq!(m.value("hetch_worker_files_total", &[]), 0);
    assert_eq!(m.sum("hetch_worker_units_running"), 0);

    let id = submit(
        &svc,
        &["--rate-limit", "2M", "--block-size", "64K", "data", "copy"],
    );
    wait_for("the job's units shown under its id", || {
        let (m, _) = util::scrape(&addr);
        m.get("hetch_worker_job_units_running", &[("job", &id)])
            .is_some_and(|n| n >= 1.0)
    });
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("data"), &root.join("copy/data"));
    let v = show(&svc, &id);
    let (m, body) = util::scrape(&addr);
    let ended = |kind: &str, outcome: &str| {
        let labels = [("kind", kind), ("outcome", outcome)];
        m.value("hetch_worker_units_ended_total", &labels)
    };
    assert!(ended("files", "done") >= 3, "{body}");
    assert!(ended("range", "done") >= 10, "{body}");
    assert_eq!(ended("commit", "done"), 1, "{body}");
    let done: u64 = ["files", "range", "commit"]
        .iter()
        .map(|k| ended(k, "done"))
        .sum();
    assert_eq!(done, v["units"]["done"].as_u64().unwrap(), "{v}\n{body}");
    // No unit fails (units making one directory at once no longer do), so what the
    // worker counted is exactly the job's.
    let failed: u64 = ["files", "range", "commit"]
        .iter()
        .map(|k| ended(k, "failed") + ended(k, "stopped"))
        .sum();
    assert_eq!(failed, 0, "{body}");
    let files_done = v["files_done"].as_u64().unwrap();
    assert_eq!(m.value("hetch_worker_files_total", &[]), files_done, "{v}");
    let bytes = m.value("hetch_worker_bytes_total", &[]);
    assert_eq!(bytes, v["bytes_done"].as_u64().unwrap(), "{v}\n{body}");
    assert_eq!(m.sum("hetch_worker_units_running"), 0);
    assert!(m
        .get("hetch_worker_job_units_running", &[("job", &id)])
        .is_none());
    assert_eq!(m.sum("hetch_worker_service_calls_failed_total"), 0);
    assert_eq!(m.value("hetch_worker_service_unreachable", &[]), 0);
    assert!(!body.contains(MARKER), "{body}");
    for s in &m.samples {
        assert!(s.name.starts_with("hetch_worker_"), "{s:?}");
        for (k, v) in &s.labels {
            let known = match k.as_str() {
                "kind" => {
                    ["files", "range", "commit", "relay", "stream", "delete"].contains(&v.as_str())
                }
                "outcome" => ["done", "failed", "stopped"].contains(&v.as_str()),
                "call" => ["claim", "heartbeat", "finish"].contains(&v.as_str()),
                _ => false,
            };
            assert!(known, "{s:?}");
        }
    }
}

/// A worker is killed (-9) in the middle of the ranges of a large file (slowed by the
/// job's rate limit, which its ranges share): another worker takes the ranges up once
/// their leases run out, keeping the blocks the first one recorded, and the file is
/// committed whole, identical, with none of the ranges' temporary files left.
#[test]
fn a_worker_killed_mid_range_leaves_its_blocks_to_the_next_and_the_file_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("one")).unwrap();
    let data: Vec<u8> = (0..(3 << 20) + 4321)
        .map(|i: usize| (i as u8).wrapping_mul(13) ^ (i >> 11) as u8)
        .collect();
    std::fs::write(root.join("one/big.bin"), data).unwrap();
    let svc = start_with(dir.path(), &SHORT_LEASES_SMALL_RANGES);
    svc.job(&["ls"]).ok(); // pins the key
    let mut c = svc.worker(dir.path(), "c");
    let id = submit(
        &svc,
        &["--block-size", "64K", "--rate-limit", "1M", "one", "copy"],
    );
    wait_for("c to hold ranges", || leased(&svc, &id) > 0);
    // Some blocks recorded, the ranges not done.
    wait_for("c to have written into the shared part file", || {
        std::fs::metadata(root.join("copy/one/.big.bin.hetch-split")).is_ok_and(|m| m.len() > 0)
    });
    c.kill9();
    let _d = svc.worker(dir.path(), "d");
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("one"), &root.join("copy/one"));
    assert_all_done(&svc, &id);
    let v = show(&svc, &id);
    assert!(v["units"]["done"].as_u64() >= Some(8), "split: {v}");
}

/// A destination a symlink below the root leads out of (one an earlier job copied
/// there, say): the worker does not write through it, the job fails naming why, and
/// nothing lands outside the root.
#[test]
fn a_destination_leading_out_of_the_root_through_a_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    big_tree(&root, "data", 5);
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    let svc = start(dir.path());
    svc.job(&["ls"]).ok(); // pins the key
    let _w = svc.worker(dir.path(), "w");
    let out = svc.job(&["--json", "submit", "--wait", "data", "escape/in"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.contains("\"failed\""), "{out:?}");
    let left: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
    assert!(left.is_empty(), "written outside the root: {left:?}");
}

/// `hetch job ARGS` for `svc` with `token` (a user's, or the workers').
fn job_as(svc: &Service, token: &str, a: &[&str]) -> util::Out {
    let mut all = args(&["job", "--service", &svc.addr]);
    all.extend(args(a));
    hetch(
        &all,
        &[("HETCH_TOKEN", token), ("HETCH_CONFIG_DIR", &svc.config)],
    )
}

/// `hetch service --oidc-issuer`: users log in with the issuer's tokens (as
/// HETCH_TOKEN, as any token), each sees only their own jobs, and a user's token does
/// not make a worker: the worker stops at once with the service's one line.
#[test]
fn oidc_users_submit_and_see_only_their_own_jobs_and_cannot_be_workers() {
    use hetch_testkit::oidc_issuer::{claims, ec_key, sign, TestIssuer, AUDIENCE};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = ec_key("k1");
    let issuer = rt.block_on(TestIssuer::start(&[&key]));
    let dir = tempfile::tempdir().unwrap();
    let svc = start_with(
        dir.path(),
        &["--oidc-issuer", &issuer.url, "--oidc-audience", AUDIENCE],
    );
    let token_of = |sub: &str| {
        let mut c = claims(&issuer.url);
        c["sub"] = serde_json::json!(sub);
        sign(&key, &c)
    };
    let (alice, bob) = (token_of("alice"), token_of("bob"));
    let as_user = |token: &str, a: &[&str]| job_as(&svc, token, a);

    let out = as_user(&alice, &["submit", "run1", "hetch://127.0.0.1:9/in"]);
    out.ok();
    let id = out.stdout.trim().to_string();
    let show = as_user(&alice, &["--json", "show", &id]);
    show.ok();
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["submitted_by"], "oidc:alice");

    let theirs = as_user(&bob, &["show", &id]);
    assert!(!theirs.status.success(), "{theirs:?}");
    assert!(
        theirs.stderr.contains(&format!("no job {id}")),
        "{theirs:?}"
    );
    let ls = as_user(&bob, &["ls"]);
    ls.ok();
    assert!(!ls.stdout.contains(&id), "{ls:?}");
    let ls = svc.job(&["ls"]);
    assert!(ls.stdout.contains(&id), "{ls:?}");

    let mut a = args(&["worker", "--service", &svc.addr, "--idle-exit", "60"]);
    a.extend([OsString::from("--root"), dir.path().join("root").into()]);
    let worker = hetch(
        &a,
        &[("HETCH_TOKEN", &alice), ("HETCH_CONFIG_DIR", &svc.config)],
    );
    assert!(!worker.status.success(), "{worker:?}");
    assert!(worker.stderr.contains("workers' token"), "{worker:?}");
    let after = as_user(&alice, &["--json", "show", &id]);
    after.ok();
    let v: serde_json::Value = serde_json::from_str(&after.stdout).unwrap();
    let units = &v["units"];
    let claimed = (units["leased"].as_u64(), units["done"].as_u64());
    assert_eq!(claimed, (Some(0), Some(0)), "{v}");
}

/// A copy between two servers as a job: the service (which cannot see either server's
/// storage) plans one relay unit per source, a worker asks server A to push each to
/// server B, and the copy at B is identical, with the job's totals those of the tree.
#[test]
fn a_job_between_two_servers_is_pushed_by_the_source_server() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    let b = util::Server::start(&t.join("b-root"), &t.join("b-state"));
    let a = util::Server::start_with(
        &t.join("a-root"),
        &t.join("a-state"),
        &["--relay-to", &b.addr],
        &[],
    );
    big_tree(&a.root, "data", 40);
    util::write_random(&a.root.join("one.bin"), 3 << 20, 9);
    let svc = start_with(t, &["--lease-secs", "5"]);
    svc.job(&["ls"]).ok();
    // The worker knows both servers' keys and holds both tokens.
    let known = t.join("known_hosts");
    std::fs::write(
        &known,
        format!(
            "{} {}\n{} {}\n",
            a.addr, a.fingerprint, b.addr, b.fingerprint
        ),
    )
    .unwrap();
    let mut w = args(&[
        "worker",
        "--service",
        &svc.addr,
        "--name",
        "w",
        "--known-hosts",
    ]);
    w.extend([
        OsString::from(&known),
        "--root".into(),
        t.join("root").into(),
        "--token-file".into(),
        b.token_path.clone().into(),
        "--source-token-file".into(),
        a.token_path.clone().into(),
    ]);
    let _worker = spawn(&w, &svc.worker_env());

    let id = submit(&svc, &[&a.url("data"), &a.url("one.bin"), &b.url("copy")]);
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&a.root.join("data"), &b.root.join("copy/data"));
    assert_eq!(
        util::hash_file(&a.root.join("one.bin")),
        util::hash_file(&b.root.join("copy/one.bin"))
    );
    util::assert_no_temp_files(&b.root);
    let v = show(&svc, &id);
    let files = util::count_files(&a.root.join("data")) + 1;
    assert_eq!(v["files_done"].as_u64(), Some(files), "{v}");
    assert_eq!(v["files"].as_u64(), Some(files), "{v}");
    assert!(a.log().contains("relay done"), "{}", a.log());
}

/// A job submitted with `--compress zstd` to a `hetch serve` destination: its units
/// send compressible files compressed (the worker's metrics count fewer bytes on the
/// wire than moved, and blocks compressed), the copy is identical, and the spec keeps
/// the option. A level the service does not take is refused before anything is queued.
#[test]
fn a_job_with_compress_sends_its_blocks_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    let root = t.join("root");
    big_tree(&root, "data", 40);
    let dest = util::Server::start(&t.join("d-root"), &t.join("d-state"));
    let svc = start_with(t, &["--lease-secs", "5", "--batch-files", "10"]);
    svc.job(&["ls"]).ok();
    let known = t.join("known_hosts");
    std::fs::write(&known, format!("{} {}\n", dest.addr, dest.fingerprint)).unwrap();
    let metrics = ["--metrics", "127.0.0.1:0", "--known-hosts"];
    let mut extra = args(&metrics);
    extra.extend([
        OsString::from(&known),
        "--token-file".into(),
        dest.token_path.clone().into(),
    ]);
    let extra: Vec<&str> = extra.iter().map(|a| a.to_str().unwrap()).collect();
    let w = svc.worker_with(t, "w", &extra);
    let addr = metrics_addr(&w);

    let bad = svc.job(&["submit", "--compress", "zstd:99", "data", &dest.url("x")]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("zstd:99"), "{bad:?}");
    let id = submit(&svc, &["--compress", "zstd", "data", &dest.url("copy")]);
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("data"), &dest.root.join("copy/data"));
    util::assert_no_temp_files(&dest.root);
    assert_eq!(show(&svc, &id)["spec"]["options"]["compress"], "zstd");
    let (m, body) = util::scrape(&addr);
    let moved = m.value("hetch_worker_bytes_total", &[]);
    let sent = m.value("hetch_worker_wire_bytes_total", &[]);
    assert!(moved >= 40 * 40 * 1024, "{body}");
    assert!(
        sent > 0 && sent * 4 < moved,
        "sent {sent} of {moved}\n{body}"
    );
    assert!(
        m.value("hetch_worker_compressed_blocks_total", &[]) >= 40,
        "{body}"
    );
}

/// A worker keeps its session with a destination node from one unit to the next: a
/// job of 60 files in units of 2 runs on one worker, which opens a session with the
/// node for its first unit and runs most of the others over the same connections (the
/// node counts them in its `/metrics`); the copy is whole, and a second job finds
/// everything in place over them too.
#[test]
fn a_workers_units_to_a_node_run_over_its_kept_session() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    let root = t.join("root");
    big_tree(&root, "data", 60);
    let token = t.join("dest-token");
    std::fs::write(&token, "a-token-of-the-destination-node").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let flags = [
        "--token-file",
        token.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ];
    let node = util::Server::start_with(&t.join("dest"), &t.join("node"), &flags, &[]);
    let known = t.join("known_hosts");
    std::fs::write(&known, format!("{} {}\n", node.addr, node.fingerprint)).unwrap();
    let svc = start_with(t, &["--batch-files", "2"]);
    let mut a = args(&["worker", "--service", &svc.addr, "--name", "w1"]);
    a.extend([
        OsString::from("--known-hosts"),
        known.into(),
        "--root".into(),
        root.clone().into(),
        "--token-file".into(),
        token.into(),
    ]);
    let worker = spawn(&a, &svc.worker_env());
    for run in ["copy/", "copy/"] {
        let id = submit(&svc, &["data", &node.url(run)]);
        svc.job(&["wait", &id]).ok();
        assert_all_done(&svc, &id);
        util::assert_same_tree(&root.join("data"), &t.join("dest/copy/data"));
    }
    util::assert_no_temp_files(&t.join("dest"));
    let (m, body) = util::scrape(&node.metrics_addr());
    let ended = m.value(
        "hetch_serve_sessions_ended_total",
        &[("op", "push"), ("outcome", "ok")],
    );
    let reused = m.value("hetch_serve_sessions_reused_total", &[]);
    // At least 31 units a job; each unit one push, and all but a few (a session is
    // opened again when the last one was still settling) on kept connections.
    assert!(ended >= 62, "{body}");
    assert!(
        reused * 2 >= ended,
        "{reused} of {ended} pushes on kept connections\n{body}"
    );
    drop(worker);
}

/// A job to a destination of three `hetch serve` nodes sharing one storage, run by
/// three workers: the units are spread over the nodes, and when one node is killed
/// (-9) mid-job the job still completes; a job submitted while it is down has its
/// units for that node fail there and run again on the next node; the node started
/// again takes units again. The copies are identical, every file renamed into place
/// once (no temporary file left, nothing missing).
#[test]
fn a_job_spreads_over_three_destination_nodes_and_outlives_one_killed() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    let root = t.join("root");
    big_tree(&root, "data", 300);
    // A large file, moved in ranges of 256 KiB by all three workers through all
    // three nodes into one part file, committed once.
    let big: Vec<u8> = (0..(6 << 20) + 4321u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("data/d2/big.bin"), &big).unwrap();
    let shared = t.join("dest-storage");
    let token = t.join("dest-token");
    std::fs::write(&token, "a-token-shared-by-the-destination-nodes").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token_arg = token.to_str().unwrap();
    let node = |i: usize, extra: &[&str]| {
        let mut flags = vec!["--token-file", token_arg];
        flags.extend(extra);
        util::Server::start_with(&shared, &t.join(format!("node{i}")), &flags, &[])
    };
    let mut nodes = [node(0, &[]), node(1, &[]), node(2, &[])];
    let known = t.join("known_hosts");
    let lines: String = nodes
        .iter()
        .map(|n| format!("{} {}\n", n.addr, n.fingerprint))
        .collect();
    std::fs::write(&known, lines).unwrap();
    let split = ["--split-size", "1M", "--range-size", "256K"];
    let svc = start_with(
        t,
        &[&split[..], &["--lease-secs", "3", "--batch-files", "10"]].concat(),
    );
    svc.job(&["ls"]).ok();
    let workers: Vec<Running> = ["w1", "w2", "w3"]
        .iter()
        .map(|name| {
            let mut a = args(&["worker", "--service", &svc.addr, "--name", name]);
            a.extend([
                OsString::from("--known-hosts"),
                known.clone().into(),
                "--root".into(),
                root.clone().into(),
                "--token-file".into(),
                token.clone().into(),
            ]);
            spawn(&a, &svc.worker_env())
        })
        .collect();
    let dest = nodes[0].url("copy/");
    let (n1, n2) = (nodes[1].addr.clone(), nodes[2].addr.clone());
    let job = |to: &str| {
        let nodes = ["--dest-node", &n1, "--dest-node", &n2];
        let opts = ["--rate-limit", "6M", "--block-size", "64K"];
        submit(&svc, &[&opts[..], &nodes, &["data", to]].concat())
    };
    let id = job(&dest);
    // Once every node took files and ranges and the large file is committed (so its
    // one commit is not run again because of the kill below):
    wait_for("files and ranges done at every node", || {
        let logs: Vec<String> = nodes.iter().map(|n| n.log()).collect();
        logs.iter()
            .all(|l| l.contains("push done") && l.contains("range done"))
            && logs.iter().any(|l| l.contains("range done: 1 files"))
    });
    // Node 1 dies mid-job: whatever it held (nothing, if the job was nearly done:
    // which units are left at that moment is up to the workers' pace) runs again on
    // the next node, and the job completes.
    nodes[1].kill9();
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("data"), &shared.join("copy/data"));
    util::assert_no_temp_files(&shared);
    assert_all_done(&svc, &id);
    // The large file was given its final name by exactly one commit, at one node.
    let commits: usize = nodes
        .iter()
        .map(|n| n.log().matches("range done: 1 files").count())
        .sum();
    assert_eq!(commits, 1, "commits of the large file");

    // A job while node 1 is down: units go to the nodes in turn, so some are given
    // to node 1 first, fail there, and run again on the next node.
    let id = job(&nodes[0].url("during/"));
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("data"), &shared.join("during/data"));
    util::assert_no_temp_files(&shared);
    assert_all_done(&svc, &id);
    let retried = show(&svc, &id)["units"]["retried"].as_u64();
    assert!(
        retried.unwrap_or(0) > 0,
        "no unit was run again: {retried:?}"
    );

    // Started again, it takes its share of the next job.
    let listen = nodes[1].addr.clone();
    nodes[1] = node(1, &["--listen", &listen]);
    let id = job(&nodes[0].url("again/"));
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&root.join("data"), &shared.join("again/data"));
    util::assert_no_temp_files(&shared);
    assert!(nodes[1].log().contains("push done"), "{}", nodes[1].log());
    drop(workers);
}

/// A job cancelled while two workers run it: they stop their units (at their next
/// heartbeat), nothing appears under a final name that is not a whole, identical copy
/// of its source, and a retry runs only the units that were not done (what is done
/// counts once: files done ends equal to the listing).
#[test]
fn a_cancelled_job_stops_leaves_nothing_half_done_and_a_retry_runs_only_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    big_tree(&root, "data", 200);
    util::write_random(&root.join("data/big.bin"), 12 << 20, 5);
    let flags = [
        "--split-size",
        "4M",
        "--range-size",
        "1M",
        "--batch-files",
        "10",
    ];
    let svc = start_with(dir.path(), &flags);
    svc.job(&["ls"]).ok();
    let workers: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| svc.worker(dir.path(), n))
        .collect();
    let id = submit(
        &svc,
        &["--rate-limit", "3M", "--block-size", "256K", "data", "copy"],
    );
    wait_for("some units done and some running", || {
        let v = show(&svc, &id);
        v["units"]["done"].as_u64() > Some(2) && v["units"]["leased"].as_u64() > Some(0)
    });
    svc.job(&["cancel", &id]).ok();
    wait_for("the workers to stop the job's units", || {
        leased(&svc, &id) == 0
    });
    let v = show(&svc, &id);
    assert_eq!(v["state"], "cancelled", "{v}");
    let done_at_cancel = v["units"]["done"].as_u64().unwrap();
    assert!(v["units"]["cancelled"].as_u64() > Some(0), "{v}");
    // Whatever carries a final name is whole and identical.
    let copy = root.join("copy/data");
    let temporary = util::temp_files(&root.join("copy"));
    for (path, kind) in util::paths_under(&copy) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !kind.is_file() || temporary.contains(&path) || name.contains(".hetch-") {
            continue;
        }
        let rel = path.strip_prefix(&copy).unwrap();
        assert_eq!(
            util::hash_file(&path),
            util::hash_file(&root.join("data").join(rel)),
            "{} is under its final name but not a whole copy",
            rel.display()
        );
    }

    svc.job(&["retry", &id]).ok();
    svc.job(&["wait", &id]).ok();
    drop(workers);
    util::assert_same_tree(&root.join("data"), &copy);
    let v = show(&svc, &id);
    assert_eq!(
        v["files_done"].as_u64(),
        v["files"].as_u64(),
        "done units ran again: {v}"
    );
    assert!(v["units"]["done"].as_u64() > Some(done_at_cancel), "{v}");
}

/// A job names its servers, but a worker presents a token only to servers its
/// operator pinned, and never the service's own token: a job to a server missing from
/// the worker's known-hosts file, or run by a worker holding no servers' token, fails
/// with one line saying so, and the server never sees a token.
#[test]
fn workers_present_tokens_only_to_pinned_servers_and_never_the_services() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    let b = util::Server::start(&t.join("b-root"), &t.join("b-state"));
    let svc = start_with(t, &["--lease-secs", "5"]);
    svc.job(&["ls"]).ok();
    let known = t.join("known_hosts");
    let worker = |known_hosts: &str, token_file: Option<&Path>| {
        let mut w = args(&[
            "worker",
            "--service",
            &svc.addr,
            "--known-hosts",
            known_hosts,
        ]);
        w.extend([OsString::from("--root"), t.join("root").into()]);
        if let Some(f) = token_file {
            w.extend([OsString::from("--token-file"), f.into()]);
        }
        spawn(&w, &svc.env())
    };
    let failed_with = |id: &str| {
        svc.job(&["wait", id]).expect_code(3);
        show(&svc, id)["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    // B is not pinned: nothing is sent to it.
    std::fs::write(&known, "").unwrap();
    let w = worker(known.to_str().unwrap(), Some(&b.token_path));
    let id = submit(&svc, &["run1", &b.url("copy")]);
    let e = failed_with(&id);
    assert!(e.contains(&b.addr) && e.contains("known-hosts"), "{e}");
    drop(w);

    // Pinned, but the worker holds only the service's token.
    std::fs::write(&known, format!("{} {}\n", b.addr, b.fingerprint)).unwrap();
    let w = worker(known.to_str().unwrap(), None);
    let id = submit(&svc, &["run1", &b.url("copy")]);
    let e = failed_with(&id);
    assert!(e.contains("service's token is not sent"), "{e}");
    drop(w);

    assert!(!b.root.join("copy").exists());
    let log = b.log();
    assert!(
        !log.contains("wrong token") && !log.contains("push"),
        "{log}"
    );

    // Pinned and with the servers' token: the job runs.
    let _w = worker(known.to_str().unwrap(), Some(&b.token_path));
    let id = submit(&svc, &["run1", &b.url("copy")]);
    svc.job(&["wait", &id]).ok();
    util::assert_same_tree(&t.join("root/run1"), &b.root.join("copy/run1"));
}

/// A service with an OIDC issuer and identity map `map` (TOML), and alice's token.
fn service_for_alice(
    dir: &Path,
    issuer: &hetch_testkit::oidc_issuer::TestIssuer,
    key: &hetch_testkit::oidc_issuer::TestKey,
    map: &str,
) -> (Service, String) {
    use hetch_testkit::oidc_issuer::{claims, sign, AUDIENCE};
    let file = dir.join("identities.toml");
    std::fs::write(&file, map).unwrap();
    let svc = start_with(
        dir,
        &[
            "--oidc-issuer",
            &issuer.url,
            "--oidc-audience",
            AUDIENCE,
            "--identity-map",
            file.to_str().unwrap(),
        ],
    );
    let mut c = claims(&issuer.url);
    c["sub"] = serde_json::json!("alice");
    (svc, sign(key, &c))
}

/// A worker runs a user's unit only within what the identity map gave the user,
/// checked again before it opens anything: a source, and a destination, swapped for
/// a symlink into another group's tree after the job was planned each fail the unit
/// and leave the other group's files untouched; the error the user sees names no path of the
/// worker's own.
#[test]
fn a_worker_keeps_a_users_unit_within_the_identity_map_whatever_links_appear() {
    use hetch_testkit::oidc_issuer::{ec_key, TestIssuer};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = ec_key("k1");
    let issuer = rt.block_on(TestIssuer::start(&[&key]));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    for g in ["astro", "bio"] {
        std::fs::create_dir_all(root.join(format!("groups/{g}/data"))).unwrap();
        std::fs::write(root.join(format!("groups/{g}/data/secret")), g).unwrap();
    }
    std::fs::create_dir_all(root.join("groups/astro/swapped")).unwrap();
    std::fs::write(root.join("groups/astro/swapped/mine"), "astro").unwrap();
    let (svc, alice) = service_for_alice(
        dir.path(),
        &issuer,
        &key,
        "[[identity]]\nclaim = \"sub\"\nvalue = \"alice\"\n\
         read = [\"groups/astro\"]\nwrite = [\"groups/astro\"]\n",
    );
    let as_alice = |a: &[&str]| job_as(&svc, &alice, a);
    let submitted = |a: &[&str]| {
        let out = as_alice(a);
        out.ok();
        let id = out.stdout.trim().to_string();
        wait_for("planned", || show(&svc, &id)["state"] != "planning");
        id
    };
    // Planned while both lead where they should; then the links appear.
    let swapped = submitted(&["submit", "groups/astro/swapped", "groups/astro/copy1"]);
    let planted = submitted(&["submit", "groups/astro/data", "groups/astro/copy2"]);
    std::fs::remove_dir_all(root.join("groups/astro/swapped")).unwrap();
    std::os::unix::fs::symlink("../bio/data", root.join("groups/astro/swapped")).unwrap();
    std::os::unix::fs::symlink("../bio/data", root.join("groups/astro/copy2")).unwrap();

    let _w = svc.worker(dir.path(), "w");
    for id in [&swapped, &planted] {
        let out = as_alice(&["wait", id]);
        assert!(!out.status.success(), "{out:?}");
        let v = show(&svc, id);
        assert_eq!(v["state"], "failed", "{v}");
        let error = v["error"].as_str().unwrap_or_default();
        assert!(!error.contains(&*root.to_string_lossy()), "{error}");
        assert!(!error.contains(&*dir.path().to_string_lossy()), "{error}");
    }
    for id in [&swapped, &planted] {
        let error = show(&svc, id)["error"].to_string();
        assert!(error.contains("leads outside"), "{error}");
    }
    // Nothing of bio's was read into astro's tree, nor written over.
    assert!(!root.join("groups/astro/copy1").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("groups/bio/data/secret")).unwrap(),
        "bio"
    );
    let bio: Vec<_> = std::fs::read_dir(root.join("groups/bio/data"))
        .unwrap()
        .collect();
    assert_eq!(bio.len(), 1, "only bio's own file in bio's tree");
}

/// A sparse file of 2^63-1 bytes (any local user can make one with `truncate`; 16 TiB
/// where the file system allows no more) named in a job, with the service held to
/// 4 GiB of address space: planning refuses it by its count of ranges, naming the
/// file, instead of making billions of them; the job fails (never "planning" for
/// ever), and the service keeps answering, before and after a restart.
#[test]
fn a_huge_sparse_file_fails_its_job_at_planning_and_the_service_lives_on() {
    // tmpfs takes 2^63-1 bytes; ext4 at most 16 TiB - 4 KiB.
    let dir = match std::path::Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("huge")).unwrap();
    let f = std::fs::File::create(root.join("huge/sparse")).unwrap();
    let size = [i64::MAX as u64, (16 << 40) - 4096]
        .into_iter()
        .find(|&s| f.set_len(s).is_ok())
        .expect("a sparse file of 16 TiB at least");
    drop(f);
    let listen = format!("127.0.0.1:{}", free_port());
    let extra = ["--range-size", "1M", "--split-size", "1M"];
    let mut svc = launch(dir.path(), &listen, &extra);
    // Unbounded, planning would make size / 1 MiB ranges (16 million at least).
    let limit = libc::rlimit {
        rlim_cur: 4 << 30,
        rlim_max: 4 << 30,
    };
    let pid = svc.proc.pid() as libc::pid_t;
    assert_eq!(
        unsafe { libc::prlimit(pid, libc::RLIMIT_AS, &limit, std::ptr::null_mut()) },
        0
    );
    let id = submit(&svc, &["huge", "copy"]);
    wait_for("the job to leave planning", || {
        show(&svc, &id)["state"] != "planning"
    });
    let v = show(&svc, &id);
    assert_eq!(v["state"], "failed", "{v}");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("huge/sparse") && error.contains(&size.to_string()),
        "{error}"
    );
    assert!(error.contains("--max-ranges-per-file"), "{error}");
    svc.job(&["ls"]).ok();
    svc.proc.kill9();
    let svc = launch(dir.path(), &listen, &extra);
    assert_eq!(show(&svc, &id)["state"], "failed");
    svc.job(&["ls"]).ok();
}

/// With an `account` in a user's identity map entry and a worker running as root,
/// the user's units run as that local account (here `nobody`), so the file system's
/// own permissions decide too: what they copy is the account's, and a file of their
/// tree that only root may read fails its unit, whatever the map's paths allow.
#[test]
fn a_root_worker_runs_a_users_units_as_their_local_account() {
    use hetch_testkit::oidc_issuer::{ec_key, TestIssuer};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: geteuid and getpwnam have no preconditions; the name is a C string.
    let nobody = unsafe { libc::getpwnam(c"nobody".as_ptr()) };
    if unsafe { libc::geteuid() } != 0 || nobody.is_null() {
        util::skipped("needs root and an account named nobody");
        return;
    }
    let (uid, gid) = unsafe { ((*nobody).pw_uid, (*nobody).pw_gid) };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let key = ec_key("k1");
    let issuer = rt.block_on(TestIssuer::start(&[&key]));
    let dir = tempfile::tempdir().unwrap();
    // The account must be able to reach the tree (a temporary directory is 0700).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let astro = dir.path().join("root/groups/astro");
    std::fs::create_dir_all(astro.join("pub")).unwrap();
    std::fs::create_dir_all(astro.join("private")).unwrap();
    std::fs::write(astro.join("pub/f"), "for everyone").unwrap();
    std::fs::write(astro.join("private/secret"), "root only").unwrap();
    std::fs::set_permissions(
        astro.join("private/secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // A directory only root may enter: its names are not the account's to see.
    std::fs::create_dir_all(astro.join("closed")).unwrap();
    std::fs::write(astro.join("closed/hidden-name"), "root only").unwrap();
    std::fs::set_permissions(astro.join("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&astro, Some(uid), Some(gid)).unwrap();
    let (svc, alice) = service_for_alice(
        dir.path(),
        &issuer,
        &key,
        "[[identity]]\nclaim = \"sub\"\nvalue = \"alice\"\naccount = \"nobody\"\n\
         read = [\"groups/astro\"]\nwrite = [\"groups/astro\"]\n",
    );
    let _w = svc.worker(dir.path(), "w");
    let copy = |src: &str, dest: &str| {
        let out = job_as(&svc, &alice, &["submit", src, dest]);
        out.ok();
        let id = out.stdout.trim().to_string();
        let waited = job_as(&svc, &alice, &["wait", &id]);
        (waited.status.success(), show(&svc, &id))
    };
    let (ok, v) = copy("groups/astro/pub", "groups/astro/copy");
    assert!(ok, "{v}");
    let f = std::fs::metadata(astro.join("copy/pub/f")).unwrap();
    assert_eq!((f.uid(), f.gid()), (uid, gid), "written as the account");
    let (ok, v) = copy("groups/astro/private", "groups/astro/copy2");
    assert!(!ok, "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.contains("ermission denied"), "{error}");
    assert!(!astro.join("copy2/private/secret").exists());
    // Planning lists as the account too: the closed directory fails the job, and no
    // name inside it reaches the job's listing or its error.
    let (ok, v) = copy("groups/astro/closed", "groups/astro/copy3");
    assert!(!ok, "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.contains("ermission denied"), "{error}");
    assert!(!error.contains("hidden-name"), "{error}");
    assert_eq!(v["files"], 0, "{v}");
}
