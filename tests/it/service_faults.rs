//! The service's patience, end to end with the real binaries: a worker stopped past
//! its lease while it sends block ranges, and a destination node away for a while,
//! cost the job no `hetch job retry`. A failed attempt waits (`--retry-wait`, here
//! shortened from 5 s) before the unit goes again, so the fault ends before the
//! unit's attempts do. The waits' rules are tested in crates/jobdb.

use crate::util;

use util::service::{show, start_with, submit, SHORT_LEASES_SMALL_RANGES};
use util::wait_for;

/// The service's flags besides [`SHORT_LEASES_SMALL_RANGES`]: waits of 1, 3, 4 and
/// 4 s between a unit's 5 attempts (12 s of patience).
const PATIENT: [&str; 4] = ["--retry-wait", "1s", "--retry-wait-max", "4s"];

/// `dir/root/one/big.bin`, 3 MiB and a bit.
fn big_file(dir: &std::path::Path) {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("one")).unwrap();
    let data: Vec<u8> = (0..(3 << 20) + 4321)
        .map(|i: usize| (i as u8).wrapping_mul(29) ^ (i >> 10) as u8)
        .collect();
    std::fs::write(root.join("one/big.bin"), data).unwrap();
}

/// Submits the copy of `one` to `node`'s `copy/`, in blocks of 64 KiB at 1 MiB/s (its
/// ranges take seconds: a fault finds them under way).
fn submit_slowly(svc: &util::service::Service, node: &util::Server) -> String {
    let flags = ["--block-size", "64K", "--rate-limit", "1M", "one"];
    submit(svc, &[&flags[..], &[&node.url("copy/")]].concat())
}

/// Waits for job `id`, which must end done: `t/root/one` copied whole to the node's
/// `t/dest/copy/one` with nothing left behind, and every byte and file counted.
/// Returns the job as it ended.
fn done_whole(svc: &util::service::Service, id: &str, t: &std::path::Path) -> serde_json::Value {
    svc.job(&["wait", id]).ok();
    util::assert_same_tree(&t.join("root/one"), &t.join("dest/copy/one"));
    util::assert_no_temp_files(&t.join("dest"));
    let v = show(svc, id);
    assert_eq!(v["state"], "done", "{v}");
    assert_eq!(v["bytes_done"], v["bytes"], "{v}");
    assert_eq!(v["files_done"], v["files"], "{v}");
    v
}

/// A worker stopped (SIGSTOP: a VM paused, a process stopped, a partition that keeps
/// TCP up) past its lease while it holds ranges of a file going to a destination
/// node. Another worker redoes the ranges; the file's commit finds the node still
/// holding the stopped worker's range session open ("a writer of one of its ranges
/// still has it open"), until the node drops that silent session (its
/// `--stall-timeout`, 6 s here). Before, the commit's three attempts went within
/// milliseconds and the job failed; now the node answers that the file is busy and
/// the commit waits within its attempt (and a failed attempt waits before the next),
/// and the job ends done and identical with no retry by hand.
///
/// The node drops the silent session within its stall timeout: a range client sends
/// keep-alives while its rate share holds blocks back, so silence means it is gone.
/// (It waited a fixed 120 s, whatever the stall timeout, so a commit stayed refused
/// for two minutes.)
#[test]
fn a_worker_stopped_past_its_lease_mid_range_costs_no_retry_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    big_file(t);
    let node = util::Server::start_with(
        &t.join("dest"),
        &t.join("node"),
        &["--stall-timeout", "6s"],
        &[],
    );
    let svc = start_with(t, &[&SHORT_LEASES_SMALL_RANGES[..], &PATIENT].concat());
    svc.job(&["ls"]).ok(); // pins the key
    let mut stopped = svc.node_worker(t, "stopped", &node);
    let id = submit_slowly(&svc, &node);
    wait_for("the first worker to send ranges to the node", || {
        node.log().contains("range") || show(&svc, &id)["units"]["leased"].as_u64() > Some(0)
    });
    wait_for("its blocks to reach the node", || {
        std::fs::metadata(t.join("dest/copy/one/.big.bin.hetch-split")).is_ok_and(|m| m.len() > 0)
    });
    let pid = stopped.pid() as libc::pid_t;
    // SAFETY: a signal to our own child, which is alive (waited for above).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let _next = svc.node_worker(t, "next", &node);
    let v = done_whole(&svc, &id, t);
    assert!(
        v["units"]["retried"].as_u64() > Some(0),
        "nothing was tried again: {v}"
    );
    // SAFETY: as above; it then finds its leases gone and its reports refused.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    stopped.kill9();
}

/// The destination node is killed (-9) while a job's units go to it, and started
/// again on its address 5 s later: the units that failed against it wait and go
/// again, and the job ends done and identical with no retry by hand.
#[test]
fn a_destination_node_away_for_a_while_costs_no_retry_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    big_file(t);
    let mut node = util::Server::start(&t.join("dest"), &t.join("node"));
    let svc = start_with(t, &[&SHORT_LEASES_SMALL_RANGES[..], &PATIENT].concat());
    svc.job(&["ls"]).ok(); // pins the key
    let _worker = svc.node_worker(t, "w", &node);
    let id = submit_slowly(&svc, &node);
    wait_for("a range done at the node", || {
        show(&svc, &id)["units"]["done"].as_u64() > Some(0)
    });
    node.kill9();
    wait_for("a unit to fail against the missing node", || {
        show(&svc, &id)["units"]["retried"].as_u64() > Some(0)
    });
    std::thread::sleep(std::time::Duration::from_secs(5));
    let listen = node.addr.clone();
    let _node = util::Server::start_with(
        &t.join("dest"),
        &t.join("node"),
        &["--listen", &listen],
        &[],
    );
    done_whole(&svc, &id, t);
}

/// The service is killed (-9) while a file's ranges finish at a destination node, and
/// started again on its state and address: the ranges whose reports were lost run
/// again and find their blocks written (they send none), yet the job done counts every
/// byte of the file (`bytes_done == bytes`): a done range counts its whole range, not
/// what its last attempt sent. (Every big-file job of the fault campaign that
/// saw a service kill ended done with 192 of 256 MiB.)
#[test]
fn a_service_killed_while_ranges_finish_still_counts_every_byte_once_done() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path();
    big_file(t);
    let node = util::Server::start(&t.join("dest"), &t.join("node"));
    let listen = format!("127.0.0.1:{}", util::service::free_port());
    let flags = [&SHORT_LEASES_SMALL_RANGES[..], &PATIENT].concat();
    let mut svc = util::service::launch(t, &listen, &flags);
    svc.job(&["ls"]).ok(); // pins the key
    let _worker = svc.node_worker(t, "w", &node);
    let id = submit_slowly(&svc, &node);
    wait_for("a range done at the node", || {
        show(&svc, &id)["units"]["done"].as_u64() > Some(0)
    });
    svc.proc.kill9();
    // Long enough for the worker's leases to run out: it stops its units, and their
    // blocks stay written at the node.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let svc = util::service::launch(t, &listen, &flags);
    done_whole(&svc, &id, t);
}
